// float16/bfloat16 <-> float32 conversion for kernels that compute half types in float32.
#pragma once

#include <cstdint>
#include <type_traits>

#if defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>
#endif

#include "core/dtype.h"
#include "core/half.h"
#include "framework/kernel.h"
#include "framework/thread_pool.h"

namespace tob {

template <typename T>
inline constexpr bool kIsHalfType = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

// The type a kernel computes T in: float32 for the 16-bit types, T otherwise.
template <typename T>
using ComputeType = std::conditional_t<kIsHalfType<T>, float, T>;

template <typename T>
void ConvertToFloat(const T* src, int64_t n, float* dst) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__F16C__)
  if constexpr (std::is_same_v<T, Float16>) {
    for (; i + 8 <= n; i += 8) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
  }
#endif
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

template <typename T>
void ConvertFromFloat(const float* src, int64_t n, T* dst) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__F16C__)
  if constexpr (std::is_same_v<T, Float16>) {
    for (; i + 8 <= n; i += 8) {
      __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
    }
  }
#endif
  for (; i < n; ++i) dst[i] = T(src[i]);
}

// Converts large arrays on the pool (conversion is memory-bound; a few threads still help).
template <typename T>
void ParallelConvertToFloat(ThreadPool* pool, const T* src, int64_t n, float* dst) {
  ParallelFor(pool, n, 1 << 16, [&](int64_t b, int64_t e) { ConvertToFloat(src + b, e - b, dst + b); });
}

template <typename T>
void ParallelConvertFromFloat(ThreadPool* pool, const float* src, int64_t n, T* dst) {
  ParallelFor(pool, n, 1 << 16, [&](int64_t b, int64_t e) { ConvertFromFloat(src + b, e - b, dst + b); });
}

// A float32 copy of a float16/bfloat16 tensor, in scratch memory from ctx.
inline StatusOr<Tensor> ToFloatScratch(const KernelContext& ctx, const Tensor& t) {
  TOB_ASSIGN_OR_RETURN(Tensor f, ctx.AllocateScratch(DType::kFloat32, t.shape()));
  if (t.dtype() == DType::kFloat16)
    ParallelConvertToFloat(ctx.thread_pool(), t.data<Float16>(), t.numel(), f.data<float>());
  else if (t.dtype() == DType::kBFloat16)
    ParallelConvertToFloat(ctx.thread_pool(), t.data<BFloat16>(), t.numel(), f.data<float>());
  else
    return ctx.Fail("internal: ToFloatScratch of ", DTypeName(t.dtype()));
  return f;
}

// Rounds a float32 tensor into `dst` (float16 or bfloat16, same element count).
inline Status FromFloatScratch(const KernelContext& ctx, const Tensor& f, Tensor* dst) {
  if (dst->dtype() == DType::kFloat16)
    ParallelConvertFromFloat(ctx.thread_pool(), f.data<float>(), f.numel(), dst->data<Float16>());
  else if (dst->dtype() == DType::kBFloat16)
    ParallelConvertFromFloat(ctx.thread_pool(), f.data<float>(), f.numel(), dst->data<BFloat16>());
  else
    return ctx.Fail("internal: FromFloatScratch into ", DTypeName(dst->dtype()));
  return Status::OK();
}

// Runs fn.template operator()<T>() -> Status for T in {float, double, Float16, BFloat16}.
template <typename Fn>
Status DispatchFloat(const KernelContext& ctx, DType t, Fn&& fn) {
  Status status;
  bool known = DispatchDType<float, double, Float16, BFloat16>(
      t, [&]<typename T>() { status = fn.template operator()<T>(); });
  if (!known) return ctx.Fail("dtype ", DTypeName(t), " is not supported");
  return status;
}

}  // namespace tob
