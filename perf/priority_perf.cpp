// priority_perf: how long an urgent (priority 0) op takes while a large low-priority (priority
// 100) one is in flight, under the priority scheduler and under the FIFO baseline. Both are
// all-reduces unless --high-op / --low-op name another collective.
//   mpirun -np 4 priority_perf [--high 1M] [--low 64M] [--reps 5] [--delay-ms D]
//                              [--high-op KIND] [--low-op KIND]
// float32 (sum where the op reduces; root 0 where it has one). Sizes are the op's largest buffer
// (nccl-tests' convention: an all-gather's receive buffer, a reduce-scatter's send buffer). Ends
// with exactly one line starting "RESULT " (see the end of main).
#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "perf_common.h"

namespace {

// The collectives the two ops may be.
enum class Kind { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll };
const char* const kKindNames[] = {"allreduce", "broadcast",     "reduce",
                                  "allgather", "reducescatter", "alltoall"};

bool parseKind(const std::string& text, Kind* kind) {
  for (int k = 0; k < 6; ++k)
    if (text == kKindNames[k]) {
      *kind = static_cast<Kind>(k);
      return true;
    }
  return false;
}

struct Options {
  long long high = 1 << 20, low = 64 << 20;
  int reps = 5;
  double delayMs = -1;  // < 0: 25% of the priority mode's low-alone median
  Kind highOp = Kind::kAllReduce, lowOp = Kind::kAllReduce;
};

const char kUsage[] =
    "usage: priority_perf [--high BYTES] [--low BYTES] [--reps N] [--delay-ms D]\n"
    "                     [--high-op KIND] [--low-op KIND]\n"
    "  defaults: --high 1M --low 64M --reps 5; --delay-ms: 25% of the low op's time alone\n"
    "  KIND: allreduce (default), broadcast, reduce, allgather, reducescatter, alltoall\n"
    "  PRIOCCL_* variables set the configuration (the schedule is set per mode)\n";

// Parsed with CLI11 (as all_reduce_perf); the usage text stays kUsage. Returns "ok", "help", or
// what was wrong.
std::string parseOptions(int argc, char** argv, Options* o) {
  CLI::App app{"priority_perf", "priority_perf"};
  app.set_help_flag();  // ours below: --help prints kUsage, as before
  bool help = false;
  std::string high, low, reps, delay, highOp, lowOp;
  app.add_flag("-h,--help", help);
  app.add_option("--high", high);
  app.add_option("--low", low);
  app.add_option("--reps", reps);
  app.add_option("--delay-ms", delay);
  app.add_option("--high-op", highOp);
  app.add_option("--low-op", lowOp);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  if (help) return "help";
  if (!high.empty() && !(perf::parseBytes(high.c_str(), &o->high) && o->high > 0))
    return "--high: bad value '" + high + "'";
  if (!low.empty() && !(perf::parseBytes(low.c_str(), &o->low) && o->low > 0))
    return "--low: bad value '" + low + "'";
  if (!reps.empty() && !(perf::parseInt(reps.c_str(), &o->reps) && o->reps > 0))
    return "--reps: bad value '" + reps + "'";
  if (!highOp.empty() && !parseKind(highOp, &o->highOp))
    return "--high-op: unknown collective '" + highOp + "'";
  if (!lowOp.empty() && !parseKind(lowOp, &o->lowOp))
    return "--low-op: unknown collective '" + lowOp + "'";
  if (!delay.empty()) {
    char* end = nullptr;
    o->delayMs = std::strtod(delay.c_str(), &end);
    if (end == delay.c_str() || *end || !(o->delayMs >= 0))
      return "--delay-ms: bad value '" + delay + "'";
  }
  return "ok";
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One op's buffers. Inputs (rank + base) * (j % period + 1) at element j are small integers, so
// float32 sums are exact and the check is equality; the two ops use different formulas so a
// mix-up shows. `bytes` is the op's largest buffer; `count` what the call takes (per rank for the
// blocked collectives).
struct Op {
  Kind kind;
  int rank, p, base, period;
  size_t count;
  std::vector<float> send, recv;
  Op(Kind k, long long bytes, int rank, int p, int b, int per)
      : kind(k), rank(rank), p(p), base(b), period(per) {
    size_t total = std::max<size_t>(1, static_cast<size_t>(bytes) / sizeof(float));
    bool blocked = k == Kind::kAllGather || k == Kind::kReduceScatter || k == Kind::kAllToAll;
    count = blocked ? std::max<size_t>(1, total / static_cast<size_t>(p)) : total;
    size_t all = count * static_cast<size_t>(p);
    send.resize(k == Kind::kReduceScatter || k == Kind::kAllToAll ? all : count);
    recv.resize(k == Kind::kAllGather || k == Kind::kAllToAll ? all : count);
    for (size_t j = 0; j < send.size(); ++j) send[j] = input(rank, j);
  }
  float input(int r, size_t j) const {
    return static_cast<float>((r + base) * static_cast<int>(j % period + 1));
  }
  size_t bytes() const { return std::max(send.size(), recv.size()) * sizeof(float); }
  void poison() { std::fill(recv.begin(), recv.end(), NAN); }
  prioccl::Request start(prioccl::Communicator& comm, int priority) {
    const float* s = send.data();
    float* d = recv.data();
    switch (kind) {
      case Kind::kBroadcast:
        return comm.broadcastAsync(s, d, count, priocclFloat32, 0, priority);
      case Kind::kReduce:
        return comm.reduceAsync(s, rank == 0 ? d : nullptr, count, priocclFloat32, priocclSum, 0,
                                priority);
      case Kind::kAllGather:
        return comm.allGatherAsync(s, d, count, priocclFloat32, priority);
      case Kind::kReduceScatter:
        return comm.reduceScatterAsync(s, d, count, priocclFloat32, priocclSum, priority);
      case Kind::kAllToAll:
        return comm.allToAllAsync(s, d, count, priocclFloat32, priority);
      default:
        return comm.allReduceAsync(s, d, count, priocclFloat32, priocclSum, priority);
    }
  }
  // Result elements that differ from what the collective must give (this rank's share).
  long long wrong() const {
    auto sum = [&](size_t j) {
      double v = 0;
      for (int r = 0; r < p; ++r) v += input(r, j);
      return v;
    };
    long long w = 0;
    for (size_t i = 0; i < recv.size(); ++i) {
      size_t block = i / count, at = i % count;
      double want = 0;
      switch (kind) {
        case Kind::kBroadcast:
          want = input(0, i);
          break;
        case Kind::kReduce:
          if (rank != 0) return 0;  // only the root's buffer is written
          want = sum(i);
          break;
        case Kind::kAllGather:
          want = input(static_cast<int>(block), at);
          break;
        case Kind::kReduceScatter:
          want = sum(static_cast<size_t>(rank) * count + i);
          break;
        case Kind::kAllToAll:
          want = input(static_cast<int>(block), static_cast<size_t>(rank) * count + at);
          break;
        default:
          want = sum(i);
      }
      w += recv[i] != want;
    }
    return w;
  }
};

// An in-flight op and when its completion callback ran, i.e. when the engine finished it: a
// thread blocked in wait() on an oversubscribed machine may only see that milliseconds later.
// Ops alone and loaded are timed the same way, so their ratio is fair.
struct Timed {
  prioccl::Request req;
  double start = 0;
  std::shared_ptr<std::atomic<double>> end = std::make_shared<std::atomic<double>>(0.0);
  // Waits (throwing the op's error); seconds from submission to completion.
  double finish() {
    req.wait();
    while (end->load() == 0.0) std::this_thread::yield();  // the callback runs right after done
    return end->load() - start;
  }
};

Timed submit(prioccl::Communicator& comm, Op& op, int priority) {
  Timed t;
  t.start = now();
  t.req = op.start(comm, priority);
  auto end = t.end;
  t.req.onComplete([end](priocclResult_t, const std::string&) { end->store(now()); });
  return t;
}

struct ModeResult {
  double highAlone, lowAlone, highLoaded, lowLoaded;  // medians over reps, ms
};

constexpr int kHighPriority = 0, kLowPriority = 100;

}  // namespace

int main(int argc, char** argv) {
  if (!perf::initMpi(&argc, &argv)) {
    std::fprintf(stderr, "priority_perf: MPI does not provide MPI_THREAD_MULTIPLE\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int rank = 0, p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  Options o;
  std::string err = parseOptions(argc, argv, &o);
  if (err != "ok") {
    if (rank == 0 && err == "help") std::fputs(kUsage, stdout);
    if (rank == 0 && err != "help")
      std::fprintf(stderr, "priority_perf: %s\n%s", err.c_str(), kUsage);
    MPI_Finalize();
    return err == "help" ? 0 : 2;
  }

  Op high(o.highOp, o.high, rank, p, 1, 5), low(o.lowOp, o.low, rank, p, 2, 3);
  ModeResult res[2] = {};
  double delay = o.delayMs / 1e3;
  long long wrong = 0;
  if (rank == 0) {
    std::printf(
        "# prioccl priority_perf: nranks %d, float32 sum, high %s %zu B (priority %d), "
        "low %s %zu B (priority %d), reps %d\n",
        p, kKindNames[static_cast<int>(o.highOp)], high.bytes(), kHighPriority,
        kKindNames[static_cast<int>(o.lowOp)], low.bytes(), kLowPriority, o.reps);
    std::printf("# times: submission to completion callback, slowest rank; medians over reps\n");
  }
  double chunkWireMs = 0;  // one chunk of the large op at the measured link rate
  try {
    for (int mode = 0; mode < 2; ++mode) {
      prioccl::Config cfg = prioccl::Config::fromEnv();
      cfg.schedule = mode ? priocclScheduleFifo : priocclSchedulePriority;
      prioccl::Communicator comm = prioccl::Communicator::world(cfg);
      // Untimed warm-up: first-touch page faults and the transport's first messages.
      submit(comm, high, kHighPriority).finish();
      submit(comm, low, kLowPriority).finish();
      std::vector<double> ha, la, hl, ll;
      for (int rep = 0; rep < o.reps; ++rep) {
        high.poison();
        MPI_Barrier(MPI_COMM_WORLD);
        ha.push_back(perf::maxOverRanks(submit(comm, high, kHighPriority).finish()));
        wrong += high.wrong();
        low.poison();
        MPI_Barrier(MPI_COMM_WORLD);
        la.push_back(perf::maxOverRanks(submit(comm, low, kLowPriority).finish()));
        wrong += low.wrong();
      }
      // Chosen once, in priority mode (la is the same on every rank: a max over ranks); FIFO
      // reuses it so both modes submit the urgent op at the same point of the large one.
      if (delay < 0) delay = 0.25 * perf::median(la);
      priocclCounters_t before = comm.counters();
      for (int rep = 0; rep < o.reps; ++rep) {
        high.poison();
        low.poison();
        MPI_Barrier(MPI_COMM_WORLD);
        Timed l = submit(comm, low, kLowPriority);
        std::this_thread::sleep_for(std::chrono::duration<double>(delay));
        Timed h = submit(comm, high, kHighPriority);
        double th = h.finish(), tl = l.finish();
        hl.push_back(perf::maxOverRanks(th));
        ll.push_back(perf::maxOverRanks(tl));
        wrong += high.wrong() + low.wrong();
      }
      priocclCounters_t after = comm.counters();
      long long loadedPre = perf::sumOverRanks(static_cast<long long>(after.preemptions) -
                                               static_cast<long long>(before.preemptions));
      long long allPre = perf::sumOverRanks(static_cast<long long>(after.preemptions));
      if (mode == 0 && comm.config().linkBytesPerSecond > 0)
        chunkWireMs =
            1e3 * static_cast<double>(comm.config().chunkBytes) / comm.config().linkBytesPerSecond;
      res[mode] = {perf::median(ha) * 1e3, perf::median(la) * 1e3, perf::median(hl) * 1e3,
                   perf::median(ll) * 1e3};
      if (rank == 0) {
        std::printf("#\n# mode %s: %s\n", mode ? "fifo" : "priority",
                    comm.config().describe().c_str());
        std::printf("# model: %s\n", comm.algorithmModel().c_str());
        std::printf("# high op submitted %.3f ms after the low one\n", delay * 1e3);
        std::printf("#%5s  %14s  %13s  %15s  %14s\n", "rep", "high_alone(ms)", "low_alone(ms)",
                    "high_loaded(ms)", "low_loaded(ms)");
        for (int rep = 0; rep < o.reps; ++rep)
          std::printf("%6d  %14.3f  %13.3f  %15.3f  %14.3f\n", rep, ha[rep] * 1e3, la[rep] * 1e3,
                      hl[rep] * 1e3, ll[rep] * 1e3);
        std::printf("%6s  %14.3f  %13.3f  %15.3f  %14.3f\n", "median", res[mode].highAlone,
                    res[mode].lowAlone, res[mode].highLoaded, res[mode].lowLoaded);
        std::printf("# preemptions (summed over ranks): %lld in the loaded reps, %lld in all\n",
                    loadedPre, allPre);
        std::fflush(stdout);
      }
      comm.destroy();
    }
  } catch (const prioccl::Error& e) {
    std::fprintf(stderr, "priority_perf: rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  wrong = perf::sumOverRanks(wrong);
  if (rank == 0) {
    if (wrong) std::printf("# FAILED: #wrong %lld result elements in total\n", wrong);
    // Both slowdowns divide by the priority mode's high-alone time: the op alone runs on an idle
    // engine in either mode, and one reference keeps slowdown/slowdown_fifo directly comparable.
    double alone = res[0].highAlone;
    // The preemption bound: twice the urgent op's standalone time plus one chunk of the large
    // op on the wire (the measured link rate), since a chunk already posted is not recalled.
    double bound = 2 * alone + chunkWireMs;
    std::printf(
        "RESULT high_alone_ms=%.3f high_loaded_ms=%.3f high_loaded_fifo_ms=%.3f "
        "slowdown=%.2f slowdown_fifo=%.2f low_ms=%.3f low_fifo_ms=%.3f bound_ms=%.3f "
        "within_bound=%d\n",
        alone, res[0].highLoaded, res[1].highLoaded, res[0].highLoaded / alone,
        res[1].highLoaded / alone, res[0].lowLoaded, res[1].lowLoaded, bound,
        res[0].highLoaded <= bound ? 1 : 0);
  }
  MPI_Finalize();
  return wrong ? 1 : 0;
}
