#include "providers/cpu/nn/qgemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "core/env_switch.h"

namespace tob::qgemm {

namespace {

constexpr size_t kAlign = 64;

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct Layout {
  int64_t k4, kp, panels;
  size_t a_bytes, b_bytes, row_bytes, col_bytes;
};

Layout LayoutOf(int64_t M, int64_t N, int64_t K) {
  Layout l;
  l.k4 = (K + 3) / 4;
  l.kp = l.k4 * 4;
  l.panels = (N + kPanel - 1) / kPanel;
  l.a_bytes = AlignUp(static_cast<size_t>(M * l.kp));
  l.b_bytes = AlignUp(static_cast<size_t>(l.panels * l.k4 * kPanel * 4));
  l.row_bytes = AlignUp(static_cast<size_t>(M) * sizeof(int32_t));
  l.col_bytes = AlignUp(static_cast<size_t>(l.panels * kPanel) * sizeof(int32_t));
  return l;
}

int32_t ZeroAt(const Operand& op, int64_t i) {
  if (op.zero == nullptr) return 0;
  return op.per_index ? op.zero[i] : op.zero[0];
}

// Wrapping int32 arithmetic through uint32 (signed overflow is undefined in C++).
inline int32_t WrapSub(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) - static_cast<uint32_t>(b));
}
inline int32_t WrapMul(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) * static_cast<uint32_t>(b));
}

#if defined(__AVX2__)
// B's full 4-deep groups of one full 32-column panel (columns n0.. of `src`, rows 4g..4g+3), `groups`
// of them: the 4 rows' bytes interleaved so each column's 4 k values lie together, the sign flip
// applied, and the column sums (int8 values, wrapping like the scalar sums) added to `sums`.
void PackFullGroupsAvx2(const uint8_t* src, int64_t ld, int64_t groups, uint8_t flip, int8_t* dst, uint32_t* sums) {
  const __m256i fv = _mm256_set1_epi8(static_cast<char>(flip));
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  __m256i s[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
  for (int64_t g = 0; g < groups; ++g, src += 4 * ld, dst += kPanel * 4) {
    auto row = [&](int64_t j) {
      return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + j * ld)), fv);
    };
    const __m256i r0 = row(0), r1 = row(1), r2 = row(2), r3 = row(3);
    // Per 128-bit lane: t01lo holds columns 0-7 (16-23) of rows 0 and 1 interleaved, t01hi 8-15 (24-31).
    const __m256i t01lo = _mm256_unpacklo_epi8(r0, r1), t01hi = _mm256_unpackhi_epi8(r0, r1);
    const __m256i t23lo = _mm256_unpacklo_epi8(r2, r3), t23hi = _mm256_unpackhi_epi8(r2, r3);
    // 4 bytes per column: q0 columns 0-3 | 16-19, q1 4-7 | 20-23, q2 8-11 | 24-27, q3 12-15 | 28-31.
    const __m256i q0 = _mm256_unpacklo_epi16(t01lo, t23lo), q1 = _mm256_unpackhi_epi16(t01lo, t23lo);
    const __m256i q2 = _mm256_unpacklo_epi16(t01hi, t23hi), q3 = _mm256_unpackhi_epi16(t01hi, t23hi);
    const __m256i o[4] = {_mm256_permute2x128_si256(q0, q1, 0x20), _mm256_permute2x128_si256(q2, q3, 0x20),
                          _mm256_permute2x128_si256(q0, q1, 0x31), _mm256_permute2x128_si256(q2, q3, 0x31)};
    for (int i = 0; i < 4; ++i) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32 * i), o[i]);
      // Each column's 4 int8 values summed exactly: pairs into int16 (|sum| <= 256), pairs of those into int32.
      s[i] = _mm256_add_epi32(s[i], _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, o[i]), ones16));
    }
  }
  for (int i = 0; i < 4; ++i) {
    alignas(32) uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s[i]);
    for (int j = 0; j < 8; ++j) sums[8 * i + j] += lanes[j];
  }
}
#endif

}  // namespace

bool VnniAvailable() { return avx512vnni::Available(); }

Isa DefaultIsa() {
  static const Isa isa = [] {
    if (EnvSwitchValue(EnvSwitch::kQgemm) == "portable") return Isa::kPortable;
    return VnniAvailable() ? Isa::kAvx512Vnni : Isa::kPortable;
  }();
  return isa;
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAuto: return IsaName(DefaultIsa());
    case Isa::kPortable: return "portable";
    case Isa::kAvx512Vnni: return "avx512vnni";
  }
  return "unknown";
}

size_t WorkspaceBytes(int64_t M, int64_t N, int64_t K) {
  const Layout l = LayoutOf(M, N, K);
  return l.a_bytes + l.b_bytes + 2 * l.row_bytes + 2 * l.col_bytes;
}

// The portable tile. On x86-64-v3 (the engine's baseline) it is AVX2's vpmaddwd: B widened to
// int16 four columns at a time, A's 4 bytes of the group repeated, products summed in pairs into
// int32 lanes (exact: |a * b| <= 255 * 128), the two lanes of each column added at the end; the row
// stays in 8 accumulators while the panel streams by. Elsewhere, plain C++.
void TilePortable(const TileArgs& p) {
#if defined(__AVX2__)
  for (int r = 0; r < p.rows; ++r) {
    __m256i acc[8];
    for (auto& v : acc) v = _mm256_setzero_si256();
    const uint8_t* a = p.a + r * p.kp;
    const int8_t* b = p.b;
    for (int64_t g = 0; g < p.k4; ++g, b += kPanel * 4) {
      const int64_t a4 = static_cast<int64_t>(a[4 * g]) | static_cast<int64_t>(a[4 * g + 1]) << 16 |
                         static_cast<int64_t>(a[4 * g + 2]) << 32 | static_cast<int64_t>(a[4 * g + 3]) << 48;
      const __m256i av = _mm256_set1_epi64x(a4);
      for (int q = 0; q < 8; ++q) {
        const __m256i bq = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16 * q)));
        acc[q] = _mm256_add_epi32(acc[q], _mm256_madd_epi16(av, bq));
      }
    }
    // Lane pairs (k0 + k1, k2 + k3) of columns 4q..4q+3 -> one sum per column.
    alignas(32) int32_t lanes[64];
    for (int q = 0; q < 8; ++q) _mm256_store_si256(reinterpret_cast<__m256i*>(lanes + 8 * q), acc[q]);
    int32_t* c = p.c + r * p.ldc;
    for (int j = 0; j < p.cols; ++j) {
      const int32_t v =
          static_cast<int32_t>(static_cast<uint32_t>(lanes[2 * j]) + static_cast<uint32_t>(lanes[2 * j + 1]));
      c[j] = WrapSub(WrapSub(v, WrapMul(p.rowsum[r], p.zb[j])), WrapMul(p.za[r], p.t[j]));
    }
  }
#else
  for (int r = 0; r < p.rows; ++r) {
    uint32_t acc[kPanel] = {};
    const uint8_t* a = p.a + r * p.kp;
    for (int64_t g = 0; g < p.k4; ++g) {
      const int8_t* b = p.b + g * kPanel * 4;
      for (int c = 0; c < kPanel; ++c)
        for (int j = 0; j < 4; ++j) acc[c] += static_cast<uint32_t>(a[4 * g + j] * b[4 * c + j]);
    }
    int32_t* c = p.c + r * p.ldc;
    for (int j = 0; j < p.cols; ++j)
      c[j] = WrapSub(WrapSub(static_cast<int32_t>(acc[j]), WrapMul(p.rowsum[r], p.zb[j])), WrapMul(p.za[r], p.t[j]));
  }
#endif
}

void Run(int64_t M, int64_t N, int64_t K, const Operand& a, const Operand& b, int32_t* c, int64_t ldc, void* workspace,
         ThreadPool* pool, Isa isa) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // empty sums
    for (int64_t m = 0; m < M; ++m) std::fill(c + m * ldc, c + m * ldc + N, 0);
    return;
  }
  if (isa == Isa::kAuto) isa = DefaultIsa();
  if (isa == Isa::kAvx512Vnni && !VnniAvailable()) isa = Isa::kPortable;
  const Layout l = LayoutOf(M, N, K);
  auto* base = static_cast<uint8_t*>(workspace);
  uint8_t* pa = base;
  auto* pb = reinterpret_cast<int8_t*>(base + l.a_bytes);
  auto* rowsum = reinterpret_cast<int32_t*>(base + l.a_bytes + l.b_bytes);
  auto* za = reinterpret_cast<int32_t*>(base + l.a_bytes + l.b_bytes + l.row_bytes);
  auto* zb = reinterpret_cast<int32_t*>(base + l.a_bytes + l.b_bytes + 2 * l.row_bytes);
  auto* t = reinterpret_cast<int32_t*>(base + l.a_bytes + l.b_bytes + 2 * l.row_bytes + l.col_bytes);
  const uint8_t a_flip = a.is_signed ? 0x80 : 0x00;  // int8 -> uint8: + 128
  const uint8_t b_flip = b.is_signed ? 0x00 : 0x80;  // uint8 -> int8: - 128
  const int32_t a_shift = a.is_signed ? 128 : 0, b_shift = b.is_signed ? 0 : -128;

  // Pack A: rows of kp bytes, the row sums and the shifted zero points ZA = za + a_shift.
  ParallelFor(pool, M, std::max<int64_t>(1, 65536 / l.kp), [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      const uint8_t* src = a.data + m * a.ld;
      uint8_t* dst = pa + m * l.kp;
      uint32_t sum = 0;  // wraps like the product's sums would
      for (int64_t k = 0; k < K; ++k) {
        dst[k] = static_cast<uint8_t>(src[k] ^ a_flip);
        sum += dst[k];
      }
      std::fill(dst + K, dst + l.kp, uint8_t{0});
      rowsum[m] = static_cast<int32_t>(sum);
      za[m] = ZeroAt(a, m) + a_shift;
    }
  });
  // Pack B: panels of 32 columns in 4-deep k groups, the column terms t = colsum - K * ZB.
  ParallelFor(pool, l.panels, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      int8_t* dst = pb + p * l.k4 * kPanel * 4;
      const int64_t n0 = p * kPanel, cols = std::min<int64_t>(kPanel, N - n0);
      uint32_t sums[kPanel] = {};
      int64_t g_begin = 0;  // the groups left to the scalar loop: partial panels and a partial last group
#if defined(__AVX2__)
      if (cols == kPanel) {
        g_begin = K / 4;
        PackFullGroupsAvx2(b.data + n0, b.ld, g_begin, b_flip, dst, sums);
      }
#endif
      for (int64_t g = g_begin; g < l.k4; ++g) {
        int8_t* group = dst + g * kPanel * 4;
        for (int64_t cc = 0; cc < kPanel; ++cc) {
          for (int64_t j = 0; j < 4; ++j) {
            const int64_t k = 4 * g + j;
            int8_t v = 0;
            if (cc < cols && k < K) v = static_cast<int8_t>(b.data[k * b.ld + n0 + cc] ^ b_flip);
            group[cc * 4 + j] = v;
            sums[cc] += static_cast<uint32_t>(static_cast<int32_t>(v));
          }
        }
      }
      for (int64_t cc = 0; cc < kPanel; ++cc) {
        const int32_t zbv = cc < cols ? ZeroAt(b, n0 + cc) + b_shift : 0;
        zb[n0 + cc] = zbv;
        t[n0 + cc] = WrapSub(static_cast<int32_t>(sums[cc]), WrapMul(static_cast<int32_t>(K), zbv));
      }
    }
  });

  // Units: one tile of up to 8 rows x a group of up to 4 panels.
  constexpr int64_t kPanelGroup = 4;
  const int64_t row_tiles = (M + kMaxRows - 1) / kMaxRows;
  const int64_t panel_groups = (l.panels + kPanelGroup - 1) / kPanelGroup;
  const int64_t per_unit = kMaxRows * kPanelGroup * kPanel * l.kp;  // multiply-adds
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(1, per_unit));
  const auto tile = isa == Isa::kAvx512Vnni ? &avx512vnni::Tile : &TilePortable;
  ParallelFor(pool, row_tiles * panel_groups, grain, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t rt = u % row_tiles, pg = u / row_tiles;
      const int64_t m0 = rt * kMaxRows;
      TileArgs args;
      args.rows = static_cast<int>(std::min<int64_t>(kMaxRows, M - m0));
      args.a = pa + m0 * l.kp;
      args.kp = l.kp;
      args.k4 = l.k4;
      args.ldc = ldc;
      args.rowsum = rowsum + m0;
      args.za = za + m0;
      for (int64_t p = pg * kPanelGroup; p < std::min(l.panels, (pg + 1) * kPanelGroup); ++p) {
        const int64_t n0 = p * kPanel;
        args.cols = static_cast<int>(std::min<int64_t>(kPanel, N - n0));
        args.b = pb + p * l.k4 * kPanel * 4;
        args.c = c + m0 * ldc + n0;
        args.zb = zb + n0;
        args.t = t + n0;
        tile(args);
      }
    }
  });
}

}  // namespace tob::qgemm
