// all_reduce_perf (alias allreduce_perf): prioccl all-reduce bandwidth with nccl-tests'
// all_reduce_perf options and output layout, so tools written for nccl-tests read its results,
// and with MPI_Allreduce timed in the same run as the baseline (on "#mpi" lines, which
// nccl-tests' parsers skip as comments). --osu prints OSU osu_allreduce's latency layout instead;
// --json / -F write the results as JSON / CSV. Usage: kFooter below, or --help.
// --algo all / --transport all are compare modes with their own tables (algo_compare.cpp,
// transport_compare.cpp). The driver (options, timing, output) is every perf tool's:
// nccl_perf.cpp; this file is the all-reduce's Collective.
#include <climits>

#include "algo_compare.h"
#include "allreduce_common.h"
#include "nccl_perf.h"
#include "transport_compare.h"

namespace {

const char kFooter[] =
    "Sizes take K/M/G suffixes (binary: 4K = 4096; also 4KiB, 4KB). -d and -o accept 'all'\n"
    "(every datatype / op, nccl-tests' order). Datatypes: int8 char uint8 int32 int uint32\n"
    "int64 uint64 half float16 float float32 double float64 bfloat16 (printed with nccl-tests'\n"
    "names: half, float, double). Ops: sum prod max min avg.\n"
    "\n"
    "Output (nccl-tests' all_reduce_perf layout): '#' header lines, then one data line per\n"
    "size, type and op with 13 fields: size count type redop root(-1) | out-of-place: time(us)\n"
    "algbw busbw #wrong | in-place (sendbuf == recvbuf): time algbw busbw #wrong; busbw is\n"
    "field 8 (out-of-place) and 12 (in-place); then '# Out of bounds values : N OK|FAILED' and\n"
    "'# Avg bus bandwidth    : X' (mean prioccl busbw over all lines, both placements).\n"
    "algbw = size/time (GB/s), busbw = algbw*2(p-1)/p. #wrong = wrong elements over the -c\n"
    "checked iterations and all ranks ('N/A' with -c 0); any wrong element exits 1.\n"
    "With --baseline mpi (default) each data line is followed by a '#mpi' line: MPI_Allreduce\n"
    "(MPI_IN_PLACE for in-place; avg = MPI_SUM then a local divide) timed the same way, the same\n"
    "fields after '#mpi', then the out-of-place ratio MPI time / prioccl time; starting with '#',\n"
    "it is a comment to nccl-tests' parsers. No #mpi line where MPI lacks the type (half,\n"
    "bfloat16) or count > INT_MAX. MPI_Allreduce is always blocking.\n"
    "\n"
    "Defaults that differ from nccl-tests, to keep earlier results comparable: -a 3 (the\n"
    "slowest rank's time; nccl-tests: 1) and -z 1 (blocking; nccl-tests: 0). Timed iterations\n"
    "are not checked; the -c checked iterations run after them (blocking), on fresh inputs.\n"
    "--osu: OSU osu_allreduce's layout (Size, Avg/Min/Max Latency(us) over ranks of each rank's\n"
    "mean per-op time, Iterations), out-of-place only, no baseline.\n"
    "--json FILE: header facts and every line's fields; -F/--csv FILE: one CSV row per line.\n"
    "PRIOCCL_* variables set the configuration; --schedule/--chunk/--credit/--window/--algo/\n"
    "--transport override. --algo all: one communicator per algorithm (auto ring tree rd hd),\n"
    "timed against each other and MPI (median of 5 interleaved blocks of ITERS/5), with\n"
    "auto/best and mpi/auto ratios. --transport all: one communicator per transport (mpi, ucx),\n"
    "timed the same way, with ucx/mpi. The compare modes print their own tables (out-of-place\n"
    "only) and take neither --osu, --json, -F, -a, -z nor -m.\n";

class AllReduce final : public perf::Collective {
 public:
  const char* tool() const override { return "all_reduce_perf"; }
  const char* summary() const override {
    return "prioccl all-reduce benchmark in nccl-tests' all_reduce_perf layout, with "
           "MPI_Allreduce as the same-run baseline. Run under mpirun.";
  }
  const char* footer() const override { return kFooter; }
  const char* mpiName() const override { return "MPI_Allreduce"; }
  const char* osuTest() const override { return "osu_allreduce"; }
  const char* osuTitle() const override { return "Allreduce"; }
  const char* noun() const override { return "all-reduce"; }
  std::string model(const prioccl::Communicator& comm) const override {
    return comm.algorithmModel();
  }
  const char* busbwFormula() const override { return "algbw*2(p-1)/p (0 when p = 1)"; }

  bool takesOp() const override { return true; }
  bool hasCompareModes() const override { return true; }

  double busBandwidth(size_t nbytes, double seconds, int nranks) const override {
    return perf::busBandwidth(nbytes, seconds, nranks);
  }
  void call(prioccl::Communicator& comm, const perf::CallArgs& a) const override {
    comm.allReduce(a.send, a.recv, a.count, a.sc.dt->type, a.sc.op->op);
  }
  prioccl::Request callAsync(prioccl::Communicator& comm, const perf::CallArgs& a) const override {
    return comm.allReduceAsync(a.send, a.recv, a.count, a.sc.dt->type, a.sc.op->op);
  }
  // No MPI type for half and bfloat16; MPI counts are ints.
  bool mpiSupports(const perf::DtypeInfo& dt, size_t count) const override {
    return dt.mpi != MPI_DATATYPE_NULL && count <= INT_MAX;
  }
  // MPI_IN_PLACE for in-place; avg = MPI_SUM, then a local divide.
  void mpiCall(const perf::CallArgs& a) const override {
    perf::mpiAllReduce(*a.sc.dt, *a.sc.op, a.inPlace ? MPI_IN_PLACE : a.send, a.recv, a.count,
                       a.sc.nranks);
  }

  void fillSend(const perf::SweepCase& sc, void* send, size_t count) const override {
    perf::fill(perf::Inputs(sc.op->op, sc.nranks), sc.rank, sc.dt->type, send, count);
  }
  long long countWrong(const perf::SweepCase& sc, const void* recv, size_t count,
                       bool) const override {
    return perf::countWrong(perf::Inputs(sc.op->op, sc.nranks), sc.dt->type, recv, count);
  }

  long long compare(const perf::BenchOptions& o, int rank, int nranks) const override {
    return o.compareAlgorithms ? perf::compareAlgorithms(o, rank, nranks)
                               : perf::compareTransports(o, rank, nranks);
  }
};

}  // namespace

int main(int argc, char** argv) {
  return perf::runPerf(argc, argv, AllReduce());
}
