#include "ops/tensor_params.h"

#include <algorithm>

namespace tob {

namespace {

Status NormalizeAxisList(const std::vector<int64_t>& axes, int64_t rank, const char* what, std::vector<int64_t>* out) {
  out->clear();
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    int64_t n = a < 0 ? a + rank : a;
    if (n < 0 || n >= rank) return InvalidArgument(what, " axis ", a, " is out of range for rank ", rank);
    if (seen[n]) return InvalidArgument(what, " axis ", a, " is repeated");
    seen[n] = true;
    out->push_back(n);
  }
  return Status::OK();
}

}  // namespace

Status ResolveSliceAxis(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t* first, int64_t* length) {
  if (step == 0) return InvalidArgument("slice step cannot be 0");
  if (dim <= 0) {
    *first = 0;
    *length = 0;
    return Status::OK();
  }
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    uint64_t span = end > start ? static_cast<uint64_t>(end - start) : 0;
    *length = static_cast<int64_t>((span + static_cast<uint64_t>(step) - 1) / static_cast<uint64_t>(step));
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    // Computed unsigned so that a step of INT64_MIN does not overflow.
    uint64_t neg_step = static_cast<uint64_t>(-(step + 1)) + 1;
    uint64_t span = start > end ? static_cast<uint64_t>(start - end) : 0;
    *length = static_cast<int64_t>((span + neg_step - 1) / neg_step);
  }
  *first = *length > 0 ? start : 0;
  return Status::OK();
}

Status NormalizeSliceArgs(const SliceArgs& args, int64_t rank, std::vector<int64_t>* axes_out) {
  size_t n = args.starts.size();
  if (args.ends.size() != n) return InvalidArgument("starts has ", n, " entries but ends has ", args.ends.size());
  if (!args.steps.empty() && args.steps.size() != n)
    return InvalidArgument("starts has ", n, " entries but steps has ", args.steps.size());
  if (args.axes.empty()) {
    if (static_cast<int64_t>(n) > rank)
      return InvalidArgument("starts has ", n, " entries but the input has rank ", rank);
    axes_out->resize(n);
    for (size_t i = 0; i < n; ++i) (*axes_out)[i] = static_cast<int64_t>(i);
    return Status::OK();
  }
  if (args.axes.size() != n) return InvalidArgument("starts has ", n, " entries but axes has ", args.axes.size());
  return NormalizeAxisList(args.axes, rank, "slice", axes_out);
}

Status ResolveSlice(const std::vector<int64_t>& in_shape, const SliceArgs& args, SliceSpec* spec) {
  int64_t rank = static_cast<int64_t>(in_shape.size());
  std::vector<int64_t> axes;
  TOB_RETURN_IF_ERROR(NormalizeSliceArgs(args, rank, &axes));
  spec->first.assign(in_shape.size(), 0);
  spec->step.assign(in_shape.size(), 1);
  spec->length = in_shape;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = axes[i];
    int64_t step = args.steps.empty() ? 1 : args.steps[i];
    TOB_RETURN_IF_ERROR(
        ResolveSliceAxis(in_shape[a], args.starts[i], args.ends[i], step, &spec->first[a], &spec->length[a]));
    spec->step[a] = step;
  }
  return Status::OK();
}

Status ResolvePads(int64_t rank, const std::vector<int64_t>& pads, const std::optional<std::vector<int64_t>>& axes,
                   std::vector<int64_t>* begin, std::vector<int64_t>* end) {
  std::vector<int64_t> dims;
  if (axes) {
    TOB_RETURN_IF_ERROR(NormalizeAxisList(*axes, rank, "pad", &dims));
  } else {
    dims.resize(static_cast<size_t>(rank));
    for (int64_t i = 0; i < rank; ++i) dims[i] = i;
  }
  size_t k = dims.size();
  if (pads.size() != 2 * k)
    return InvalidArgument("pads has ", pads.size(), " entries; expected ", 2 * k, " (begin and end for ", k, " axes)");
  begin->assign(static_cast<size_t>(rank), 0);
  end->assign(static_cast<size_t>(rank), 0);
  for (size_t i = 0; i < k; ++i) {
    (*begin)[dims[i]] = pads[i];
    (*end)[dims[i]] = pads[k + i];
  }
  return Status::OK();
}

Status ParsePadMode(const std::string& mode, PadMode* out) {
  if (mode == "constant") *out = PadMode::kConstant;
  else if (mode == "reflect") *out = PadMode::kReflect;
  else if (mode == "edge") *out = PadMode::kEdge;
  else if (mode == "wrap") *out = PadMode::kWrap;
  else return InvalidArgument("unknown pad mode '", mode, "' (expected constant, reflect, edge or wrap)");
  return Status::OK();
}

Status ResolveSplit(int64_t dim, const std::optional<std::vector<int64_t>>& split, int64_t num_outputs,
                    std::vector<int64_t>* sizes) {
  if (split) {
    if (static_cast<int64_t>(split->size()) != num_outputs)
      return InvalidArgument("split has ", split->size(), " entries for ", num_outputs, " outputs");
    int64_t sum = 0;
    for (int64_t s : *split) {
      if (s < 0) return InvalidArgument("split sizes must be >= 0, got ", s);
      sum += s;
    }
    if (sum != dim) return InvalidArgument("split sizes sum to ", sum, " but the split dim is ", dim);
    *sizes = *split;
    return Status::OK();
  }
  if (num_outputs <= 0) return InvalidArgument("cannot split into ", num_outputs, " outputs");
  int64_t chunk = dim / num_outputs + (dim % num_outputs != 0 ? 1 : 0);
  int64_t last = dim - chunk * (num_outputs - 1);
  if (last < 0)
    return InvalidArgument("a dim of ", dim, " cannot be split into ", num_outputs, " parts of at most ", chunk);
  sizes->assign(static_cast<size_t>(num_outputs), chunk);
  sizes->back() = last;
  return Status::OK();
}

Status ResolvePerm(const std::vector<int64_t>& perm, int64_t rank, std::vector<int64_t>* out) {
  if (perm.empty()) {
    out->resize(static_cast<size_t>(rank));
    for (int64_t i = 0; i < rank; ++i) (*out)[i] = rank - 1 - i;
    return Status::OK();
  }
  if (static_cast<int64_t>(perm.size()) != rank)
    return InvalidArgument("perm has ", perm.size(), " entries but the input has rank ", rank);
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p]) return InvalidArgument("perm is not a permutation of 0..", rank - 1);
    seen[p] = true;
  }
  *out = perm;
  return Status::OK();
}

}  // namespace tob
