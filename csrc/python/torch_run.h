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
// not carry, not strided, not contiguous, or with its conjugate or negative bit set.
std::vector<Tensor> EngineTensorsFromTorch(const pybind11::list& args, const std::vector<std::string>& labels);

// A new torch CPU tensor (one Python object each) over each engine tensor's memory; each holds a
// reference on its Buffer, so the memory lives as long as the torch tensor or a view of it. Raises
// ValueError for a tensor torch cannot hold (another device, a dtype torch does not have).
pybind11::list TorchTensorsFromEngine(const std::vector<Tensor>& tensors);

}  // namespace tob::python
