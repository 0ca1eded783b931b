#include "ir/graph_printer.h"

#include <cstdio>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace tob {

namespace {

// Post-order walk from the graph outputs, then from every node in insertion order, so that the
// order depends on structure rather than on the order nodes were added. Iterative: exported
// graphs can be tens of thousands of nodes deep.
std::vector<const Node*> CanonicalOrder(const Graph& graph) {
  std::vector<const Node*> order;
  std::unordered_set<const Node*> done;
  std::unordered_set<const Node*> on_stack;
  auto visit = [&](const Node* root) {
    if (root == nullptr || done.count(root)) return;
    std::vector<std::pair<const Node*, size_t>> stack{{root, 0}};
    on_stack.insert(root);
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < node->inputs().size()) {
        const Value* in = node->inputs()[next++];
        const Node* producer = in ? in->producer() : nullptr;
        // A producer already on the stack means a cycle: print what there is, the verifier
        // reports the cycle.
        if (producer && !done.count(producer) && !on_stack.count(producer)) {
          on_stack.insert(producer);
          stack.emplace_back(producer, 0);
        }
        continue;
      }
      done.insert(node);
      on_stack.erase(node);
      order.push_back(node);
      stack.pop_back();
    }
  };
  for (const Value* out : graph.outputs()) visit(out ? out->producer() : nullptr);
  for (const Node* node : graph.nodes()) visit(node);
  return order;
}

std::string FormatElement(const Tensor& t, int64_t i) {
  if (IsFloatingPoint(t.dtype())) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.9g", t.ElementAsDouble(i));
    return buf;
  }
  return std::to_string(t.ElementAsInt64(i));
}

std::string FormatConstant(const Tensor& t, int max_elements) {
  std::string s = StrCat(DTypeName(t.dtype()), ShapeToString(t.shape()));
  if (t.dtype() == DType::kString || t.numel() > max_elements) return StrCat(s, " = <", t.numel(), " elements>");
  s += " = [";
  for (int64_t i = 0; i < t.numel(); ++i) s += (i ? ", " : "") + FormatElement(t, i);
  return s + "]";
}

class Printer {
 public:
  Printer(const Graph& graph, const GraphTextOptions& options) : graph_(graph), options_(options) {}

  std::string Print() {
    // A computed graph output prints under its external name, so that a pass that re-points an
    // output at another value still prints the same text.
    for (size_t i = 0; options_.canonical_names && i < graph_.outputs().size(); ++i) {
      const Value* v = graph_.outputs()[i];
      if (v && v->producer() && !names_.count(v)) names_[v] = graph_.output_names()[i];
    }
    std::string s = "graph(";
    for (size_t i = 0; i < graph_.inputs().size(); ++i) {
      const Value* v = graph_.inputs()[i];
      s += StrCat(i ? ", " : "", v->name(), ": ", v->type().ToString());
    }
    s += ") {\n";
    for (const Value* c : graph_.initializers())
      s += StrCat("  const ", c->name(), ": ", FormatConstant(*c->initializer(), options_.max_constant_elements), "\n");
    for (const Node* node : CanonicalOrder(graph_)) s += NodeLine(*node);
    s += "  return ";
    for (size_t i = 0; i < graph_.outputs().size(); ++i) {
      const std::string& external = graph_.output_names()[i];
      std::string internal = Name(graph_.outputs()[i]);
      s += StrCat(i ? ", " : "", external, internal == external ? "" : " <- " + internal);
    }
    return s + "\n}\n";
  }

 private:
  std::string Name(const Value* v) {
    if (v == nullptr) return "_";
    auto it = names_.find(v);
    if (it != names_.end()) return it->second;
    // Graph inputs and constants are the graph's interface: they keep their names.
    if (!options_.canonical_names || v->producer() == nullptr) return v->name();
    return names_[v] = StrCat("%", next_id_++);
  }

  std::string NodeLine(const Node& node) {
    std::string s = "  ";
    for (size_t i = 0; i < node.outputs().size(); ++i) {
      const Value* out = node.outputs()[i];
      s += StrCat(i ? ", " : "", Name(out));
      if (options_.show_types) s += ": " + out->type().ToString();
    }
    s += node.outputs().empty() ? "" : " = ";
    s += node.domain().empty() ? node.op_type() : node.domain() + "::" + node.op_type();
    s += "(";
    for (size_t i = 0; i < node.inputs().size(); ++i) s += StrCat(i ? ", " : "", Name(node.inputs()[i]));
    s += ")";
    if (!node.attributes().empty()) {
      s += " {";
      bool first = true;
      for (const auto& [name, attr] : node.attributes()) {
        s += StrCat(first ? "" : ", ", name, "=", attr.ToString());
        first = false;
      }
      s += "}";
    }
    if (!node.provider().empty()) s += " @" + node.provider();
    if (node.recompute()) s += " [recompute]";
    if (!options_.canonical_names) s += StrCat("  # '", node.name(), "'");
    return s + "\n";
  }

  const Graph& graph_;
  const GraphTextOptions& options_;
  std::unordered_map<const Value*, std::string> names_;
  int next_id_ = 0;
};

}  // namespace

std::string GraphToText(const Graph& graph, const GraphTextOptions& options) { return Printer(graph, options).Print(); }

std::string GraphToText(const Graph& graph) { return GraphToText(graph, GraphTextOptions()); }

}  // namespace tob
