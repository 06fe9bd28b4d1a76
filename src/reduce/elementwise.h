// One element of each reduction, for host and device code alike (PRIOCCL_HD, half.h): the host
// loops of reduce.cpp and the CUDA kernels of device/reduce_kernels.cu call these, so both give
// the semantics reduce.h defines, bit for bit.
#ifndef PRIOCCL_REDUCE_ELEMENTWISE_H_
#define PRIOCCL_REDUCE_ELEMENTWISE_H_

#include <type_traits>

#include "prioccl/prioccl.h"
#include "reduce/half.h"

namespace prioccl {
namespace reduce {

// Unsigned type for wrapping Sum/Prod, at least as wide as unsigned int: narrower unsigned types
// would be promoted to (signed) int, where a product could overflow.
template <class T>
using Wrap = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

// Whether Min/Max picks b over a. For floats a NaN in a wins, then a NaN in b (the negated
// comparisons are true for NaN b), else the strictly smaller/larger b; ties keep a.
template <priocclRedOp_t Op, class T>
PRIOCCL_HD_INLINE bool takeSecond(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return Op == priocclMin ? b < a : b > a;
  } else if constexpr (Op == priocclMin) {
    return a == a && !(b >= a);
  } else {
    return a == a && !(b <= a);
  }
}

template <priocclRedOp_t Op, class T>
PRIOCCL_HD_INLINE T combine(T a, T b) {
  if constexpr (Op == priocclSum || Op == priocclAvg) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<Wrap<T>>(a) + static_cast<Wrap<T>>(b));
    } else {
      return a + b;
    }
  } else if constexpr (Op == priocclProd) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<Wrap<T>>(a) * static_cast<Wrap<T>>(b));
    } else {
      return a * b;
    }
  } else {
    return takeSecond<Op>(a, b) ? b : a;
  }
}

// The divisor's type for T: integers divide in the promoted type, so that a divisor above the
// range of T (e.g. uint8) stays exact; floats in T.
template <class T>
using DivisorOf = std::conditional_t<std::is_integral_v<T>, std::common_type_t<T, int>, T>;

// x / divisor as an Avg's last step computes it (integers truncating toward zero).
template <class T>
PRIOCCL_HD_INLINE T divideBy(T x, DivisorOf<T> div) {
  return static_cast<T>(static_cast<DivisorOf<T>>(x) / div);
}

// The last step of an Avg (divisor > 1): the wrapped sum, then the division.
template <class T>
PRIOCCL_HD_INLINE T average(T a, T b, DivisorOf<T> div) {
  return divideBy<T>(combine<priocclSum>(a, b), div);
}

// 16-bit floats: widen, compute in float32, round once; Min/Max return the chosen operand's bits.
// div: the Avg's divisor (Op == priocclAvg only).
template <class Codec, priocclRedOp_t Op>
PRIOCCL_HD_INLINE uint16_t combine16(uint16_t x, uint16_t y, float div) {
  const float fx = Codec::load(x);
  const float fy = Codec::load(y);
  if constexpr (Op == priocclMin || Op == priocclMax) {
    return takeSecond<Op>(fx, fy) ? y : x;
  } else if constexpr (Op == priocclAvg) {
    return Codec::store((fx + fy) / div);
  } else {
    return Codec::store(combine<Op>(fx, fy));
  }
}

template <class Codec>
PRIOCCL_HD_INLINE uint16_t divide16(uint16_t x, float div) {
  return Codec::store(Codec::load(x) / div);
}

}  // namespace reduce
}  // namespace prioccl

#endif  // PRIOCCL_REDUCE_ELEMENTWISE_H_
