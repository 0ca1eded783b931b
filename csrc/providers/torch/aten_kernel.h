// The kernel behind com.microsoft ATen nodes (see torch_provider.h). No torch header here.
#pragma once

#include <memory>

#include "core/status.h"
#include "framework/kernel.h"

namespace tob {

// Resolves the node's torch operator and plans how its inputs map to the operator's arguments;
// kNotImplemented when torch has no such operator, kInvalidModel when the node does not fit it,
// kPermissionDenied when the operator is not on the allow-list (aten_op_policy.h) and
// `unsafe_ops_allowed` (SessionOptions::allow_unsafe_aten_ops) is off.
StatusOr<std::unique_ptr<OpKernel>> CreateAtenKernel(const Node& node, bool unsafe_ops_allowed = false);

}  // namespace tob
