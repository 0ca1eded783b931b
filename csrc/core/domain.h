// The operator domains the engine knows by name. ai.onnx is "" inside the engine
// (Graph::NormalizeDomain maps "ai.onnx" to it).
#pragma once

namespace tob {

// onnxruntime's contrib and training operators: ATen, PythonOp, Gelu, LayerNormalization, the
// gradient and optimizer ops, the copies between devices.
inline constexpr const char* kMicrosoftDomain = "com.microsoft";

// The ONNX standard's classical machine-learning operators (TreeEnsemble, Binarizer, ...).
inline constexpr const char* kMlDomain = "ai.onnx.ml";

// The ONNX standard's training operators (Adagrad, Adam, Momentum, Gradient), a preview domain.
inline constexpr const char* kPreviewTrainingDomain = "ai.onnx.preview.training";

}  // namespace tob
