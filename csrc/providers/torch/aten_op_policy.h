// Which torch operators an ATen node may call in a session without
// SessionOptions::allow_unsafe_aten_ops: pure tensor computations in the aten namespace
// (docs/security.md). No torch header here.
#pragma once

#include <string>
#include <vector>

namespace tob {

// Why operator `name` ("aten::add"; no namespace means aten) with `overload` ("" or "Tensor") may not run in a session
// that keeps ATen nodes to the allow-list; "" when it may. The rule (aten_op_policy.cc):
//   1. the aten namespace only (custom namespaces run whatever their library does);
//   2. not on the refusal list (aten_op_policy.inc: I/O, uninitialised memory, kernels that trust
//      their inputs' shapes or indices), then
//   3. tagged by torch as a tensor computation (core, pointwise, reduction, view_copy,
//      nondeterministic_seeded), or on the explicit allow list (aten_op_policy.inc).
// Mutating schemas are refused by the ATen kernel itself, in every session.
std::string AtenOpRefusal(const std::string& name, const std::string& overload);

struct AtenPolicyEntry {
  std::string name;    // "aten::index_add": every overload
  bool allowed;        // on the explicit allow list (else the refusal list)
  std::string reason;  // why (refusals) or what it is (allowed entries)
};

// The explicit lists, for tests and docs.
const std::vector<AtenPolicyEntry>& AtenPolicyEntries();

}  // namespace tob
