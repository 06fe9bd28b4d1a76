// Element-wise reduction kernels: templates over (type, op) so each inner loop is simple; the
// element functions are elementwise.h's, which the CUDA kernels share.
#include "reduce/reduce.h"

#include <atomic>
#include <cstdint>
#include <limits>
#include <type_traits>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "reduce/elementwise.h"
#include "reduce/half.h"

namespace prioccl {
namespace reduce {
namespace {

// No __restrict: dst may be in or local. Each element is read before its own slot is written, so
// exact aliasing is safe and the compiler's runtime overlap check still takes the vector path.
template <priocclRedOp_t Op, class T>
void kernel(T* d, const T* a, const T* b, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = combine<Op>(a[i], b[i]);
}

// Final step of an Avg (divisor > 1): wrapped sum, then divide.
template <class T>
void avgKernel(T* d, const T* a, const T* b, size_t n, int divisor) {
  const DivisorOf<T> div = static_cast<DivisorOf<T>>(divisor);
  for (size_t i = 0; i < n; ++i) d[i] = average(a[i], b[i], div);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define PRIOCCL_SIMD16 1
// The 16-bit floats on x86, 8 lanes at a time: the portable codec (half.h) does not vectorise
// (float16 measured 0.5-0.8 GB/s, bfloat16 2.5-3.2). float16 converts with F16C (vcvtph2ps is
// exact; vcvtps2ph with immediate rounding 0 rounds to nearest even and quiets NaNs keeping sign
// and top payload bits, as floatToHalf does), bfloat16 with floatToBf16's bit operations in AVX2;
// the arithmetic between is float32's, so the bits are the codec's (unit.test_reduce).
// Every CPU with AVX2 has F16C; both are asked for (clang's __builtin_cpu_supports does not know
// "f16c": CPUID), with the OS's support for AVX registers.
bool haveSimd16() {
  static const bool yes = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) &&
           (ecx & bit_F16C) != 0;
  }();
  return yes;
}

#define PRIOCCL_SIMD16_INLINE __attribute__((target("avx2,f16c"), always_inline)) inline

// 8 lanes of each type: widened to float32, and narrowed back rounding once.
struct HalfLanes {
  using Codec = HalfCodec;
  static PRIOCCL_SIMD16_INLINE __m256 widen(__m128i v) { return _mm256_cvtph_ps(v); }
  static PRIOCCL_SIMD16_INLINE __m128i narrow(__m256 v) {
    return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
  }
};

struct Bf16Lanes {
  using Codec = Bf16Codec;
  static PRIOCCL_SIMD16_INLINE __m256 widen(__m128i v) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
  }
  // floatToBf16: round to nearest even; NaNs quieted keeping sign and top payload bits.
  static PRIOCCL_SIMD16_INLINE __m128i narrow(__m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x0040));
    const __m256i isNan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)),
                                             _mm256_set1_epi32(0x7F800000));
    const __m256i bits = _mm256_blendv_epi8(rounded, nan, isNan);  // each < 2^16
    // packus works within 128-bit halves: lanes 0-3 and 4-7 land in 64-bit words 0 and 2.
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08));
  }
};

template <class Lanes, priocclRedOp_t Op>
__attribute__((target("avx2,f16c"))) void kernel16Simd(uint16_t* d, const uint16_t* a,
                                                       const uint16_t* b, size_t n, float div) {
  const __m256 divisor = _mm256_set1_ps(div);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {  // both loads before the store: d may be a or b
    const __m128i xa = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i));
    const __m128i ya = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i));
    const __m256 x = Lanes::widen(xa), y = Lanes::widen(ya);
    __m128i r;
    if constexpr (Op == priocclMin || Op == priocclMax) {
      // takeSecond (x is a number, and y is NaN or strictly smaller / larger) picks y's bits,
      // else x's: the chosen operand unchanged, as combine16 returns it.
      const __m256 yWins =
          _mm256_and_ps(_mm256_cmp_ps(x, x, _CMP_EQ_OQ),
                        _mm256_cmp_ps(y, x, Op == priocclMin ? _CMP_NGE_UQ : _CMP_NLE_UQ));
      const __m256i m32 = _mm256_castps_si256(yWins);
      const __m128i m16 =
          _mm_packs_epi32(_mm256_castsi256_si128(m32), _mm256_extracti128_si256(m32, 1));
      r = _mm_or_si128(_mm_and_si128(m16, ya), _mm_andnot_si128(m16, xa));
    } else if constexpr (Op == priocclProd) {
      r = Lanes::narrow(_mm256_mul_ps(x, y));
    } else if constexpr (Op == priocclAvg) {
      r = Lanes::narrow(_mm256_div_ps(_mm256_add_ps(x, y), divisor));
    } else {
      r = Lanes::narrow(_mm256_add_ps(x, y));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), r);
  }
  for (; i < n; ++i) d[i] = combine16<typename Lanes::Codec, Op>(a[i], b[i], div);
}
#endif

template <class Codec, priocclRedOp_t Op>
void kernel16(uint16_t* d, const uint16_t* a, const uint16_t* b, size_t n, float div) {
#ifdef PRIOCCL_SIMD16
  if (haveSimd16()) {
    using Lanes = std::conditional_t<std::is_same_v<Codec, HalfCodec>, HalfLanes, Bf16Lanes>;
    return kernel16Simd<Lanes, Op>(d, a, b, n, div);
  }
#endif
  for (size_t i = 0; i < n; ++i) d[i] = combine16<Codec, Op>(a[i], b[i], div);
}

template <class T>
void applyTyped(void* dst, const void* in, const void* local, size_t n, priocclRedOp_t op,
                int divisor) {
  T* d = static_cast<T*>(dst);
  const T* a = static_cast<const T*>(in);
  const T* b = static_cast<const T*>(local);
  switch (op) {
    case priocclSum:
      return kernel<priocclSum>(d, a, b, n);
    case priocclProd:
      return kernel<priocclProd>(d, a, b, n);
    case priocclMin:
      return kernel<priocclMin>(d, a, b, n);
    case priocclMax:
      return kernel<priocclMax>(d, a, b, n);
    case priocclAvg:
      if (divisor > 1) return avgKernel(d, a, b, n, divisor);
      return kernel<priocclSum>(d, a, b, n);
    case priocclNumOps:
      break;
  }
}

template <class Codec>
void apply16(void* dst, const void* in, const void* local, size_t n, priocclRedOp_t op,
             int divisor) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* a = static_cast<const uint16_t*>(in);
  const uint16_t* b = static_cast<const uint16_t*>(local);
  switch (op) {
    case priocclSum:
      return kernel16<Codec, priocclSum>(d, a, b, n, 1.0f);
    case priocclProd:
      return kernel16<Codec, priocclProd>(d, a, b, n, 1.0f);
    case priocclMin:
      return kernel16<Codec, priocclMin>(d, a, b, n, 1.0f);
    case priocclMax:
      return kernel16<Codec, priocclMax>(d, a, b, n, 1.0f);
    case priocclAvg:
      if (divisor > 1) {
        return kernel16<Codec, priocclAvg>(d, a, b, n, static_cast<float>(divisor));
      }
      return kernel16<Codec, priocclSum>(d, a, b, n, 1.0f);
    case priocclNumOps:
      break;
  }
}

// The identity of op in T (Avg: Sum's). Floats: -0 for Sum (x + -0 is x, also for x = -0,
// where +0 would give +0), infinities for Min/Max.
template <class T>
T identityOf(priocclRedOp_t op) {
  constexpr bool kFloat = std::is_floating_point_v<T>;
  switch (op) {
    case priocclSum:
    case priocclAvg:
      return kFloat ? -T(0) : T(0);
    case priocclProd:
      return T(1);
    case priocclMin:
      return kFloat ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::max();
    case priocclMax:
      return kFloat ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest();
    default:
      return T(0);
  }
}

// An Avg's final division alone: what avgKernel gives with the identity as one operand.
template <class T>
void divideTyped(void* data, size_t n, int divisor) {
  T* d = static_cast<T*>(data);
  const DivisorOf<T> div = static_cast<DivisorOf<T>>(divisor);
  for (size_t i = 0; i < n; ++i) d[i] = divideBy(d[i], div);
}

template <class Codec>
void divideHalves(void* data, size_t n, int divisor) {
  uint16_t* d = static_cast<uint16_t*>(data);
  const float div = static_cast<float>(divisor);
  for (size_t i = 0; i < n; ++i) d[i] = divide16<Codec>(d[i], div);
}

template <class T>
void fillWith(void* dst, size_t n, T value) {
  T* d = static_cast<T*>(dst);
  for (size_t i = 0; i < n; ++i) d[i] = value;
}

}  // namespace

size_t dtypeSize(priocclDataType_t dt) {
  switch (dt) {
    case priocclInt8:
    case priocclUint8:
      return 1;
    case priocclFloat16:
    case priocclBfloat16:
      return 2;
    case priocclInt32:
    case priocclUint32:
    case priocclFloat32:
      return 4;
    case priocclInt64:
    case priocclUint64:
    case priocclFloat64:
      return 8;
    case priocclNumTypes:
      break;
  }
  return 0;
}

bool isValidDtype(int dt) {
  return dt >= 0 && dt < priocclNumTypes;
}

bool isValidOp(int op) {
  return op >= 0 && op < priocclNumOps;
}

const char* dtypeName(priocclDataType_t dt) {
  switch (dt) {
    case priocclInt8:
      return "int8";
    case priocclUint8:
      return "uint8";
    case priocclInt32:
      return "int32";
    case priocclUint32:
      return "uint32";
    case priocclInt64:
      return "int64";
    case priocclUint64:
      return "uint64";
    case priocclFloat16:
      return "float16";
    case priocclBfloat16:
      return "bfloat16";
    case priocclFloat32:
      return "float32";
    case priocclFloat64:
      return "float64";
    case priocclNumTypes:
      break;
  }
  return "invalid";
}

const char* opName(priocclRedOp_t op) {
  switch (op) {
    case priocclSum:
      return "sum";
    case priocclProd:
      return "prod";
    case priocclMin:
      return "min";
    case priocclMax:
      return "max";
    case priocclAvg:
      return "avg";
    case priocclNumOps:
      break;
  }
  return "invalid";
}

namespace {
std::atomic<ArithmeticTap*> tapped{nullptr};

// The tap's part of a call over n elements of dt: counts them; true when the call must do nothing.
bool tappedAndSkipped(size_t n, priocclDataType_t dt) {
  ArithmeticTap* tap = tapped.load(std::memory_order_relaxed);
  if (!tap) return false;
  tap->bytes += n * dtypeSize(dt);
  return tap->skip;
}
}  // namespace

void tapArithmetic(ArithmeticTap* tap) {
  tapped.store(tap, std::memory_order_relaxed);
}

void apply(void* dst, const void* in, const void* local, size_t n, priocclDataType_t dt,
           priocclRedOp_t op, int divisor) {
  if (tappedAndSkipped(n, dt)) return;
  switch (dt) {
    case priocclInt8:
      return applyTyped<int8_t>(dst, in, local, n, op, divisor);
    case priocclUint8:
      return applyTyped<uint8_t>(dst, in, local, n, op, divisor);
    case priocclInt32:
      return applyTyped<int32_t>(dst, in, local, n, op, divisor);
    case priocclUint32:
      return applyTyped<uint32_t>(dst, in, local, n, op, divisor);
    case priocclInt64:
      return applyTyped<int64_t>(dst, in, local, n, op, divisor);
    case priocclUint64:
      return applyTyped<uint64_t>(dst, in, local, n, op, divisor);
    case priocclFloat16:
      return apply16<HalfCodec>(dst, in, local, n, op, divisor);
    case priocclBfloat16:
      return apply16<Bf16Codec>(dst, in, local, n, op, divisor);
    case priocclFloat32:
      return applyTyped<float>(dst, in, local, n, op, divisor);
    case priocclFloat64:
      return applyTyped<double>(dst, in, local, n, op, divisor);
    case priocclNumTypes:
      break;
  }
}

void fillIdentity(void* dst, size_t n, priocclDataType_t dt, priocclRedOp_t op) {
  if (tappedAndSkipped(n, dt)) return;
  if (!isValidOp(op)) return;
  switch (dt) {
    case priocclInt8:
      return fillWith(dst, n, identityOf<int8_t>(op));
    case priocclUint8:
      return fillWith(dst, n, identityOf<uint8_t>(op));
    case priocclInt32:
      return fillWith(dst, n, identityOf<int32_t>(op));
    case priocclUint32:
      return fillWith(dst, n, identityOf<uint32_t>(op));
    case priocclInt64:
      return fillWith(dst, n, identityOf<int64_t>(op));
    case priocclUint64:
      return fillWith(dst, n, identityOf<uint64_t>(op));
    case priocclFloat32:
      return fillWith(dst, n, identityOf<float>(op));
    case priocclFloat64:
      return fillWith(dst, n, identityOf<double>(op));
    case priocclFloat16:  // exact in both 16-bit types: 0, 1 and the infinities
      return fillWith(dst, n, floatToHalf(identityOf<float>(op)));
    case priocclBfloat16:
      return fillWith(dst, n, floatToBf16(identityOf<float>(op)));
    case priocclNumTypes:
      break;
  }
}

void divide(void* data, size_t n, priocclDataType_t dt, int divisor) {
  if (divisor <= 1) return;
  if (tappedAndSkipped(n, dt)) return;
  switch (dt) {
    case priocclInt8:
      return divideTyped<int8_t>(data, n, divisor);
    case priocclUint8:
      return divideTyped<uint8_t>(data, n, divisor);
    case priocclInt32:
      return divideTyped<int32_t>(data, n, divisor);
    case priocclUint32:
      return divideTyped<uint32_t>(data, n, divisor);
    case priocclInt64:
      return divideTyped<int64_t>(data, n, divisor);
    case priocclUint64:
      return divideTyped<uint64_t>(data, n, divisor);
    case priocclFloat32:
      return divideTyped<float>(data, n, divisor);
    case priocclFloat64:
      return divideTyped<double>(data, n, divisor);
    case priocclFloat16:
      return divideHalves<HalfCodec>(data, n, divisor);
    case priocclBfloat16:
      return divideHalves<Bf16Codec>(data, n, divisor);
    case priocclNumTypes:
      break;
  }
}

}  // namespace reduce
}  // namespace prioccl
