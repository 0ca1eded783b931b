// For CPU kernels that compute the 16-bit float types in float32: whole-tensor float32 copies
// in scratch memory, conversions spread over the thread pool, and the float-type dispatch. The
// conversion itself is core/float_convert.h's.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/float_convert.h"
#include "core/half.h"
#include "framework/kernel.h"
#include "framework/thread_pool.h"

namespace tob {

// Converts large arrays on the pool (conversion is memory-bound; a few threads still help).
template <typename T>
void ParallelConvertToFloat(ThreadPool* pool, const T* src, int64_t n, float* dst) {
  ParallelFor(pool, n, 1 << 16, [&](int64_t b, int64_t e) { ToFloat(src + b, dst + b, e - b); });
}

template <typename T>
void ParallelConvertFromFloat(ThreadPool* pool, const float* src, int64_t n, T* dst) {
  ParallelFor(pool, n, 1 << 16, [&](int64_t b, int64_t e) { FromFloat(src + b, dst + b, e - b); });
}

// A float32 copy of a float16/bfloat16 tensor, in scratch memory from ctx.
inline StatusOr<Tensor> ToFloatScratch(const KernelContext& ctx, const Tensor& t) {
  TOB_ASSIGN_OR_RETURN(Tensor f, ctx.AllocateScratch(DType::kFloat32, t.shape()));
  if (t.dtype() == DType::kFloat16)
    ParallelConvertToFloat(ctx.thread_pool(), t.data<Float16>(), t.numel(), f.data<float>());
  else if (t.dtype() == DType::kBFloat16)
    ParallelConvertToFloat(ctx.thread_pool(), t.data<BFloat16>(), t.numel(), f.data<float>());
  else return ctx.Fail("internal: ToFloatScratch of ", DTypeName(t.dtype()));
  return f;
}

// Rounds a float32 tensor into `dst` (float16 or bfloat16, same element count).
inline Status FromFloatScratch(const KernelContext& ctx, const Tensor& f, Tensor* dst) {
  if (dst->dtype() == DType::kFloat16)
    ParallelConvertFromFloat(ctx.thread_pool(), f.data<float>(), f.numel(), dst->data<Float16>());
  else if (dst->dtype() == DType::kBFloat16)
    ParallelConvertFromFloat(ctx.thread_pool(), f.data<float>(), f.numel(), dst->data<BFloat16>());
  else return ctx.Fail("internal: FromFloatScratch into ", DTypeName(dst->dtype()));
  return Status::OK();
}

// Runs fn.template operator()<T>() -> Status for T in {float, double, Float16, BFloat16}.
template <typename Fn>
Status DispatchFloat(const KernelContext& ctx, DType t, Fn&& fn) {
  Status status;
  bool known =
      DispatchDType<float, double, Float16, BFloat16>(t, [&]<typename T>() { status = fn.template operator()<T>(); });
  if (!known) return ctx.Fail("dtype ", DTypeName(t), " is not supported");
  return status;
}

}  // namespace tob
