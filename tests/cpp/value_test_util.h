// Helpers for the tests of string tensors and of sequence / optional values: small graphs run
// through a whole Session (the executor's value slots, the memory plan and the value kernels are
// what these tests are about, so they do not go around it as OpTester does).
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "runtime/session.h"

namespace tob::value_test {

// A graph under construction: inputs, nodes, outputs; Build() makes the session.
struct GraphSpec {
  GraphSpec() : graph(std::make_unique<Graph>()) { graph->SetOpset("", 21); }
  GraphSpec& Opset(int v, const std::string& domain = "") {
    graph->SetOpset(domain, v);
    return *this;
  }
  GraphSpec& Input(const std::string& name, ValueType type) {
    EXPECT_TRUE(graph->AddInput(name, std::move(type)).ok()) << name;
    return *this;
  }
  GraphSpec& Constant(const std::string& name, Tensor value) {
    EXPECT_TRUE(graph->AddInitializer(name, std::move(value)).ok()) << name;
    return *this;
  }
  GraphSpec& Op(const std::string& op, const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
                AttributeMap attrs = {}, const std::string& domain = "") {
    auto n = graph->AddNode(op, domain, inputs, outputs, std::move(attrs), op + "_" + std::to_string(++nodes));
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    return *this;
  }
  GraphSpec& Output(const std::string& name) {
    EXPECT_TRUE(graph->AddOutput(name).ok()) << name;
    return *this;
  }
  StatusOr<std::unique_ptr<Session>> Build() {
    SessionOptions options;
    options.intra_op_threads = 2;
    return Session::Create(std::move(graph), options);
  }
  std::unique_ptr<Graph> graph;
  int nodes = 0;
};

inline Tensor Strings(const std::vector<std::string>& v, Shape shape) {
  return Tensor::FromVector<std::string>(v, std::move(shape));
}
inline Tensor Strings(const std::vector<std::string>& v) { return Strings(v, Shape{static_cast<int64_t>(v.size())}); }

inline std::vector<std::string> StringsOf(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::kString);
  if (t.dtype() != DType::kString) return {};
  return std::vector<std::string>(t.data<std::string>(), t.data<std::string>() + t.numel());
}

// Random words over a small alphabet (so that equal words and shared prefixes occur), some empty,
// some multi-byte UTF-8.
inline std::vector<std::string> RandomWords(size_t n, uint32_t seed, size_t max_len = 6) {
  static const std::vector<std::string> kLetters = {"a", "b", "c", "Z", "\xc3\xa9", "\xe2\x82\xac", " "};
  std::mt19937 gen(seed);
  std::uniform_int_distribution<size_t> len(0, max_len), letter(0, kLetters.size() - 1);
  std::vector<std::string> words(n);
  for (auto& w : words)
    for (size_t k = len(gen); k > 0; --k) w += kLetters[letter(gen)];
  return words;
}

// Runs `session` with tensor feeds; the fetched tensors, or the failed status.
inline StatusOr<std::vector<Tensor>> Run(Session& session, const std::vector<std::string>& names,
                                         std::vector<Tensor> feeds) {
  std::vector<Tensor> out;
  TOB_RETURN_IF_ERROR(session.Run(names, std::move(feeds), {}, &out));
  return out;
}

inline StatusOr<std::vector<RuntimeValue>> RunValues(Session& session, const std::vector<std::string>& names,
                                                     std::vector<RuntimeValue> feeds) {
  std::vector<RuntimeValue> out;
  TOB_RETURN_IF_ERROR(session.RunValues(names, std::move(feeds), {}, &out));
  return out;
}

inline ValueType StringType(Dims dims) { return ValueType(DType::kString, std::move(dims)); }

inline bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace tob::value_test
