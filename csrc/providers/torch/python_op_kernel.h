// The kernel behind com.microsoft PythonOp / PythonOpGrad (see python_op_kernel.cc; the schemas
// are ops/python_schemas.cc).
// No torch header here.
#pragma once

#include <memory>

#include "core/status.h"
#include "framework/kernel.h"
#include "ops/op_schema.h"

namespace tob {

// Resolves tob::python_op (PythonOp) or tob::python_op_grad (PythonOpGrad) and binds the node's
// attributes to its arguments once; kNotImplemented when torch_ort_backend has not defined the op
// in this process, kInvalidModel when the node does not fit it.
StatusOr<std::unique_ptr<OpKernel>> CreatePythonOpKernel(const Node& node);

}  // namespace tob
