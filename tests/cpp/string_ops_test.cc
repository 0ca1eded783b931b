// String tensors: their storage, the data-movement ops on them (against index arithmetic done
// here), Equal, Cast to and from string (against numpy's astype, whose answers are quoted), the
// string ops (against Python's str methods and std::regex) and LabelEncoder (against a std::map),
// and the errors bad models and feeds get. Python's tests compare the same ops with onnx's
// ReferenceEvaluator and onnxruntime (tests/python/test_string_sequence_ops.py).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <regex>

#include "tensor_test_util.h"
#include "value_test_util.h"

namespace tob {
namespace {

using tensor_test::NextIndex;
using tensor_test::Ravel;
using tensor_test::Unravel;
using value_test::Contains;
using value_test::GraphSpec;
using value_test::RandomWords;
using value_test::Strings;
using value_test::StringsOf;
using value_test::StringType;

Attribute Ints(std::vector<int64_t> v) { return Attribute::Ints(std::move(v)); }

// Runs a one-output graph and returns the output's strings (the test fails on an error).
std::vector<std::string> RunStrings(GraphSpec& spec, const std::vector<std::string>& names, std::vector<Tensor> feeds,
                                    Shape* shape = nullptr) {
  auto session = spec.Build();
  EXPECT_TRUE(session.ok()) << session.status().ToString();
  if (!session.ok()) return {};
  auto out = value_test::Run(*session.value(), names, std::move(feeds));
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  if (!out.ok()) return {};
  if (shape != nullptr) *shape = out.value()[0].shape();
  return StringsOf(out.value()[0]);
}

TEST(StringTensor, ElementsAreObjectsTheBufferOwns) {
  const std::vector<std::string> words = {"", "short", std::string(100, 'x'), "\xe2\x82\xac"};
  Tensor t = Strings(words, {2, 2});
  EXPECT_EQ(t.dtype(), DType::kString);
  EXPECT_EQ(StringsOf(t), words);
  Tensor view = t.Reshaped({4});  // a view shares the strings
  EXPECT_TRUE(view.SharesDataWith(t));
  auto copy = Tensor::Allocate(DType::kString, {4}, CpuAllocator::Default());
  ASSERT_TRUE(copy.ok());
  CopyTensorData(view, copy.value());
  t.data<std::string>()[2] = "changed";
  EXPECT_EQ(StringsOf(copy.value())[2], std::string(100, 'x')) << "a copy owns its own strings";
  EXPECT_EQ(StringsOf(view)[2], "changed");
}

// The data-movement kernels move element numbers and copy each output string from the element its
// number names (string_moves.h). The references here index the input directly.
TEST(StringTensor, TransposeGatherConcatSliceMoveStrings) {
  const Shape shape{2, 3, 4};
  const std::vector<std::string> w = RandomWords(24, 7);
  Tensor x = Strings(w, shape);
  {
    Shape out_shape;
    auto got = RunStrings(GraphSpec()
                              .Input("x", StringType(DimsFromShape(shape)))
                              .Op("Transpose", {"x"}, {"y"}, {{"perm", Ints({2, 0, 1})}})
                              .Output("y"),
                          {"x"}, {x}, &out_shape);
    ASSERT_EQ(out_shape, Shape({4, 2, 3}));
    for (int64_t i = 0; i < 24; ++i) {
      auto o = Unravel(i, out_shape);
      EXPECT_EQ(got[i], w[Ravel({o[1], o[2], o[0]}, shape)]) << "Transpose at " << i;
    }
  }
  {
    const std::vector<int64_t> idx = {2, -3, 2, 1};
    Shape out_shape;
    auto got = RunStrings(GraphSpec()
                              .Input("x", StringType(DimsFromShape(shape)))
                              .Constant("i", Tensor::FromVector<int64_t>(idx, {2, 2}))
                              .Op("Gather", {"x", "i"}, {"y"}, {{"axis", Attribute::Int(1)}})
                              .Output("y"),
                          {"x"}, {x}, &out_shape);
    ASSERT_EQ(out_shape, Shape({2, 2, 2, 4}));
    for (int64_t i = 0; i < NumElements(out_shape); ++i) {
      auto o = Unravel(i, out_shape);
      int64_t j = idx[o[1] * 2 + o[2]];
      EXPECT_EQ(got[i], w[Ravel({o[0], j < 0 ? j + 3 : j, o[3]}, shape)]) << "Gather at " << i;
    }
  }
  {
    const std::vector<std::string> v = RandomWords(8, 8);
    Shape out_shape;
    auto got = RunStrings(GraphSpec()
                              .Input("x", StringType(DimsFromShape(shape)))
                              .Input("z", StringType(Dims{2, 1, 4}))
                              .Op("Concat", {"x", "z", "x"}, {"y"}, {{"axis", Attribute::Int(1)}})
                              .Output("y"),
                          {"x", "z"}, {x, Strings(v, {2, 1, 4})}, &out_shape);
    ASSERT_EQ(out_shape, Shape({2, 7, 4}));
    for (int64_t i = 0; i < NumElements(out_shape); ++i) {
      auto o = Unravel(i, out_shape);
      const std::string& want = o[1] < 3    ? w[Ravel({o[0], o[1], o[2]}, shape)]
                                : o[1] == 3 ? v[o[0] * 4 + o[2]]
                                            : w[Ravel({o[0], o[1] - 4, o[2]}, shape)];
      EXPECT_EQ(got[i], want) << "Concat at " << i;
    }
  }
  {
    Shape out_shape;
    auto got = RunStrings(GraphSpec()
                              .Input("x", StringType(DimsFromShape(shape)))
                              .Constant("starts", Tensor::FromVector<int64_t>({3, 1}, {2}))
                              .Constant("ends", Tensor::FromVector<int64_t>({-5, 3}, {2}))
                              .Constant("axes", Tensor::FromVector<int64_t>({2, 1}, {2}))
                              .Constant("steps", Tensor::FromVector<int64_t>({-2, 1}, {2}))
                              .Op("Slice", {"x", "starts", "ends", "axes", "steps"}, {"y"})
                              .Output("y"),
                          {"x"}, {x}, &out_shape);
    ASSERT_EQ(out_shape, Shape({2, 2, 2}));
    for (int64_t i = 0; i < 8; ++i) {
      auto o = Unravel(i, out_shape);
      EXPECT_EQ(got[i], w[Ravel({o[0], 1 + o[1], 3 - 2 * o[2]}, shape)]) << "Slice at " << i;
    }
  }
}

TEST(StringTensor, WhereExpandTileSplitCompressReverseSequenceMoveStrings) {
  const std::vector<std::string> a = RandomWords(6, 11), b = RandomWords(3, 12);
  const std::vector<bool> cond = {true, false, false, true, true, false};
  {
    Tensor c = Tensor::FromVector<bool>(cond, {2, 3});
    auto got = RunStrings(GraphSpec()
                              .Input("c", ValueType(DType::kBool, Dims{2, 3}))
                              .Input("a", StringType(Dims{2, 3}))
                              .Input("b", StringType(Dims{3}))
                              .Op("Where", {"c", "a", "b"}, {"y"})
                              .Output("y"),
                          {"c", "a", "b"}, {c, Strings(a, {2, 3}), Strings(b)});
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(got[i], cond[i] ? a[i] : b[i % 3]) << "Where at " << i;
  }
  {
    Shape out_shape;
    auto got = RunStrings(GraphSpec()
                              .Input("b", StringType(Dims{3, 1}))
                              .Constant("shape", Tensor::FromVector<int64_t>({2, 3, 2}, {3}))
                              .Op("Expand", {"b", "shape"}, {"y"})
                              .Output("y"),
                          {"b"}, {Strings(b, {3, 1})}, &out_shape);
    ASSERT_EQ(out_shape, Shape({2, 3, 2}));
    for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(got[i], b[Unravel(i, out_shape)[1]]) << "Expand at " << i;
  }
  {
    auto got = RunStrings(GraphSpec()
                              .Input("a", StringType(Dims{2, 3}))
                              .Constant("reps", Tensor::FromVector<int64_t>({2, 2}, {2}))
                              .Op("Tile", {"a", "reps"}, {"y"})
                              .Output("y"),
                          {"a"}, {Strings(a, {2, 3})});
    ASSERT_EQ(got.size(), 24u);
    for (int64_t i = 0; i < 24; ++i) {
      auto o = Unravel(i, {4, 6});
      EXPECT_EQ(got[i], a[(o[0] % 2) * 3 + o[1] % 3]) << "Tile at " << i;
    }
  }
  {
    auto session = GraphSpec()
                       .Input("a", StringType(Dims{2, 3}))
                       .Constant("split", Tensor::FromVector<int64_t>({1, 2}, {2}))
                       .Op("Split", {"a", "split"}, {"p", "q"}, {{"axis", Attribute::Int(1)}})
                       .Output("p")
                       .Output("q")
                       .Build();
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    auto out = value_test::Run(*session.value(), {"a"}, {Strings(a, {2, 3})});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(StringsOf(out.value()[0]), (std::vector<std::string>{a[0], a[3]}));
    EXPECT_EQ(StringsOf(out.value()[1]), (std::vector<std::string>{a[1], a[2], a[4], a[5]}));
  }
  {
    auto got = RunStrings(GraphSpec()
                              .Input("a", StringType(Dims{6}))
                              .Input("c", ValueType(DType::kBool, Dims{6}))
                              .Op("Compress", {"a", "c"}, {"y"})
                              .Output("y"),
                          {"a", "c"}, {Strings(a), Tensor::FromVector<bool>(cond, {6})});
    std::vector<std::string> want;
    for (size_t i = 0; i < 6; ++i)
      if (cond[i]) want.push_back(a[i]);
    EXPECT_EQ(got, want);
  }
  {
    // time_axis 0, batch_axis 1: batch column b reverses its first lens[b] rows.
    const std::vector<std::string> w = RandomWords(12, 13);
    const std::vector<int64_t> lens = {4, 0, 2};
    auto got = RunStrings(GraphSpec()
                              .Input("x", StringType(Dims{4, 3}))
                              .Input("lens", ValueType(DType::kInt64, Dims{3}))
                              .Op("ReverseSequence", {"x", "lens"}, {"y"},
                                  {{"time_axis", Attribute::Int(0)}, {"batch_axis", Attribute::Int(1)}})
                              .Output("y"),
                          {"x", "lens"}, {Strings(w, {4, 3}), Tensor::FromVector<int64_t>(lens, {3})});
    for (int64_t t = 0; t < 4; ++t)
      for (int64_t b = 0; b < 3; ++b) {
        const int64_t from = t < lens[b] ? lens[b] - 1 - t : t;
        EXPECT_EQ(got[t * 3 + b], w[from * 3 + b]) << "ReverseSequence at " << t << ", " << b;
      }
  }
}

// A string intermediate is never placed in the run's arena: the planned second run reuses the
// arena for the int64 numbers the movement ops work on, and the strings stay intact.
TEST(StringTensor, IntermediatesSurviveThePlannedRun) {
  auto session = GraphSpec()
                     .Input("x", StringType(Dims{2, 3}))
                     .Op("Transpose", {"x"}, {"t"})
                     .Op("Concat", {"t", "t"}, {"c"}, {{"axis", Attribute::Int(0)}})
                     .Op("Transpose", {"c"}, {"y"})
                     .Output("y")
                     .Build();
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    const std::vector<std::string> w = RandomWords(6, seed, 40);  // long words: heap-allocated characters
    std::vector<Tensor> out;
    RunStats stats;
    ASSERT_TRUE(session.value()->Run({"x"}, {Strings(w, {2, 3})}, {}, &out, &stats).ok());
    EXPECT_EQ(stats.planned, seed > 1);
    const auto got = StringsOf(out[0]);
    ASSERT_EQ(out[0].shape(), Shape({2, 6}));
    for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(got[i], w[(i / 6) * 3 + (i % 6) % 3]) << "run " << seed << " at " << i;
  }
}

TEST(StringTensor, EqualAndStringConcatBroadcast) {
  std::vector<std::string> a = RandomWords(6, 21, 2), b = RandomWords(3, 22, 2);
  a[4] = b[1];  // at least one equal pair
  GraphSpec spec;
  spec.Input("a", StringType(Dims{2, 3})).Input("b", StringType(Dims{3}));
  spec.Op("Equal", {"a", "b"}, {"eq"}).Op("StringConcat", {"a", "b"}, {"cat"}).Output("eq").Output("cat");
  auto session = spec.Build();
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto out = value_test::Run(*session.value(), {"a", "b"}, {Strings(a, {2, 3}), Strings(b)});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const auto cat = StringsOf(out.value()[1]);
  for (int64_t i = 0; i < 6; ++i) {
    EXPECT_EQ(out.value()[0].data<bool>()[i], a[i] == b[i % 3]) << i;
    EXPECT_EQ(cat[i], a[i] + b[i % 3]) << i;
  }
}

// Cast to string writes what numpy's astype(str) writes (onnx's reference): the values below are
// numpy 2.4's answers, quoted.
TEST(CastString, FormatsNumbersAsNumpyDoes) {
  struct Case {
    DType from;
    Tensor x;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {DType::kFloat64,
       Tensor::FromVector<double>({0.1, -2.5, 1e16, 123456789.125, 1e-5, 0.0001, -0.0, 3.0, 1.5e300, 5e-324}, {10}),
       {"0.1", "-2.5", "1e+16", "123456789.125", "1e-05", "0.0001", "-0.0", "3.0", "1.5e+300", "5e-324"}},
      {DType::kFloat32,
       Tensor::FromVector<float>(
           {0.1f, -2.5f, 1e6f, 999999.0f, 123456.79f, 1e-5f, 3.4028235e38f, 1.17549435e-38f, 16777217.0f}, {9}),
       {"0.1", "-2.5", "1e+06", "999999.0", "123456.79", "1e-05", "3.4028235e+38", "1.1754944e-38", "1.6777216e+07"}},
      {DType::kFloat16,
       Tensor::FromVector<Float16>({Float16(0.1f), Float16(999.f), Float16(1000.f), Float16(65504.f),
                                    Float16(6.1035156e-05f), Float16(5.96e-08f), Float16(-3.140625f)},
                                   {7}),
       {"0.1", "999.0", "1e+03", "6.55e+04", "6.104e-05", "6e-08", "-3.14"}},
      {DType::kInt8, Tensor::FromVector<int8_t>({-128, 127}, {2}), {"-128", "127"}},
      {DType::kUInt64, Tensor::FromVector<uint64_t>({UINT64_MAX}, {1}), {"18446744073709551615"}},
      {DType::kInt64, Tensor::FromVector<int64_t>({INT64_MIN}, {1}), {"-9223372036854775808"}},
      {DType::kBool, Tensor::FromVector<bool>({true, false}, {2}), {"True", "False"}},
  };
  for (const Case& c : cases) {
    auto got = RunStrings(GraphSpec()
                              .Input("x", ValueType(c.from, DimsFromShape(c.x.shape())))
                              .Op("Cast", {"x"}, {"y"}, {{"to", Attribute::Int(static_cast<int64_t>(DType::kString))}})
                              .Output("y"),
                          {"x"}, {c.x});
    EXPECT_EQ(got, c.want) << DTypeName(c.from);
  }
}

// Every float, printed and read back, is the same float (shortest round-trip digits).
TEST(CastString, FloatsRoundTripThroughText) {
  std::mt19937 gen(5);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> f;
  while (f.size() < 2000) {
    const uint32_t b = bits(gen);
    float v;
    std::memcpy(&v, &b, 4);
    if (std::isfinite(v)) f.push_back(v);
  }
  GraphSpec spec;
  spec.Input("x", ValueType(DType::kFloat32, Dims{2000}));
  spec.Op("Cast", {"x"}, {"s"}, {{"to", Attribute::Int(static_cast<int64_t>(DType::kString))}});
  spec.Op("Cast", {"s"}, {"y"}, {{"to", Attribute::Int(static_cast<int64_t>(DType::kFloat32))}}).Output("y");
  auto session = spec.Build();
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto out = value_test::Run(*session.value(), {"x"}, {Tensor::FromVector<float>(f, {2000})});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  for (size_t i = 0; i < f.size(); ++i) ASSERT_EQ(out.value()[0].data<float>()[i], f[i]) << i;
}

// Reading strings: Python's float() / int() rules, then one rounding (numpy's answers, quoted).
TEST(CastString, ReadsNumbersAsPythonDoes) {
  auto cast = [](const std::vector<std::string>& text, DType to) {
    GraphSpec spec;
    spec.Input("s", StringType(Dims{static_cast<int64_t>(text.size())}));
    spec.Op("Cast", {"s"}, {"y"}, {{"to", Attribute::Int(static_cast<int64_t>(to))}}).Output("y");
    auto session = spec.Build();
    EXPECT_TRUE(session.ok()) << session.status().ToString();
    return value_test::Run(*session.value(), {"s"}, {Strings(text)});
  };
  auto f64 = cast({" 1.5 ", "1_000", "-Infinity", "1e400", "1e-400", ".5", "+3", "1."}, DType::kFloat64);
  ASSERT_TRUE(f64.ok()) << f64.status().ToString();
  const std::vector<double> want = {1.5, 1000, -INFINITY, INFINITY, 0, 0.5, 3, 1};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(f64.value()[0].data<double>()[i], want[i]) << i;
  // 1 + 2^-11 + 2^-30 is just above the float16 tie between 1 and 1 + 2^-10: numpy gives 0x3c01,
  // where rounding to float32 first lands on the tie and then on 1.0 (0x3c00).
  auto f16 = cast({"1.000488281250931322574615478515625", "65519.99", "65520", "-1e-8"}, DType::kFloat16);
  ASSERT_TRUE(f16.ok()) << f16.status().ToString();
  const std::vector<uint16_t> want16 = {0x3c01, 31743, 31744, 32768};
  for (size_t i = 0; i < want16.size(); ++i) EXPECT_EQ(f16.value()[0].data<Float16>()[i].bits, want16[i]) << i;
  auto i8 = cast({" 12 ", "1_0", "-0", "+5", "-128"}, DType::kInt8);
  ASSERT_TRUE(i8.ok()) << i8.status().ToString();
  EXPECT_EQ(std::vector<int8_t>(i8.value()[0].data<int8_t>(), i8.value()[0].data<int8_t>() + 5),
            (std::vector<int8_t>{12, 10, 0, 5, -128}));
  auto b = cast({"", "0", "False"}, DType::kBool);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(std::vector<bool>(b.value()[0].data<bool>(), b.value()[0].data<bool>() + 3),
            (std::vector<bool>{false, true, true}));
  for (const auto& [text, to] : std::vector<std::pair<std::string, DType>>{{"1.0", DType::kInt64},
                                                                           {"300", DType::kInt8},
                                                                           {"-1", DType::kUInt8},
                                                                           {"0x10", DType::kFloat32},
                                                                           {"+-5", DType::kInt32},
                                                                           {"1__0", DType::kInt32},
                                                                           {"abc", DType::kFloat64}}) {
    auto bad = cast({"7", text}, to);
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_TRUE(Contains(bad.status().message(), "Cast node")) << bad.status().message();
    EXPECT_TRUE(Contains(bad.status().message(), "element 1 \"" + text + "\"")) << bad.status().message();
  }
}

// StringSplit splits as Python's str.split does (the answers below are Python's, quoted).
TEST(StringOps, StringSplitAsPython) {
  const std::vector<std::string> x = {"a,b,,c", " a  b c ", "", "x\xe3\x80\x80y\xc2\xa0z", "a\tb\nc"};
  struct Case {
    std::string delimiter;
    int64_t maxsplit;  // -1: not set
    std::vector<std::vector<std::string>> want;
  };
  const std::vector<Case> cases = {
      {",", -1, {{"a", "b", "", "c"}, {" a  b c "}, {""}, {"x\xe3\x80\x80y\xc2\xa0z"}, {"a\tb\nc"}}},
      {"", -1, {{"a,b,,c"}, {"a", "b", "c"}, {}, {"x", "y", "z"}, {"a", "b", "c"}}},
      {"", 1, {{"a,b,,c"}, {"a", "b c "}, {}, {"x", "y\xc2\xa0z"}, {"a", "b\nc"}}},
      {",", 1, {{"a", "b,,c"}, {" a  b c "}, {""}, {"x\xe3\x80\x80y\xc2\xa0z"}, {"a\tb\nc"}}},
  };
  for (const Case& c : cases) {
    AttributeMap attrs;
    if (!c.delimiter.empty()) attrs["delimiter"] = Attribute::String(c.delimiter);
    if (c.maxsplit >= 0) attrs["maxsplit"] = Attribute::Int(c.maxsplit);
    auto session = GraphSpec()
                       .Input("x", StringType(Dims{5}))
                       .Op("StringSplit", {"x"}, {"y", "n"}, attrs)
                       .Output("y")
                       .Output("n")
                       .Build();
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    auto out = value_test::Run(*session.value(), {"x"}, {Strings(x)});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    size_t widest = 0;
    for (const auto& parts : c.want) widest = std::max(widest, parts.size());
    ASSERT_EQ(out.value()[0].shape(), Shape({5, static_cast<int64_t>(widest)}));
    const auto got = StringsOf(out.value()[0]);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(out.value()[1].data<int64_t>()[i], static_cast<int64_t>(c.want[i].size()));
      for (size_t k = 0; k < widest; ++k)
        EXPECT_EQ(got[i * widest + k], k < c.want[i].size() ? c.want[i][k] : "")
            << "delimiter '" << c.delimiter << "' maxsplit " << c.maxsplit << " element " << i << " part " << k;
    }
  }
}

// RE2 and ECMAScript agree on this pattern's syntax: std::regex is the reference.
TEST(StringOps, RegexFullMatchAgreesWithStdRegex) {
  const std::string pattern = "[abc]*(Z|ab)?c+";
  const std::vector<std::string> words = RandomWords(300, 31, 5);
  auto session = GraphSpec()
                     .Input("x", StringType(Dims{300}))
                     .Op("RegexFullMatch", {"x"}, {"y"}, {{"pattern", Attribute::String(pattern)}})
                     .Output("y")
                     .Build();
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto out = value_test::Run(*session.value(), {"x"}, {Strings(words)});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const std::regex re(pattern);
  int matches = 0;
  for (size_t i = 0; i < words.size(); ++i) {
    const bool want = std::regex_match(words[i], re);
    matches += want;
    EXPECT_EQ(out.value()[0].data<bool>()[i], want) << "'" << words[i] << "'";
  }
  EXPECT_GT(matches, 0);
}

// StringNormalizer as its spec (and onnxruntime) define it: whole elements equal to a stopword go
// (compared in lower case unless is_case_sensitive), then the case changes; nothing left is one
// empty string of shape [1] (or [1, 1]).
TEST(StringOps, StringNormalizerFollowsTheSpec) {
  auto normalize = [](const std::vector<std::string>& x, Shape shape, AttributeMap attrs, Shape* out_shape) {
    return RunStrings(GraphSpec()
                          .Input("x", StringType(DimsFromShape(shape)))
                          .Op("StringNormalizer", {"x"}, {"y"}, std::move(attrs))
                          .Output("y"),
                      {"x"}, {Strings(x, shape)}, out_shape);
  };
  const std::vector<std::string> x = {"monday", "tuesday", "MONDAY", "caf\xc3\xa9", "Monday Night"};
  Shape shape;
  auto got = normalize(
      x, {5}, {{"stopwords", Attribute::Strings({"Monday"})}, {"case_change_action", Attribute::String("UPPER")}},
      &shape);
  EXPECT_EQ(got, (std::vector<std::string>{"TUESDAY", "CAF\xc3\x89", "MONDAY NIGHT"}));
  EXPECT_EQ(shape, Shape({3}));
  got = normalize(x, {1, 5},
                  {{"stopwords", Attribute::Strings({"monday"})},
                   {"is_case_sensitive", Attribute::Int(1)},
                   {"case_change_action", Attribute::String("LOWER")}},
                  &shape);
  EXPECT_EQ(got, (std::vector<std::string>{"tuesday", "monday", "caf\xc3\xa9", "monday night"}));
  EXPECT_EQ(shape, Shape({1, 4}));
  got = normalize({"a", "A"}, {1, 2}, {{"stopwords", Attribute::Strings({"a"})}}, &shape);
  EXPECT_EQ(got, (std::vector<std::string>{""}));
  EXPECT_EQ(shape, Shape({1, 1}));
}

// LabelEncoder maps each key to its value, the rest to the default; opset 4's tensor attributes
// and float keys (NaN matches NaN).
TEST(StringOps, LabelEncoderMapsAsAMapDoes) {
  const std::vector<std::string> keys = {"a", "b", "c\xc3\xa9", ""};
  const std::vector<int64_t> values = {7, -3, 12, 40};
  std::map<std::string, int64_t> reference;
  for (size_t i = 0; i < keys.size(); ++i) reference[keys[i]] = values[i];
  const std::vector<std::string> x = RandomWords(50, 41, 2);
  GraphSpec spec;
  spec.Opset(2, "ai.onnx.ml").Input("x", StringType(Dims{50}));
  spec.Op("LabelEncoder", {"x"}, {"y"},
          {{"keys_strings", Attribute::Strings(keys)},
           {"values_int64s", Attribute::Ints(values)},
           {"default_int64", Attribute::Int(-99)}},
          "ai.onnx.ml");
  auto session = spec.Output("y").Build();
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto out = value_test::Run(*session.value(), {"x"}, {Strings(x)});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  for (size_t i = 0; i < x.size(); ++i) {
    auto it = reference.find(x[i]);
    EXPECT_EQ(out.value()[0].data<int64_t>()[i], it == reference.end() ? -99 : it->second) << "'" << x[i] << "'";
  }

  GraphSpec v4;
  v4.Opset(4, "ai.onnx.ml").Input("f", ValueType(DType::kFloat32, Dims{4}));
  v4.Op("LabelEncoder", {"f"}, {"s"},
        {{"keys_tensor", Attribute::TensorValue(Tensor::FromVector<float>({1.5f, NAN, -0.f}, {3}))},
         {"values_tensor", Attribute::TensorValue(Strings({"x", "nan", "zero"}))}},
        "ai.onnx.ml");
  auto got = RunStrings(v4.Output("s"), {"f"}, {Tensor::FromVector<float>({NAN, 1.5f, 0.f, 2.f}, {4})});
  EXPECT_EQ(got, (std::vector<std::string>{"nan", "x", "zero", "_Unused"}));
}

TEST(StringOps, ConstantStrings) {
  auto got = RunStrings(GraphSpec()
                            .Op("Constant", {}, {"y"}, {{"value_strings", Attribute::Strings({"p", "", "q\xc3\xa9"})}})
                            .Output("y"),
                        {}, {});
  EXPECT_EQ(got, (std::vector<std::string>{"p", "", "q\xc3\xa9"}));
}

// Bad models and feeds: a Status naming the node, the op and what was expected.
TEST(StringOps, BadInputIsANamedError) {
  auto build_error = [](GraphSpec& spec) {
    auto s = spec.Build();
    return s.ok() ? std::string("(built)") : s.status().ToString();
  };
  std::string e = build_error(GraphSpec()
                                  .Input("a", StringType(Dims{2}))
                                  .Input("b", StringType(Dims{2}))
                                  .Op("Add", {"a", "b"}, {"y"})
                                  .Output("y"));
  EXPECT_TRUE(Contains(e, "Add node") && Contains(e, "string")) << e;
  e = build_error(GraphSpec()
                      .Input("a", StringType(Dims{2}))
                      .Input("b", ValueType(DType::kInt64, Dims{2}))
                      .Op("StringConcat", {"a", "b"}, {"y"})
                      .Output("y"));
  EXPECT_TRUE(Contains(e, "StringConcat node") && Contains(e, "must be a string tensor")) << e;
  e = build_error(GraphSpec()
                      .Input("a", StringType(Dims{2}))
                      .Op("RegexFullMatch", {"a"}, {"y"}, {{"pattern", Attribute::String("(unclosed")}})
                      .Output("y"));
  EXPECT_TRUE(Contains(e, "RegexFullMatch node") && Contains(e, "(unclosed")) << e;
  e = build_error(GraphSpec().Input("a", StringType(Dims{1, 2, 2})).Op("StringNormalizer", {"a"}, {"y"}).Output("y"));
  EXPECT_TRUE(Contains(e, "StringNormalizer node") && Contains(e, "[C] or [1, C]")) << e;
  e = build_error(GraphSpec()
                      .Input("a", StringType(Dims{2}))
                      .Op("StringNormalizer", {"a"}, {"y"}, {{"locale", Attribute::String("tr_TR")}})
                      .Output("y"));
  EXPECT_TRUE(Contains(e, "StringNormalizer node") && Contains(e, "tr_TR")) << e;
  e = build_error(GraphSpec()
                      .Opset(2, "ai.onnx.ml")
                      .Input("a", ValueType(DType::kInt64, Dims{2}))
                      .Op("LabelEncoder", {"a"}, {"y"},
                          {{"keys_strings", Attribute::Strings({"a"})}, {"values_int64s", Attribute::Ints({1})}},
                          "ai.onnx.ml")
                      .Output("y"));
  EXPECT_TRUE(Contains(e, "LabelEncoder node") && Contains(e, "int64")) << e;

  // A feed of the wrong kind names the input.
  auto session = GraphSpec().Input("a", StringType(Dims{2})).Op("Identity", {"a"}, {"y"}).Output("y").Build();
  ASSERT_TRUE(session.ok());
  auto out = value_test::Run(*session.value(), {"a"}, {Tensor::FromVector<float>({1, 2}, {2})});
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(Contains(out.status().message(), "input 'a'") && Contains(out.status().message(), "string"))
      << out.status().message();
}

}  // namespace
}  // namespace tob
