// ArrayFeatureExtractor and Binarizer (ai.onnx.ml, opset 1).
// ArrayFeatureExtractor: Y[..., k] = X[..., indices[k]] over the flattened indices; an index
// outside [0, F) is an error naming the node. Binarizer: Y = 1 where X > threshold, else 0.
#include <memory>

#include "framework/kernel_registry.h"
#include "providers/cpu/elementwise/elementwise_loops.h"

namespace tob::cpu {
namespace {

using MlTypes = ew::TypeList<float, double, int64_t, int32_t>;

class ArrayFeatureExtractorKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    return MakeKernel<ArrayFeatureExtractorKernel>(node);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& indices = *ctx.input(1);
    Tensor& y = *ctx.output(0);
    const int64_t features = x.dim(-1), rows = features == 0 ? 0 : x.numel() / features, count = indices.numel();
    const int64_t* idx = indices.data<int64_t>();
    for (int64_t k = 0; k < count; ++k)
      if (idx[k] < 0 || idx[k] >= features)
        return ctx.Fail("index ", idx[k], " (indices[", k, "]) is outside [0, ", features, ")");
    bool known = ew::Dispatch(MlTypes{}, x.dtype(), [&]<typename T>() {
      const T* in = x.data<T>();
      T* out = y.data<T>();
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < count; ++k) out[r * count + k] = in[r * features + idx[k]];
    });
    return known ? Status::OK() : ctx.Fail("dtype ", DTypeName(x.dtype()), " is not supported");
  }
};

class BinarizerKernel final : public OpKernel {
 public:
  BinarizerKernel(const Node& node, float threshold) : OpKernel(node), threshold_(threshold) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    float threshold = 0.0f;
    TOB_RETURN_IF_ERROR(node.GetAttr("threshold", &threshold, 0.0f));
    return MakeKernel<BinarizerKernel>(node, threshold);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    bool known = ew::Dispatch(MlTypes{}, x.dtype(), [&]<typename T>() {
      const T* in = x.data<T>();
      T* out = y.data<T>();
      const double threshold = threshold_;
      for (int64_t i = 0; i < x.numel(); ++i) out[i] = static_cast<double>(in[i]) > threshold ? T(1) : T(0);
    });
    return known ? Status::OK() : ctx.Fail("dtype ", DTypeName(x.dtype()), " is not supported");
  }

 private:
  float threshold_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuMlKernels(KernelRegistry& registry) {
  const std::vector<DType> types{DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32};
  registry.Register(Def("ArrayFeatureExtractor")
                        .Domain(kMlDomain)
                        .Versions(1)
                        .Constraint("T", {0}, types)
                        .Constraint("indices", {1}, {DType::kInt64})
                        .Kernel<cpu::ArrayFeatureExtractorKernel>());
  registry.Register(
      Def("Binarizer").Domain(kMlDomain).Versions(1).Constraint("T", {0}, types).Kernel<cpu::BinarizerKernel>());
}

}  // namespace tob
