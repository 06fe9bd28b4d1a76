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

// Variant k < kComms: a prioccl communicator with algorithm k (0: auto, then every algorithm the
// library has, by its public enum); variant kMpi: MPI_Allreduce.
constexpr int kComms = priocclNumAlgos, kMpi = kComms;
priocclAlgorithm_t algo(int k) {
  return static_cast<priocclAlgorithm_t>(k);
}
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

long long compareAlgorithms(const BenchOptions& o, int rank, int p) {
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
    cfg.algorithm = algo(k);
    comms.push_back(prioccl::Communicator::world(cfg));
  }

  std::vector<std::string> names;
  for (int k = 0; k < kComms; ++k) names.push_back(prioccl::algorithmName(algo(k)));
  std::string fixed;  // "ring/tree/rd/hd"
  for (int k = 1; k < kComms; ++k) fixed += (k > 1 ? "/" : "") + names[k];
  CompareSweep sweep(o, rank, p, comms, names);
  if (rank == 0) {
    std::printf("# prioccl allreduce_perf --algo all, out of place: nranks %d, dtype %s, op %s\n",
                p, dt.name, op.name);
    std::printf("# config: %s\n", comms[0].config().describe().c_str());
    std::printf("# %s: separate communicators with auto's chunk and credit sizes\n", fixed.c_str());
  }
  sweep.printCommonHeader();
  if (rank == 0) {
    std::printf(
        "# best: fastest of %s; auto/best <= %.2f and mpi/auto >= %.2f are the "
        "targets; #wrong: all variants\n#\n",
        fixed.c_str(), kAutoTarget, kMpiTarget);
    std::printf("#%11s  %12s  %8s  %6s", "size", "count", "type", "redop");
    for (const std::string& n : names) std::printf("  %9s", (n + "(us)").c_str());
    std::printf("  %9s  %5s  %9s  %8s  %6s\n", "mpi(us)", "best", "auto/best", "mpi/auto",
                "#wrong");
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
    if (rank == 0) {
      std::printf("%12zu  %12zu  %8s  %6s", r.nbytes, r.count, dt.name, op.name);
      for (int k = 0; k < kComms; ++k) std::printf("  %9.1f", med[k] * 1e6);
      std::printf("  %9s  %5s  %9.3f  %8s  %6s\n", mpiTime, names[best].c_str(), ratioAuto,
                  mpiRatio, wrongText(r.wrong).c_str());
    }
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
