// Torch tensors straight into and out of an engine run (Session.run_torch, the compiled graphs' fast
// path, docs/performance.md "Per-call overhead"): each input's data pointer and shape are borrowed
// from its at::Tensor, with no DLPack capsule, and each output is handed back as a torch tensor over
// the engine's buffer. The only file of the binding that includes torch headers is torch_run.cc
// (built when TOB_WITH_TORCH is on).
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "core/tensor.h"

namespace tob::python {

// An engine tensor over the memory of each element of `args` (a list of torch tensors), which it
// keeps alive; labels[i] names element i in the errors. Raises TypeError for an element that is not
// a torch tensor and ValueError for one on another device than the CPU, with a dtype the engine does
// not carry, not strided, not contiguous, with its conjugate or negative bit set, or without memory of its own
// (a ZeroTensor, a FakeTensor, a wrapper subclass).
std::vector<Tensor> EngineTensorsFromTorch(const pybind11::list& args, const std::vector<std::string>& labels);

// Raises ValueError naming labels[i] for a dtype torch does not have (kUndefined, a type not known
// before the run, passes): run_torch checks the session's outputs before it consumes donated inputs.
void CheckTorchDTypes(const std::vector<std::string>& labels, const std::vector<DType>& dtypes);

// A new torch CPU tensor (one Python object each) over each engine tensor's memory (TorchTensorOver);
// each holds a reference on its Buffer, so the memory lives as long as the torch tensor or a view of
// it. Raises ValueError naming labels[i] for a tensor torch cannot hold (another device, a dtype
// torch does not have, a non-empty tensor without memory).
pybind11::list TorchTensorsFromEngine(const std::vector<Tensor>& tensors, const std::vector<std::string>& labels);

}  // namespace tob::python
