// C++ API: gradients of a few "layers" all-reduced asynchronously, the first layer most urgent
// (as the next forward pass consumes it first). Run: mpirun -np 4 ./async_priorities
#include <mpi.h>
#include <prioccl/prioccl.hpp>

#include <cstdio>
#include <vector>

int main() {
  prioccl::Communicator comm = prioccl::Communicator::world();  // initialises MPI itself
  std::vector<std::vector<float>> grads = {std::vector<float>(1 << 20, 1.0f),
                                           std::vector<float>(1 << 16, 2.0f),
                                           std::vector<float>(1 << 22, 3.0f)};
  std::vector<prioccl::Request> pending;
  // Backward produces the last layer first; priority = forward order, so layer 0 is most urgent.
  for (int layer = static_cast<int>(grads.size()) - 1; layer >= 0; --layer) {
    auto& g = grads[layer];
    pending.push_back(comm.allReduceAsync(g.data(), g.data(), g.size(), priocclAvg, layer));
  }
  for (auto& r : pending) r.wait();
  bool ok = grads[0][0] == 1.0f && grads[1][7] == 2.0f && grads[2][99] == 3.0f;
  if (comm.rank() == 0)
    std::printf("async_priorities: %d ranks, averaged 3 layers: %s\n", comm.size(),
                ok ? "OK" : "WRONG");
  comm.destroy();  // finalises MPI, which prioccl initialised
  return ok ? 0 : 1;
}
