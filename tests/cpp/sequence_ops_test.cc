// Sequence and optional values through the executor: the Sequence* and Optional* ops against
// references computed here on random data, RunValues' feeds and fetches of every kind, the memory
// rule (no tensor a sequence holds lives in the run's arena), outputs that never share memory
// with constants or feeds, and the errors bad models and feeds get.
#include <gtest/gtest.h>

#include "op_tester.h"
#include "value_test_util.h"

namespace tob {
namespace {

using testing::RandomTensor;
using value_test::Contains;
using value_test::GraphSpec;
using value_test::RunValues;

Tensor I64(int64_t v) { return Tensor::FromVector<int64_t>({v}, {}); }

std::vector<float> Floats(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }

std::vector<float> Slice2D(const Tensor& x, int64_t col0, int64_t cols) {  // x[:, col0:col0+cols]
  std::vector<float> r;
  for (int64_t i = 0; i < x.dim(0); ++i)
    for (int64_t j = col0; j < col0 + cols; ++j) r.push_back(x.data<float>()[i * x.dim(1) + j]);
  return r;
}

// SplitToSequence along axis 1 with sizes [1, 3, 2]; then SequenceAt, SequenceLength, and
// ConcatFromSequence back (axis 1) and stacked (new_axis) all checked against slices of x.
TEST(SequenceOps, SplitAtLengthConcat) {
  Tensor x = RandomTensor<float>({3, 6}, -2, 2, 17);
  auto session =
      GraphSpec()
          .Input("x", ValueType(DType::kFloat32, Dims{3, 6}))
          .Constant("sizes", Tensor::FromVector<int64_t>({1, 3, 2}, {3}))
          .Constant("pos", I64(-2))
          .Op("SplitToSequence", {"x", "sizes"}, {"seq"}, {{"axis", Attribute::Int(1)}})
          .Op("SequenceAt", {"seq", "pos"}, {"at"})
          .Op("SequenceLength", {"seq"}, {"len"})
          .Op("ConcatFromSequence", {"seq"}, {"back"}, {{"axis", Attribute::Int(-1)}})
          .Op("SplitToSequence", {"x"}, {"cols"}, {{"axis", Attribute::Int(1)}, {"keepdims", Attribute::Int(0)}})
          .Op("ConcatFromSequence", {"cols"}, {"stacked"},
              {{"axis", Attribute::Int(0)}, {"new_axis", Attribute::Int(1)}})
          .Output("at")
          .Output("len")
          .Output("back")
          .Output("stacked")
          .Output("seq")
          .Build();
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  for (int run = 0; run < 2; ++run) {  // the second run is the planned one
    auto out = RunValues(*session.value(), {"x"}, {x});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    const auto& v = out.value();
    ASSERT_TRUE(v[0].is_tensor());
    EXPECT_EQ(v[0].tensor().shape(), Shape({3, 3}));
    EXPECT_EQ(Floats(v[0].tensor()), Slice2D(x, 1, 3));
    EXPECT_EQ(v[1].tensor().data<int64_t>()[0], 3);
    EXPECT_EQ(Floats(v[2].tensor()), Floats(x));
    ASSERT_EQ(v[3].tensor().shape(), Shape({6, 3}));  // stack of x's 6 columns: x transposed
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(v[3].tensor().data<float>()[i * 3 + j], x.data<float>()[j * 6 + i]);
    ASSERT_TRUE(v[4].is_sequence());
    ASSERT_EQ(v[4].sequence().tensors.size(), 3u);
    EXPECT_EQ(Floats(v[4].sequence().tensors[2]), Slice2D(x, 4, 2));
  }
}

// Insert / Erase at positions from both ends, against the same edits on a std::vector.
TEST(SequenceOps, InsertEraseAtPositions) {
  std::vector<Tensor> t;
  for (uint32_t k = 0; k < 4; ++k) t.push_back(RandomTensor<float>({2}, -1, 1, 100 + k));
  auto session = GraphSpec()
                     .Input("a", ValueType(DType::kFloat32, Dims{2}))
                     .Input("b", ValueType(DType::kFloat32, Dims{2}))
                     .Input("c", ValueType(DType::kFloat32, Dims{2}))
                     .Input("d", ValueType(DType::kFloat32, Dims{2}))
                     .Input("p", ValueType(DType::kInt64, Dims{}))
                     .Op("SequenceEmpty", {}, {"e"})
                     .Op("SequenceInsert", {"e", "a"}, {"s1"})        // [a]
                     .Op("SequenceInsert", {"s1", "b"}, {"s2"})       // [a, b]
                     .Op("SequenceInsert", {"s2", "c", "p"}, {"s3"})  // c at p
                     .Op("SequenceConstruct", {"d", "a"}, {"da"})     // [d, a]
                     .Op("SequenceErase", {"s3", "p"}, {"s4"})        // erase at p
                     .Op("SequenceErase", {"da"}, {"s5"})             // erase the last
                     .Op("Identity", {"s4"}, {"s6"})
                     .Output("s3")
                     .Output("s6")
                     .Output("s5")
                     .Build();
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  for (int64_t p : {0, 1, 2, -1, -2}) {
    auto out = RunValues(*session.value(), {"a", "b", "c", "d", "p"}, {t[0], t[1], t[2], t[3], I64(p)});
    ASSERT_TRUE(out.ok()) << "p = " << p << ": " << out.status().ToString();
    std::vector<int> ref = {0, 1};
    ref.insert(ref.begin() + (p < 0 ? p + 2 : p), 2);
    std::vector<int> erased = ref;
    erased.erase(erased.begin() + (p < 0 ? p + 3 : p));
    const auto check = [&](const RuntimeValue& v, const std::vector<int>& want, const char* what) {
      ASSERT_TRUE(v.is_sequence()) << what;
      ASSERT_EQ(v.sequence().tensors.size(), want.size()) << what << " p = " << p;
      for (size_t k = 0; k < want.size(); ++k)
        EXPECT_EQ(Floats(v.sequence().tensors[k]), Floats(t[want[k]])) << what << " p = " << p << " at " << k;
    };
    check(out.value()[0], ref, "insert");
    check(out.value()[1], erased, "erase");
    check(out.value()[2], {3}, "erase last");
  }
  auto bad = RunValues(*session.value(), {"a", "b", "c", "d", "p"}, {t[0], t[1], t[2], t[3], I64(3)});
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Contains(bad.status().message(), "SequenceInsert node") &&
              Contains(bad.status().message(), "position 3 is out of range"))
      << bad.status().message();
}

// Sequences fed and fetched (RunValues), optionals with and without a value, Optional's type
// attribute for an empty one.
TEST(SequenceOps, FeedsAndFetchesOfEveryKind) {
  auto session =
      GraphSpec()
          .Input("s", ValueType::Sequence(DType::kFloat32))
          .Input("o", ValueType(DType::kFloat32, Dims{2}).AsOptional())
          .Op("SequenceLength", {"s"}, {"n"})
          .Op("OptionalHasElement", {"o"}, {"has"})
          .Op("Optional", {}, {"empty"}, {{"type", Attribute::TypeProto(ValueType::Sequence(DType::kInt64))}})
          .Op("OptionalHasElement", {"empty"}, {"has_empty"})
          .Op("Identity", {"o"}, {"o2"})
          .Output("n")
          .Output("has")
          .Output("has_empty")
          .Output("o2")
          .Output("empty")
          .Build();
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  Tensor a = RandomTensor<float>({2}, -1, 1, 3);
  std::vector<Tensor> three = {a, RandomTensor<float>({5}, -1, 1, 4), a};
  auto out =
      RunValues(*session.value(), {"s", "o"}, {RuntimeValue::OfSequence(DType::kFloat32, three), RuntimeValue(a)});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()[0].tensor().data<int64_t>()[0], 3);
  EXPECT_TRUE(out.value()[1].tensor().data<bool>()[0]);
  EXPECT_FALSE(out.value()[2].tensor().data<bool>()[0]);
  EXPECT_EQ(Floats(out.value()[3].tensor()), Floats(a));
  EXPECT_TRUE(out.value()[4].is_none());

  out = RunValues(
      *session.value(), {"s", "o"},
      {RuntimeValue::OfSequence(DType::kFloat32, {}), RuntimeValue::None(ValueType(DType::kFloat32, Dims{2}))});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out.value()[0].tensor().data<int64_t>()[0], 0);
  EXPECT_FALSE(out.value()[1].tensor().data<bool>()[0]);
  EXPECT_TRUE(out.value()[3].is_none());

  // Tensor-only Run names the output that is not a tensor.
  auto seq_out = GraphSpec()
                     .Input("x", ValueType(DType::kFloat32, Dims{2}))
                     .Op("SequenceConstruct", {"x"}, {"s"})
                     .Output("s")
                     .Build();
  ASSERT_TRUE(seq_out.ok()) << seq_out.status().ToString();
  std::vector<Tensor> tensors;
  Status st = seq_out.value()->Run({"x"}, {a}, {}, &tensors);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(st.message(), "output 's' is a sequence of 1 float32 tensors, not a tensor")) << st.message();
}

// A tensor put into a sequence lives as long as the sequence: it is allocated outside the arena,
// so the intermediates after it (which the planned run places in the arena) never overwrite it.
TEST(SequenceOps, TensorsOfASequenceAreNotInTheArena) {
  auto session = GraphSpec()
                     .Input("x", ValueType(DType::kFloat32, Dims{64}))
                     .Constant("zero", I64(0))
                     .Op("Add", {"x", "x"}, {"twice"})  // an intermediate, last read by SequenceConstruct
                     .Op("SequenceConstruct", {"twice"}, {"seq"})
                     .Op("Mul", {"x", "x"}, {"sq"})  // intermediates of the same size, after it
                     .Op("Mul", {"sq", "x"}, {"cube"})
                     .Op("SequenceAt", {"seq", "zero"}, {"back"})
                     .Op("Add", {"back", "cube"}, {"y"})
                     .Output("y")
                     .Build();
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    Tensor x = RandomTensor<float>({64}, -2, 2, seed);
    std::vector<Tensor> out;
    RunStats stats;
    ASSERT_TRUE(session.value()->Run({"x"}, {x}, {}, &out, &stats).ok());
    EXPECT_EQ(stats.planned, seed > 1);
    for (int64_t i = 0; i < 64; ++i) {
      const double v = x.data<float>()[i];
      EXPECT_NEAR(out[0].data<float>()[i], 2 * v + v * v * v, 1e-5 * (1 + std::fabs(v * v * v))) << i;
    }
  }
}

// Outputs made of the model's constants or of the caller's feeds are copies.
TEST(SequenceOps, OutputsNeverShareConstantsOrFeeds) {
  Tensor constant = RandomTensor<float>({3}, -1, 1, 9);
  const std::vector<float> constant_values = Floats(constant);
  auto session = GraphSpec()
                     .Input("s", ValueType::Sequence(DType::kFloat32))
                     .Constant("c", constant)
                     .Constant("zero", I64(0))
                     .Op("SequenceConstruct", {"c", "c"}, {"cc"})
                     .Op("SequenceAt", {"s", "zero"}, {"first"})
                     .Op("Identity", {"s"}, {"same"})
                     .Output("cc")
                     .Output("first")
                     .Output("same")
                     .Build();
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  Tensor fed = RandomTensor<float>({2}, -1, 1, 10);
  for (int run = 0; run < 2; ++run) {
    auto out = RunValues(*session.value(), {"s"}, {RuntimeValue::OfSequence(DType::kFloat32, {fed})});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    const auto& v = out.value();
    EXPECT_EQ(Floats(v[0].sequence().tensors[1]), constant_values) << "run " << run;
    EXPECT_FALSE(v[0].sequence().tensors[0].SharesDataWith(constant));
    EXPECT_FALSE(v[1].tensor().SharesDataWith(fed));
    EXPECT_FALSE(v[2].sequence().tensors[0].SharesDataWith(fed));
    EXPECT_EQ(Floats(v[1].tensor()), Floats(fed));
    Tensor handed_out = v[0].sequence().tensors[0];
    handed_out.data<float>()[0] = 1234.f;  // the caller writes into its output
  }
}

// Bad models and feeds: a Status naming the node or input and what was expected.
TEST(SequenceOps, BadInputIsANamedError) {
  auto build_error = [](GraphSpec& spec) {
    auto s = spec.Build();
    return s.ok() ? std::string("(built)") : s.status().ToString();
  };
  // A sequence reaching an op that takes tensors.
  std::string e =
      build_error(GraphSpec().Input("s", ValueType::Sequence(DType::kFloat32)).Op("Relu", {"s"}, {"y"}).Output("y"));
  EXPECT_TRUE(Contains(e, "Relu node") && Contains(e, "is a sequence") && Contains(e, "takes tensors")) << e;
  e = build_error(GraphSpec()
                      .Input("x", ValueType(DType::kFloat32, Dims{2}))
                      .Input("i", ValueType(DType::kInt32, Dims{2}))
                      .Op("SequenceConstruct", {"x", "i"}, {"s"})
                      .Output("s"));
  EXPECT_TRUE(Contains(e, "SequenceConstruct node") && Contains(e, "one element type")) << e;
  e = build_error(GraphSpec()
                      .Input("x", ValueType(DType::kFloat32, Dims{2}))
                      .Input("p", ValueType(DType::kFloat32, Dims{}))
                      .Op("SequenceAt", {"x", "p"}, {"y"})
                      .Output("y"));
  EXPECT_TRUE(Contains(e, "SequenceAt node") && Contains(e, "must be a sequence")) << e;
  e = build_error(GraphSpec()
                      .Input("x", ValueType(DType::kFloat32, Dims{2}))
                      .Op("SplitToSequence", {"x"}, {"s"}, {{"axis", Attribute::Int(3)}})
                      .Output("s"));
  EXPECT_TRUE(Contains(e, "SplitToSequence node") && Contains(e, "axis")) << e;
  e = build_error(GraphSpec().Op("Optional", {}, {"o"}).Output("o"));
  EXPECT_TRUE(Contains(e, "Optional node") && Contains(e, "'type' attribute")) << e;

  auto session = GraphSpec()
                     .Input("s", ValueType::Sequence(DType::kFloat32))
                     .Input("o", ValueType(DType::kFloat32, Dims{2}).AsOptional())
                     .Op("ConcatFromSequence", {"s"}, {"c"}, {{"axis", Attribute::Int(0)}})
                     .Op("OptionalGetElement", {"o"}, {"g"})
                     .Output("c")
                     .Output("g")
                     .Build();
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  Tensor two = RandomTensor<float>({2}, -1, 1, 1);
  auto run = [&](RuntimeValue s, RuntimeValue o) {
    auto out = RunValues(*session.value(), {"s", "o"}, {std::move(s), std::move(o)});
    return out.ok() ? std::string("(ran)") : out.status().ToString();
  };
  const RuntimeValue none = RuntimeValue::None(ValueType(DType::kFloat32, Dims{2}));
  const RuntimeValue seq = RuntimeValue::OfSequence(DType::kFloat32, {two});
  e = run(two, two);
  EXPECT_TRUE(Contains(e, "input 's'") && Contains(e, "sequence")) << e;
  e = run(RuntimeValue::OfSequence(DType::kInt64, {Tensor::FromVector<int64_t>({1}, {1})}), two);
  EXPECT_TRUE(Contains(e, "input 's'") && Contains(e, "float32")) << e;
  e = run(seq, none);
  EXPECT_TRUE(Contains(e, "OptionalGetElement node") && Contains(e, "no value")) << e;
  e = run(RuntimeValue::OfSequence(DType::kFloat32, {}), two);
  EXPECT_TRUE(Contains(e, "ConcatFromSequence node") && Contains(e, "empty")) << e;
  e = run(RuntimeValue::OfSequence(DType::kFloat32, {two, RandomTensor<float>({2, 2}, -1, 1, 2)}), two);
  EXPECT_TRUE(Contains(e, "ConcatFromSequence node") && Contains(e, "tensor 1 has shape")) << e;
  e = run(none, two);
  EXPECT_TRUE(Contains(e, "input 's'") && Contains(e, "cannot be none")) << e;
}

}  // namespace
}  // namespace tob
