// Det (opsets 11, 22): the determinant of each [M, M] matrix of a [*, M, M] input, by LU
// decomposition with partial pivoting in float64 whatever the input type, rounded to the type
// once. A singular matrix gives 0 (an exactly zero pivot), M = 0 gives 1 (the empty product).
#include <algorithm>
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

// The determinant of the n x n row-major matrix `a` (overwritten by its LU factors).
double LuDeterminant(double* a, int64_t n) {
  double det = 1.0;
  for (int64_t col = 0; col < n; ++col) {
    int64_t pivot = col;
    for (int64_t r = col + 1; r < n; ++r)
      if (std::fabs(a[r * n + col]) > std::fabs(a[pivot * n + col])) pivot = r;
    if (a[pivot * n + col] == 0.0) return 0.0;
    if (pivot != col) {
      std::swap_ranges(a + pivot * n, a + (pivot + 1) * n, a + col * n);
      det = -det;
    }
    const double p = a[col * n + col];
    det *= p;
    for (int64_t r = col + 1; r < n; ++r) {
      const double f = a[r * n + col] / p;
      if (f == 0.0) continue;
      for (int64_t c = col + 1; c < n; ++c) a[r * n + c] -= f * a[col * n + c];
    }
  }
  return det;
}

class DetKernel final : public OpKernel {
 public:
  explicit DetKernel(const Node& node) : OpKernel(node) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<DetKernel>(node); }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    const int64_t n = x.dim(-1);
    const int64_t count = y.numel();
    TOB_ASSIGN_OR_RETURN(Tensor work, ctx.AllocateScratch(DType::kFloat64, {std::max<int64_t>(x.numel(), 1)}));
    double* a = work.data<double>();
    bool known = ew::Dispatch(ew::FloatList{}, x.dtype(), [&]<typename T>() {
      const T* in = x.data<T>();
      T* out = y.data<T>();
      ParallelFor(ctx.thread_pool(), count, 1, [&](int64_t b, int64_t e) {
        for (int64_t m = b; m < e; ++m) {
          double* mat = a + m * n * n;
          for (int64_t i = 0; i < n * n; ++i) mat[i] = Widen(in[m * n * n + i]);
          out[m] = Narrow<T>(LuDeterminant(mat, n));
        }
      });
    });
    return known ? Status::OK() : ctx.Fail("dtype ", DTypeName(x.dtype()), " is not supported");
  }
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuDetKernels(KernelRegistry& registry) {
  registry.Register(Def("Det")
                        .Versions(11, 21)
                        .Constraint("T", {0}, {DType::kFloat32, DType::kFloat64, DType::kFloat16})
                        .Kernel<cpu::DetKernel>());
  registry.Register(Def("Det")
                        .Versions(22)
                        .Constraint("T", {0}, {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16})
                        .Kernel<cpu::DetKernel>());
}

}  // namespace tob
