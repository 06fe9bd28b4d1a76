// What allreduce_perf.cpp and the compare modes (algo_compare.cpp, transport_compare.cpp) share:
// inputs whose all-reduce result is known exactly, the result check, the MPI_Allreduce baseline,
// the all-reduce bus bandwidth, and the compare modes' interleaved timing. reduce_perf.cpp and
// reduce_scatter_perf.cpp use the inputs and the bitwise checks (countWrongBits,
// countInputsChanged) too. The options and the rest of the driver are every perf tool's
// (nccl_perf.h).
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "nccl_perf.h"

namespace perf {

// Inputs are small non-negative integers, a function of (rank, index), chosen so that every
// dtype -- int8 (<= 127) and bfloat16 (integers <= 256) included -- holds every input, every
// partial result and the final result exactly for up to 127 ranks; nothing wraps, so Open MPI's
// saturating 8-bit AVX sums agree. The expected value is recomputed from all ranks' formulas.
struct Inputs {
  priocclRedOp_t op;
  int p;
  int64_t a;  // per-rank bound for sum/avg: p * a <= 127

  Inputs(priocclRedOp_t o, int nranks) : op(o), p(nranks), a(std::max(1, 127 / nranks)) {}

  int64_t value(int r, uint64_t i) const {
    switch (op) {
      case priocclSum:
        return static_cast<int64_t>((r + 1) * (i % 7 + 1) % (a + 1));
      case priocclAvg: {
        // m(i) on every rank plus +-1 cancelling within rank pairs: the sum is p * m(i), so the
        // average is exact in every type (no rounding of sum / p to reason about).
        int64_t m = static_cast<int64_t>(i % a) + 1;
        if (r / 2 * 2 + 1 >= p) return m;  // the unpaired last rank
        int64_t s = (i + r / 2) % 2 ? 1 : -1;
        return m + (r % 2 ? s : -s);
      }
      case priocclProd:  // factors 1 or 2, at most six 2s: products <= 64
        return r < 6 && ((i >> r) & 1) ? 2 : 1;
      case priocclMin:
      case priocclMax:
        return static_cast<int64_t>(((r + 1) * (i % 7 + 1) * 13 + i) % 101);
      default:  // priocclNumOps: not an op; findOp never returns it
        break;
    }
    return 0;
  }

  double expected(uint64_t i) const {
    int64_t acc = value(0, i);
    for (int r = 1; r < p; ++r) {
      int64_t v = value(r, i);
      acc = op == priocclProd  ? acc * v
            : op == priocclMin ? std::min(acc, v)
            : op == priocclMax ? std::max(acc, v)
                               : acc + v;
    }
    return static_cast<double>(op == priocclAvg ? acc / p : acc);
  }
};

inline void fill(const Inputs& in, int rank, priocclDataType_t type, void* buf, size_t count) {
  withCodec(type, [&](auto codec) {
    auto* s = static_cast<typename decltype(codec)::Storage*>(buf);
    for (size_t i = 0; i < count; ++i) s[i] = codec.enc(in.value(rank, i));
  });
}

// Elements of `buf` (this rank's result) that differ from the expected result.
inline long long countWrong(const Inputs& in, priocclDataType_t type, const void* buf,
                            size_t count) {
  long long wrong = 0;
  withCodec(type, [&](auto codec) {
    auto* s = static_cast<const typename decltype(codec)::Storage*>(buf);
    for (size_t i = 0; i < count; ++i) wrong += codec.dec(s[i]) != in.expected(i);
  });
  return wrong;
}

// Elements of `buf` that differ bitwise from the encoded expected result of elements first,
// first + 1, ..., first + count - 1 (a reduce-scatter's block starts at rank * count). Bitwise:
// every input and result is a small integer that each type holds exactly with one encoding.
inline long long countWrongBits(const Inputs& in, priocclDataType_t type, const void* buf,
                                size_t count, size_t first = 0) {
  long long wrong = 0;
  withCodec(type, [&](auto codec) {
    using S = typename decltype(codec)::Storage;
    auto* s = static_cast<const S*>(buf);
    for (size_t i = 0; i < count; ++i) {
      const S want = codec.enc(static_cast<int64_t>(in.expected(first + i)));
      wrong += std::memcmp(&s[i], &want, sizeof(S)) != 0;
    }
  });
  return wrong;
}

// Elements of `buf` that differ bitwise from `rank`'s inputs (as fill() wrote them): a buffer the
// collective must leave alone.
inline long long countInputsChanged(const Inputs& in, int rank, priocclDataType_t type,
                                    const void* buf, size_t count) {
  long long wrong = 0;
  withCodec(type, [&](auto codec) {
    using S = typename decltype(codec)::Storage;
    auto* s = static_cast<const S*>(buf);
    for (size_t i = 0; i < count; ++i) {
      const S want = codec.enc(in.value(rank, i));
      wrong += std::memcmp(&s[i], &want, sizeof(S)) != 0;
    }
  });
  return wrong;
}

// The MPI baseline's avg: MPI_SUM, then a local divide (inside the timed loop).
inline void divideInPlace(priocclDataType_t type, void* buf, size_t count, int p) {
  withCodec(type, [&](auto codec) {
    if constexpr (decltype(codec)::kNative) {
      using S = typename decltype(codec)::Storage;
      auto* s = static_cast<S*>(buf);
      for (size_t i = 0; i < count; ++i) s[i] = static_cast<S>(s[i] / p);
    }
  });
}

// The MPI baseline's all-reduce of `count` elements (count <= INT_MAX), avg included.
inline void mpiAllReduce(const DtypeInfo& dt, const OpInfo& op, const void* send, void* recv,
                         size_t count, int p) {
  MPI_Allreduce(send, recv, static_cast<int>(count), dt.mpi, op.mpi, MPI_COMM_WORLD);
  if (op.op == priocclAvg) divideInPlace(dt.type, recv, count, p);
}

// nccl-tests' bus bandwidth (GB/s): algbw * 2(p-1)/p, so it is comparable across rank counts
// (0 when p = 1: nothing crosses a link).
inline double busBandwidth(size_t nbytes, double seconds, int p) {
  return p > 1 ? nbytes / seconds / 1e9 * 2.0 * (p - 1) / p : 0.0;
}

// The compare modes' warm-up, which doubles as the check: per variant, poison `recv`, at least one
// untimed run(v), then count wrong elements. Returns each variant's count summed over ranks (all
// 0 when o.check is off). Collective.
template <typename Run>
std::vector<long long> warmUpAndCheck(const BenchOptions& o, const Inputs& in, void* recv,
                                      size_t count, int variants, Run&& run) {
  std::vector<long long> wrongs(variants);
  for (int v = 0; v < variants; ++v) {
    poison(recv, count * o.dtype->size);
    for (int i = 0; i < std::max(1, o.warmup); ++i) run(v);
    if (o.check) wrongs[v] = countWrong(in, o.dtype->type, recv, count);
  }
  if (o.check)
    MPI_Allreduce(MPI_IN_PLACE, wrongs.data(), variants, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return wrongs;
}

// The compare modes' timing of several variants at one size. The benchmark machines are shared,
// so a variant's time is not one long loop: the timed iterations are split into blocks; block b
// runs every variant once (the starting variant rotating with b), so a burst of machine noise hits
// all variants alike. Each variant's turn in a block starts with one untimed op, so switching
// communicators is not timed. A block's time is the slowest rank's mean per iteration, and a
// variant's time the median over its blocks.
struct Interleaved {
  static constexpr int kMaxBlocks = 5;
  int blocks, perBlock;

  explicit Interleaved(int iters)
      : blocks(std::min(kMaxBlocks, iters)), perBlock((iters + blocks - 1) / blocks) {}

  // Seconds per iteration of variants 0..variants-1; run(v) runs variant v once. Collective.
  template <typename Run>
  std::vector<double> time(int variants, Run&& run) const {
    std::vector<double> t(static_cast<size_t>(variants) * blocks);  // [variant][block]
    for (int b = 0; b < blocks; ++b) {
      for (int j = 0; j < variants; ++j) {
        int v = (b + j) % variants;
        run(v);  // untimed: the switch from the previous variant's communicator
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < perBlock; ++i) run(v);
        t[v * blocks + b] = (MPI_Wtime() - t0) / perBlock;
      }
    }
    MPI_Allreduce(MPI_IN_PLACE, t.data(), static_cast<int>(t.size()), MPI_DOUBLE, MPI_MAX,
                  MPI_COMM_WORLD);
    std::vector<double> med(variants);
    for (int v = 0; v < variants; ++v)
      med[v] = median(std::vector<double>(t.begin() + v * blocks, t.begin() + (v + 1) * blocks));
    return med;
  }
};

// Send buffer filled with Inputs for the largest size (inputs do not depend on the size, so one
// fill serves every size), a receive buffer of the same size, and whether MPI_Allreduce can serve
// as the baseline for this dtype.
struct SweepBuffers {
  Inputs in;
  std::vector<unsigned char> send, recv;
  bool mpiOk;
  SweepBuffers(const BenchOptions& o, int rank, int p)
      : in(o.op->op, p),
        send(std::max<size_t>(1, o.maxBytes / o.dtype->size) * o.dtype->size),
        recv(send.size()),
        mpiOk(o.mpiBaseline && o.dtype->mpi != MPI_DATATYPE_NULL) {
    fill(in, rank, o.dtype->type, send.data(), send.size() / o.dtype->size);
  }
};

}  // namespace perf
