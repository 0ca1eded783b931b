#include "ir/graph.h"

#include <algorithm>
#include <queue>
#include <unordered_set>

namespace tob {

// ---------------- Node ----------------

const Attribute* Node::FindAttribute(const std::string& name) const {
  auto it = attributes_.find(name);
  return it == attributes_.end() ? nullptr : &it->second;
}

std::string Node::Describe() const {
  std::string op = domain_.empty() ? op_type_ : domain_ + "::" + op_type_;
  return StrCat(op, " node '", name_, "'");
}

namespace {

template <typename T>
Status GetTyped(const Node& node, const std::string& name, AttrType expected, T* out, const std::optional<T>& dflt,
                T Attribute::*field) {
  const Attribute* a = node.FindAttribute(name);
  if (a == nullptr) {
    if (dflt) {
      *out = *dflt;
      return Status::OK();
    }
    return InvalidModel(node.Describe(), ": required attribute '", name, "' (", AttrTypeName(expected), ") is missing");
  }
  if (a->type != expected)
    return InvalidModel(node.Describe(), ": attribute '", name, "' must be ", AttrTypeName(expected), ", got ",
                        AttrTypeName(a->type));
  *out = a->*field;
  return Status::OK();
}

}  // namespace

Status Node::GetAttr(const std::string& name, int64_t* out, std::optional<int64_t> dflt) const {
  return GetTyped(*this, name, AttrType::kInt, out, dflt, &Attribute::i);
}
Status Node::GetAttr(const std::string& name, float* out, std::optional<float> dflt) const {
  return GetTyped(*this, name, AttrType::kFloat, out, dflt, &Attribute::f);
}
Status Node::GetAttr(const std::string& name, std::string* out, std::optional<std::string> dflt) const {
  return GetTyped(*this, name, AttrType::kString, out, dflt, &Attribute::s);
}
Status Node::GetAttr(const std::string& name, std::vector<int64_t>* out,
                     std::optional<std::vector<int64_t>> dflt) const {
  return GetTyped(*this, name, AttrType::kInts, out, dflt, &Attribute::ints);
}
Status Node::GetAttr(const std::string& name, std::vector<float>* out, std::optional<std::vector<float>> dflt) const {
  return GetTyped(*this, name, AttrType::kFloats, out, dflt, &Attribute::floats);
}
Status Node::GetAttr(const std::string& name, std::vector<std::string>* out,
                     std::optional<std::vector<std::string>> dflt) const {
  return GetTyped(*this, name, AttrType::kStrings, out, dflt, &Attribute::strings);
}
Status Node::GetAttr(const std::string& name, Tensor* out) const {
  return GetTyped(*this, name, AttrType::kTensor, out, std::optional<Tensor>(), &Attribute::t);
}

// ---------------- Graph ----------------

Value* Graph::NewValue(const std::string& name, ValueType type) {
  auto v = std::make_unique<Value>(name, std::move(type));
  Value* raw = v.get();
  values_[name] = std::move(v);
  return raw;
}

Value* Graph::FindValue(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? nullptr : it->second.get();
}

StatusOr<Value*> Graph::AddInput(const std::string& name, ValueType type) {
  if (name.empty()) return InvalidModel("graph input with an empty name");
  if (Value* existing = FindValue(name)) {
    // ONNX IR < 4 lists initializers among the inputs too: an input that is also an
    // initializer is a constant with a default, which we treat as the constant.
    if (existing->initializer() != nullptr) return existing;
    return InvalidModel("value '", name, "' is defined twice (graph input)");
  }
  Value* v = NewValue(name, std::move(type));
  v->is_graph_input_ = true;
  inputs_.push_back(v);
  return v;
}

StatusOr<Value*> Graph::AddInitializer(const std::string& name, Tensor value) {
  if (name.empty()) return InvalidModel("initializer with an empty name");
  if (Value* existing = FindValue(name)) {
    if (existing->is_graph_input_ && existing->producer_ == nullptr && !existing->initializer_) {
      // Older models: declared as input first, then given a value. It becomes a constant.
      existing->is_graph_input_ = false;
      inputs_.erase(std::remove(inputs_.begin(), inputs_.end(), existing), inputs_.end());
      existing->type_ = ValueType::OfTensor(value);
      existing->initializer_ = std::move(value);
      return existing;
    }
    return InvalidModel("value '", name, "' is defined twice (initializer)");
  }
  Value* v = NewValue(name, ValueType::OfTensor(value));
  v->initializer_ = std::move(value);
  return v;
}

StatusOr<Node*> Graph::AddNode(const std::string& op_type, const std::string& domain,
                               const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
                               AttributeMap attributes, const std::string& name) {
  if (op_type.empty()) return InvalidModel("node '", name, "' has an empty op_type");
  auto node = std::make_unique<Node>();
  node->op_type_ = op_type;
  node->domain_ = NormalizeDomain(domain);
  node->id_ = next_node_id_++;
  node->order_key_ = node->id_;
  node->name_ = name.empty() ? StrCat(op_type, "_", node->id_) : name;
  node->attributes_ = std::move(attributes);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) {
      node->inputs_.push_back(nullptr);
      continue;
    }
    Value* v = FindValue(inputs[i]);
    if (v == nullptr)
      return InvalidModel(node->Describe(), ": input ", i, " '", inputs[i],
                          "' is not produced by any node, graph input or initializer");
    node->inputs_.push_back(v);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].empty()) {  // omitted optional output: give it a private name
      node->outputs_.push_back(NewValue(UniqueName(node->name_ + "_unused"), ValueType()));
    } else {
      if (FindValue(outputs[i]) != nullptr)
        return InvalidModel(node->Describe(), ": output '", outputs[i], "' is already defined elsewhere");
      node->outputs_.push_back(NewValue(outputs[i], ValueType()));
    }
  }
  Node* raw = node.get();
  for (size_t i = 0; i < raw->inputs_.size(); ++i)
    if (raw->inputs_[i]) raw->inputs_[i]->uses_.push_back(Use{raw, static_cast<int>(i)});
  for (size_t i = 0; i < raw->outputs_.size(); ++i) {
    raw->outputs_[i]->producer_ = raw;
    raw->outputs_[i]->producer_output_ = static_cast<int>(i);
  }
  nodes_.push_back(std::move(node));
  return raw;
}

Status Graph::AddOutput(const std::string& name, std::optional<ValueType> declared) {
  Value* v = FindValue(name);
  if (v == nullptr) return InvalidModel("graph output '", name, "' is not produced by anything");
  if (declared && v->type_.dtype == DType::kUndefined) v->type_ = *declared;
  outputs_.push_back(v);
  output_names_.push_back(name);
  ++v->graph_output_count_;
  return Status::OK();
}

std::vector<Node*> Graph::nodes() const {
  std::vector<Node*> r;
  r.reserve(nodes_.size());
  for (const auto& n : nodes_) r.push_back(n.get());
  return r;
}

std::vector<Value*> Graph::initializers() const {
  std::vector<Value*> r;
  for (const auto& [name, v] : values_)
    if (v->initializer_) r.push_back(v.get());
  std::sort(r.begin(), r.end(), [](Value* a, Value* b) { return a->name() < b->name(); });
  return r;
}

int Graph::Opset(const std::string& domain) const {
  auto it = opsets_.find(NormalizeDomain(domain));
  return it == opsets_.end() ? -1 : it->second;
}

StatusOr<std::vector<Node*>> Graph::TopologicalOrder() const {
  // Kahn's algorithm with a min-heap on (order_key, id) instead of a FIFO: a FIFO runs every node
  // whose inputs are ready as early as possible, which in a backward graph would recompute all
  // activations at its start and hold them to the end.
  auto later = [](const Node* a, const Node* b) {
    return a->order_key_ != b->order_key_ ? a->order_key_ > b->order_key_ : a->id_ > b->id_;
  };
  std::priority_queue<Node*, std::vector<Node*>, decltype(later)> ready(later);
  std::unordered_map<const Node*, int> pending;
  for (const auto& n : nodes_) {
    int count = 0;
    for (Value* in : n->inputs_)
      if (in && in->producer_) ++count;
    pending[n.get()] = count;
    if (count == 0) ready.push(n.get());
  }
  std::vector<Node*> order;
  order.reserve(nodes_.size());
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    order.push_back(n);
    for (Value* out : n->outputs_)
      for (const Use& use : out->uses_)
        if (--pending[use.node] == 0) ready.push(use.node);
  }
  if (order.size() != nodes_.size()) {
    for (const auto& n : nodes_)
      if (pending[n.get()] > 0) return InvalidModel("the graph has a cycle through ", n->Describe());
  }
  return order;
}

void Graph::SetNodeInput(Node* node, int index, Value* value) {
  Value* old = node->inputs_[index];
  if (old) {
    auto& uses = old->uses_;
    for (auto it = uses.begin(); it != uses.end(); ++it)
      if (it->node == node && it->input_index == index) {
        uses.erase(it);
        break;
      }
  }
  node->inputs_[index] = value;
  if (value) value->uses_.push_back(Use{node, index});
}

Status Graph::ReplaceAllUses(Value* from, Value* to) {
  if (from == to) return Status::OK();
  std::vector<Use> uses = from->uses_;
  for (const Use& u : uses) SetNodeInput(u.node, u.input_index, to);
  for (auto& out : outputs_)
    if (out == from) {
      out = to;
      --from->graph_output_count_;
      ++to->graph_output_count_;
    }
  return Status::OK();
}

Status Graph::RemoveNode(Node* node) {
  for (Value* out : node->outputs_)
    if (!out->uses_.empty() || out->is_graph_output())
      return InvalidModel("cannot remove ", node->Describe(), ": output '", out->name(), "' is still used");
  for (size_t i = 0; i < node->inputs_.size(); ++i)
    if (node->inputs_[i]) SetNodeInput(node, static_cast<int>(i), nullptr);
  for (Value* out : node->outputs_) {
    out->producer_ = nullptr;
    out->producer_output_ = -1;
  }
  nodes_.remove_if([node](const std::unique_ptr<Node>& n) { return n.get() == node; });
  RemoveUnusedValues();
  return Status::OK();
}

void Graph::RemoveUnusedValues() {
  for (auto it = values_.begin(); it != values_.end();) {
    const Value* v = it->second.get();
    bool dead =
        v->producer_ == nullptr && v->uses_.empty() && !v->is_graph_input_ && !v->is_graph_output() && !v->initializer_;
    bool dead_const = v->initializer_ && v->uses_.empty() && !v->is_graph_output();
    if (dead || dead_const) it = values_.erase(it);
    else ++it;
  }
}

Status Graph::MakeInitializer(Value* value, Tensor tensor) {
  if (value->producer_ != nullptr)
    return InvalidModel("value '", value->name(), "' still has a producer; cannot make it constant");
  value->type_ = ValueType::OfTensor(tensor);
  value->initializer_ = std::move(tensor);
  return Status::OK();
}

std::string Graph::UniqueName(const std::string& prefix) {
  std::string name;
  do name = StrCat(prefix, "__", next_name_id_++);
  while (values_.count(name) > 0);
  return name;
}

}  // namespace tob
