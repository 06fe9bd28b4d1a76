// The floor under a small all-reduce (issue 19): how fast a recursive-doubling exchange of 8 bytes
// built from MPI_Irecv / MPI_Isend / MPI_Testsome can be, as the engine builds it (receives for
// every round posted up front into 64 KiB blocks, 96-byte messages, a standing control receive),
// optionally with busy work per op and per round standing in for the engine's own CPU time; then
// prioccl's blocking all-reduce and MPI_Allreduce, all in one run.
//
//   scripts/mpirun-local -np 4 build/perf/latency_floor [iterations] [busy us per op] [per round]
//
// Prints the median of 5 blocks per variant, slowest rank. What it showed on 2 cores with 4
// ranks: each microsecond of per-op CPU costs about two of latency (docs/benchmarks.md).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "prioccl/prioccl.hpp"

namespace {

constexpr int kControlTag = 32000;  // above every data tag ((iter % 512) * 32 + round)
constexpr int kBlocks = 5;

void busy(double us) {
  double end = MPI_Wtime() + us * 1e-6;
  while (MPI_Wtime() < end) {
  }
}

// One 8-byte sum by recursive doubling (power-of-two rank counts only; main() prints -1 for
// others). Nothing is allocated per op: the floor must not carry costs the engine could avoid.
constexpr int kMaxRounds = 16;
double exchange(int rank, int size, int iter, MPI_Request& control, double opBusy,
                double roundBusy) {
  static std::vector<std::vector<char>> inbox(kMaxRounds, std::vector<char>(65536 + 88));
  char out[96] = {};
  double acc = rank;
  // [control, one receive per round, the current round's send]
  MPI_Request reqs[kMaxRounds + 2];
  int indices[kMaxRounds + 2];
  int rounds = 0;
  while ((1 << rounds) < size) ++rounds;
  int sendSlot = rounds + 1, count = rounds + 2;
  reqs[0] = control;
  busy(opBusy);
  for (int k = 0; k < rounds; ++k)
    MPI_Irecv(inbox[k].data(), static_cast<int>(inbox[k].size()), MPI_BYTE, rank ^ (1 << k),
              (iter % 512) * 32 + k, MPI_COMM_WORLD, &reqs[1 + k]);
  for (int k = 0; k < rounds; ++k) {
    std::copy_n(reinterpret_cast<const char*>(&acc), sizeof acc, out);
    MPI_Isend(out, sizeof out, MPI_BYTE, rank ^ (1 << k), (iter % 512) * 32 + k, MPI_COMM_WORLD,
              &reqs[sendSlot]);
    unsigned spins = 0;
    while (reqs[1 + k] != MPI_REQUEST_NULL || reqs[sendSlot] != MPI_REQUEST_NULL) {
      int done = 0;
      MPI_Testsome(count, reqs, &done, indices, MPI_STATUSES_IGNORE);
      if (done <= 0 && ++spins % 64 == 0) std::this_thread::yield();
    }
    double in;
    std::copy_n(inbox[k].data(), sizeof in, reinterpret_cast<char*>(&in));
    acc = (rank ^ (1 << k)) < rank ? in + acc : acc + in;
    busy(roundBusy);
  }
  control = reqs[0];
  return acc;
}

template <typename F>
double medianMicros(int iterations, F op) {
  std::vector<double> blocks;
  for (int b = 0; b < kBlocks; ++b) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int i = 0; i < iterations; ++i) op(b * iterations + i);
    double mine = (MPI_Wtime() - t) / iterations * 1e6, slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    blocks.push_back(slowest);
  }
  std::sort(blocks.begin(), blocks.end());
  return blocks[kBlocks / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0, rank = 0, size = 1;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int iterations = argc > 1 ? std::atoi(argv[1]) : 5000;
  double opBusy = argc > 2 ? std::atof(argv[2]) : 0, roundBusy = argc > 3 ? std::atof(argv[3]) : 0;
  {
    prioccl::Communicator comm = prioccl::Communicator::world();
    double x = rank, y = 0;
    MPI_Request control = MPI_REQUEST_NULL;
    char controlBuf[64];
    MPI_Irecv(controlBuf, sizeof controlBuf, MPI_BYTE, (rank + 1) % size, kControlTag,
              MPI_COMM_WORLD, &control);
    bool pow2 = (size & (size - 1)) == 0 && size <= (1 << kMaxRounds);
    double mpi = medianMicros(
        iterations, [&](int) { MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD); });
    double floor =
        pow2 ? medianMicros(iterations,
                            [&](int i) { y = exchange(rank, size, i, control, opBusy, roundBusy); })
             : -1;
    double ours = medianMicros(iterations,
                               [&](int) { comm.allReduce(&x, &y, 1, priocclFloat64, priocclSum); });
    MPI_Cancel(&control);
    MPI_Request_free(&control);
    if (rank == 0)
      std::printf(
          "ranks %d, 8 B, median of %d blocks of %d: MPI_Allreduce %.2f us, "
          "exchange floor (busy %.1f us/op, %.1f us/round) %.2f us, prioccl %.2f us\n",
          size, kBlocks, iterations, mpi, opBusy, roundBusy, floor, ours);
  }
  MPI_Finalize();
  return 0;
}
