// The per-ISA variants behind vector_math.h's hottest functions. vector_math.cc picks one at run
// time (AVX-512 when the CPU has it, else AVX2); they are declared here so the tests can check
// every variant the test machine can run. Same contracts as the vector_math.h functions.
#pragma once

#include <cstdint>

namespace tob::ew {

namespace avx2 {
bool Available();  // compiled in (the build targets x86-64-v3)
void ExpArray(const float* x, float* y, int64_t n);
void TanhArray(const float* x, float* y, int64_t n);
void SigmoidArray(const float* x, float* y, int64_t n);
void ErfArray(const float* x, float* y, int64_t n);
void GeluArray(const float* x, float* y, int64_t n);
void GeluTanhArray(const float* x, float* y, int64_t n);
void LogArray(const float* x, float* y, int64_t n);
void SoftplusArray(const float* x, float* y, int64_t n);
}  // namespace avx2

namespace avx512 {
bool Available();  // compiled in and supported by this CPU
void ExpArray(const float* x, float* y, int64_t n);
void TanhArray(const float* x, float* y, int64_t n);
void SigmoidArray(const float* x, float* y, int64_t n);
void ErfArray(const float* x, float* y, int64_t n);
void GeluArray(const float* x, float* y, int64_t n);
void GeluTanhArray(const float* x, float* y, int64_t n);
void LogArray(const float* x, float* y, int64_t n);
void SoftplusArray(const float* x, float* y, int64_t n);
}  // namespace avx512

}  // namespace tob::ew
