// Vectorised float32 transcendental functions over arrays. Calling libm per element is what
// makes naive engines slower than torch, so these use Cephes-style range reduction and
// polynomials on 8 lanes of AVX2/FMA, or 16 lanes of AVX-512 when the CPU has it (chosen at run
// time, see vector_math_isa.h), and scalar libm when AVX2 is not compiled in. Each is
// accurate to ~1e-6 relative over the whole float range (exp, log, sigmoid, tanh: a few ulp;
// erf: <5e-7) and handles inf/NaN like libm. x and y may be the same array.
#pragma once

#include <cstdint>

namespace tob::ew {

void ExpArray(const float* x, float* y, int64_t n);
void LogArray(const float* x, float* y, int64_t n);
void TanhArray(const float* x, float* y, int64_t n);
void SigmoidArray(const float* x, float* y, int64_t n);
void ErfArray(const float* x, float* y, int64_t n);
// 0.5 x (1 + erf(x / sqrt(2)))
void GeluArray(const float* x, float* y, int64_t n);
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
void GeluTanhArray(const float* x, float* y, int64_t n);
void SoftplusArray(const float* x, float* y, int64_t n);
// x < 0 ? alpha (exp(x) - 1) : x
void EluArray(const float* x, float* y, int64_t n, float alpha);
// gamma * (x <= 0 ? alpha (exp(x) - 1) : x)
void SeluArray(const float* x, float* y, int64_t n, float alpha, float gamma);
// Exact IEEE results (no approximation), spelled out because libm calls block vectorisation.
void SqrtArray(const float* x, float* y, int64_t n);
void FloorArray(const float* x, float* y, int64_t n);
void CeilArray(const float* x, float* y, int64_t n);
void RoundHalfEvenArray(const float* x, float* y, int64_t n);

}  // namespace tob::ew
