// Control flow carrying values other than tensors: If and Loop with sequences and optionals
// (read from enclosing graphs, carried between iterations, returned by branches), SequenceMap, and
// the named errors where a tensor is required. References are computed here in double precision.
#include <gtest/gtest.h>

#include "controlflow_test_util.h"
#include "op_tester.h"
#include "runtime/session.h"

namespace tob {
namespace {

using testing::RandomTensor;
using namespace cf_testing;

// ---------------- sequences and optionals ----------------

std::vector<RuntimeValue> RunValuesOk(Session& s, const std::vector<std::string>& names,
                                      std::vector<RuntimeValue> feeds) {
  std::vector<RuntimeValue> out;
  Status st = s.RunValues(names, std::move(feeds), {}, &out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

// seq_out = seq_in with x + i appended; scan_out = the length of seq_out (a tensor per iteration).
TEST(ControlFlow, LoopCarriesASequenceAndScansTensors) {
  G body = G::Sub("body");
  body.In("i", I64({})).In("cond_in", Bool({})).In("seq_in", ValueType::Sequence(DType::kFloat32));
  body.Op("Cast", {"i"}, {"fi"}, {{"to", Attribute::Int(static_cast<int64_t>(DType::kFloat32))}})
      .Op("Add", {"x", "fi"}, {"row"})
      .Op("SequenceInsert", {"seq_in", "row"}, {"seq_out"})
      .Op("SequenceLength", {"seq_out"}, {"len"})
      .Op("Identity", {"cond_in"}, {"cond_out"});
  body.Out("cond_out").Out("seq_out").Out("len");
  G main = G::Main(17);
  main.In("x", F32({3})).In("m", I64({}));
  main.Op("SequenceEmpty", {}, {"empty"}, {{"dtype", Attribute::Int(static_cast<int64_t>(DType::kFloat32))}})
      .Op("Loop", {"m", "", "empty"}, {"seq", "lens"}, {{"body", Attribute::Subgraph(body.Take())}}, "loop");
  main.Out("seq").Out("lens");
  auto s = Compile(std::move(main.g));
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->outputs()[0].type.kind, ValueKind::kSequence);
  const Tensor x = RandomTensor<float>({3}, -2, 2, 31);
  const std::vector<double> xd = D(x);
  for (int64_t m : {0, 1, 4}) {
    auto out = RunValuesOk(*s, {"x", "m"}, {x, I64T(m)});
    ASSERT_EQ(out.size(), 2u);
    ASSERT_TRUE(out[0].is_sequence()) << out[0].Describe();
    const TensorSequence& seq = out[0].sequence();
    ASSERT_EQ(static_cast<int64_t>(seq.tensors.size()), m);
    for (int64_t k = 0; k < m; ++k) {
      std::vector<double> want(3);
      for (size_t i = 0; i < 3; ++i) want[i] = xd[i] + static_cast<double>(k);
      ExpectNear(seq.tensors[k], {3}, want, StrCat("m=", m, " element ", k));
    }
    ASSERT_TRUE(out[1].is_tensor());
    std::vector<double> lens;
    for (int64_t k = 0; k < m; ++k) lens.push_back(static_cast<double>(k + 1));
    EXPECT_EQ(out[1].tensor().shape(), Shape({m}));
    EXPECT_EQ(D(out[1].tensor()), lens) << "m=" << m;
  }
}

// then: the outer sequence (an implicit input) with y appended; else: the outer sequence as it is.
TEST(ControlFlow, IfBranchesReadAndReturnSequences) {
  G then_branch = G::Sub("then");
  then_branch.Op("SequenceInsert", {"outer", "y"}, {"t_out"}).Out("t_out");
  G else_branch = G::Sub("else");
  else_branch.Op("Identity", {"outer"}, {"e_out"}).Out("e_out");
  G main = G::Main(17);
  main.In("x", F32({2, 2})).In("y", F32({2, 2})).In("c", Bool({}));
  main.Op("SequenceConstruct", {"x"}, {"outer"})
      .Op("If", {"c"}, {"seq"},
          {{"then_branch", Attribute::Subgraph(then_branch.Take())},
           {"else_branch", Attribute::Subgraph(else_branch.Take())}},
          "if");
  main.Out("seq");
  auto s = Compile(std::move(main.g));
  ASSERT_NE(s, nullptr);
  const Tensor x = RandomTensor<float>({2, 2}, -2, 2, 32);
  const Tensor y = RandomTensor<float>({2, 2}, -2, 2, 33);
  auto out = RunValuesOk(*s, {"x", "y", "c"}, {x, y, BoolT(true)});
  ASSERT_TRUE(out[0].is_sequence()) << out[0].Describe();
  ASSERT_EQ(out[0].sequence().tensors.size(), 2u);
  ExpectNear(out[0].sequence().tensors[0], {2, 2}, D(x), "then, element 0");
  ExpectNear(out[0].sequence().tensors[1], {2, 2}, D(y), "then, element 1");
  out = RunValuesOk(*s, {"x", "y", "c"}, {x, y, BoolT(false)});
  ASSERT_TRUE(out[0].is_sequence()) << out[0].Describe();
  ASSERT_EQ(out[0].sequence().tensors.size(), 1u);
  ExpectNear(out[0].sequence().tensors[0], {2, 2}, D(x), "else, element 0");
}

// then: an optional holding x * 2; else: an empty optional of the same type.
TEST(ControlFlow, IfBranchesReturnOptionals) {
  G then_branch = G::Sub("then");
  then_branch.Const("two", Tensor::FromVector<float>({2.f}, {}));
  then_branch.Op("Mul", {"x", "two"}, {"x2"}).Op("Optional", {"x2"}, {"t_out"}).Out("t_out");
  G else_branch = G::Sub("else");
  else_branch.Op("Optional", {}, {"e_out"}, {{"type", Attribute::TypeProto(F32({3}))}}).Out("e_out");
  G main = G::Main(18);
  main.In("x", F32({3})).In("c", Bool({}));
  main.Op("If", {"c"}, {"opt"},
          {{"then_branch", Attribute::Subgraph(then_branch.Take())},
           {"else_branch", Attribute::Subgraph(else_branch.Take())}},
          "if")
      .Op("OptionalHasElement", {"opt"}, {"has"});
  main.Out("opt").Out("has");
  auto s = Compile(std::move(main.g));
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->outputs()[0].type.optional);
  const Tensor x = RandomTensor<float>({3}, -2, 2, 34);
  auto out = RunValuesOk(*s, {"x", "c"}, {x, BoolT(true)});
  ASSERT_TRUE(out[0].is_tensor()) << out[0].Describe();
  std::vector<double> want = D(x);
  for (double& v : want) v *= 2;
  ExpectNear(out[0].tensor(), {3}, want, "then");
  EXPECT_EQ(D(out[1].tensor()), std::vector<double>({1}));
  out = RunValuesOk(*s, {"x", "c"}, {x, BoolT(false)});
  EXPECT_TRUE(out[0].is_none()) << out[0].Describe();
  EXPECT_EQ(D(out[1].tensor()), std::vector<double>({0}));
}

// out[e] = a[e] * b[e] + y: a and b sequences of ragged tensors, y a tensor read whole.
std::unique_ptr<Graph> SequenceMapGraph() {
  G body = G::Sub("body");
  body.In("ae", Untyped()).In("be", Untyped()).In("ye", F32({1}));
  body.Op("Mul", {"ae", "be"}, {"p"}).Op("Add", {"p", "ye"}, {"o"}).Op("Shape", {"o"}, {"shape"});
  body.Out("o").Out("shape");
  G main = G::Main(17);
  main.In("a", ValueType::Sequence(DType::kFloat32)).In("b", ValueType::Sequence(DType::kFloat32)).In("y", F32({1}));
  main.Op("SequenceMap", {"a", "b", "y"}, {"out", "shapes"}, {{"body", Attribute::Subgraph(body.Take())}}, "map");
  main.Out("out").Out("shapes");
  return std::move(main.g);
}

TEST(ControlFlow, SequenceMapRunsItsBodyPerElement) {
  auto s = Compile(SequenceMapGraph());
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> a, b;
  for (int64_t e = 0; e < 3; ++e) {
    a.push_back(RandomTensor<float>({e + 1, 2}, -2, 2, static_cast<uint32_t>(40 + e)));
    b.push_back(RandomTensor<float>({e + 1, 2}, -2, 2, static_cast<uint32_t>(50 + e)));
  }
  const Tensor y = RandomTensor<float>({1}, -2, 2, 60);
  auto out =
      RunValuesOk(*s, {"a", "b", "y"},
                  {RuntimeValue::OfSequence(DType::kFloat32, a), RuntimeValue::OfSequence(DType::kFloat32, b), y});
  ASSERT_EQ(out.size(), 2u);
  ASSERT_TRUE(out[0].is_sequence() && out[1].is_sequence());
  ASSERT_EQ(out[0].sequence().tensors.size(), 3u);
  for (size_t e = 0; e < 3; ++e) {
    const std::vector<double> ad = D(a[e]), bd = D(b[e]);
    std::vector<double> want(ad.size());
    for (size_t i = 0; i < ad.size(); ++i) want[i] = ad[i] * bd[i] + D(y)[0];
    ExpectNear(out[0].sequence().tensors[e], a[e].shape(), want, StrCat("element ", e));
    EXPECT_EQ(D(out[1].sequence().tensors[e]), std::vector<double>({static_cast<double>(e + 1), 2.0}));
  }
  // An empty sequence maps to empty sequences of the body outputs' dtypes.
  out = RunValuesOk(*s, {"a", "b", "y"},
                    {RuntimeValue::OfSequence(DType::kFloat32, {}), RuntimeValue::OfSequence(DType::kFloat32, {}), y});
  ASSERT_TRUE(out[0].is_sequence() && out[1].is_sequence());
  EXPECT_TRUE(out[0].sequence().tensors.empty());
  EXPECT_EQ(out[1].sequence().dtype, DType::kInt64);
}

TEST(ControlFlowErrors, SequenceMapInputsOfDifferentLengthsAreNamed) {
  auto s = Compile(SequenceMapGraph());
  ASSERT_NE(s, nullptr);
  const Tensor t = RandomTensor<float>({2}, -2, 2, 61);
  std::vector<RuntimeValue> out;
  Status st = s->RunValues({"a", "b", "y"},
                           {RuntimeValue::OfSequence(DType::kFloat32, {t, t}),
                            RuntimeValue::OfSequence(DType::kFloat32, {t}), RandomTensor<float>({1}, -2, 2, 62)},
                           {}, &out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("'map'"), std::string::npos) << st.ToString();
  EXPECT_NE(st.ToString().find("input 1 is a sequence of 1 tensors; input 0 has 2"), std::string::npos)
      << st.ToString();
}
// ---------------- errors ----------------

TEST(ControlFlowErrors, ALoopScanOutputThatIsASequenceIsNamed) {
  G body = G::Sub("body");
  body.In("i", I64({})).In("cond_in", Bool({}));
  body.Op("SequenceConstruct", {"x"}, {"slice"}).Op("Identity", {"cond_in"}, {"cond_out"});
  body.Out("cond_out").Out("slice");
  G main = G::Main(17);
  main.In("x", F32({3})).In("m", I64({}));
  main.Op("Loop", {"m", ""}, {"scan"}, {{"body", Attribute::Subgraph(body.Take())}}, "loop");
  main.Out("scan");
  SessionOptions opts;
  auto s = Session::Create(std::move(main.g), opts);
  ASSERT_FALSE(s.ok());
  const std::string msg = s.status().ToString();
  EXPECT_NE(msg.find("loop"), std::string::npos) << msg;
  EXPECT_NE(msg.find("scan output 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("must be a tensor"), std::string::npos) << msg;
}

TEST(ControlFlowErrors, AnIfConditionThatIsASequenceIsNamed) {
  G then_branch = G::Sub("then");
  then_branch.Op("Identity", {"x"}, {"t_out"}).Out("t_out");
  G else_branch = G::Sub("else");
  else_branch.Op("Identity", {"x"}, {"e_out"}).Out("e_out");
  G main = G::Main(17);
  main.In("x", F32({3})).In("c", Bool({}));
  main.Op("SequenceConstruct", {"c"}, {"cs"})
      .Op("If", {"cs"}, {"out"},
          {{"then_branch", Attribute::Subgraph(then_branch.Take())},
           {"else_branch", Attribute::Subgraph(else_branch.Take())}},
          "if");
  main.Out("out");
  SessionOptions opts;
  auto s = Session::Create(std::move(main.g), opts);
  ASSERT_FALSE(s.ok());
  const std::string msg = s.status().ToString();
  EXPECT_NE(msg.find("If"), std::string::npos) << msg;
  EXPECT_NE(msg.find("condition"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tob
