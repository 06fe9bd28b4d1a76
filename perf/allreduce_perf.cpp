// allreduce_perf: prioccl all-reduce bandwidth against MPI_Allreduce in the same run, with the
// conventions and output of nccl-tests' all_reduce_perf.
//   mpirun -np 4 allreduce_perf -b 1K -e 64M -f 4 [-d float32] [-o sum] [-n 20] [-w 5] [-c 1]
//          [--baseline mpi|none] [--schedule priority|fifo] [--chunk B] [--credit B] [--window N]
//          [--algo auto|ring|tree|rd|hd|all] [--transport mpi|ucx|all]
// --algo NAME runs one communicator with that algorithm. --algo all compares, in one run, the
// automatic choice with each fixed algorithm and with MPI_Allreduce (algo_compare.cpp).
// --transport mpi|ucx picks prioccl's transport; --transport all compares, in one run, prioccl
// over MPI, prioccl over UCX and MPI_Allreduce (transport_compare.cpp). One compare mode a run.
#include <getopt.h>

#include <climits>
#include <cstdio>
#include <string>
#include <vector>

#include "algo_compare.h"
#include "allreduce_common.h"
#include "transport_compare.h"

namespace {

using Options = perf::AllReduceOptions;

const char kUsage[] =
    "usage: allreduce_perf [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-d DTYPE] [-o OP] [-n ITERS]\n"
    "         [-w WARMUP] [-c 0|1] [--baseline mpi|none] [--schedule priority|fifo]\n"
    "         [--chunk BYTES] [--credit BYTES] [--window CHUNKS] [--algo NAME]\n"
    "         [--transport NAME]\n"
    "  sizes take K/M/G suffixes; defaults -b 1K -e 64M -f 4 -d float32 -o sum -n 20 -w 5 -c 1\n"
    "  DTYPE: int8 uint8 int32 int64 float16 bfloat16 float32 float64; OP: sum prod min max avg\n"
    "  PRIOCCL_* variables set the configuration; --schedule/--chunk/--credit/--window/--algo/\n"
    "  --transport override. --algo auto|ring|tree|rd|hd: the algorithm (default PRIOCCL_ALGO,\n"
    "  else auto); --algo all: one communicator per algorithm, timed against each other and MPI\n"
    "  at every size (median of 5 interleaved blocks of ITERS/5), with auto/best and mpi/auto\n"
    "  ratios\n"
    "  --transport mpi|ucx: prioccl's transport (default PRIOCCL_TRANSPORT, else mpi);\n"
    "  --transport all: one communicator per transport, timed against each other and MPI as\n"
    "  --algo all, with the ucx/mpi busbw ratio; not together with --algo all\n";

// Returns "ok" on success, "help" for -h, else what was wrong.
std::string parseOptions(int argc, char** argv, Options* o) {
  static const option longOpts[] = {{"minbytes", required_argument, nullptr, 'b'},
                                    {"maxbytes", required_argument, nullptr, 'e'},
                                    {"stepfactor", required_argument, nullptr, 'f'},
                                    {"datatype", required_argument, nullptr, 'd'},
                                    {"op", required_argument, nullptr, 'o'},
                                    {"iters", required_argument, nullptr, 'n'},
                                    {"warmup_iters", required_argument, nullptr, 'w'},
                                    {"check", required_argument, nullptr, 'c'},
                                    {"baseline", required_argument, nullptr, 1},
                                    {"schedule", required_argument, nullptr, 2},
                                    {"chunk", required_argument, nullptr, 3},
                                    {"credit", required_argument, nullptr, 4},
                                    {"window", required_argument, nullptr, 5},
                                    {"algo", required_argument, nullptr, 6},
                                    {"transport", required_argument, nullptr, 7},
                                    {"help", no_argument, nullptr, 'h'},
                                    {nullptr, 0, nullptr, 0}};
  o->config = prioccl::Config::fromEnv();
  long long v = 0;
  int c;
  while ((c = getopt_long(argc, argv, "b:e:f:d:o:n:w:c:h", longOpts, nullptr)) != -1) {
    std::string arg = optarg ? optarg : "";
    bool ok = true;
    switch (c) {
      case 'b':
        ok = perf::parseBytes(optarg, &o->minBytes);
        break;
      case 'e':
        ok = perf::parseBytes(optarg, &o->maxBytes);
        break;
      case 'f':
        ok = perf::parseBytes(optarg, &o->factor);
        break;
      case 'd':
        ok = (o->dtype = perf::findDtype(arg)) != nullptr;
        break;
      case 'o':
        ok = (o->op = perf::findOp(arg)) != nullptr;
        break;
      case 'n':
        ok = perf::parseInt(optarg, &o->iters) && o->iters > 0;
        break;
      case 'w':
        ok = perf::parseInt(optarg, &o->warmup);
        break;
      case 'c':
        ok = perf::parseInt(optarg, &o->check) && o->check <= 1;
        break;
      case 1:
        ok = arg == "mpi" || arg == "none";
        o->mpiBaseline = arg == "mpi";
        break;
      case 2:
        ok = arg == "priority" || arg == "fifo";
        o->config.schedule = arg == "fifo" ? priocclScheduleFifo : priocclSchedulePriority;
        break;
      case 3:
      case 4:
      case 5:
        ok = perf::parseBytes(optarg, &v) && v > 0;
        (c == 3   ? o->config.chunkBytes
         : c == 4 ? o->config.creditBytes
                  : o->config.windowChunks) = static_cast<size_t>(v);
        break;
      case 6:
        o->compareAlgorithms = arg == "all";
        if (!o->compareAlgorithms) {
          priocclAlgorithm_t a = prioccl::parseAlgorithm(arg);
          if (a == priocclNumAlgos)
            return "--algo '" + arg + "' is not auto, ring, tree, rd, hd or all";
          o->config.algorithm = a;
        }
        break;
      case 7:
        if (arg != "mpi" && arg != "ucx" && arg != "all")
          return "--transport '" + arg + "' is not mpi, ucx or all";
        o->compareTransports = arg == "all";
        if (!o->compareTransports)
          o->config.transport = arg == "ucx" ? priocclTransportUcx : priocclTransportMpi;
        break;
      case 'h':
        return "help";
      default:
        return "unknown option";  // getopt has named it
    }
    if (!ok) return "bad value '" + arg + "'";
  }
  if (optind < argc) return std::string("unexpected argument '") + argv[optind] + "'";
  if (o->compareAlgorithms && o->compareTransports)
    return "--algo all and --transport all cannot be combined: one compare mode per run (pick "
           "one transport for --algo all, or one algorithm for --transport all)";
  if (o->minBytes > o->maxBytes) return "-b is larger than -e";
  if (o->factor < 2 && o->minBytes != o->maxBytes) return "-f must be at least 2";
  return "ok";
}

// Mean seconds per iteration after `warmup` untimed ones, the slowest rank's.
template <typename Fn>
double timeLoop(int warmup, int iters, Fn&& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) fn();
  return perf::maxOverRanks((MPI_Wtime() - t0) / iters);
}

// One communicator (o.config's algorithm) against MPI_Allreduce, one row per size; returns the
// number of wrong elements (all sizes, all ranks). Throws prioccl::Error.
long long runOne(const Options& o, int rank, int p) {
  long long wrongTotal = 0;
  prioccl::Communicator comm = prioccl::Communicator::world(o.config);
  const perf::DtypeInfo& dt = *o.dtype;
  const perf::OpInfo& op = *o.op;
  perf::SweepBuffers buf(o, rank, p);
  const perf::Inputs& in = buf.in;
  std::vector<unsigned char>& send = buf.send;
  std::vector<unsigned char>& recv = buf.recv;
  bool mpiOk = buf.mpiOk;
  if (rank == 0) {
    std::printf("# prioccl allreduce_perf, out of place: nranks %d, dtype %s, op %s\n", p, dt.name,
                op.name);
    std::printf("# config: %s\n", comm.config().describe().c_str());
    std::printf("# model: %s\n", comm.algorithmModel().c_str());
    std::printf("# iters %d, warmup %d, check %d, baseline %s%s\n", o.iters, o.warmup, o.check,
                o.mpiBaseline ? "MPI_Allreduce" : "none",
                o.mpiBaseline && !mpiOk ? " (MPI has no such dtype: n/a)" : "");
    std::printf(
        "# time: mean per iteration, slowest rank; algbw = size/time; "
        "busbw = algbw*2(p-1)/p (0 when p = 1)\n");
    if (op.op == priocclAvg && mpiOk)
      std::printf("# MPI avg = MPI_SUM, then a local divide by nranks (timed)\n");
    std::printf("# ratio = prioccl busbw / MPI busbw (= MPI time / prioccl time)\n#\n");
    std::printf("#%11s  %12s  %8s  %6s  %10s  %11s  %11s  %6s |  %12s  %9s  %6s |  %6s\n", "size",
                "count", "type", "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong",
                "mpi time(us)", "mpi busbw", "#wrong", "ratio");
  }
  std::vector<double> busbws, mpiBusbws, ratios;
  for (long long bytes = o.minBytes; bytes <= o.maxBytes; bytes *= o.factor) {
    size_t count = std::max<size_t>(1, bytes / dt.size), nbytes = count * dt.size;
    perf::poison(recv.data(), nbytes);
    double t = timeLoop(o.warmup, o.iters,
                        [&] { comm.allReduce(send.data(), recv.data(), count, dt.type, op.op); });
    long long wrong =
        o.check ? perf::sumOverRanks(perf::countWrong(in, dt.type, recv.data(), count)) : -1;
    wrongTotal += std::max(0LL, wrong);
    double algbw = nbytes / t / 1e9, busbw = perf::busBandwidth(nbytes, t, p);
    busbws.push_back(busbw);
    char mpiCols[96] = "";
    if (mpiOk && count <= INT_MAX) {
      perf::poison(recv.data(), nbytes);
      double tm = timeLoop(o.warmup, o.iters,
                           [&] { perf::mpiAllReduce(dt, op, send.data(), recv.data(), count, p); });
      long long mwrong =
          o.check ? perf::sumOverRanks(perf::countWrong(in, dt.type, recv.data(), count)) : -1;
      wrongTotal += std::max(0LL, mwrong);
      double mbus = perf::busBandwidth(nbytes, tm, p);
      mpiBusbws.push_back(mbus);
      ratios.push_back(tm / t);
      std::snprintf(mpiCols, sizeof mpiCols, "%12.1f  %9.3f  %6s |  %6.2f", tm * 1e6, mbus,
                    perf::wrongText(mwrong).c_str(), tm / t);
    } else {
      std::snprintf(mpiCols, sizeof mpiCols, "%12s  %9s  %6s |  %6s", "n/a", "n/a", "n/a", "n/a");
    }
    if (rank == 0) {
      std::printf("%12zu  %12zu  %8s  %6s  %10.1f  %11.3f  %11.3f  %6s |  %s\n", nbytes, count,
                  dt.name, op.name, t * 1e6, algbw, busbw, perf::wrongText(wrong).c_str(), mpiCols);
      std::fflush(stdout);
    }
    if (o.factor < 2) break;  // -b == -e: one size
  }
  if (rank == 0) {
    auto avg = [](const std::vector<double>& v) {
      double s = 0;
      for (double x : v) s += x;
      return s / v.size();
    };
    std::printf("# Avg bus bandwidth    : %.3f\n", avg(busbws));
    if (mpiBusbws.empty())
      std::printf("# Avg MPI bus bandwidth : n/a\n# Median ratio : n/a\n");
    else
      std::printf("# Avg MPI bus bandwidth : %.3f\n# Median ratio : %.3f\n", avg(mpiBusbws),
                  perf::median(ratios));
    perf::printOutOfBounds(o.check, wrongTotal);
  }
  comm.destroy();
  return wrongTotal;
}

}  // namespace

int main(int argc, char** argv) {
  if (!perf::initMpi(&argc, &argv)) {
    std::fprintf(stderr, "allreduce_perf: MPI does not provide MPI_THREAD_MULTIPLE\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int rank = 0, p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  Options o;
  std::string err;
  try {
    err = parseOptions(argc, argv, &o);
  } catch (const prioccl::Error& e) {  // a malformed PRIOCCL_* variable
    err = e.what();
  }
  if (err != "ok") {
    if (rank == 0 && err == "help") std::fputs(kUsage, stdout);
    if (rank == 0 && err != "help")
      std::fprintf(stderr, "allreduce_perf: %s\n%s", err.c_str(), kUsage);
    MPI_Finalize();
    return err == "help" ? 0 : 2;
  }

  long long wrongTotal = 0;
  try {
    wrongTotal = o.compareAlgorithms   ? perf::compareAlgorithms(o, rank, p)
                 : o.compareTransports ? perf::compareTransports(o, rank, p)
                                       : runOne(o, rank, p);
  } catch (const prioccl::Error& e) {
    std::fprintf(stderr, "allreduce_perf: rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  MPI_Finalize();
  return wrongTotal ? 1 : 0;
}
