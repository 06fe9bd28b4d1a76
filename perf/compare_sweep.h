// The compare modes' shared body (--algo all, --transport all): prioccl communicators 0..n-1
// and, where MPI has the dtype, MPI_Allreduce as variant n, checked and then timed interleaved
// (Interleaved) at every size of the sweep. A mode prints its own columns from each size's result.
#pragma once

#include <climits>
#include <cstdio>
#include <string>
#include <vector>

#include "allreduce_common.h"

namespace perf {

struct SizeResult {
  size_t nbytes = 0, count = 0;
  int variants = 0;               // n + 1 when MPI_Allreduce ran at this size, else n
  std::vector<long long> wrongs;  // per variant, summed over ranks
  long long wrong = -1;           // all variants together; -1 when not checked
  std::vector<double> seconds;    // per variant: median seconds per iteration
};

class CompareSweep {
 public:
  // `names`: one per communicator, for the "wrong" lines.
  CompareSweep(const BenchOptions& o, int rank, int p, std::vector<prioccl::Communicator>& comms,
               std::vector<std::string> names)
      : o_(o),
        rank_(rank),
        p_(p),
        comms_(comms),
        names_(std::move(names)),
        buf_(o, rank, p),
        timing_(o.iters) {
    names_.push_back("MPI_Allreduce");
  }
  int mpiVariant() const { return static_cast<int>(comms_.size()); }

  // The header lines every compare mode prints (rank 0 only).
  void printCommonHeader() const {
    if (rank_ != 0) return;
    std::printf("# iters %d per variant (%d blocks of %d), warmup %d, check %d, baseline %s%s\n",
                timing_.blocks * timing_.perBlock, timing_.blocks, timing_.perBlock, o_.warmup,
                o_.check, o_.mpiBaseline ? "MPI_Allreduce" : "none",
                o_.mpiBaseline && !buf_.mpiOk ? " (MPI has no such dtype: n/a)" : "");
    std::printf(
        "# time: median over blocks of the mean per iteration (slowest rank); variants "
        "interleaved per block, each after one untimed op\n");
    if (o_.op->op == priocclAvg && buf_.mpiOk)
      std::printf("# MPI avg = MPI_SUM, then a local divide by nranks (timed)\n");
  }

  // Runs every size: row(const SizeResult&) on every rank (rank 0 prints), then rank 0 reports
  // variants with wrong results. Returns the wrong elements over all sizes (0 when unchecked).
  template <typename Row>
  long long run(Row&& row) {
    long long wrongTotal = 0;
    for (long long bytes = o_.minBytes; bytes <= o_.maxBytes; bytes = nextBytes(o_, bytes)) {
      SizeResult r = measure(std::max<size_t>(1, bytes / o_.dtype->size));
      if (o_.check) wrongTotal += r.wrong;
      row(r);
      if (rank_ == 0) {
        for (int v = 0; v < r.variants; ++v)
          if (r.wrongs[v] > 0)
            std::printf("#   ^ %s: %lld wrong\n", names_[v].c_str(), r.wrongs[v]);
        std::fflush(stdout);
      }
    }
    return wrongTotal;
  }

 private:
  SizeResult measure(size_t count) {
    SizeResult r;
    r.count = count;
    r.nbytes = count * o_.dtype->size;
    r.variants = buf_.mpiOk && count <= INT_MAX ? mpiVariant() + 1 : mpiVariant();
    auto one = [&](int v) {
      if (v == mpiVariant())
        mpiAllReduce(*o_.dtype, *o_.op, buf_.send.data(), buf_.recv.data(), count, p_);
      else
        comms_[v].allReduce(buf_.send.data(), buf_.recv.data(), count, o_.dtype->type, o_.op->op);
    };
    r.wrongs = warmUpAndCheck(o_, buf_.in, buf_.recv.data(), count, r.variants, one);
    if (o_.check) {
      r.wrong = 0;
      for (long long w : r.wrongs) r.wrong += w;
    }
    r.seconds = timing_.time(r.variants, one);
    return r;
  }

  const BenchOptions& o_;
  int rank_, p_;
  std::vector<prioccl::Communicator>& comms_;
  std::vector<std::string> names_;
  SweepBuffers buf_;
  Interleaved timing_;
};

}  // namespace perf
