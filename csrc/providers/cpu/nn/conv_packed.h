// The tiled convolution's choices around pre-packed weights (conv.cc). Conv / FusedConv kernels
// pack a float32 constant W once per session (OpKernel::PrePack) into sgemm_packed.h's panels as
// op(B) = W_g^T, and a tile then computes its block transposed, Y^T = col^T W^T, with the output
// positions as the GEMM's rows; docs/architecture.md "Convolution (CPU)".
#pragma once

#include <cstdint>

#include "providers/cpu/nn/window_geometry.h"

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

// Output images of at most this many positions fold the batch into one GEMM (BatchFoldWins).
constexpr int64_t kMaxFoldedPositions = 9;

// Whether a 2-D (or 1-D) conv over `images` images of `out_size` output positions each, whose weights
// are not pre-packed (training, where W is a graph input; 16-bit types), runs as one GEMM over every
// image's columns (conv.cc's BatchFoldedConv2D) instead of one per image: with a few positions per
// image, the per-image GEMM packs and streams the whole weight for each image. Measured
// (docs/performance.md, "Convolution"): 2.4-2.6x faster on 1x1 outputs, 1.7x on 2x2, 1.16x on 3x3, a tie on
// 4x4 (so at most 9 positions fold); with pre-packed weights the per-image tiles stay faster (1.3x), so those keep
// them. TOB_CONV_BATCH_FOLD=0 / =1 forces either (A/B measurements), =1 for pre-packed weights too.
bool BatchFoldWins(int64_t images, int64_t out_size, bool packed_weights);

// Tiles computed on pre-packed weights in this process (tests assert the packed path ran).
int64_t PackedTilesRun();

// Whether a conv with packed float32 weights (one that TransposedWins sends to the transposed
// tiles) runs as an implicit GEMM on phase planes instead (conv_implicit.h; conv.cc's
// ImplicitConv2D), for the 2-D geometry g over `channels` input channels per group.
// TOB_CONV_IMPLICIT=0 / =1 forces either; read on every call (A/B on one session).
bool ImplicitWins(const WindowGeometry& g, int64_t channels);

// Convs run as implicit GEMMs in this process (tests assert the path ran).
int64_t ImplicitConvsRun();

// Convs run batch-folded in this process (tests assert the folded path ran).
int64_t BatchFoldsRun();

}  // namespace tob::conv_packed
