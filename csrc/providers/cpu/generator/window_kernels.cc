// The signal windows HannWindow, HammingWindow and BlackmanWindow (opset 17): `size` values of a
// cosine sum over n = 0..size-1 with denominator size (periodic, the default) or size - 1
// (symmetric), computed in float64 and converted once to `output_datatype`, as the ONNX reference
// does. The output's length is the value of the `size` input, so the kernel allocates it.
#include <cmath>
#include <memory>
#include <type_traits>

#include "core/allocator.h"
#include "framework/kernel_registry.h"
#include "providers/cpu/elementwise/elementwise_loops.h"

namespace tob::cpu {
namespace {

enum class Window { kHann, kHamming, kBlackman };

double WindowValue(Window w, int64_t n, double denominator) {
  constexpr double kPi = 3.14159265358979323846;
  const double x = 2.0 * kPi * static_cast<double>(n) / denominator;
  switch (w) {
    case Window::kHann: {
      const double s = std::sin(kPi * static_cast<double>(n) / denominator);
      return s * s;
    }
    case Window::kHamming: return 25.0 / 46.0 - (1.0 - 25.0 / 46.0) * std::cos(x);
    case Window::kBlackman: return 0.42 - 0.5 * std::cos(x) + 0.08 * std::cos(2.0 * x);
  }
  return 0.0;
}

using WindowTypes = ew::TypeList<float, double, Float16, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t,
                                 uint32_t, uint64_t>;

class WindowKernel final : public OpKernel {
 public:
  WindowKernel(const Node& node, Window window, DType dtype, bool periodic)
      : OpKernel(node), window_(window), dtype_(dtype), periodic_(periodic) {}

  template <Window W>
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t code = 1, periodic = 1;
    TOB_RETURN_IF_ERROR(node.GetAttr("output_datatype", &code, int64_t{1}));
    TOB_RETURN_IF_ERROR(node.GetAttr("periodic", &periodic, int64_t{1}));
    const DType dtype = DTypeFromOnnx(static_cast<int32_t>(code));
    bool supported = false;
    ew::Dispatch(WindowTypes{}, dtype, [&]<typename T>() { supported = true; });
    if (!supported)
      return InvalidModel(node.Describe(), ": attribute 'output_datatype' must be a numeric ONNX type, got ", code);
    if (periodic != 0 && periodic != 1)
      return InvalidModel(node.Describe(), ": attribute 'periodic' must be 0 or 1, got ", periodic);
    return MakeKernel<WindowKernel>(node, W, dtype, periodic == 1);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& size_input = *ctx.input(0);
    if (size_input.numel() != 1) return ctx.Fail("size must hold one value, got ", ShapeToString(size_input.shape()));
    const int64_t size = size_input.ElementAsInt64(0);
    if (size < 0) return ctx.Fail("size must not be negative, got ", size);
    TOB_ASSIGN_OR_RETURN(Tensor out, Tensor::Allocate(dtype_, {size}, CpuAllocator::Default()));
    const double denominator = static_cast<double>(periodic_ ? size : size - 1);
    ew::Dispatch(WindowTypes{}, dtype_, [&]<typename T>() {
      T* y = out.data<T>();
      for (int64_t n = 0; n < size; ++n) {
        const double v = WindowValue(window_, n, denominator);
        if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) y[n] = T(static_cast<float>(v));
        else y[n] = static_cast<T>(v);
      }
    });
    *ctx.output(0) = std::move(out);
    return Status::OK();
  }

 private:
  Window window_;
  DType dtype_;
  bool periodic_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuWindowKernels(KernelRegistry& registry) {
  using cpu::Window;
  using cpu::WindowKernel;
  const std::vector<DType> sizes{DType::kInt32, DType::kInt64};
  registry.Register(Def("HannWindow")
                        .Versions(17)
                        .Constraint("T1", {0}, sizes)
                        .KernelAllocatesOutputs()
                        .Factory(WindowKernel::Create<Window::kHann>));
  registry.Register(Def("HammingWindow")
                        .Versions(17)
                        .Constraint("T1", {0}, sizes)
                        .KernelAllocatesOutputs()
                        .Factory(WindowKernel::Create<Window::kHamming>));
  registry.Register(Def("BlackmanWindow")
                        .Versions(17)
                        .Constraint("T1", {0}, sizes)
                        .KernelAllocatesOutputs()
                        .Factory(WindowKernel::Create<Window::kBlackman>));
}

}  // namespace tob
