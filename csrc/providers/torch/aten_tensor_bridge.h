// Engine Tensor <-> at::Tensor without copies, and the dtype mapping between them. Declared with
// torch types forward-declared, so this header pulls in no torch header; only the torch
// provider's .cc files use it.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace at {
class Tensor;
}  // namespace at

namespace tob {

// c10::ScalarType code (torch's numbering, e.g. 6 = float32) of an engine dtype; -1 when torch has
// no equivalent.
int TorchScalarTypeOf(DType dtype);
// The engine dtype of a c10::ScalarType code; kUndefined when the engine has none.
DType DTypeOfTorchScalarType(int scalar_type);
std::string TorchScalarTypeName(int scalar_type);

// A torch CPU tensor over `t`'s memory. The torch tensor holds a reference on t's Buffer, so a
// torch result that views it (a view op) keeps the memory alive after the engine lets go of it.
StatusOr<at::Tensor> TorchView(const Tensor& t);
// A new torch CPU tensor over `t`'s memory, holding a reference on its Buffer (TorchView without
// handing back the torch provider's own result, which may be an inference-mode tensor): what
// Session.run_torch gives the caller. InvalidArgument for an unmapped dtype, another device, or a
// non-empty tensor without memory.
StatusOr<at::Tensor> TorchTensorOver(const Tensor& t);

// An engine tensor over a torch result: contiguous results are taken as they are (the Buffer
// holds the at::Tensor, no copy), others are made contiguous first. Undefined in, undefined out.
// kRuntimeError for results the engine cannot hold (another device, sparse, unmapped dtype).
StatusOr<Tensor> EngineTensorFromTorch(const at::Tensor& t);

}  // namespace tob
