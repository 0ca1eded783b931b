// providers/cpu/elementwise/round_16bit.h against the scalar conversions of core/half.h (what the
// unfused 16-bit kernels and Cast store): every float32 whose low half is one of the rounding
// cases (exact, below / at / above the halfway point, the last ulp) under every high half, so
// every bfloat16 bucket, both signs, subnormals, infinities and NaNs (signalling and quiet) are
// covered; float16 over a grid of high halves with the same low-half cases.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/half.h"
#include "providers/cpu/elementwise/round_16bit.h"

namespace tob {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// Low halves that exercise the rounding: exact, just below, at and just above the halfway point
// (ties go to even: the result depends on bit 16 of the high half), and the largest.
const uint32_t kLowHalves[] = {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xc000u, 0xffffu};

std::vector<float> Cases(uint32_t high_step) {
  std::vector<float> v;
  for (uint32_t high = 0; high <= 0xffffu; high += high_step) {
    for (uint32_t low : kLowHalves) {
      const uint32_t u = (high << 16) | low;
      float f;
      std::memcpy(&f, &u, sizeof(f));
      v.push_back(f);
    }
  }
  return v;
}

TEST(Round16Bit, BFloat16EqualsTheScalarConversionBitForBit) {
  const std::vector<float> x = Cases(1);
  std::vector<float> y(x.size());
  ew::RoundToBFloat16(x.data(), y.data(), static_cast<int64_t>(x.size()));  // the vectorised loop
  int64_t nans = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = BFloat16BitsToFloat(FloatToBFloat16Bits(x[i]));
    ASSERT_EQ(Bits(y[i]), Bits(want)) << "x bits 0x" << std::hex << Bits(x[i]);
    ASSERT_EQ(Bits(ew::RoundToBFloat16(x[i])), Bits(want)) << "x bits 0x" << std::hex << Bits(x[i]);
    nans += y[i] != y[i];
  }
  EXPECT_GT(nans, 0);  // the cases do reach the NaN encodings
}

TEST(Round16Bit, BFloat16InPlaceAndResultsNarrowExactly) {
  std::vector<float> v = Cases(7);
  const std::vector<float> x = v;
  ew::RoundToBFloat16(v.data(), v.data(), static_cast<int64_t>(v.size()));
  std::vector<uint16_t> narrow(v.size());
  ew::NarrowExactToBFloat16(v.data(), narrow.data(), static_cast<int64_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) {
    // The narrowed bits are the ones storing the original value as bfloat16 gives.
    ASSERT_EQ(narrow[i], FloatToBFloat16Bits(x[i])) << "x bits 0x" << std::hex << Bits(x[i]);
    ASSERT_EQ(Bits(v[i]) & 0xffffu, 0u);
  }
}

TEST(Round16Bit, Float16EqualsTheScalarConversion) {
  // Odd lengths, so both the 8-lane loop and the scalar tail run.
  for (uint32_t step : {3u, 5u}) {
    const std::vector<float> x = Cases(step);
    std::vector<float> y(x.size());
    ew::RoundToFloat16(x.data(), y.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = HalfBitsToFloat(FloatToHalfBits(x[i]));
      if (want != want) {  // a NaN stays a NaN (its payload may differ between F16C and the scalar path)
        ASSERT_NE(y[i], y[i]) << "x bits 0x" << std::hex << Bits(x[i]);
        continue;
      }
      ASSERT_EQ(Bits(y[i]), Bits(want)) << "x bits 0x" << std::hex << Bits(x[i]);
    }
  }
}

}  // namespace
}  // namespace tob
