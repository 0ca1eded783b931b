// The engine's 8-bit integer GEMM, for MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv:
//   C[m][n] = sum_k (A[m][k] - za[m]) * (B[k][n] - zb[n])
// with A and B each int8 or uint8, per-tensor or per-row (A) / per-column (B) zero points, and
// exact int32 accumulation (wrapping modulo 2^32 only where the int32 sum itself overflows, as the
// ONNX ops allow).
//
// How: A is shifted to uint8 (int8 + 128) and B to int8 (uint8 - 128), so every product is one
// uint8 x int8 product, the operand of VPDPBUSD (AVX-512 VNNI: 4 of them summed into an int32
// lane per instruction); the shifts and the zero points come back through A's row sums and B's
// column sums: with a = a' - ZA' and b = b' - ZB' folded,
//   C = P - rowsum(a')[m] * ZB[n] - ZA[m] * (colsum(b')[n] - K * ZB[n]),
// all in wrapping uint32 arithmetic, which equals the direct int32 sum modulo 2^32.
//
// Packed layout: A as rows of K rounded up to 4 bytes (zero padded); B as panels of 32 columns,
// each a run of K/4 groups of 32 x 4 bytes (column c's 4 consecutive k values together), the
// layout VPDPBUSD reads. The portable kernel reads the same layout, so both paths share packing.
// docs/dependencies.md says why this is our own code (no int8 GEMM in OpenBLAS; oneDNN's cost).
#pragma once

#include <cstddef>
#include <cstdint>

#include "framework/thread_pool.h"

namespace tob::qgemm {

// One operand: row-major bytes with leading dimension `ld` (int8 when is_signed), and its zero
// points: nullptr for none, else one value (per_index = false) or one per row of A / column of B.
struct Operand {
  const uint8_t* data = nullptr;
  int64_t ld = 0;
  bool is_signed = false;
  const int32_t* zero = nullptr;
  bool per_index = false;
};

enum class Isa { kAuto, kPortable, kAvx512Vnni };

// Whether the AVX-512 VNNI kernel is compiled in and this CPU has VPDPBUSD.
bool VnniAvailable();
// The kernel kAuto picks: VNNI where available unless TOB_QGEMM=portable.
Isa DefaultIsa();
const char* IsaName(Isa isa);

// Scratch bytes Run needs for an M x N x K product (packed operands and their sums).
size_t WorkspaceBytes(int64_t M, int64_t N, int64_t K);

// C (int32, leading dimension ldc) = the product above. `workspace` holds WorkspaceBytes bytes
// (64-byte aligned). `pool` may be nullptr (one thread). kAvx512Vnni falls back to portable when
// the CPU lacks it.
void Run(int64_t M, int64_t N, int64_t K, const Operand& a, const Operand& b, int32_t* c, int64_t ldc, void* workspace,
         ThreadPool* pool, Isa isa = Isa::kAuto);

// ---- the micro-kernels' contract (qgemm.cc, qgemm_avx512vnni.cc) ----

inline constexpr int kPanel = 32;   // columns per B panel
inline constexpr int kMaxRows = 8;  // rows per register tile

// One tile: rows 0..rows-1 of packed A (row stride kp bytes) times one B panel of k4 groups, into
// C's first `cols` (1..32) columns, applying the epilogue with this tile's row sums / row zero
// points and the panel's column terms (zb, t: 32 entries each).
struct TileArgs {
  int rows;
  int cols;
  const uint8_t* a;
  int64_t kp;
  const int8_t* b;
  int64_t k4;
  int32_t* c;
  int64_t ldc;
  const int32_t* rowsum;  // per row
  const int32_t* za;      // per row, shifted (ZA)
  const int32_t* zb;      // per column, shifted (ZB)
  const int32_t* t;       // per column: colsum - K * ZB
};
void TilePortable(const TileArgs& args);
namespace avx512vnni {
bool Available();
void Tile(const TileArgs& args);
}  // namespace avx512vnni

}  // namespace tob::qgemm
