// One entry per operator: its arity, its one shape function and the traits passes must respect.
// The optimizer (static types, symbolic dims), the memory planner and the executor (concrete
// shapes, every run) all call the same function through InferenceContext.
#pragma once

#include <climits>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/domain.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"
#include "ir/value_type.h"

namespace tob {

// How a control-flow shape function sees its subgraphs. Static shape inference
// (optimizer/shape_inference.cc) installs one that infers a subgraph again for the types the op
// gives its formal inputs (a Loop's fixpoint over loop-carried shapes asks several times); without
// one (run time, constant folding) a subgraph keeps the types static inference gave it.
class SubgraphInference {
 public:
  virtual ~SubgraphInference() = default;
  // Gives `subgraph`'s inputs these types (its outer-scope values take their outer values'),
  // infers it from its declared types again and returns the types of its outputs.
  virtual Status Infer(Graph& subgraph, const std::vector<ValueType>& input_types,
                       std::vector<ValueType>* output_types) = 0;
};

class InferenceContext {
 public:
  InferenceContext(const Node& node, int opset, std::vector<const ValueType*> input_types,
                   std::vector<const Tensor*> input_values)
      : node_(node),
        opset_(opset),
        input_types_(std::move(input_types)),
        input_values_(std::move(input_values)),
        output_types_(node.outputs().size()) {}

  const Node& node() const { return node_; }
  int opset() const { return opset_; }  // opset of the node's domain in this model
  int num_inputs() const { return static_cast<int>(input_types_.size()); }
  int num_outputs() const { return static_cast<int>(output_types_.size()); }
  bool has_input(int i) const { return i < num_inputs() && input_types_[i] != nullptr; }
  // nullptr for an omitted optional input.
  const ValueType* input_type(int i) const { return has_input(i) ? input_types_[i] : nullptr; }
  // The input's value when known: a constant at compile time, every input at run time (on CPU).
  // Shape functions read small numeric tensors (shapes, axes, sizes); a string tensor's value is
  // never handed to them (nullptr, as for an unknown value), so none reads strings as numbers.
  const Tensor* input_value(int i) const {
    const Tensor* v = i < static_cast<int>(input_values_.size()) ? input_values_[i] : nullptr;
    return v != nullptr && v->dtype() == DType::kString ? nullptr : v;
  }
  void set_output(int i, ValueType t) { output_types_[i] = std::move(t); }
  const std::vector<ValueType>& output_types() const { return output_types_; }

  // ---- subgraphs (control flow) ----
  // The node's subgraph of GRAPH attribute `name`; nullptr when it has none.
  const Graph* subgraph(const std::string& name) const { return node_.subgraph(name); }
  // The output types of subgraph `name` given these formal input types: inferred again when
  // static inference installed a SubgraphInference, else as static inference left them.
  // kInvalidModel naming the node when the attribute is missing or the input count differs.
  Status InferSubgraph(const std::string& name, const std::vector<ValueType>& input_types,
                       std::vector<ValueType>* output_types) const;
  // Whether InferSubgraph infers again (static inference) or reads the settled types (run time).
  bool infers_subgraphs() const { return subgraph_inference_ != nullptr; }
  void set_subgraph_inference(SubgraphInference* s) { subgraph_inference_ = s; }

  // Error naming the node: "Conv node 'c1': <message>".
  template <typename... Args>
  Status Fail(Args&&... args) const {
    return InvalidModel(node_.Describe(), ": ", std::forward<Args>(args)...);
  }

 private:
  const Node& node_;
  int opset_;
  std::vector<const ValueType*> input_types_;
  std::vector<const Tensor*> input_values_;
  std::vector<ValueType> output_types_;
  SubgraphInference* subgraph_inference_ = nullptr;
};

using ShapeFunction = std::function<Status(InferenceContext&)>;
// Whether evaluating `node` (at `opset` of its domain) twice may give two different results.
using NondeterminismPredicate = std::function<bool(const Node& node, int opset)>;

// For ops whose every evaluation draws new random numbers.
inline bool AlwaysNondeterministic(const Node&, int) { return true; }

struct OpSchema {
  std::string domain;  // "" = ai.onnx
  std::string op_type;
  int min_inputs = 0;
  int max_inputs = INT_MAX;
  int min_outputs = 1;
  int max_outputs = 1;
  ShapeFunction infer;
  // ---- traits (optimizer/node_traits.h reads them) ----
  // Random generators, Dropout when training, ATen (any torch op): never folded, never merged.
  // Null: every evaluation gives the same result.
  NondeterminismPredicate nondeterministic;
  // Talks to the outside world (Python callbacks, the training yield point): never folded,
  // merged or removed, even when nothing reads its outputs.
  bool side_effects = false;
  // Takes or makes sequences or optionals (Identity, the Sequence* and Optional* ops): its shape
  // function sees their types. Every other op's inputs must be plain tensors, which Infer checks.
  bool non_tensor_values = false;
  // The op family of the file that registered it (ops/op_families.inc).
  std::string family;
};

class OpSchemaRegistry {
 public:
  static OpSchemaRegistry& Global();
  void Register(OpSchema schema);
  // The family stamped on the schemas registered from now on (op_families.cc calls it before
  // each file's registration function).
  void BeginFamily(std::string family) { family_ = std::move(family); }
  const OpSchema* Find(const std::string& domain, const std::string& op_type) const;
  std::vector<const OpSchema*> All() const;

  // Checks arity and runs the shape function for `node`; fills ctx outputs.
  Status Infer(InferenceContext& ctx) const;

 private:
  std::map<std::pair<std::string, std::string>, OpSchema> schemas_;
  std::string family_;
};

// Registers every built-in schema (called once; the list lives in ops/op_families.inc).
void RegisterAllOpSchemas(OpSchemaRegistry& registry);

// ---- helpers for shape functions ----
// Normalises a possibly negative axis into [0, rank); InvalidModel when out of range.
Status NormalizeAxis(const InferenceContext& ctx, int64_t axis, int64_t rank, int64_t* out);
// Numpy-style broadcast of two symbolic shapes.
StatusOr<Dims> BroadcastDims(const InferenceContext& ctx, const Dims& a, const Dims& b);
// Output i gets input j's type (same dtype and shape).
Status PropagateType(InferenceContext& ctx, int input_index = 0, int output_index = 0);

}  // namespace tob
