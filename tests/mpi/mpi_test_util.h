// Small helpers the multi-rank tests share.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstring>

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

}  // namespace prioccl::test
