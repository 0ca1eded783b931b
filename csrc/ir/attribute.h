// Node attributes. AttrType codes are ONNX AttributeProto.AttributeType codes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/value_type.h"

namespace tob {

class Graph;

enum class AttrType : int32_t {
  kUndefined = 0,
  kFloat = 1,
  kInt = 2,
  kString = 3,
  kTensor = 4,
  kGraph = 5,
  kFloats = 6,
  kInts = 7,
  kStrings = 8,
  kTensors = 9,
  kGraphs = 10,
  kTypeProto = 13,  // a type (Optional's `type`): a ValueType
};

const char* AttrTypeName(AttrType t);

struct Attribute {
  AttrType type = AttrType::kUndefined;
  float f = 0.f;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  // GRAPH / GRAPHS: subgraphs owned by the node that carries the attribute (Graph::AddNode adopts
  // them: a subgraph belongs to one node). Shared pointers only so that Attribute stays copyable;
  // a node never shares a subgraph with another.
  std::shared_ptr<Graph> g;
  std::vector<std::shared_ptr<Graph>> graphs;
  ValueType type_proto;

  static Attribute Float(float v) {
    Attribute a;
    a.type = AttrType::kFloat;
    a.f = v;
    return a;
  }
  static Attribute Int(int64_t v) {
    Attribute a;
    a.type = AttrType::kInt;
    a.i = v;
    return a;
  }
  static Attribute String(std::string v) {
    Attribute a;
    a.type = AttrType::kString;
    a.s = std::move(v);
    return a;
  }
  static Attribute TensorValue(Tensor v) {
    Attribute a;
    a.type = AttrType::kTensor;
    a.t = std::move(v);
    return a;
  }
  static Attribute Floats(std::vector<float> v) {
    Attribute a;
    a.type = AttrType::kFloats;
    a.floats = std::move(v);
    return a;
  }
  static Attribute Ints(std::vector<int64_t> v) {
    Attribute a;
    a.type = AttrType::kInts;
    a.ints = std::move(v);
    return a;
  }
  static Attribute Strings(std::vector<std::string> v) {
    Attribute a;
    a.type = AttrType::kStrings;
    a.strings = std::move(v);
    return a;
  }
  static Attribute TypeProto(ValueType v) {
    Attribute a;
    a.type = AttrType::kTypeProto;
    a.type_proto = std::move(v);
    return a;
  }

  static Attribute Subgraph(std::shared_ptr<Graph> v) {
    Attribute a;
    a.type = AttrType::kGraph;
    a.g = std::move(v);
    return a;
  }
  static Attribute Subgraphs(std::vector<std::shared_ptr<Graph>> v) {
    Attribute a;
    a.type = AttrType::kGraphs;
    a.graphs = std::move(v);
    return a;
  }
  bool is_graph() const { return type == AttrType::kGraph || type == AttrType::kGraphs; }

  // Structural equality (used by CSE); tensors compare by dtype, shape and bytes (strings by
  // value); subgraphs are never equal (a node with one is never merged).
  bool operator==(const Attribute& o) const;
  std::string ToString() const;
};

}  // namespace tob
