// bf16_gemm.h on AVX512-BF16: up to 12 rows x 2 zmm (32 float32 columns) of accumulators per
// tile, VDPBF16PS over pairs of K. The build targets x86-64-v3, so every function that touches
// AVX-512 carries its own target attribute and runs only when Bf16GemmAvailable().
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/env_switch.h"
#include "providers/cpu/nn/bf16_gemm.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10
#define TOB_BF16_GEMM_COMPILED 1
#define TOB_BF16_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
// GCC 12 warns inside its own avx512fintrin.h (_mm512_undefined_ps initialises from itself).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#elif defined(__x86_64__) && defined(__clang__)
#define TOB_BF16_GEMM_COMPILED 1
#define TOB_BF16_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#endif

namespace tob {

#if TOB_BF16_GEMM_COMPILED

namespace {

constexpr int kLanes = 16;                                 // float32 results per zmm (32 bfloat16 inputs)
constexpr int kMaxRows = 12;                               // 12 x 2 accumulators + 2 B vectors + 1 broadcast
constexpr int64_t kPanelCols = 2 * kLanes;                 // columns of op(B) per packed panel
constexpr int64_t kKc = 512;                               // rows of op(B) per block: 512 x 32 bfloat16 = 32 KiB, in L1
constexpr double kMinParallelFlops = 2.0 * 64 * 64 * 128;  // below this the pool's wake-up costs more
constexpr int64_t kMinChunkRows = 48;                      // row chunks, when there are too few panels to share

static_assert(kKc % 2 == 0, "K blocks must hold whole pairs");
static_assert(kBf16GemmRoundedMaxK <= kKc, "a rounded C must come from one K block");

// Word indices for _mm512_permutex2var_epi16(x, idx, y) that interleave two rows of 32 bfloat16:
// [0] gives x0 y0 x1 y1 ... x15 y15 (the pairs of columns 0-15), [1] the same from column 16.
alignas(64) const uint16_t kInterleave[2][32] = {{0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                  8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47},
                                                 {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                                  24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63}};

uint16_t* PackBuffer() {
  alignas(64) static thread_local uint16_t buffer[kKc * kPanelCols];
  return buffer;
}

const uint16_t* Bits(const BFloat16* p) { return reinterpret_cast<const uint16_t*>(p); }

int32_t LoadPair(const uint16_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// r[j] = column j of the 16 x 16 matrix of 32-bit words whose rows r held: 32-bit unpacks make
// 2x2 blocks, 64-bit unpacks 4x4 blocks within each 128-bit lane, lane shuffles move the blocks.
TOB_BF16_FN void Transpose16x16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // Now lane l of r[4i + c] holds column 4l + c of rows 4i..4i+3.
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  __m512i out[16];
  for (int c = 0; c < 4; ++c) {
    const __m512i a0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88), a1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xDD);
    const __m512i b0 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88);
    const __m512i b1 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xDD);
    out[c] = _mm512_shuffle_i32x4(a0, b0, 0x88);
    out[4 + c] = _mm512_shuffle_i32x4(a1, b1, 0x88);
    out[8 + c] = _mm512_shuffle_i32x4(a0, b0, 0xDD);
    out[12 + c] = _mm512_shuffle_i32x4(a1, b1, 0xDD);
  }
  for (int j = 0; j < 16; ++j) r[j] = out[j];
}

// dst[(p * width + j) * 2 + h] = op(B)[k0 + 2p + h, n0 + j] for 2p + h < kc and j < nw, zero
// elsewhere (width = 16 * vectors columns, p < ceil(kc / 2)): the operand layout of VDPBF16PS,
// which multiplies lane j's pair of B with the broadcast pair of A.
TOB_BF16_FN void PackPanel(bool trans_b, const uint16_t* B, int64_t ldb, int64_t k0, int64_t kc, int64_t n0, int64_t nw,
                           int vectors, uint16_t* dst) {
  const int64_t width = vectors * kLanes;
  const int64_t pairs = (kc + 1) / 2;
  if (!trans_b) {
    // Interleave rows k and k + 1: out0 = x0 y0 x1 y1 ... x15 y15, out1 the same from column 16.
    const __m512i idx0 = _mm512_load_si512(kInterleave[0]), idx1 = _mm512_load_si512(kInterleave[1]);
    const __mmask32 cols = nw >= 32 ? ~__mmask32(0) : (__mmask32(1) << nw) - 1;
    for (int64_t p = 0; p < pairs; ++p) {
      const uint16_t* x_row = B + (k0 + 2 * p) * ldb + n0;
      const __m512i x = _mm512_maskz_loadu_epi16(cols, x_row);
      const __m512i y = 2 * p + 1 < kc ? _mm512_maskz_loadu_epi16(cols, x_row + ldb) : _mm512_setzero_si512();
      uint16_t* d = dst + p * width * 2;
      _mm512_store_si512(d, _mm512_permutex2var_epi16(x, idx0, y));
      if (vectors == 2) _mm512_store_si512(d + 2 * kLanes, _mm512_permutex2var_epi16(x, idx1, y));
    }
    return;
  }
  // op(B)[k, n] = B[n * ldb + k]: a column's pair (k, k + 1) is one 32-bit word of B's row n. Rows
  // of B give 16 words (pairs) per column; a 16 x 16 word transpose turns them into pairs of rows
  // of op(B). Loads are masked at the end of the block (odd kc: the last pair's high half is 0).
  for (int v = 0; v < vectors; ++v) {
    const int64_t lanes = std::clamp<int64_t>(nw - v * kLanes, 0, kLanes);
    const uint16_t* col0 = B + (n0 + v * kLanes) * ldb + k0;
    int32_t* d32 = reinterpret_cast<int32_t*>(dst) + v * kLanes;
    for (int64_t p0 = 0; p0 < pairs; p0 += 16) {
      const int64_t elems = std::min<int64_t>(32, kc - 2 * p0);
      const __mmask32 m = elems >= 32 ? ~__mmask32(0) : (__mmask32(1) << elems) - 1;
      __m512i w[16];
      for (int64_t j = 0; j < kLanes; ++j)
        w[j] = j < lanes ? _mm512_maskz_loadu_epi16(m, col0 + j * ldb + 2 * p0) : _mm512_setzero_si512();
      Transpose16x16(w);
      for (int64_t p = p0; p < std::min<int64_t>(pairs, p0 + 16); ++p) _mm512_store_si512(d32 + p * width, w[p - p0]);
    }
  }
}

// C[0:Rows, 0:nw] = alpha * A[0:Rows, 0:2 pairs] @ Bp + beta * C; `a` is row-major with stride lda
// (in bfloat16 elements), read one 32-bit pair per row and step. C is float32, or bfloat16 bits
// when Bf16Out (the float32 result rounded to nearest even by VCVTNEPS2BF16).
template <int Rows, int Vectors, bool Bf16Out>
TOB_BF16_FN void Tile(const uint16_t* a, int64_t lda, const uint16_t* bp, int64_t pairs, void* c, int64_t ldc,
                      int64_t nw, float alpha, float beta) {
  __m512 acc[Rows][Vectors];
#pragma GCC unroll 16
  for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < Vectors; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh b[Vectors];
#pragma GCC unroll 2
    for (int v = 0; v < Vectors; ++v) b[v] = (__m512bh)_mm512_load_si512(bp + (p * Vectors + v) * 2 * kLanes);
#pragma GCC unroll 16
    for (int r = 0; r < Rows; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(LoadPair(a + r * lda + 2 * p));
#pragma GCC unroll 2
      for (int v = 0; v < Vectors; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, b[v]);
    }
  }
  __mmask16 mask[Vectors];
#pragma GCC unroll 2
  for (int v = 0; v < Vectors; ++v) {
    const int64_t left = nw - v * kLanes;
    mask[v] = left >= kLanes ? __mmask16(0xFFFF) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 16
  for (int r = 0; r < Rows; ++r) {
#pragma GCC unroll 2
    for (int v = 0; v < Vectors; ++v) {
      __m512 x = _mm512_mul_ps(acc[r][v], va);
      if constexpr (Bf16Out) {
        uint16_t* cr = static_cast<uint16_t*>(c) + r * ldc + v * kLanes;
        if (beta != 0.f) {
          const __m512i old = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask[v], cr));
          x = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(old, 16)), vb, x);
        }
        _mm256_mask_storeu_epi16(cr, mask[v], (__m256i)_mm512_cvtneps_pbh(x));
      } else {
        float* cr = static_cast<float*>(c) + r * ldc + v * kLanes;
        if (beta != 0.f) x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask[v], cr), vb, x);
        _mm512_mask_storeu_ps(cr, mask[v], x);
      }
    }
  }
}

using TileFn = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, void*, int64_t, int64_t, float, float);

// kTiles.rows[rows - 1][vectors - 1][bf16 output]
template <size_t... R>
constexpr auto MakeTiles(std::index_sequence<R...>) {
  struct Table {
    TileFn rows[sizeof...(R)][2][2];
  };
  return Table{{{{Tile<R + 1, 1, false>, Tile<R + 1, 1, true>}, {Tile<R + 1, 2, false>, Tile<R + 1, 2, true>}}...}};
}
constexpr auto kTiles = MakeTiles(std::make_index_sequence<kMaxRows>());

struct Problem {
  bool trans_b;
  int64_t M, N, K;
  float alpha;
  const uint16_t* A;
  int64_t lda;
  const uint16_t* B;
  int64_t ldb;
  float beta;
  void* C;  // float32, or bfloat16 when bf16_out
  int64_t ldc;
  bool bf16_out;
};

// Rows [m_begin, m_end) x columns [n0, n0 + 32) of C (fewer at the right edge).
void RunPanel(const Problem& p, int64_t m_begin, int64_t m_end, int64_t n0, uint16_t* pack) {
  const int64_t nw = std::min<int64_t>(kPanelCols, p.N - n0);
  const int vectors = nw > kLanes ? 2 : 1;
  const int64_t rows = m_end - m_begin;
  // Equal row tiles (64 rows: 6 tiles of 10-11 rather than 5 of 12 and one of 4).
  const int64_t tiles = (rows + kMaxRows - 1) / kMaxRows;
  for (int64_t k0 = 0; k0 < p.K; k0 += kKc) {
    const int64_t kc = std::min(kKc, p.K - k0);
    const int64_t pairs = (kc + 1) / 2;
    PackPanel(p.trans_b, p.B, p.ldb, k0, kc, n0, nw, vectors, pack);
    const float beta = k0 == 0 ? p.beta : 1.f;  // later K blocks add to what the first one wrote
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t lo = m_begin + rows * t / tiles, hi = m_begin + rows * (t + 1) / tiles;
      const int64_t c_offset = lo * p.ldc + n0;
      void* c = p.bf16_out ? static_cast<void*>(static_cast<uint16_t*>(p.C) + c_offset)
                           : static_cast<void*>(static_cast<float*>(p.C) + c_offset);
      kTiles.rows[hi - lo - 1][vectors - 1][p.bf16_out](p.A + lo * p.lda + k0, p.lda, pack, pairs, c, p.ldc, nw,
                                                        p.alpha, beta);
    }
  }
}

// PackBf16Rows for a transposed A (K x M, row stride lda), rows [r_begin, r_end): 16 rows x 16
// pairs of K at a time, each pair of A's rows k, k + 1 interleaved into one 32-bit word per
// output row, the 16 x 16 words transposed and stored as 16 output rows. Zero past K.
TOB_BF16_FN void PackTransposedRows(int64_t r_begin, int64_t r_end, int64_t K, const uint16_t* a, int64_t lda,
                                    int64_t k_even, uint16_t* dst) {
  const __m512i idx0 = _mm512_load_si512(kInterleave[0]);
  const int64_t pairs = k_even / 2;
  for (int64_t r0 = r_begin; r0 < r_end; r0 += 16) {
    const int64_t rows = std::min<int64_t>(16, r_end - r0);
    const __mmask32 row_mask = (__mmask32(1) << rows) - 1;
    for (int64_t p0 = 0; p0 < pairs; p0 += 16) {
      __m512i w[16];
      for (int p = 0; p < 16; ++p) {
        const int64_t k = 2 * (p0 + p);
        const __m512i x = k < K ? _mm512_maskz_loadu_epi16(row_mask, a + k * lda + r0) : _mm512_setzero_si512();
        const __m512i y =
            k + 1 < K ? _mm512_maskz_loadu_epi16(row_mask, a + (k + 1) * lda + r0) : _mm512_setzero_si512();
        w[p] = _mm512_permutex2var_epi16(x, idx0, y);
      }
      Transpose16x16(w);
      const int64_t n = std::min<int64_t>(16, pairs - p0);
      const __mmask16 pair_mask = n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
      for (int64_t j = 0; j < rows; ++j)
        _mm512_mask_storeu_epi32(reinterpret_cast<int32_t*>(dst + (r0 + j) * k_even) + p0, pair_mask, w[j]);
    }
  }
}

bool CpuHasBf16() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
}

}  // namespace

bool Bf16GemmAvailable() {
  static const bool available = EnvSwitchOn(EnvSwitch::kBf16Gemm) && CpuHasBf16();
  return available;
}

namespace {

// Bf16Gemm's driver; c[i] points at float32 or (bf16_out) bfloat16 storage.
void RunBatch(bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const BFloat16* const* a, int64_t lda,
              const BFloat16* const* b, int64_t ldb, float beta, void* const* c, int64_t ldc, bool bf16_out,
              int64_t batch, ThreadPool* pool) {
  const int64_t panels = (N + kPanelCols - 1) / kPanelCols;
  const int threads = pool != nullptr ? pool->num_threads() : 1;
  const double flops = 2.0 * static_cast<double>(M) * N * K * batch;
  const bool parallel = threads > 1 && flops >= kMinParallelFlops;
  // Few panels (a narrow N, one problem): also cut M so every thread gets work; each chunk then
  // packs its panels again, which costs little next to 48 or more rows of products.
  int64_t chunks = 1;
  if (parallel && batch * panels < 4 * threads)
    chunks = std::clamp<int64_t>((4 * threads + batch * panels - 1) / (batch * panels), 1,
                                 std::max<int64_t>(1, M / kMinChunkRows));
  const int64_t units = batch * panels * chunks;
  auto run = [&](int64_t begin, int64_t end) {
    uint16_t* pack = PackBuffer();
    for (int64_t u = begin; u < end; ++u) {
      const int64_t i = u / (panels * chunks), rest = u % (panels * chunks);
      const int64_t chunk = rest / panels, panel = rest % panels;
      const Problem p{trans_b, M, N, K, alpha, Bits(a[i]), lda, Bits(b[i]), ldb, beta, c[i], ldc, bf16_out};
      RunPanel(p, M * chunk / chunks, M * (chunk + 1) / chunks, panel * kPanelCols, pack);
    }
  };
  if (!parallel || units == 1) run(0, units);
  else ParallelFor(pool, units, 1, run);
}

}  // namespace

void Bf16Gemm(bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const BFloat16* const* a, int64_t lda,
              const BFloat16* const* b, int64_t ldb, float beta, float* const* c, int64_t ldc, int64_t batch,
              ThreadPool* pool) {
  std::vector<void*> out(c, c + batch);
  RunBatch(trans_b, M, N, K, alpha, a, lda, b, ldb, beta, out.data(), ldc, false, batch, pool);
}

void Bf16GemmRounded(bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const BFloat16* const* a, int64_t lda,
                     const BFloat16* const* b, int64_t ldb, float beta, BFloat16* const* c, int64_t ldc, int64_t batch,
                     ThreadPool* pool) {
  std::vector<void*> out(c, c + batch);
  RunBatch(trans_b, M, N, K, alpha, a, lda, b, ldb, beta, out.data(), ldc, true, batch, pool);
}

#else  // no AVX512-BF16 compiler support: gemm.cc keeps the float32 path

bool Bf16GemmAvailable() { return false; }

void Bf16Gemm(bool, int64_t, int64_t, int64_t, float, const BFloat16* const*, int64_t, const BFloat16* const*, int64_t,
              float, float* const*, int64_t, int64_t, ThreadPool*) {
  std::abort();  // callers check Bf16GemmAvailable()
}

void Bf16GemmRounded(bool, int64_t, int64_t, int64_t, float, const BFloat16* const*, int64_t, const BFloat16* const*,
                     int64_t, float, BFloat16* const*, int64_t, int64_t, ThreadPool*) {
  std::abort();
}

#endif

void PackBf16Rows(bool trans_a, int64_t M, int64_t K, const BFloat16* a, int64_t lda, int64_t k_even, BFloat16* dst,
                  ThreadPool* pool) {
  // Blocks of 32 x 32 keep the transposed reads within a few cache lines.
  constexpr int64_t kBlock = 32;
  ParallelFor(pool, (M + kBlock - 1) / kBlock, 1, [&](int64_t begin, int64_t end) {
    for (int64_t rb = begin * kBlock; rb < std::min(M, end * kBlock); rb += kBlock) {
      const int64_t r_end = std::min(M, rb + kBlock);
      if (!trans_a) {
        for (int64_t r = rb; r < r_end; ++r) std::memcpy(dst + r * k_even, a + r * lda, sizeof(BFloat16) * K);
#if TOB_BF16_GEMM_COMPILED
      } else if (Bf16GemmAvailable()) {
        PackTransposedRows(rb, r_end, K, Bits(a), lda, k_even, reinterpret_cast<uint16_t*>(dst));
        continue;  // zero past K already
#endif
      } else {
        for (int64_t kb = 0; kb < K; kb += kBlock)
          for (int64_t r = rb; r < r_end; ++r)
            for (int64_t k = kb; k < std::min(K, kb + kBlock); ++k) dst[r * k_even + k] = a[k * lda + r];
      }
      for (int64_t r = rb; r < r_end; ++r)
        for (int64_t k = K; k < k_even; ++k) dst[r * k_even + k] = BFloat16();
    }
  });
}

}  // namespace tob
