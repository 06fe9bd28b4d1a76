// allreduce_perf --transport all; see transport_compare.h. Noise handling: Interleaved
// (allreduce_common.h), as --algo all.
#include "transport_compare.h"

#include "compare_sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace perf {
namespace {

// Variants 0, 1: prioccl communicators over these transports; variant kMpi: MPI_Allreduce.
constexpr priocclTransport_t kTransports[] = {priocclTransportMpi, priocclTransportUcx};
constexpr const char* kNames[] = {"mpi-tp", "ucx-tp"};
constexpr int kComms = 2, kMpi = kComms;
constexpr size_t kLarge = 1 << 20;  // the summary's "large" sizes: bandwidth, not latency, bound

}  // namespace

long long compareTransports(const BenchOptions& o, int rank, int p) {
  const DtypeInfo& dt = *o.dtype;
  const OpInfo& op = *o.op;
  // Each communicator resolves its own auto chunk and credit sizes from its own transport's
  // links, as it would run alone; each measures its own algorithm model.
  std::vector<prioccl::Communicator> comms;
  for (priocclTransport_t t : kTransports) {
    prioccl::Config cfg = o.config;
    cfg.transport = t;
    comms.push_back(prioccl::Communicator::world(cfg));
  }

  CompareSweep sweep(o, rank, p, comms, {"mpi-tp", "ucx-tp"});
  if (rank == 0) {
    std::printf(
        "# prioccl allreduce_perf --transport all, out of place: nranks %d, dtype %s, op %s\n", p,
        dt.name, op.name);
    for (int k = 0; k < kComms; ++k)
      std::printf("# config %s: %s\n", kNames[k], comms[k].config().describe().c_str());
    std::printf(
        "# auto chunk/credit: each from its own transport's links; algorithm model: measured once "
        "per process, ranks, chunk size and transport\n");
  }
  sweep.printCommonHeader();
  if (rank == 0) {
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

  std::vector<double> ratios;
  double minRatio = NAN, minLarge = NAN;
  size_t minBytes = 0;
  long long wrongTotal = sweep.run([&](const SizeResult& r) {
    const std::vector<double>& med = r.seconds;
    double ratio = med[0] / med[1];  // busbw ratio; defined at p = 1 too, where busbw is 0
    ratios.push_back(ratio);
    if (std::isnan(minRatio) || ratio < minRatio) {
      minRatio = ratio;
      minBytes = r.nbytes;
    }
    if (r.nbytes >= kLarge && (std::isnan(minLarge) || ratio < minLarge)) minLarge = ratio;
    char mpiCols[32];
    if (r.variants > kMpi)
      std::snprintf(mpiCols, sizeof mpiCols, "%10.1f  %9.3f", med[kMpi] * 1e6,
                    busBandwidth(r.nbytes, med[kMpi], p));
    else
      std::snprintf(mpiCols, sizeof mpiCols, "%10s  %9s", "n/a", "n/a");
    if (rank == 0)
      std::printf("%12zu  %12zu  %8s  %6s  %10.1f  %9.3f  %10.1f  %9.3f  %s  %6s  %7.3f\n",
                  r.nbytes, r.count, dt.name, op.name, med[0] * 1e6,
                  busBandwidth(r.nbytes, med[0], p), med[1] * 1e6,
                  busBandwidth(r.nbytes, med[1], p), mpiCols, wrongText(r.wrong).c_str(), ratio);
  });
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
