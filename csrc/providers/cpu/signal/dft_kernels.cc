// DFT (ai.onnx 17 with the axis as an attribute, 20 with the axis as input 2) and STFT (17).
//
// Every line along the transformed axis is read into float64 complex values (zero-padded or cut
// to dft_length), transformed by FftPlan (signal/fft.h: any length in O(n log n)) and rounded once
// into the output type, as onnx's reference computes numpy's FFT in float64. The one-sided
// inverse (IRFFT) extends the first n / 2 + 1 values of each line to the Hermitian spectrum of
// length n and keeps the real part of its inverse, which ignores the imaginary parts of the DC
// and Nyquist bins as numpy's irfft does. Lines are shared out over the thread pool; each slice
// of lines has its own float64 buffer in scratch memory.
#include <algorithm>
#include <memory>

#include "framework/kernel_registry.h"
#include "ops/signal_attributes.h"
#include "providers/cpu/elementwise/elementwise_loops.h"
#include "providers/cpu/signal/fft.h"
#include "providers/cpu/signal/round_once.h"

namespace tob::cpu {
namespace {

using FloatTypes = ew::TypeList<float, double, Float16, BFloat16>;

// Scratch for `slices` workers, each with `per_slice` complex values.
StatusOr<Tensor> ComplexScratch(const KernelContext& ctx, int64_t slices, int64_t per_slice) {
  return ctx.AllocateScratch(DType::kFloat64, {slices, per_slice, 2});
}

int64_t SliceCount(const KernelContext& ctx, int64_t items) {
  const int64_t threads = ctx.thread_pool() != nullptr ? ctx.thread_pool()->num_threads() : 1;
  return std::max<int64_t>(1, std::min(items, threads));
}

class DftKernel final : public OpKernel {
 public:
  DftKernel(const Node& node, DftAttributes attrs) : OpKernel(node), attrs_(attrs) {}

  template <int kOpset>
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(DftAttributes attrs, DftAttributes::Read(node, kOpset));
    return MakeKernel<DftKernel>(node, attrs);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Shape& dims = x.shape();
    const int64_t rank = x.rank();
    const Tensor* axis_input = attrs_.axis_is_input ? ctx.input(2) : nullptr;
    TOB_ASSIGN_OR_RETURN(int64_t axis, ResolveDftAxis(node(), attrs_, rank, axis_input));
    TOB_ASSIGN_OR_RETURN(int64_t length, ResolveDftLength(node(), attrs_, dims[axis], ctx.input(1)));
    Line line;
    line.in_parts = dims[rank - 1];
    line.in_len = dims[axis];
    line.out_len = DftOutputLength(attrs_, length);
    line.out_parts = DftOutputComponents(attrs_);
    for (int64_t i = 0; i < axis; ++i) line.outer *= dims[i];
    for (int64_t i = axis + 1; i + 1 < rank; ++i) line.inner *= dims[i];
    if (attrs_.inverse && attrs_.onesided && line.in_parts != 2)
      return ctx.Fail("the inverse one-sided transform (IRFFT) takes a complex input [..., 2], got ",
                      ShapeToString(dims));
    Tensor& y = *ctx.output(0);
    if (y.numel() == 0) return Status::OK();

    const FftPlan plan(length);
    const int64_t lines = line.outer * line.inner;
    const int64_t slices = SliceCount(ctx, lines);
    const int64_t per_slice = length + plan.scratch_size();
    TOB_ASSIGN_OR_RETURN(Tensor scratch, ComplexScratch(ctx, slices, per_slice));
    auto* buffers = reinterpret_cast<Complex*>(scratch.data<double>());
    bool known = ew::Dispatch(FloatTypes{}, x.dtype(), [&]<typename T>() {
      ParallelFor(ctx.thread_pool(), slices, 1, [&](int64_t sb, int64_t se) {
        for (int64_t s = sb; s < se; ++s) {
          Complex* buf = buffers + s * per_slice;
          for (int64_t l = lines * s / slices; l < lines * (s + 1) / slices; ++l)
            TransformLine<T>(plan, line, l, x.data<T>(), y.data<T>(), buf, buf + length);
        }
      });
    });
    if (!known) return ctx.Fail("input dtype ", DTypeName(x.dtype()), " is not supported");
    return Status::OK();
  }

 private:
  struct Line {
    int64_t outer = 1, inner = 1;  // lines: outer * inner, inner contiguous
    int64_t in_len = 0, in_parts = 1, out_len = 0, out_parts = 2;
  };

  template <typename T>
  void TransformLine(const FftPlan& plan, const Line& g, int64_t l, const T* x, T* y, Complex* buf,
                     Complex* scratch) const {
    const int64_t n = plan.size();
    const int64_t o = l / g.inner, i = l % g.inner;
    auto in_at = [&](int64_t j) { return ((o * g.in_len + j) * g.inner + i) * g.in_parts; };
    auto read = [&](int64_t j) {
      const T* p = x + in_at(j);
      return Complex(ToDouble(p[0]), g.in_parts == 2 ? ToDouble(p[1]) : 0.0);
    };
    if (attrs_.inverse && attrs_.onesided) {
      // The first n / 2 + 1 values of a Hermitian spectrum; the rest are their conjugates.
      const int64_t half = n / 2;
      for (int64_t k = 0; k <= half; ++k) buf[k] = k < g.in_len ? read(k) : Complex(0.0, 0.0);
      for (int64_t k = half + 1; k < n; ++k) buf[k] = std::conj(buf[n - k]);
    } else {
      const int64_t take = std::min(n, g.in_len);
      for (int64_t k = 0; k < take; ++k) buf[k] = read(k);
      std::fill(buf + take, buf + n, Complex(0.0, 0.0));
    }
    plan.Execute(buf, attrs_.inverse, scratch);
    const double scale = attrs_.inverse ? 1.0 / static_cast<double>(n) : 1.0;
    for (int64_t k = 0; k < g.out_len; ++k) {
      T* p = y + ((o * g.out_len + k) * g.inner + i) * g.out_parts;
      p[0] = FromDouble<T>(buf[k].real() * scale);
      if (g.out_parts == 2) p[1] = FromDouble<T>(buf[k].imag() * scale);
    }
  }

  DftAttributes attrs_;
};

// signal [batch, length, 1 or 2] -> [batch, frames, bins, 2]: frame f is the signal from
// f * frame_step on, times the window (ones when omitted), transformed at frame_length points.
class StftKernel final : public OpKernel {
 public:
  StftKernel(const Node& node, bool onesided) : OpKernel(node), onesided_(onesided) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(bool onesided, ReadStftOnesided(node));
    return MakeKernel<StftKernel>(node, onesided);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor* window = ctx.input(2);
    if (x.rank() != 3) return ctx.Fail("signal must be [batch, length, 1 or 2], got ", ShapeToString(x.shape()));
    if (window != nullptr && window->rank() != 1)
      return ctx.Fail("window must be 1-D, got ", ShapeToString(window->shape()));
    const int64_t batch = x.shape()[0], length = x.shape()[1], parts = x.shape()[2];
    TOB_ASSIGN_OR_RETURN(StftPlan p, PlanStft(node(), onesided_, length, *ctx.input(1),
                                              window != nullptr ? window->shape()[0] : -1, ctx.input(3)));
    Tensor& y = *ctx.output(0);
    if (y.numel() == 0) return Status::OK();
    const FftPlan plan(p.frame_length);
    const int64_t n = p.frame_length;
    const int64_t lines = batch * p.frames;
    const int64_t slices = SliceCount(ctx, lines);
    const int64_t per_slice = n + plan.scratch_size();
    TOB_ASSIGN_OR_RETURN(Tensor scratch, ComplexScratch(ctx, slices, per_slice));
    auto* buffers = reinterpret_cast<Complex*>(scratch.data<double>());
    bool known = ew::Dispatch(FloatTypes{}, x.dtype(), [&]<typename T>() {
      const T* xs = x.data<T>();
      const T* w = window != nullptr ? window->data<T>() : nullptr;
      T* ys = y.data<T>();
      ParallelFor(ctx.thread_pool(), slices, 1, [&](int64_t sb, int64_t se) {
        for (int64_t s = sb; s < se; ++s) {
          Complex* buf = buffers + s * per_slice;
          for (int64_t l = lines * s / slices; l < lines * (s + 1) / slices; ++l) {
            const int64_t b = l / p.frames, f = l % p.frames;
            const T* frame = xs + (b * length + f * p.frame_step) * parts;
            for (int64_t j = 0; j < n; ++j) {
              const double wj = w != nullptr ? ToDouble(w[j]) : 1.0;
              buf[j] = Complex(ToDouble(frame[j * parts]) * wj, parts == 2 ? ToDouble(frame[j * parts + 1]) * wj : 0.0);
            }
            plan.Execute(buf, /*inverse=*/false, buf + n);
            T* out = ys + l * p.bins * 2;
            for (int64_t k = 0; k < p.bins; ++k) {
              out[2 * k] = FromDouble<T>(buf[k].real());
              out[2 * k + 1] = FromDouble<T>(buf[k].imag());
            }
          }
        }
      });
    });
    if (!known) return ctx.Fail("signal dtype ", DTypeName(x.dtype()), " is not supported");
    return Status::OK();
  }

 private:
  bool onesided_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuDftKernels(KernelRegistry& registry) {
  using cpu::DftKernel;
  using cpu::StftKernel;
  const std::vector<DType> floats{DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};
  const std::vector<DType> ints{DType::kInt32, DType::kInt64};
  registry.Register(Def("DFT")
                        .Versions(17, 19)
                        .Constraint("T1", {0}, floats)
                        .Constraint("T2", {1}, ints)
                        .Factory(DftKernel::Create<17>));
  registry.Register(Def("DFT")
                        .Versions(20)
                        .Constraint("T1", {0}, floats)
                        .Constraint("T2", {1}, ints)
                        .Constraint("tensor(int64)", {2}, {DType::kInt64})
                        .Factory(DftKernel::Create<20>));
  registry.Register(
      Def("STFT").Versions(17).Constraint("T1", {0, 2}, floats).Constraint("T2", {1, 3}, ints).Kernel<StftKernel>());
}

}  // namespace tob
