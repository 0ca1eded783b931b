// The operator domains the engine knows by name. ai.onnx is "" inside the engine
// (Graph::NormalizeDomain maps "ai.onnx" to it).
#pragma once

namespace tob {

// onnxruntime's contrib and training operators: ATen, PythonOp, Gelu, LayerNormalization, the
// gradient and optimizer ops, the copies between devices.
inline constexpr const char* kMicrosoftDomain = "com.microsoft";

}  // namespace tob
