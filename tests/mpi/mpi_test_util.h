// Small helpers the multi-rank tests share.
#pragma once

#include <mpi.h>

#include <cstring>

namespace prioccl::test {

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
