// Slow, independent references for float16/bfloat16 rounding, shared by the unit tests.
// Deliberately unlike reduce/half.h: values come from the patterns' fields in double, and
// rounding is a bisection over the ordered patterns.
#pragma once

#include <cmath>
#include <cstdint>

namespace prioccl_test {

inline  // Magnitude of a finite, non-negative 16-bit pattern, from its fields (exact in double).
    double
    halfMagnitude(uint16_t h) {
  const int e = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  return e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
}

inline double bf16Magnitude(uint16_t b) {
  const int e = (b >> 7) & 0xFF;
  const int m = b & 0x7F;
  return e == 0 ? std::ldexp(m, -133) : std::ldexp(128 + m, e - 134);
}

// Slow reference rounding: the nearest pattern to the finite magnitude v, found by bisection over
// the ordered non-negative patterns, ties to the even pattern. The infinity pattern stands for
// the next power of two past the largest finite value, which is where IEEE rounds to infinity.
inline uint16_t roundSlow(double v, uint16_t infPattern, double infValue,
                          double (*magnitude)(uint16_t)) {
  auto value = [&](uint32_t p) { return p == infPattern ? infValue : magnitude(uint16_t(p)); };
  if (v >= infValue) return infPattern;
  uint32_t lo = 0, hi = infPattern;  // value(lo) <= v < value(hi)
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (value(mid) <= v) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const double below = v - value(lo);  // exact: neighbours of a float differ by few bits in double
  const double above = value(hi) - v;
  if (below < above) return uint16_t(lo);
  if (above < below) return uint16_t(hi);
  return uint16_t((lo & 1) ? hi : lo);
}

}  // namespace prioccl_test
