// com.microsoft::ConvGrad's CPU kernel (conv_grad.cc): what tests can observe of its path choice.
#pragma once

#include <cstdint>

namespace tob::conv_grad {

// How many input-gradient chunks so far ran batch-folded (small stride-1 images, one GEMM per group
// over the chunk's images), process-wide.
int64_t BatchFoldsRun();

}  // namespace tob::conv_grad
