// FlashAttention's forward kernel: a grid-stride loop over (batch, head, query row); each thread
// folds its row's visible keys into an online softmax (flash_attention_math.h) and a register
// accumulator of the output row.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/launch_config.h"
#include "kernels/training/flash_attention.h"
#include "kernels/training/flash_attention_math.h"

namespace tob::cuda {
namespace {

__global__ void FlashForwardKernel(FlashForwardArgs a) {
  const int64_t rows = a.batch * a.heads * a.q_seq;
  const int64_t group = a.heads / a.kv_heads;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = row % a.q_seq, bh = row / a.q_seq;
    const int64_t b = bh / a.heads, h = bh % a.heads, g = h / group;
    const float* q = a.q + row * a.head;
    const float* k = a.k + (b * a.kv_heads + g) * a.kv_seq * a.head;
    const float* v = a.v + (b * a.kv_heads + g) * a.kv_seq * a.v_head;
    const float* mask =
        a.mask != nullptr ? a.mask + b * a.mask_stride[0] + h * a.mask_stride[1] + i * a.mask_stride[2] : nullptr;
    float acc[kFlashMaxHeadSize];
    for (int64_t x = 0; x < a.v_head; ++x) acc[x] = 0.f;
    flash::OnlineSoftmax softmax;
    const int64_t key_end = a.causal ? (i + 1 < a.kv_seq ? i + 1 : a.kv_seq) : a.kv_seq;
    for (int64_t j = 0; j < key_end; ++j) {
      float dot = 0.f;
      for (int64_t x = 0; x < a.head; ++x) dot = fmaf(q[x], k[j * a.head + x], dot);
      const float s = dot * a.scale + flash::ScoreBias(a.causal, i, j, mask ? mask[j * a.mask_stride[3]] : 0.f);
      float p, rescale;
      softmax.Add(s, &p, &rescale);
      for (int64_t x = 0; x < a.v_head; ++x) acc[x] = fmaf(p, v[j * a.v_head + x], acc[x] * rescale);
    }
    const float norm = softmax.Normalizer();
    float* y = a.y + row * a.v_head;
    for (int64_t x = 0; x < a.v_head; ++x) y[x] = acc[x] * norm;
    if (a.lse != nullptr) a.lse[row] = softmax.Logsumexp();
  }
}

}  // namespace

cudaError_t launch_flash_attention_forward(const FlashForwardArgs& args, cudaStream_t stream) {
  const int64_t rows = args.batch * args.heads * args.q_seq;
  if (rows == 0) return cudaSuccess;
  // Few threads per block: each carries a whole output row in registers / local memory.
  constexpr int kRowThreads = 64;
  const unsigned blocks = static_cast<unsigned>(
      (rows + kRowThreads - 1) / kRowThreads < kMaxBlocks ? (rows + kRowThreads - 1) / kRowThreads : kMaxBlocks);
  FlashForwardKernel<<<blocks, kRowThreads, 0, stream>>>(args);
  return cudaGetLastError();
}

}  // namespace tob::cuda
