// The per-score arithmetic of FlashAttention's CUDA forward (kernels/training/flash_attention.cu),
// host-callable so that the CPU tests run it too (tests/cpp/training_flash_attention_test.cc):
// the bias a score gets (torch's top-left causal mask plus the attention mask) and the online
// softmax that folds one score at a time into a running maximum and sum, telling the caller by
// how much to rescale the output accumulated so far.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/half.h"

namespace tob::flash {

// The bias of key j's score for query i: -inf when the causal mask hides it (j > i, aligned
// top-left as torch aligns it), else the attention mask's value (0 without a mask).
TOB_HOST_DEVICE inline float ScoreBias(bool causal, int64_t i, int64_t j, float mask_value) {
  return causal && j > i ? -INFINITY : mask_value;
}

// softmax(s) V over a row, one score at a time: after Add(s, &p, &rescale) the caller multiplies
// its accumulator by `rescale` and adds p * V[j]; at the end it multiplies by Normalizer().
// A row whose every score is -inf sums nothing: Normalizer() 0 (output 0), Logsumexp() +inf.
struct OnlineSoftmax {
  float max = -INFINITY;
  float sum = 0.f;

  TOB_HOST_DEVICE void Add(float s, float* p, float* rescale) {
    if (s == -INFINITY) {  // hidden key: contributes nothing (and never becomes the maximum)
      *p = 0.f;
      *rescale = 1.f;
    } else if (s > max) {
      *rescale = expf(max - s);  // 0 for the first visible key
      sum = sum * *rescale + 1.f;
      max = s;
      *p = 1.f;
    } else {
      *p = expf(s - max);
      *rescale = 1.f;
      sum += *p;
    }
  }

  TOB_HOST_DEVICE float Normalizer() const { return sum > 0.f ? 1.f / sum : 0.f; }
  TOB_HOST_DEVICE float Logsumexp() const { return sum > 0.f ? max + logf(sum) : INFINITY; }
};

}  // namespace tob::flash
