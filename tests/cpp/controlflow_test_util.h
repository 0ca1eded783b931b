// Shared by the control-flow tests (controlflow_test.cc, controlflow_values_test.cc,
// controlflow_passes_test.cc): value types, a graph builder for main graphs and subgraphs, and
// compile/run helpers that fail the test on a bad Status.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "op_tester.h"
#include "runtime/session.h"

namespace tob {
namespace cf_testing {

inline ValueType F32(Dims dims) { return ValueType(DType::kFloat32, std::move(dims)); }
inline ValueType I64(Dims dims) { return ValueType(DType::kInt64, std::move(dims)); }
inline ValueType Bool(Dims dims) { return ValueType(DType::kBool, std::move(dims)); }
inline ValueType Untyped() { return ValueType(); }

// Builder shorthand: a failing step fails the test and leaves the graph as it is.
struct G {
  explicit G(std::unique_ptr<Graph> graph, int opset = 17) : g(std::move(graph)) { g->SetOpset("", opset); }
  static G Main(int opset = 17) { return G(std::make_unique<Graph>(), opset); }
  static G Sub(const std::string& name) { return G(Graph::NewSubgraph(name)); }
  G& In(const std::string& name, ValueType t) {
    EXPECT_TRUE(g->AddInput(name, std::move(t)).ok()) << name;
    return *this;
  }
  G& Const(const std::string& name, Tensor t) {
    EXPECT_TRUE(g->AddInitializer(name, std::move(t)).ok()) << name;
    return *this;
  }
  G& Const(const std::string& name, std::vector<float> v, Shape shape) {
    return Const(name, Tensor::FromVector<float>(v, shape));
  }
  G& Op(const std::string& op, std::vector<std::string> in, std::vector<std::string> out, AttributeMap attrs = {},
        const std::string& name = "") {
    auto n = g->AddNode(op, "", in, out, std::move(attrs), name);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    return *this;
  }
  G& Out(const std::string& name) {
    EXPECT_TRUE(g->AddOutput(name).ok()) << name;
    return *this;
  }
  std::shared_ptr<Graph> Take() { return std::shared_ptr<Graph>(std::move(g)); }
  std::unique_ptr<Graph> g;
};

inline std::unique_ptr<Session> Compile(std::unique_ptr<Graph> g) {
  SessionOptions opts;
  opts.intra_op_threads = 2;
  opts.verify_each_pass = true;
  auto s = Session::Create(std::move(g), opts);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

inline std::vector<Tensor> RunOk(Session& s, const std::vector<std::string>& names, std::vector<Tensor> feeds,
                                 RunStats* stats = nullptr) {
  std::vector<Tensor> out;
  Status st = s.Run(names, std::move(feeds), {}, &out, stats);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

inline std::vector<double> D(const Tensor& t) { return testing::ToDoubles(t); }
inline Tensor BoolT(bool v) { return Tensor::FromVector<bool>({v}, {}); }
inline Tensor I64T(int64_t v) { return Tensor::FromVector<int64_t>({v}, {}); }

inline void ExpectNear(const Tensor& actual, const Shape& shape, const std::vector<double>& expected,
                       const std::string& what) {
  testing::ExpectClose(actual, shape, expected, 1e-5, 1e-5, what);
}

// The Status Session::Create gives for `g` (OK when it compiles).
inline Status CreateStatus(std::unique_ptr<Graph> g) {
  auto s = Session::Create(std::move(g), SessionOptions{});
  return s.ok() ? Status::OK() : s.status();
}

inline void ExpectError(const Status& st, StatusCode code, const std::string& fragment) {
  EXPECT_EQ(st.code(), code) << st.ToString();
  EXPECT_NE(st.message().find(fragment), std::string::npos) << "'" << fragment << "' not in: " << st.message();
}

}  // namespace cf_testing
}  // namespace tob
