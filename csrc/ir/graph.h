// The engine IR: a Graph owns Values and Nodes. Values are SSA edges with one producer (a node,
// a graph input or an initializer) and any number of consumers. The builder methods keep the
// def-use links consistent; passes edit the graph only through them.
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
  Node* node;
  int input_index;
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

 private:
  friend class Graph;
  std::string name_;
  ValueType type_;
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
  const AttributeMap& attributes() const { return attributes_; }
  const Attribute* FindAttribute(const std::string& name) const;
  void SetAttribute(const std::string& name, Attribute value) { attributes_[name] = std::move(value); }

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
  AttributeMap attributes_;
  std::string provider_;
  bool recompute_ = false;
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // ---- builder API ----
  // Declares a graph input. kInvalidModel when the name is taken.
  StatusOr<Value*> AddInput(const std::string& name, ValueType type);
  // Declares a constant. The tensor is shared, not copied.
  StatusOr<Value*> AddInitializer(const std::string& name, Tensor value);
  // Adds a node. Input names must already be defined ("" = omitted optional input); output
  // names must be new. kInvalidModel otherwise (dangling edge, duplicate definition).
  StatusOr<Node*> AddNode(const std::string& op_type, const std::string& domain, const std::vector<std::string>& inputs,
                          const std::vector<std::string>& outputs, AttributeMap attributes = {},
                          const std::string& name = "");
  // Marks a defined value as a graph output (order matters).
  Status AddOutput(const std::string& name, std::optional<ValueType> declared = std::nullopt);
  void SetOpset(const std::string& domain, int version) { opsets_[NormalizeDomain(domain)] = version; }

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
  // Opset of a domain; -1 when the model does not import it.
  int Opset(const std::string& domain) const;
  const std::map<std::string, int>& opsets() const { return opsets_; }
  // A topological order that keeps the model's own node order wherever the edges allow (of the
  // nodes ready at once, the lowest order_key runs first). The exporter writes nodes in the order
  // AOTAutograd scheduled them, which frees activations early and runs the backward's recomputed
  // nodes just before their first use (docs/memory_optimizer.md); random ops keep eager's order.
  // kInvalidModel naming a node on the cycle when there is one.
  StatusOr<std::vector<Node*>> TopologicalOrder() const;

  // ---- editing (passes) ----
  // Every use of `from` (node inputs and graph outputs) becomes a use of `to`. Graph outputs
  // keep their external names.
  Status ReplaceAllUses(Value* from, Value* to);
  // A node a pass added in place of `like` runs where `like` would have (same order_key), and is
  // a recompute copy when `like` is one (a fusion inside a copy keeps it a copy).
  void PlaceLike(Node* node, const Node* like) {
    node->order_key_ = like->order_key_;
    node->recompute_ = like->recompute_;
  }
  // Removes a node whose outputs have no uses and are not graph outputs.
  Status RemoveNode(Node* node);
  // Replaces node input i (keeps use lists consistent).
  void SetNodeInput(Node* node, int index, Value* value);
  // Removes values with no producer, no uses, that are not inputs/outputs/initializers.
  void RemoveUnusedValues();
  // Turns a value into an initializer (constant folding): its producer must be gone.
  Status MakeInitializer(Value* value, Tensor tensor);
  // A fresh unique value/node name with the given prefix.
  std::string UniqueName(const std::string& prefix);

  static std::string NormalizeDomain(const std::string& domain) { return domain == "ai.onnx" ? std::string() : domain; }

 private:
  Value* NewValue(const std::string& name, ValueType type);

  std::unordered_map<std::string, std::unique_ptr<Value>> values_;
  std::list<std::unique_ptr<Node>> nodes_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::vector<std::string> output_names_;
  std::map<std::string, int> opsets_;
  int64_t next_node_id_ = 0;
  int64_t next_name_id_ = 0;
};

}  // namespace tob
