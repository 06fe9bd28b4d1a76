// Runs prioccl all-reduces of mixed priority in a loop for a bounded time, so a test can kill it
// mid-run and check that its PRIOCCL_TIMELINE file is still valid JSON.
// Usage: timeline_loop SECONDS
#include <mpi.h>

#include <cstdlib>
#include <vector>

#include "prioccl/prioccl.hpp"

int main(int argc, char** argv) {
  double seconds = argc > 1 ? std::atof(argv[1]) : 5.0;
  prioccl::Communicator comm = prioccl::Communicator::world();
  std::vector<float> big(1 << 20, 1.0f), small(4096, 1.0f);
  double end = MPI_Wtime() + seconds;
  int rounds = 0;
  while (MPI_Wtime() < end) {
    prioccl::Request low = comm.allReduceAsync(big.data(), big.data(), big.size(), priocclMax, 5);
    prioccl::Request high =
        comm.allReduceAsync(small.data(), small.data(), small.size(), priocclMax, 0);
    high.wait();
    low.wait();
    ++rounds;
  }
  comm.destroy();
  return rounds > 0 ? 0 : 1;
}
