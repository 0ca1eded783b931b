// A graph output reached through aliasing kernels (MatMul -> Reshape -> output) is a view of memory
// allocated outside the arena: no copy, and an earlier run's output stays intact when the next run
// reuses the arena. Checked against a float64 reference with the real CPU kernels.
#include <gtest/gtest.h>

#include "op_tester.h"
#include "runtime/session.h"

namespace tob {
namespace {

using testing::RandomTensor;

std::unique_ptr<Session> MatMulReshape() {
  auto g = std::make_unique<Graph>();
  g->SetOpset("", 17);
  EXPECT_TRUE(g->AddInput("a", ValueType(DType::kFloat32, Dims{4, 3})).ok());
  EXPECT_TRUE(g->AddInitializer("b", RandomTensor<float>({3, 6}, -1, 1, 7)).ok());
  EXPECT_TRUE(g->AddInitializer("shape", Tensor::FromVector<int64_t>({2, 12}, {2})).ok());
  EXPECT_TRUE(g->AddNode("MatMul", "", {"a", "b"}, {"ab"}, {}, "mm").ok());
  EXPECT_TRUE(g->AddNode("Relu", "", {"ab"}, {"r"}, {}, "relu").ok());
  EXPECT_TRUE(g->AddNode("Reshape", "", {"r", "shape"}, {"y"}, {}, "reshape").ok());
  EXPECT_TRUE(g->AddOutput("y").ok());
  SessionOptions opts;
  opts.intra_op_threads = 1;
  auto s = Session::Create(std::move(g), opts);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

void ExpectProduct(const Tensor& y, const Tensor& a, const Tensor& b) {
  ASSERT_EQ(y.shape(), (Shape{2, 12}));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j) {
      double ref = 0;
      for (int k = 0; k < 3; ++k) ref += double(a.data<float>()[i * 3 + k]) * b.data<float>()[k * 6 + j];
      EXPECT_NEAR(y.data<float>()[i * 6 + j], std::max(ref, 0.0), 1e-5);
    }
}

TEST(SessionOutputAlias, OutputsThroughReshapeSurviveTheNextRun) {
  auto s = MatMulReshape();
  const Tensor& b = *s->graph().FindValue("b")->initializer();
  const Tensor a1 = RandomTensor<float>({4, 3}, -1, 1, 1), a2 = RandomTensor<float>({4, 3}, -1, 1, 2);
  std::vector<Tensor> out1, out2, out3;
  ASSERT_TRUE(s->Run({"a"}, {a1}, {}, &out1).ok());
  ASSERT_TRUE(s->Run({"a"}, {a2}, {}, &out2).ok());  // planned run: reuses the arena
  ASSERT_TRUE(s->Run({"a"}, {a2}, {}, &out3).ok());
  ExpectProduct(out1[0], a1, b);
  ExpectProduct(out2[0], a2, b);
  EXPECT_FALSE(out2[0].SharesDataWith(out3[0]));
}

// An initializer and an input named as graph outputs are new values each run: the caller changing
// one in place changes neither the next run's constant nor its own feed.
TEST(SessionOutputAlias, ConstantAndFeedOutputsAreCopies) {
  auto g = std::make_unique<Graph>();
  g->SetOpset("", 17);
  ASSERT_TRUE(g->AddInput("a", ValueType(DType::kFloat32, Dims{4, 3})).ok());
  const Tensor c = RandomTensor<float>({4, 3}, -1, 1, 9);
  ASSERT_TRUE(g->AddInitializer("c", c).ok());
  ASSERT_TRUE(g->AddNode("Add", "", {"a", "c"}, {"y"}, {}, "add").ok());
  ASSERT_TRUE(g->AddOutput("y").ok());
  ASSERT_TRUE(g->AddOutput("c").ok());
  ASSERT_TRUE(g->AddOutput("a").ok());
  auto s = Session::Create(std::move(g), SessionOptions());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const Tensor a = RandomTensor<float>({4, 3}, -1, 1, 3);
  const std::vector<float> a_values(a.data<float>(), a.data<float>() + 12);
  const std::vector<float> c_values(c.data<float>(), c.data<float>() + 12);
  for (int run = 0; run < 2; ++run) {
    std::vector<Tensor> out;
    ASSERT_TRUE(s.value()->Run({"a"}, {a}, {}, &out).ok());
    ASSERT_EQ(out.size(), 3u);
    EXPECT_FALSE(out[2].SharesDataWith(a)) << "the input output aliases the caller's feed";
    for (int i = 0; i < 12; ++i) {
      EXPECT_EQ(out[1].data<float>()[i], c_values[i]) << "run " << run;
      EXPECT_EQ(out[2].data<float>()[i], a_values[i]) << "run " << run;
      EXPECT_NEAR(out[0].data<float>()[i], double(a_values[i]) + c_values[i], 1e-6);
    }
    for (int i = 0; i < 12; ++i) {  // the caller writes into what it got
      out[1].data<float>()[i] = 100.0f;
      out[2].data<float>()[i] = -100.0f;
    }
    for (int i = 0; i < 12; ++i) EXPECT_EQ(a.data<float>()[i], a_values[i]);
  }
}

}  // namespace
}  // namespace tob
