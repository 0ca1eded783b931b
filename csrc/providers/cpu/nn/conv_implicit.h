// Implicit-GEMM convolution on pre-packed weights (conv.cc's ImplicitConv2D): the product
// Y^T = col^T W^T of the transposed tiles (conv_packed.h) with col^T never written. The input of
// one (image, group) is copied once into zero-padded "phase planes": for strides sh x sw, plane
// (c, ph, pw) holds the padded image's rows ph, ph + sh, ... and columns pw, pw + sw, ..., each
// plane Hq x Wq. On that layout every output position (oh, ow) is q = oh * Wq + ow, and every
// kernel tap k = (c, kh, kw) of the weights' K axis is one offset koff[k], so that
//
//   col^T[q, k] = planes[koff[k] + q]
//
// for all q: a register tile of consecutive q reads consecutive floats for each k, at any stride,
// dilation and pad. The grid has Wq - OW columns per row that are no output (they read the next
// row's values); tiles compute them and the store skips them. docs/architecture.md
// "Convolution (CPU)".
#pragma once

#include <cstdint>
#include <vector>

#include "providers/cpu/nn/window_geometry.h"

namespace tob::conv_implicit {

// The phase-plane layout of one (image, group) for a 2-D geometry.
struct Layout {
  int64_t sh = 1, sw = 1;  // strides: sh * sw phase planes per input channel
  int64_t Hq = 0, Wq = 0;  // rows and columns of a phase plane
  int64_t plane = 0;       // Hq * Wq
  int64_t positions = 0;   // (OH - 1) * Wq + OW: the grid up to the last output position
  int64_t rows = 0;        // positions rounded up to whole register tiles (what the planes hold)
  int64_t floats = 0;      // the buffer: channels * sh * sw planes, then zeros read by the last tiles
};

// Register tiles cover this many grid positions (the AVX-512 tile: 12 rows x 32 channels).
constexpr int64_t kTileRows = 12;

// The layout for `channels` input channels (per group) under geometry g (rank 2).
Layout MakeLayout(const WindowGeometry& g, int64_t channels);

// koff[k] for k = (c * KH + kh) * KW + kw, the weights' K order (W_g is [Mg, Cg, KH, KW]).
std::vector<int32_t> KernelOffsets(const WindowGeometry& g, const Layout& l, int64_t channels);

// The phase planes of input channels [c0, c1) of one (image, group): x points at that group's
// channel 0 (planes of g.in[0] x g.in[1]); dst at the layout's buffer. Channel c's planes start
// at dst + c * sh * sw * plane. Writes every float of those planes (zeros in the padding); the
// caller zeroes the tail [channels * sh * sw * plane, floats) once.
void FillPhasePlanes(const float* x, const WindowGeometry& g, const Layout& l, int64_t c0, int64_t c1, float* dst);

// Whether the CPU runs the AVX-512 tile.
bool Available();

// Taps per K block: kKc rows of a 32-wide panel (32 KiB) stay in L1 while the register tiles of a
// block of positions run over them (as sgemm_packed's K blocks).
constexpr int64_t kKc = 256;

// out[i * ldo + j] (+)= sum_k p[koff[k] + i] * panel[k * width + j] for i < rows (<= kTileRows),
// j < nw (<= width; width 16 or 32 is the packed panel's row width, sgemm_packed.h), k < K: one
// register tile of the product over K taps, added to out when accumulate (the later K blocks).
// p points at the layout's buffer plus the tile's first position; koff and panel at the K block's
// first tap (panel 64-byte aligned, as PackedSgemmB's rows are).
void Tile(int rows, int width, const float* p, const int32_t* koff, int64_t K, const float* panel, int nw, float* out,
          int64_t ldo, bool accumulate);

// The same sums in plain loops (the reference the tests hold the AVX-512 tile to; also what runs
// where the CPU has no AVX-512, which conv.cc never sends here since packing needs it).
void TileScalar(int rows, int width, const float* p, const int32_t* koff, int64_t K, const float* panel, int nw,
                float* out, int64_t ldo, bool accumulate);

}  // namespace tob::conv_implicit
