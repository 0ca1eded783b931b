// The blocked convolution of a network's stem (conv_nchwc_nchw_input.cc runs it; the NchwcLayout
// pass, optimizer/nchwc_layout.cc, puts it in the graph): X is a plain NCHW image with few
// channels (3 for RGB), Y is blocked [N, Mb, OH, OW, 16] like every NchwcConv's output, so the
// stem feeds the blocked chain without a reorder and its 3 channels are not padded to a block of
// 16. W [M, C, KH, KW] is packed as [Mb][C][KH][KW][16 out]. A register tile computes up to 12
// consecutive output positions of one row x 1 or 2 output blocks: for each tap (c, kh, kw) one
// 16-wide weight row per block and one broadcast input value per position; bias and Relu on the
// accumulators, which are stored as the output's blocks. docs/architecture.md "The blocked layout
// (NCHWc)".
#pragma once

#include <cstdint>

namespace tob::conv_nchwc {

// Floats after each output block's packed weights (as kWeightBlockPad: two blocks read side by
// side by a tile do not start at the same offset modulo 4 KiB).
constexpr int64_t kNchwInputBlockPad = 16;

// The distance between two output blocks' packed weights: C * KK * 16 + kNchwInputBlockPad.
int64_t NchwInputBlockStride(int64_t C, int64_t KK);

// W [M, C, KK] (KK = KH * KW taps) into Blocks(M) blocks of NchwInputBlockStride(C, KK) floats:
// dst[mb * stride + (c * KK + k) * 16 + mi] = W[mb * 16 + mi, c, k], zero for mi >= M (and in
// each block's pad).
void PackWeightsNchwInput(const float* w, int64_t M, int64_t C, int64_t KK, float* dst);

// One register tile: for r < rows (<= kTileRows) and output block v < blocks (1 or 2),
//   y[v * yblock + r * 16 + j] = act(bias[v * 16 + j] + sum_t x[xoff[t] + r * xs] * w[v * wblock + t * 16 + j])
// over the taps t < ntaps (bias 0 when null; act is Relu when relu). Every x read lies inside the
// caller's (padded) image. AVX-512 where the CPU has it, else TileNchwInputScalar.
void TileNchwInput(int rows, int blocks, const float* x, int64_t xs, const int64_t* xoff, int64_t ntaps, const float* w,
                   int64_t wblock, const float* bias, bool relu, float* y, int64_t yblock);

// The same in plain loops (the reference the tests hold the AVX-512 tile to).
void TileNchwInputScalar(int rows, int blocks, const float* x, int64_t xs, const int64_t* xoff, int64_t ntaps,
                         const float* w, int64_t wblock, const float* bias, bool relu, float* y, int64_t yblock);

// NchwcConvNchwInput nodes run in this process (tests assert the stem's path ran).
int64_t NchwInputConvsRun();

}  // namespace tob::conv_nchwc
