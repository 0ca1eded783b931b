// GroupNormalization (opsets 18 and 21): y = (x - mean) / sqrt(var + epsilon) * scale + bias,
// mean and var over each instance's group of C / num_groups channels. Opset 18 takes scale and
// bias per group ([num_groups]), opset 21 per channel ([C]): one kernel, told which by its
// registration. The statistics and the normalisation are computed in float64 (stash_type 1 asks
// for at least float32) and each output is rounded to the type once.
#include <cmath>
#include <memory>

#include "framework/kernel_registry.h"
#include "providers/cpu/elementwise/elementwise_loops.h"

namespace tob::cpu {
namespace {

template <typename T>
double Widen(T v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) return static_cast<float>(v);
  else return static_cast<double>(v);
}

template <typename T>
T Narrow(double v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) return T(static_cast<float>(v));
  else return static_cast<T>(v);
}

class GroupNormKernel final : public OpKernel {
 public:
  GroupNormKernel(const Node& node, int64_t groups, float epsilon, bool per_channel)
      : OpKernel(node), groups_(groups), epsilon_(epsilon), per_channel_(per_channel) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, bool per_channel) {
    int64_t groups = 0;
    float epsilon = 1e-5f;
    TOB_RETURN_IF_ERROR(node.GetAttr("num_groups", &groups));
    TOB_RETURN_IF_ERROR(node.GetAttr("epsilon", &epsilon, 1e-5f));
    if (groups <= 0) return InvalidModel(node.Describe(), ": attribute 'num_groups' must be positive, got ", groups);
    return MakeKernel<GroupNormKernel>(node, groups, epsilon, per_channel);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& scale = *ctx.input(1);
    const Tensor& bias = *ctx.input(2);
    Tensor& y = *ctx.output(0);
    const int64_t n = x.dim(0), c = x.dim(1);
    if (c % groups_ != 0) return ctx.Fail("X has ", c, " channels, not divisible by num_groups = ", groups_);
    const int64_t per_group = c / groups_;
    const int64_t spatial = n * c == 0 ? 0 : x.numel() / (n * c);
    const int64_t expected = per_channel_ ? c : groups_;
    if (scale.numel() != expected || bias.numel() != expected)
      return ctx.Fail("scale and bias must have ", expected,
                      per_channel_ ? " values (one per channel)" : " values (one per group)");
    const int64_t group_size = per_group * spatial;
    bool known = ew::Dispatch(ew::FloatList{}, x.dtype(), [&]<typename T>() {
      const T* in = x.data<T>();
      const T* s = scale.data<T>();
      const T* b = bias.data<T>();
      T* out = y.data<T>();
      ParallelFor(ctx.thread_pool(), n * groups_, 1, [&](int64_t begin, int64_t end) {
        for (int64_t ng = begin; ng < end; ++ng) {
          const int64_t base = ng * group_size;
          double sum = 0.0;
          for (int64_t i = 0; i < group_size; ++i) sum += Widen(in[base + i]);
          const double mean = group_size > 0 ? sum / static_cast<double>(group_size) : 0.0;
          double squares = 0.0;
          for (int64_t i = 0; i < group_size; ++i) {
            const double dv = Widen(in[base + i]) - mean;
            squares += dv * dv;
          }
          const double var = group_size > 0 ? squares / static_cast<double>(group_size) : 0.0;
          const double inv_std = 1.0 / std::sqrt(var + static_cast<double>(epsilon_));
          const int64_t g = ng % groups_;
          for (int64_t k = 0; k < per_group; ++k) {
            const int64_t channel = g * per_group + k;
            const int64_t param = per_channel_ ? channel : g;
            const double sc = Widen(s[param]), bi = Widen(b[param]);
            for (int64_t i = 0; i < spatial; ++i) {
              const int64_t at = base + k * spatial + i;
              out[at] = Narrow<T>((Widen(in[at]) - mean) * inv_std * sc + bi);
            }
          }
        }
      });
    });
    return known ? Status::OK() : ctx.Fail("dtype ", DTypeName(x.dtype()), " is not supported");
  }

 private:
  int64_t groups_;
  float epsilon_;
  bool per_channel_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuGroupNormKernels(KernelRegistry& registry) {
  const std::vector<DType> f4{DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};
  registry.Register(
      Def("GroupNormalization").Versions(18, 20).Constraint("T", {0, 1, 2}, f4).Factory([](const Node& n) {
        return cpu::GroupNormKernel::Create(n, false);
      }));
  registry.Register(Def("GroupNormalization").Versions(21).Constraint("T", {0, 1, 2}, f4).Factory([](const Node& n) {
    return cpu::GroupNormKernel::Create(n, true);
  }));
}

}  // namespace tob
