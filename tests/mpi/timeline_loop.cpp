// Runs a fixed number of rounds of prioccl all-reduces of mixed priority (a count, not a time:
// every rank must submit the same ops), so a test can read the PRIOCCL_TIMELINE files or kill
// it mid-run and check that its file is still valid JSON. Before the rounds, three named ops
// whose keys need JSON escaping: a quote and a backslash, a control character, and a byte that
// is not UTF-8 (the writer replaces it with U+FFFD).
// Usage: timeline_loop ROUNDS
#include <cstdlib>
#include <string>
#include <vector>

#include "prioccl/prioccl.hpp"

int main(int argc, char** argv) {
  long rounds = argc > 1 ? std::atol(argv[1]) : 100;
  prioccl::Communicator comm = prioccl::Communicator::world();
  std::vector<float> big(1 << 20, 1.0f), small(4096, 1.0f);
  for (const std::string key : {"a\"b\\c",
                                "tab\there\x01"
                                "ctl",
                                "bad\xffutf8"})
    comm.allReduceAsync(small.data(), small.data(), small.size(), priocclFloat, priocclMax, 1, key)
        .wait();
  for (long r = 0; r < rounds; ++r) {
    prioccl::Request low = comm.allReduceAsync(big.data(), big.data(), big.size(), priocclMax, 5);
    prioccl::Request high =
        comm.allReduceAsync(small.data(), small.data(), small.size(), priocclMax, 0);
    high.wait();
    low.wait();
  }
  comm.destroy();
  return big[0] > 0 ? 0 : 1;
}
