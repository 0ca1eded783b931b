// The loops every CPU reduction runs on a problem reshaped to (outer, reduce, inner):
//  - inner == 1: contiguous rows, reduced with many independent lanes (the compiler keeps them in
//    vector registers) inside a pairwise split, so float32 sums stay accurate on long rows;
//  - small inner: a [reduce, inner] block is read as one contiguous row whose lanes are a
//    multiple of inner wide, so lane j always sees column j % inner;
//  - wide inner: whole rows are combined into an accumulator row, vectorising over inner.
// A reduction is Combine(Map(x)) followed by a finish step done by the caller. float16/bfloat16
// are widened to float32 a tile at a time and accumulate in float32.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "core/float_convert.h"
#include "core/half.h"
#include "providers/cpu/simd/avx2_exp.h"

namespace tob::cpu {

enum class Combine { kSum, kProd, kMax, kMin };
enum class Map { kIdentity, kAbs, kSquare, kExpShifted };

// The type a reduction of T accumulates in.
template <typename T>
using AccOf = std::conditional_t<kIs16BitFloat<T>, float, T>;

template <Combine C, typename A>
constexpr A IdentityOf() {
  if constexpr (C == Combine::kSum) {
    return A(0);
  } else if constexpr (C == Combine::kProd) {
    return A(1);
  } else if constexpr (C == Combine::kMax) {
    if constexpr (std::is_floating_point_v<A>) return -std::numeric_limits<A>::infinity();
    else return std::numeric_limits<A>::lowest();
  } else {
    if constexpr (std::is_floating_point_v<A>) return std::numeric_limits<A>::infinity();
    else return std::numeric_limits<A>::max();
  }
}

// max/min that ignore a NaN in `b`; callers that must propagate NaN track it separately.
template <Combine C, typename A>
inline A PlainCombine(A a, A b) {
  if constexpr (C == Combine::kMax) return b > a ? b : a;
  else return b < a ? b : a;
}

template <Combine C, typename A>
inline A CombineOf(A a, A b) {
  if constexpr (C == Combine::kSum || C == Combine::kProd) {
    if constexpr (std::is_integral_v<A>) {
      // Integer sums and products wrap (two's complement), as ONNX runtimes do; going through
      // the unsigned type keeps that defined behaviour.
      using U = std::make_unsigned_t<A>;
      U r = C == Combine::kSum ? static_cast<U>(static_cast<U>(a) + static_cast<U>(b))
                               : static_cast<U>(static_cast<U>(a) * static_cast<U>(b));
      return static_cast<A>(r);
    } else {
      return C == Combine::kSum ? a + b : a * b;
    }
  } else if constexpr (std::is_floating_point_v<A>) {
    // NaN propagates, like numpy's maximum.reduce.
    return b != b ? b : PlainCombine<C, A>(a, b);
  } else {
    return PlainCombine<C, A>(a, b);
  }
}

#if defined(__AVX2__) && defined(__FMA__)
#endif

// out[i] = exp(x[i] - shift[i]), or exp(x[i] - scalar_shift) when shift is null. out may be x.
inline void ExpShifted(const float* x, const float* shift, float scalar_shift, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 s = _mm256_set1_ps(scalar_shift);
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_sub_ps(_mm256_loadu_ps(x + i), shift ? _mm256_loadu_ps(shift + i) : s);
    _mm256_storeu_ps(out + i, simd::Exp(v));
  }
#endif
  for (; i < n; ++i) out[i] = std::exp(x[i] - (shift ? shift[i] : scalar_shift));
}

template <Map M, typename A>
inline A MapOf(A x, A shift) {
  if constexpr (M == Map::kIdentity) return x;
  else if constexpr (M == Map::kAbs) return std::abs(x);
  else if constexpr (M == Map::kSquare) return x * x;
  else return std::exp(x - shift);
}

template <Map M, typename A>
inline A ShiftAt(const A* shift, int64_t i) {
  if constexpr (M == Map::kExpShifted) return shift[i];
  else return A(0);
}

// float32 exp maps are applied a block at a time by ExpShifted (vectorised) before combining.
template <Map M, typename A>
inline constexpr bool kExpFloat = M == Map::kExpShifted&& std::is_same_v<A, float>;

// Elements a pairwise leaf reduces with its lanes: bounded so a float32 lane sums few values,
// and so a widened half leaf fits on the stack.
inline constexpr int64_t kPairwiseLeaf = 2048;
// Width of the accumulator tile of the row-accumulating path (fits in L1 with its source rows).
inline constexpr int64_t kColumnTile = 512;
// Rows summed into a fresh partial before it is added to the running total (float sums).
inline constexpr int64_t kRowBlock = 64;
// inner below this takes the interleaved path; its lanes are at most this wide.
inline constexpr int64_t kInterleaveLanes = 64;

template <Combine C, Map M, typename S, typename A>
A ReduceLanes(const S* x, int64_t n, A shift) {
  constexpr int kLanes = static_cast<int>(std::max<size_t>(16, 128 / sizeof(A)));
  constexpr bool kTrackNan = (C == Combine::kMax || C == Combine::kMin) && std::is_floating_point_v<A>;
  A tail = IdentityOf<C, A>();
  int64_t i = 0;
  if (n >= kLanes) {
    A lanes[kLanes];
    // max/min lanes ignore NaN so their dependency chain stays one instruction long; a
    // separate sum of v - v turns NaN once a NaN (or an infinity) went by.
    [[maybe_unused]] A non_finite[kTrackNan ? kLanes : 1] = {};
    for (int j = 0; j < kLanes; ++j) lanes[j] = IdentityOf<C, A>();
    for (; i + kLanes <= n; i += kLanes)
      for (int j = 0; j < kLanes; ++j) {
        A v = MapOf<M, A>(static_cast<A>(x[i + j]), shift);
        if constexpr (kTrackNan) {
          lanes[j] = PlainCombine<C, A>(lanes[j], v);
          non_finite[j] += v - v;
        } else {
          lanes[j] = CombineOf<C, A>(lanes[j], v);
        }
      }
    for (int width = kLanes / 2; width > 0; width /= 2)
      for (int j = 0; j < width; ++j) lanes[j] = CombineOf<C, A>(lanes[j], lanes[j + width]);
    tail = lanes[0];
    if constexpr (kTrackNan) {
      A seen = A(0);
      for (int j = 0; j < kLanes; ++j) seen += non_finite[j];
      if (seen != seen) {  // rare: find out whether it was a NaN or only an infinity
        for (int64_t k = 0; k < i; ++k) {
          A v = MapOf<M, A>(static_cast<A>(x[k]), shift);
          if (v != v) return v;
        }
      }
    }
  }
  for (; i < n; ++i) tail = CombineOf<C, A>(tail, MapOf<M, A>(static_cast<A>(x[i]), shift));
  return tail;
}

// Combine(Map(x[0..n))) without the finish step; pairwise above kPairwiseLeaf elements.
template <Combine C, Map M, typename S, typename A>
A ReduceContiguous(const S* x, int64_t n, A shift) {
  if (n > kPairwiseLeaf) {
    int64_t half = (n / 2 + 63) / 64 * 64;
    return CombineOf<C, A>(ReduceContiguous<C, M, S, A>(x, half, shift),
                           ReduceContiguous<C, M, S, A>(x + half, n - half, shift));
  }
  if constexpr (kExpFloat<M, A>) {
    float values[kPairwiseLeaf];
    if constexpr (kIs16BitFloat<S>) {
      ToFloat(x, values, n);
      ExpShifted(values, nullptr, shift, values, n);
    } else {
      ExpShifted(x, nullptr, shift, values, n);
    }
    return ReduceLanes<C, Map::kIdentity, float, A>(values, n, shift);
  } else if constexpr (kIs16BitFloat<S>) {
    float wide[kPairwiseLeaf];
    ToFloat(x, wide, n);
    return ReduceLanes<C, M, float, A>(wide, n, shift);
  } else {
    return ReduceLanes<C, M, S, A>(x, n, shift);
  }
}

// out[i] = Combine over r < rows of Map(x[r * inner + i]), for inner < kInterleaveLanes. The
// block is read as one contiguous row; lane j accumulates column j % inner.
// kFullWidth (inner divides kInterleaveLanes) makes the lane count a constant, so the lanes live
// in registers.
template <bool kFullWidth, Combine C, Map M, typename S, typename A>
void ReduceInterleavedLeaf(const S* x, int64_t rows, int64_t inner, A* out, const A* shift) {
  const int64_t group = kInterleaveLanes / inner;  // rows per pass over the lanes
  const int64_t width = kFullWidth ? kInterleaveLanes : group * inner;
  A lanes[kInterleaveLanes];
  A lane_shift[kInterleaveLanes];
  for (int64_t j = 0; j < width; ++j) {
    lanes[j] = IdentityOf<C, A>();
    lane_shift[j] = ShiftAt<M>(shift, j % inner);
  }
  int64_t r = 0;
  for (; r + group <= rows; r += group) {
    const S* p = x + r * inner;
    if constexpr (kExpFloat<M, A>) {
      float mapped[kInterleaveLanes];
      ExpShifted(p, lane_shift, 0.0f, mapped, width);
      for (int64_t j = 0; j < width; ++j) lanes[j] = CombineOf<C, A>(lanes[j], mapped[j]);
    } else {
      for (int64_t j = 0; j < width; ++j)
        lanes[j] = CombineOf<C, A>(lanes[j], MapOf<M, A>(static_cast<A>(p[j]), lane_shift[j]));
    }
  }
  for (int64_t i = 0; i < inner; ++i) out[i] = lanes[i];
  for (int64_t g = 1; g < group; ++g)
    for (int64_t i = 0; i < inner; ++i) out[i] = CombineOf<C, A>(out[i], lanes[g * inner + i]);
  for (; r < rows; ++r)
    for (int64_t i = 0; i < inner; ++i)
      out[i] = CombineOf<C, A>(out[i], MapOf<M, A>(static_cast<A>(x[r * inner + i]), lane_shift[i]));
}

// ReduceInterleavedLeaf, pairwise over rows so long float32 sums stay accurate.
template <Combine C, Map M, typename S, typename A>
void ReduceInterleaved(const S* x, int64_t rows, int64_t inner, A* out, const A* shift) {
  const int64_t leaf_rows = std::max<int64_t>(1, kPairwiseLeaf / inner);
  if (rows > leaf_rows) {
    int64_t half = rows / 2;
    A right[kInterleaveLanes];
    ReduceInterleaved<C, M, S, A>(x, half, inner, out, shift);
    ReduceInterleaved<C, M, S, A>(x + half * inner, rows - half, inner, right, shift);
    for (int64_t i = 0; i < inner; ++i) out[i] = CombineOf<C, A>(out[i], right[i]);
    return;
  }
  const bool full_width = kInterleaveLanes % inner == 0;
  if constexpr (kIs16BitFloat<S>) {
    float wide[kPairwiseLeaf];
    ToFloat(x, wide, rows * inner);
    if (full_width) ReduceInterleavedLeaf<true, C, M, float, A>(wide, rows, inner, out, shift);
    else ReduceInterleavedLeaf<false, C, M, float, A>(wide, rows, inner, out, shift);
  } else {
    if (full_width) ReduceInterleavedLeaf<true, C, M, S, A>(x, rows, inner, out, shift);
    else ReduceInterleavedLeaf<false, C, M, S, A>(x, rows, inner, out, shift);
  }
}

// acc[i] = Combine(acc[i], Map(x[r * stride + i])) for r in [0, rows), i in [0, width), with
// width <= kColumnTile. `shift` (per column) is read only by Map::kExpShifted.
template <Combine C, Map M, typename S, typename A>
void AccumulateRows(const S* x, int64_t rows, int64_t stride, int64_t width, A* acc, const A* shift) {
  constexpr bool kBlocked = C == Combine::kSum && std::is_floating_point_v<A>;
  A block[kColumnTile];
  [[maybe_unused]] float wide[kIs16BitFloat<S> || kExpFloat<M, A> ? kColumnTile : 1];
  A* target = kBlocked ? block : acc;
  for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
    int64_t r1 = std::min(rows, r0 + kRowBlock);
    if constexpr (kBlocked)
      for (int64_t i = 0; i < width; ++i) block[i] = A(0);
    for (int64_t r = r0; r < r1; ++r) {
      const S* row = x + r * stride;
      if constexpr (kExpFloat<M, A>) {
        const float* src = nullptr;
        if constexpr (kIs16BitFloat<S>) {
          ToFloat(row, wide, width);
          src = wide;
        } else {
          src = row;
        }
        ExpShifted(src, shift, 0.0f, wide, width);
        for (int64_t i = 0; i < width; ++i) target[i] = CombineOf<C, A>(target[i], wide[i]);
      } else if constexpr (kIs16BitFloat<S>) {
        ToFloat(row, wide, width);
        for (int64_t i = 0; i < width; ++i)
          target[i] = CombineOf<C, A>(target[i], MapOf<M, A>(wide[i], ShiftAt<M>(shift, i)));
      } else {
        for (int64_t i = 0; i < width; ++i)
          target[i] = CombineOf<C, A>(target[i], MapOf<M, A>(static_cast<A>(row[i]), ShiftAt<M>(shift, i)));
      }
    }
    if constexpr (kBlocked)
      for (int64_t i = 0; i < width; ++i) acc[i] += block[i];
  }
}

}  // namespace tob::cpu
