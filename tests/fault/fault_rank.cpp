// One rank dies (SIGKILL) at a chosen phase of the work; every other rank must get an error from
// its pending op within the timeout (plus a margin), then an error at once from a later op, and
// must be able to destroy its communicator. Run by run_faults.sh under mpirun with
// `--mca orte_abort_on_non_zero_status 0`, which keeps the survivors running.
//
// Usage: fault_rank --phase P --victim R [--bytes N] [--sync DIR]
//   P: before_submit | reduce_scatter | all_gather | preemption | lagged_flush
// Output: the victim prints "KILL <unix time>" just before dying; each survivor prints
// "SURVIVOR rank=R code=C at=<unix time> later=<code of a later op> destroy_s=<s> msg=<error>".
// Survivors leave together (a file each in DIR): mpirun aborts the job when the first one exits
// without MPI_Finalize, which they cannot call with a rank dead.
#include <mpi.h>
#include <unistd.h>

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

// The victim waits until its share of the op's sends reaches `fraction`, then dies.
void dieAtSendFraction(const prioccl::Communicator& comm, size_t bytes, double fraction) {
  int n = comm.size();
  double total = 2.0 * (n - 1) / n * static_cast<double>(bytes);  // a ring op's sends per rank
  while (static_cast<double>(comm.counters().bytesSent) < fraction * total)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  die();
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0, rank = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string phase;
  int victim = 1;
  size_t bytes = 64 << 20;
  std::string sync;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--phase")) phase = argv[i + 1];
    if (!std::strcmp(argv[i], "--victim")) victim = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--bytes")) bytes = std::strtoull(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--sync")) sync = argv[i + 1];
  }
  prioccl::Config config = prioccl::Config::fromEnv();
  config.algorithm = priocclAlgoRing;  // send fractions map onto the ring's two phases
  prioccl::Communicator comm = prioccl::Communicator::world(config);
  bool isVictim = rank == victim;
  size_t count = bytes / sizeof(float);
  std::vector<float> big(count, 1.0f), small(1024, 1.0f);
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
  if (phase == "before_submit") {
    if (isVictim) die();
    run([&] { comm.allReduce(big.data(), big.data(), count, priocclFloat32, priocclSum); });
  } else if (phase == "reduce_scatter" || phase == "all_gather") {
    prioccl::Request r =
        comm.allReduceAsync(big.data(), big.data(), count, priocclFloat32, priocclSum, 0);
    if (isVictim) dieAtSendFraction(comm, bytes, phase == "reduce_scatter" ? 0.2 : 0.8);
    run([&] { r.wait(); });
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
  std::printf("SURVIVOR rank=%d code=%d at=%.3f later=%d destroy_s=%.3f msg=%s\n", rank,
              static_cast<int>(code), at, static_cast<int>(later), destroySeconds, message.c_str());
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
