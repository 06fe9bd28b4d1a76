// The NCCL collective backend (PRIOCCL_TRANSPORT=nccl) on a GPU: device buffers through every
// collective it runs, against MPI on host copies of the same bytes (integers and small integral
// floats, so every order of summation gives the same bits), bitwise identical on every rank; an
// urgent op submitted under a large one completes first and correct. Without a usable GPU and
// NCCL (this development machine has the toolkit but no device) every rank prints why and exits
// 77, which CTest reports as skipped.
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "nccl/nccl_coll_backend.h"
#include "prioccl/prioccl.hpp"

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  std::fprintf(stderr, "[rank %d] FAIL: %s\n", r, what.c_str());
}

template <typename T>
T* device(const std::vector<T>& host) {
  void* p = nullptr;
  if (cudaMalloc(&p, host.size() * sizeof(T) + 1) != cudaSuccess) return nullptr;
  cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return static_cast<T*>(p);
}

template <typename T>
std::vector<T> back(const T* d, size_t n) {
  std::vector<T> h(n);
  cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Every rank decides alike: skip when any rank cannot use a GPU.
  std::string why = prioccl::NcclCollBackend::unavailable();
  int bad = why.empty() ? 0 : 1, anyBad = 0;
  MPI_Allreduce(&bad, &anyBad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (anyBad) {
    if (rank == 0)
      std::printf("SKIPPED: no usable GPU and NCCL here (rank 0: %s)\n",
                  why.empty() ? "another rank has none" : why.c_str());
    MPI_Finalize();
    return 77;
  }
  int devices = 0;
  cudaGetDeviceCount(&devices);
  // NCCL refuses two ranks on one GPU ("Duplicate GPU detected", NCCL 2.28 at least): with
  // fewer GPUs than ranks the test skips, unless PRIOCCL_TEST_NCCL_SHARE_GPU=1 asks to try, and
  // then it reports NCCL's answer.
  const char* share = std::getenv("PRIOCCL_TEST_NCCL_SHARE_GPU");
  bool tryShared = share && std::string(share) == "1";
  if (devices < size && !tryShared) {
    if (rank == 0)
      std::printf(
          "SKIPPED: %d ranks but %d GPU(s): NCCL needs one GPU per rank "
          "(PRIOCCL_TEST_NCCL_SHARE_GPU=1 tries anyway)\n",
          size, devices);
    MPI_Finalize();
    return 77;
  }
  cudaSetDevice(rank % devices);
  {
    prioccl::Config config = prioccl::Config::fromEnv();
    config.transport = priocclTransportNccl;
    prioccl::Communicator comm;
    try {
      comm = prioccl::Communicator::world(config);
    } catch (const prioccl::Error& e) {
      std::string what = e.what();
      if (devices < size && what.find("Duplicate GPU") != std::string::npos) {
        std::printf("SKIPPED: rank %d: NCCL refuses %d ranks on %d GPU(s): %s\n", rank, size,
                    devices, e.what());
        std::fflush(stdout);
        MPI_Finalize();
        return 77;
      }
      throw;
    }
    // All-reduce: float32 and int32 sums, float32 max, of several launches (4 MiB).
    const size_t n = 1 << 20;
    std::vector<float> hf(n);
    std::vector<int32_t> hi(n);
    for (size_t i = 0; i < n; ++i) {
      hf[i] = static_cast<float>((i * 7 + static_cast<size_t>(rank) * 13) % 100);
      hi[i] = static_cast<int32_t>((i * 3 + static_cast<size_t>(rank)) % 1000) - 500;
    }
    std::vector<float> rf(n), rmax(n);
    std::vector<int32_t> ri(n);
    MPI_Allreduce(hf.data(), rf.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(hf.data(), rmax.data(), static_cast<int>(n), MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(hi.data(), ri.data(), static_cast<int>(n), MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
    float* df = device(hf);
    float* dmax = device(hf);
    int32_t* di = device(hi);
    expect(df && dmax && di, "cudaMalloc");
    auto a = comm.allReduceAsync(df, df, n, priocclFloat32, priocclSum, 5);
    auto b = comm.allReduceAsync(dmax, dmax, n, priocclFloat32, priocclMax, 3);
    auto c = comm.allReduceAsync(di, di, n, priocclInt32, priocclSum, 0, "ints");
    a.wait();
    b.wait();
    c.wait();
    expect(back(df, n) == rf, "float32 sum equals MPI's");
    expect(back(dmax, n) == rmax, "float32 max equals MPI's");
    expect(back(di, n) == ri, "int32 sum equals MPI's");
    // Broadcast from the last rank, all-gather, reduce-scatter, barrier.
    std::vector<int32_t> hb(1000, rank == size - 1 ? 42 : -1);
    int32_t* db = device(hb);
    comm.broadcastAsync(db, db, hb.size(), priocclInt32, size - 1, 0).wait();
    expect(back(db, hb.size()) == std::vector<int32_t>(1000, 42), "broadcast");
    std::vector<int32_t> mine(16, rank), all(16 * static_cast<size_t>(size), 0), want;
    for (int r = 0; r < size; ++r) want.insert(want.end(), 16, r);
    int32_t* dm = device(mine);
    int32_t* da = device(all);
    comm.allGatherAsync(dm, da, 16, priocclInt32, 0).wait();
    expect(back(da, all.size()) == want, "all-gather");
    int32_t* dpart = device(std::vector<int32_t>(16, 0));
    comm.reduceScatterAsync(da, dpart, 16, priocclInt32, priocclSum, 0).wait();
    expect(back(dpart, 16) == std::vector<int32_t>(16, size * rank), "reduce-scatter");
    comm.barrier();
    // An urgent op under a 64 MiB one: done first, both right.
    const size_t big = 16u << 20;
    std::vector<float> hbig(big, 1.0f), hsmall(1 << 16, 2.0f);
    float* dbig = device(hbig);
    float* dsmall = device(hsmall);
    auto low = comm.allReduceAsync(dbig, dbig, big, priocclFloat32, priocclSum, 100);
    auto urgent =
        comm.allReduceAsync(dsmall, dsmall, hsmall.size(), priocclFloat32, priocclSum, -1);
    urgent.wait();
    bool lowRunning = !low.test();
    low.wait();
    int everywhere = 0, mineRunning = lowRunning ? 1 : 0;
    MPI_Allreduce(&mineRunning, &everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0)
      std::printf("urgent op finished while the 64 MiB op ran, on every rank: %d\n", everywhere);
    expect(back(dsmall, 4)[3] == 2.0f * static_cast<float>(size), "urgent op's result");
    expect(back(dbig, 4)[3] == static_cast<float>(size), "large op's result");
    for (void* p :
         {static_cast<void*>(df), static_cast<void*>(dmax), static_cast<void*>(di),
          static_cast<void*>(db), static_cast<void*>(dm), static_cast<void*>(da),
          static_cast<void*>(dpart), static_cast<void*>(dbig), static_cast<void*>(dsmall)})
      cudaFree(p);
  }
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("%s\n", total ? "FAILED" : "nccl backend: all checks passed");
  MPI_Finalize();
  return total ? 1 : 0;
}
