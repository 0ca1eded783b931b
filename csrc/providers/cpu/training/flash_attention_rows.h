// Row passes of FlashAttention's bfloat16 path (flash_attention.cc): the probabilities P and the
// score gradients dS are formed in float32 and rounded to bfloat16 once, as the operands of the
// bfloat16 GEMM, the way torch's CPU flash attention rounds them for 16-bit inputs (the row sum
// of the softmax is taken over the float32 values before rounding, as torch takes it). The
// rounding is core/half.h's FloatToBFloat16Bits (nearest, ties to even, NaN made quiet), bit for
// bit in every variant.
//
// Two variants behind one table (RowOps), chosen once at run time by Ops(): AVX-512 (16 lanes,
// masked tails; flash_attention_rows_avx512.cc) on CPUs that have it, which every CPU with the
// native bfloat16 GEMM does, and the portable one (flash_attention_rows.cc: AVX2 lanes where the
// build has them, a scalar tail). Both compute exp with the provider's Cephes polynomial and range
// reduction (simd/avx2_exp.h), the same bits on the AVX2 lanes; the portable scalar tail uses
// std::exp, and the float32 sums may differ in their last bits between the variants (a different
// order of additions). tests/cpp/flash_attention_rows_test.cc checks both against float64.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/half.h"

namespace tob::flash_rows {

// y[n .. n_even) = 0: the pad the bfloat16 GEMM reads as the last pair's second half.
inline void PadZero(uint16_t* y, int64_t n, int64_t n_even) {
  for (int64_t i = n; i < n_even; ++i) y[i] = 0;
}

// The row passes, one table per variant, so that a kernel picks its variant once per call. Every
// function writes bfloat16 bits (uint16_t) for i < n and zero up to n_even.
struct RowOps {
  // max_i x[i] (-inf for n = 0).
  float (*max)(const float* x, int64_t n);
  // y[i] = bfloat16(exp(x[i] - shift)); returns the float32 sum of the unrounded exponentials: the
  // forward's P and its row sum.
  float (*exp_shifted_sum_to_bf16)(const float* x, int64_t n, float shift, uint16_t* y, int64_t n_even);
  // x[i] = exp(x[i] - shift) in place (float32, for dS) and y[i] = bfloat16(x[i]): the backward's P.
  void (*exp_shifted_to_bf16)(float* x, int64_t n, float shift, uint16_t* y, int64_t n_even);
  // y[j] = bfloat16(p[j] (dp[j] - delta)): the softmax gradient of one row, dS.
  void (*softmax_grad_row_to_bf16)(const float* p, const float* dp, float delta, int64_t n, uint16_t* y,
                                   int64_t n_even);
  // sum_x a[x] b[x] of two bfloat16 rows in float32: the softmax gradient's row term dY . Y.
  float (*dot_bf16)(const BFloat16* a, const BFloat16* b, int64_t n);
};

namespace portable {
const RowOps& Ops();  // AVX2 lanes where the build has them, a scalar tail (flash_attention_rows.cc)
}  // namespace portable

namespace avx512 {
bool Available();     // compiled in and this CPU has AVX-512 F, BW, DQ and VL
const RowOps& Ops();  // the AVX-512 variant (flash_attention_rows_avx512.cc; only where Available())
}  // namespace avx512

// The variant for this CPU: avx512::Ops() where avx512::Available(), else portable::Ops().
const RowOps& Ops();

}  // namespace tob::flash_rows
