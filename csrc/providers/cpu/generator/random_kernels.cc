// RandomUniform / RandomNormal (shape from the attribute), their *Like forms (shape of the
// input) and Bernoulli. Normal values use Box-Muller on the 53-bit uniforms of random_source.h, so a seed gives
// the same tensor on every platform.
#include <algorithm>
#include <cmath>
#include <memory>
#include <numbers>
#include <optional>
#include <type_traits>

#include "framework/kernel_registry.h"
#include "providers/cpu/generator/random_source.h"

namespace tob::cpu {

uint32_t NextGlobalRandomSeed() {
  static std::atomic<uint32_t> counter{0x5eed1234u};
  return counter.fetch_add(0x9e3779b9u, std::memory_order_relaxed);
}

namespace {

enum class Distribution { kUniform, kNormal };

template <typename T>
inline T FromDouble(double v) {
  if constexpr (std::is_floating_point_v<T>) return static_cast<T>(v);
  else return T(static_cast<float>(v));
}

template <typename T>
void FillRandom(KernelContext& ctx, const RandomStream& stream, Distribution dist, double a, double b, T* y,
                int64_t n) {
  const int64_t blocks = (n + kRandomBlock - 1) / kRandomBlock;
  ParallelFor(ctx.thread_pool(), blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t block = b0; block < b1; ++block) {
      std::mt19937 engine = BlockEngine(stream, block);
      const int64_t begin = block * kRandomBlock, end = std::min(n, begin + kRandomBlock);
      if (dist == Distribution::kUniform) {
        // a = low, b = high.
        for (int64_t i = begin; i < end; ++i) y[i] = FromDouble<T>(a + (b - a) * Uniform53(engine));
        continue;
      }
      // a = mean, b = scale; Box-Muller gives two normals per pair of uniforms.
      for (int64_t i = begin; i < end; i += 2) {
        double u1 = 1.0 - Uniform53(engine);  // (0, 1]: log stays finite
        double u2 = Uniform53(engine);
        double radius = std::sqrt(-2.0 * std::log(u1));
        double angle = 2.0 * std::numbers::pi * u2;
        y[i] = FromDouble<T>(a + b * radius * std::cos(angle));
        if (i + 1 < end) y[i + 1] = FromDouble<T>(a + b * radius * std::sin(angle));
      }
    }
  });
}

class RandomKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, Distribution dist) {
    bool normal = dist == Distribution::kNormal;
    float a = 0, b = 1;
    TOB_RETURN_IF_ERROR(node.GetAttr(normal ? "mean" : "low", &a, 0.0f));
    TOB_RETURN_IF_ERROR(node.GetAttr(normal ? "scale" : "high", &b, 1.0f));
    std::optional<uint32_t> seed;
    if (node.FindAttribute("seed") != nullptr) {
      float s = 0;
      TOB_RETURN_IF_ERROR(node.GetAttr("seed", &s));
      seed = static_cast<uint32_t>(static_cast<int64_t>(s));
    }
    return MakeKernel<RandomKernel>(node, dist, a, b, seed);
  }

  RandomKernel(const Node& node, Distribution dist, float a, float b, std::optional<uint32_t> seed)
      : OpKernel(node), dist_(dist), a_(a), b_(b), seeder_(seed) {}

  Status Compute(KernelContext& ctx) const override {
    Tensor& out = *ctx.output(0);
    RandomStream stream = seeder_.Next();
    bool known = DispatchDType<float, double, Float16, BFloat16>(
        out.dtype(), [&]<typename T>() { FillRandom<T>(ctx, stream, dist_, a_, b_, out.data<T>(), out.numel()); });
    if (!known) return ctx.Fail("output dtype ", DTypeName(out.dtype()), " is not a floating-point type");
    return Status::OK();
  }

 private:
  Distribution dist_;
  double a_, b_;
  RandomSeeder seeder_;
};

// Bernoulli: y = 1 where a uniform draw in [0, 1) falls below the probability x, else 0. Draws
// come from the streams of random_source.h (a seed attribute makes a run reproducible, and each
// run of the node draws anew); probabilities outside [0, 1] (or NaN) are an error naming the node.
class BernoulliKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    std::optional<uint32_t> seed;
    if (node.FindAttribute("seed") != nullptr) {
      float s = 0;
      TOB_RETURN_IF_ERROR(node.GetAttr("seed", &s));
      seed = static_cast<uint32_t>(static_cast<int64_t>(s));
    }
    return MakeKernel<BernoulliKernel>(node, seed);
  }

  BernoulliKernel(const Node& node, std::optional<uint32_t> seed) : OpKernel(node), seeder_(seed) {}

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& out = *ctx.output(0);
    const int64_t n = x.numel();
    TOB_ASSIGN_OR_RETURN(Tensor probabilities, ctx.AllocateScratch(DType::kFloat64, {n}));
    double* prob = probabilities.data<double>();
    for (int64_t i = 0; i < n; ++i) {
      prob[i] = x.ElementAsDouble(i);
      if (!(prob[i] >= 0.0 && prob[i] <= 1.0))
        return ctx.Fail("probability X[", i, "] = ", prob[i], " is outside [0, 1]");
    }
    const RandomStream stream = seeder_.Next();
    bool known = DispatchDType<float, double, Float16, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t,
                               uint32_t, uint64_t, bool>(out.dtype(), [&]<typename T>() {
      T* y = out.data<T>();
      const int64_t blocks = (n + kRandomBlock - 1) / kRandomBlock;
      ParallelFor(ctx.thread_pool(), blocks, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t block = b0; block < b1; ++block) {
          std::mt19937 engine = BlockEngine(stream, block);
          const int64_t begin = block * kRandomBlock, end = std::min(n, begin + kRandomBlock);
          for (int64_t i = begin; i < end; ++i) {
            const bool one = Uniform53(engine) < prob[i];
            if constexpr (std::is_same_v<T, bool>) y[i] = one;
            else y[i] = FromDouble<T>(one ? 1.0 : 0.0);
          }
        }
      });
    });
    if (!known) return ctx.Fail("output dtype ", DTypeName(out.dtype()), " is not supported");
    return Status::OK();
  }

 private:
  RandomSeeder seeder_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuRandomKernels(KernelRegistry& registry) {
  using namespace cpu;  // the kernels above
  struct Entry {
    const char* op_type;
    Distribution dist;
    bool like;
  };
  for (const Entry& e :
       {Entry{"RandomUniform", Distribution::kUniform, false}, Entry{"RandomNormal", Distribution::kNormal, false},
        Entry{"RandomUniformLike", Distribution::kUniform, true},
        Entry{"RandomNormalLike", Distribution::kNormal, true}}) {
    Distribution dist = e.dist;
    KernelDef def = Def(e.op_type).Versions(1).Factory([dist](const Node& n) { return RandomKernel::Create(n, dist); });
    if (e.like) def.Constraint("T1", {0}, AllTypes());
    registry.Register(std::move(def));
  }
  registry.Register(Def("Bernoulli")
                        .Versions(15, 21)
                        .Constraint("T1", {0}, {DType::kFloat32, DType::kFloat64, DType::kFloat16})
                        .Kernel<BernoulliKernel>());
  registry.Register(Def("Bernoulli")
                        .Versions(22)
                        .Constraint("T1", {0}, {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16})
                        .Kernel<BernoulliKernel>());
}

}  // namespace tob
