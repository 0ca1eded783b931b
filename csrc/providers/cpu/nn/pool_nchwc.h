// Max pooling on the blocked layout (pool_nchwc.cc runs it; the NchwcLayout pass,
// optimizer/nchwc_layout.cc, puts it between blocked convs, e.g. ResNet's stem and its first
// bottleneck): one block's plane [H, W, 16] -> [OH, OW, 16], each output position the maximum of
// its window's taps inside the plane, 16 channels per 64-byte vector. NaN follows torch: a window
// with a NaN gives NaN. Spare lanes (zero in a blocked tensor) stay zero, since every window has a
// tap inside the plane (WindowsAllTouchInput; the kernel refuses a geometry where one does not).
#pragma once

#include <cstdint>

namespace tob::conv_nchwc {

// One 2-D pooling window geometry, per axis: input size, output size, kernel, stride, dilation,
// padding before.
struct PoolWindow2D {
  int64_t H, W, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl;
};

// Whether every output position's window has at least one tap inside the input.
bool WindowsAllTouchInput(const PoolWindow2D& p);

// Output rows [oh0, oh1) of one block's plane: y[(oh * OW + ow) * 16 + l] = max over the window's
// taps inside x of x[(ih * W + iw) * 16 + l], NaN when one of them is NaN. AVX-512 where the CPU
// has it, else MaxPoolBlockedRowsScalar.
void MaxPoolBlockedRows(const float* x, const PoolWindow2D& p, int64_t oh0, int64_t oh1, float* y);

// The same in plain loops (the reference the tests hold the AVX-512 path to).
void MaxPoolBlockedRowsScalar(const float* x, const PoolWindow2D& p, int64_t oh0, int64_t oh1, float* y);

// NchwcMaxPool nodes run in this process (tests assert the blocked path ran).
int64_t BlockedPoolsRun();

}  // namespace tob::conv_nchwc
