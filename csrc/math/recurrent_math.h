// The per-element arithmetic of the recurrent ops (RNN, GRU, LSTM): the activation functions of
// the ONNX spec and one cell update per op. Host/device callable, templated on the compute type
// (float for float/float16/bfloat16 storage, double for double), so the CPU kernels
// (providers/cpu/nn/recurrent.cc) and the tests run the same functions a device kernel would.
//
// Every pre-activation passed in already holds X W^T + H R^T + the biases of its gate (the GEMMs
// are the kernel's); `clip` bounds each pre-activation to [-clip, clip] before its activation
// (the "cell clip" attribute; +inf when absent), as onnxruntime does. The cell state itself is
// not clipped.
#pragma once

#include <math.h>

#include <cstdint>

#include "core/half.h"

namespace tob::rnn {

// The activation functions RNN, GRU and LSTM accept (the spec's list).
enum class ActivationKind : int32_t {
  kRelu,
  kTanh,
  kSigmoid,
  kAffine,
  kLeakyRelu,
  kThresholdedRelu,
  kScaledTanh,
  kHardSigmoid,
  kElu,
  kSoftsign,
  kSoftplus,
};

struct Activation {
  ActivationKind kind = ActivationKind::kTanh;
  float alpha = 0.0f;
  float beta = 0.0f;
};

TOB_HOST_DEVICE inline float MathExp(float x) { return ::expf(x); }
TOB_HOST_DEVICE inline double MathExp(double x) { return ::exp(x); }
TOB_HOST_DEVICE inline float MathTanh(float x) { return ::tanhf(x); }
TOB_HOST_DEVICE inline double MathTanh(double x) { return ::tanh(x); }
TOB_HOST_DEVICE inline float MathLog1p(float x) { return ::log1pf(x); }
TOB_HOST_DEVICE inline double MathLog1p(double x) { return ::log1p(x); }

// Softplus without overflow: log(1 + e^x) = max(x, 0) + log1p(e^-|x|).
template <typename C>
TOB_HOST_DEVICE inline C Softplus(C x) {
  const C ax = x < C(0) ? -x : x;
  return (x > C(0) ? x : C(0)) + MathLog1p(MathExp(-ax));
}

template <typename C>
TOB_HOST_DEVICE inline C Sigmoid(C x) {
  // exp of a non-positive argument only: no overflow for large |x|.
  if (x >= C(0)) return C(1) / (C(1) + MathExp(-x));
  const C e = MathExp(x);
  return e / (C(1) + e);
}

template <typename C>
TOB_HOST_DEVICE inline C Activate(const Activation& a, C x) {
  const C alpha = static_cast<C>(a.alpha), beta = static_cast<C>(a.beta);
  switch (a.kind) {
    case ActivationKind::kRelu: return x > C(0) ? x : C(0);
    case ActivationKind::kTanh: return MathTanh(x);
    case ActivationKind::kSigmoid: return Sigmoid(x);
    case ActivationKind::kAffine: return alpha * x + beta;
    case ActivationKind::kLeakyRelu: return x >= C(0) ? x : alpha * x;
    case ActivationKind::kThresholdedRelu:
      return x >= alpha ? x : C(0);  // the recurrent ops' definition (the op ThresholdedRelu uses >)
    case ActivationKind::kScaledTanh: return alpha * MathTanh(beta * x);
    case ActivationKind::kHardSigmoid: {
      const C y = alpha * x + beta;
      return y < C(0) ? C(0) : (y > C(1) ? C(1) : y);
    }
    case ActivationKind::kElu: return x >= C(0) ? x : alpha * (MathExp(x) - C(1));
    case ActivationKind::kSoftsign: return x / (C(1) + (x < C(0) ? -x : x));
    case ActivationKind::kSoftplus: return Softplus(x);
  }
  return x;
}

// Bounds x to [-clip, clip]; NaN passes through.
template <typename C>
TOB_HOST_DEVICE inline C ClipGate(C x, C clip) {
  if (x > clip) return clip;
  if (x < -clip) return -clip;
  return x;
}

// ---- RNN: H = f(x W^T + h R^T + Wb + Rb) ----
template <typename C>
TOB_HOST_DEVICE inline C RnnCell(const Activation& f, C clip, C pre) {
  return Activate(f, ClipGate(pre, clip));
}

// ---- LSTM ----
// Pre-activations of the four gates (input, output, forget, cell), biases included, peepholes
// not. Peepholes: i and f see the previous cell state, o the new one.
template <typename C>
struct LstmPre {
  C i, o, f, c;
};

// One element of one step. f_act gates i/o/f, g_act the cell candidate, h_act the output.
// input_forget couples the gates: f = 1 - i. Returns the new hidden value, sets *c_new.
template <typename C>
TOB_HOST_DEVICE inline C LstmCell(const Activation& f_act, const Activation& g_act, const Activation& h_act, C clip,
                                  const LstmPre<C>& pre, C p_i, C p_o, C p_f, C c_prev, bool input_forget, C* c_new) {
  const C i = Activate(f_act, ClipGate(pre.i + p_i * c_prev, clip));
  const C f = input_forget ? C(1) - i : Activate(f_act, ClipGate(pre.f + p_f * c_prev, clip));
  const C g = Activate(g_act, ClipGate(pre.c, clip));
  const C c = f * c_prev + i * g;
  const C o = Activate(f_act, ClipGate(pre.o + p_o * c, clip));
  *c_new = c;
  return o * Activate(h_act, c);
}

// ---- GRU ----
// Update and reset gates from their pre-activations: z = f(pre_z), r = f(pre_r).
template <typename C>
TOB_HOST_DEVICE inline C GruGate(const Activation& f_act, C clip, C pre) {
  return Activate(f_act, ClipGate(pre, clip));
}

// The candidate and the new hidden value. `pre_h` is x W_h^T + Wb_h plus the recurrent part:
// (r * h_prev) R_h^T + Rb_h when linear_before_reset = 0, r * (h_prev R_h^T + Rb_h) when 1 (the
// caller forms either). H = (1 - z) * g(pre_h) + z * h_prev.
template <typename C>
TOB_HOST_DEVICE inline C GruOutput(const Activation& g_act, C clip, C z, C pre_h, C h_prev) {
  const C h = Activate(g_act, ClipGate(pre_h, clip));
  return (C(1) - z) * h + z * h_prev;
}

}  // namespace tob::rnn
