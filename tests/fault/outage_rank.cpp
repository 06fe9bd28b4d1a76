// One rank of a link-outage run (run_outages.sh takes a host's link down on the testbed while
// these ranks stream all-reduces). Each op is an int32 sum whose every element is checked
// bitwise; element 0 carries a stop vote instead (a rank votes once the script's `stop` file
// exists), so that every rank stops after the same op. Output, one line per rank:
//   OUTAGE rank=R ops=K wrong=W code=C at=<unix time of the error, 0 without> destroy_s=S msg=M
// Then the ranks leave together (a file each in DIR) once the script has restored the link
// (DIR/restored), through MPI_Finalize: every peer is alive, only the link was down.
//
// Usage: outage_rank --sync DIR [--bytes N=16M]
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "prioccl/prioccl.hpp"

namespace {

namespace fs = std::filesystem;

double unixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Rank r's element i of op k, small enough that the sum over ranks stays exact.
int32_t input(int rank, uint64_t op, size_t i) {
  return static_cast<int32_t>((static_cast<uint64_t>(rank) * 7919 + op * 104729 + i) % 65521);
}

void waitFor(const fs::path& path, double seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!fs::exists(path) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0, rank = 0, nranks = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  fs::path sync;
  size_t bytes = 16 << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--sync")) sync = argv[i + 1];
    if (!std::strcmp(argv[i], "--bytes")) bytes = std::strtoull(argv[i + 1], nullptr, 10);
  }
  if (sync.empty() || bytes < 2 * sizeof(int32_t)) {
    if (rank == 0) std::fprintf(stderr, "usage: outage_rank --sync DIR [--bytes N >= 8]\n");
    MPI_Finalize();
    return 2;
  }
  prioccl::Communicator comm;
  try {
    comm = prioccl::Communicator::world(prioccl::Config::fromEnv());
  } catch (const prioccl::Error& e) {  // (before the outage: the script waits for ready files)
    std::printf("OUTAGE rank=%d creation failed: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const size_t count = bytes / sizeof(int32_t);
  std::vector<int32_t> buf(count);
  uint64_t ops = 0, wrong = 0;
  priocclResult_t code = priocclSuccess;
  std::string message = "no error";
  double failedAt = 0;
  std::ofstream(sync / ("ready." + std::to_string(rank))).put('1');
  try {
    for (bool stop = false; !stop; ++ops) {
      for (size_t i = 1; i < count; ++i) buf[i] = input(rank, ops, i);
      buf[0] = fs::exists(sync / "stop") ? 1 : 0;
      comm.allReduce(buf.data(), buf.data(), count, priocclInt32, priocclSum);
      stop = buf[0] > 0;
      for (size_t i = 1; i < count; ++i) {
        int64_t want = 0;
        for (int r = 0; r < nranks; ++r) want += input(r, ops, i);
        if (buf[i] != want) {
          ++wrong;
          break;
        }
      }
    }
  } catch (const prioccl::Error& e) {
    failedAt = unixNow();
    code = e.code();
    message = e.what();
  }
  auto t0 = std::chrono::steady_clock::now();
  try {
    comm.destroy();
  } catch (const prioccl::Error& e) {  // reported, not thrown away: the script checks it
    message += std::string(" | destroy: ") + e.what();
    if (code == priocclSuccess) code = e.code(), failedAt = unixNow();
  }
  double destroySeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("OUTAGE rank=%d ops=%llu wrong=%llu code=%d at=%.3f destroy_s=%.3f msg=%s\n", rank,
              static_cast<unsigned long long>(ops), static_cast<unsigned long long>(wrong),
              static_cast<int>(code), failedAt, destroySeconds, message.c_str());
  std::fflush(stdout);
  std::ofstream(sync / ("done." + std::to_string(rank))).put('1');
  waitFor(sync / "restored", 120);
  for (int r = 0; r < nranks; ++r) waitFor(sync / ("done." + std::to_string(r)), 60);
  MPI_Finalize();
  return 0;
}
