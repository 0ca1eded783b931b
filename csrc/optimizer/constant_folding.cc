// Constant folding: a node whose inputs are all constants is evaluated once, now, with the fold
// provider's kernel (schema shape function -> allocate -> Compute, exactly as the executor runs
// it) and its outputs become constants. Shape and Size of a value whose static shape is fully
// known fold too, whatever that value is. Nodes are visited in topological order, so a folded
// node's consumers are folded in the same run. In a subgraph, a value it reads from an enclosing
// graph that is a constant there becomes a constant of the subgraph first (the same tensor, not a
// copy), so what depends only on it folds inside the subgraph too. Nodes with subgraphs are never
// evaluated here.
#include <algorithm>
#include <optional>

#include "framework/execution_provider.h"
#include "framework/kernel_registry.h"
#include "optimizer/node_traits.h"
#include "optimizer/passes.h"

namespace tob {

namespace {

// Folding Expand, Tile or ConstantOfShape can turn a few bytes into a constant far larger than
// the work it saves; such nodes stay in the graph and run each time...
constexpr size_t kMaxFoldGrowthBytes = size_t{1} << 20;

// ...unless every reader takes the result as a parameter (weights, bias, normalisation
// statistics). A parameter is read whole on every run, so leaving its producer in the graph
// re-creates the same bytes each run and hides the constant from folds such as Conv+BN.
bool FeedsOnlyParameterSlots(const Node& node) {
  static const char* const kParameterOps[] = {
      "Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization", "InstanceNormalization", "LayerNormalization"};
  for (const Value* out : node.outputs()) {
    if (out->is_graph_output()) return false;
    for (const Use& use : out->uses()) {
      const Node& reader = *use.node;
      bool parameter_op = false;
      for (const char* op : kParameterOps) parameter_op = parameter_op || reader.op_type() == op;
      if (!reader.domain().empty() || !parameter_op || use.input_index < 1) return false;
    }
  }
  return true;
}

int64_t ClampAxis(int64_t axis, int64_t rank) {
  if (axis < 0) axis += rank;
  return std::clamp<int64_t>(axis, 0, rank);
}

// Shape (with opset-15 start/end) or Size of a value whose static shape is fully known.
std::optional<Tensor> FoldStaticShape(const Graph& graph, const Node& node) {
  if (!node.domain().empty() || (node.op_type() != "Shape" && node.op_type() != "Size")) return std::nullopt;
  const Value* in = node.input(0);
  if (in == nullptr || node.outputs().size() != 1 || !in->type().shape) return std::nullopt;
  std::optional<Shape> shape = ConcreteShape(*in->type().shape);
  if (!shape) return std::nullopt;
  if (node.op_type() == "Size") return Tensor::FromVector<int64_t>({NumElements(*shape)}, {});
  int64_t rank = static_cast<int64_t>(shape->size());
  int64_t start = 0, end = rank;
  if (NodeOpset(graph, node) >= 15) {
    if (!node.GetAttr("start", &start, int64_t{0}).ok() || !node.GetAttr("end", &end, rank).ok())
      return std::nullopt;  // bad attribute type: leave it to the kernel to report
    start = ClampAxis(start, rank);
    end = std::max(start, ClampAxis(end, rank));
  }
  std::vector<int64_t> dims(shape->begin() + start, shape->begin() + end);
  return Tensor::FromVector<int64_t>(dims, {static_cast<int64_t>(dims.size())});
}

bool AllInputsConstant(const Node& node) {
  return std::all_of(node.inputs().begin(), node.inputs().end(),
                     [](const Value* v) { return v == nullptr || v->initializer() != nullptr; });
}

// Runs the node through its schema and kernel; nullopt when it cannot or should not be folded
// here (no kernel, shape not concrete, kernel error): the executor will run it and report.
std::optional<std::vector<Tensor>> Evaluate(const Graph& graph, const PassContext& ctx, const Node& node) {
  if (node.outputs().empty() || !AllInputsConstant(node) || HasSideEffects(node, *ctx.schemas) || HasSubgraph(node) ||
      TakesOrMakesNonTensors(node) || IsNonDeterministic(graph, node, *ctx.schemas))
    return std::nullopt;
  const int opset = NodeOpset(graph, node);
  std::vector<const ValueType*> types;
  std::vector<const Tensor*> values;
  std::vector<DType> dtypes;
  size_t in_bytes = 0;
  for (const Value* v : node.inputs()) {
    types.push_back(v ? &v->type() : nullptr);
    values.push_back(v ? v->initializer() : nullptr);
    dtypes.push_back(v ? v->type().dtype : DType::kUndefined);
    if (v) in_bytes += v->initializer()->nbytes();
  }
  InferenceContext ictx(node, opset, types, values);
  if (ctx.schemas->Find(node.domain(), node.op_type()) == nullptr || !ctx.schemas->Infer(ictx).ok())
    return std::nullopt;
  std::vector<Shape> shapes;
  size_t out_bytes = 0;
  for (const ValueType& t : ictx.output_types()) {
    std::optional<Shape> shape = t.shape ? ConcreteShape(*t.shape) : std::nullopt;
    if (!shape || t.dtype == DType::kUndefined || t.dtype == DType::kString) return std::nullopt;
    out_bytes += DTypeStorageBytes(t.dtype, NumElements(*shape));
    shapes.push_back(std::move(*shape));
  }
  if (out_bytes > in_bytes + kMaxFoldGrowthBytes && !FeedsOnlyParameterSlots(node)) return std::nullopt;
  const KernelDef* def = ctx.kernels->Find(ctx.fold_provider, node.domain(), node.op_type(), opset, dtypes);
  if (def == nullptr || def->value_kernel) return std::nullopt;  // value kernels run in the executor only
  auto kernel = def->factory(node);
  if (!kernel.ok()) return std::nullopt;
  std::vector<Tensor> outputs;
  std::vector<Tensor*> output_ptrs;
  outputs.reserve(shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto t = Tensor::Allocate(ictx.output_types()[i].dtype, shapes[i], CpuAllocator::Default());
    if (!t.ok()) return std::nullopt;
    outputs.push_back(std::move(t).value());
  }
  for (Tensor& t : outputs) output_ptrs.push_back(&t);
  KernelContext kctx(node, values, output_ptrs, /*pool=*/nullptr, CpuAllocator::Default());
  if (!kernel.value()->Compute(kctx).ok()) return std::nullopt;
  return outputs;
}

// Replaces the node by constants that keep its outputs' names (so debug dumps, keep_values and
// graph outputs still find them). The graph cannot rename a value, hence the detour through
// temporary constants while the node, and with it the original values, goes away.
Status ReplaceWithConstants(Graph& graph, Node* node, std::vector<Tensor> tensors) {
  std::vector<std::pair<std::string, Value*>> temporaries;
  for (size_t i = 0; i < tensors.size(); ++i) {
    Value* out = node->output(i);
    if (out->uses().empty() && !out->is_graph_output()) continue;
    TOB_ASSIGN_OR_RETURN(Value * tmp, graph.AddInitializer(graph.UniqueName(out->name()), tensors[i]));
    TOB_RETURN_IF_ERROR(graph.ReplaceAllUses(out, tmp));
    temporaries.emplace_back(out->name(), tmp);
  }
  TOB_RETURN_IF_ERROR(graph.RemoveNode(node));
  for (auto& [name, tmp] : temporaries) {
    TOB_ASSIGN_OR_RETURN(Value * constant, graph.AddInitializer(name, *tmp->initializer()));
    TOB_RETURN_IF_ERROR(graph.ReplaceAllUses(tmp, constant));
  }
  graph.RemoveUnusedValues();
  return Status::OK();
}

class ConstantFolding final : public GraphPass {
 public:
  const char* name() const override { return "ConstantFolding"; }

  Status Run(Graph& graph, PassContext& ctx, bool* changed) override {
    *changed = false;
    summary_.clear();
    KeptValues kept(ctx);
    int inlined = 0;
    for (Value* v : std::vector<Value*>(graph.outer_scope_values()))
      if (v->outer() != nullptr && v->outer()->initializer() != nullptr) {
        TOB_RETURN_IF_ERROR(graph.MakeInitializer(v, *v->outer()->initializer()));
        ++inlined;
      }
    TOB_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
    int folded = 0;
    for (Node* node : order) {
      // A kept value that nobody reads could not survive as a constant (unread constants are
      // dropped), so its producer stays.
      if (std::any_of(node->outputs().begin(), node->outputs().end(), [&](const Value* v) {
            return v->uses().empty() && !v->is_graph_output() && kept.ContainsName(v->name());
          }))
        continue;
      std::optional<std::vector<Tensor>> outputs;
      if (std::optional<Tensor> shape = FoldStaticShape(graph, *node)) outputs.emplace().push_back(*shape);
      else outputs = Evaluate(graph, ctx, *node);
      if (!outputs) continue;
      TOB_RETURN_IF_ERROR(ReplaceWithConstants(graph, node, std::move(*outputs)));
      ++folded;
    }
    if (folded == 0 && inlined == 0) return Status::OK();
    *changed = true;
    summary_ = StrCat("folded ", folded, " node", folded == 1 ? "" : "s", " into constants");
    if (inlined > 0) summary_ += StrCat("; ", inlined, " constant", inlined == 1 ? "" : "s", " of an enclosing graph");
    return Status::OK();
  }

  std::string summary() const override { return summary_; }

 private:
  std::string summary_;
};

}  // namespace

std::unique_ptr<GraphPass> CreateConstantFoldingPass() { return std::make_unique<ConstantFolding>(); }

}  // namespace tob
