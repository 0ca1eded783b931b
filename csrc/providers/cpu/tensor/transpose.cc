#include "providers/cpu/tensor/transpose.h"

#include <algorithm>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "core/status.h"
#include "providers/cpu/tensor/copy_utils.h"

namespace tob::tensor_ops {

namespace {

// Elements per side of the square tile a task transposes: 64x64 of float32 is 16 KiB in and
// 16 KiB out, which stays in L1/L2 while its rows are read and written.
constexpr int64_t kTile = 64;

// dst[b * dst_ld + a] = src[a * src_ld + b] for a < na, b < nb.
template <typename E>
void TransposeScalar(const E* src, int64_t src_ld, E* dst, int64_t dst_ld, int64_t na, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    E* out = dst + b * dst_ld;
    for (int64_t a = 0; a < na; ++a) out[a] = src[a * src_ld + b];
  }
}

#if defined(__AVX2__)
// In-register 8x8 (4x4 for 8-byte elements) transposes: one load and one store per row instead of
// 64 scattered element moves. Values are moved as bits, never as floating point.
inline void Transpose8x8x32(const uint32_t* src, int64_t src_ld, uint32_t* dst, int64_t dst_ld) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(src + i * src_ld));
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {  // rows 0-3 (h = 0) and 4-7 (h = 1)
    u[4 * h + 0] = _mm256_shuffle_ps(t[4 * h + 0], t[4 * h + 2], 0x44);
    u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h + 0], t[4 * h + 2], 0xEE);
    u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(reinterpret_cast<float*>(dst + i * dst_ld), _mm256_permute2f128_ps(u[i], u[4 + i], 0x20));
    _mm256_storeu_ps(reinterpret_cast<float*>(dst + (i + 4) * dst_ld), _mm256_permute2f128_ps(u[i], u[4 + i], 0x31));
  }
}

inline void Transpose8x8x16(const uint16_t* src, int64_t src_ld, uint16_t* dst, int64_t dst_ld) {
  __m128i r[8], a[8], b[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * src_ld));
  for (int i = 0; i < 4; ++i) {
    a[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {
    b[4 * h + 0] = _mm_unpacklo_epi32(a[4 * h + 0], a[4 * h + 2]);
    b[4 * h + 1] = _mm_unpackhi_epi32(a[4 * h + 0], a[4 * h + 2]);
    b[4 * h + 2] = _mm_unpacklo_epi32(a[4 * h + 1], a[4 * h + 3]);
    b[4 * h + 3] = _mm_unpackhi_epi32(a[4 * h + 1], a[4 * h + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * i) * dst_ld), _mm_unpacklo_epi64(b[i], b[4 + i]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * i + 1) * dst_ld), _mm_unpackhi_epi64(b[i], b[4 + i]));
  }
}

inline void Transpose4x4x64(const uint64_t* src, int64_t src_ld, uint64_t* dst, int64_t dst_ld) {
  __m256d r[4];
  for (int i = 0; i < 4; ++i) r[i] = _mm256_loadu_pd(reinterpret_cast<const double*>(src + i * src_ld));
  __m256d t0 = _mm256_unpacklo_pd(r[0], r[1]), t1 = _mm256_unpackhi_pd(r[0], r[1]);
  __m256d t2 = _mm256_unpacklo_pd(r[2], r[3]), t3 = _mm256_unpackhi_pd(r[2], r[3]);
  _mm256_storeu_pd(reinterpret_cast<double*>(dst + 0 * dst_ld), _mm256_permute2f128_pd(t0, t2, 0x20));
  _mm256_storeu_pd(reinterpret_cast<double*>(dst + 1 * dst_ld), _mm256_permute2f128_pd(t1, t3, 0x20));
  _mm256_storeu_pd(reinterpret_cast<double*>(dst + 2 * dst_ld), _mm256_permute2f128_pd(t0, t2, 0x31));
  _mm256_storeu_pd(reinterpret_cast<double*>(dst + 3 * dst_ld), _mm256_permute2f128_pd(t1, t3, 0x31));
}
#endif

// Side of the in-register micro tile for element type E (0: none, scalar only).
template <typename E>
constexpr int64_t MicroTile() {
#if defined(__AVX2__)
  if constexpr (sizeof(E) == 4 || sizeof(E) == 2) return 8;
  if constexpr (sizeof(E) == 8) return 4;
#endif
  return 0;
}

// One tile of at most kTile x kTile: full micro tiles in registers, the ragged edges scalar.
template <typename E>
void TransposeTile(const E* src, int64_t src_ld, E* dst, int64_t dst_ld, int64_t na, int64_t nb) {
  constexpr int64_t m = MicroTile<E>();
  if constexpr (m == 0) {
    TransposeScalar(src, src_ld, dst, dst_ld, na, nb);
  } else {
    const int64_t na_full = na - na % m, nb_full = nb - nb % m;
    for (int64_t b = 0; b < nb_full; b += m) {
      for (int64_t a = 0; a < na_full; a += m) {
#if defined(__AVX2__)
        if constexpr (sizeof(E) == 4) Transpose8x8x32(src + a * src_ld + b, src_ld, dst + b * dst_ld + a, dst_ld);
        if constexpr (sizeof(E) == 2) Transpose8x8x16(src + a * src_ld + b, src_ld, dst + b * dst_ld + a, dst_ld);
        if constexpr (sizeof(E) == 8) Transpose4x4x64(src + a * src_ld + b, src_ld, dst + b * dst_ld + a, dst_ld);
#endif
      }
    }
    if (na_full < na) TransposeScalar(src + na_full * src_ld, src_ld, dst + na_full, dst_ld, na - na_full, nb_full);
    if (nb_full < nb) TransposeScalar(src + nb_full, src_ld, dst + nb_full * dst_ld, dst_ld, na, nb - nb_full);
  }
}

// The blocked case: after collapsing, dims[] in output order with src strides sstr[] and dst
// strides dstr[]; `p` is the dim that is innermost in src (stride 1), the last dim is innermost
// in dst. Every other dim is an outer loop.
template <typename E>
void BlockedTranspose(ThreadPool* pool, const E* src, E* dst, const std::vector<int64_t>& dims,
                      const std::vector<int64_t>& sstr, const std::vector<int64_t>& dstr, size_t p) {
  const size_t last = dims.size() - 1;
  const int64_t na = dims[last], nb = dims[p];
  const int64_t src_ld = sstr[last], dst_ld = dstr[p];
  std::vector<size_t> outer;
  for (size_t i = 0; i < last; ++i)
    if (i != p) outer.push_back(i);
  int64_t outer_count = 1;
  for (size_t i : outer) outer_count *= dims[i];
  const int64_t tiles_a = (na + kTile - 1) / kTile, tiles_b = (nb + kTile - 1) / kTile;
  const int64_t units = outer_count * tiles_b * tiles_a;
  ParallelFor(pool, units, CopyGrain(kTile * kTile * sizeof(E)), [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      int64_t ta = u % tiles_a, tb = (u / tiles_a) % tiles_b, o = u / (tiles_a * tiles_b);
      int64_t src_off = 0, dst_off = 0;
      for (size_t k = outer.size(); k-- > 0;) {
        int64_t i = o % dims[outer[k]];
        o /= dims[outer[k]];
        src_off += i * sstr[outer[k]];
        dst_off += i * dstr[outer[k]];
      }
      int64_t a0 = ta * kTile, b0 = tb * kTile;
      TransposeTile(src + src_off + a0 * src_ld + b0, src_ld, dst + dst_off + b0 * dst_ld + a0, dst_ld,
                    std::min(kTile, na - a0), std::min(kTile, nb - b0));
    }
  });
}

}  // namespace

void TransposeBytes(ThreadPool* pool, const void* src, void* dst, size_t elem_size, const Shape& in_shape,
                    const std::vector<int64_t>& perm) {
  TOB_ENFORCE(perm.size() == in_shape.size(), "TransposeBytes: perm/rank mismatch");
  if (NumElements(in_shape) == 0) return;
  const std::vector<int64_t> in_strides = ContiguousStrides(in_shape);
  // Output-order dims with their src strides; size-1 dims dropped, chained neighbours merged.
  std::vector<int64_t> dims, sstr;
  for (int64_t p : perm) {
    int64_t n = in_shape[p], s = in_strides[p];
    if (n == 1) continue;
    if (!dims.empty() && sstr.back() == s * n) {
      dims.back() *= n;
      sstr.back() = s;
    } else {
      dims.push_back(n);
      sstr.push_back(s);
    }
  }
  if (dims.empty() || (dims.size() == 1 && sstr[0] == 1)) {
    ParallelCopy(pool, dst, src, static_cast<size_t>(NumElements(in_shape)) * elem_size);
    return;
  }
  if (sstr.back() == 1) {
    StridedCopy(pool, src, dst, elem_size, dims, sstr);
    return;
  }
  size_t p = 0;
  while (sstr[p] != 1) ++p;
  std::vector<int64_t> dstr = ContiguousStrides(dims);
  bool done = DispatchElementSize(elem_size, [&]<typename E>() {
    BlockedTranspose(pool, static_cast<const E*>(src), static_cast<E*>(dst), dims, sstr, dstr, p);
  });
  TOB_ENFORCE(done, "TransposeBytes: unsupported element size ", elem_size);
}

}  // namespace tob::tensor_ops
