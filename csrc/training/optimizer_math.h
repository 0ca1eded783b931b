// The arithmetic of the in-graph optimizer ops (com.microsoft SGDOptimizer, AdamOptimizer,
// LambOptimizer, InPlaceAccumulator; semantics of onnxruntime-training, docs/architecture.md
// "Training ops"), shared by the CPU kernels (providers/cpu/training/optimizer_*.cc) and the
// CUDA kernels (kernels/training/optimizer_ops.cu): per-call scalars are computed once on the host, the
// per-element updates are TOB_HOST_DEVICE functions. AdamOptimizer's per-element update is
// FusedAdam's AdamUpdate (adam_math.h): both of its weight-decay modes are FusedAdam modes.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/half.h"
#include "training/adam_math.h"

namespace tob::training {

TOB_HOST_DEVICE inline bool IsFiniteFloat(float x) { return (FloatBits(x) & 0x7f800000u) != 0x7f800000u; }

// The number every gradient is divided by before an optimizer uses it (onnxruntime-training's
// _ComputeGradScale). loss_scale: the loss scale of mixed-precision training (1 when absent).
// grad_norm: the global L2 norm of the (scaled) gradients, ReduceAllL2's output (no clipping
// when absent). Clipping applies when the unscaled norm grad_norm / loss_scale exceeds max_norm:
//   divisor = grad_norm / max_norm   if grad_norm > loss_scale * max_norm
//           = loss_scale             otherwise
// i.e. unscaled gradients are multiplied by 1 / max(1, norm / max_norm). torch's
// clip_grad_norm_(params, max_norm) multiplies by min(1, max_norm / (norm + 1e-6)): the same up to
// the 1e-6 in the denominator (a relative 1e-6 / norm when clipping).
inline double GradientDivisor(const double* loss_scale, const double* grad_norm, double max_norm) {
  const double scale = loss_scale != nullptr ? *loss_scale : 1.0;
  if (grad_norm != nullptr && *grad_norm > scale * max_norm) return *grad_norm / max_norm;
  return scale;
}

// ORT's compute_bias_correction_coefficient: 1 - coefficient^step for step >= 1; 1 otherwise.
inline double BiasCorrection(double coefficient, int64_t step, bool enabled) {
  return enabled && step > 0 ? 1.0 - std::pow(coefficient, static_cast<double>(step)) : 1.0;
}

// ---- SGDOptimizer: NW = W - eta G, NG = -eta G ----
TOB_HOST_DEVICE inline float SgdUpdate(float eta, float w, float g) { return fmaf(-eta, g, w); }

// ---- AdamOptimizer ----
// Attributes as the schema names them. weight_decay_mode 0 ("decay before the weight update")
// is torch.optim.AdamW (bias correction on the moments, w -= eta lambda w); 1 ("after") is
// HuggingFace transformers' AdamW (bias correction folded into the step size, eps added to the
// uncorrected sqrt(v), then w -= eta lambda w on the updated w).
struct AdamOpAttributes {
  float alpha = 0.9f;
  float beta = 0.999f;
  float lambda = 0.0f;
  float epsilon = 1e-8f;
  float max_norm_clip = 1.0f;
  bool do_bias_correction = true;
  int64_t weight_decay_mode = 0;
};

// The FusedAdam scalars of one AdamOptimizer call: step is the input T (the 1-based index of
// this update; bias correction is off for T <= 0 as in onnxruntime-training), grad_divisor from
// GradientDivisor.
inline AdamScalars MakeAdamOpScalars(const AdamOpAttributes& a, double lr, int64_t step, double grad_divisor) {
  AdamHyperParams h;
  h.lr = lr;
  h.beta1 = a.alpha;
  h.beta2 = a.beta;
  h.eps = a.epsilon;
  h.weight_decay = a.lambda;
  h.bias_correction = a.do_bias_correction && step > 0;
  h.mode = a.weight_decay_mode == 0 ? AdamWMode::kAdamWTorch : AdamWMode::kAdamWTransformers;
  h.grad_scale = 1.0 / grad_divisor;
  return MakeAdamScalars(h, step > 0 ? step : 1);
}

// ---- LambOptimizer (per weight group) ----
// Stage 1, per element: moments and the update direction
//   g' = g / divisor, m1 = alpha m1 + (1 - alpha) g', m2 = beta m2 + (1 - beta) g'^2
//   d  = lambda w + (m1 / bc1) / (sqrt(m2 / bc2) + epsilon)
// A non-finite d leaves the moments unchanged and gives d = 0.
// Stage 2: ratio = eta * clamp(||w|| / ||d||, ratio_min, ratio_max) (eta when a norm is 0).
// Stage 3, per element: w_new = w - ratio d; non-finite w_new keeps w (and its delta is 0).
struct LambScalars {
  float alpha, one_minus_alpha, beta, one_minus_beta, lambda, epsilon;
  float alpha_correction, beta_correction, grad_scale;
};

inline LambScalars MakeLambScalars(float alpha, float beta, float lambda, float epsilon, int64_t step,
                                   bool do_bias_correction, double grad_divisor) {
  LambScalars s{};
  s.alpha = alpha;
  s.one_minus_alpha = 1.0f - alpha;
  s.beta = beta;
  s.one_minus_beta = 1.0f - beta;
  s.lambda = lambda;
  s.epsilon = epsilon;
  s.alpha_correction = static_cast<float>(BiasCorrection(alpha, step, do_bias_correction));
  s.beta_correction = static_cast<float>(BiasCorrection(beta, step, do_bias_correction));
  s.grad_scale = static_cast<float>(1.0 / grad_divisor);
  return s;
}

TOB_HOST_DEVICE inline float LambDirection(const LambScalars& s, float w, float g, float& m1, float& m2) {
  g = g * s.grad_scale;
  const float m1_new = fmaf(s.alpha, m1, s.one_minus_alpha * g);
  const float m2_new = fmaf(s.beta, m2, s.one_minus_beta * (g * g));
  const float d = fmaf(s.lambda, w, (m1_new / s.alpha_correction) / (sqrtf(m2_new / s.beta_correction) + s.epsilon));
  if (!IsFiniteFloat(d)) return 0.0f;
  m1 = m1_new;
  m2 = m2_new;
  return d;
}

inline float LambRatio(float eta, double w_norm, double d_norm, float ratio_min, float ratio_max) {
  if (w_norm == 0.0 || d_norm == 0.0) return eta;
  const double r = w_norm / d_norm;
  return eta * static_cast<float>(r < ratio_min ? ratio_min : r > ratio_max ? ratio_max : r);
}

// Returns the new weight and sets *delta to new - old (0 when the update is not finite).
TOB_HOST_DEVICE inline float LambApply(float ratio, float w, float d, float* delta) {
  const float step = -ratio * d;
  const float w_new = w + step;
  if (!IsFiniteFloat(w_new)) {
    *delta = 0.0f;
    return w;
  }
  *delta = step;
  return w_new;
}

// ---- InPlaceAccumulator: new_sum = old_sum + value ----
TOB_HOST_DEVICE inline float AccumulateGradient(float sum, float value) { return sum + value; }

}  // namespace tob::training
