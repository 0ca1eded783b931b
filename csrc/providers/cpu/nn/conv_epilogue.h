// The store epilogue of Conv and com.microsoft FusedConv: y = act(y + bias[m] + Z), applied to a
// block of output rows right after the GEMM wrote it, while it is still in cache, instead of a
// bias fill before the GEMM and a separate activation node reading and writing the whole output
// again. FusedConv is onnxruntime's contrib op (attributes `activation` and `activation_params`,
// optional 4th input Z added before the activation); the activation names are onnxruntime's
// (Relu, Tanh, Sigmoid, LeakyRelu, Clip, HardSigmoid) plus Gelu, FastGelu (tanh GELU) and Silu,
// which the ConvActivationFusion pass (optimizer/conv_activation_fusion.cc) also folds.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"
#include "math/elementwise_math.h"
#include "providers/cpu/elementwise/vector_math.h"

namespace tob::conv_epilogue {

enum class Activation { kNone, kRelu, kTanh, kSigmoid, kLeakyRelu, kClip, kHardSigmoid, kGelu, kFastGelu, kSilu };

struct ActivationSpec {
  Activation kind = Activation::kNone;
  float alpha = 0, beta = 0;  // LeakyRelu: alpha; Clip: min, max; HardSigmoid: alpha, beta
};

// The number of activation_params each activation takes (-1: unknown name).
inline int ParamCount(const std::string& name) {
  if (name == "Relu" || name == "Tanh" || name == "Sigmoid" || name == "Gelu" || name == "FastGelu" || name == "Silu")
    return 0;
  if (name == "LeakyRelu") return 1;
  if (name == "Clip" || name == "HardSigmoid") return 2;
  return -1;
}

// Reads FusedConv's activation attributes; a plain Conv (no `activation`) has none.
inline StatusOr<ActivationSpec> ReadActivation(const Node& node) {
  ActivationSpec spec;
  std::string name;
  TOB_RETURN_IF_ERROR(node.GetAttr("activation", &name, std::string()));
  if (name.empty()) return spec;
  std::vector<float> params;
  TOB_RETURN_IF_ERROR(node.GetAttr("activation_params", &params, std::vector<float>()));
  const int expected = ParamCount(name);
  if (expected < 0)
    return InvalidModel(node.op_type(), " node '", node.name(), "': unknown activation '", name,
                        "'; expected Relu, Tanh, Sigmoid, LeakyRelu, Clip, HardSigmoid, Gelu, FastGelu or Silu");
  if (static_cast<int>(params.size()) != expected)
    return InvalidModel(node.op_type(), " node '", node.name(), "': activation ", name, " takes ", expected,
                        " activation_params, got ", params.size());
  static const std::pair<const char*, Activation> kinds[] = {
      {"Relu", Activation::kRelu},       {"Tanh", Activation::kTanh},
      {"Sigmoid", Activation::kSigmoid}, {"LeakyRelu", Activation::kLeakyRelu},
      {"Clip", Activation::kClip},       {"HardSigmoid", Activation::kHardSigmoid},
      {"Gelu", Activation::kGelu},       {"FastGelu", Activation::kFastGelu},
      {"Silu", Activation::kSilu}};
  for (const auto& [n, k] : kinds)
    if (name == n) spec.kind = k;
  if (expected >= 1) spec.alpha = params[0];
  if (expected == 2) spec.beta = params[1];
  return spec;
}

// The activation in place over y[0, n).
template <typename T>
void Activate(const ActivationSpec& act, T* y, int64_t n) {
  const T a = static_cast<T>(act.alpha), b = static_cast<T>(act.beta);
  switch (act.kind) {
    case Activation::kNone: return;
    case Activation::kRelu:
      for (int64_t i = 0; i < n; ++i) y[i] = y[i] < T(0) ? T(0) : y[i];
      return;
    case Activation::kLeakyRelu:
      for (int64_t i = 0; i < n; ++i) y[i] = y[i] < T(0) ? a * y[i] : y[i];
      return;
    case Activation::kClip:
      for (int64_t i = 0; i < n; ++i) y[i] = std::min(std::max(y[i], a), b);
      return;
    case Activation::kHardSigmoid:
      for (int64_t i = 0; i < n; ++i) y[i] = std::min(std::max(a * y[i] + b, T(0)), T(1));
      return;
    default: break;
  }
  if constexpr (std::is_same_v<T, float>) {
    switch (act.kind) {
      case Activation::kTanh: ew::TanhArray(y, y, n); return;
      case Activation::kSigmoid: ew::SigmoidArray(y, y, n); return;
      case Activation::kGelu: ew::GeluArray(y, y, n); return;
      case Activation::kFastGelu: ew::GeluTanhArray(y, y, n); return;
      case Activation::kSilu: {
        // x * sigmoid(x) through a stack buffer: the sigmoid may not overwrite x before the product.
        float s[256];
        for (int64_t i0 = 0; i0 < n; i0 += 256) {
          const int64_t len = std::min<int64_t>(256, n - i0);
          ew::SigmoidArray(y + i0, s, len);
          for (int64_t i = 0; i < len; ++i) y[i0 + i] *= s[i];
        }
        return;
      }
      default: return;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      switch (act.kind) {
        case Activation::kTanh: y[i] = ew::TanhOp{}(y[i]); break;
        case Activation::kSigmoid: y[i] = ew::SigmoidOp{}(y[i]); break;
        case Activation::kGelu: y[i] = ew::GeluOp{}(y[i]); break;
        case Activation::kFastGelu: y[i] = ew::GeluTanhOp{}(y[i]); break;
        case Activation::kSilu: y[i] = y[i] * ew::SigmoidOp{}(y[i]); break;
        default: break;
      }
    }
  }
}

// Rows [m0, m1) of one image's output block: columns [p0, p1) of rows `ld` apart, row r holding
// channel r. z (or nullptr) is laid out like y.
template <typename T>
void Apply(const ActivationSpec& act, const T* bias, const T* z, T* y, int64_t ld, int64_t m0, int64_t m1, int64_t p0,
           int64_t p1) {
  const int64_t n = p1 - p0;
  for (int64_t m = m0; m < m1; ++m) {
    T* row = y + m * ld + p0;
    if (bias != nullptr) {
      const T b = bias[m];
      for (int64_t i = 0; i < n; ++i) row[i] += b;
    }
    if (z != nullptr) {
      const T* zr = z + m * ld + p0;
      for (int64_t i = 0; i < n; ++i) row[i] += zr[i];
    }
    Activate(act, row, n);
  }
}

}  // namespace tob::conv_epilogue
