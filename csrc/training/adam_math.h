// The per-element arithmetic of FusedAdam, shared by the CPU loops (csrc/training/
// multi_tensor_adam.cc) and the CUDA kernel (kernels/training/fused_adam.cu) so both round the same way.
// Header-only, no engine or standard-library dependencies beyond <cmath>: nvcc compiles it too.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/half.h"

namespace tob::training {

// The weight-decay conventions of onnxruntime-training's FusedAdam (same codes).
enum class AdamWMode : int32_t {
  kL2Regularization = 0,   // grad += wd * p, then Adam (torch.optim.Adam's weight_decay)
  kAdamWTransformers = 1,  // HuggingFace transformers AdamW: p -= lr * wd * p after the update
  kAdamWTorch = 2,         // torch.optim.AdamW: p *= 1 - lr * wd before the update
};

// What one optimizer step needs, as given by the user.
struct AdamHyperParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-6;
  double weight_decay = 0.0;
  bool bias_correction = true;
  AdamWMode mode = AdamWMode::kAdamWTransformers;
  // Multiplies every gradient before use (the inverse loss scale of mixed-precision training).
  double grad_scale = 1.0;
};

// The three modes folded into one branch-free update, with the step-dependent factors computed
// once per call in double precision:
//   g  = g * grad_scale + l2 * p
//   m  = beta1 * m + (1 - beta1) * g
//   v  = beta2 * v + (1 - beta2) * g * g
//   p  = p * decay_before
//   p -= step_size * m / (sqrt(v) * denom_scale + eps)
//   p -= decay_after * p
struct AdamScalars {
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float eps;
  float grad_scale;
  float l2;
  float decay_before;
  float step_size;
  float denom_scale;
  float decay_after;
};

// `step` counts from 1 (the step being taken).
inline AdamScalars MakeAdamScalars(const AdamHyperParams& h, int64_t step) {
  double bias_correction1 = 1.0, bias_correction2 = 1.0;
  if (h.bias_correction) {
    bias_correction1 = 1.0 - std::pow(h.beta1, static_cast<double>(step));
    bias_correction2 = 1.0 - std::pow(h.beta2, static_cast<double>(step));
  }
  AdamScalars s{};
  s.beta1 = static_cast<float>(h.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - h.beta1);
  s.beta2 = static_cast<float>(h.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  s.eps = static_cast<float>(h.eps);
  s.grad_scale = static_cast<float>(h.grad_scale);
  s.l2 = 0.0f;
  s.decay_before = 1.0f;
  s.decay_after = 0.0f;
  switch (h.mode) {
    case AdamWMode::kL2Regularization:
      s.l2 = static_cast<float>(h.weight_decay);
      s.step_size = static_cast<float>(h.lr / bias_correction1);
      s.denom_scale = static_cast<float>(1.0 / std::sqrt(bias_correction2));
      break;
    case AdamWMode::kAdamWTransformers:
      // eps is added to the uncorrected sqrt(v), as transformers' AdamW does.
      s.step_size = static_cast<float>(h.lr * std::sqrt(bias_correction2) / bias_correction1);
      s.denom_scale = 1.0f;
      s.decay_after = static_cast<float>(h.lr * h.weight_decay);
      break;
    case AdamWMode::kAdamWTorch:
      s.decay_before = static_cast<float>(1.0 - h.lr * h.weight_decay);
      s.step_size = static_cast<float>(h.lr / bias_correction1);
      s.denom_scale = static_cast<float>(1.0 / std::sqrt(bias_correction2));
      break;
  }
  return s;
}

// One element. fmaf and sqrtf / division are correctly rounded on the CPU (scalar and AVX2) and
// on the GPU, so every path produces the same bits.
TOB_HOST_DEVICE inline void AdamUpdate(const AdamScalars& s, float& p, float g, float& m, float& v) {
  g = fmaf(s.l2, p, g * s.grad_scale);
  m = fmaf(s.beta1, m, s.one_minus_beta1 * g);
  v = fmaf(s.beta2, v, s.one_minus_beta2 * (g * g));
  p = p * s.decay_before;
  float denom = fmaf(sqrtf(v), s.denom_scale, s.eps);
  p = fmaf(-s.step_size, m / denom, p);
  p = fmaf(-s.decay_after, p, p);
}

}  // namespace tob::training
