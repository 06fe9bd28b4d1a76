// Helpers shared by the benchmarks: size parsing, datatype/op tables, half-precision codecs,
// medians and max-over-ranks timing.
#pragma once

#include <mpi.h>
#include <prioccl/prioccl.hpp>

#include "common/parse_size.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace perf {

// "4096", "4K", "64M", "1G" (binary multiples, optional "B"/"iB"): the syntax of the PRIOCCL_*
// variables and the stress test, from the one parser they all share.
inline bool parseBytes(const char* text, long long* out) {
  return prioccl::common::parseSize(text, out);
}

// A non-negative int option ("-n 20").
inline bool parseInt(const char* text, int* out) {
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (end == text || *end || errno != 0 || v < 0 || v > 1000000000) return false;
  *out = static_cast<int>(v);
  return true;
}

struct DtypeInfo {
  const char* name;  // nccl-tests' name, printed in the type column
  priocclDataType_t type;
  size_t size;
  MPI_Datatype mpi;  // MPI_DATATYPE_NULL: MPI has no such type (float16, bfloat16)
};

// Every datatype in nccl-tests' order (its -d all order), with its canonical name. Function-local:
// MPI's handles are not constant expressions in every implementation.
inline const std::vector<DtypeInfo>& allDtypes() {
  static const std::vector<DtypeInfo> table = {{"int8", priocclInt8, 1, MPI_INT8_T},
                                               {"uint8", priocclUint8, 1, MPI_UINT8_T},
                                               {"int32", priocclInt32, 4, MPI_INT32_T},
                                               {"uint32", priocclUint32, 4, MPI_UINT32_T},
                                               {"int64", priocclInt64, 8, MPI_INT64_T},
                                               {"uint64", priocclUint64, 8, MPI_UINT64_T},
                                               {"half", priocclFloat16, 2, MPI_DATATYPE_NULL},
                                               {"float", priocclFloat32, 4, MPI_FLOAT},
                                               {"double", priocclFloat64, 8, MPI_DOUBLE},
                                               {"bfloat16", priocclBfloat16, 2, MPI_DATATYPE_NULL}};
  return table;
}

// By any of nccl-tests' names or prioccl's (char = int8, int = int32, float16 = half,
// float32 = float, float64 = double); nullptr when unknown.
inline const DtypeInfo* findDtype(const std::string& name) {
  static const struct {
    const char* alias;
    priocclDataType_t type;
  } aliases[] = {{"char", priocclInt8},
                 {"int", priocclInt32},
                 {"float16", priocclFloat16},
                 {"float32", priocclFloat32},
                 {"float64", priocclFloat64}};
  for (const auto& d : allDtypes())
    if (name == d.name) return &d;
  for (const auto& a : aliases)
    if (name == a.alias)
      for (const auto& d : allDtypes())
        if (d.type == a.type) return &d;
  return nullptr;
}

struct OpInfo {
  const char* name;
  priocclRedOp_t op;
  MPI_Op mpi;  // avg: MPI has none, so the baseline sums and then divides locally
};

// nccl-tests' order (its -o all order).
inline const std::vector<OpInfo>& allOps() {
  static const std::vector<OpInfo> table = {{"sum", priocclSum, MPI_SUM},
                                            {"prod", priocclProd, MPI_PROD},
                                            {"max", priocclMax, MPI_MAX},
                                            {"min", priocclMin, MPI_MIN},
                                            {"avg", priocclAvg, MPI_SUM}};
  return table;
}

inline const OpInfo* findOp(const std::string& name) {
  for (const auto& o : allOps())
    if (name == o.name) return &o;
  return nullptr;
}

// IEEE binary16 bits of a small non-negative integer (n < 2048, all exact); the benchmarks only
// store such integers, so no rounding logic is needed.
inline uint16_t halfFromInt(int64_t n) {
  if (n <= 0) return 0;
  int e = 0;
  while ((n >> (e + 1)) != 0) ++e;
  uint32_t mant = static_cast<uint32_t>((n << (10 - e)) & 0x3ff);
  return static_cast<uint16_t>(((e + 15) << 10) | mant);
}

// Any binary16 pattern (the result may be garbage: subnormals, inf, NaN all decode).
inline float halfToFloat(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  float v = e == 0    ? std::ldexp(static_cast<float>(m), -24)
            : e == 31 ? (m ? NAN : INFINITY)
                      : std::ldexp(static_cast<float>(m + 1024), e - 25);
  return (h & 0x8000) ? -v : v;
}

// bfloat16 is the top half of a float32; small integers (<= 256) convert exactly.
inline uint16_t bf16FromInt(int64_t n) {
  float f = static_cast<float>(n);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Storage type plus exact encode/decode of small integers, one per prioccl datatype.
template <typename S>
struct NativeCodec {
  using Storage = S;
  static constexpr bool kNative = true;  // MPI can reduce it
  static S enc(int64_t v) { return static_cast<S>(v); }
  static double dec(S s) { return static_cast<double>(s); }
};
struct HalfCodec {
  using Storage = uint16_t;
  static constexpr bool kNative = false;
  static uint16_t enc(int64_t v) { return halfFromInt(v); }
  static double dec(uint16_t s) { return halfToFloat(s); }
};
struct Bf16Codec {
  using Storage = uint16_t;
  static constexpr bool kNative = false;
  static uint16_t enc(int64_t v) { return bf16FromInt(v); }
  static double dec(uint16_t s) { return bf16ToFloat(s); }
};

// Calls fn(codec) with the codec of `type`, so per-element loops are compiled per type.
template <typename Fn>
void withCodec(priocclDataType_t type, Fn&& fn) {
  switch (type) {
    case priocclInt8:
      return fn(NativeCodec<int8_t>{});
    case priocclUint8:
      return fn(NativeCodec<uint8_t>{});
    case priocclInt32:
      return fn(NativeCodec<int32_t>{});
    case priocclUint32:
      return fn(NativeCodec<uint32_t>{});
    case priocclInt64:
      return fn(NativeCodec<int64_t>{});
    case priocclUint64:
      return fn(NativeCodec<uint64_t>{});
    case priocclFloat16:
      return fn(HalfCodec{});
    case priocclBfloat16:
      return fn(Bf16Codec{});
    case priocclFloat32:
      return fn(NativeCodec<float>{});
    case priocclFloat64:
      return fn(NativeCodec<double>{});
    default:  // priocclNumTypes: not a datatype; findDtype never returns it
      return;
  }
}

inline double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The slowest rank's value: a collective is only as fast as its last rank.
inline double maxOverRanks(double v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return v;
}

inline long long sumOverRanks(long long v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return v;
}

// Peak resident memory of this process in bytes (Linux's VmHWM), or -1 where it cannot be read.
inline long long peakResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long long kib = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmHWM: %lld kB", &kib) == 1) break;
  std::fclose(f);
  return kib < 0 ? -1 : kib * 1024;
}

// MPI_THREAD_MULTIPLE: prioccl's progress thread calls MPI while this thread may too.
inline bool initMpi(int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  return provided >= MPI_THREAD_MULTIPLE;
}

}  // namespace perf
