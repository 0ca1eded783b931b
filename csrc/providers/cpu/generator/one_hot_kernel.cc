// OneHot: output[..., d, ...] = on where d == index (negative indices count from depth), off
// elsewhere; indices outside [-depth, depth) give an all-off slice, as the spec says.
#include <cstring>
#include <memory>
#include <type_traits>

#include "framework/kernel_registry.h"
#include "providers/cpu/generator/fill.h"

namespace tob::cpu {
namespace {

class OneHotKernel final : public OpKernel {
 public:
  // Negative indices count from the end from opset 11; before, they are out of range.
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, bool negative_indices) {
    int64_t axis = -1;
    TOB_RETURN_IF_ERROR(node.GetAttr("axis", &axis, -1));
    return MakeKernel<OneHotKernel>(node, axis, negative_indices);
  }

  OneHotKernel(const Node& node, int64_t axis, bool negative_indices)
      : OpKernel(node), axis_(axis), negative_indices_(negative_indices) {}

  Status Compute(KernelContext& ctx) const override {
    const Tensor& indices = *ctx.input(0);
    const Tensor& depth_tensor = *ctx.input(1);
    const Tensor& values = *ctx.input(2);
    Tensor& out = *ctx.output(0);
    if (depth_tensor.numel() != 1) return ctx.Fail("depth must hold one value, got ", depth_tensor.numel());
    if (values.numel() != 2) return ctx.Fail("values must hold [off, on], got ", values.numel(), " elements");
    const int64_t depth = static_cast<int64_t>(depth_tensor.ElementAsDouble(0));
    if (depth < 1) return ctx.Fail("depth must be positive, got ", depth);
    const int64_t out_rank = indices.rank() + 1;
    if (axis_ < -out_rank || axis_ >= out_rank)
      return ctx.Fail("axis ", axis_, " is out of range for an output of rank ", out_rank);
    const int64_t axis = axis_ < 0 ? axis_ + out_rank : axis_;
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= indices.dim(d);
    for (int64_t d = axis; d < indices.rank(); ++d) inner *= indices.dim(d);
    if (out.numel() != outer * depth * inner)
      return ctx.Fail("output has ", out.numel(), " elements, expected ", outer * depth * inner);

    const size_t elem = DTypeSize(values.dtype());
    const char* off = static_cast<const char*>(values.raw_data());
    const char* on = off + elem;
    char* dst = static_cast<char*>(out.raw_data());
    FillElements(dst, out.numel(), off, elem, ctx.thread_pool());
    bool known =
        DispatchDType<int64_t, int32_t, int16_t, int8_t, uint64_t, uint32_t, uint16_t, uint8_t, float, double, Float16>(
            indices.dtype(), [&]<typename I>() {
              const I* idx = indices.data<I>();
              for (int64_t o = 0; o < outer; ++o)
                for (int64_t i = 0; i < inner; ++i) {
                  int64_t v;
                  if constexpr (std::is_integral_v<I>) {
                    v = static_cast<int64_t>(idx[o * inner + i]);
                  } else {
                    // Fractional indices truncate; anything beyond int64 is simply out of range.
                    double d;
                    if constexpr (std::is_same_v<I, Float16>) d = static_cast<float>(idx[o * inner + i]);
                    else d = static_cast<double>(idx[o * inner + i]);
                    if (!(d > -9.0e18 && d < 9.0e18)) continue;
                    v = static_cast<int64_t>(d);
                  }
                  if (v < 0 && negative_indices_) v += depth;
                  if (v < 0 || v >= depth) continue;
                  std::memcpy(dst + ((o * depth + v) * inner + i) * elem, on, elem);
                }
            });
    if (!known) return ctx.Fail("indices dtype ", DTypeName(indices.dtype()), " is not supported");
    return Status::OK();
  }

 private:
  int64_t axis_;
  bool negative_indices_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuOneHotKernels(KernelRegistry& registry) {
  using namespace cpu;  // the kernels above
  using enum DType;
  const std::vector<DType> index_types = {kInt64,  kInt32, kInt16,   kInt8,    kUInt64, kUInt32,
                                          kUInt16, kUInt8, kFloat32, kFloat64, kFloat16};
  for (bool negative_indices : {false, true}) {
    registry.Register(
        Def("OneHot")
            .Versions(negative_indices ? 11 : 9, negative_indices ? kMaxOpset : 10)
            .Constraint("T1", {0}, index_types)
            .Constraint("T2", {1}, index_types)
            .Constraint("T3", {2}, AllTypes())
            .Factory([negative_indices](const Node& n) { return OneHotKernel::Create(n, negative_indices); }));
  }
}

}  // namespace tob
