// The AVX-512 VNNI tile of qgemm.h: up to 8 rows x 32 columns (2 zmm of int32) per tile, 16
// accumulators; each step broadcasts 4 bytes of an A row and adds 4 uint8 x int8 products per
// lane with VPDPBUSD (no saturation: int32 wraps like the exact sum). The build targets
// x86-64-v3, so the functions carry their own target attribute and run only when Available().
#include "providers/cpu/nn/qgemm.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include <cstring>
#define TOB_QGEMM_VNNI 1
#define TOB_VNNI_FN __attribute__((target("avx512f,avx512bw,avx512vnni")))
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace tob::qgemm::avx512vnni {

#if TOB_QGEMM_VNNI

namespace {

template <int Rows>
TOB_VNNI_FN void TileRows(const TileArgs& p) {
  __m512i acc[Rows][2];
#pragma GCC unroll 8
  for (int r = 0; r < Rows; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
  const uint8_t* a = p.a;
  const int8_t* b = p.b;
  for (int64_t g = 0; g < p.k4; ++g, b += kPanel * 4) {
    const __m512i b0 = _mm512_loadu_si512(b);
    const __m512i b1 = _mm512_loadu_si512(b + 64);
#pragma GCC unroll 8
    for (int r = 0; r < Rows; ++r) {
      int32_t quad;
      std::memcpy(&quad, a + r * p.kp + 4 * g, sizeof(quad));
      const __m512i av = _mm512_set1_epi32(quad);
      acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], av, b0);
      acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], av, b1);
    }
  }
  const __m512i zb0 = _mm512_loadu_si512(p.zb), zb1 = _mm512_loadu_si512(p.zb + 16);
  const __m512i t0 = _mm512_loadu_si512(p.t), t1 = _mm512_loadu_si512(p.t + 16);
  const int lo = p.cols < 16 ? p.cols : 16, hi = p.cols - lo;
  const __mmask16 mask0 = static_cast<__mmask16>((1u << lo) - 1);
  const __mmask16 mask1 = static_cast<__mmask16>(hi >= 16 ? 0xFFFF : (1u << hi) - 1);
#pragma GCC unroll 8
  for (int r = 0; r < Rows; ++r) {
    const __m512i rs = _mm512_set1_epi32(p.rowsum[r]), za = _mm512_set1_epi32(p.za[r]);
    __m512i c0 = _mm512_sub_epi32(acc[r][0], _mm512_mullo_epi32(rs, zb0));
    __m512i c1 = _mm512_sub_epi32(acc[r][1], _mm512_mullo_epi32(rs, zb1));
    c0 = _mm512_sub_epi32(c0, _mm512_mullo_epi32(za, t0));
    c1 = _mm512_sub_epi32(c1, _mm512_mullo_epi32(za, t1));
    _mm512_mask_storeu_epi32(p.c + r * p.ldc, mask0, c0);
    if (hi > 0) _mm512_mask_storeu_epi32(p.c + r * p.ldc + 16, mask1, c1);
  }
}

using TileFn = void (*)(const TileArgs&);
constexpr TileFn kTiles[kMaxRows] = {TileRows<1>, TileRows<2>, TileRows<3>, TileRows<4>,
                                     TileRows<5>, TileRows<6>, TileRows<7>, TileRows<8>};

}  // namespace

bool Available() {
  static const bool available =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
  return available;
}

void Tile(const TileArgs& args) { kTiles[args.rows - 1](args); }

#else

bool Available() { return false; }
void Tile(const TileArgs& args) { TilePortable(args); }

#endif

}  // namespace tob::qgemm::avx512vnni
