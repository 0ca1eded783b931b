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

void Node::SetAttribute(const std::string& name, Attribute value) {
  TOB_ENFORCE(!value.is_graph(), "Node::SetAttribute cannot add a subgraph (", Describe(), ", '", name,
              "'): subgraphs come with the node (Graph::AddNode)");
  auto it = attributes_.find(name);
  TOB_ENFORCE(it == attributes_.end() || !it->second.is_graph(), "Node::SetAttribute cannot replace subgraph '", name,
              "' of ", Describe());
  attributes_[name] = std::move(value);
}

std::vector<Graph*> Node::subgraphs() const {
  std::vector<Graph*> r;
  for (const auto& [name, a] : attributes_) {
    if (a.type == AttrType::kGraph && a.g) r.push_back(a.g.get());
    if (a.type == AttrType::kGraphs)
      for (const auto& g : a.graphs)
        if (g) r.push_back(g.get());
  }
  return r;
}

bool Node::has_subgraphs() const {
  for (const auto& [name, a] : attributes_)
    if (a.is_graph()) return true;
  return false;
}

Graph* Node::subgraph(const std::string& name) const {
  const Attribute* a = FindAttribute(name);
  return a != nullptr && a->type == AttrType::kGraph ? a->g.get() : nullptr;
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

Graph::~Graph() {
  // Subgraphs of this graph's nodes may outlive it only through a stray shared_ptr: cut their
  // links so that nothing reaches the freed graph.
  for (const auto& n : nodes_)
    for (Graph* sub : n->subgraphs()) {
      sub->parent_ = nullptr;
      sub->owner_ = nullptr;
    }
}

std::unique_ptr<Graph> Graph::NewSubgraph(std::string name) {
  auto g = std::make_unique<Graph>();
  g->is_subgraph_ = true;
  g->name_ = std::move(name);
  return g;
}

std::string Graph::Describe() const {
  if (!is_subgraph_) return "the main graph";
  std::string s = StrCat("subgraph '", name_, "'");
  if (owner_ == nullptr) return s;
  // The attribute that holds it names it best (If's then_branch / else_branch).
  for (const auto& [attr, a] : owner_->attributes())
    if ((a.type == AttrType::kGraph && a.g.get() == this) ||
        (a.type == AttrType::kGraphs &&
         std::any_of(a.graphs.begin(), a.graphs.end(),
                     [this](const std::shared_ptr<Graph>& g) { return g.get() == this; })))
      s = StrCat("subgraph '", attr, "'");
  s += " of " + owner_->Describe();
  if (parent_ != nullptr && parent_->is_subgraph_) s += " in " + parent_->Describe();
  return s;
}

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

Value* Graph::LookUp(const std::string& name) {
  if (Value* v = FindValue(name)) return v;
  if (!is_subgraph_) return nullptr;
  Value* v = NewValue(name, ValueType());
  v->is_outer_scope_ = true;
  outer_scope_values_.push_back(v);
  return v;
}

StatusOr<Value*> Graph::AddInput(const std::string& name, ValueType type) {
  if (name.empty()) return InvalidModel("graph input with an empty name");
  if (Value* existing = FindValue(name)) {
    // ONNX IR < 4 lists initializers among the inputs too: an input that is also an
    // initializer is a constant with a default, which we treat as the constant.
    if (existing->initializer() != nullptr) return existing;
    return InvalidModel("value '", name, "' is defined twice (graph input)");
  }
  Value* v = NewValue(name, type);
  v->declared_type_ = std::move(type);
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
    Value* v = LookUp(inputs[i]);
    if (v == nullptr)
      return InvalidModel(node->Describe(), ": input ", i, " '", inputs[i],
                          "' is not produced by any node, graph input or initializer");
    node->inputs_.push_back(v);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].empty()) {  // omitted optional output: give it a private name
      node->outputs_.push_back(NewValue(UniqueName(node->name_ + "_unused"), ValueType()));
    } else {
      if (const Value* existing = FindValue(outputs[i])) {
        if (existing->is_outer_scope())
          return InvalidModel(node->Describe(), ": output '", outputs[i], "' of ", Describe(),
                              " is read before this node defines it (or it shadows a value of an enclosing graph)");
        return InvalidModel(node->Describe(), ": output '", outputs[i], "' is already defined elsewhere");
      }
      node->outputs_.push_back(NewValue(outputs[i], ValueType()));
    }
  }
  Node* raw = node.get();
  TOB_RETURN_IF_ERROR(AdoptSubgraphs(raw));
  for (size_t i = 0; i < raw->inputs_.size(); ++i)
    if (raw->inputs_[i]) raw->inputs_[i]->uses_.push_back(Use{raw, static_cast<int>(i)});
  for (size_t i = 0; i < raw->outputs_.size(); ++i) {
    raw->outputs_[i]->producer_ = raw;
    raw->outputs_[i]->producer_output_ = static_cast<int>(i);
  }
  AddImplicitUses(raw);
  nodes_.push_back(std::move(node));
  return raw;
}

Status Graph::AdoptSubgraphs(Node* node) {
  for (const auto& [attr, a] : node->attributes_) {
    if (!a.is_graph()) continue;
    if (a.type == AttrType::kGraph && a.g == nullptr)
      return InvalidModel(node->Describe(), ": GRAPH attribute '", attr, "' holds no graph");
    for (const auto& g : a.graphs)
      if (g == nullptr) return InvalidModel(node->Describe(), ": GRAPHS attribute '", attr, "' holds a null graph");
  }
  const std::vector<Graph*> subs = node->subgraphs();
  for (size_t i = 0; i < subs.size(); ++i) {
    Graph* sub = subs[i];
    if (!sub->is_subgraph_)
      return InvalidModel(node->Describe(), ": subgraph '", sub->name_,
                          "' was not made as a subgraph (Graph::NewSubgraph)");
    if (sub->owner_ != nullptr || std::find(subs.begin(), subs.begin() + i, sub) != subs.begin() + i)
      return InvalidModel(node->Describe(), ": subgraph '", sub->name_,
                          "' already belongs to another node (a subgraph has one owner)");
    if (sub->nesting_depth_ + 1 > kMaxNestingDepth)
      return InvalidModel(node->Describe(), ": subgraph '", sub->name_, "' nests subgraphs ", sub->nesting_depth_ + 1,
                          " levels deep; the engine allows at most ", kMaxNestingDepth);
  }
  auto release = [&subs] {  // a refused node leaves its subgraphs unowned
    for (Graph* sub : subs) {
      sub->parent_ = nullptr;
      sub->owner_ = nullptr;
    }
  };
  for (Graph* sub : subs) {
    sub->parent_ = this;
    sub->owner_ = node;
    for (Value* stand_in : sub->outer_scope_values_) {
      Value* outer = LookUp(stand_in->name());
      if (outer == nullptr) {
        Status st = InvalidModel(sub->Describe(), " reads '", stand_in->name(),
                                 "', which neither it nor any enclosing graph defines (a dangling name)");
        release();
        return st;
      }
      if (std::find(node->outputs_.begin(), node->outputs_.end(), outer) != node->outputs_.end()) {
        Status st = InvalidModel(sub->Describe(), " reads '", stand_in->name(),
                                 "', an output of the node that owns it (a cycle)");
        release();
        return st;
      }
      stand_in->outer_ = outer;
    }
  }
  for (Graph* sub : subs) nesting_depth_ = std::max(nesting_depth_, sub->nesting_depth_ + 1);
  node->implicit_inputs_.clear();
  for (Graph* sub : node->subgraphs())
    for (Value* stand_in : sub->outer_scope_values_)
      if (std::find(node->implicit_inputs_.begin(), node->implicit_inputs_.end(), stand_in->outer_) ==
          node->implicit_inputs_.end())
        node->implicit_inputs_.push_back(stand_in->outer_);
  return Status::OK();
}

void Graph::AddImplicitUses(Node* node) {
  for (Value* v : node->implicit_inputs_) v->uses_.push_back(Use{node, Use::kImplicit});
}

void Graph::DropImplicitUses(Node* node) {
  for (Value* v : node->implicit_inputs_) {
    auto& uses = v->uses_;
    uses.erase(
        std::remove_if(uses.begin(), uses.end(), [node](const Use& u) { return u.node == node && u.implicit(); }),
        uses.end());
  }
}

void Graph::RefreshImplicitInputs(Node* node) {
  DropImplicitUses(node);
  node->implicit_inputs_.clear();
  for (Graph* sub : node->subgraphs())
    for (Value* stand_in : sub->outer_scope_values_)
      if (stand_in->outer_ != nullptr && std::find(node->implicit_inputs_.begin(), node->implicit_inputs_.end(),
                                                   stand_in->outer_) == node->implicit_inputs_.end())
        node->implicit_inputs_.push_back(stand_in->outer_);
  AddImplicitUses(node);
}

void Graph::ReplaceImplicitInput(Node* node, Value* from, Value* to) {
  for (Graph* sub : node->subgraphs())
    for (Value* stand_in : sub->outer_scope_values_)
      if (stand_in->outer_ == from) stand_in->outer_ = to;
  RefreshImplicitInputs(node);
}

void Graph::DropOuterScopeValue(Value* v) {
  outer_scope_values_.erase(std::remove(outer_scope_values_.begin(), outer_scope_values_.end(), v),
                            outer_scope_values_.end());
  v->is_outer_scope_ = false;
  v->outer_ = nullptr;
}

Status Graph::AddOutput(const std::string& name, std::optional<ValueType> declared) {
  Value* v = LookUp(name);
  if (v == nullptr) return InvalidModel("graph output '", name, "' is not produced by anything");
  if (declared && v->type_.dtype == DType::kUndefined) v->type_ = *declared;
  if (declared && v->declared_type_.dtype == DType::kUndefined) v->declared_type_ = *declared;
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
  const auto& opsets = Root().opsets_;
  auto it = opsets.find(NormalizeDomain(domain));
  return it == opsets.end() ? -1 : it->second;
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
    for (Value* in : n->implicit_inputs_)
      if (in->producer_) ++count;
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
  for (const Use& u : uses) {
    if (u.implicit()) ReplaceImplicitInput(u.node, from, to);
    else SetNodeInput(u.node, u.input_index, to);
  }
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
  DropImplicitUses(node);
  node->implicit_inputs_.clear();
  for (Graph* sub : node->subgraphs()) {
    sub->parent_ = nullptr;
    sub->owner_ = nullptr;
  }
  for (Value* out : node->outputs_) {
    out->producer_ = nullptr;
    out->producer_output_ = -1;
  }
  nodes_.remove_if([node](const std::unique_ptr<Node>& n) { return n.get() == node; });
  RemoveUnusedValues();
  return Status::OK();
}

void Graph::RemoveUnusedValues() {
  bool dropped_outer = false;
  for (auto it = values_.begin(); it != values_.end();) {
    Value* v = it->second.get();
    bool dead =
        v->producer_ == nullptr && v->uses_.empty() && !v->is_graph_input_ && !v->is_graph_output() && !v->initializer_;
    bool dead_const = v->initializer_ && v->uses_.empty() && !v->is_graph_output();
    if (dead && v->is_outer_scope_) {
      DropOuterScopeValue(v);
      dropped_outer = true;
    }
    if (dead || dead_const) it = values_.erase(it);
    else ++it;
  }
  // The owner no longer reads what this subgraph stopped reading.
  if (dropped_outer && parent_ != nullptr && owner_ != nullptr) parent_->RefreshImplicitInputs(owner_);
}

Status Graph::MakeInitializer(Value* value, Tensor tensor) {
  if (value->producer_ != nullptr)
    return InvalidModel("value '", value->name(), "' still has a producer; cannot make it constant");
  value->type_ = ValueType::OfTensor(tensor);
  value->initializer_ = std::move(tensor);
  if (value->is_outer_scope_) {
    DropOuterScopeValue(value);
    if (parent_ != nullptr && owner_ != nullptr) parent_->RefreshImplicitInputs(owner_);
  }
  return Status::OK();
}

std::string Graph::UniqueName(const std::string& prefix) {
  std::string name;
  do name = StrCat(prefix, "__", next_name_id_++);
  while (values_.count(name) > 0);
  return name;
}

}  // namespace tob
