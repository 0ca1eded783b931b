// ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceLogSum,
// ReduceLogSumExp, ReduceSumSquare: each is Combine(Map(x)) over the reduced axes followed by a
// finish step, run by the shared loops of reduce_loops.h.
#include <cmath>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "framework/kernel_registry.h"
#include "providers/cpu/reduction/reduce_driver.h"
#include "providers/cpu/reduction/reduce_layout.h"

namespace tob::cpu {
namespace {

enum class ReduceOp { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };
enum class Finish { kNone, kMean, kSqrt, kLog, kLogPlusShift };
// Where the axes come from: an attribute (older opsets) or the optional second input.
enum class AxesFrom { kAttribute, kInput };

template <typename T, typename A>
inline T FromAcc(A a) {
  if constexpr (kIs16BitFloat<T>) return T(static_cast<float>(a));
  else return static_cast<T>(a);
}

template <typename T, Finish F, typename A>
void FinishLoop(KernelContext& ctx, const A* acc, const A* shift, int64_t n, int64_t count, T* out) {
  ParallelFor(ctx.thread_pool(), n, kReduceGrain, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      A a = acc[k];
      if constexpr (F == Finish::kMean) a = a / static_cast<A>(count);  // 0 / 0 = NaN when empty
      else if constexpr (F == Finish::kSqrt) a = std::sqrt(a);
      else if constexpr (F == Finish::kLog) a = std::log(a);
      else if constexpr (F == Finish::kLogPlusShift) a = std::log(a) + shift[k];
      out[k] = FromAcc<T>(a);
    }
  });
}

template <typename T, typename A>
void FinishOutputs(KernelContext& ctx, Finish finish, const A* acc, const A* shift, int64_t n, int64_t count, T* out) {
  switch (finish) {
    case Finish::kNone:
      if constexpr (std::is_same_v<A, T>) {
        if (acc == out) return;
      }
      return FinishLoop<T, Finish::kNone>(ctx, acc, shift, n, count, out);
    case Finish::kMean: return FinishLoop<T, Finish::kMean>(ctx, acc, shift, n, count, out);
    case Finish::kSqrt: return FinishLoop<T, Finish::kSqrt>(ctx, acc, shift, n, count, out);
    case Finish::kLog: return FinishLoop<T, Finish::kLog>(ctx, acc, shift, n, count, out);
    case Finish::kLogPlusShift: return FinishLoop<T, Finish::kLogPlusShift>(ctx, acc, shift, n, count, out);
  }
}

// The accumulator: the output itself when it has the accumulation type, else scratch.
template <typename T>
StatusOr<AccOf<T>*> AccumulatorFor(KernelContext& ctx, T* out, int64_t n, Tensor* holder) {
  using A = AccOf<T>;
  if constexpr (std::is_same_v<A, T>) {
    return out;
  } else {
    TOB_ASSIGN_OR_RETURN(*holder, ctx.AllocateScratch(DTypeOf<A>(), {n}));
    return holder->data<A>();
  }
}

template <typename T, Combine C, Map M>
Status RunReduce(KernelContext& ctx, const T* x, const ReducePlan& plan, Finish finish, T* out) {
  using A = AccOf<T>;
  const ReduceExtent& first = plan.passes.front();
  const int64_t n = plan.passes.back().outputs();
  // Nothing is reduced (noop_with_empty_axes, or only size-1 axes) and the op is the identity
  // on one element.
  if (plan.passes.size() == 1 && first.reduce == 1 && M == Map::kIdentity &&
      (finish == Finish::kNone || finish == Finish::kMean)) {
    std::memcpy(out, x, static_cast<size_t>(n) * sizeof(T));
    return Status::OK();
  }
  Tensor holder;
  TOB_ASSIGN_OR_RETURN(A * acc, AccumulatorFor<T>(ctx, out, n, &holder));
  if (plan.passes.size() == 1) {
    TOB_RETURN_IF_ERROR((ReduceToAcc<C, M, T, A>(ctx, x, first, acc, nullptr)));
  } else {
    // Map applies to input elements only: later passes combine partial results as they are.
    Tensor partials[2];
    const A* src = nullptr;
    for (size_t k = 0; k < plan.passes.size(); ++k) {
      const ReduceExtent& e = plan.passes[k];
      A* dst = acc;
      if (k + 1 < plan.passes.size()) {
        TOB_ASSIGN_OR_RETURN(partials[k % 2], ctx.AllocateScratch(DTypeOf<A>(), {e.outputs()}));
        dst = partials[k % 2].template data<A>();
      }
      if (k == 0) TOB_RETURN_IF_ERROR((ReduceToAcc<C, M, T, A>(ctx, x, e, dst, nullptr)));
      else TOB_RETURN_IF_ERROR((ReduceToAcc<C, Map::kIdentity, A, A>(ctx, src, e, dst, nullptr)));
      src = dst;
    }
  }
  FinishOutputs<T, A>(ctx, finish, acc, nullptr, n, plan.count, out);
  return Status::OK();
}

// log(sum(exp(x - m))) + m with m the maximum, so large inputs do not overflow. The shift is
// per output, so this runs as one pass (over a permuted copy when the axes are not adjacent).
template <typename T>
Status RunLogSumExp(KernelContext& ctx, const T* x, const ReducePlan& plan, T* out) {
  using A = AccOf<T>;
  Tensor permuted;
  ReduceExtent e = plan.passes.front();
  if (plan.passes.size() > 1) {
    TOB_ASSIGN_OR_RETURN(permuted, ctx.AllocateScratch(DTypeOf<T>(), {NumElements(plan.dims)}));
    PermuteCopy(x, permuted.data<T>(), plan.dims, plan.perm, ctx.thread_pool());
    x = permuted.data<T>();
    e = plan.permuted;
  }
  const int64_t n = e.outputs();
  TOB_ASSIGN_OR_RETURN(Tensor shift_tensor, ctx.AllocateScratch(DTypeOf<A>(), {n}));
  A* shift = shift_tensor.data<A>();
  TOB_RETURN_IF_ERROR((ReduceToAcc<Combine::kMax, Map::kIdentity, T, A>(ctx, x, e, shift, nullptr)));
  // An infinite or NaN maximum cannot be subtracted; exp/log then give the right inf/NaN.
  for (int64_t k = 0; k < n; ++k)
    if (!std::isfinite(shift[k])) shift[k] = A(0);
  Tensor holder;
  TOB_ASSIGN_OR_RETURN(A * acc, AccumulatorFor<T>(ctx, out, n, &holder));
  TOB_RETURN_IF_ERROR((ReduceToAcc<Combine::kSum, Map::kExpShifted, T, A>(ctx, x, e, acc, shift)));
  FinishOutputs<T, A>(ctx, Finish::kLogPlusShift, acc, shift, n, plan.count, out);
  return Status::OK();
}

class ReduceKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, ReduceOp op, AxesFrom from) {
    std::vector<int64_t> axes;
    int64_t noop = 0;
    if (from == AxesFrom::kAttribute) {
      TOB_RETURN_IF_ERROR(node.GetAttr("axes", &axes, std::vector<int64_t>{}));
    } else {
      TOB_RETURN_IF_ERROR(node.GetAttr("noop_with_empty_axes", &noop, 0));
    }
    return MakeKernel<ReduceKernel>(node, op, from, noop != 0, std::move(axes));
  }

  ReduceKernel(const Node& node, ReduceOp op, AxesFrom from, bool noop, std::vector<int64_t> axes)
      : OpKernel(node), op_(op), from_(from), noop_with_empty_axes_(noop), axes_(std::move(axes)) {}

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    std::vector<int64_t> axes = axes_;
    if (from_ == AxesFrom::kInput && ctx.input(1) != nullptr && ctx.input(1)->numel() > 0)
      axes = ctx.input(1)->ToInt64Vector();
    std::vector<bool> mask;
    if (axes.empty()) {
      mask.assign(static_cast<size_t>(x.rank()), !noop_with_empty_axes_);
    } else {
      Status s = ReducedAxesMask(axes, x.rank(), &mask);
      if (!s.ok()) return ctx.Fail(s.message());
    }
    ReducePlan plan = PlanReduce(x.shape(), mask);
    if (plan.passes.back().outputs() != y.numel())
      return ctx.Fail("output has ", y.numel(), " elements, the reduction gives ", plan.passes.back().outputs());
    Status status;
    bool known =
        DispatchDType<float, double, Float16, BFloat16, int32_t, int64_t, uint32_t, uint64_t, int8_t, uint8_t, bool>(
            x.dtype(), [&]<typename T>() { status = RunTyped<T>(ctx, x, plan, y.data<T>()); });
    if (!known) return ctx.Fail("input dtype ", DTypeName(x.dtype()), " is not supported");
    return status;
  }

 private:
  template <typename T>
  Status RunTyped(KernelContext& ctx, const Tensor& x, const ReducePlan& p, T* out) const {
    const T* src = x.data<T>();
    constexpr bool kFloat = std::is_floating_point_v<T> || kIs16BitFloat<T>;
    constexpr bool kBool = std::is_same_v<T, bool>;
    using enum Combine;
    using enum Map;
    switch (op_) {
      case ReduceOp::kMax: return RunReduce<T, kMax, kIdentity>(ctx, src, p, Finish::kNone, out);
      case ReduceOp::kMin: return RunReduce<T, kMin, kIdentity>(ctx, src, p, Finish::kNone, out);
      case ReduceOp::kSum:
        if constexpr (!kBool) return RunReduce<T, kSum, kIdentity>(ctx, src, p, Finish::kNone, out);
        break;
      case ReduceOp::kProd:
        if constexpr (!kBool) return RunReduce<T, kProd, kIdentity>(ctx, src, p, Finish::kNone, out);
        break;
      case ReduceOp::kMean:
        if constexpr (kFloat) return RunReduce<T, kSum, kIdentity>(ctx, src, p, Finish::kMean, out);
        break;
      case ReduceOp::kL1:
        if constexpr (kFloat) return RunReduce<T, kSum, kAbs>(ctx, src, p, Finish::kNone, out);
        break;
      case ReduceOp::kL2:
        if constexpr (kFloat) return RunReduce<T, kSum, kSquare>(ctx, src, p, Finish::kSqrt, out);
        break;
      case ReduceOp::kSumSquare:
        if constexpr (kFloat) return RunReduce<T, kSum, kSquare>(ctx, src, p, Finish::kNone, out);
        break;
      case ReduceOp::kLogSum:
        if constexpr (kFloat) return RunReduce<T, kSum, kIdentity>(ctx, src, p, Finish::kLog, out);
        break;
      case ReduceOp::kLogSumExp:
        if constexpr (kFloat) return RunLogSumExp<T>(ctx, src, p, out);
        break;
    }
    return ctx.Fail("input dtype ", DTypeName(x.dtype()), " is not supported by this reduction");
  }

  ReduceOp op_;
  AxesFrom from_;
  bool noop_with_empty_axes_;
  std::vector<int64_t> axes_;
};

std::vector<DType> Types(std::initializer_list<DType> types) { return types; }

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuReduceKernels(KernelRegistry& registry) {
  using namespace cpu;  // the kernels above
  using enum DType;
  const std::vector<DType> floats = FloatTypes();
  const std::vector<DType> sum_types =
      Types({kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt32, kUInt64});
  const std::vector<DType> minmax_types =
      Types({kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt32, kUInt64, kInt8, kUInt8, kBool});
  struct Entry {
    const char* op_type;
    ReduceOp op;
    int axes_input_since;  // opset from which axes is an input instead of an attribute
    const std::vector<DType>* types;
  };
  const Entry entries[] = {
      {"ReduceSum", ReduceOp::kSum, 13, &sum_types},
      {"ReduceProd", ReduceOp::kProd, 18, &sum_types},
      {"ReduceMax", ReduceOp::kMax, 18, &minmax_types},
      {"ReduceMin", ReduceOp::kMin, 18, &minmax_types},
      {"ReduceMean", ReduceOp::kMean, 18, &floats},
      {"ReduceL1", ReduceOp::kL1, 18, &floats},
      {"ReduceL2", ReduceOp::kL2, 18, &floats},
      {"ReduceLogSum", ReduceOp::kLogSum, 18, &floats},
      {"ReduceLogSumExp", ReduceOp::kLogSumExp, 18, &floats},
      {"ReduceSumSquare", ReduceOp::kSumSquare, 18, &floats},
  };
  for (const Entry& entry : entries) {
    ReduceOp op = entry.op;
    registry.Register(Def(entry.op_type)
                          .Versions(1, entry.axes_input_since - 1)
                          .Constraint("T", {0}, *entry.types)
                          .Factory([op](const Node& n) { return ReduceKernel::Create(n, op, AxesFrom::kAttribute); }));
    registry.Register(Def(entry.op_type)
                          .Versions(entry.axes_input_since)
                          .Constraint("T", {0}, *entry.types)
                          .Constraint("tensor(int64)", {1}, {kInt64})
                          .Factory([op](const Node& n) { return ReduceKernel::Create(n, op, AxesFrom::kInput); }));
  }
}

}  // namespace tob
