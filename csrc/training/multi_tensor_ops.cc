#include "training/multi_tensor_ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "core/float_convert.h"
#include "core/half.h"
#include "training/multi_tensor_apply.h"

namespace tob::training {

double SumOfSquaresFloat32(const float* x, int64_t n) {
  int64_t i = 0;
  double sum = 0.0;
#if defined(__AVX2__) && defined(__FMA__)
  // A float squared in float64 is exact; four accumulators hide the FMA latency.
  __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
  __m256d acc2 = _mm256_setzero_pd(), acc3 = _mm256_setzero_pd();
  for (; i + 16 <= n; i += 16) {
    __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    __m256d a_lo = _mm256_cvtps_pd(_mm256_castps256_ps128(a)), a_hi = _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1));
    __m256d b_lo = _mm256_cvtps_pd(_mm256_castps256_ps128(b)), b_hi = _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1));
    acc0 = _mm256_fmadd_pd(a_lo, a_lo, acc0);
    acc1 = _mm256_fmadd_pd(a_hi, a_hi, acc1);
    acc2 = _mm256_fmadd_pd(b_lo, b_lo, acc2);
    acc3 = _mm256_fmadd_pd(b_hi, b_hi, acc3);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(_mm256_add_pd(acc0, acc1), _mm256_add_pd(acc2, acc3)));
  sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
#endif
  for (; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return sum;
}

bool ScaleFloat32(const float* src, float* dst, int64_t n, float scale) {
  int64_t i = 0;
  bool non_finite = false;
#if defined(__AVX2__)
  const __m256 factor = _mm256_set1_ps(scale);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 inf = _mm256_set1_ps(INFINITY);
  __m256 flags = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    __m256 y = _mm256_mul_ps(_mm256_loadu_ps(src + i), factor);
    // |y| >= inf, or unordered (NaN): all ones in the lane.
    flags = _mm256_or_ps(flags, _mm256_cmp_ps(_mm256_and_ps(y, abs_mask), inf, _CMP_NLT_UQ));
    _mm256_storeu_ps(dst + i, y);
  }
  non_finite = _mm256_movemask_ps(flags) != 0;
#endif
  for (; i < n; ++i) {
    float y = src[i] * scale;
    non_finite |= !std::isfinite(y);
    dst[i] = y;
  }
  return non_finite;
}

namespace {

// The bits of inf (all exponent bits set) for each storage type: an element is non-finite when
// its bits without the sign are at least that. The max-reduction vectorises (vpmaxud / vpmaxuw).
template <typename T>
bool AnyNonFinite(const T* x, int64_t n) {
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>;
  constexpr Bits kAbsMask = sizeof(T) == 4 ? Bits(0x7fffffffu) : Bits(0x7fffu);
  constexpr Bits kInfBits = std::is_same_v<T, float>     ? Bits(0x7f800000u)
                            : std::is_same_v<T, Float16> ? Bits(0x7c00u)
                                                         : Bits(0x7f80u);
  const Bits* bits = reinterpret_cast<const Bits*>(x);
  Bits max = 0;
  for (int64_t i = 0; i < n; ++i) max = std::max<Bits>(max, bits[i] & kAbsMask);
  return max >= kInfBits;
}

template <typename T>
double SumOfSquares(const T* x, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return SumOfSquaresFloat32(x, n);
  } else {
    alignas(32) float block[kConvertBlock];
    double sum = 0.0;
    for (int64_t b = 0; b < n; b += kConvertBlock) {
      const int64_t len = std::min(kConvertBlock, n - b);
      ToFloat(x + b, block, len);
      sum += SumOfSquaresFloat32(block, len);
    }
    return sum;
  }
}

template <typename S, typename D>
bool Scale(const S* src, D* dst, int64_t n, float scale) {
  if constexpr (std::is_same_v<S, float> && std::is_same_v<D, float>) {
    return ScaleFloat32(src, dst, n, scale);
  } else {
    alignas(32) float block[kConvertBlock];
    bool non_finite = false;
    for (int64_t b = 0; b < n; b += kConvertBlock) {
      const int64_t len = std::min(kConvertBlock, n - b);
      const float* in = block;
      if constexpr (std::is_same_v<S, float>) in = src + b;
      else ToFloat(src + b, block, len);
      if constexpr (std::is_same_v<D, float>) {
        non_finite |= ScaleFloat32(in, dst + b, len, scale);
      } else {
        non_finite |= ScaleFloat32(in, block, len, scale);
        FromFloat(block, dst + b, len);
      }
    }
    return non_finite;
  }
}

template <typename Fn>
bool DispatchStorageType(DType dtype, Fn&& fn) {
  return DispatchDType<float, Float16, BFloat16>(dtype, std::forward<Fn>(fn));
}

Status CheckLists(const char* op, size_t num_tensors, size_t num_numels, std::span<const int64_t> numels,
                  std::span<const void* const> buffers) {
  if (num_tensors != num_numels) return InvalidArgument(op, ": ", num_tensors, " tensors but ", num_numels, " numels");
  for (size_t i = 0; i < numels.size(); ++i) {
    if (numels[i] < 0) return InvalidArgument(op, ": tensor ", i, " has numel ", numels[i]);
    if (numels[i] > 0 && buffers[i] == nullptr) return InvalidArgument(op, ": tensor ", i, " has a null buffer");
  }
  return Status::OK();
}

Status UnsupportedDType(const char* op, DType dtype) {
  return InvalidArgument(op, ": tensors must be float32, float16 or bfloat16, got ", DTypeName(dtype));
}

}  // namespace

StatusOr<L2NormResult> MultiTensorL2Norm(DType dtype, std::span<const void* const> tensors,
                                         std::span<const int64_t> numels, ThreadPool* pool) {
  TOB_RETURN_IF_ERROR(CheckLists("MultiTensorL2Norm", tensors.size(), numels.size(), numels, tensors));
  const MultiTensorPlan plan(numels);
  std::vector<double> partial(plan.segments().size(), 0.0);
  bool supported = DispatchStorageType(dtype, [&]<typename T>() {
    plan.Run(pool, [&](size_t index, const TensorSegment& seg) {
      partial[index] = SumOfSquares(static_cast<const T*>(tensors[seg.tensor]) + seg.begin, seg.end - seg.begin);
    });
  });
  if (!supported) return UnsupportedDType("MultiTensorL2Norm", dtype);
  L2NormResult result;
  result.per_tensor.assign(tensors.size(), 0.0);
  double total = 0.0;
  for (size_t s = 0; s < partial.size(); ++s) {
    result.per_tensor[plan.segments()[s].tensor] += partial[s];
    total += partial[s];
  }
  for (double& v : result.per_tensor) v = std::sqrt(v);
  result.total = std::sqrt(total);
  return result;
}

StatusOr<bool> MultiTensorScale(DType src_dtype, std::span<const void* const> srcs, DType dst_dtype,
                                std::span<void* const> dsts, std::span<const int64_t> numels, float scale,
                                ThreadPool* pool) {
  TOB_RETURN_IF_ERROR(CheckLists("MultiTensorScale", srcs.size(), numels.size(), numels, srcs));
  if (dsts.size() != srcs.size())
    return InvalidArgument("MultiTensorScale: ", srcs.size(), " sources but ", dsts.size(), " destinations");
  for (size_t i = 0; i < numels.size(); ++i)
    if (numels[i] > 0 && dsts[i] == nullptr)
      return InvalidArgument("MultiTensorScale: destination ", i, " has a null buffer");
  const MultiTensorPlan plan(numels);
  std::vector<char> non_finite(plan.segments().size(), 0);
  bool dst_supported = false;
  bool src_supported = DispatchStorageType(src_dtype, [&]<typename S>() {
    dst_supported = DispatchStorageType(dst_dtype, [&]<typename D>() {
      plan.Run(pool, [&](size_t index, const TensorSegment& seg) {
        const S* src = static_cast<const S*>(srcs[seg.tensor]) + seg.begin;
        D* dst = static_cast<D*>(dsts[seg.tensor]) + seg.begin;
        non_finite[index] = Scale(src, dst, seg.end - seg.begin, scale);
      });
    });
  });
  if (!src_supported) return UnsupportedDType("MultiTensorScale", src_dtype);
  if (!dst_supported) return UnsupportedDType("MultiTensorScale", dst_dtype);
  return std::any_of(non_finite.begin(), non_finite.end(), [](char c) { return c != 0; });
}

StatusOr<bool> MultiTensorHasNonFinite(DType dtype, std::span<const void* const> tensors,
                                       std::span<const int64_t> numels, ThreadPool* pool) {
  TOB_RETURN_IF_ERROR(CheckLists("MultiTensorHasNonFinite", tensors.size(), numels.size(), numels, tensors));
  const MultiTensorPlan plan(numels);
  std::atomic<bool> found{false};
  bool supported = DispatchStorageType(dtype, [&]<typename T>() {
    plan.Run(pool, [&](size_t, const TensorSegment& seg) {
      if (found.load(std::memory_order_relaxed)) return;
      if (AnyNonFinite(static_cast<const T*>(tensors[seg.tensor]) + seg.begin, seg.end - seg.begin))
        found.store(true, std::memory_order_relaxed);
    });
  });
  if (!supported) return UnsupportedDType("MultiTensorHasNonFinite", dtype);
  return found.load();
}

}  // namespace tob::training
