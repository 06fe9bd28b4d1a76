// Tests of the float16/bfloat16 conversions in reduce/half.h against independent references.
#include "reduce/half.h"

#include <gtest/gtest.h>

#include "float16_reference.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

// GCC has _Float16 on x86-64; clang 14 does not, so there only the slow reference is used.
#if defined(__FLT16_MAX__)
#define PRIOCCL_TEST_HAVE_FLOAT16 1
#endif

namespace {

using prioccl_test::bf16Magnitude;
using prioccl_test::halfMagnitude;
using prioccl_test::roundSlow;

using prioccl::reduce::bf16ToFloat;
using prioccl::reduce::floatToBf16;
using prioccl::reduce::floatToHalf;
using prioccl::reduce::halfToFloat;

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Reference for finite or infinite f (NaN is checked separately).
uint16_t halfRef(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isinf(f)) return sign | 0x7C00;
  return sign | roundSlow(std::fabs(double(f)), 0x7C00, 65536.0, halfMagnitude);
}

uint16_t bf16Ref(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isinf(f)) return sign | 0x7F80;
  return sign | roundSlow(std::fabs(double(f)), 0x7F80, std::ldexp(1.0, 128), bf16Magnitude);
}

bool isHalfNaN(uint16_t h) {
  return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
}
bool isBf16NaN(uint16_t b) {
  return (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0;
}

#ifdef PRIOCCL_TEST_HAVE_FLOAT16
uint16_t gccHalf(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t u;
  std::memcpy(&u, &h, sizeof u);
  return u;
}

float gccHalfToFloat(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, sizeof h);
  return static_cast<float>(h);
}
#endif

// Floats around every rounding boundary of a 16-bit type (`shift` low bits dropped), for every
// prefix of the remaining bits, plus random bit patterns.
std::vector<uint32_t> samples(int shift) {
  std::vector<uint32_t> out;
  const uint32_t one = 1u << shift;
  const uint32_t offsets[] = {0, 1, one / 2 - 1, one / 2, one / 2 + 1, one - 1};
  for (uint64_t i = 0; i < (uint64_t(1) << (32 - shift)); ++i) {
    for (uint32_t k : offsets) out.push_back(uint32_t(i << shift) + k);
  }
  std::mt19937 rng(12345);
  for (int i = 0; i < 4000000; ++i) out.push_back(uint32_t(rng()));
  return out;
}

TEST(Half, AllPatternsDecodeExactlyAndRoundTrip) {
  int nans = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t p = uint16_t(h);
    const float f = halfToFloat(p);
    const bool negative = (p & 0x8000) != 0;
    ASSERT_EQ(std::signbit(f), negative) << std::hex << h;
    if (isHalfNaN(p)) {
      ++nans;
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      const uint16_t back = floatToHalf(f);
      ASSERT_TRUE(isHalfNaN(back)) << std::hex << h;
      ASSERT_EQ(back, p | 0x0200) << std::hex << h;  // quieted, sign and payload kept
      continue;
    }
    if ((p & 0x7FFF) == 0x7C00) {
      ASSERT_TRUE(std::isinf(f)) << std::hex << h;
    } else {
      ASSERT_EQ(std::fabs(double(f)), halfMagnitude(p & 0x7FFF)) << std::hex << h;
    }
#ifdef PRIOCCL_TEST_HAVE_FLOAT16
    ASSERT_EQ(bitsOf(f), bitsOf(gccHalfToFloat(p))) << std::hex << h;
#endif
    ASSERT_EQ(floatToHalf(f), p) << std::hex << h;
  }
  EXPECT_EQ(nans, 2 * 1023);
}

TEST(Half, KnownValues) {
  EXPECT_EQ(floatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xC000);
  EXPECT_EQ(floatToHalf(0.0f), 0x0000);
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7BFF);
  EXPECT_EQ(floatToHalf(65519.99f), 0x7BFF);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7C00);  // tie between max and 2^16: even, i.e. overflow
  EXPECT_EQ(floatToHalf(-1e10f), 0xFC00);
  EXPECT_EQ(floatToHalf(INFINITY), 0x7C00);
  EXPECT_EQ(floatToHalf(-INFINITY), 0xFC00);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001);         // smallest subnormal
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000);         // tie, to even 0
  EXPECT_EQ(floatToHalf(std::ldexp(1.5f, -25)), 0x0001);         // above the tie
  EXPECT_EQ(floatToHalf(std::ldexp(3.0f, -25)), 0x0002);         // 1.5 units: tie, to even 2
  EXPECT_EQ(floatToHalf(std::ldexp(1023.5f, -24)), 0x0400);      // tie to the smallest normal
  EXPECT_EQ(floatToHalf(-std::ldexp(1.0f, -26)), 0x8000);        // underflow keeps the sign
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -149)), 0x0000);        // float subnormal
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie, to even
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(3.0f, -11)), 0x3C02);  // tie, to even (up)
  EXPECT_EQ(floatToHalf(2049.0f), 0x6800);
  const uint16_t nan = floatToHalf(std::nanf(""));
  EXPECT_TRUE(isHalfNaN(nan));
  EXPECT_TRUE(nan & 0x0200);                                  // quiet
  const uint16_t negNaN = floatToHalf(floatOf(0xFF800001u));  // signalling, negative
  EXPECT_TRUE(isHalfNaN(negNaN));
  EXPECT_TRUE(negNaN & 0x8000);
  EXPECT_TRUE(negNaN & 0x0200);
  EXPECT_EQ(bitsOf(halfToFloat(0x0001)), bitsOf(std::ldexp(1.0f, -24)));
  EXPECT_EQ(halfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(halfToFloat(0xC000), -2.0f);
}

TEST(Half, RoundingMatchesReferences) {
  size_t checked = 0;
  for (uint32_t u : samples(13)) {
    const float f = floatOf(u);
    const uint16_t got = floatToHalf(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(isHalfNaN(got)) << std::hex << u;
      ASSERT_EQ(got & 0x8000, (u >> 16) & 0x8000) << std::hex << u;
#ifdef PRIOCCL_TEST_HAVE_FLOAT16
      ASSERT_TRUE(isHalfNaN(gccHalf(f))) << std::hex << u;
#endif
      continue;
    }
#ifdef PRIOCCL_TEST_HAVE_FLOAT16
    ASSERT_EQ(got, gccHalf(f)) << std::hex << u;
#endif
    ASSERT_EQ(got, halfRef(f)) << std::hex << u;
    ++checked;
  }
  EXPECT_GT(checked, size_t(6000000));
}

TEST(Bf16, AllPatternsDecodeExactlyAndRoundTrip) {
  int nans = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t p = uint16_t(b);
    const float f = bf16ToFloat(p);
    ASSERT_EQ(std::signbit(f), (p & 0x8000) != 0) << std::hex << b;
    if (isBf16NaN(p)) {
      ++nans;
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      ASSERT_EQ(floatToBf16(f), p | 0x0040) << std::hex << b;  // quieted, sign and payload kept
      continue;
    }
    if ((p & 0x7FFF) == 0x7F80) {
      ASSERT_TRUE(std::isinf(f)) << std::hex << b;
    } else {
      ASSERT_EQ(std::fabs(double(f)), bf16Magnitude(p & 0x7FFF)) << std::hex << b;
    }
    ASSERT_EQ(floatToBf16(f), p) << std::hex << b;
  }
  EXPECT_EQ(nans, 2 * 127);
}

TEST(Bf16, KnownValues) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(floatToBf16(-0.0f), 0x8000);
  EXPECT_EQ(floatToBf16(floatOf(0x3F808000u)), 0x3F80);  // tie, to even (down)
  EXPECT_EQ(floatToBf16(floatOf(0x3F818000u)), 0x3F82);  // tie, to even (up)
  EXPECT_EQ(floatToBf16(floatOf(0x3F808001u)), 0x3F81);
  EXPECT_EQ(floatToBf16(floatOf(0x7F7FFFFFu)), 0x7F80);  // overflow to inf
  EXPECT_EQ(floatToBf16(floatOf(0xFF7F7FFFu)), 0xFF7F);
  EXPECT_EQ(floatToBf16(-INFINITY), 0xFF80);
  EXPECT_EQ(floatToBf16(floatOf(0x00008000u)), 0x0000);  // subnormal tie, to even
  EXPECT_EQ(floatToBf16(floatOf(0x00018000u)), 0x0002);
  const uint16_t nan = floatToBf16(floatOf(0xFF800001u));  // signalling, negative
  EXPECT_TRUE(isBf16NaN(nan));
  EXPECT_TRUE(nan & 0x8000);
  EXPECT_TRUE(nan & 0x0040);
  EXPECT_TRUE(isBf16NaN(floatToBf16(floatOf(0x7FFFFFFFu))));  // must not carry into the sign
}

TEST(Bf16, RoundingMatchesReference) {
  size_t checked = 0;
  for (int shift : {16, 13}) {
    for (uint32_t u : samples(shift)) {
      const float f = floatOf(u);
      const uint16_t got = floatToBf16(f);
      if (std::isnan(f)) {
        ASSERT_TRUE(isBf16NaN(got)) << std::hex << u;
        ASSERT_EQ(got & 0x8000, (u >> 16) & 0x8000) << std::hex << u;
        continue;
      }
      ASSERT_EQ(got, bf16Ref(f)) << std::hex << u;
      ++checked;
    }
  }
  EXPECT_GT(checked, size_t(10000000));
}

}  // namespace
