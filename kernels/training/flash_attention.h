// FlashAttention's forward on the GPU (float32): Y = softmax(scale Q K^T + bias) V and the row
// logsumexp, with torch's semantics (see providers/cpu/training/flash_attention.cc). One thread
// walks one query row over its keys with the online softmax of flash_attention_math.h, so no
// score matrix exists; a first, simple kernel (no shared-memory tiling yet).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tob::cuda {

// Head sizes up to this are supported (the row accumulator lives in the thread).
inline constexpr int64_t kFlashMaxHeadSize = 256;

struct FlashForwardArgs {
  const float* q = nullptr;     // [batch, heads, q_seq, head]
  const float* k = nullptr;     // [batch, kv_heads, kv_seq, head]
  const float* v = nullptr;     // [batch, kv_heads, kv_seq, v_head]
  const float* mask = nullptr;  // additive, or null; element (b, h, i, j) at b*s0 + h*s1 + i*s2 + j*s3
  int64_t mask_stride[4] = {0, 0, 0, 0};
  float* y = nullptr;    // [batch, heads, q_seq, v_head]
  float* lse = nullptr;  // [batch, heads, q_seq], or null
  int64_t batch = 0, heads = 0, kv_heads = 0, q_seq = 0, kv_seq = 0, head = 0, v_head = 0;
  float scale = 1.f;
  bool causal = false;
};

cudaError_t launch_flash_attention_forward(const FlashForwardArgs& args, cudaStream_t stream);

}  // namespace tob::cuda
