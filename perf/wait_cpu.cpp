// The CPU a rank burns while it waits inside an all-reduce for a straggler. Rank 0 "computes"
// (sleeps) before each op; the others wait in it. One communicator per transport, run one after
// the other in the same job, so the numbers are side by side.
//
// Why it matters: on shared nodes and oversubscribed cores a waiting rank should leave the CPU
// to the ranks still computing. Reported per transport: the median over waiting ranks of CPU
// seconds per second of waiting and of wake-ups (voluntary context switches) per second.
#include <mpi.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "perf_common.h"

namespace {

struct Usage {
  double cpuSeconds;
  long wakeups;
};

Usage now() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);  // every thread of the process: the progress thread included
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * t.tv_usec; };
  return {sec(u.ru_utime) + sec(u.ru_stime), u.ru_nvcsw};
}

int usage() {
  std::fprintf(stderr,
               "usage: wait_cpu [--ops N] [--straggle-ms D] [--bytes B]\n"
               "  defaults: --ops 20 --straggle-ms 100 --bytes 256K; needs >= 2 ranks\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0, rank = 0, p = 1;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  int ops = 20, straggleMs = 100;
  long long bytes = 256 << 10;
  for (int i = 1; i < argc; ++i) {
    bool more = i + 1 < argc;
    if (more && !std::strcmp(argv[i], "--ops") && perf::parseInt(argv[i + 1], &ops) && ops > 0) {
      ++i;
    } else if (more && !std::strcmp(argv[i], "--straggle-ms") &&
               perf::parseInt(argv[i + 1], &straggleMs) && straggleMs >= 0) {
      ++i;
    } else if (more && !std::strcmp(argv[i], "--bytes") && perf::parseBytes(argv[i + 1], &bytes)) {
      ++i;
    } else {
      if (rank == 0) usage();
      MPI_Finalize();
      return 2;
    }
  }
  if (p < 2) {
    if (rank == 0) std::fprintf(stderr, "wait_cpu: needs at least 2 ranks (one straggler)\n");
    MPI_Finalize();
    return 2;
  }
  std::vector<float> buf(static_cast<size_t>(bytes) / sizeof(float));
  if (rank == 0)
    std::printf(
        "# wait_cpu: %d ranks, rank 0 computes %d ms before each of %d all-reduces of %lld B\n"
        "# per waiting rank (median): CPU s per s of waiting, wake-ups per s\n"
        "%-10s %14s %12s\n",
        p, straggleMs, ops, bytes, "transport", "cpu_s_per_s", "wakeups_s");
  const struct {
    priocclTransport_t id;
    const char* name;
  } transports[] = {
      {priocclTransportMpi, "mpi"},
      {priocclTransportUcx, "ucx"},
      {priocclTransportTcp, "tcp"}};  // the testbed's choice: one rank per host, slow links
  int failures = 0;
  for (const auto& t : transports) {
    prioccl::Config cfg = prioccl::Config::fromEnv();
    cfg.transport = t.id;
    double cpuRate = 0, wakeRate = 0;
    try {
      prioccl::Communicator comm = prioccl::Communicator::world(cfg);
      comm.allReduce(buf.data(), buf.data(), buf.size(), priocclSum);  // warm-up
      MPI_Barrier(MPI_COMM_WORLD);
      Usage before = now();
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < ops; ++i) {
        if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(straggleMs));
        comm.allReduce(buf.data(), buf.data(), buf.size(), priocclSum);
      }
      double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      Usage after = now();
      cpuRate = (after.cpuSeconds - before.cpuSeconds) / wall;
      wakeRate = static_cast<double>(after.wakeups - before.wakeups) / wall;
    } catch (const prioccl::Error& e) {
      if (rank == 0) std::printf("%-10s %s\n", t.name, e.what());
      ++failures;
      continue;
    }
    std::vector<double> cpu(static_cast<size_t>(p)), wake(cpu.size());
    MPI_Gather(&cpuRate, 1, MPI_DOUBLE, cpu.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    MPI_Gather(&wakeRate, 1, MPI_DOUBLE, wake.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      std::vector<double> waitingCpu(cpu.begin() + 1, cpu.end());
      std::vector<double> waitingWake(wake.begin() + 1, wake.end());
      std::printf("%-10s %14.4f %12.0f\n", t.name, perf::median(waitingCpu),
                  perf::median(waitingWake));
    }
  }
  MPI_Finalize();
  return failures ? 1 : 0;
}
