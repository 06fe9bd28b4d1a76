// allreduce_perf --algo all; see algo_compare.h. Noise handling: Interleaved (allreduce_common.h).
#include "algo_compare.h"

#include "compare_sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace perf {
namespace {

// Variants 0..4: prioccl communicators with these algorithms (0: auto); variant kMpi:
// MPI_Allreduce.
constexpr priocclAlgorithm_t kAlgos[] = {priocclAlgoAuto, priocclAlgoRing, priocclAlgoTree,
                                         priocclAlgoRecursiveDoubling, priocclAlgoHalvingDoubling};
constexpr int kComms = 5, kMpi = kComms;
constexpr double kAutoTarget = 1.05;      // auto/best: auto within 5% of the best fixed algorithm
constexpr double kMpiTarget = 1.0 / 1.1;  // mpi/auto: auto within 1.1x of MPI_Allreduce

// The extreme of a ratio over the sizes, where it was, and how many sizes met the target.
struct Extreme {
  bool wantLow;  // the worst value is the lowest (mpi/auto) rather than the highest (auto/best)
  double value = NAN;
  size_t bytes = 0;
  int sizes = 0, meeting = 0;

  explicit Extreme(bool low) : wantLow(low) {}
  void add(double v, size_t b, double target) {
    ++sizes;
    meeting += wantLow ? v >= target : v <= target;
    if (std::isnan(value) || (wantLow ? v < value : v > value)) {
      value = v;
      bytes = b;
    }
  }
  void print(const char* name, double target) const {
    if (!sizes) {
      std::printf("# %s %s: n/a\n", wantLow ? "min" : "max", name);
      return;
    }
    std::printf("# %s %s: %.3f at %zu B (target %s %.2f: met at %d of %d sizes)\n",
                wantLow ? "min" : "max", name, value, bytes, wantLow ? ">=" : "<=", target, meeting,
                sizes);
  }
};

}  // namespace

long long compareAlgorithms(const AllReduceOptions& o, int rank, int p) {
  const DtypeInfo& dt = *o.dtype;
  const OpInfo& op = *o.op;
  // The auto communicator first: the fixed ones take its resolved tuning (chunk and credit
  // sizes), so the algorithm is all that differs between them.
  std::vector<prioccl::Communicator> comms;
  prioccl::Config cfg = o.config;
  cfg.algorithm = priocclAlgoAuto;
  comms.push_back(prioccl::Communicator::world(cfg));
  for (int k = 1; k < kComms; ++k) {
    cfg = comms[0].config();
    cfg.algorithm = kAlgos[k];
    comms.push_back(prioccl::Communicator::world(cfg));
  }

  CompareSweep sweep(o, rank, p, comms, {"auto", "ring", "tree", "rd", "hd"});
  if (rank == 0) {
    std::printf("# prioccl allreduce_perf --algo all, out of place: nranks %d, dtype %s, op %s\n",
                p, dt.name, op.name);
    std::printf("# config: %s\n", comms[0].config().describe().c_str());
    std::printf(
        "# ring, tree, rd and hd: separate communicators with auto's chunk and credit sizes\n");
  }
  sweep.printCommonHeader();
  if (rank == 0) {
    std::printf(
        "# best: fastest of ring/tree/rd/hd; auto/best <= %.2f and mpi/auto >= %.2f are the "
        "targets; #wrong: all variants\n#\n",
        kAutoTarget, kMpiTarget);
    std::printf("#%11s  %12s  %8s  %6s  %9s  %9s  %9s  %9s  %9s  %9s  %5s  %9s  %8s  %6s\n", "size",
                "count", "type", "redop", "auto(us)", "ring(us)", "tree(us)", "rd(us)", "hd(us)",
                "mpi(us)", "best", "auto/best", "mpi/auto", "#wrong");
  }

  Extreme autoBest(false), mpiAuto(true);
  long long wrongTotal = sweep.run([&](const SizeResult& r) {
    const std::vector<double>& med = r.seconds;
    int best = 1;
    for (int k = 2; k < kComms; ++k)
      if (med[k] < med[best]) best = k;
    double ratioAuto = med[0] / med[best];
    autoBest.add(ratioAuto, r.nbytes, kAutoTarget);
    char mpiTime[16] = "n/a", mpiRatio[16] = "n/a";
    if (r.variants > kMpi) {
      double ratioMpi = med[kMpi] / med[0];
      mpiAuto.add(ratioMpi, r.nbytes, kMpiTarget);
      std::snprintf(mpiTime, sizeof mpiTime, "%.1f", med[kMpi] * 1e6);
      std::snprintf(mpiRatio, sizeof mpiRatio, "%.3f", ratioMpi);
    }
    if (rank == 0)
      std::printf(
          "%12zu  %12zu  %8s  %6s  %9.1f  %9.1f  %9.1f  %9.1f  %9.1f  %9s  %5s  %9.3f  %8s  %6s\n",
          r.nbytes, r.count, dt.name, op.name, med[0] * 1e6, med[1] * 1e6, med[2] * 1e6,
          med[3] * 1e6, med[4] * 1e6, mpiTime, prioccl::algorithmName(kAlgos[best]), ratioAuto,
          mpiRatio, wrongText(r.wrong).c_str());
  });
  if (rank == 0) {
    autoBest.print("auto/best", kAutoTarget);
    mpiAuto.print("mpi/auto", kMpiTarget);
    std::printf("# model: %s\n", comms[0].algorithmModel().c_str());
    printOutOfBounds(o.check, wrongTotal);
  }
  for (prioccl::Communicator& c : comms) c.destroy();
  return wrongTotal;
}

}  // namespace perf
