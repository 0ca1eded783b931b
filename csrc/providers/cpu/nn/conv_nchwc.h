// The blocked (NCHWc) convolution's host-callable pieces (conv_nchwc.cc runs them; the
// NchwcLayout pass, optimizer/nchwc_layout.cc, puts the graph on them). A blocked activation is
// [N, Cb, H, W, 16]: channel c of an image lives in block c / 16, lane c % 16, so the 16 channels
// of one position are one 64-byte vector; a channel count that does not fill the last block
// leaves zeros in its spare lanes (every writer of a blocked tensor keeps them zero). Weights
// [M, C, KH, KW] are packed as [Mb][Cb][KH][KW][16 in][16 out]. A register tile computes up to 12
// consecutive output positions of one output row x 1 or 2 output blocks, for each kernel tap and
// input lane broadcasting the input value of each position against the weights' 16-wide row, and
// stores its accumulators as they are: they already are the output's blocks, with the bias, the
// residual Z and Relu applied on the way. No im2col, no transpose. docs/architecture.md
// "Convolution (CPU)", "The blocked layout (NCHWc)".
#pragma once

#include <cstdint>

namespace tob::conv_nchwc {

constexpr int64_t kBlock = 16;
// Output positions per register tile (12 x 2 zmm accumulators, as MLAS's NCHWc kernels).
constexpr int kTileRows = 12;

inline int64_t Blocks(int64_t channels) { return (channels + kBlock - 1) / kBlock; }

// One kernel tap of one input block for a tile: the input of the tile's first position is at
// x + x (floats; only used where `valid` has that position's bit), the weights' 16 x 16 block at
// w + w. Bit r of `valid`: position r reads inside the image (else it reads zero, the padding).
struct Tap {
  int64_t x = 0;
  int64_t w = 0;
  uint32_t valid = 0;
};

// Blocks [cb0, cb1) of one image: y[(cb * HW + i) * 16 + l] = x[(cb * 16 + l) * HW + i], zero for
// channels >= C. x is the image's [C, HW] planes, y the image's blocked tensor.
void ReorderToBlocked(const float* x, int64_t C, int64_t HW, int64_t cb0, int64_t cb1, float* y);

// The inverse for blocks [cb0, cb1) of one image: y[c * HW + i] for the channels c < C of those blocks.
void ReorderFromBlocked(const float* x, int64_t C, int64_t HW, int64_t cb0, int64_t cb1, float* y);

// Zeroes the spare lanes (channels >= C of the last block) of `images` blocked images [Blocks(C),
// HW, 16]. A conv computes them as sums of zero weights times its inputs, which is NaN where an
// input is inf or NaN; the next conv would multiply that NaN by its zero weights and spread it to
// every real channel of the position. Nothing to do when C fills its blocks.
void ZeroSpareLanes(float* y, int64_t images, int64_t C, int64_t HW);

// Blocks [cb0, cb1) of one blocked image [Cb, H, W, 16] into a zero-bordered one [Cb, Hp, Wp, 16],
// the image at rows [pt, pt + H) and columns [pl, pl + W): a padded conv then reads no border.
void PadBlocked(const float* x, int64_t H, int64_t W, int64_t pt, int64_t pl, int64_t Hp, int64_t Wp, int64_t cb0,
                int64_t cb1, float* y);

// Floats after each output block's packed weights: two blocks' streams, read side by side by a
// tile, then do not start at the same offset modulo 4 KiB (every block is a multiple of 1 KiB).
constexpr int64_t kWeightBlockPad = 16;

// The distance between two output blocks' packed weights: Blocks(C) * KK * 256 + kWeightBlockPad.
int64_t PackedBlockStride(int64_t C, int64_t KK);

// W [M, C, KK] (KK = KH * KW taps) into Blocks(M) blocks of PackedBlockStride(C, KK) floats:
// dst[mb * stride + (((cb * KK + k) * 16 + ci) * 16 + mi] = W[mb * 16 + mi, cb * 16 + ci, k], zero
// outside M x C (and in each block's pad).
void PackWeights(const float* w, int64_t M, int64_t C, int64_t KK, float* dst);

// One register tile over a block of taps: for r < rows (<= kTileRows) and output block v < blocks
// (1 or 2), with s = y[v * yblock + r * 16 + j] from an earlier tap block unless `first`, else
// bias[v * 16 + j] (0 without bias),
//   s += sum_taps sum_ci xin(tap, r)[ci] * (w + tap.w + v * wblock)[ci * 16 + j]
//   y[v * yblock + r * 16 + j] = last ? act(s + z[v * yblock + r * 16 + j]) : s
// where xin(tap, r) = x + tap.x + r * xs when bit r of tap.valid is set, else zeros; z may be null;
// act is Relu when relu. With `prefetch`, the tile also prefetches into L2, spread over its taps,
// the cache lines of [prefetch + v * wblock, + prefetch_floats) for each of its blocks v (the conv
// passes each tile its share of the next K block's weights); no result depends on it. AVX-512
// where the CPU has it, else TileScalar.
void Tile(int rows, int blocks, const float* x, int64_t xs, const Tap* taps, int64_t ntaps, const float* w,
          int64_t wblock, const float* bias, const float* z, bool relu, bool first, bool last, float* y, int64_t yblock,
          const float* prefetch = nullptr, int64_t prefetch_floats = 0);

// The same in plain loops (the reference the tests hold the AVX-512 tile to).
void TileScalar(int rows, int blocks, const float* x, int64_t xs, const Tap* taps, int64_t ntaps, const float* w,
                int64_t wblock, const float* bias, const float* z, bool relu, bool first, bool last, float* y,
                int64_t yblock);

// Whether Tile runs the AVX-512 code.
bool Avx512Available();

// NchwcConv nodes run in this process (tests assert the blocked path ran).
int64_t BlockedConvsRun();

}  // namespace tob::conv_nchwc
