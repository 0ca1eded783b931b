// The loop drivers every elementwise kernel is built from: dtype dispatch over type lists,
// unary maps, broadcasting binary maps and the 16-bit -> float32 chunking.
//
// Inner loops are plain `for` loops over contiguous compute-typed arrays calling an inlined
// functor from elementwise_math.h, which GCC/Clang vectorise at -O3 (x86-64-v3). float16 and
// bfloat16 are converted to float32 in stack chunks (F16C / shifts), computed with the float32
// loop and converted back, so they get the same vector code as float32.
#pragma once

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/dtype.h"
#include "core/float_convert.h"
#include "framework/kernel.h"
#include "framework/thread_pool.h"
#include "math/elementwise_math.h"
#include "providers/cpu/elementwise/broadcast.h"

namespace tob::ew {

// Elements per thread chunk: cheap ops (add, compare) pay for a thread only on large tensors;
// transcendental ops much sooner.
inline constexpr int64_t kCheapGrain = 32768;
inline constexpr int64_t kExpensiveGrain = 4096;
// Elements of a 16-bit span converted to float32 at a time (stays in L1).
inline constexpr int64_t kHalfChunk = 512;

template <typename... Ts>
struct TypeList {};

using FloatList = TypeList<float, double, Float16, BFloat16>;
using SignedIntList = TypeList<int8_t, int16_t, int32_t, int64_t>;
using IntList = TypeList<int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t>;
using NumericList = TypeList<float, double, Float16, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t,
                             uint32_t, uint64_t>;
using AllList = TypeList<float, double, Float16, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t,
                         uint32_t, uint64_t, bool>;

// Calls fn.template operator()<T>() for the T in the list matching `dtype`; false if none does.
template <typename... Ts, typename Fn>
bool Dispatch(TypeList<Ts...>, DType dtype, Fn&& fn) {
  return DispatchDType<Ts...>(dtype, std::forward<Fn>(fn));
}

// A "no post-processing" array op for the binary driver.
struct NoPost {
  template <typename T>
  void operator()(T*, int64_t) const {}
};

// ---- unary ----

// Applies a scalar functor over an array; the default array op of every unary kernel.
template <typename Op>
struct MapOp {
  Op op;
  template <typename In, typename Out>
  void operator()(const In* x, Out* y, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) y[i] = op(x[i]);
  }
};

// y[i] = array_op(x) over storage types In/Out, array_op seeing compute-typed arrays.
template <typename In, typename Out, typename ArrayOp>
void UnarySpan(const In* x, Out* y, int64_t n, const ArrayOp& array_op) {
  if constexpr (!kIs16BitFloat<In> && !kIs16BitFloat<Out>) {
    array_op(x, y, n);
  } else {
    [[maybe_unused]] ComputeType<In> xbuf[kHalfChunk];
    [[maybe_unused]] ComputeType<Out> ybuf[kHalfChunk];
    for (int64_t c = 0; c < n; c += kHalfChunk) {
      int64_t m = std::min(kHalfChunk, n - c);
      const ComputeType<In>* xp;
      if constexpr (kIs16BitFloat<In>) {
        ToFloat(x + c, xbuf, m);
        xp = xbuf;
      } else {
        xp = x + c;
      }
      if constexpr (kIs16BitFloat<Out>) {
        array_op(xp, ybuf, m);
        FromFloat(ybuf, y + c, m);
      } else {
        array_op(xp, y + c, m);
      }
    }
  }
}

template <typename In, typename Out, typename ArrayOp>
Status RunUnary(const KernelContext& ctx, const Tensor& x, Tensor& y, const ArrayOp& array_op,
                int64_t grain = kCheapGrain) {
  if (x.numel() != y.numel())
    return ctx.Fail("output shape ", ShapeToString(y.shape()), " does not match input ", ShapeToString(x.shape()));
  const In* xp = x.data<In>();
  Out* yp = y.data<Out>();
  ParallelFor(ctx.thread_pool(), x.numel(), grain,
              [&](int64_t begin, int64_t end) { UnarySpan<In, Out>(xp + begin, yp + begin, end - begin, array_op); });
  return Status::OK();
}

// ---- binary ----

// o[i] = op(a[i * sa], b[i * sb]) with sa, sb in {0, 1}, on compute types; four separate loops so
// each one vectorises (the stride-0 operand is hoisted into a register).
template <typename A, typename B, typename O, typename Op>
inline void BinaryComputeLoop(const A* a, int64_t sa, const B* b, int64_t sb, O* o, int64_t n, const Op& op) {
  if (sa != 0 && sb != 0) {
    for (int64_t i = 0; i < n; ++i) o[i] = op(a[i], b[i]);
  } else if (sa != 0) {
    const B bv = *b;
    for (int64_t i = 0; i < n; ++i) o[i] = op(a[i], bv);
  } else if (sb != 0) {
    const A av = *a;
    for (int64_t i = 0; i < n; ++i) o[i] = op(av, b[i]);
  } else {
    const O v = op(*a, *b);
    for (int64_t i = 0; i < n; ++i) o[i] = v;
  }
}

// One span in storage types; `post` (an in-place array op on the compute-typed result) lets
// fused kernels (BiasGelu, Mean) finish the value before it is rounded to 16 bits.
template <typename SA, typename SB, typename SO, typename Op, typename Post>
inline void BinarySpan(const SA* a, int64_t sa, const SB* b, int64_t sb, SO* o, int64_t n, const Op& op,
                       const Post& post) {
  if constexpr (!kIs16BitFloat<SA> && !kIs16BitFloat<SB> && !kIs16BitFloat<SO>) {
    BinaryComputeLoop(a, sa, b, sb, o, n, op);
    post(o, n);
  } else {
    [[maybe_unused]] ComputeType<SA> abuf[kHalfChunk];
    [[maybe_unused]] ComputeType<SB> bbuf[kHalfChunk];
    [[maybe_unused]] ComputeType<SO> obuf[kHalfChunk];
    for (int64_t c = 0; c < n; c += kHalfChunk) {
      int64_t m = std::min(kHalfChunk, n - c);
      const ComputeType<SA>* ap;
      const ComputeType<SB>* bp;
      ComputeType<SO>* op_;
      if constexpr (kIs16BitFloat<SA>) {
        ToFloat(a + c * sa, abuf, sa ? m : 1);
        ap = abuf;
      } else {
        ap = a + c * sa;
      }
      if constexpr (kIs16BitFloat<SB>) {
        ToFloat(b + c * sb, bbuf, sb ? m : 1);
        bp = bbuf;
      } else {
        bp = b + c * sb;
      }
      if constexpr (kIs16BitFloat<SO>) {
        op_ = obuf;
      } else {
        op_ = o + c;
      }
      BinaryComputeLoop(ap, sa, bp, sb, op_, m, op);
      post(op_, m);
      if constexpr (kIs16BitFloat<SO>) FromFloat(obuf, o + c, m);
    }
  }
}

// out = op(a, b) with numpy broadcasting onto out's (pre-allocated) shape.
template <typename SA, typename SB, typename SO, typename Op, typename Post = NoPost>
Status RunBinary(const KernelContext& ctx, const Tensor& a, const Tensor& b, Tensor& out, const Op& op,
                 int64_t grain = kCheapGrain, const Post& post = Post()) {
  const SA* ap = a.data<SA>();
  const SB* bp = b.data<SB>();
  SO* op_ = out.data<SO>();
  // Same shapes, or one scalar operand: a flat loop, without building a broadcast plan (which
  // costs more than the op itself on the tiny tensors of shape arithmetic).
  const bool a_full = a.shape() == out.shape(), b_full = b.shape() == out.shape();
  if ((a_full || a.numel() == 1) && (b_full || b.numel() == 1) && out.numel() > 0) {
    const int64_t sa = a_full ? 1 : 0, sb = b_full ? 1 : 0;
    ParallelFor(ctx.thread_pool(), out.numel(), grain, [&](int64_t begin, int64_t end) {
      BinarySpan(ap + begin * sa, sa, bp + begin * sb, sb, op_ + begin, end - begin, op, post);
    });
    return Status::OK();
  }
  auto plan_or = MakeBroadcastPlan({&a.shape(), &b.shape()}, out.shape());
  if (!plan_or.ok()) return ctx.Fail(plan_or.status().message());
  const BroadcastPlan& plan = plan_or.value();
  if (plan.numel == 0) return Status::OK();
  const int64_t sa = plan.inner_stride(0), sb = plan.inner_stride(1);
  ParallelFor(ctx.thread_pool(), plan.numel, grain, [&](int64_t begin, int64_t end) {
    ForEachSpan(plan, begin, end, [&](int64_t o_off, const auto& in_off, int64_t count) {
      BinarySpan(ap + in_off[0], sa, bp + in_off[1], sb, op_ + o_off, count, op, post);
    });
  });
  return Status::OK();
}

// ---- helpers for kernels ----

// Copies src into dst (same element count), in parallel for large tensors.
inline void ParallelCopy(const KernelContext& ctx, const Tensor& src, Tensor& dst) {
  if (src.raw_data() == dst.raw_data()) return;
  const char* s = static_cast<const char*>(src.raw_data());
  char* d = static_cast<char*>(dst.raw_data());
  ParallelFor(ctx.thread_pool(), static_cast<int64_t>(src.nbytes()), 1 << 20,
              [&](int64_t begin, int64_t end) { std::memcpy(d + begin, s + begin, end - begin); });
}

// The message for a dtype no instantiation covers (the registry should have rejected it).
inline Status UnsupportedType(const KernelContext& ctx, DType t) {
  return ctx.Fail("unsupported element type ", DTypeName(t));
}

}  // namespace tob::ew
