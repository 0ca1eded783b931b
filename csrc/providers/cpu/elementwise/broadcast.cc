#include "providers/cpu/elementwise/broadcast.h"

#include <string>

namespace tob::ew {

namespace {

std::string ShapesToString(const std::vector<const Shape*>& shapes) {
  std::string s;
  for (size_t i = 0; i < shapes.size(); ++i) s += (i ? ", " : "") + ShapeToString(*shapes[i]);
  return s;
}

}  // namespace

StatusOr<Shape> BroadcastShapes(const std::vector<const Shape*>& shapes) {
  size_t rank = 0;
  for (const Shape* s : shapes) rank = std::max(rank, s->size());
  Shape out(rank, 1);
  for (const Shape* s : shapes) {
    size_t pad = rank - s->size();
    for (size_t i = 0; i < s->size(); ++i) {
      int64_t d = (*s)[i];
      int64_t& o = out[pad + i];
      if (d == o || d == 1) continue;
      if (o == 1) {
        o = d;
        continue;
      }
      return InvalidArgument("shapes ", ShapesToString(shapes), " cannot be broadcast together");
    }
  }
  return out;
}

StatusOr<BroadcastPlan> MakeBroadcastPlan(const std::vector<const Shape*>& inputs, const Shape& out) {
  TOB_ENFORCE(!inputs.empty() && inputs.size() <= static_cast<size_t>(kMaxBroadcastInputs));
  const int n = static_cast<int>(inputs.size());
  const size_t rank = out.size();
  BroadcastPlan plan;
  plan.num_inputs = n;
  plan.numel = NumElements(out);
  // Each input right-aligned to the output rank, with its row-major strides.
  std::vector<std::vector<int64_t>> in_dims(n, std::vector<int64_t>(rank, 1));
  std::vector<std::vector<int64_t>> in_strides(n, std::vector<int64_t>(rank, 0));
  for (int k = 0; k < n; ++k) {
    const Shape& s = *inputs[k];
    if (s.size() > rank)
      return InvalidArgument("input shape ", ShapeToString(s), " has more dims than the output ", ShapeToString(out));
    size_t pad = rank - s.size();
    int64_t stride = 1;
    for (size_t i = s.size(); i-- > 0;) {
      int64_t d = s[i];
      if (d != out[pad + i] && d != 1)
        return InvalidArgument("shape ", ShapeToString(s), " cannot be broadcast to ", ShapeToString(out));
      in_dims[k][pad + i] = d;
      in_strides[k][pad + i] = d == 1 ? 0 : stride;
      stride *= d;
    }
  }
  // Keep dims of output size > 1; merge a dim into the previous kept one when every input is
  // broadcast along both or present along both (then strides chain: outer = inner * size).
  for (size_t i = 0; i < rank; ++i) {
    if (out[i] == 1) continue;
    bool merge = !plan.dims.empty();
    for (int k = 0; k < n && merge; ++k) {
      bool prev_full = plan.strides[k].back() != 0;
      bool cur_full = in_strides[k][i] != 0;
      merge = prev_full == cur_full;
    }
    if (merge) {
      plan.dims.back() *= out[i];
      for (int k = 0; k < n; ++k) plan.strides[k].back() = in_strides[k][i];
    } else {
      plan.dims.push_back(out[i]);
      for (int k = 0; k < n; ++k) plan.strides[k].push_back(in_strides[k][i]);
    }
  }
  if (plan.dims.empty()) {  // every dim is 1 (or a scalar)
    plan.dims.push_back(1);
    for (int k = 0; k < n; ++k) plan.strides[k].push_back(0);
  }
  return plan;
}

}  // namespace tob::ew
