// How long creating a communicator takes, over MPI's bootstrap or the TCP bootstrap (launch
// without MPI), side by side:
//   scripts/mpirun-local -np 4 build/perf/comm_init_perf mpi       priocclCommInitWorld, MPI
//                                                                  initialised beforehand
//   tests/launch/launch_without_mpi.sh build/perf/comm_init_perf 4  (mode uid: RANK, WORLD_SIZE,
//                                                                  PRIOCCL_COMM_ID)
// Each repetition creates and destroys one communicator; rank 0 prints every time and the median,
// "RESULT mode=... median_ms=... first_from_main_ms=...", then "LAUNCH rank=R ok" (the launcher's
// check). first_from_main_ms is what a freshly launched job waits for its first communicator:
// from main() to the first creation's end, MPI_Init included in mode mpi (priocclCommInitWorld
// would run it there), the wait for ranks that start later included in both.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "prioccl/prioccl.h"

int main(int argc, char** argv) {
  const bool viaMpi = argc > 1 && std::strcmp(argv[1], "mpi") == 0;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 7;
  const auto mainStart = std::chrono::steady_clock::now();
  double firstMs = 0;  // from main() to the first communicator: MPI_Init included where used
  int rank = 0, size = 1;
  if (viaMpi) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  } else {
    const char* r = std::getenv("RANK");
    const char* w = std::getenv("WORLD_SIZE");
    if (!r || !w) {
      std::printf("comm_init_perf: mode uid needs RANK and WORLD_SIZE\n");
      return 2;
    }
    rank = std::atoi(r);
    size = std::atoi(w);
  }
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    priocclComm_t comm = nullptr;
    const auto start = std::chrono::steady_clock::now();
    priocclResult_t rc;
    if (viaMpi) {
      rc = priocclCommInitWorld(&comm);
    } else {
      priocclUniqueId id;
      rc = priocclGetUniqueId(&id);
      if (rc == priocclSuccess) rc = priocclCommInitRank(&comm, size, id, rank);
    }
    const double took =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (rc != priocclSuccess) {
      std::printf("comm_init_perf: rank %d: %s\n", rank, priocclGetLastError(nullptr));
      return 1;
    }
    ms.push_back(took);
    if (i == 0)
      firstMs =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - mainStart)
              .count();
    priocclCommDestroy(comm);
  }
  if (rank == 0) {
    for (double t : ms) std::printf("%.1f ", t);
    std::sort(ms.begin(), ms.end());
    std::printf("\nRESULT mode=%s nranks=%d median_ms=%.1f first_from_main_ms=%.1f\n",
                viaMpi ? "mpi" : "uid", size, ms[ms.size() / 2], firstMs);
  }
  std::printf("LAUNCH rank=%d ok\n", rank);
  if (viaMpi) MPI_Finalize();
  return 0;
}
