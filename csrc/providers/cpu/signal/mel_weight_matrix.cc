// MelWeightMatrix (ai.onnx 17): the [dft_length / 2 + 1, num_mel_bins] matrix of triangular
// filters, evenly spaced on the mel scale mel(f) = 2595 log10(1 + f / 700) between the two edge
// frequencies, each peaking at 1.
//
// The arithmetic follows onnx's reference step by step, because each filter's corners are
// floored to DFT bins and a different rounding moves a whole corner: mel(edge) is computed in the
// edges' type up to the division by ln 10 (numpy keeps float32 scalars float32 there; 16-bit
// types compute in float32 and round each step), everything after it in float64, and the bin of
// frequency f is floor((dft_length + 1) * f / sample_rate) taken as numpy's floor division does
// (from fmod, so a quotient that rounds up to an integer still floors down). The matrix is built
// in float64 and converted once to output_datatype. A corner outside the spectrogram's bins (an
// upper edge above the Nyquist frequency, a negative lower edge) is refused by name.
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include "framework/kernel_registry.h"
#include "ops/signal_attributes.h"
#include "providers/cpu/elementwise/elementwise_loops.h"
#include "providers/cpu/signal/round_once.h"

namespace tob::cpu {
namespace {

using EdgeTypes = ew::TypeList<float, double, Float16, BFloat16>;
using OutputTypes = ew::TypeList<float, double, Float16, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t,
                                 uint32_t, uint64_t>;

// 2595 * log1p(hz / 700) / ln(10), the first three steps in edge type T.
template <typename T>
double Mel(double hz) {
  if constexpr (std::is_same_v<T, double>) {
    return 2595.0 * std::log1p(hz / 700.0) / std::log(10.0);
  } else {
    auto round = [](float v) { return static_cast<float>(T(v)); };
    const float h = round(static_cast<float>(hz));
    const float mel = round(2595.0f * round(std::log1p(round(h / 700.0f))));
    return static_cast<double>(mel) / std::log(10.0);
  }
}

// numpy's float floor division a // b.
double FloorDivide(double a, double b) {
  const double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0.0 && ((b < 0) != (mod < 0))) div -= 1.0;
  double floor_div = std::floor(div);
  if (div - floor_div > 0.5) floor_div += 1.0;
  return floor_div;
}

class MelWeightMatrixKernel final : public OpKernel {
 public:
  MelWeightMatrixKernel(const Node& node, DType dtype) : OpKernel(node), dtype_(dtype) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t code = 1;
    TOB_RETURN_IF_ERROR(node.GetAttr("output_datatype", &code, int64_t{1}));
    const DType dtype = DTypeFromOnnx(static_cast<int32_t>(code));
    bool supported = false;
    ew::Dispatch(OutputTypes{}, dtype, [&]<typename T>() { supported = true; });
    if (!supported)
      return InvalidModel(node.Describe(), ": attribute 'output_datatype' must be a numeric ONNX type, got ", code);
    return MakeKernel<MelWeightMatrixKernel>(node, dtype);
  }

  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(int64_t mel_bins, ReadScalarInput(node(), "num_mel_bins", *ctx.input(0)));
    TOB_ASSIGN_OR_RETURN(int64_t dft_length, ReadScalarInput(node(), "dft_length", *ctx.input(1)));
    TOB_ASSIGN_OR_RETURN(int64_t sample_rate, ReadScalarInput(node(), "sample_rate", *ctx.input(2)));
    if (sample_rate < 1) return ctx.Fail("sample_rate must be positive, got ", sample_rate);
    const Tensor& lower_t = *ctx.input(3);
    const Tensor& upper_t = *ctx.input(4);
    if (lower_t.numel() != 1 || upper_t.numel() != 1) return ctx.Fail("the edge frequencies must be scalars");
    const double lower = lower_t.ElementAsDouble(0), upper = upper_t.ElementAsDouble(0);
    double low_mel = 0, high_mel = 0;
    if (!ew::Dispatch(EdgeTypes{}, lower_t.dtype(), [&]<typename T>() {
          low_mel = Mel<T>(lower);
          high_mel = Mel<T>(upper);
        }))
      return ctx.Fail("edge frequency dtype ", DTypeName(lower_t.dtype()), " is not supported");

    const int64_t spectrogram_bins = dft_length / 2 + 1;
    const double mel_step = (high_mel - low_mel) / static_cast<double>(mel_bins + 2);
    std::vector<int64_t> corner(static_cast<size_t>(mel_bins + 2));
    for (int64_t i = 0; i < mel_bins + 2; ++i) {
      const double mel = static_cast<double>(i) * mel_step + low_mel;
      const double hz = 700.0 * std::expm1(mel / 2595.0 * std::log(10.0));
      const double bin = FloorDivide(static_cast<double>(dft_length + 1) * hz, static_cast<double>(sample_rate));
      if (!(bin >= 0.0 && bin <= static_cast<double>(spectrogram_bins)))
        return ctx.Fail("filter corner ", i, " falls on DFT bin ", bin, ", outside the ", spectrogram_bins,
                        " bins of a ", dft_length, "-point DFT; the edges [", lower, ", ", upper,
                        "] Hz must lie within [0, sample_rate / 2 = ", sample_rate / 2.0, "]");
      corner[i] = static_cast<int64_t>(bin);
    }

    std::vector<double> w(static_cast<size_t>(spectrogram_bins * mel_bins), 0.0);
    auto at = [&](int64_t j, int64_t i) -> StatusOr<double*> {
      if (j < 0 || j >= spectrogram_bins)
        return ctx.Fail("filter ", i, " reaches DFT bin ", j, ", outside the ", spectrogram_bins, " bins of a ",
                        dft_length, "-point DFT; the upper edge ", upper, " Hz is above sample_rate / 2");
      return &w[j * mel_bins + i];
    };
    for (int64_t i = 0; i < mel_bins; ++i) {
      const int64_t left = corner[i], center = corner[i + 1], right = corner[i + 2];
      if (center == left) {
        TOB_ASSIGN_OR_RETURN(double* p, at(center, i));
        *p = 1.0;
      } else {
        for (int64_t j = left; j <= center; ++j) {
          TOB_ASSIGN_OR_RETURN(double* p, at(j, i));
          *p = static_cast<double>(j - left) / static_cast<double>(center - left);
        }
      }
      for (int64_t j = center; j < right; ++j) {
        TOB_ASSIGN_OR_RETURN(double* p, at(j, i));
        *p = static_cast<double>(right - j) / static_cast<double>(right - center);
      }
    }

    Tensor& y = *ctx.output(0);
    if (y.numel() != static_cast<int64_t>(w.size()))
      return ctx.Fail("internal: output holds ", y.numel(), " values, the matrix ", w.size());
    ew::Dispatch(OutputTypes{}, dtype_, [&]<typename T>() {
      T* out = y.data<T>();
      for (size_t k = 0; k < w.size(); ++k) out[k] = FromDouble<T>(w[k]);
    });
    return Status::OK();
  }

 private:
  DType dtype_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuMelWeightMatrixKernels(KernelRegistry& registry) {
  registry.Register(Def("MelWeightMatrix")
                        .Versions(17)
                        .Constraint("T1", {0, 1, 2}, {DType::kInt32, DType::kInt64})
                        .Constraint("T2", {3, 4}, {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16})
                        .Kernel<cpu::MelWeightMatrixKernel>());
}

}  // namespace tob
