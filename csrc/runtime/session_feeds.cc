// How a session takes its feeds: finding an input by name, checking a feed against the declared
// type (dtype, rank, fixed and symbolic dims, the kind of a sequence or optional), binding named
// feeds to their slots, and the memory-pattern signature of the bound inputs.
#include <cstring>
#include <unordered_map>

#include "runtime/session.h"

namespace tob {

int Session::FindInput(const std::string& name) const {
  for (size_t i = 0; i < input_info_.size(); ++i)
    if (input_info_[i].name == name) return static_cast<int>(i);
  return -1;
}

Status Session::CheckInput(size_t index, const char* kind, const RuntimeValue& v,
                           std::unordered_map<std::string, int64_t>* symbols) const {
  const std::string& name = input_info_[index].name;
  const ValueType& want = input_info_[index].type;
  if (v.is_tensor() && want.kind == ValueKind::kTensor) return CheckInputTensor(index, kind, v.tensor(), want, symbols);
  if (v.is_none()) {
    if (!want.optional)
      return InvalidArgument(kind, " '", name, "' is ", want.ToString(), ", which cannot be none (only optionals can)");
    return Status::OK();
  }
  if (v.is_sequence() && want.kind == ValueKind::kSequence) {
    const TensorSequence& seq = v.sequence();
    if (want.dtype != DType::kUndefined && seq.dtype != want.dtype)
      return InvalidArgument(kind, " '", name, "': expected a sequence of ", DTypeName(want.dtype),
                             " tensors, got one of ", DTypeName(seq.dtype));
    // Dims a sequence declares are the same for all its tensors, but not symbols bound across inputs.
    for (size_t k = 0; k < seq.tensors.size(); ++k) {
      const std::string element = StrCat(kind, " '", name, "' tensor ", k);
      if (seq.tensors[k].dtype() != seq.dtype)
        return InvalidArgument(element, " is ", DTypeName(seq.tensors[k].dtype()), " in a sequence of ",
                               DTypeName(seq.dtype));
      TOB_RETURN_IF_ERROR(CheckInputTensor(index, element.c_str(), seq.tensors[k], want, nullptr));
    }
    return Status::OK();
  }
  if (!v.defined()) return InvalidArgument(kind, " '", name, "' has no value");
  return InvalidArgument(kind, " '", name, "': expected ", want.KindName(), " ", want.ToString(), ", got ",
                         v.Describe());
}

Status Session::CheckInputTensor(size_t index, const char* kind, const Tensor& t, const ValueType& want,
                                 std::unordered_map<std::string, int64_t>* symbols) const {
  const std::string name = input_info_[index].name;
  if (t.device() != Device{})
    return InvalidArgument(kind, " '", name, "' is on ", t.device().ToString(),
                           "; this session takes host (cpu) tensors");
  if (want.dtype != DType::kUndefined && t.dtype() != want.dtype)
    return InvalidArgument(kind, " '", name, "': expected dtype ", DTypeName(want.dtype), ", got ",
                           DTypeName(t.dtype()));
  if (!want.shape) return Status::OK();
  const Dims& dims = *want.shape;
  if (static_cast<int64_t>(dims.size()) != t.rank())
    return InvalidArgument(kind, " '", name, "': expected rank ", dims.size(), " (shape ", DimsToString(dims),
                           "), got shape ", ShapeToString(t.shape()));
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d].is_known() && dims[d].value != t.shape()[d])
      return InvalidArgument(kind, " '", name, "': dimension ", d, " must be ", dims[d].value, " (shape ",
                             DimsToString(dims), "), got shape ", ShapeToString(t.shape()));
    if (dims[d].is_symbolic() && symbols != nullptr) {
      auto [it, fresh] = symbols->emplace(dims[d].symbol, t.shape()[d]);
      if (!fresh && it->second != t.shape()[d])
        return InvalidArgument(kind, " '", name, "': dimension ", d, " ('", dims[d].symbol, "') is ", t.shape()[d],
                               " but another input bound '", dims[d].symbol, "' to ", it->second);
    }
  }
  return Status::OK();
}

Status Session::BindFeeds(const std::vector<std::string>& names, std::vector<RuntimeValue>& feeds,
                          std::vector<RuntimeValue>& slots, std::string* signature) const {
  if (names.size() != feeds.size())
    return InvalidArgument("got ", names.size(), " feed names but ", feeds.size(), " tensors");
  const Graph& g = *graph_;
  std::vector<bool> bound(g.inputs().size(), false);
  std::unordered_map<std::string, int64_t> symbols;
  auto input_list = [&] {
    std::string s;
    for (const auto& io : input_info_) s += (s.empty() ? "" : ", ") + io.name + " " + io.type.ToString();
    return s;
  };
  for (size_t f = 0; f < names.size(); ++f) {
    const int idx = FindInput(names[f]);
    if (idx < 0) return InvalidArgument("unknown input '", names[f], "'; the model's inputs are: ", input_list());
    if (bound[idx]) return InvalidArgument("input '", names[f], "' is fed twice");
    if (bound_states_[idx].defined())
      return InvalidArgument("input '", names[f],
                             "' is bound as session state (BindState); it takes its value from the binding and "
                             "cannot also be fed");
    TOB_RETURN_IF_ERROR(CheckInput(idx, "input", feeds[f], &symbols));
    bound[idx] = true;
    slots[input_slots_[idx]] = std::move(feeds[f]);
  }
  for (size_t i = 0; i < bound.size(); ++i) {
    if (bound[i]) continue;
    if (!bound_states_[i].defined() && input_info_[i].type.optional) {  // an optional not fed has no value
      slots[input_slots_[i]] = RuntimeValue::None(input_info_[i].type);
      continue;
    }
    if (!bound_states_[i].defined())
      return InvalidArgument("missing input '", g.inputs()[i]->name(), "' (", input_info_[i].type.ToString(), ")");
    TOB_RETURN_IF_ERROR(CheckInput(i, "state", bound_states_[i], &symbols));
    slots[input_slots_[i]] = bound_states_[i];
  }
  signature->clear();
  for (int s : input_slots_) AppendSignature(slots[s], signature);
  return Status::OK();
}

// The memory-pattern key of one input: dtype and dims as raw bytes (built on every run, so no
// number formatting); a sequence's count and the key of each tensor, -1 for none.
void Session::AppendSignature(const RuntimeValue& v, std::string* signature) {
  auto append_tensor = [signature](const Tensor& t) {
    const int32_t header[2] = {static_cast<int32_t>(t.dtype()), static_cast<int32_t>(t.rank())};
    signature->append(reinterpret_cast<const char*>(header), sizeof(header));
    signature->append(reinterpret_cast<const char*>(t.shape().data()), t.shape().size() * sizeof(int64_t));
  };
  if (v.is_tensor()) return append_tensor(v.tensor());
  const int32_t marker[2] = {-1, v.is_sequence() ? static_cast<int32_t>(v.sequence().tensors.size()) : -1};
  signature->append(reinterpret_cast<const char*>(marker), sizeof(marker));
  if (v.is_sequence())
    for (const Tensor& t : v.sequence().tensors) append_tensor(t);
}

Status Session::BindPositional(size_t index, RuntimeValue feed, std::vector<RuntimeValue>& slots,
                               std::unordered_map<std::string, int64_t>* symbols, std::string* signature) const {
  RuntimeValue& slot = slots[input_slots_[index]];
  slot = std::move(feed);
  TOB_RETURN_IF_ERROR(CheckInput(index, "input", slot, symbols));
  AppendSignature(slot, signature);
  return Status::OK();
}

}  // namespace tob
