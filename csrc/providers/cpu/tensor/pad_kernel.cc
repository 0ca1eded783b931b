// Pad: constant, reflect, edge and wrap modes, negative pads crop. Every output position maps,
// axis by axis, to an input index (or to the constant); rows whose inner map is the identity over
// a stretch copy that stretch with one memcpy. CenterCropPad is a zero Pad whose pads centre the
// input in the requested shape (negative: a centred crop).
#include <algorithm>

#include "framework/kernel_registry.h"
#include "ops/tensor_params.h"
#include "providers/cpu/tensor/copy_utils.h"

namespace tob {

namespace {

// Input index read by output index `o` of an axis of size `dim` padded by `begin` in front;
// -1 means the constant.
int64_t SourceIndex(int64_t o, int64_t begin, int64_t dim, PadMode mode) {
  int64_t i = o - begin;
  if (i >= 0 && i < dim) return i;
  switch (mode) {
    case PadMode::kConstant: return -1;
    case PadMode::kEdge: return std::clamp<int64_t>(i, 0, dim - 1);
    case PadMode::kWrap: return ((i % dim) + dim) % dim;
    case PadMode::kReflect: {
      if (dim == 1) return 0;
      // Reflection without repeating the edge is periodic with period 2 * (dim - 1).
      const int64_t period = 2 * (dim - 1);
      int64_t m = ((i % period) + period) % period;
      return m < dim ? m : period - m;
    }
  }
  return -1;
}

template <typename E>
void PadRows(ThreadPool* pool, const E* src, E* dst, const Shape& in_shape, const Shape& out_shape,
             const std::vector<std::vector<int64_t>>& maps, int64_t inner_begin, E value) {
  const int64_t rank = static_cast<int64_t>(out_shape.size());
  const int64_t inner = out_shape.back();
  const std::vector<int64_t> in_strides = ContiguousStrides(in_shape);
  const std::vector<int64_t>& inner_map = maps.back();
  // The unpadded stretch of each row: output [lo, hi) reads input [lo - inner_begin, ...).
  const int64_t lo = std::clamp<int64_t>(inner_begin, 0, inner);
  const int64_t hi = std::max(lo, std::min(inner, inner_begin + in_shape.back()));
  const int64_t rows = NumElements(out_shape) / inner;
  const int64_t grain = tensor_ops::CopyGrain(static_cast<size_t>(inner) * sizeof(E));
  ParallelFor(pool, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      E* out = dst + r * inner;
      int64_t offset = 0;
      bool constant_row = false;
      for (int64_t k = rank - 2, flat = r; k >= 0; --k) {
        int64_t s = maps[k][flat % out_shape[k]];
        flat /= out_shape[k];
        if (s < 0) {
          constant_row = true;
          break;
        }
        offset += s * in_strides[k];
      }
      if (constant_row) {
        std::fill(out, out + inner, value);
        continue;
      }
      const E* in = src + offset;
      for (int64_t j = 0; j < lo; ++j) out[j] = inner_map[j] < 0 ? value : in[inner_map[j]];
      if (hi > lo) std::memcpy(out + lo, in + (lo - inner_begin), static_cast<size_t>(hi - lo) * sizeof(E));
      for (int64_t j = hi; j < inner; ++j) out[j] = inner_map[j] < 0 ? value : in[inner_map[j]];
    }
  });
}

class PadKernel final : public OpKernel {
 public:
  PadKernel(const Node& node, bool from_inputs, PadMode mode, std::vector<int64_t> pads, float value)
      : OpKernel(node), from_inputs_(from_inputs), mode_(mode), pads_(std::move(pads)), value_(value) {}

  // Opset 2-10 read pads and value from attributes; later opsets from inputs at every run.
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, bool from_inputs) {
    std::string mode_name;
    TOB_RETURN_IF_ERROR(node.GetAttr("mode", &mode_name, std::string("constant")));
    PadMode mode;
    Status s = ParsePadMode(mode_name, &mode);
    if (!s.ok()) return InvalidModel(node.Describe(), ": ", s.message());
    std::vector<int64_t> pads;
    float value = 0.f;
    if (!from_inputs) {
      TOB_RETURN_IF_ERROR(node.GetAttr("pads", &pads));
      TOB_RETURN_IF_ERROR(node.GetAttr("value", &value, 0.f));
    }
    return MakeKernel<PadKernel>(node, from_inputs, mode, std::move(pads), value);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& in = *ctx.input(0);
    Tensor* out = ctx.output(0);
    const int64_t rank = in.rank();
    std::vector<int64_t> pads = pads_;
    std::optional<std::vector<int64_t>> axes;
    if (from_inputs_) {
      if (ctx.input(1) == nullptr) return ctx.Fail("the pads input is required");
      pads = ctx.input(1)->ToInt64Vector();
      if (const Tensor* a = ctx.input(3)) axes = a->ToInt64Vector();
    }
    std::vector<int64_t> begin, end;
    Status s = ResolvePads(rank, pads, axes, &begin, &end);
    if (!s.ok()) return ctx.Fail(s.message());
    for (int64_t i = 0; i < rank; ++i) {
      if (out->dim(i) != in.dim(i) + begin[i] + end[i])
        return ctx.Fail("output ", ShapeToString(out->shape()), " does not match the padded input");
      if (mode_ != PadMode::kConstant && in.dim(i) == 0 && out->dim(i) > 0)
        return ctx.Fail("cannot pad the empty axis ", i, " in a non-constant mode");
    }
    if (out->numel() == 0) return Status::OK();
    const size_t es = DTypeSize(in.dtype());
    if (rank == 0) {
      std::memcpy(out->raw_data(), in.raw_data(), es);
      return Status::OK();
    }
    // The constant, as the bytes of one element of the data's dtype.
    uint64_t value_bits = 0;
    const Tensor* cv = from_inputs_ ? ctx.input(2) : nullptr;
    if (cv != nullptr && cv->numel() > 0) {
      if (cv->dtype() != in.dtype()) return ctx.Fail("constant_value must have the data's dtype");
      std::memcpy(&value_bits, cv->raw_data(), es);
    } else if (value_ != 0.f) {
      DispatchDType<float, double, Float16, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
                    uint64_t, bool>(in.dtype(), [&]<typename T>() {
        T v = static_cast<T>(value_);
        std::memcpy(&value_bits, &v, sizeof(T));
      });
    }
    std::vector<std::vector<int64_t>> maps(static_cast<size_t>(rank));
    for (int64_t k = 0; k < rank; ++k) {
      maps[k].resize(static_cast<size_t>(out->dim(k)));
      for (int64_t o = 0; o < out->dim(k); ++o) maps[k][o] = SourceIndex(o, begin[k], in.dim(k), mode_);
    }
    tensor_ops::DispatchElementSize(es, [&]<typename E>() {
      E value;
      std::memcpy(&value, &value_bits, sizeof(E));
      PadRows(ctx.thread_pool(), in.data<E>(), out->data<E>(), in.shape(), out->shape(), maps, begin.back(), value);
    });
    return Status::OK();
  }

 private:
  bool from_inputs_;
  PadMode mode_;
  std::vector<int64_t> pads_;
  float value_;
};

class CenterCropPadKernel final : public OpKernel {
 public:
  CenterCropPadKernel(const Node& node, std::vector<int64_t> axes) : OpKernel(node), axes_(std::move(axes)) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    std::vector<int64_t> axes;
    TOB_RETURN_IF_ERROR(node.GetAttr("axes", &axes, std::vector<int64_t>{}));
    return MakeKernel<CenterCropPadKernel>(node, std::move(axes));
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& in = *ctx.input(0);
    Tensor* out = ctx.output(0);
    const int64_t rank = in.rank();
    const std::vector<int64_t> shape = ctx.input(1)->ToInt64Vector();
    std::vector<int64_t> axes = axes_;
    if (axes.empty())
      for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
    if (shape.size() != axes.size()) return ctx.Fail("shape has ", shape.size(), " values for ", axes.size(), " axes");
    // Pads centring the input: an odd difference leaves the extra element at the end.
    std::vector<int64_t> begin(static_cast<size_t>(rank), 0);
    for (size_t i = 0; i < axes.size(); ++i) {
      const int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
      if (a < 0 || a >= rank) return ctx.Fail("axis ", axes[i], " is out of range for rank ", rank);
      const int64_t diff = shape[i] - in.dim(a);
      begin[a] = diff >= 0 ? diff / 2 : -((-diff) / 2);
      if (out->dim(a) != shape[i]) return ctx.Fail("output ", ShapeToString(out->shape()), " does not match shape");
    }
    if (out->numel() == 0) return Status::OK();
    const size_t es = DTypeSize(in.dtype());
    if (rank == 0) {
      std::memcpy(out->raw_data(), in.raw_data(), es);
      return Status::OK();
    }
    std::vector<std::vector<int64_t>> maps(static_cast<size_t>(rank));
    for (int64_t k = 0; k < rank; ++k) {
      maps[k].resize(static_cast<size_t>(out->dim(k)));
      for (int64_t o = 0; o < out->dim(k); ++o) maps[k][o] = SourceIndex(o, begin[k], in.dim(k), PadMode::kConstant);
    }
    tensor_ops::DispatchElementSize(es, [&]<typename E>() {
      PadRows(ctx.thread_pool(), in.data<E>(), out->data<E>(), in.shape(), out->shape(), maps, begin.back(), E(0));
    });
    return Status::OK();
  }

 private:
  std::vector<int64_t> axes_;
};

KernelFactory PadFactory(bool from_inputs) {
  return [=](const Node& node) { return PadKernel::Create(node, from_inputs); };
}

}  // namespace

void RegisterCpuPadKernels(KernelRegistry& registry) {
  // Pad takes pads and the constant as inputs from 11, the axes input from 18, wrap mode from 19.
  registry.Register(Def("Pad").Versions(2, 10).Constraint("T", {0}, AllTypes()).Factory(PadFactory(false)));
  for (auto [since, end] : {std::pair{11, 17}, std::pair{18, 18}, std::pair{19, kMaxOpset}}) {
    registry.Register(Def("Pad")
                          .Versions(since, end)
                          .Constraint("T", {0, 2}, AllTypes())
                          .Constraint("tensor(int64)", {1}, {DType::kInt64})
                          .Constraint("Tind", {3}, {DType::kInt32, DType::kInt64})
                          .Factory(PadFactory(true)));
  }
  registry.Register(Def("CenterCropPad")
                        .Versions(18)
                        .Constraint("T", {0}, AllTypes())
                        .Constraint("Tind", {1}, {DType::kInt32, DType::kInt64})
                        .Kernel<CenterCropPadKernel>());
}

}  // namespace tob
