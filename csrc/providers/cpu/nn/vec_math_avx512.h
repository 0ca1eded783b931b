// AVX-512 variants of vec_math.h's float row primitives for the loss head's long rows (LogSoftmax
// over a vocabulary, the softmax cross-entropy gradient), chosen at run time by their callers where
// Available() (vec_math_avx512.cc; the build targets x86-64-v3). The exponentials are simd::Exp's
// bits (simd/avx512_exp.h) on every element, masked tails included; sums run over 16 lanes, so they
// may differ from vec_math.h's AVX2 sums in their last bits (a different order of additions).
#pragma once

#include <cstdint>

namespace tob::vec::avx512 {

bool Available();  // compiled in and this CPU has AVX-512 F, BW, DQ and VL

// max_i x[i] (-inf for n = 0), as vec::Max.
float Max(const float* x, int64_t n);

// sum_i exp(x[i] - shift), as vec::ExpShiftedSumOnly.
float ExpShiftedSumOnly(const float* x, int64_t n, float shift);

// y[i] = exp(x[i]) * f (exp rounded to float32, then the product rounded once).
void ExpScaled(const float* x, int64_t n, float f, float* y);

}  // namespace tob::vec::avx512
