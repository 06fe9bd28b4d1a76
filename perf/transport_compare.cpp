// allreduce_perf --transport all; see transport_compare.h. Noise handling: Interleaved
// (allreduce_common.h), as --algo all.
#include "transport_compare.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace perf {
namespace {

// Variants 0, 1: prioccl communicators over these transports; variant kMpi: MPI_Allreduce.
constexpr priocclTransport_t kTransports[] = {priocclTransportMpi, priocclTransportUcx};
constexpr const char* kNames[] = {"mpi-tp", "ucx-tp", "MPI_Allreduce"};
constexpr int kComms = 2, kMpi = kComms;
constexpr size_t kLarge = 1 << 20;  // the summary's "large" sizes: bandwidth, not latency, bound

}  // namespace

long long compareTransports(const AllReduceOptions& o, int rank, int p) {
  const DtypeInfo& dt = *o.dtype;
  const OpInfo& op = *o.op;
  // Each communicator resolves its own auto chunk and credit sizes from its own transport's
  // links, as it would run alone. (prioccl measures the algorithm model once per process, ranks
  // and chunk size, so with equal chunk sizes the second communicator reuses the first's.)
  std::vector<prioccl::Communicator> comms;
  for (priocclTransport_t t : kTransports) {
    prioccl::Config cfg = o.config;
    cfg.transport = t;
    comms.push_back(prioccl::Communicator::world(cfg));
  }

  Inputs in(op.op, p);
  size_t maxCount = std::max<size_t>(1, o.maxBytes / dt.size);
  // Inputs do not depend on the size, so one fill serves every size.
  std::vector<unsigned char> send(maxCount * dt.size), recv(maxCount * dt.size);
  fill(in, rank, dt.type, send.data(), maxCount);
  bool mpiOk = o.mpiBaseline && dt.mpi != MPI_DATATYPE_NULL;
  const Interleaved timing(o.iters);
  if (rank == 0) {
    std::printf(
        "# prioccl allreduce_perf --transport all, out of place: nranks %d, dtype %s, op %s\n", p,
        dt.name, op.name);
    for (int k = 0; k < kComms; ++k)
      std::printf("# config %s: %s\n", kNames[k], comms[k].config().describe().c_str());
    std::printf(
        "# auto chunk/credit: each from its own transport's links; algorithm model: measured once "
        "per process, ranks and chunk size (equal chunk sizes share the first's)\n");
    std::printf("# iters %d per variant (%d blocks of %d), warmup %d, check %d, baseline %s%s\n",
                timing.blocks * timing.perBlock, timing.blocks, timing.perBlock, o.warmup, o.check,
                o.mpiBaseline ? "MPI_Allreduce" : "none",
                o.mpiBaseline && !mpiOk ? " (MPI has no such dtype: n/a)" : "");
    std::printf(
        "# time: median over blocks of the mean per iteration (slowest rank); variants "
        "interleaved per block, each after one untimed op\n");
    if (op.op == priocclAvg && mpiOk)
      std::printf("# MPI avg = MPI_SUM, then a local divide by nranks (timed)\n");
    std::printf(
        "# mpi-tp, ucx-tp: prioccl over the MPI and UCX transports; MPI_Ar: MPI_Allreduce; bw: "
        "busbw (GB/s) = algbw*2(p-1)/p (0 when p = 1)\n");
    std::printf(
        "# ucx/mpi = ucx-tp busbw / mpi-tp busbw (= mpi-tp time / ucx-tp time); #wrong: all "
        "variants\n#\n");
    std::printf("#%11s  %12s  %8s  %6s  %10s  %9s  %10s  %9s  %10s  %9s  %6s  %7s\n", "size",
                "count", "type", "redop", "mpi-tp(us)", "mpi-tp bw", "ucx-tp(us)", "ucx-tp bw",
                "MPI_Ar(us)", "MPI_Ar bw", "#wrong", "ucx/mpi");
  }

  long long wrongTotal = 0;
  std::vector<double> ratios;
  double minRatio = NAN, minLarge = NAN;
  size_t minBytes = 0;
  for (long long bytes = o.minBytes; bytes <= o.maxBytes; bytes *= o.factor) {
    size_t count = std::max<size_t>(1, bytes / dt.size), nbytes = count * dt.size;
    int variants = mpiOk && count <= INT_MAX ? kComms + 1 : kComms;
    auto run = [&](int v) {
      if (v == kMpi)
        mpiAllReduce(dt, op, send.data(), recv.data(), count, p);
      else
        comms[v].allReduce(send.data(), recv.data(), count, dt.type, op.op);
    };
    SizeResult r = measureSize(o, in, recv.data(), count, variants, timing, run);
    const std::vector<long long>& wrongs = r.wrongs;
    const std::vector<double>& med = r.seconds;
    long long wrong = r.wrong;
    if (o.check) wrongTotal += wrong;

    double ratio = med[0] / med[1];  // busbw ratio; defined at p = 1 too, where busbw is 0
    ratios.push_back(ratio);
    if (std::isnan(minRatio) || ratio < minRatio) {
      minRatio = ratio;
      minBytes = nbytes;
    }
    if (nbytes >= kLarge && (std::isnan(minLarge) || ratio < minLarge)) minLarge = ratio;
    char mpiCols[32];
    if (variants > kMpi)
      std::snprintf(mpiCols, sizeof mpiCols, "%10.1f  %9.3f", med[kMpi] * 1e6,
                    busBandwidth(nbytes, med[kMpi], p));
    else
      std::snprintf(mpiCols, sizeof mpiCols, "%10s  %9s", "n/a", "n/a");
    if (rank == 0) {
      std::printf("%12zu  %12zu  %8s  %6s  %10.1f  %9.3f  %10.1f  %9.3f  %s  %6s  %7.3f\n", nbytes,
                  count, dt.name, op.name, med[0] * 1e6, busBandwidth(nbytes, med[0], p),
                  med[1] * 1e6, busBandwidth(nbytes, med[1], p), mpiCols, wrongText(wrong).c_str(),
                  ratio);
      for (int v = 0; v < variants; ++v)
        if (wrongs[v] > 0) std::printf("#   ^ %s: %lld wrong\n", kNames[v], wrongs[v]);
      std::fflush(stdout);
    }
    if (o.factor < 2) break;  // -b == -e: one size
  }
  if (rank == 0) {
    char large[16] = "n/a";
    if (!std::isnan(minLarge)) std::snprintf(large, sizeof large, "%.3f", minLarge);
    std::printf(
        "# ucx/mpi transport busbw ratio: min %.3f at %zu B, median %.3f (sizes >= 1 MiB: min "
        "%s)\n",
        minRatio, minBytes, median(ratios), large);
    for (int k = 0; k < kComms; ++k)
      std::printf("# model %s: %s\n", kNames[k], comms[k].algorithmModel().c_str());
    printOutOfBounds(o.check, wrongTotal);
  }
  for (prioccl::Communicator& c : comms) c.destroy();
  return wrongTotal;
}

}  // namespace perf
