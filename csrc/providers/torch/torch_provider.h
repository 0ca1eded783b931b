// The torch execution provider: runs com.microsoft ATen nodes (any torch operator) and PythonOp /
// PythonOpGrad nodes (torch.autograd.Functions) through torch's dispatcher, on CPU, without copying
// tensors. It is built as its own library, linked only into the Python module, so the engine and
// its tests stay free of libtorch; the module's init calls RegisterTorchProvider(), which plugs the
// provider and its kernels into the engine's registries. This header includes no torch header.
#pragma once

namespace tob {

inline constexpr const char* kTorchProvider = "TorchExecutionProvider";

// Registers the provider (as a fallback: every session gets it after the CPU provider), the ATen
// kernel, and the PythonOp / PythonOpGrad schemas and kernel. Idempotent.
void RegisterTorchProvider();

}  // namespace tob
