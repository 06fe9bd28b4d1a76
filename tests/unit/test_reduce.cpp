// Tests of reduce::apply for every data type and op against straightforward references.
#include "reduce/reduce.h"

#include <gtest/gtest.h>

#include "float16_reference.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

// GCC has _Float16 on x86-64; clang 14 does not, so there the slow half reference is used.
#if defined(__FLT16_MAX__)
#define PRIOCCL_TEST_HAVE_FLOAT16 1
#endif

namespace {

using prioccl::reduce::apply;

using Rng = std::mt19937_64;

template <class To, class From>
To bitCast(From v) {
  static_assert(sizeof(To) == sizeof(From), "size");
  To out;
  std::memcpy(&out, &v, sizeof out);
  return out;
}

// ---- Integers: reference arithmetic in __int128, reduced modulo 2^bits explicitly.

template <class T>
T wrapTo(__int128 v) {
  const __int128 m = __int128(1) << (8 * sizeof(T));
  __int128 r = v % m;
  if (r < 0) r += m;
  if (std::is_signed<T>::value && r >= m / 2) r -= m;
  return T(r);
}

template <class T>
struct IntModel {
  using Elem = T;
  static T gen(Rng& rng) { return T(rng()); }
  static T ref(priocclRedOp_t op, T a, T b, int divisor) {
    switch (op) {
      case priocclSum:
        return wrapTo<T>(__int128(a) + b);
      case priocclProd: {
        // Unsigned 128-bit: a uint64 product overflows the signed type. Negative operands
        // sign-extend, which leaves the product's residue modulo 2^bits unchanged.
        using U = unsigned __int128;
        const U m = U(1) << (8 * sizeof(T));
        return wrapTo<T>(__int128(U(__int128(a)) * U(__int128(b)) % m));
      }
      case priocclMin:
        return a <= b ? a : b;
      case priocclMax:
        return a >= b ? a : b;
      case priocclAvg: {
        const T sum = wrapTo<T>(__int128(a) + b);
        return divisor > 1 ? T(__int128(sum) / divisor) : sum;
      }
      case priocclNumOps:
        break;
    }
    return 0;
  }
  static bool same(T x, T y) { return x == y; }
};

// ---- float / double.

template <class F>
F randomFloat(Rng& rng) {
  using Bits = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;
  const int kind = int(rng() % 100);
  if (kind < 3) {  // NaN, random sign and payload
    Bits b = bitCast<Bits>(std::numeric_limits<F>::quiet_NaN()) | Bits(rng() & 0xFFFF);
    if (rng() & 1) b |= Bits(1) << (8 * sizeof(F) - 1);
    return bitCast<F>(b);
  }
  if (kind < 5)
    return (rng() & 1) ? std::numeric_limits<F>::infinity() : -std::numeric_limits<F>::infinity();
  if (kind < 8) return (rng() & 1) ? F(0) : -F(0);
  if (kind < 12) return bitCast<F>(Bits(rng()));  // anything, subnormals and huge included
  std::uniform_real_distribution<double> dist(-100.0, 100.0);
  return F(dist(rng));
}

// NaN in a wins, then NaN in b, then the strictly better b; ties keep a.
template <class F>
bool refTakesSecond(priocclRedOp_t op, F a, F b) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return op == priocclMin ? b < a : b > a;
}

template <class F>
struct FloatModel {
  using Elem = F;
  static F gen(Rng& rng) { return randomFloat<F>(rng); }
  static F ref(priocclRedOp_t op, F a, F b, int divisor) {
    // float: computed in double and rounded once, which equals float arithmetic for + * / (double
    // has more than 2*24+2 bits); double is computed directly.
    using W = std::conditional_t<sizeof(F) == 4, double, F>;
    switch (op) {
      case priocclSum:
        return F(W(a) + W(b));
      case priocclProd:
        return F(W(a) * W(b));
      case priocclMin:
      case priocclMax:
        return refTakesSecond(op, a, b) ? b : a;
      case priocclAvg: {
        const F sum = F(W(a) + W(b));
        return divisor > 1 ? F(W(sum) / W(divisor)) : sum;
      }
      case priocclNumOps:
        break;
    }
    return 0;
  }
  // Bit-exact (signed zeros, NaN payloads of Min/Max); any NaN matches a NaN otherwise.
  static bool same(F x, F y) {
    if (std::isnan(x) && std::isnan(y)) return true;
    return bitCast<std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>>(x) ==
           bitCast<std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>>(y);
  }
};

// ---- 16-bit floats: the test's own conversions.

using prioccl_test::bf16Magnitude;
using prioccl_test::halfMagnitude;
using prioccl_test::roundSlow;

struct HalfRef {
  static constexpr uint16_t kExpMask = 0x7C00;
  static constexpr uint16_t kMantMask = 0x03FF;
  static float decode(uint16_t h) {
#ifdef PRIOCCL_TEST_HAVE_FLOAT16
    return static_cast<float>(bitCast<_Float16>(h));
#else
    const float sign = (h & 0x8000) ? -1.0f : 1.0f;
    if ((h & kExpMask) == kExpMask) {
      return (h & kMantMask) ? std::nanf("") : sign * std::numeric_limits<float>::infinity();
    }
    return sign * float(halfMagnitude(h & 0x7FFF));
#endif
  }
  static uint16_t encode(float f) {
#ifdef PRIOCCL_TEST_HAVE_FLOAT16
    return bitCast<uint16_t>(static_cast<_Float16>(f));
#else
    if (std::isnan(f)) return 0x7E00;
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    if (std::isinf(f)) return sign | kExpMask;
    return sign | roundSlow(std::fabs(double(f)), kExpMask, 65536.0, halfMagnitude);
#endif
  }
};

struct Bf16Ref {
  static constexpr uint16_t kExpMask = 0x7F80;
  static constexpr uint16_t kMantMask = 0x007F;
  static float decode(uint16_t b) {
    const float sign = (b & 0x8000) ? -1.0f : 1.0f;
    if ((b & kExpMask) == kExpMask) {
      return (b & kMantMask) ? std::nanf("") : sign * std::numeric_limits<float>::infinity();
    }
    return sign * float(bf16Magnitude(b & 0x7FFF));
  }
  static uint16_t encode(float f) {
    if (std::isnan(f)) return 0x7FC0;
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    if (std::isinf(f)) return sign | kExpMask;
    return sign | roundSlow(std::fabs(double(f)), kExpMask, std::ldexp(1.0, 128), bf16Magnitude);
  }
};

template <class Ref>
struct Float16Model {
  using Elem = uint16_t;
  static bool isNaN(uint16_t v) {
    return (v & Ref::kExpMask) == Ref::kExpMask && (v & Ref::kMantMask) != 0;
  }
  static uint16_t gen(Rng& rng) {
    // Half any pattern (NaN, inf, subnormal), half moderate values.
    if (rng() & 1) return uint16_t(rng());
    std::uniform_real_distribution<float> dist(-8.0f, 8.0f);
    return Ref::encode(dist(rng));
  }
  static uint16_t ref(priocclRedOp_t op, uint16_t a, uint16_t b, int divisor) {
    const float x = Ref::decode(a);
    const float y = Ref::decode(b);
    switch (op) {
      case priocclSum:
        return Ref::encode(x + y);
      case priocclProd:
        return Ref::encode(x * y);
      case priocclMin:
      case priocclMax:
        return refTakesSecond(op, x, y) ? b : a;  // the operand's own bits
      case priocclAvg:
        return Ref::encode(divisor > 1 ? (x + y) / float(divisor) : x + y);
      case priocclNumOps:
        break;
    }
    return 0;
  }
  static bool same(uint16_t x, uint16_t y) { return x == y || (isNaN(x) && isNaN(y)); }
};

// ---- Driver.

enum class Alias { kNone, kDstIsIn, kDstIsLocal };

constexpr size_t kGuard = 5;  // elements past n that apply must leave alone

template <class Model>
void runCase(priocclDataType_t dt, priocclRedOp_t op, size_t n, int divisor, Alias alias,
             uint64_t seed) {
  using E = typename Model::Elem;
  Rng rng(seed);
  std::vector<E> in(n + kGuard), local(n + kGuard), out(n + kGuard);
  for (size_t i = 0; i < n + kGuard; ++i) {
    in[i] = Model::gen(rng);
    local[i] = (i % 11 == 3) ? in[i] : Model::gen(rng);  // some ties
    out[i] = Model::gen(rng);
  }
  std::vector<E> expected(n);
  for (size_t i = 0; i < n; ++i) expected[i] = Model::ref(op, in[i], local[i], divisor);

  const std::vector<E> in0 = in, local0 = local, out0 = out;
  E* dst = alias == Alias::kDstIsIn      ? in.data()
           : alias == Alias::kDstIsLocal ? local.data()
                                         : out.data();
  const std::vector<E>& dst0 = alias == Alias::kDstIsIn      ? in0
                               : alias == Alias::kDstIsLocal ? local0
                                                             : out0;
  apply(dst, in.data(), local.data(), n, dt, op, divisor);

  int bad = 0;
  for (size_t i = 0; i < n && bad < 5; ++i) {
    if (!Model::same(dst[i], expected[i])) {
      ++bad;
      ADD_FAILURE() << "i=" << i << " in=" << +in0[i] << " local=" << +local0[i]
                    << " got=" << +dst[i] << " want=" << +expected[i] << " divisor=" << divisor;
    }
  }
  for (size_t i = n; i < n + kGuard; ++i) {
    ASSERT_EQ(std::memcmp(&dst[i], &dst0[i], sizeof(E)), 0) << "wrote past n at " << i;
  }
  // Buffers that are not dst are untouched.
  if (alias != Alias::kDstIsIn) {
    ASSERT_EQ(std::memcmp(in.data(), in0.data(), in.size() * sizeof(E)), 0);
  }
  if (alias != Alias::kDstIsLocal) {
    ASSERT_EQ(std::memcmp(local.data(), local0.data(), local.size() * sizeof(E)), 0);
  }
}

template <class Model>
void runAll(priocclDataType_t dt, priocclRedOp_t op) {
  std::vector<int> divisors = {1};
  if (op == priocclAvg) divisors = {1, 2, 3, 4, 1000};
  uint64_t seed = 1;
  for (size_t n : {0, 1, 7, 1000, 4099}) {
    for (int divisor : divisors) {
      for (Alias alias : {Alias::kNone, Alias::kDstIsIn, Alias::kDstIsLocal}) {
        SCOPED_TRACE("n=" + std::to_string(n) + " divisor=" + std::to_string(divisor) +
                     " alias=" + std::to_string(int(alias)));
        runCase<Model>(dt, op, n, divisor, alias, seed++ * 7919 + uint64_t(dt) * 131 + op);
      }
    }
  }
}

class ApplyTest : public ::testing::TestWithParam<std::tuple<priocclDataType_t, priocclRedOp_t>> {};

TEST_P(ApplyTest, MatchesReference) {
  const priocclDataType_t dt = std::get<0>(GetParam());
  const priocclRedOp_t op = std::get<1>(GetParam());
  switch (dt) {
    case priocclInt8:
      return runAll<IntModel<int8_t>>(dt, op);
    case priocclUint8:
      return runAll<IntModel<uint8_t>>(dt, op);
    case priocclInt32:
      return runAll<IntModel<int32_t>>(dt, op);
    case priocclUint32:
      return runAll<IntModel<uint32_t>>(dt, op);
    case priocclInt64:
      return runAll<IntModel<int64_t>>(dt, op);
    case priocclUint64:
      return runAll<IntModel<uint64_t>>(dt, op);
    case priocclFloat16:
      return runAll<Float16Model<HalfRef>>(dt, op);
    case priocclBfloat16:
      return runAll<Float16Model<Bf16Ref>>(dt, op);
    case priocclFloat32:
      return runAll<FloatModel<float>>(dt, op);
    case priocclFloat64:
      return runAll<FloatModel<double>>(dt, op);
    case priocclNumTypes:
      break;
  }
  FAIL() << "unhandled dtype";
}

INSTANTIATE_TEST_SUITE_P(
    AllTypesAndOps, ApplyTest,
    ::testing::Combine(::testing::Values(priocclInt8, priocclUint8, priocclInt32, priocclUint32,
                                         priocclInt64, priocclUint64, priocclFloat16,
                                         priocclBfloat16, priocclFloat32, priocclFloat64),
                       ::testing::Values(priocclSum, priocclProd, priocclMin, priocclMax,
                                         priocclAvg)),
    [](const ::testing::TestParamInfo<ApplyTest::ParamType>& p) {
      return std::string(prioccl::reduce::dtypeName(std::get<0>(p.param))) + "_" +
             prioccl::reduce::opName(std::get<1>(p.param));
    });

// ---- Explicit cases.

template <class T>
std::vector<T> run(const std::vector<T>& a, const std::vector<T>& b, priocclDataType_t dt,
                   priocclRedOp_t op, int divisor = 1) {
  std::vector<T> out(a.size());
  apply(out.data(), a.data(), b.data(), a.size(), dt, op, divisor);
  return out;
}

TEST(Apply, IntegerWrapAround) {
  EXPECT_EQ(run<int8_t>({127, -128, 100}, {1, -1, 100}, priocclInt8, priocclSum),
            (std::vector<int8_t>{-128, 127, -56}));
  EXPECT_EQ(run<int8_t>({-128, 16}, {-1, 8}, priocclInt8, priocclProd),
            (std::vector<int8_t>{-128, -128}));
  EXPECT_EQ(run<uint8_t>({200, 255, 16}, {2, 255, 16}, priocclUint8, priocclProd),
            (std::vector<uint8_t>{144, 1, 0}));
  EXPECT_EQ(run<uint8_t>({200, 0}, {100, 255}, priocclUint8, priocclSum),
            (std::vector<uint8_t>{44, 255}));
  const int32_t i32max = std::numeric_limits<int32_t>::max();
  EXPECT_EQ(run<int32_t>({i32max, 65536}, {1, 65536}, priocclInt32, priocclSum),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), 131072}));
  EXPECT_EQ(run<int32_t>({65536, -46341}, {65536, 46341}, priocclInt32, priocclProd),
            (std::vector<int32_t>{0, 2147479015}));
  const int64_t i64max = std::numeric_limits<int64_t>::max();
  const int64_t i64min = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(run<int64_t>({i64max, i64min}, {1, -1}, priocclInt64, priocclSum),
            (std::vector<int64_t>{i64min, i64max}));
  EXPECT_EQ(
      run<int64_t>({int64_t(1) << 62, 3037000500}, {4, 3037000500}, priocclInt64, priocclProd),
      (std::vector<int64_t>{0, -9223372036709301616}));
  const uint32_t u32max = std::numeric_limits<uint32_t>::max();
  EXPECT_EQ(run<uint32_t>({u32max, 65536}, {2, 65537}, priocclUint32, priocclSum),
            (std::vector<uint32_t>{1, 131073}));
  EXPECT_EQ(run<uint32_t>({65536, u32max}, {65536, u32max}, priocclUint32, priocclProd),
            (std::vector<uint32_t>{0, 1}));
  const uint64_t u64max = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(
      run<uint64_t>({u64max, uint64_t(1) << 63}, {1, uint64_t(1) << 63}, priocclUint64, priocclSum),
      (std::vector<uint64_t>{0, 0}));
  EXPECT_EQ(run<uint64_t>({u64max, uint64_t(1) << 32}, {u64max, uint64_t(1) << 32}, priocclUint64,
                          priocclProd),
            (std::vector<uint64_t>{1, 0}));
}

TEST(Apply, IntegerMinMax) {
  EXPECT_EQ(run<int8_t>({-128, 5}, {127, -3}, priocclInt8, priocclMin),
            (std::vector<int8_t>{-128, -3}));
  EXPECT_EQ(run<uint8_t>({0, 200}, {255, 100}, priocclUint8, priocclMax),
            (std::vector<uint8_t>{255, 200}));
  EXPECT_EQ(
      run<int64_t>({std::numeric_limits<int64_t>::min(), 1}, {0, 2}, priocclInt64, priocclMax),
      (std::vector<int64_t>{0, 2}));
  // Unsigned compare: 2^31 and 2^63 are large, not negative.
  EXPECT_EQ(run<uint32_t>({uint32_t(1) << 31, 1}, {1, 2}, priocclUint32, priocclMax),
            (std::vector<uint32_t>{uint32_t(1) << 31, 2}));
  EXPECT_EQ(run<uint64_t>({uint64_t(1) << 63, 5}, {1, 3}, priocclUint64, priocclMin),
            (std::vector<uint64_t>{1, 3}));
}

TEST(Apply, IntegerAverageTruncatesTowardZero) {
  EXPECT_EQ(run<int32_t>({-3, 3, -8, 5, 1}, {-4, 4, 0, 5, 1}, priocclInt32, priocclAvg, 4),
            (std::vector<int32_t>{-1, 1, -2, 2, 0}));
  EXPECT_EQ(run<int8_t>({100, -3}, {100, -4}, priocclInt8, priocclAvg, 4),
            (std::vector<int8_t>{-14, -1}));  // the sum wraps first: 200 -> -56
  EXPECT_EQ(run<uint8_t>({200, 7}, {100, 0}, priocclUint8, priocclAvg, 4),
            (std::vector<uint8_t>{11, 1}));  // 300 wraps to 44
  EXPECT_EQ(run<uint8_t>({200}, {55}, priocclUint8, priocclAvg, 300),
            (std::vector<uint8_t>{0}));  // divisor beyond the type's range
  EXPECT_EQ(run<int64_t>({-7000000000000LL}, {0}, priocclInt64, priocclAvg, 4),
            (std::vector<int64_t>{-1750000000000LL}));
  EXPECT_EQ(run<uint32_t>({4000000000u}, {3}, priocclUint32, priocclAvg, 4),
            (std::vector<uint32_t>{1000000000u}));  // unsigned: no sign to truncate
  EXPECT_EQ(run<uint64_t>({uint64_t(1) << 63}, {uint64_t(1) << 63}, priocclUint64, priocclAvg, 4),
            (std::vector<uint64_t>{0}));  // the sum wraps to 0 first
  // divisor 1: Avg is Sum, wrap included.
  EXPECT_EQ(run<int8_t>({127}, {1}, priocclInt8, priocclAvg, 1), (std::vector<int8_t>{-128}));
}

TEST(Apply, FloatAverage) {
  EXPECT_EQ(run<float>({1.0f, -3.0f, 1.0f}, {2.0f, 0.0f, 0.0f}, priocclFloat32, priocclAvg, 4),
            (std::vector<float>{0.75f, -0.75f, 0.25f}));
  EXPECT_EQ(run<double>({1.0, 0.1}, {2.0, 0.2}, priocclFloat64, priocclAvg, 3),
            (std::vector<double>{1.0, (0.1 + 0.2) / 3.0}));
  EXPECT_EQ(run<float>({1.0f}, {2.0f}, priocclFloat32, priocclAvg, 1), (std::vector<float>{3.0f}));
  // 1 + 2 over 4 = 0.75.
  EXPECT_EQ(run<uint16_t>({0x3C00}, {0x4000}, priocclFloat16, priocclAvg, 4),
            (std::vector<uint16_t>{0x3A00}));
  EXPECT_EQ(run<uint16_t>({0x3F80}, {0x4000}, priocclBfloat16, priocclAvg, 4),
            (std::vector<uint16_t>{0x3F40}));
}

TEST(Apply, SixteenBitSumRoundsToNearestEven) {
  // half: 2048 + 1 and 2050 + 1 are ties (spacing 2 there); 65504 + 16 overflows to inf.
  EXPECT_EQ(run<uint16_t>({0x6800, 0x6801, 0x7BFF, 0x3C00}, {0x3C00, 0x3C00, 0x4C00, 0xBC00},
                          priocclFloat16, priocclSum),
            (std::vector<uint16_t>{0x6800, 0x6802, 0x7C00, 0x0000}));
  // bf16: 256 + 1 and 258 + 1 are ties.
  EXPECT_EQ(run<uint16_t>({0x4380, 0x4381}, {0x3F80, 0x3F80}, priocclBfloat16, priocclSum),
            (std::vector<uint16_t>{0x4380, 0x4382}));
  // half: 3 * 5 = 15, bf16: 3 * 5 = 15.
  EXPECT_EQ(run<uint16_t>({0x4200}, {0x4500}, priocclFloat16, priocclProd),
            (std::vector<uint16_t>{0x4B80}));
  EXPECT_EQ(run<uint16_t>({0x4040}, {0x40A0}, priocclBfloat16, priocclProd),
            (std::vector<uint16_t>{0x4170}));
}

template <class Bits>
void checkMinMaxNaN(priocclDataType_t dt, Bits nanA, Bits nanB, Bits one, Bits two, Bits negZero) {
  // in:    NaN_A  1      NaN_A  -0  2
  // local: 1      NaN_B  NaN_B  +0  2
  const std::vector<Bits> in = {nanA, one, nanA, negZero, two};
  const std::vector<Bits> local = {one, nanB, nanB, Bits(0), two};
  EXPECT_EQ(run<Bits>(in, local, dt, priocclMin),
            (std::vector<Bits>{nanA, nanB, nanA, negZero, two}));
  EXPECT_EQ(run<Bits>(in, local, dt, priocclMax),
            (std::vector<Bits>{nanA, nanB, nanA, negZero, two}));
  // Ordinary values.
  EXPECT_EQ(run<Bits>({one, two}, {two, one}, dt, priocclMin), (std::vector<Bits>{one, one}));
  EXPECT_EQ(run<Bits>({one, two}, {two, one}, dt, priocclMax), (std::vector<Bits>{two, two}));
  EXPECT_EQ(run<Bits>({Bits(0)}, {negZero}, dt, priocclMin), (std::vector<Bits>{Bits(0)}));
}

TEST(Apply, MinMaxNaNAndTies) {
  checkMinMaxNaN<uint32_t>(priocclFloat32, 0x7FC00001u, 0xFFC00002u, 0x3F800000u, 0x40000000u,
                           0x80000000u);
  checkMinMaxNaN<uint64_t>(priocclFloat64, 0x7FF8000000000001ull, 0xFFF8000000000002ull,
                           0x3FF0000000000000ull, 0x4000000000000000ull, 0x8000000000000000ull);
  checkMinMaxNaN<uint16_t>(priocclFloat16, 0x7E01, 0xFD02, 0x3C00, 0x4000, 0x8000);
  checkMinMaxNaN<uint16_t>(priocclBfloat16, 0x7FC1, 0xFF82, 0x3F80, 0x4000, 0x8000);
}

TEST(Apply, Aliasing) {
  const size_t n = 1000;
  std::vector<float> a(n), b(n), want(n);
  std::vector<int8_t> c(n), d(n), wantInt(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = float(i) * 0.5f;
    b[i] = 3.0f - float(i);
    want[i] = a[i] + b[i];
    c[i] = int8_t(i);
    d[i] = int8_t(3 * i + 1);
    wantInt[i] = int8_t(uint8_t(c[i]) * uint8_t(d[i]));
  }
  std::vector<float> x = a;
  apply(x.data(), x.data(), b.data(), n, priocclFloat32, priocclSum, 1);  // dst == in
  EXPECT_EQ(x, want);
  x = b;
  apply(x.data(), a.data(), x.data(), n, priocclFloat32, priocclSum, 1);  // dst == local
  EXPECT_EQ(x, want);
  x = a;
  apply(x.data(), x.data(), x.data(), n, priocclFloat32, priocclSum, 1);  // all three
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(x[i], a[i] * 2) << i;
  std::vector<int8_t> y = d;
  apply(y.data(), c.data(), y.data(), n, priocclInt8, priocclProd, 1);
  EXPECT_EQ(y, wantInt);
  // dst == in for a 16-bit type: half 1.0 + 2.0 = 3.0.
  std::vector<uint16_t> h(n, 0x3C00), h2(n, 0x4000);
  apply(h.data(), h.data(), h2.data(), n, priocclFloat16, priocclSum, 1);
  EXPECT_EQ(h, std::vector<uint16_t>(n, 0x4200));
}

TEST(Apply, ZeroCountTouchesNothing) {
  std::vector<int32_t> a = {1}, b = {2}, out = {42};
  apply(out.data(), a.data(), b.data(), 0, priocclInt32, priocclSum, 1);
  EXPECT_EQ(out[0], 42);
  apply(nullptr, nullptr, nullptr, 0, priocclFloat16, priocclAvg, 4);
}

TEST(Metadata, SizesNamesValidity) {
  EXPECT_EQ(prioccl::reduce::dtypeSize(priocclInt8), 1u);
  EXPECT_EQ(prioccl::reduce::dtypeSize(priocclUint8), 1u);
  EXPECT_EQ(prioccl::reduce::dtypeSize(priocclInt32), 4u);
  EXPECT_EQ(prioccl::reduce::dtypeSize(priocclInt64), 8u);
  EXPECT_EQ(prioccl::reduce::dtypeSize(priocclFloat16), 2u);
  EXPECT_EQ(prioccl::reduce::dtypeSize(priocclBfloat16), 2u);
  EXPECT_EQ(prioccl::reduce::dtypeSize(priocclFloat32), 4u);
  EXPECT_EQ(prioccl::reduce::dtypeSize(priocclFloat64), 8u);
  EXPECT_STREQ(prioccl::reduce::dtypeName(priocclInt8), "int8");
  EXPECT_STREQ(prioccl::reduce::dtypeName(priocclUint8), "uint8");
  EXPECT_STREQ(prioccl::reduce::dtypeName(priocclInt32), "int32");
  EXPECT_STREQ(prioccl::reduce::dtypeName(priocclInt64), "int64");
  EXPECT_STREQ(prioccl::reduce::dtypeName(priocclUint32), "uint32");
  EXPECT_STREQ(prioccl::reduce::dtypeName(priocclUint64), "uint64");
  EXPECT_EQ(prioccl::reduce::dtypeSize(priocclUint32), 4u);
  EXPECT_EQ(prioccl::reduce::dtypeSize(priocclUint64), 8u);
  EXPECT_STREQ(prioccl::reduce::dtypeName(priocclFloat16), "float16");
  EXPECT_STREQ(prioccl::reduce::dtypeName(priocclBfloat16), "bfloat16");
  EXPECT_STREQ(prioccl::reduce::dtypeName(priocclFloat32), "float32");
  EXPECT_STREQ(prioccl::reduce::dtypeName(priocclFloat64), "float64");
  EXPECT_STREQ(prioccl::reduce::opName(priocclSum), "sum");
  EXPECT_STREQ(prioccl::reduce::opName(priocclProd), "prod");
  EXPECT_STREQ(prioccl::reduce::opName(priocclMin), "min");
  EXPECT_STREQ(prioccl::reduce::opName(priocclMax), "max");
  EXPECT_STREQ(prioccl::reduce::opName(priocclAvg), "avg");
  for (int dt = 0; dt < priocclNumTypes; ++dt) EXPECT_TRUE(prioccl::reduce::isValidDtype(dt));
  EXPECT_FALSE(prioccl::reduce::isValidDtype(-1));
  EXPECT_FALSE(prioccl::reduce::isValidDtype(10));
  for (int op = 0; op < priocclNumOps; ++op) EXPECT_TRUE(prioccl::reduce::isValidOp(op));
  EXPECT_FALSE(prioccl::reduce::isValidOp(-1));
  EXPECT_FALSE(prioccl::reduce::isValidOp(5));
}

// A joined rank's contribution (priocclJoin): the identity of every op, so the others' result
// keeps its bits. Random bit patterns of every type (NaNs skipped: their payload may change).
TEST(FillIdentity, LeavesTheOtherOperandsBits) {
  Rng rng(2026);
  for (int dti = 0; dti < priocclNumTypes; ++dti) {
    auto dt = static_cast<priocclDataType_t>(dti);
    size_t elem = prioccl::reduce::dtypeSize(dt);
    for (priocclRedOp_t op : {priocclSum, priocclProd, priocclMin, priocclMax}) {
      SCOPED_TRACE(std::string(prioccl::reduce::dtypeName(dt)) + " " + prioccl::reduce::opName(op));
      const size_t n = 4096;
      std::vector<unsigned char> id(n * elem, 0xAB), x(n * elem), out(n * elem);
      prioccl::reduce::fillIdentity(id.data(), n, dt, op);
      for (auto& b : x) b = static_cast<unsigned char>(rng());
      // Specials among the random bits: both zeros and both infinities of the float types.
      if (dt == priocclFloat32) {
        float sp[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()};
        std::memcpy(x.data(), sp, sizeof sp);
      }
      for (bool first : {true, false}) {
        apply(out.data(), first ? id.data() : x.data(), first ? x.data() : id.data(), n, dt, op, 1);
        for (size_t i = 0; i < n; ++i) {
          const unsigned char* xi = x.data() + i * elem;
          bool nan = false;
          if (dt == priocclFloat32) {
            float f;
            std::memcpy(&f, xi, 4);
            nan = std::isnan(f);
          }
          if (dt == priocclFloat64) {
            double f;
            std::memcpy(&f, xi, 8);
            nan = std::isnan(f);
          }
          if (dt == priocclFloat16 || dt == priocclBfloat16) {
            uint16_t h;
            std::memcpy(&h, xi, 2);
            nan = dt == priocclFloat16 ? (h & 0x7c00) == 0x7c00 && (h & 0x3ff)
                                       : (h & 0x7f80) == 0x7f80 && (h & 0x7f);
          }
          if (nan) continue;
          ASSERT_EQ(std::memcmp(out.data() + i * elem, xi, elem), 0)
              << "element " << i << (first ? " (identity first)" : " (identity second)");
        }
      }
    }
  }
  // Avg: its identity is Sum's.
  std::vector<float> a(3, 5.0f);
  prioccl::reduce::fillIdentity(a.data(), 3, priocclFloat32, priocclAvg);
  for (float v : a) EXPECT_TRUE(std::signbit(v) && v == 0.0f);
}

}  // namespace
