// The torch execution provider: runs com.microsoft ATen nodes (any torch operator) through
// torch's dispatcher, on CPU, without copying tensors. It is built as its own library, linked only
// into the Python module, so the engine and its tests stay free of libtorch; the module's init
// calls RegisterTorchProvider(), which plugs the provider and its kernel into the engine's
// registries. This header includes no torch header.
#pragma once

namespace tob {

inline constexpr const char* kTorchProvider = "TorchExecutionProvider";

// Registers the provider (as a fallback: every session gets it after the CPU provider) and the
// ATen kernel. Idempotent.
void RegisterTorchProvider();

}  // namespace tob
