// The micro-kernel behind small_gemm.h: AVX-512 only. (An AVX2 tile of 6 x 16 measured level with
// OpenBLAS's Haswell kernels, and slower at M = 16, K = N = 1024, so CPUs without AVX-512 keep
// OpenBLAS for every shape and no AVX2 variant is carried.)
#pragma once

#include <cstdint>

namespace tob::small_gemm {

// One register tile: C[0:rows, 0:nw] = alpha * op(A)[0:rows, 0:kc] @ Bp + beta * C, where Bp is
// a packed panel of kc rows of `vectors` SIMD vectors each (zero past column nw). `a` points at
// op(A)[0, 0]: row r, step k is a[r * lda + k], or a[k * lda + r] when trans_a. beta == 0 does not
// read C. rows is 1..max_rows, vectors is 1 or 2, nw is 1..vectors * lanes.
using TileFn = void (*)(int rows, int vectors, bool trans_a, const float* a, int64_t lda, const float* bp, int64_t kc,
                        float* c, int64_t ldc, int64_t nw, float alpha, float beta);

struct Kernels {
  const char* name;
  int lanes;     // floats per SIMD vector; a panel is 2 * lanes columns wide
  int max_rows;  // the largest `rows` the tile takes (its accumulators fill the register file)
  TileFn tile;
};

namespace avx512 {
bool Available();  // compiled in and supported by this CPU
const Kernels& Get();
}  // namespace avx512

}  // namespace tob::small_gemm
