// MaxPool (optional Indices), AveragePool, LpPool and their global forms. Planes (n, c) are
// independent and split across the pool; windows are clipped to the input once per output row
// and column rather than tested per element. Every max pool propagates NaN as torch's does
// (TakesMax): a window with a NaN tap gives NaN, and its index is the last NaN's.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "framework/kernel_registry.h"
#include "providers/cpu/float_compute.h"
#include "providers/cpu/nn/vec_math.h"
#include "providers/cpu/nn/window_geometry.h"

namespace tob {

namespace {

// Per output position along one dim: the kernel taps [lo, hi) that land inside the input, and
// how many taps land inside the input plus its explicit padding (count_include_pad).
struct TapRange {
  int64_t lo, hi, padded_count;
};

std::vector<TapRange> TapRanges(const WindowGeometry& g, size_t d) {
  std::vector<TapRange> r(static_cast<size_t>(g.out[d]));
  for (int64_t o = 0; o < g.out[d]; ++o) {
    const int64_t start = o * g.strides[d] - g.pad_begin[d];
    TapRange t;
    ValidOutputRange(start, g.dilations[d], g.in[d], g.kernel[d], &t.lo, &t.hi);
    int64_t plo, phi;
    ValidOutputRange(start + g.pad_begin[d], g.dilations[d], g.in[d] + g.pad_begin[d] + g.pad_end[d], g.kernel[d], &plo,
                     &phi);
    t.padded_count = phi - plo;
    r[static_cast<size_t>(o)] = t;
  }
  return r;
}

template <typename T>
using Acc = ComputeType<T>;

template <typename T>
Acc<T> Lowest() {
  if constexpr (std::numeric_limits<Acc<T>>::has_infinity) return -std::numeric_limits<Acc<T>>::infinity();
  else return std::numeric_limits<Acc<T>>::lowest();
}

// Whether v is NaN, from its bits: an integer compare the compiler keeps branch-free, where
// `v != v` or std::isnan beside another float compare becomes a jump per tap (which mispredicts on
// real activations; see MaxPoolWithIndices2D).
template <typename A>
inline bool IsNaN(A v) {
  if constexpr (std::is_same_v<A, float>) return (std::bit_cast<uint32_t>(v) & 0x7fffffffu) > 0x7f800000u;
  else if constexpr (std::is_same_v<A, double>)
    return (std::bit_cast<uint64_t>(v) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
  else return false;
}

// The running maximum of a window as torch's max pooling keeps it: a tap replaces it when greater
// or NaN, so a NaN anywhere in the window is the result (std::max(best, v) would drop it). With
// several NaNs the last one in scan order wins, which decides Indices as torch does. The hot loops
// get the same answer branch-free: the maximum by `v > best` alone, plus whether (and where) a NaN
// was seen.
template <typename A>
inline bool TakesMax(A v, A best) {
  return v > best || IsNaN(v);
}

// Row-major (storage_order 0) or column-major (1) flat offset of a spatial position.
std::vector<int64_t> IndexStrides(const std::vector<int64_t>& in, bool column_major) {
  std::vector<int64_t> s(in.size(), 1);
  if (column_major) {
    for (size_t d = 1; d < in.size(); ++d) s[d] = s[d - 1] * in[d - 1];
  } else {
    for (int64_t d = static_cast<int64_t>(in.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * in[d + 1];
  }
  return s;
}

// kLp: (sum over the window's taps inside the input of |x|^p)^(1/p); padding adds nothing.
enum class PoolKind { kMax, kAverage, kLp };

// LpPool's p (an integer attribute from opset 2; default 2).
StatusOr<int64_t> ReadLpOrder(const Node& node) {
  int64_t p = 2;
  TOB_RETURN_IF_ERROR(node.GetAttr("p", &p, int64_t{2}));
  if (p < 1) return InvalidModel(node.Describe(), ": attribute 'p' must be >= 1, got ", p);
  return p;
}

template <typename A>
inline A PowerOfAbs(A v, int64_t p) {
  const A a = std::abs(v);
  if (p == 1) return a;
  if (p == 2) return a * a;
  return std::pow(a, static_cast<A>(p));
}

template <typename A>
inline A RootOf(A sum, int64_t p) {
  if (p == 1) return sum;
  if (p == 2) return std::sqrt(sum);
  return std::pow(sum, A(1) / static_cast<A>(p));
}

// Pools every plane in [begin, end) for any spatial rank; `taps[d]` come from TapRanges.
template <typename T, PoolKind kKind>
void PoolPlanes(const T* x, T* y, int64_t* indices, const WindowGeometry& g,
                const std::vector<std::vector<TapRange>>& taps, bool count_include_pad, bool column_major,
                int64_t begin, int64_t end, int64_t lp_order = 2) {
  const size_t r = g.rank();
  const int64_t in_size = g.in_size(), out_size = g.out_size();
  const std::vector<int64_t> x_strides = IndexStrides(g.in, false);
  const std::vector<int64_t> i_strides = IndexStrides(g.in, column_major);
  std::vector<int64_t> o(r), k(r);
  for (int64_t p = begin; p < end; ++p) {
    const T* plane = x + p * in_size;
    std::fill(o.begin(), o.end(), 0);
    for (int64_t oi = 0; oi < out_size; ++oi) {
      int64_t count = 1, padded = 1;
      bool empty = false;
      for (size_t d = 0; d < r; ++d) {
        const TapRange& t = taps[d][o[d]];
        k[d] = t.lo;
        count *= t.hi - t.lo;
        padded *= t.padded_count;
        empty = empty || t.hi <= t.lo;
      }
      Acc<T> best = Lowest<T>(), sum = Acc<T>(0);
      int64_t best_index = 0;
      bool first = true;
      while (!empty) {
        int64_t x_off = 0, i_off = 0;
        for (size_t d = 0; d < r; ++d) {
          const int64_t pos = o[d] * g.strides[d] - g.pad_begin[d] + k[d] * g.dilations[d];
          x_off += pos * x_strides[d];
          i_off += pos * i_strides[d];
        }
        const Acc<T> v = static_cast<Acc<T>>(plane[x_off]);
        if constexpr (kKind == PoolKind::kMax) {
          if (first || TakesMax(v, best)) {
            best = v;
            best_index = i_off;
            first = false;
          }
        } else if constexpr (kKind == PoolKind::kLp) {
          sum += PowerOfAbs(v, lp_order);
        } else {
          sum += v;
        }
        size_t d = r;
        while (d > 0) {
          --d;
          if (++k[d] < taps[d][o[d]].hi) break;
          k[d] = taps[d][o[d]].lo;
          if (d == 0) empty = true;
        }
      }
      if constexpr (kKind == PoolKind::kMax) {
        y[p * out_size + oi] = static_cast<T>(best);
        if (indices != nullptr) indices[p * out_size + oi] = p * in_size + best_index;
      } else if constexpr (kKind == PoolKind::kLp) {
        y[p * out_size + oi] = static_cast<T>(RootOf(sum, lp_order));
      } else {
        const int64_t divisor = count_include_pad ? padded : count;
        y[p * out_size + oi] = static_cast<T>(divisor > 0 ? sum / static_cast<Acc<T>>(divisor) : Acc<T>(0));
      }
      for (int64_t d = static_cast<int64_t>(r) - 1; d >= 0 && ++o[d] == g.out[d]; --d) o[d] = 0;
    }
  }
}

// 2-D MaxPool with Indices: a scalar argmax per window, branch-free. The window's first valid tap
// seeds the maximum and each later tap replaces it only when strictly greater (the first of equal
// maxima wins), and the last NaN, if any, replaces the result (TakesMax), written as selects: a
// data-dependent branch here mispredicts on about every other tap of real activations, which made
// this loop 4x slower.
template <typename T>
void MaxPoolWithIndices2D(const T* x, T* y, int64_t* indices, const WindowGeometry& g,
                          const std::vector<std::vector<TapRange>>& taps, bool column_major, int64_t begin,
                          int64_t end) {
  const int64_t H = g.in[0], W = g.in[1], OH = g.out[0], OW = g.out[1];
  const int64_t sh = g.strides[0], sw = g.strides[1], dh = g.dilations[0], dw = g.dilations[1];
  for (int64_t p = begin; p < end; ++p) {
    const T* plane = x + p * H * W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      const TapRange& th = taps[0][oh];
      const int64_t ih0 = oh * sh - g.pad_begin[0];
      for (int64_t ow = 0; ow < OW; ++ow) {
        const TapRange& tw = taps[1][ow];
        const int64_t out = p * OH * OW + oh * OW + ow;
        if (th.lo >= th.hi || tw.lo >= tw.hi) {  // a window entirely in the padding
          y[out] = static_cast<T>(Lowest<T>());
          indices[out] = p * H * W;
          continue;
        }
        const int64_t iw0 = ow * sw - g.pad_begin[1];
        int64_t best_at = (ih0 + th.lo * dh) * W + iw0 + tw.lo * dw;
        Acc<T> best = static_cast<Acc<T>>(plane[best_at]), probe = Acc<T>(0);
        for (int64_t kh = th.lo; kh < th.hi; ++kh) {
          const int64_t row = (ih0 + kh * dh) * W + iw0;
          for (int64_t kw = tw.lo; kw < tw.hi; ++kw) {
            const int64_t at = row + kw * dw;
            const Acc<T> v = static_cast<Acc<T>>(plane[at]);
            const bool take = v > best;
            best = take ? v : best;
            best_at = take ? at : best_at;
            if constexpr (std::is_floating_point_v<Acc<T>>) probe += v;
          }
        }
        // The sum of the taps is NaN when one is (or when +inf meets -inf): only then is the
        // window scanned again for its last NaN (TakesMax).
        if (IsNaN(probe)) {
          for (int64_t kh = th.lo; kh < th.hi; ++kh)
            for (int64_t kw = tw.lo; kw < tw.hi; ++kw) {
              const int64_t at = (ih0 + kh * dh) * W + iw0 + kw * dw;
              if (IsNaN(static_cast<Acc<T>>(plane[at]))) best_at = at;
            }
          best = static_cast<Acc<T>>(plane[best_at]);
        }
        y[out] = static_cast<T>(best);
        indices[out] = p * H * W + (column_major ? best_at / W + (best_at % W) * H : best_at);
      }
    }
  }
}

// a[i] += src[2i] for i in [0, n): the stride-2 windows of CNN average pooling. AVX2 de-interleaves
// the even elements of two loads; it never reads past src[2(n - 1)], the last element the caller
// vouched for.
void AddStride2(const float* src, int64_t n, float* a) {
  int64_t i = 0;
#if defined(__AVX2__)
  for (; i + 8 < n; i += 8) {
    const __m256 v0 = _mm256_loadu_ps(src + 2 * i), v1 = _mm256_loadu_ps(src + 2 * i + 8);
    const __m256 pairs = _mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(2, 0, 2, 0));
    const __m256 even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(pairs), _MM_SHUFFLE(3, 1, 2, 0)));
    _mm256_storeu_ps(a + i, _mm256_add_ps(_mm256_loadu_ps(a + i), even));
  }
#endif
  for (; i < n; ++i) a[i] += src[2 * i];
}

// 1 / (number of taps averaged) per output position along one dim.
template <typename A>
std::vector<A> InverseCounts(const std::vector<TapRange>& taps, bool count_include_pad) {
  std::vector<A> inv(taps.size());
  for (size_t i = 0; i < taps.size(); ++i) {
    const int64_t c = count_include_pad ? taps[i].padded_count : taps[i].hi - taps[i].lo;
    inv[i] = c > 0 ? A(1) / static_cast<A>(c) : A(0);
  }
  return inv;
}

// 2-D AveragePool. Each output row is accumulated a block of columns at a time: for every kernel
// tap (kh, kw) the valid columns are one contiguous (stride 1) or strided run, so the inner loop
// is a branch-free add the compiler vectorises.
template <typename T>
void AveragePoolPlanes2D(const T* x, T* y, const WindowGeometry& g, const std::vector<std::vector<TapRange>>& taps,
                         bool count_include_pad, int64_t begin, int64_t end) {
  constexpr int64_t kBlock = 256;
  const int64_t H = g.in[0], W = g.in[1], OH = g.out[0], OW = g.out[1], KW = g.kernel[1];
  const int64_t sh = g.strides[0], sw = g.strides[1], dh = g.dilations[0], dw = g.dilations[1];
  // Output columns [col_lo[kw], col_hi[kw]) read an in-bounds input column for tap kw.
  std::vector<int64_t> col_lo(KW), col_hi(KW);
  for (int64_t kw = 0; kw < KW; ++kw) ValidOutputRange(kw * dw - g.pad_begin[1], sw, W, OW, &col_lo[kw], &col_hi[kw]);
  // Averages divide by count_h * count_w, applied as two precomputed reciprocals.
  const std::vector<Acc<T>> inv_h = InverseCounts<Acc<T>>(taps[0], count_include_pad);
  const std::vector<Acc<T>> inv_w = InverseCounts<Acc<T>>(taps[1], count_include_pad);
  Acc<T> acc[kBlock];
  for (int64_t p = begin; p < end; ++p) {
    const T* plane = x + p * H * W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      const TapRange& th = taps[0][oh];
      T* out_row = y + (p * OH + oh) * OW;
      for (int64_t ob = 0; ob < OW; ob += kBlock) {
        const int64_t oe = std::min(OW, ob + kBlock);
        std::fill(acc, acc + (oe - ob), Acc<T>(0));
        Acc<T>* a = acc - ob;  // indexed by output column
        for (int64_t kh = th.lo; kh < th.hi; ++kh) {
          const T* row = plane + (oh * sh - g.pad_begin[0] + kh * dh) * W;
          for (int64_t kw = 0; kw < KW; ++kw) {
            const int64_t lo = std::max(ob, col_lo[kw]), hi = std::min(oe, col_hi[kw]);
            if (hi <= lo) continue;
            const int64_t off = kw * dw - g.pad_begin[1];
            if constexpr (std::is_same_v<T, float>) {
              if (sw == 2) {
                AddStride2(row + 2 * lo + off, hi - lo, a + lo);
                continue;
              }
            }
            for (int64_t ow = lo; ow < hi; ++ow) a[ow] += static_cast<Acc<T>>(row[ow * sw + off]);
          }
        }
        const Acc<T> ih = inv_h[oh];
        for (int64_t ow = ob; ow < oe; ++ow) out_row[ow] = static_cast<T>(a[ow] * ih * inv_w[ow]);
      }
    }
  }
}

// The maximum over one output position's taps: rows first_row + r * row_step for r in [0, n_rows),
// columns col + kw * dw for kw in the valid taps `tw` (col may be negative: the padding).
template <typename T>
Acc<T> MaxOfWindow(const T* first_row, int64_t row_step, int64_t n_rows, const TapRange& tw, int64_t col, int64_t dw) {
  Acc<T> best = Lowest<T>(), probe = Acc<T>(0);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t kw = tw.lo; kw < tw.hi; ++kw) {
      const Acc<T> v = static_cast<Acc<T>>(first_row[r * row_step + col + kw * dw]);
      best = v > best ? v : best;
      if constexpr (std::is_floating_point_v<Acc<T>>) probe += v;
    }
  }
  // The sum of the taps is NaN when one is (or when +inf meets -inf): only then are they tested.
  if (IsNaN(probe)) {
    for (int64_t r = 0; r < n_rows; ++r)
      for (int64_t kw = tw.lo; kw < tw.hi; ++kw)
        if (IsNaN(static_cast<Acc<T>>(first_row[r * row_step + col + kw * dw]))) return probe;
  }
  return best;
}

#if defined(__AVX2__)
// The even (odd) elements of the 16 floats v0:v1, tap src[2i] (src[2i + 1]) of eight stride-2
// windows whose first taps are src[0], src[2], ..., in the lane order one in-lane shuffle leaves
// (windows 0 1 4 5 2 3 6 7): every tap of a block comes in that same order, so the maxima line up,
// and Unscramble puts the block's result in window order once.
inline __m256 EvenOf(__m256 v0, __m256 v1) { return _mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(2, 0, 2, 0)); }
inline __m256 OddOf(__m256 v0, __m256 v1) { return _mm256_shuffle_ps(v0, v1, _MM_SHUFFLE(3, 1, 3, 1)); }
inline __m256 Unscramble(__m256 v) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), _MM_SHUFFLE(3, 1, 2, 0)));
}

// Eight adjacent outputs of a 2-D max pool (stride kStride, 1 or 2, along the row) whose taps all
// lie inside the input: output i is the maximum of row r's element col + i * kStride + kw * dw
// over the n_rows rows and the KW taps. The caller guarantees every load is inside the rows: with
// stride 2, elements up to col + (KW - 1) * dw + 15 of each row. _mm256_max_ps returns its second
// operand when either is NaN, so the maximum alone could drop one: the lanes with a NaN tap are
// tracked by unordered compares (one checks two taps) and set to NaN at the end.
template <int kStride>
__m256 MaxOfEightWindows(const float* first_row, int64_t row_step, int64_t n_rows, int64_t KW, int64_t dw,
                         int64_t col) {
  __m256 best = _mm256_set1_ps(-std::numeric_limits<float>::infinity()), nan = _mm256_setzero_ps();
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* src = first_row + r * row_step + col;
    int64_t kw = 0;
    if constexpr (kStride == 2) {
      for (; dw == 1 && kw + 1 < KW; kw += 2) {  // taps kw and kw + 1 from the same two loads
        const __m256 v0 = _mm256_loadu_ps(src + kw), v1 = _mm256_loadu_ps(src + kw + 8);
        const __m256 a = EvenOf(v0, v1), b = OddOf(v0, v1);
        best = _mm256_max_ps(best, _mm256_max_ps(a, b));
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
      }
      for (; kw < KW; ++kw) {
        const __m256 a = EvenOf(_mm256_loadu_ps(src + kw * dw), _mm256_loadu_ps(src + kw * dw + 8));
        best = _mm256_max_ps(best, a);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
      }
    } else {
      for (; kw + 1 < KW; kw += 2) {
        const __m256 a = _mm256_loadu_ps(src + kw * dw), b = _mm256_loadu_ps(src + (kw + 1) * dw);
        best = _mm256_max_ps(best, _mm256_max_ps(a, b));
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
      }
      for (; kw < KW; ++kw) {
        const __m256 a = _mm256_loadu_ps(src + kw * dw);
        best = _mm256_max_ps(best, a);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
      }
    }
  }
  best = _mm256_blendv_ps(best, _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()), nan);
  return kStride == 2 ? Unscramble(best) : best;
}
#endif

// 2-D MaxPool without indices. Per output row, the columns whose taps all lie inside the input
// (the interior) go eight at a time through MaxOfEightWindows (float, stride 1 or 2: every tap a
// plain or de-interleaved load, no per-window branch; the last block may overlap the one before);
// the padded border columns, other strides and other dtypes take MaxOfWindow per column, whose
// taps are clipped to the input once per column.
template <typename T>
void MaxPoolPlanes2D(const T* x, T* y, const WindowGeometry& g, const std::vector<std::vector<TapRange>>& taps,
                     int64_t planes, int64_t begin, int64_t end) {
  const int64_t H = g.in[0], W = g.in[1], OH = g.out[0], OW = g.out[1], KW = g.kernel[1];
  const int64_t sh = g.strides[0], sw = g.strides[1], dh = g.dilations[0], dw = g.dilations[1];
  const int64_t ph = g.pad_begin[0], pw = g.pad_begin[1];
  // Output columns [v_lo, v_end) are computed in blocks of eight: a block's loads stay inside the
  // row up to v_end, and up to v_end_over they read `over` elements past the row's end (a stride-2
  // block's last de-interleaved pair), which rows other than the tensor's last may do.
  int64_t v_lo = 0, v_end = 0, v_end_over = 0, used = 0, over = 0;
#if defined(__AVX2__)
  if (std::is_same_v<T, float> && (sw == 1 || sw == 2)) {
    used = (KW - 1) * dw + 7 * sw;  // a block's last tap column, past its first
    over = sw == 2 ? 1 : 0;
    const int64_t first = (pw + sw - 1) / sw;  // ow * sw - pw >= 0
    auto last_start = [&](int64_t reach) {     // the last block start whose loads end in the row
      const int64_t room = W - 1 + pw - reach;
      return room < 0 ? int64_t{-1} : std::min(OW - 8, room / sw);
    };
    const int64_t safe = last_start(used + over), exact = last_start(used);
    if (exact >= first) {
      v_lo = first;
      v_end = safe >= first ? safe + 8 : first;
      v_end_over = exact + 8;
    }
  }
#endif
  for (int64_t p = begin; p < end; ++p) {
    const T* plane = x + p * H * W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      const TapRange& th = taps[0][oh];
      const int64_t n_rows = std::max<int64_t>(0, th.hi - th.lo);
      const T* first_row = n_rows > 0 ? plane + (oh * sh - ph + th.lo * dh) * W : plane;
      T* out_row = y + (p * OH + oh) * OW;
      auto scalar = [&](int64_t ow) {
        out_row[ow] = static_cast<T>(MaxOfWindow(first_row, dh * W, n_rows, taps[1][ow], ow * sw - pw, dw));
      };
      int64_t row_v_end = v_end;
      if (v_end_over > v_end && n_rows > 0) {
        const int64_t last_read = (first_row - x) + (n_rows - 1) * dh * W + (v_end_over - 8) * sw - pw + used + over;
        if (last_read < planes * H * W) row_v_end = v_end_over;
      }
      for (int64_t ow = 0; ow < v_lo; ++ow) scalar(ow);
#if defined(__AVX2__)
      if constexpr (std::is_same_v<T, float>) {
        for (int64_t ow = v_lo; ow < row_v_end; ow += 8) {
          const int64_t o = std::min(ow, row_v_end - 8);
          const int64_t col = o * sw - pw;
          _mm256_storeu_ps(out_row + o, sw == 2 ? MaxOfEightWindows<2>(first_row, dh * W, n_rows, KW, dw, col)
                                                : MaxOfEightWindows<1>(first_row, dh * W, n_rows, KW, dw, col));
        }
      }
#endif
      for (int64_t ow = std::max(v_lo, row_v_end); ow < OW; ++ow) scalar(ow);
    }
  }
}

// The maximum of x[0, n) with NaN propagated as the windows do (TakesMax). int8/uint8 are exact in
// float.
template <typename T>
Acc<T> PlaneMax(const T* x, int64_t n) {
  using M = std::conditional_t<std::is_same_v<T, double>, double, float>;
  M best = -std::numeric_limits<M>::infinity();
  int64_t i = 0;
#if defined(__AVX2__)
  if constexpr (std::is_same_v<T, float>) {
    if (n >= 16) {
      __m256 m0 = _mm256_set1_ps(best), m1 = m0, nan = _mm256_setzero_ps();
      for (; i + 16 <= n; i += 16) {
        const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        m0 = _mm256_max_ps(m0, a);
        m1 = _mm256_max_ps(m1, b);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
      }
      if (_mm256_movemask_ps(nan) != 0) return std::numeric_limits<float>::quiet_NaN();
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, _mm256_max_ps(m0, m1));
      for (float v : lanes) best = std::max(best, v);
    }
  }
#endif
  bool nan = false;
  for (; i < n; ++i) {
    const M v = static_cast<M>(x[i]);
    best = v > best ? v : best;
    nan |= IsNaN(v);
  }
  return static_cast<Acc<T>>(nan ? std::numeric_limits<M>::quiet_NaN() : best);
}

template <typename T>
Acc<T> PlaneReduce(const T* x, int64_t n, PoolKind kind, int64_t lp_order) {
  if (kind == PoolKind::kLp) {
    Acc<T> sum = Acc<T>(0);
    for (int64_t i = 0; i < n; ++i) sum += PowerOfAbs(static_cast<Acc<T>>(x[i]), lp_order);
    return RootOf(sum, lp_order);
  }
  if (kind == PoolKind::kMax) return PlaneMax(x, n);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return vec::Sum(x, n) / static_cast<T>(n);
  } else {
    float acc = 0.f;
    for (int64_t i = 0; i < n; ++i) acc += static_cast<float>(x[i]);
    return acc / static_cast<float>(n);
  }
}

// One output per plane: `planes` planes of `size` elements each reduced by `kind` (the global pools,
// and a window that is the whole plane). Float types only.
Status ReducePlanes(KernelContext& ctx, const Tensor& x, Tensor& y, int64_t planes, int64_t size, PoolKind kind,
                    int64_t lp_order) {
  return DispatchFloat(ctx, x.dtype(), [&]<typename T>() -> Status {
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    ParallelFor(ctx.thread_pool(), planes, std::max<int64_t>(1, 65536 / size), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) yp[p] = static_cast<T>(PlaneReduce(xp + p * size, size, kind, lp_order));
    });
    return Status::OK();
  });
}

// One output per plane whose window is exactly the input: no pads, no dilation, kernel = input.
bool IsWholePlaneWindow(const WindowGeometry& g) {
  for (size_t d = 0; d < g.rank(); ++d)
    if (g.out[d] != 1 || g.kernel[d] != g.in[d] || g.pad_begin[d] != 0 || g.pad_end[d] != 0 || g.dilations[d] != 1)
      return false;
  return true;
}

class PoolKernel final : public OpKernel {
 public:
  PoolKernel(const Node& node, PoolKind kind, WindowAttributes attrs, bool count_include_pad, bool column_major,
             int64_t lp_order)
      : OpKernel(node),
        kind_(kind),
        attrs_(std::move(attrs)),
        count_include_pad_(count_include_pad),
        column_major_(column_major),
        lp_order_(lp_order) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, PoolKind kind) {
    TOB_ASSIGN_OR_RETURN(WindowAttributes attrs, WindowAttributes::Read(node));
    if (attrs.kernel_shape.empty()) return InvalidModel(node.Describe(), ": attribute kernel_shape is required");
    int64_t count_include_pad = 0, storage_order = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("count_include_pad", &count_include_pad, int64_t{0}));
    TOB_RETURN_IF_ERROR(node.GetAttr("storage_order", &storage_order, int64_t{0}));
    if (storage_order != 0 && storage_order != 1)
      return InvalidModel(node.Describe(), ": storage_order must be 0 or 1, got ", storage_order);
    int64_t lp_order = 2;
    if (kind == PoolKind::kLp) {
      TOB_ASSIGN_OR_RETURN(lp_order, ReadLpOrder(node));
    }
    return MakeKernel<PoolKernel>(node, kind, std::move(attrs), count_include_pad != 0, storage_order == 1, lp_order);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    Tensor* indices = kind_ == PoolKind::kMax ? ctx.output(1) : nullptr;
    auto geometry = WindowGeometry::Compute(node(), attrs_, x.shape(), {}, false);
    if (!geometry.ok()) return geometry.status();
    const WindowGeometry& g = geometry.value();
    Shape expected{x.dim(0), x.dim(1)};
    expected.insert(expected.end(), g.out.begin(), g.out.end());
    if (y.shape() != expected || (indices != nullptr && indices->shape() != expected))
      return ctx.Fail("output shape ", ShapeToString(y.shape()), " differs from ", ShapeToString(expected));
    if (y.numel() == 0) return Status::OK();
    const WindowGeometry g2 = g.As2D();
    std::vector<std::vector<TapRange>> taps;
    for (size_t d = 0; d < g2.rank(); ++d) taps.push_back(TapRanges(g2, d));
    const int64_t planes = x.dim(0) * x.dim(1);
    // A window that is the whole unpadded input (a classifier's final AveragePool written with
    // kernel_shape = the image, one output per plane) is the global pool: one vectorised
    // reduction per plane instead of a tap loop over a 1-element output row.
    if (indices == nullptr && IsWholePlaneWindow(g) && x.dtype() != DType::kInt8 && x.dtype() != DType::kUInt8) {
      return ReducePlanes(ctx, x, y, planes, g.in_size(), kind_, lp_order_);
    }
    const int64_t work = std::max<int64_t>(1, g.out_size() * g.kernel_size());
    const int64_t grain = std::max<int64_t>(1, 32768 / work);
    int64_t* idx = indices != nullptr ? indices->data<int64_t>() : nullptr;
    bool known = DispatchDType<float, double, Float16, BFloat16, int8_t, uint8_t>(x.dtype(), [&]<typename T>() {
      ParallelFor(ctx.thread_pool(), planes, grain, [&](int64_t b, int64_t e) {
        const T* xp = x.data<T>();
        T* yp = y.data<T>();
        if (kind_ == PoolKind::kLp) {
          if constexpr (!std::is_integral_v<T>)
            PoolPlanes<T, PoolKind::kLp>(xp, yp, nullptr, g2, taps, false, false, b, e, lp_order_);
        } else if (kind_ == PoolKind::kMax) {
          if (g2.rank() != 2) PoolPlanes<T, PoolKind::kMax>(xp, yp, idx, g2, taps, false, column_major_, b, e);
          else if (idx != nullptr) MaxPoolWithIndices2D<T>(xp, yp, idx, g2, taps, column_major_, b, e);
          else MaxPoolPlanes2D<T>(xp, yp, g2, taps, planes, b, e);
        } else if constexpr (!std::is_integral_v<T>) {
          if (g2.rank() == 2) AveragePoolPlanes2D<T>(xp, yp, g2, taps, count_include_pad_, b, e);
          else PoolPlanes<T, PoolKind::kAverage>(xp, yp, nullptr, g2, taps, count_include_pad_, false, b, e);
        }
      });
    });
    if (!known) return ctx.Fail("dtype ", DTypeName(x.dtype()), " is not supported");
    return Status::OK();
  }

 private:
  PoolKind kind_;
  WindowAttributes attrs_;
  bool count_include_pad_;
  bool column_major_;
  int64_t lp_order_;
};

class GlobalPoolKernel final : public OpKernel {
 public:
  GlobalPoolKernel(const Node& node, PoolKind kind, int64_t lp_order)
      : OpKernel(node), kind_(kind), lp_order_(lp_order) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, PoolKind kind) {
    int64_t lp_order = 2;
    if (kind == PoolKind::kLp) {
      TOB_ASSIGN_OR_RETURN(lp_order, ReadLpOrder(node));
    }
    return MakeKernel<GlobalPoolKernel>(node, kind, lp_order);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    if (x.rank() < 3) return ctx.Fail("input must have rank >= 3, got ", ShapeToString(x.shape()));
    const int64_t planes = x.dim(0) * x.dim(1);
    const int64_t size = x.numel() / std::max<int64_t>(1, planes);
    if (y.numel() != planes) return ctx.Fail("output must have ", planes, " elements");
    if (planes == 0) return Status::OK();
    if (size == 0) return ctx.Fail("cannot pool over an empty spatial extent");
    return ReducePlanes(ctx, x, y, planes, size, kind_, lp_order_);
  }

 private:
  PoolKind kind_;
  int64_t lp_order_;
};

KernelFactory PoolFactory(PoolKind kind) {
  return [kind](const Node& n) { return PoolKernel::Create(n, kind); };
}

KernelFactory GlobalPoolFactory(PoolKind kind) {
  return [kind](const Node& n) { return GlobalPoolKernel::Create(n, kind); };
}

}  // namespace

void RegisterCpuPoolKernels(KernelRegistry& registry) {
  std::vector<DType> max_pool_types = FloatTypes();
  max_pool_types.push_back(DType::kInt8);
  max_pool_types.push_back(DType::kUInt8);
  // One kernel serves every version: the attributes added over time (Indices output at 8,
  // ceil_mode and dilations at 10) default to the older behaviour; 12 added int8/uint8.
  registry.Register(
      Def("MaxPool").Versions(1, 11).Constraint("T", {0}, FloatTypes()).Factory(PoolFactory(PoolKind::kMax)));
  registry.Register(
      Def("MaxPool").Versions(12).Constraint("T", {0}, max_pool_types).Factory(PoolFactory(PoolKind::kMax)));
  registry.Register(
      Def("AveragePool").Versions(1).Constraint("T", {0}, FloatTypes()).Factory(PoolFactory(PoolKind::kAverage)));
  registry.Register(Def("GlobalAveragePool")
                        .Versions(1)
                        .Constraint("T", {0}, FloatTypes())
                        .Factory(GlobalPoolFactory(PoolKind::kAverage)));
  registry.Register(
      Def("GlobalMaxPool").Versions(1).Constraint("T", {0}, FloatTypes()).Factory(GlobalPoolFactory(PoolKind::kMax)));
  // LpPool-1 had a float p; from 2 it is an integer, and 11/18 added pads rules and ceil_mode,
  // which the shared window arithmetic already follows.
  registry.Register(Def("LpPool").Versions(2).Constraint("T", {0}, FloatTypes()).Factory(PoolFactory(PoolKind::kLp)));
  registry.Register(
      Def("GlobalLpPool").Versions(2).Constraint("T", {0}, FloatTypes()).Factory(GlobalPoolFactory(PoolKind::kLp)));
}

}  // namespace tob
