// The per-element arithmetic of the activation gradients that more than one kernel computes: the
// com.microsoft TanhGrad kernel (providers/cpu/training/activation_grad.cc) and FusedElementwise's
// TanhGrad instruction (providers/cpu/elementwise/fused_elementwise.cc) call the same function, so
// a fused GELU backward equals the unfused one bit for bit.
#pragma once

#include <cmath>

namespace tob::ew {

// TanhGrad: dX = dY (1 - Y^2), Y being tanh's output. 1 - Y^2 is one fused multiply-add (one
// rounding), written out rather than left to the compiler: GCC contracts `1 - y * y` in some
// loops and not in others (it did in the float32 loop and not in the widened 16-bit one), and two
// kernels that must agree cannot leave that choice to inlining.
struct TanhGradOp {
  template <typename T>
  T operator()(T dy, T y) const {
    return dy * std::fma(-y, y, T(1));
  }
};

}  // namespace tob::ew
