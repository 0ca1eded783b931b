// The tiled convolution's choices around pre-packed weights (conv.cc). Conv / FusedConv kernels
// pack a float32 constant W once per session (OpKernel::PrePack) into sgemm_packed.h's panels as
// op(B) = W_g^T, and a tile then computes its block transposed, Y^T = col^T W^T, with the output
// positions as the GEMM's rows; docs/architecture.md "Convolution (CPU)".
#pragma once

#include <cstdint>

namespace tob::conv_packed {

// Whether 2-D (and 1-D) convs run tiled (TOB_CONV_TILED=0: the whole-image column path, which
// packs nothing).
bool TiledEnabled();

// Whether a conv with packed weights takes the transposed tiles, or the per-call GEMM (Y = W col),
// as measured per shape: Mg output channels per group, kernel_dim = Cg * kernel_size (the GEMM's
// K), kernel_size the product of the kernel dims, pointwise 1x1 with stride 1 and no pad.
// TOB_CONV_PACKED=0 / =1 forces either (A/B measurements; PrePack asks too, and packs nothing
// for a conv that keeps the per-call GEMM).
bool TransposedWins(int64_t Mg, int64_t kernel_dim, int64_t kernel_size, bool pointwise);

// y[j * ldy + i] = block[i * cols + j] + bias[j] + z[j * ldz + i], then Relu when relu, for
// i < rows, j < cols: a positions x channels block into Y's channel rows with the epilogue's
// bias, Z and Relu on the way (bias and z may be null). AVX-512 where the CPU has it
// (conv_packed_avx512.cc).
void StoreTransposed(const float* block, int64_t rows, int64_t cols, const float* bias, const float* z, int64_t ldz,
                     bool relu, float* y, int64_t ldy);

// Tiles computed on pre-packed weights in this process (tests assert the packed path ran).
int64_t PackedTilesRun();

}  // namespace tob::conv_packed
