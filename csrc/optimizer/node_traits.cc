#include "optimizer/node_traits.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace tob {

namespace {

constexpr std::string_view kMsDomain = "com.microsoft";

// Dropout-like ops: random masks when training, identity (or absent) in inference.
bool IsDropout(const Node& node) {
  const std::string& op = node.op_type();
  return op.find("Dropout") != std::string::npos && op.find("Grad") == std::string::npos;
}

// Dropout (ai.onnx) trains when its training_mode input (opset 12+) is present and not a
// constant false; opsets 7-11 have no training mode (the identity), 1-6 an is_test attribute.
bool DropoutIsTraining(const Graph& graph, const Node& node) {
  if (!node.domain().empty()) return true;  // contrib dropouts exist only for training graphs
  const int opset = NodeOpset(graph, node);
  if (opset < 7) {
    int64_t is_test = 0;
    return !node.GetAttr("is_test", &is_test, int64_t{0}).ok() || is_test == 0;
  }
  if (opset < 12) return false;
  const Value* mode = node.input(2);
  if (mode == nullptr) return false;
  const Tensor* t = mode->initializer();
  return t == nullptr || t->numel() != 1 || t->ElementAsInt64(0) != 0;
}

}  // namespace

int NodeOpset(const Graph& graph, const Node& node) {
  int v = graph.Opset(node.domain());
  return v < 0 && !node.domain().empty() ? 1 : v;
}

bool IsNonDeterministic(const Graph& graph, const Node& node) {
  static constexpr std::array<std::string_view, 6> kRandomOps = {
      "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"};
  const std::string& op = node.op_type();
  if (node.domain().empty() && std::find(kRandomOps.begin(), kRandomOps.end(), op) != kRandomOps.end())
    return true;
  if (IsDropout(node)) return DropoutIsTraining(graph, node);
  // ATen nodes run arbitrary torch ops (aten::bernoulli, aten::rand...): assume the worst.
  return node.domain() == kMsDomain && op == "ATen";
}

bool HasSideEffects(const Node& node) {
  static constexpr std::array<std::string_view, 3> kEffectOps = {"PythonOp", "PythonOpGrad", "YieldOp"};
  return node.domain() == kMsDomain &&
         std::find(kEffectOps.begin(), kEffectOps.end(), node.op_type()) != kEffectOps.end();
}

bool HasSubgraph(const Node& node) {
  for (const auto& [name, attr] : node.attributes())
    if (attr.type == AttrType::kGraph) return true;
  return false;
}

}  // namespace tob
