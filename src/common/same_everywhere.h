// "Every rank has the same values", checked with one all-reduce (MAX): each value rides with its
// flip (-v for floating point, ~v for integers: exact for every value), and the maximum of the
// flips is the flip of the minimum, so a value agrees exactly when its maximum equals its minimum.
// One way for every such check: the parameter table's must-agree settings at communicator creation
// (params.h) and the training modes' arguments (modes/agree.h).
#pragma once

#include <cstddef>
#include <type_traits>
#include <vector>

namespace prioccl::detail {

template <typename T>
T flipOrder(T v) {
  static_assert(std::is_arithmetic_v<T>);
  if constexpr (std::is_integral_v<T>)
    return ~v;
  else
    return -v;
}

// v0, flip(v0), v1, flip(v1), ...: what every rank all-reduces (MAX), in place.
template <typename T>
std::vector<T> withFlips(const std::vector<T>& values) {
  std::vector<T> out;
  out.reserve(2 * values.size());
  for (T v : values) {
    out.push_back(v);
    out.push_back(flipOrder(v));
  }
  return out;
}

// After the all-reduce, over the first `values` values (the caller may have appended entries of
// its own): the index of the first value whose minimum and maximum differ (set in *lo, *hi), or
// -1 when every rank had the same values.
template <typename T>
long firstDisagreement(const std::vector<T>& maxima, size_t values, T* lo, T* hi) {
  for (size_t i = 0; i < values; ++i) {
    T max = maxima.at(2 * i), min = flipOrder(maxima.at(2 * i + 1));
    if (min == max) continue;
    *lo = min;
    *hi = max;
    return static_cast<long>(i);
  }
  return -1;
}

}  // namespace prioccl::detail
