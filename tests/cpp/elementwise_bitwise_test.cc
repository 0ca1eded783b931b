// Bitwise integer ops (BitwiseAnd/Or/Xor/Not, BitShift) on every type their schemas allow, with
// broadcasting, the extremes of each type, shifts past the width, and malformed nodes. The
// references are numpy's results written out or computed on the values' two's-complement bits.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "op_tester.h"

namespace tob {
namespace {

using testing::OpTester;

template <typename T>
Tensor Ints(const std::vector<T>& v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  return Tensor::FromVector<T>(v, shape);
}

template <typename T>
std::vector<double> AsDoubles(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Each type's extremes and a few values of both signs, exactly representable as doubles.
template <typename T>
std::vector<T> Samples() {
  using L = std::numeric_limits<T>;
  if constexpr (std::is_signed_v<T>)
    return {L::min(), static_cast<T>(-10),         static_cast<T>(-3), static_cast<T>(-1), 0, 5,
            12,       static_cast<T>(L::min() + 1)};
  else return {L::max(), 246, 3, 1, 0, 5, 12, static_cast<T>(L::max() - 1)};
}

template <typename T>
std::vector<T> Others() {
  return {0, 1, 2, 3, 4, 6, static_cast<T>(-2), static_cast<T>(0x55)};
}

template <typename T, typename F>
std::vector<T> Apply(const std::vector<T>& a, const std::vector<T>& b, F f) {
  std::vector<T> r;
  for (size_t i = 0; i < a.size(); ++i) r.push_back(static_cast<T>(f(a[i], b[i])));
  return r;
}

template <typename T>
void CheckBitwiseType() {
  SCOPED_TRACE(DTypeName(DTypeOf<T>()));
  const std::vector<T> a = Samples<T>(), b = Others<T>();
  const Shape s{8};
  OpTester("BitwiseAnd", 18)
      .Input("a", Ints(a))
      .Input("b", Ints(b))
      .Output("y", s, AsDoubles(Apply(a, b, [](T x, T y) { return x & y; })), 0, 0)
      .Run();
  OpTester("BitwiseOr", 18)
      .Input("a", Ints(a))
      .Input("b", Ints(b))
      .Output("y", s, AsDoubles(Apply(a, b, [](T x, T y) { return x | y; })), 0, 0)
      .Run();
  OpTester("BitwiseXor", 18)
      .Input("a", Ints(a))
      .Input("b", Ints(b))
      .Output("y", s, AsDoubles(Apply(a, b, [](T x, T y) { return x ^ y; })), 0, 0)
      .Run();
  OpTester("BitwiseNot", 18)
      .Input("a", Ints(a))
      .Output("y", s, AsDoubles(Apply(a, a, [](T x, T) { return ~x; })), 0, 0)
      .Run();
}

TEST(ElementwiseBitwise, EveryIntegerType) {
  CheckBitwiseType<int8_t>();
  CheckBitwiseType<int16_t>();
  CheckBitwiseType<int32_t>();
  CheckBitwiseType<int64_t>();
  CheckBitwiseType<uint8_t>();
  CheckBitwiseType<uint16_t>();
  CheckBitwiseType<uint32_t>();
  CheckBitwiseType<uint64_t>();
}

// The values issue 18 reported: bits, not the logical 0/1 of And/Or.
TEST(ElementwiseBitwise, BitsNotTruthValues) {
  Tensor a = Ints<int64_t>({-10, -3, -1, 0, 5, 12}), b = Ints<int64_t>({0, 1, 2, 3, 4, 6});
  OpTester("BitwiseOr", 18).Input("a", a).Input("b", b).Output("y", {6}, {-10, -3, -1, 3, 5, 14}, 0, 0).Run();
  OpTester("BitwiseAnd", 18).Input("a", a).Input("b", b).Output("y", {6}, {0, 1, 2, 0, 4, 4}, 0, 0).Run();
  OpTester("BitwiseXor", 18).Input("a", a).Input("b", b).Output("y", {6}, {-10, -4, -3, 3, 1, 10}, 0, 0).Run();
  OpTester("BitwiseNot", 18).Input("a", a).Output("y", {6}, {9, 2, 0, -1, -6, -13}, 0, 0).Run();
  Tensor u = Ints<uint8_t>({246, 253, 255, 0, 5, 12}), v = Ints<uint8_t>({0, 1, 2, 3, 4, 6});
  OpTester("BitwiseOr", 18).Input("a", u).Input("b", v).Output("y", {6}, {246, 253, 255, 3, 5, 14}, 0, 0).Run();
}

TEST(ElementwiseBitwise, BroadcastAndLargeTensors) {
  std::vector<int32_t> big(3 * 40000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<int32_t>(i * 2654435761u);
  std::vector<int32_t> row{0x0F0F0F0F, -1, 0x7FFFFFFF};
  std::vector<double> expected;
  for (size_t i = 0; i < big.size(); ++i) expected.push_back(big[i] & row[i / 40000]);
  OpTester("BitwiseAnd", 18)
      .Input("a", Ints(big, {3, 40000}))
      .Input("b", Ints(row, {3, 1}))
      .Output("y", {3, 40000}, expected, 0, 0)
      .Threads(2)
      .Run();
}

TEST(ElementwiseBitShift, UnsignedTypesAndShiftsPastTheWidth) {
  // numpy: a shift by the width or more gives 0 both ways.
  OpTester("BitShift", 11)
      .Attr("direction", Attribute::String("LEFT"))
      .Input("x", Ints<uint8_t>({200, 3, 255, 1, 5, 1}))
      .Input("s", Ints<uint8_t>({1, 7, 8, 9, 255, 0}))
      .Output("y", {6}, {144, 128, 0, 0, 0, 1}, 0, 0)
      .Run();
  OpTester("BitShift", 11)
      .Attr("direction", Attribute::String("RIGHT"))
      .Input("x", Ints<uint8_t>({200, 3, 255, 1, 5, 1}))
      .Input("s", Ints<uint8_t>({1, 1, 7, 8, 200, 0}))
      .Output("y", {6}, {100, 1, 1, 0, 0, 1}, 0, 0)
      .Run();
  OpTester("BitShift", 11)
      .Attr("direction", Attribute::String("LEFT"))
      .Input("x", Ints<uint16_t>({1, 3, 65535}))
      .Input("s", Ints<uint16_t>({15, 16, 4}))
      .Output("y", {3}, {32768, 0, 65520}, 0, 0)
      .Run();
  OpTester("BitShift", 11)
      .Attr("direction", Attribute::String("RIGHT"))
      .Input("x", Ints<uint32_t>({4294967295u, 16, 7}))
      .Input("s", Ints<uint32_t>({31, 32, 1}))
      .Output("y", {3}, {1, 0, 3}, 0, 0)
      .Run();
  // Broadcast amount; 2^63 and 2^40 are exact in the double references.
  OpTester("BitShift", 11)
      .Attr("direction", Attribute::String("LEFT"))
      .Input("x", Ints<uint64_t>({1, 1u << 20, 3}, {3}))
      .Input("s", Ints<uint64_t>({20}, {1}))
      .Output("y", {3}, {1048576.0, 1099511627776.0, 3145728.0}, 0, 0)
      .Run();
  OpTester("BitShift", 11)
      .Attr("direction", Attribute::String("RIGHT"))
      .Input("x", Ints<uint64_t>({9223372036854775808ull, 5}))
      .Input("s", Ints<uint64_t>({63, 64}))
      .Output("y", {2}, {1, 0}, 0, 0)
      .Run();
}

// Opset 28 adds signed types: bits shifted left (wrapping through the sign bit), arithmetic right
// shifts, and for negative amounts or amounts of the width or more only the sign extension. The
// expected values are torch's and numpy's.
TEST(ElementwiseBitShift, SignedTypesFromOpset28) {
  Tensor x8 = Ints<int8_t>({-128, -3, -1, 0, 5, 127, 100, -100});
  Tensor s8 = Ints<int8_t>({1, 7, 8, 9, -1, -8, 3, -56});
  OpTester("BitShift", 28)
      .Attr("direction", Attribute::String("LEFT"))
      .Input("x", x8)
      .Input("s", s8)
      .Output("y", {8}, {0, -128, 0, 0, 0, 0, 32, 0}, 0, 0)
      .Run();
  OpTester("BitShift", 28)
      .Attr("direction", Attribute::String("RIGHT"))
      .Input("x", x8)
      .Input("s", s8)
      .Output("y", {8}, {-64, -1, -1, 0, 0, 0, 12, -1}, 0, 0)
      .Run();
  Tensor x64 = Ints<int64_t>({-128, -3, -1, 0, 5, 127, 100, -100});
  Tensor s64 = Ints<int64_t>({1, 63, 64, 65, -1, -8, 3, 100});
  OpTester("BitShift", 28)
      .Attr("direction", Attribute::String("LEFT"))
      .Input("x", x64)
      .Input("s", s64)
      .Output("y", {8}, {-256, -9223372036854775808.0, 0, 0, 0, 0, 800, 0}, 0, 0)
      .Run();
  OpTester("BitShift", 28)
      .Attr("direction", Attribute::String("RIGHT"))
      .Input("x", x64)
      .Input("s", s64)
      .Output("y", {8}, {-64, -1, -1, 0, 0, 0, 12, -1}, 0, 0)
      .Run();
  OpTester("BitShift", 28)
      .Attr("direction", Attribute::String("RIGHT"))
      .Input("x", Ints<int16_t>({-32768, -32768, 32767}))
      .Input("s", Ints<int16_t>({15, 1, 14}))
      .Output("y", {3}, {-1, -16384, 1}, 0, 0)
      .Run();
}

TEST(ElementwiseBitShift, MalformedNodesAreErrors) {
  Tensor x = Ints<uint8_t>({1, 2}), s = Ints<uint8_t>({1, 1});
  auto missing = OpTester("BitShift", 11).Input("x", x).Input("s", s).Output("y", {2}, {}).Compute();
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("direction"), std::string::npos) << missing.status().ToString();
  auto bad = OpTester("BitShift", 11)
                 .Attr("direction", Attribute::String("UP"))
                 .Input("x", x)
                 .Input("s", s)
                 .Output("y", {2}, {})
                 .Compute();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("LEFT"), std::string::npos) << bad.status().ToString();
  // Before opset 28 signed types have no BitShift (the spec's constraint): the exporter lowers them.
  auto is_signed = OpTester("BitShift", 11)
                       .Attr("direction", Attribute::String("LEFT"))
                       .Input("x", Ints<int32_t>({1, 2}))
                       .Input("s", Ints<int32_t>({1, 1}))
                       .Output("y", {2}, {})
                       .Compute();
  ASSERT_FALSE(is_signed.ok());
  EXPECT_EQ(is_signed.status().code(), StatusCode::kNotImplemented);
  // Bitwise ops before opset 18 do not exist; And on integers is not a bitwise op.
  auto old = OpTester("BitwiseAnd", 17)
                 .Input("a", Ints<int64_t>({1}))
                 .Input("b", Ints<int64_t>({1}))
                 .Output("y", {1}, {})
                 .Compute();
  EXPECT_FALSE(old.ok());
  auto logical_on_ints =
      OpTester("And", 7).Input("a", Ints<int64_t>({1})).Input("b", Ints<int64_t>({3})).Output("y", {1}, {}).Compute();
  EXPECT_FALSE(logical_on_ints.ok());
  auto mixed = OpTester("BitwiseOr", 18)
                   .Input("a", Ints<int64_t>({1}))
                   .Input("b", Ints<int32_t>({3}))
                   .Output("y", {1}, {})
                   .Compute();
  EXPECT_FALSE(mixed.ok());
}

}  // namespace
}  // namespace tob
