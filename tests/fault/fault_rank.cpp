// One rank dies (SIGKILL) at a chosen phase of the work; every other rank must get an error from
// its pending op within the timeout (plus a margin), then an error at once from a later op, and
// must be able to destroy its communicator. Run by run_faults.sh under mpirun with
// `--mca orte_abort_on_non_zero_status 0`, which keeps the survivors running.
//
// Usage: fault_rank --phase P --victim R [--bytes N] [--sync DIR] [--op K]
//   K: all_reduce (default; PRIOCCL_ALGO picks the algorithm, the ring unless set) | broadcast |
//      reduce | all_gather | reduce_scatter | all_to_all | send_recv (ring neighbours)
//   P: before_submit | reduce_scatter | all_gather | preemption | lagged_flush (all-reduce);
//      before_submit | mid_op (every kind: the victim dies once it has sent an eighth of its
//      share, or when its own part is over)
// Output: the victim prints "KILL <unix time>" just before dying; each survivor prints
// "SURVIVOR rank=R code=C at=<unix time> later=<code of a later op> destroy_s=<s> data=D
// msg=<error>" (D: ok or bad for an all-reduce that completed, whether it holds the whole sum;
// - otherwise).
// Survivors leave together (a file each in DIR): mpirun aborts the job when the first one exits
// without MPI_Finalize, which they cannot call with a rank dead.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "prioccl/modes.hpp"
#include "prioccl/prioccl.hpp"

namespace {

double unixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

[[noreturn]] void die() {
  std::printf("KILL %.3f\n", unixNow());
  std::fflush(stdout);
  std::raise(SIGKILL);
  std::abort();  // not reached
}

using Requests = std::vector<prioccl::Request>;

bool running(const Requests& rs) {
  for (const prioccl::Request& r : rs)
    if (r.status() == priocclInProgress) return true;
  return false;
}

// The victim waits until its sends reach `fraction` of `total`, then dies; or once its requests
// are over (a rank's part of some kinds is small, or nothing to send); or, mid op, once `cap` has
// passed: a collective backend (mpi-coll) moves the bytes inside MPI, where no counter sees them.
void dieAtSendFraction(const prioccl::Communicator& comm, double total, double fraction,
                       const Requests& rs, std::chrono::milliseconds cap) {
  auto deadline = std::chrono::steady_clock::now() + cap;
  while (static_cast<double>(comm.counters().bytesSent) < fraction * total && running(rs) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  die();
}

// One op of `kind`: `big` is every rank's send buffer of `count` floats, `out` has room for
// size() times as many. A send/recv is a ring of transfers: to the next rank, from the previous.
Requests startOp(prioccl::Communicator& comm, const std::string& kind, float* big, float* out,
                 size_t count) {
  const int n = comm.size(), me = comm.rank();
  const size_t block = count / static_cast<size_t>(n);
  const priocclDataType_t f32 = priocclFloat32;
  if (kind == "all_reduce") return {comm.allReduceAsync(big, big, count, f32, priocclSum, 0)};
  if (kind == "broadcast") return {comm.broadcastAsync(big, big, count, f32, 0, 0)};
  if (kind == "reduce") return {comm.reduceAsync(big, out, count, f32, priocclSum, 0, 0)};
  if (kind == "all_gather") return {comm.allGatherAsync(big, out, block, f32, 0)};
  if (kind == "reduce_scatter")
    return {comm.reduceScatterAsync(big, out, block, f32, priocclSum, 0)};
  if (kind == "all_to_all") return {comm.allToAllAsync(big, out, block, f32, 0)};
  if (kind == "send_recv")
    return {comm.recvAsync(out, count, f32, (me + n - 1) % n),
            comm.sendAsync(big, count, f32, (me + 1) % n)};
  std::fprintf(stderr, "unknown --op '%s'\n", kind.c_str());
  std::exit(2);
}

// This rank's sends for the whole op, roughly: what mid_op's fraction is of.
double sendsOf(const std::string& kind, size_t bytes, int n) {
  double b = static_cast<double>(bytes), share = static_cast<double>(n - 1) / n;
  if (kind == "all_reduce") return 2 * share * b;  // the ring's
  if (kind == "send_recv" || kind == "broadcast" || kind == "reduce") return b;
  return share * b;  // all-gather, reduce-scatter, all-to-all: every other rank's block
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0, rank = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string phase;
  int victim = 1;
  size_t bytes = 64 << 20;
  std::string sync, kind = "all_reduce";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--op")) kind = argv[i + 1];
    if (!std::strcmp(argv[i], "--phase")) phase = argv[i + 1];
    if (!std::strcmp(argv[i], "--victim")) victim = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--bytes")) bytes = std::strtoull(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--sync")) sync = argv[i + 1];
  }
  prioccl::Config config = prioccl::Config::fromEnv();
  // Send fractions map onto the ring's two phases (PRIOCCL_ALGO may choose another algorithm).
  const char* algo = std::getenv("PRIOCCL_ALGO");
  if (!algo || !*algo) config.algorithm = priocclAlgoRing;
  prioccl::Communicator comm = prioccl::Communicator::world(config);
  bool isVictim = rank == victim;
  size_t count = bytes / sizeof(float);
  std::vector<float> big(count, 1.0f), small(1024, 1.0f), out;
  if (kind != "all_reduce" && kind != "broadcast") out.resize(count * comm.size());
  priocclResult_t code = priocclSuccess;
  std::string message;
  auto run = [&](auto&& body) {
    try {
      body();
      message = "no error";
    } catch (const prioccl::Error& e) {
      code = e.code();
      message = e.what();
    }
  };
  MPI_Barrier(MPI_COMM_WORLD);
  auto waitAll = [](const Requests& rs) {
    for (const prioccl::Request& r : rs) r.wait();
  };
  const bool allReduce = kind == "all_reduce";
  if (phase == "before_submit") {
    if (isVictim) die();
    run([&] { waitAll(startOp(comm, kind, big.data(), out.data(), count)); });
  } else if (phase == "mid_op" ||
             (allReduce && (phase == "reduce_scatter" || phase == "all_gather"))) {
    Requests rs = startOp(comm, kind, big.data(), out.data(), count);
    double fraction = phase == "mid_op" ? 0.125 : phase == "reduce_scatter" ? 0.2 : 0.8;
    // (The all-reduce's two ring phases keep to their fractions.)
    auto cap = std::chrono::milliseconds(phase == "mid_op" ? 20 : 60000);
    if (isVictim) dieAtSendFraction(comm, sendsOf(kind, bytes, comm.size()), fraction, rs, cap);
    run([&] { waitAll(rs); });
  } else if (!allReduce) {
    std::fprintf(stderr, "--phase '%s' is for all-reduce only\n", phase.c_str());
    return 2;
  } else if (phase == "preemption") {
    prioccl::Request low =
        comm.allReduceAsync(big.data(), big.data(), count, priocclFloat32, priocclSum, 10);
    // (Another rank's death may fail the op first: then stop waiting for its bytes.)
    while (comm.counters().bytesSent < bytes / 8 && low.status() == priocclInProgress)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    prioccl::Request urgent = comm.allReduceAsync(small.data(), small.data(), small.size(),
                                                  priocclFloat32, priocclSum, 0);
    if (isVictim) {
      while (comm.counters().preemptions == 0 && urgent.status() == priocclInProgress)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      die();
    }
    run([&] {
      urgent.wait();
      low.wait();
    });
  } else if (phase == "lagged_flush") {
    prioccl::LaggedAllReduce lagged(comm, count, priocclFloat32, priocclSum);
    lagged.step(big.data(), nullptr);  // starts the fused all-reduce of this step's gradient
    if (isVictim) die();
    run([&] { lagged.flush(nullptr); });
  } else {
    std::fprintf(stderr, "unknown --phase '%s'\n", phase.c_str());
    return 2;
  }
  double at = unixNow();
  // A pending all-reduce that completed despite the death (its part no longer needed the victim:
  // the other host's ranks of a hierarchical one, once the hosts have exchanged) must hold the
  // whole sum: every rank's ones.
  const char* data = "-";
  if (code == priocclSuccess && allReduce && phase != "lagged_flush") {  // in place on big
    const float want = static_cast<float>(comm.size());
    data = std::all_of(big.begin(), big.end(), [&](float v) { return v == want; }) ? "ok" : "bad";
  }
  // A later op fails at once; destroying the failed communicator waits for nothing.
  priocclResult_t later = priocclSuccess;
  try {
    comm.allReduce(small.data(), small.data(), small.size(), priocclFloat32, priocclSum);
  } catch (const prioccl::Error& e) {
    later = e.code();
  }
  auto t0 = std::chrono::steady_clock::now();
  comm.destroy();
  double destroySeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("SURVIVOR rank=%d code=%d at=%.3f later=%d destroy_s=%.3f data=%s msg=%s\n", rank,
              static_cast<int>(code), at, static_cast<int>(later), destroySeconds, data,
              message.c_str());
  std::fflush(stdout);
  if (!sync.empty()) {
    namespace fs = std::filesystem;
    std::ofstream(fs::path(sync) / std::to_string(rank)).put('1');
    int nranks = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline &&
           std::distance(fs::directory_iterator(sync), fs::directory_iterator()) < nranks - 1)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  _exit(0);  // MPI_Finalize would wait for the dead rank
}
