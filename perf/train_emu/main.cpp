// train_emu: emulated data-parallel training, one rank per host. Compute is slept from a layer
// profile; gradients are real and really all-reduced by prioccl under each gradient-sync
// schedule, and the measured iteration time is set against the physical bound and the fluid
// model's prediction for that schedule. See perf/README section in the top-level README.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "../perf_common.h"
#include "fluid.h"
#include "plan.h"
#include "profile.h"
#include "runner.h"

namespace {

constexpr double kBatchPerRank = 128;  // the batch the profiles were measured at

struct Options {
  std::string profile;
  std::vector<emu::ModeSpec> modes;
  int iters = 10, warmup = 2;
  long long chunkBytes = 0, creditBytes = 0, sliceBytes = 0;
  long long fusionBytes = -1, bucketBytes = -1;  // -1: Horovod's / DDP's default x param-scale
  double computeScale = 1, paramScale = 1, cycleMs = -1;
};

void usage() {
  std::fprintf(
      stderr,
      "usage: train_emu --profile CSV [--modes LIST] [--iters N] [--warmup W]\n"
      "         [--compute-scale C] [--param-scale S] [--chunk-bytes B] [--credit-bytes B]\n"
      "         [--slice-bytes B] [--fusion-bytes B] [--cycle-ms T] [--bucket-bytes B]\n"
      "  LIST: comma-separated of wfbp fused ddp slice p3 lagged delayed:K\n"
      "        (default wfbp,fused,ddp,slice,p3,lagged,delayed:2)\n"
      "        delayed:K steps prioccl::DelayedSgd (k = K, warmupSteps = 0: no synchronous\n"
      "        steps) on flat weights after each backward: its copy, its one fused all-reduce,\n"
      "        its waits and its GLU pass over the weights count in iter_ms (not in ideal_ms)\n"
      "  defaults: --iters 10 --warmup 2 --compute-scale 1 --param-scale 1; chunk/credit: auto\n"
      "  (PRIOCCL_* variables apply); --slice-bytes: the chunk size in force; --fusion-bytes\n"
      "  128M x S, --cycle-ms 1 x C (Horovod's defaults); --bucket-bytes 25M x S (DDP's)\n"
      "  Convention: batch per rank = 128 x C (compute time scales with the batch);\n"
      "  samples_per_s = 128 x C x ranks / iteration time. Param-scale S shrinks every\n"
      "  gradient: on a link of L Gbit/s it emulates the full model on L / S Gbit/s.\n");
}

bool parse(int argc, char** argv, Options& o) {
  std::string modes = "wfbp,fused,ddp,slice,p3,lagged,delayed:2";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    auto number = [&](double& out) {
      char* end = nullptr;
      out = std::strtod(v, &end);
      return *v && !*end && out > 0;
    };
    bool ok = true;
    if (a == "--profile")
      o.profile = v;
    else if (a == "--modes")
      modes = v;
    else if (a == "--iters")
      ok = perf::parseInt(v, &o.iters) && o.iters > 0;
    else if (a == "--warmup")
      ok = perf::parseInt(v, &o.warmup) && o.warmup >= 0;
    else if (a == "--compute-scale")
      ok = number(o.computeScale);
    else if (a == "--param-scale")
      ok = number(o.paramScale);
    else if (a == "--cycle-ms")
      ok = number(o.cycleMs);
    else if (a == "--chunk-bytes")
      ok = perf::parseBytes(v, &o.chunkBytes);
    else if (a == "--credit-bytes")
      ok = perf::parseBytes(v, &o.creditBytes);
    else if (a == "--slice-bytes")
      ok = perf::parseBytes(v, &o.sliceBytes);
    else if (a == "--fusion-bytes")
      ok = perf::parseBytes(v, &o.fusionBytes);
    else if (a == "--bucket-bytes")
      ok = perf::parseBytes(v, &o.bucketBytes);
    else
      ok = false;
    if (!ok) {
      std::fprintf(stderr, "train_emu: bad option or value: %s %s\n", a.c_str(), v);
      return false;
    }
  }
  if (o.profile.empty()) {
    std::fprintf(stderr, "train_emu: --profile is required\n");
    return false;
  }
  size_t at = 0;
  while (at <= modes.size()) {
    size_t comma = modes.find(',', at);
    if (comma == std::string::npos) comma = modes.size();
    o.modes.push_back(emu::parseMode(modes.substr(at, comma - at)));  // throws on a bad one
    at = comma + 1;
  }
  return true;
}

prioccl::Communicator makeComm(const Options& o, priocclSchedule_t schedule) {
  prioccl::Config cfg = prioccl::Config::fromEnv();
  if (o.chunkBytes) cfg.chunkBytes = static_cast<size_t>(o.chunkBytes);
  if (o.creditBytes) cfg.creditBytes = static_cast<size_t>(o.creditBytes);
  cfg.schedule = schedule;
  return prioccl::Communicator::world(cfg);
}

// The whole model's gradient all-reduced alone: the communication half of the bound.
double measureCommMs(prioccl::Communicator& comm, size_t elements) {
  std::vector<float> g(elements, 1.0f);
  comm.allReduce(g.data(), g.data(), g.size(), priocclSum);  // warm-up
  std::vector<double> times;
  for (int rep = 0; rep < 3; ++rep) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    comm.allReduce(g.data(), g.data(), g.size(), priocclSum);
    times.push_back(perf::maxOverRanks(1e3 * (MPI_Wtime() - t0)));
  }
  return perf::median(times);
}

// Median over whole periods (delayed:K repeats every K iterations) of the time per iteration.
double iterationMs(const std::vector<double>& times, int period) {
  std::vector<double> perPeriod;
  for (size_t i = 0; i + static_cast<size_t>(period) <= times.size(); i += period) {
    double sum = 0;
    for (int k = 0; k < period; ++k) sum += times[i + k];
    perPeriod.push_back(sum / period);
  }
  return perf::median(perPeriod);
}

}  // namespace

int main(int argc, char** argv) {
  if (!perf::initMpi(&argc, &argv)) return 1;
  int rank = 0, p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  Options o;
  emu::Profile full;
  try {
    if (!parse(argc, argv, o)) {
      if (rank == 0) usage();
      MPI_Finalize();
      return 2;
    }
    full = emu::loadProfile(o.profile);
  } catch (const std::exception& e) {
    if (rank == 0) std::fprintf(stderr, "train_emu: %s\n", e.what());
    MPI_Finalize();
    return 2;
  }
  emu::Profile model = emu::scaled(full, o.paramScale, o.computeScale);
  prioccl::Communicator fifo = makeComm(o, priocclScheduleFifo);
  prioccl::Communicator prio = makeComm(o, priocclSchedulePriority);
  emu::PlanOptions po;
  po.sliceElems = static_cast<size_t>(o.sliceBytes ? o.sliceBytes : prio.config().chunkBytes) / 4;
  po.fusionBytes =
      static_cast<size_t>(o.fusionBytes >= 0 ? o.fusionBytes : (128 << 20) * o.paramScale);
  po.bucketBytes =
      static_cast<size_t>(o.bucketBytes >= 0 ? o.bucketBytes : (25 << 20) * o.paramScale);
  po.cycleMs = o.cycleMs > 0 ? o.cycleMs : o.computeScale;
  size_t elements = model.params();
  double computeMs = model.fwdMs() + model.bwdMs();
  double commMs = measureCommMs(prio, elements);
  // Two bounds. bound_ms: compute against prioccl's own all-reduce of the whole model (what a
  // perfect overlap of this library's communication would give). phys_ms: compute against the
  // least any all-reduce must move over each rank's link, 2(p-1)/p of the gradient, at the link
  // rate measured at creation: the physical limit, which no library beats.
  double linkBps = prio.config().linkBytesPerSecond;
  double wireMs = p > 1 && linkBps > 0 ? 2.0 * (p - 1) / p * elements * 4 / linkBps * 1e3 : 0;
  double boundMs = std::max(computeMs, commMs);
  double physMs = std::max(computeMs, wireMs);
  double batch = kBatchPerRank * o.computeScale;
  if (rank == 0) {
    std::printf(
        "# train_emu: profile %s (%zu layers, %.1f M params x %g = %.1f MB of gradient), "
        "%d ranks\n# compute %.1f ms/iteration (x %g), all-reduce of the whole model "
        "alone %.1f ms, its bytes at the link rate %.1f ms (bound_ms: compute vs the former, "
        "phys_ms: vs the latter); %s\n",
        model.name.c_str(), model.layers.size(), full.params() / 1e6, o.paramScale,
        elements * 4 / 1e6, p, computeMs, o.computeScale, commMs, wireMs,
        prio.config().describe().c_str());
    std::printf("%-11s %9s %9s %9s %9s %9s %10s %10s %11s %10s %12s\n", "mode", "iter_ms",
                "bound_ms", "phys_ms", "ideal_ms", "ops/iter", "iter/bound", "iter/phys",
                "meas/ideal", "vs_wfbp", "samples/s");
    std::fflush(stdout);
  }
  long long wrongTotal = 0;
  double wfbpMs = 0;
  bool anyDelayed = false;
  std::vector<std::string> results;
  for (const emu::ModeSpec& m : o.modes) {
    emu::Plan plan = emu::makePlan(model, m, po);
    anyDelayed |= plan.through == emu::Through::kDelayedSgd;
    prioccl::Communicator& comm = plan.fifo ? fifo : prio;
    MPI_Barrier(MPI_COMM_WORLD);
    emu::RunResult r = emu::runPlan(model, plan, comm, o.iters, o.warmup);
    long long wrong = perf::sumOverRanks(r.wrong), checked = perf::sumOverRanks(r.checked);
    wrongTotal += wrong;
    if (rank != 0) continue;
    double iterMs = iterationMs(r.iterationMs, plan.period);
    double idealMs = emu::predictIterationMs(model, plan, commMs);
    if (m.mode == emu::Mode::kWfbp) wfbpMs = iterMs;
    double samples = batch * p / (iterMs / 1e3);
    std::printf("%-11s %9.1f %9.1f %9.1f %9.1f %9zu %10.3f %10.3f %11.3f %10s %12.1f%s\n",
                m.name.c_str(), iterMs, boundMs, physMs, idealMs, plan.ops.size(), iterMs / boundMs,
                iterMs / physMs, iterMs / idealMs,
                wfbpMs > 0 ? std::to_string(wfbpMs / iterMs).substr(0, 5).c_str() : "-", samples,
                wrong ? "  WRONG SUMS" : "");
    if (wrong)
      std::printf("# %s: %lld of %lld checked elements wrong\n", m.name.c_str(), wrong, checked);
    std::fflush(stdout);
    char line[512];
    std::snprintf(line, sizeof line,
                  "RESULT mode=%s profile=%s ranks=%d iter_ms=%.2f compute_ms=%.2f comm_ms=%.2f "
                  "bound_ms=%.2f phys_ms=%.2f ideal_ms=%.2f samples_per_s=%.1f",
                  m.name.c_str(), model.name.c_str(), p, iterMs, computeMs, commMs, boundMs, physMs,
                  idealMs, samples);
    results.push_back(line);
  }
  // Memory: the gradient buffer, delayed:K's weights and DelayedSgd's own copies of the model,
  // prioccl's scratch and live chunks, MPI's buffers. weights_mib is 0 when no delayed:K ran.
  double peak = perf::maxOverRanks(static_cast<double>(perf::peakResidentBytes()));
  if (rank == 0) {
    for (const std::string& line : results) std::printf("%s\n", line.c_str());
    std::printf("MEMORY vmhwm_max_mib=%.1f gradient_mib=%.1f weights_mib=%.1f\n", peak / (1 << 20),
                elements * 4.0 / (1 << 20), anyDelayed ? elements * 4.0 / (1 << 20) : 0.0);
  }
  if (rank == 0 && wrongTotal)
    std::fprintf(stderr, "train_emu: FAILED: %lld wrong all-reduced elements\n", wrongTotal);
  fifo.destroy();
  prio.destroy();
  MPI_Finalize();
  return wrongTotal ? 1 : 0;
}
