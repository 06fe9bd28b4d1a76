// Small helpers the multi-rank tests share.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "prioccl/prioccl.h"

namespace prioccl::test {

// Sanitized ranks run 5-20x slower on 2 cores. What the sanitizers look for (races, overruns)
// does not need megabytes per op, so the heaviest tests divide their sizes and op counts by this,
// keeping every case and every multi-chunk path.
#ifdef PRIOCCL_TEST_SANITIZED
inline constexpr size_t kSanitizerShrink = 4;
#else
inline constexpr size_t kSanitizerShrink = 1;
#endif

inline int worldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int worldSize() {
  int p = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  return p;
}

// An enum holding an arbitrary int, as C or ctypes callers can pass (a static_cast to an
// out-of-range value would itself be undefined in C++).
template <typename E>
E rawEnum(int v) {
  E e;
  std::memcpy(&e, &v, sizeof e);
  return e;
}

// Every datatype: integers first, then the four float types (kFirstFloat on).
inline constexpr priocclDataType_t kDtypes[] = {
    priocclInt8,   priocclUint8,   priocclInt32,    priocclUint32,  priocclInt64,
    priocclUint64, priocclFloat16, priocclBfloat16, priocclFloat32, priocclFloat64};
inline constexpr size_t kNumDtypes = sizeof(kDtypes) / sizeof(kDtypes[0]);
inline constexpr size_t kFirstFloat = 6;
// Every reduction op.
inline constexpr priocclRedOp_t kOps[] = {priocclSum, priocclProd, priocclMin, priocclMax,
                                          priocclAvg};

// Which half of a matrix runs in place: by the parity of the indices' sum (datatype, op, size,
// ...), so that each value of each index runs both ways while each combination runs once. Every
// combination both ways doubled CI's time for pairings the neighbouring indices run (2026-12-02).
inline bool inPlaceHalf(std::initializer_list<size_t> indices) {
  size_t sum = 0;
  for (size_t i : indices) sum += i;
  return sum % 2 == 1;
}

// Bytes of one element, written here apart from the library's own table.
inline size_t sizeOf(priocclDataType_t dt) {
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
    default:
      return 8;
  }
}

inline uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// n arbitrary bytes (a hash of seed and index): NaNs with payloads, -0.0 and subnormals
// included, so any arithmetic on data that should only move shows as a wrong bit.
inline std::vector<unsigned char> bytesOf(uint64_t seed, size_t n) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t h = mix(seed * 0x100000001b3ULL + i);
    std::memcpy(v.data() + i, &h, n - i < 8 ? n - i : 8);
  }
  return v;
}

}  // namespace prioccl::test
