// The engine IR: a Graph owns Values and Nodes. Values are SSA edges with one producer (a node,
// a graph input or an initializer) and any number of consumers. The builder methods keep the
// def-use links consistent; passes edit the graph only through them.
//
// Subgraphs (control flow): a node's GRAPH / GRAPHS attribute owns a Graph of its own (If's
// branches, Loop's and Scan's body). A subgraph may read any value of an enclosing graph by name;
// such a name becomes an *outer-scope value* of the subgraph: a local stand-in with no producer
// whose outer() is the value it stands for in the parent graph (itself possibly a stand-in of the
// grandparent's). The node owning the subgraph takes those parent values as *implicit inputs*:
// they are in the values' use lists (Use::kImplicit), so topological order, dead-code elimination,
// liveness and the memory planner all see that the node reads them. The link is a pointer, not a
// name: a pass that replaces an outer value (Graph::ReplaceAllUses) re-points the stand-ins.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "ir/attribute.h"
#include "ir/value_type.h"

namespace tob {

class Node;

struct Use {
  // input_index of a node's use of an implicit input (a value one of its subgraphs reads).
  static constexpr int kImplicit = -1;
  Node* node;
  int input_index;
  bool implicit() const { return input_index == kImplicit; }
};

class Value {
 public:
  Value(std::string name, ValueType type) : name_(std::move(name)), type_(std::move(type)) {}
  const std::string& name() const { return name_; }
  const ValueType& type() const { return type_; }
  ValueType& mutable_type() { return type_; }
  void set_type(ValueType t) { type_ = std::move(t); }

  Node* producer() const { return producer_; }
  int producer_output() const { return producer_output_; }
  const std::vector<Use>& uses() const { return uses_; }
  bool is_graph_input() const { return is_graph_input_; }
  bool is_graph_output() const { return graph_output_count_ > 0; }
  // Non-null when this value is a constant (initializer).
  const Tensor* initializer() const { return initializer_ ? &*initializer_ : nullptr; }
  // A subgraph's stand-in for a value of an enclosing graph (see the top of this file); outer() is
  // the value in the parent graph (nullptr until the subgraph's node is added to its parent).
  bool is_outer_scope() const { return is_outer_scope_; }
  Value* outer() const { return outer_; }
  // The type the model declared for this value (value_info, graph inputs and outputs); undefined
  // when it declared none. Shape inference of a subgraph starts again from it each time.
  const ValueType& declared_type() const { return declared_type_; }
  void Declare(ValueType t) {
    declared_type_ = t;
    type_ = std::move(t);
  }

 private:
  friend class Graph;
  std::string name_;
  ValueType type_;
  ValueType declared_type_;
  bool is_outer_scope_ = false;
  Value* outer_ = nullptr;
  Node* producer_ = nullptr;
  int producer_output_ = -1;
  std::vector<Use> uses_;
  bool is_graph_input_ = false;
  int graph_output_count_ = 0;
  std::optional<Tensor> initializer_;
};

using AttributeMap = std::map<std::string, Attribute>;

class Node {
 public:
  const std::string& name() const { return name_; }
  const std::string& op_type() const { return op_type_; }
  const std::string& domain() const { return domain_; }  // "" is ai.onnx
  int64_t id() const { return id_; }
  // Where the node runs among the nodes that are ready at once (TopologicalOrder): its position
  // in the model as built, or the position of the node a pass made it replace (Graph::PlaceLike).
  int64_t order_key() const { return order_key_; }
  // inputs()[i] is nullptr for an omitted optional input.
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  Value* input(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  Value* output(size_t i) const { return i < outputs_.size() ? outputs_[i] : nullptr; }
  // Values of the enclosing graph that the node's subgraphs read, each once, in the order the
  // subgraphs (subgraphs()) first read them. Graph keeps them in step with the subgraphs.
  const std::vector<Value*>& implicit_inputs() const { return implicit_inputs_; }
  const AttributeMap& attributes() const { return attributes_; }
  const Attribute* FindAttribute(const std::string& name) const;
  // Not for GRAPH / GRAPHS attributes: those come with the node (Graph::AddNode adopts them).
  void SetAttribute(const std::string& name, Attribute value);
  // The subgraphs of the node's GRAPH and GRAPHS attributes, by attribute name (a GRAPHS
  // attribute's graphs in list order): the order implicit_inputs() follows.
  std::vector<Graph*> subgraphs() const;
  bool has_subgraphs() const;
  // The subgraph of GRAPH attribute `name`; nullptr when the node has no such attribute.
  Graph* subgraph(const std::string& name) const;

  // Typed attribute getters. Missing and no default: kInvalidModel. Wrong type: kInvalidModel
  // naming the node, the attribute, the expected and the actual type.
  Status GetAttr(const std::string& name, int64_t* out, std::optional<int64_t> dflt = std::nullopt) const;
  Status GetAttr(const std::string& name, float* out, std::optional<float> dflt = std::nullopt) const;
  Status GetAttr(const std::string& name, std::string* out, std::optional<std::string> dflt = std::nullopt) const;
  Status GetAttr(const std::string& name, std::vector<int64_t>* out,
                 std::optional<std::vector<int64_t>> dflt = std::nullopt) const;
  Status GetAttr(const std::string& name, std::vector<float>* out,
                 std::optional<std::vector<float>> dflt = std::nullopt) const;
  Status GetAttr(const std::string& name, std::vector<std::string>* out,
                 std::optional<std::vector<std::string>> dflt = std::nullopt) const;
  Status GetAttr(const std::string& name, Tensor* out) const;

  // Execution provider this node is assigned to ("" before partitioning).
  const std::string& provider() const { return provider_; }
  void set_provider(std::string p) { provider_ = std::move(p); }

  // A recompute copy: it repeats a forward node's work for the backward on purpose, so that the
  // forward's value can be freed early (docs/memory_optimizer.md). Common-subexpression
  // elimination never merges it back into the original.
  bool recompute() const { return recompute_; }
  void set_recompute(bool recompute) { recompute_ = recompute; }

  // "Conv 'conv1'" — used in every error message about this node.
  std::string Describe() const;

 private:
  friend class Graph;
  std::string name_, op_type_, domain_;
  int64_t id_ = 0;
  int64_t order_key_ = 0;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::vector<Value*> implicit_inputs_;
  AttributeMap attributes_;
  std::string provider_;
  bool recompute_ = false;
};

class Graph {
 public:
  // Subgraphs nested deeper than this below a graph are refused (kInvalidModel naming the node):
  // every pass, the verifier and the executor recurse into subgraphs, and a crafted model must not
  // be able to exhaust the stack. Real models nest two or three levels; protobuf parses about 32
  // (its 100-message depth limit), so this limit, not protobuf's, is the one a model meets.
  static constexpr int kMaxNestingDepth = 24;

  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph();

  // A graph to become the body of a GRAPH attribute. Names its nodes read that it does not define
  // become outer-scope values, resolved when the node carrying it is added (AddNode).
  static std::unique_ptr<Graph> NewSubgraph(std::string name);
  bool is_subgraph() const { return is_subgraph_; }
  const std::string& name() const { return name_; }
  // The graph and the node this subgraph belongs to (nullptr before AddNode adopts it).
  Graph* parent() const { return parent_; }
  Node* owner() const { return owner_; }
  // The outer-scope values of this subgraph, in the order it first read them.
  const std::vector<Value*>& outer_scope_values() const { return outer_scope_values_; }
  // How deep subgraphs nest below this graph (0: none).
  int nesting_depth() const { return nesting_depth_; }
  // "subgraph 'body' of Loop node 'l'" (nested: "... of subgraph 'then_branch' of If node 'i'"),
  // or "the main graph": used in errors about this graph.
  std::string Describe() const;

  // ---- builder API ----
  // Declares a graph input. kInvalidModel when the name is taken.
  StatusOr<Value*> AddInput(const std::string& name, ValueType type);
  // Declares a constant. The tensor is shared, not copied.
  StatusOr<Value*> AddInitializer(const std::string& name, Tensor value);
  // Adds a node. Input names must already be defined ("" = omitted optional input; in a subgraph,
  // a name it does not define is an outer-scope value); output names must be new. kInvalidModel
  // otherwise (dangling edge, duplicate definition). GRAPH / GRAPHS attributes are adopted: each
  // subgraph's outer-scope values are resolved in this graph (a dangling name is kInvalidModel
  // naming the subgraph, the node and the name) and become the node's implicit inputs.
  StatusOr<Node*> AddNode(const std::string& op_type, const std::string& domain, const std::vector<std::string>& inputs,
                          const std::vector<std::string>& outputs, AttributeMap attributes = {},
                          const std::string& name = "");
  // Marks a defined value as a graph output (order matters); `declared` is the model's type for it.
  Status AddOutput(const std::string& name, std::optional<ValueType> declared = std::nullopt);
  void SetOpset(const std::string& domain, int version) { opsets_[NormalizeDomain(domain)] = version; }
  // The outermost graph (this one unless it is an adopted subgraph).
  const Graph& Root() const { return parent_ ? parent_->Root() : *this; }

  // ---- queries ----
  Value* FindValue(const std::string& name) const;
  const std::vector<Value*>& inputs() const { return inputs_; }
  // Graph outputs keep their external names even when a pass re-points them at another value.
  const std::vector<Value*>& outputs() const { return outputs_; }
  const std::vector<std::string>& output_names() const { return output_names_; }
  // Nodes in insertion order (use TopologicalOrder for execution order).
  std::vector<Node*> nodes() const;
  size_t num_nodes() const { return nodes_.size(); }
  std::vector<Value*> initializers() const;
  // Opset of a domain; -1 when the model does not import it. Subgraphs use the model's (Root's).
  int Opset(const std::string& domain) const;
  const std::map<std::string, int>& opsets() const { return Root().opsets_; }
  // A topological order that keeps the model's own node order wherever the edges allow (of the
  // nodes ready at once, the lowest order_key runs first). The exporter writes nodes in the order
  // AOTAutograd scheduled them, which frees activations early and runs the backward's recomputed
  // nodes just before their first use (docs/memory_optimizer.md); random ops keep eager's order.
  // kInvalidModel naming a node on the cycle when there is one.
  StatusOr<std::vector<Node*>> TopologicalOrder() const;

  // ---- editing (passes) ----
  // Every use of `from` (node inputs, implicit inputs and graph outputs) becomes a use of `to`.
  // Graph outputs keep their external names; subgraphs reading `from` read `to` instead.
  Status ReplaceAllUses(Value* from, Value* to);
  // The subgraphs of `node` read `to` wherever they read its implicit input `from`.
  void ReplaceImplicitInput(Node* node, Value* from, Value* to);
  // Recomputes node->implicit_inputs() from its subgraphs' outer-scope values (after a pass
  // changed a subgraph: a stand-in became a constant, or lost its last reader).
  void RefreshImplicitInputs(Node* node);
  // A node a pass added in place of `like` runs where `like` would have (same order_key), and is
  // a recompute copy when `like` is one (a fusion inside a copy keeps it a copy).
  void PlaceLike(Node* node, const Node* like) {
    node->order_key_ = like->order_key_;
    node->recompute_ = like->recompute_;
  }
  // Removes a node whose outputs have no uses and are not graph outputs (with its subgraphs).
  Status RemoveNode(Node* node);
  // Replaces node input i (keeps use lists consistent).
  void SetNodeInput(Node* node, int index, Value* value);
  // Removes values with no producer, no uses, that are not inputs/outputs/initializers (an
  // outer-scope value nobody reads any more too: the owner's implicit inputs follow).
  void RemoveUnusedValues();
  // Turns a value into an initializer (constant folding): its producer must be gone. An
  // outer-scope value becomes a constant of the subgraph (the outer constant's tensor, shared).
  Status MakeInitializer(Value* value, Tensor tensor);
  // A fresh unique value/node name with the given prefix.
  std::string UniqueName(const std::string& prefix);

  static std::string NormalizeDomain(const std::string& domain) { return domain == "ai.onnx" ? std::string() : domain; }

 private:
  Value* NewValue(const std::string& name, ValueType type);
  // The value `name` as this graph sees it: its own, else (a subgraph) a new outer-scope value.
  Value* LookUp(const std::string& name);
  // Adopts the subgraphs of a node being added: owner, parent, depth, outer-scope resolution.
  Status AdoptSubgraphs(Node* node);
  void AddImplicitUses(Node* node);
  void DropImplicitUses(Node* node);
  void DropOuterScopeValue(Value* v);

  std::unordered_map<std::string, std::unique_ptr<Value>> values_;
  std::list<std::unique_ptr<Node>> nodes_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::vector<std::string> output_names_;
  std::map<std::string, int> opsets_;
  int64_t next_node_id_ = 0;
  int64_t next_name_id_ = 0;
  // Subgraphs only.
  bool is_subgraph_ = false;
  std::string name_;
  Graph* parent_ = nullptr;
  Node* owner_ = nullptr;
  std::vector<Value*> outer_scope_values_;
  int nesting_depth_ = 0;
};

}  // namespace tob
