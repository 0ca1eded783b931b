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
      const size_t explicit_inputs = node->inputs().size();
      if (next < explicit_inputs + node->implicit_inputs().size()) {
        const Value* in =
            next < explicit_inputs ? node->inputs()[next] : node->implicit_inputs()[next - explicit_inputs];
        ++next;
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
  Printer(const Graph& graph, const GraphTextOptions& options, Printer* parent = nullptr, std::string indent = "")
      : graph_(graph), options_(options), parent_(parent), indent_(std::move(indent)) {}

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
      s += StrCat(indent_, "  const ", c->name(), ": ",
                  FormatConstant(*c->initializer(), options_.max_constant_elements), "\n");
    for (const Node* node : CanonicalOrder(graph_)) s += NodeLine(*node);
    s += indent_ + "  return ";
    for (size_t i = 0; i < graph_.outputs().size(); ++i) {
      const std::string& external = graph_.output_names()[i];
      std::string internal = Name(graph_.outputs()[i]);
      s += StrCat(i ? ", " : "", external, internal == external ? "" : " <- " + internal);
    }
    return s + "\n" + indent_ + "}\n";
  }

 private:
  std::string Name(const Value* v) {
    if (v == nullptr) return "_";
    // A value of an enclosing graph: ^ and its name there.
    if (v->is_outer_scope()) return "^" + (parent_ != nullptr && v->outer() ? parent_->Name(v->outer()) : v->name());
    auto it = names_.find(v);
    if (it != names_.end()) return it->second;
    // Graph inputs and constants are the graph's interface: they keep their names.
    if (!options_.canonical_names || v->producer() == nullptr) return v->name();
    return names_[v] = StrCat("%", next_id_++);
  }

  std::string NodeLine(const Node& node) {
    std::string s = indent_ + "  ";
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
        s += StrCat(first ? "" : ", ", name, "=", attr.is_graph() ? "<subgraph>" : attr.ToString());
        first = false;
      }
      s += "}";
    }
    if (!node.provider().empty()) s += " @" + node.provider();
    if (node.recompute()) s += " [recompute]";
    if (!options_.canonical_names) s += StrCat("  # '", node.name(), "'");
    s += "\n";
    // Subgraphs follow their node, indented, by attribute name.
    for (const auto& [name, attr] : node.attributes()) {
      std::vector<const Graph*> graphs;
      if (attr.type == AttrType::kGraph && attr.g) graphs.push_back(attr.g.get());
      for (const auto& g : attr.graphs) graphs.push_back(g.get());
      for (size_t i = 0; i < graphs.size(); ++i) {
        s += StrCat(indent_, "    ", name, attr.type == AttrType::kGraphs ? StrCat("[", i, "]") : "", ": ");
        s += Printer(*graphs[i], options_, this, indent_ + "    ").Print();
      }
    }
    return s;
  }

  const Graph& graph_;
  const GraphTextOptions& options_;
  Printer* parent_;
  std::string indent_;
  std::unordered_map<const Value*, std::string> names_;
  int next_id_ = 0;
};

}  // namespace

std::string GraphToText(const Graph& graph, const GraphTextOptions& options) { return Printer(graph, options).Print(); }

std::string GraphToText(const Graph& graph) { return GraphToText(graph, GraphTextOptions()); }

}  // namespace tob
