// Dropout. Opsets 7-11 take the ratio as an attribute and only infer (identity, all-kept mask;
// the mask is T before opset 10, bool after). From opset 12 ratio and training_mode are inputs:
// in training mode an element is kept when a uniform draw is >= ratio and scaled by 1/(1-ratio).
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <type_traits>

#include "framework/kernel_registry.h"
#include "providers/cpu/generator/fill.h"
#include "providers/cpu/generator/random_source.h"

namespace tob::cpu {
namespace {

// Where the ratio comes from: the attribute (opsets 7-11) or the optional input (12+).
enum class RatioFrom { kAttribute, kInput };

template <typename T>
using ComputeOf = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
void DropoutTraining(KernelContext& ctx, const RandomStream& stream, double ratio, const T* x, T* y, bool* mask,
                     int64_t n) {
  using C = ComputeOf<T>;
  const C scale = C(1) / (C(1) - static_cast<C>(ratio));
  const int64_t blocks = (n + kRandomBlock - 1) / kRandomBlock;
  ParallelFor(ctx.thread_pool(), blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      std::mt19937 engine = BlockEngine(stream, b);
      const int64_t end = std::min(n, (b + 1) * kRandomBlock);
      for (int64_t i = b * kRandomBlock; i < end; ++i) {
        bool keep = Uniform53(engine) >= ratio;
        C v = keep ? static_cast<C>(x[i]) * scale : C(0);
        if constexpr (std::is_floating_point_v<T>) y[i] = v;
        else y[i] = T(v);
        if (mask != nullptr) mask[i] = keep;
      }
    }
  });
}

class DropoutKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, RatioFrom from) {
    float ratio = 0.5f;
    std::optional<uint32_t> seed;
    if (from == RatioFrom::kAttribute) {
      TOB_RETURN_IF_ERROR(node.GetAttr("ratio", &ratio, 0.5f));
      if (!(ratio >= 0 && ratio < 1)) return InvalidModel(node.Describe(), ": ratio must be in [0, 1), got ", ratio);
    } else if (node.FindAttribute("seed") != nullptr) {
      int64_t s = 0;
      TOB_RETURN_IF_ERROR(node.GetAttr("seed", &s));
      seed = static_cast<uint32_t>(s);
    }
    return MakeKernel<DropoutKernel>(node, from, ratio, seed);
  }

  DropoutKernel(const Node& node, RatioFrom from, float ratio, std::optional<uint32_t> seed)
      : OpKernel(node), from_(from), ratio_(ratio), seeder_(seed) {}

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    Tensor* mask = ctx.output(1);
    double ratio = ratio_;
    bool training = false;
    if (from_ == RatioFrom::kInput) {
      if (const Tensor* r = ctx.input(1); r != nullptr && r->defined()) {
        if (r->numel() != 1) return ctx.Fail("ratio must hold one value, got ", r->numel());
        ratio = r->ElementAsDouble(0);
      }
      if (const Tensor* t = ctx.input(2); t != nullptr && t->defined()) {
        if (t->numel() != 1) return ctx.Fail("training_mode must hold one value, got ", t->numel());
        training = t->ElementAsDouble(0) != 0;
      }
    }
    if (mask != nullptr && (mask->numel() != x.numel()))
      return ctx.Fail("mask has ", mask->numel(), " elements, the input ", x.numel());
    if (!training || ratio == 0) {
      if (!y.SharesDataWith(x) && x.nbytes() > 0) std::memcpy(y.raw_data(), x.raw_data(), x.nbytes());
      if (mask != nullptr) {
        uint64_t one = 0;
        if (!ElementBytes(mask->dtype(), 1.0, &one))
          return ctx.Fail("mask dtype ", DTypeName(mask->dtype()), " is not supported");
        FillElements(mask->raw_data(), mask->numel(), &one, DTypeSize(mask->dtype()), ctx.thread_pool());
      }
      return Status::OK();
    }
    if (!(ratio > 0 && ratio < 1)) return ctx.Fail("ratio must be in [0, 1), got ", ratio);
    if (mask != nullptr && mask->dtype() != DType::kBool)
      return ctx.Fail("mask must be bool, got ", DTypeName(mask->dtype()));
    RandomStream stream = seeder_.Next();
    bool* mask_data = mask != nullptr ? mask->data<bool>() : nullptr;
    bool known = DispatchDType<float, double, Float16, BFloat16>(x.dtype(), [&]<typename T>() {
      DropoutTraining<T>(ctx, stream, ratio, x.data<T>(), y.data<T>(), mask_data, x.numel());
    });
    if (!known) return ctx.Fail("input dtype ", DTypeName(x.dtype()), " is not supported");
    return Status::OK();
  }

 private:
  RatioFrom from_;
  float ratio_;
  RandomSeeder seeder_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuDropoutKernels(KernelRegistry& registry) {
  using namespace cpu;  // the kernels above
  using enum DType;
  const std::vector<DType> floats = FloatTypes();
  registry.Register(Def("Dropout").Versions(7, 11).Constraint("T", {0}, floats).Factory([](const Node& n) {
    return DropoutKernel::Create(n, RatioFrom::kAttribute);
  }));
  registry.Register(Def("Dropout")
                        .Versions(12)
                        .Constraint("T", {0}, floats)
                        .Constraint("T1", {1}, floats)
                        .Constraint("T2", {2}, {kBool})
                        .Factory([](const Node& n) { return DropoutKernel::Create(n, RatioFrom::kInput); }));
}

}  // namespace tob
