// gpu_perf: prioccl on device buffers against plain NCCL in the same run, on the same GPUs.
//   mpirun -np N gpu_perf [--transport nccl|mpi|ucx|mpi-coll|tcp] [-b 1M] [-e 256M] [-f 4]
//                         [--iters 20] [--warmup 5] [--high 1M] [--low 256M] [--reps 5]
//                         [--json FILE]
// Each rank uses device rank % devices (NCCL itself refuses two ranks on one GPU).
//
// 1. Bandwidth: for each size, float32 sum, out of place, `iters` blocking all-reduces timed on
//    the host (one op at a time: prioccl's blocking call returns when the op is done; NCCL's
//    launch is followed by cudaStreamSynchronize). The median over iterations, algbw and busbw
//    as nccl-tests define them, and prioccl's time over NCCL's. prioccl's result is checked
//    bitwise against NCCL's at every size (small integers: every summation order agrees).
// 2. Priority: an urgent `high`-byte all-reduce submitted while a `low`-byte one runs, under
//    prioccl's priority scheduler and its FIFO baseline, against NCCL launching the urgent op
//    behind the large one on its stream (what a plain NCCL user gets). Each urgent time is the
//    median over reps; the slowdown is over the urgent op alone on plain NCCL.
// Ends with one line "RESULT key=value ..." (the figures the GPU kit's report reads).
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "prioccl/prioccl.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Every rank's value of x, maximum (the slowest rank sets the pace, as nccl-tests' -a 3).
double maxOverRanks(double x) {
  double m = 0;
  MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return m;
}

void cudaCheck(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "gpu_perf: %s: %s\n", what, cudaGetErrorString(e));
  MPI_Abort(MPI_COMM_WORLD, 1);
}

void ncclCheck(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return;
  std::fprintf(stderr, "gpu_perf: %s: %s\n", what, ncclGetErrorString(r));
  MPI_Abort(MPI_COMM_WORLD, 1);
}

float* deviceFloats(size_t n, int rank) {
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>((i * 7 + rank * 3) % 64);
  void* p = nullptr;
  cudaCheck(cudaMalloc(&p, n * sizeof(float)), "cudaMalloc");
  cudaCheck(cudaMemcpy(p, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  return static_cast<float*>(p);
}

struct Options {
  std::string transport = "nccl";
  long long minBytes = 1 << 20, maxBytes = 256 << 20, factor = 4;
  int iters = 20, warmup = 5, reps = 5;
  long long high = 1 << 20, low = 256 << 20;
  std::string json;
};

priocclTransport_t transportOf(const std::string& name) {
  if (name == "mpi") return priocclTransportMpi;
  if (name == "ucx") return priocclTransportUcx;
  if (name == "mpi-coll") return priocclTransportMpiColl;
  if (name == "tcp") return priocclTransportTcp;
  return priocclTransportNccl;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"prioccl on device buffers against plain NCCL"};
  app.add_option("--transport", o.transport, "prioccl's transport")
      ->check(CLI::IsMember({"nccl", "mpi", "ucx", "mpi-coll", "tcp"}));
  app.add_option("-b,--minbytes", o.minBytes, "smallest size (bytes)");
  app.add_option("-e,--maxbytes", o.maxBytes, "largest size (bytes)");
  app.add_option("-f,--stepfactor", o.factor, "size factor")->check(CLI::Range(2, 1 << 20));
  app.add_option("--iters", o.iters, "timed iterations per size")->check(CLI::Range(1, 100000));
  app.add_option("--warmup", o.warmup, "untimed iterations per size");
  app.add_option("--high", o.high, "the urgent op's bytes (0: no priority test)");
  app.add_option("--low", o.low, "the large op's bytes");
  app.add_option("--reps", o.reps, "priority repetitions")->check(CLI::Range(1, 1000));
  app.add_option("--json", o.json, "write the figures here (rank 0)");
  CLI11_PARSE(app, argc, argv);

  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    if (rank == 0) std::printf("SKIPPED: no usable GPU (cudaGetDeviceCount)\n");
    MPI_Finalize();
    return 77;
  }
  int device = rank % devices;
  cudaCheck(cudaSetDevice(device), "cudaSetDevice");
  cudaDeviceProp prop{};
  cudaCheck(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  int ncclVersion = 0;
  ncclGetVersion(&ncclVersion);

  // NCCL needs a GPU per rank; with fewer, the baseline is prioccl itself on host buffers (what
  // staging costs), and the priority test is left out.
  const bool haveNccl = size <= devices;
  if (!haveNccl) o.high = 0;
  ncclUniqueId id;
  ncclComm_t nccl = nullptr;
  if (haveNccl) {
    if (rank == 0) ncclCheck(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclCheck(ncclCommInitRank(&nccl, size, id, rank), "ncclCommInitRank");
  }
  cudaStream_t stream = nullptr;
  cudaCheck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

  prioccl::Config config = prioccl::Config::fromEnv();
  config.transport = transportOf(o.transport);
  prioccl::Communicator comm = prioccl::Communicator::world(config);
  prioccl::Config fifoConfig = config;
  fifoConfig.schedule = priocclScheduleFifo;
  prioccl::Communicator fifo = prioccl::Communicator::world(fifoConfig);

  const double busFactor = size > 1 ? 2.0 * (size - 1) / size : 0.0;
  if (rank == 0) {
    std::printf(
        "# gpu_perf: %d rank(s), device %s (%d device(s) visible), NCCL %d, prioccl over %s\n",
        size, prop.name, devices, ncclVersion, o.transport.c_str());
    std::printf(
        "# float32 sum, out of place, blocking; median of %d; time in us, bw in GB/s; "
        "baseline: %s\n",
        o.iters, haveNccl ? "plain ncclAllReduce" : "prioccl on host buffers");
    std::printf("#%12s %12s %10s %10s %12s %10s %10s %8s %6s\n", "bytes", "base_time", "base_algbw",
                "base_busbw", "prioccl_time", "p_algbw", "p_busbw", "ratio", "same");
  }
  std::string jsonSizes;
  int wrong = 0;
  for (long long bytes = o.minBytes; bytes <= o.maxBytes; bytes *= o.factor) {
    size_t n = static_cast<size_t>(bytes) / sizeof(float);
    float* send = deviceFloats(n, rank);
    float* recvNccl = deviceFloats(n, 0);
    float* recvPrio = deviceFloats(n, 0);
    std::vector<double> tn, tp;
    std::vector<float> hostSend(haveNccl ? 0 : n), hostRecv(haveNccl ? 0 : n);
    if (!haveNccl)
      cudaCheck(cudaMemcpy(hostSend.data(), send, n * sizeof(float), cudaMemcpyDeviceToHost),
                "copy");
    for (int i = 0; i < o.warmup + o.iters; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      auto a = Clock::now();
      if (haveNccl) {
        ncclCheck(ncclAllReduce(send, recvNccl, n, ncclFloat32, ncclSum, nccl, stream),
                  "ncclAllReduce");
        cudaCheck(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      } else {
        comm.allReduce(hostSend.data(), hostRecv.data(), n, priocclFloat32, priocclSum);
      }
      auto b = Clock::now();
      if (i >= o.warmup) tn.push_back(seconds(a, b));
    }
    if (!haveNccl)
      cudaCheck(cudaMemcpy(recvNccl, hostRecv.data(), n * sizeof(float), cudaMemcpyHostToDevice),
                "copy");
    for (int i = 0; i < o.warmup + o.iters; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      auto a = Clock::now();
      comm.allReduce(send, recvPrio, n, priocclFloat32, priocclSum);
      auto b = Clock::now();
      if (i >= o.warmup) tp.push_back(seconds(a, b));
    }
    std::vector<float> hn(n), hp(n);
    cudaCheck(cudaMemcpy(hn.data(), recvNccl, n * sizeof(float), cudaMemcpyDeviceToHost), "copy");
    cudaCheck(cudaMemcpy(hp.data(), recvPrio, n * sizeof(float), cudaMemcpyDeviceToHost), "copy");
    int same = std::memcmp(hn.data(), hp.data(), n * sizeof(float)) == 0 ? 1 : 0, allSame = 0;
    MPI_Allreduce(&same, &allSame, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!allSame) ++wrong;
    double mn = maxOverRanks(median(tn)), mp = maxOverRanks(median(tp));
    double an = bytes / mn / 1e9, ap = bytes / mp / 1e9;
    if (rank == 0) {
      std::printf(" %12lld %12.1f %10.2f %10.2f %12.1f %10.2f %10.2f %8.3f %6s\n", bytes, mn * 1e6,
                  an, an * busFactor, mp * 1e6, ap, ap * busFactor, mp / mn,
                  allSame ? "yes" : "NO");
      char line[256];
      std::snprintf(line, sizeof line,
                    "%s{\"bytes\": %lld, \"base_us\": %.2f, \"prioccl_us\": %.2f, "
                    "\"base_busbw\": %.3f, \"prioccl_busbw\": %.3f, \"base_algbw\": %.3f, "
                    "\"prioccl_algbw\": %.3f, \"bitwise_same\": %s}",
                    jsonSizes.empty() ? "" : ", ", bytes, mn * 1e6, mp * 1e6, an * busFactor,
                    ap * busFactor, an, ap, allSame ? "true" : "false");
      jsonSizes += line;
    }
    cudaFree(send);
    cudaFree(recvNccl);
    cudaFree(recvPrio);
  }

  // Priority: an urgent op while a large one runs.
  double alone = 0, underNccl = 0, underPrio = 0, underFifo = 0, lowAlone = 0;
  if (o.high > 0) {
    size_t nh = static_cast<size_t>(o.high) / sizeof(float);
    size_t nl = static_cast<size_t>(o.low) / sizeof(float);
    // Out of place: at one rank an in-place all-reduce is nothing to NCCL, a copy otherwise.
    float* hi = deviceFloats(nh, rank);
    float* lo = deviceFloats(nl, rank);
    float* hiOut = deviceFloats(nh, 0);
    float* loOut = deviceFloats(nl, 0);
    std::vector<double> ta, tl, tnccl, tprio, tfifo;
    for (int r = 0; r < o.reps + 1; ++r) {
      // Alone, on plain NCCL: the urgent op and the large one.
      MPI_Barrier(MPI_COMM_WORLD);
      auto a = Clock::now();
      ncclCheck(ncclAllReduce(hi, hiOut, nh, ncclFloat32, ncclSum, nccl, stream), "ncclAllReduce");
      cudaCheck(cudaStreamSynchronize(stream), "sync");
      auto b = Clock::now();
      ncclCheck(ncclAllReduce(lo, loOut, nl, ncclFloat32, ncclSum, nccl, stream), "ncclAllReduce");
      cudaCheck(cudaStreamSynchronize(stream), "sync");
      auto c = Clock::now();
      // Plain NCCL: the urgent op launched a quarter of the large op's time after it, behind it
      // on the stream.
      double delay = 0.25 * seconds(b, c);
      MPI_Barrier(MPI_COMM_WORLD);
      ncclCheck(ncclAllReduce(lo, loOut, nl, ncclFloat32, ncclSum, nccl, stream), "ncclAllReduce");
      std::this_thread::sleep_for(std::chrono::duration<double>(delay));
      auto d = Clock::now();
      ncclCheck(ncclAllReduce(hi, hiOut, nh, ncclFloat32, ncclSum, nccl, stream), "ncclAllReduce");
      cudaCheck(cudaStreamSynchronize(stream), "sync");
      auto e = Clock::now();
      // prioccl, priority then FIFO: the same pattern through the library.
      double t[2] = {0, 0};
      for (int mode = 0; mode < 2; ++mode) {
        prioccl::Communicator& cm = mode == 0 ? comm : fifo;
        MPI_Barrier(MPI_COMM_WORLD);
        auto big = cm.allReduceAsync(lo, loOut, nl, priocclFloat32, priocclSum, 100);
        std::this_thread::sleep_for(std::chrono::duration<double>(delay));
        auto f = Clock::now();
        cm.allReduceAsync(hi, hiOut, nh, priocclFloat32, priocclSum, 0).wait();
        t[mode] = seconds(f, Clock::now());
        big.wait();
      }
      if (r == 0) continue;  // warm-up
      ta.push_back(seconds(a, b));
      tl.push_back(seconds(b, c));
      tnccl.push_back(seconds(d, e));
      tprio.push_back(t[0]);
      tfifo.push_back(t[1]);
    }
    alone = maxOverRanks(median(ta));
    lowAlone = maxOverRanks(median(tl));
    underNccl = maxOverRanks(median(tnccl));
    underPrio = maxOverRanks(median(tprio));
    underFifo = maxOverRanks(median(tfifo));
    if (rank == 0) {
      std::printf(
          "# priority: urgent %lld B under a %lld B op started 25%% of its time earlier "
          "(median of %d, us)\n",
          o.high, o.low, o.reps);
      std::printf("#   urgent alone (nccl) %.1f, large alone (nccl) %.1f\n", alone * 1e6,
                  lowAlone * 1e6);
      std::printf(
          "#   urgent under load: nccl (FIFO stream) %.1f, prioccl priority %.1f, "
          "prioccl fifo %.1f\n",
          underNccl * 1e6, underPrio * 1e6, underFifo * 1e6);
      std::printf(
          "#   slowdown over urgent alone: nccl %.2f, prioccl priority %.2f, prioccl fifo "
          "%.2f\n",
          underNccl / alone, underPrio / alone, underFifo / alone);
    }
    for (float* p : {hi, lo, hiOut, loOut}) cudaFree(p);
  }
  if (rank == 0) {
    std::printf(
        "RESULT ranks=%d nccl=%d transport=%s wrong_sizes=%d urgent_alone_us=%.1f "
        "urgent_nccl_us=%.1f urgent_prioccl_us=%.1f urgent_fifo_us=%.1f\n",
        size, ncclVersion, o.transport.c_str(), wrong, alone * 1e6, underNccl * 1e6,
        underPrio * 1e6, underFifo * 1e6);
    if (!o.json.empty()) {
      std::ofstream f(o.json);
      f << "{\"ranks\": " << size << ", \"device\": \"" << prop.name
        << "\", \"nccl_version\": " << ncclVersion << ", \"baseline\": \""
        << (haveNccl ? "nccl" : "prioccl host buffers") << "\", \"transport\": \"" << o.transport
        << "\", \"sizes\": [" << jsonSizes << "], \"priority\": {\"high_bytes\": " << o.high
        << ", \"low_bytes\": " << o.low << ", \"urgent_alone_us\": " << alone * 1e6
        << ", \"low_alone_us\": " << lowAlone * 1e6
        << ", \"urgent_under_nccl_us\": " << underNccl * 1e6
        << ", \"urgent_under_prioccl_us\": " << underPrio * 1e6
        << ", \"urgent_under_prioccl_fifo_us\": " << underFifo * 1e6 << "}}\n";
    }
  }
  fifo.destroy();
  comm.destroy();
  if (nccl) ncclCommDestroy(nccl);
  cudaStreamDestroy(stream);
  MPI_Finalize();
  return wrong ? 1 : 0;
}
