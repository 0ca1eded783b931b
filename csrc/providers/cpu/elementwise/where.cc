// Where(condition, X, Y): a three-way broadcasting select. The select only moves bits, so it is
// instantiated per element size rather than per type.
#include "providers/cpu/elementwise/elementwise_type_sets.h"
#include "providers/cpu/tensor/string_moves.h"

namespace tob::ew {

namespace {

template <typename U>
inline void WhereSpan(const uint8_t* c, int64_t sc, const U* x, int64_t sx, const U* y, int64_t sy, U* o, int64_t n) {
  if (sc != 0 && sx != 0 && sy != 0) {
    for (int64_t i = 0; i < n; ++i) o[i] = c[i] != 0 ? x[i] : y[i];
  } else if (sc == 0) {  // one condition for the whole run: a copy or a fill
    const U* src = c[0] != 0 ? x : y;
    int64_t s = c[0] != 0 ? sx : sy;
    if (s != 0) {
      for (int64_t i = 0; i < n; ++i) o[i] = src[i];
    } else {
      const U v = *src;
      for (int64_t i = 0; i < n; ++i) o[i] = v;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = c[i] != 0 ? x[i * sx] : y[i * sy];
  }
}

class WhereKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<WhereKernel>(node); }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& cond = *ctx.input(0);
    const Tensor& x = *ctx.input(1);
    const Tensor& y = *ctx.input(2);
    Tensor& out = *ctx.output(0);
    if (cond.dtype() != DType::kBool) return ctx.Fail("condition must be bool, got ", DTypeName(cond.dtype()));
    if (x.dtype() != y.dtype() || out.dtype() != x.dtype())
      return ctx.Fail("X and Y must have the same type, got ", DTypeName(x.dtype()), " and ", DTypeName(y.dtype()));
    auto plan_or = MakeBroadcastPlan({&cond.shape(), &x.shape(), &y.shape()}, out.shape());
    if (!plan_or.ok()) return ctx.Fail(plan_or.status().message());
    const BroadcastPlan& plan = plan_or.value();
    if (plan.numel == 0) return Status::OK();
    switch (DTypeSize(x.dtype())) {
      case 1: Run<uint8_t>(ctx, plan, cond, x, y, out); break;
      case 2: Run<uint16_t>(ctx, plan, cond, x, y, out); break;
      case 4: Run<uint32_t>(ctx, plan, cond, x, y, out); break;
      case 8: Run<uint64_t>(ctx, plan, cond, x, y, out); break;
      default: return UnsupportedType(ctx, x.dtype());
    }
    return Status::OK();
  }

 private:
  template <typename U>
  static void Run(const KernelContext& ctx, const BroadcastPlan& plan, const Tensor& cond, const Tensor& x,
                  const Tensor& y, Tensor& out) {
    const uint8_t* cp = static_cast<const uint8_t*>(cond.raw_data());
    const U* xp = static_cast<const U*>(x.raw_data());
    const U* yp = static_cast<const U*>(y.raw_data());
    U* op = static_cast<U*>(out.raw_data());
    const int64_t sc = plan.inner_stride(0), sx = plan.inner_stride(1), sy = plan.inner_stride(2);
    ParallelFor(ctx.thread_pool(), plan.numel, kCheapGrain, [&](int64_t begin, int64_t end) {
      ForEachSpan(plan, begin, end, [&](int64_t o_off, const auto& in_off, int64_t count) {
        WhereSpan(cp + in_off[0], sc, xp + in_off[1], sx, yp + in_off[2], sy, op + o_off, count);
      });
    });
  }
};

}  // namespace
}  // namespace tob::ew

namespace tob {

void RegisterCpuWhereKernels(KernelRegistry& registry) {
  using namespace ew;                            // the kernels above
  std::vector<DType> all = AllTypesAndString();  // strings move by element number (string_moves.h)
  std::vector<DType> all_no_bf16 = all;
  std::erase(all_no_bf16, DType::kBFloat16);
  registry.Register(Def("Where")
                        .Versions(9, 15)
                        .Constraint("B", {0}, {DType::kBool})
                        .Constraint("T", {1, 2}, all_no_bf16)
                        .Factory(tensor_ops::MovesStrings(&WhereKernel::Create, {1, 2})));
  registry.Register(Def("Where")
                        .Versions(16)
                        .Constraint("B", {0}, {DType::kBool})
                        .Constraint("T", {1, 2}, all)
                        .Factory(tensor_ops::MovesStrings(&WhereKernel::Create, {1, 2})));
}

}  // namespace tob
