// The per-element arithmetic of the ONNX standard's optimizers (domain ai.onnx.preview.training:
// Adagrad, Adam, Momentum), exactly as the spec and onnx's reference define them. Adam's update is
// FusedAdam's (adam_math.h) with its scalars set from the spec's attributes
// (MakePreviewAdamScalars); Adagrad and Momentum have no twin in the engine and live here, for
// float and double. Host/device callable like the other optimizer arithmetic.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/half.h"
#include "training/adam_math.h"

namespace tob::training {

// Adagrad: r' = r / (1 + t decay), g' = norm_coefficient x + g, h' = h + g'^2,
// x' = x - r' g' / (sqrt(h') + epsilon).
template <typename T>
TOB_HOST_DEVICE inline void PreviewAdagradUpdate(T lr, T norm_coefficient, T epsilon, T& x, T g, T& h) {
  const T g_reg = norm_coefficient * x + g;
  h = h + g_reg * g_reg;
  x = x - lr * g_reg / (std::sqrt(h) + epsilon);
}

// The step's learning rate: r / (1 + t decay_factor).
inline double PreviewAdagradRate(double r, int64_t t, double decay_factor) {
  return r / (1.0 + static_cast<double>(t) * decay_factor);
}

// Momentum: g' = norm_coefficient x + g, v' = alpha v + beta_t g' with beta_t = beta for t > 0
// and 1 at the first step (t = 0); standard: x' = x - r v', nesterov: x' = x - r (g' + alpha v').
template <typename T>
TOB_HOST_DEVICE inline void PreviewMomentumUpdate(T lr, T alpha, T beta_t, T norm_coefficient, bool nesterov, T& x, T g,
                                                  T& v) {
  const T g_reg = norm_coefficient * x + g;
  v = alpha * v + beta_t * g_reg;
  x = nesterov ? x - lr * (g_reg + alpha * v) : x - lr * v;
}

// Adam as FusedAdam's update: g' = norm_coefficient x + g, v' = alpha v + (1 - alpha) g',
// h' = beta h + (1 - beta) g'^2, x' = x - r_t v' / (sqrt(h') + epsilon) with
// r_t = r sqrt(1 - beta^t) / (1 - alpha^t) for t > 0 (r at t = 0), then x'' = (1 - post) x'.
// AdamUpdate(s, x, g, v, h) applies it (its m and v are the spec's V and H).
inline AdamScalars MakePreviewAdamScalars(double r, int64_t t, double alpha, double beta, double epsilon,
                                          double norm_coefficient, double norm_coefficient_post) {
  AdamScalars s{};
  s.beta1 = static_cast<float>(alpha);
  s.one_minus_beta1 = static_cast<float>(1.0 - alpha);
  s.beta2 = static_cast<float>(beta);
  s.one_minus_beta2 = static_cast<float>(1.0 - beta);
  s.eps = static_cast<float>(epsilon);
  s.grad_scale = 1.0f;
  s.l2 = static_cast<float>(norm_coefficient);
  s.decay_before = 1.0f;
  const double step = static_cast<double>(t);
  s.step_size =
      static_cast<float>(t > 0 ? r * std::sqrt(1.0 - std::pow(beta, step)) / (1.0 - std::pow(alpha, step)) : r);
  s.denom_scale = 1.0f;
  s.decay_after = static_cast<float>(norm_coefficient_post);
  return s;
}

}  // namespace tob::training
