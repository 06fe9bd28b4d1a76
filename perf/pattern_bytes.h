// The data of the perf tools whose collectives move bytes without arithmetic (broadcast_perf,
// all_gather_perf, alltoall_perf): pseudo-random bytes of (seed, offset) that any rank can
// recompute, so a receiver checks what arrived bitwise against what the sender generated, and the
// MPI type that moves a datatype's bits.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "perf_common.h"

namespace perf {

// A well-mixed 64-bit function of (seed, word) (splitmix64's finaliser).
inline uint64_t mixBits(int seed, uint64_t word) {
  uint64_t z = (static_cast<uint64_t>(seed) << 48) ^ word;
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Bytes [offset, offset + n) of seed's pattern: byte k is byte k % 8 of mixBits(seed, k / 8), the
// same on every rank and for every datatype and size (a smaller buffer's is a prefix of the
// largest's), and never 0xFF (0xFF becomes 0x7F), the poison, so no element that was never
// written passes as right.
inline void patternBytes(int seed, size_t offset, unsigned char* out, size_t n) {
  for (size_t k = 0; k < n;) {
    const size_t pos = offset + k;
    const uint64_t w = mixBits(seed, pos / 8);
    for (size_t j = pos % 8; j < 8 && k < n; ++j, ++k) {
      auto b = static_cast<unsigned char>(w >> (8 * j));
      out[k] = b == 0xff ? 0x7f : b;
    }
  }
}

// Elements of `got` (`nbytes` bytes, elements of `eltSize` bytes) that differ bitwise from bytes
// [offset, offset + nbytes) of seed's pattern, compared a block at a time.
inline long long countWrongPattern(int seed, size_t offset, const void* got, size_t nbytes,
                                   size_t eltSize) {
  const auto* g = static_cast<const unsigned char*>(got);
  unsigned char want[1 << 14];  // a multiple of every element size
  long long wrong = 0;
  for (size_t off = 0; off < nbytes; off += sizeof want) {
    const size_t n = std::min(sizeof want, nbytes - off);
    patternBytes(seed, offset + off, want, n);
    if (std::memcmp(g + off, want, n) == 0) continue;
    for (size_t e = 0; e < n; e += eltSize)
      wrong += std::memcmp(g + off + e, want + e, eltSize) != 0;
  }
  return wrong;
}

// MPI moves bits: half and bfloat16, which MPI lacks, go as 16-bit integers.
inline MPI_Datatype mpiBitsType(const DtypeInfo& dt) {
  return dt.mpi != MPI_DATATYPE_NULL ? dt.mpi : MPI_UINT16_T;
}

}  // namespace perf
