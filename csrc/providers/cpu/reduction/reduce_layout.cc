#include "providers/cpu/reduction/reduce_layout.h"

namespace tob::cpu {

Status ReducedAxesMask(const std::vector<int64_t>& axes, int64_t rank, std::vector<bool>* mask) {
  mask->assign(static_cast<size_t>(rank), false);
  for (int64_t axis : axes) {
    if (axis < -rank || axis >= rank)
      return InvalidArgument("axis ", axis, " is out of range for an input of rank ", rank);
    int64_t a = axis < 0 ? axis + rank : axis;
    if ((*mask)[a]) return InvalidArgument("axis ", axis, " appears more than once in axes");
    (*mask)[a] = true;
  }
  return Status::OK();
}

ReducePlan PlanReduce(const Shape& shape, const std::vector<bool>& reduced) {
  ReducePlan plan;
  int64_t outputs = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (reduced[d]) plan.count *= shape[d];
    else outputs *= shape[d];
  }
  if (NumElements(shape) == 0) {
    // Nothing to read: every output is the reduction of an empty set (or there is no output).
    plan.passes.push_back({outputs, 0, 1});
    return plan;
  }
  // Groups of adjacent dims of one kind, size-1 dims dropped.
  std::vector<int64_t> sizes;
  std::vector<bool> kinds;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!kinds.empty() && kinds.back() == reduced[d]) {
      sizes.back() *= shape[d];
    } else {
      sizes.push_back(shape[d]);
      kinds.push_back(reduced[d]);
    }
  }
  int reduced_groups = 0;
  for (bool k : kinds) reduced_groups += k ? 1 : 0;
  if (reduced_groups == 0) {
    plan.passes.push_back({1, 1, outputs});
    return plan;
  }
  if (reduced_groups > 1) {
    plan.dims = sizes;
    plan.permuted = {outputs, plan.count, 1};
    for (bool want_reduced : {false, true})
      for (size_t g = 0; g < sizes.size(); ++g)
        if (kinds[g] == want_reduced) plan.perm.push_back(static_cast<int64_t>(g));
  }
  // Innermost reduced group first: its pass reads the input contiguously and shrinks it most
  // often; removing a group merges the kept groups around it.
  while (true) {
    size_t g = sizes.size();
    while (!kinds[--g]) {}
    ReduceExtent e;
    for (size_t i = 0; i < g; ++i) e.outer *= sizes[i];
    e.reduce = sizes[g];
    for (size_t i = g + 1; i < sizes.size(); ++i) e.inner *= sizes[i];
    plan.passes.push_back(e);
    if (--reduced_groups == 0) break;
    sizes.erase(sizes.begin() + static_cast<std::ptrdiff_t>(g));
    kinds.erase(kinds.begin() + static_cast<std::ptrdiff_t>(g));
    if (g < sizes.size()) {  // groups g-1 and g are both kept now: merge them
      sizes[g - 1] *= sizes[g];
      sizes.erase(sizes.begin() + static_cast<std::ptrdiff_t>(g));
      kinds.erase(kinds.begin() + static_cast<std::ptrdiff_t>(g));
    }
  }
  return plan;
}

}  // namespace tob::cpu
