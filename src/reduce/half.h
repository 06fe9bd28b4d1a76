// IEEE binary16 and bfloat16 <-> float32 conversions, round to nearest even, header-only.
// Host and device code (PRIOCCL_HD): the CUDA reduction kernels use the same conversions, so a
// device reduction gives the host's bits.
#ifndef PRIOCCL_REDUCE_HALF_H_
#define PRIOCCL_REDUCE_HALF_H_

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define PRIOCCL_HD __host__ __device__
#else
#define PRIOCCL_HD
#endif
// For the element functions the reduction loops call: GCC may leave an external inline function
// out of line, which (measured, 2026-11-25) cost the float16 sum loop 13%.
#ifdef __CUDACC__
#define PRIOCCL_HD_INLINE __host__ __device__ __forceinline__
#else
#define PRIOCCL_HD_INLINE inline __attribute__((always_inline))
#endif

namespace prioccl {
namespace reduce {

PRIOCCL_HD inline uint32_t floatBits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

PRIOCCL_HD inline float bitsFloat(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// c ? x : y as a bit mask. Unlike ?:, both inputs are always used, so the compiler cannot sink a
// floating-point computation into a branch (and then, under -ftrapping-math, fail to vectorise).
PRIOCCL_HD inline uint32_t selectBits(bool c, uint32_t x, uint32_t y) {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return (x & m) | (y & ~m);
}

// Every path is computed and one selected, so there are no data-dependent branches and the loops
// using it vectorise. The only float operations are exact, so the result does not depend on the
// FP rounding mode, nor on FTZ/DAZ.
PRIOCCL_HD inline uint16_t floatToHalf(float f) {
  const uint32_t x = floatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7FFFFFFFu;

  // Normal result: rebias the exponent (127 -> 15) and round away 13 bits; a carry out of the
  // mantissa bumps the exponent, and out of the largest exponent gives inf (0x7C00).
  const uint32_t norm = (a - (112u << 23) + 0xFFFu + ((a >> 13) & 1u)) >> 13;

  // Subnormal (or zero) result: the unit of a half subnormal is 2^-24, so the result is
  // t = |f| * 2^24 rounded to an integer. Only lanes below 2^-14 feed this (others become 0) so
  // t < 1024. Every step is exact (power-of-two scale, truncating conversion, subtracting the
  // integer part), hence independent of the FP rounding mode, yet it avoids the per-lane variable
  // shift that SSE2 cannot vectorise.
  const float t = bitsFloat(selectBits(a < (113u << 23), a, 0u)) * 0x1p24f;
  const uint32_t whole = static_cast<uint32_t>(static_cast<int32_t>(t));
  const float frac = t - static_cast<float>(static_cast<int32_t>(whole));
  const uint32_t up = static_cast<uint32_t>(frac > 0.5f) |
                      (static_cast<uint32_t>(frac == 0.5f) & whole);  // ties to even
  const uint32_t sub = whole + (up & 1u);

  // NaN keeps its sign and top payload bits and is made quiet; inf stays inf.
  const uint32_t special = selectBits(a > 0x7F800000u, 0x7E00u | ((a >> 13) & 0x3FFu), 0x7C00u);

  const uint32_t mag =
      selectBits(a < (113u << 23), sub, selectBits(a < (143u << 23), norm, special));
  return static_cast<uint16_t>(sign | mag);
}

PRIOCCL_HD inline float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7FFFu;
  const uint32_t normal = (em << 13) + (112u << 23);   // exponent 15 -> 127
  const uint32_t special = (em << 13) + (224u << 23);  // exponent 31 -> 255, payload kept
  // Subnormal: mantissa * 2^-24 is exact in float and its result is a normal float.
  const uint32_t sub = floatBits(static_cast<float>(em) * 0x1p-24f);
  const uint32_t mag = selectBits(em >= 0x7C00u, special, selectBits(em >= 0x0400u, normal, sub));
  return bitsFloat(sign | mag);
}

PRIOCCL_HD inline uint16_t floatToBf16(float f) {
  const uint32_t x = floatBits(f);
  // Adding 0x7FFF plus the kept LSB rounds to nearest even; a carry may run up to inf, as it
  // should.
  const uint32_t rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
  const uint32_t nan = (x >> 16) | 0x0040u;  // quiet NaN, sign and top payload bits kept
  return static_cast<uint16_t>(selectBits((x & 0x7FFFFFFFu) > 0x7F800000u, nan, rounded));
}

PRIOCCL_HD inline float bf16ToFloat(uint16_t b) {
  return bitsFloat(static_cast<uint32_t>(b) << 16);
}

// The two 16-bit formats as codecs over their storage: load widens to float, store rounds once.
struct HalfCodec {
  using Storage = uint16_t;
  PRIOCCL_HD static float load(uint16_t v) { return halfToFloat(v); }
  PRIOCCL_HD static uint16_t store(float f) { return floatToHalf(f); }
};

struct Bf16Codec {
  using Storage = uint16_t;
  PRIOCCL_HD static float load(uint16_t v) { return bf16ToFloat(v); }
  PRIOCCL_HD static uint16_t store(float f) { return floatToBf16(f); }
};

}  // namespace reduce
}  // namespace prioccl

#endif  // PRIOCCL_REDUCE_HALF_H_
