// The unary kernel template shared by unary_ops.cc and activations.cc: one dtype dispatch per
// Compute, then an array op over contiguous memory, split across threads.
#pragma once

#include <memory>
#include <type_traits>

#include "providers/cpu/elementwise/elementwise_type_sets.h"
#include "providers/cpu/elementwise/vector_math.h"

namespace tob::ew {

// Float32 arrays through a vectorised function from vector_math.h; other compute types (double,
// integers) through the scalar functor.
template <typename ScalarOp, void (*kVecFn)(const float*, float*, int64_t)>
struct VecMapOp {
  ScalarOp op;
  template <typename In, typename Out>
  void operator()(const In* x, Out* y, int64_t n) const {
    if constexpr (std::is_same_v<In, float> && std::is_same_v<Out, float>) {
      kVecFn(x, y, n);
    } else {
      for (int64_t i = 0; i < n; ++i) y[i] = op(x[i]);
    }
  }
};

// An array op applied in place, as the `post` step of a binary kernel (BiasGelu = Add + Gelu).
template <typename ArrayOp>
struct InPlace {
  ArrayOp op;
  template <typename T>
  void operator()(T* y, int64_t n) const {
    op(static_cast<const T*>(y), y, n);
  }
};

// Builds the array op from the node's attributes; the default has none.
template <typename ArrayOp>
struct ArrayOpFactory {
  static StatusOr<ArrayOp> Make(const Node&) { return ArrayOp{}; }
};

// y = array_op(x) for x of a type in `Types`; the output has the input's type, or `Out` when
// that is not void (bool for IsNaN/IsInf).
template <typename ArrayOp, typename Types, int64_t kGrain = kCheapGrain, typename Out = void>
class UnaryKernel final : public OpKernel {
 public:
  UnaryKernel(const Node& node, ArrayOp op) : OpKernel(node), op_(op) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(ArrayOp op, ArrayOpFactory<ArrayOp>::Make(node));
    return MakeKernel<UnaryKernel>(node, op);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    Status status;
    bool known = Dispatch(Types{}, x.dtype(), [&]<typename T>() {
      using O = std::conditional_t<std::is_void_v<Out>, T, Out>;
      if (y.dtype() != DTypeOf<O>()) {
        status = ctx.Fail("output is ", DTypeName(y.dtype()), ", expected ", DTypeName(DTypeOf<O>()));
        return;
      }
      status = RunUnary<T, O>(ctx, x, y, op_, kGrain);
    });
    return known ? status : UnsupportedType(ctx, x.dtype());
  }

 private:
  ArrayOp op_;
};

}  // namespace tob::ew
