#include "providers/cuda/cuda_broadcast.h"

#include <vector>

namespace tob {

namespace {

// Element strides of `in` over the dims of `out` (right-aligned), 0 where `in` is broadcast.
StatusOr<std::vector<int64_t>> StridesOver(const Shape& out, const Shape& in) {
  const size_t rank = out.size();
  if (in.size() > rank)
    return InvalidArgument("shape ", ShapeToString(in), " does not broadcast to ", ShapeToString(out));
  std::vector<int64_t> strides(rank, 0);
  int64_t stride = 1;
  for (size_t k = 0; k < in.size(); ++k) {
    const size_t in_dim = in.size() - 1 - k, out_dim = rank - 1 - k;
    if (in[in_dim] == out[out_dim]) {
      strides[out_dim] = in[in_dim] == 1 ? 0 : stride;
    } else if (in[in_dim] != 1) {
      return InvalidArgument("shape ", ShapeToString(in), " does not broadcast to ", ShapeToString(out));
    }
    stride *= in[in_dim];
  }
  return strides;
}

}  // namespace

StatusOr<cuda::BroadcastIndexing> MakeBroadcastIndexing(const Shape& out, const Shape& a, const Shape& b) {
  TOB_ASSIGN_OR_RETURN(std::vector<int64_t> sa, StridesOver(out, a));
  TOB_ASSIGN_OR_RETURN(std::vector<int64_t> sb, StridesOver(out, b));
  // Walk from the innermost dim outwards, merging a dim into the previous (inner) group when
  // both inputs continue their inner group's stride pattern across it.
  std::vector<int64_t> dims, astr, bstr;  // innermost first
  for (size_t k = out.size(); k-- > 0;) {
    if (out[k] == 1) continue;
    if (!dims.empty() && sa[k] == astr.back() * dims.back() && sb[k] == bstr.back() * dims.back()) {
      dims.back() *= out[k];
      continue;
    }
    dims.push_back(out[k]);
    astr.push_back(sa[k]);
    bstr.push_back(sb[k]);
  }
  if (dims.size() > static_cast<size_t>(cuda::kMaxBroadcastRank))
    return NotImplemented("broadcasting ", ShapeToString(a), " with ", ShapeToString(b), " to ", ShapeToString(out),
                          " needs ", dims.size(), " dims after merging; the CUDA kernels take ",
                          cuda::kMaxBroadcastRank);
  cuda::BroadcastIndexing idx;
  idx.rank = static_cast<int>(dims.size());
  for (int d = 0; d < idx.rank; ++d) {
    const size_t from = dims.size() - 1 - d;  // outermost first in the kernel's layout
    idx.out_dims[d] = dims[from];
    idx.a_strides[d] = astr[from];
    idx.b_strides[d] = bstr[from];
  }
  return idx;
}

}  // namespace tob
