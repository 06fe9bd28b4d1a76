// reduce_perf: prioccl reduce bandwidth with nccl-tests' reduce_perf options and output layout,
// and with MPI_Reduce timed in the same run as the baseline (on "#mpi" lines). The driver
// (options, timing, output) is every perf tool's: nccl_perf.cpp; this file is the reduce's
// Collective. Usage: kFooter below, or --help.
#include <climits>

#include "allreduce_common.h"
#include "nccl_perf.h"

namespace {

const char kFooter[] =
    "Sizes take K/M/G suffixes (binary: 4K = 4096; also 4KiB, 4KB). -d and -o accept 'all'\n"
    "(every datatype / op, nccl-tests' order). Datatypes: int8 char uint8 int32 int uint32\n"
    "int64 uint64 half float16 float float32 double float64 bfloat16 (printed with nccl-tests'\n"
    "names: half, float, double). Ops: sum prod max min avg. -r: one fixed root (nccl-tests'\n"
    "-r -1, every root in turn, is not supported).\n"
    "\n"
    "Output (nccl-tests' reduce_perf layout): '#' header lines, then one data line per size, type\n"
    "and op with 13 fields: size count type redop root | out-of-place: time(us) algbw busbw\n"
    "#wrong | in-place (sendbuf == recvbuf): time algbw busbw #wrong; busbw is field 8\n"
    "(out-of-place) and 12 (in-place); then '# Out of bounds values : N OK|FAILED' and\n"
    "'# Avg bus bandwidth    : X' (mean prioccl busbw over all lines, both placements).\n"
    "algbw = size/time (GB/s), busbw = algbw (nccl-tests' reduce factor 1). #wrong = elements\n"
    "that differ bitwise from the expected result on the root, plus elements of a non-root's\n"
    "receive buffer that changed (out-of-place it must keep the 0xFF poison it starts with;\n"
    "in-place it is the rank's send buffer and must keep its input), over the -c checked\n"
    "iterations and all ranks ('N/A' with -c 0); any wrong element exits 1. Inputs are small\n"
    "integers, exact in every type.\n"
    "With --baseline mpi (default) each data line is followed by a '#mpi' line: MPI_Reduce\n"
    "(MPI_IN_PLACE on the root for in-place; avg = MPI_SUM, then the root divides) timed the same\n"
    "way, the same fields after '#mpi', then the out-of-place ratio MPI time / prioccl time;\n"
    "starting with '#', it is a comment to nccl-tests' parsers. No #mpi line where MPI lacks the\n"
    "type (half, bfloat16) or count > INT_MAX. MPI_Reduce is always blocking.\n"
    "\n"
    "Defaults that differ from nccl-tests, to keep results comparable with all_reduce_perf's:\n"
    "-a 3 (the slowest rank's time; nccl-tests: 1) and -z 1 (blocking; nccl-tests: 0). Timed\n"
    "iterations are not checked; the -c checked iterations run after them (blocking).\n"
    "--osu: OSU osu_reduce's layout (Size, Avg/Min/Max Latency(us) over ranks of each rank's\n"
    "mean per-op time, Iterations), out-of-place only, no baseline.\n"
    "--json FILE: header facts and every line's fields; -F/--csv FILE: one CSV row per line.\n"
    "PRIOCCL_* variables set the configuration; --schedule/--chunk/--credit/--window/--transport\n"
    "override. The reduce picks its own shape (binomial tree or chain): there is no --algo.\n";

class Reduce final : public perf::Collective {
 public:
  const char* tool() const override { return "reduce_perf"; }
  const char* summary() const override {
    return "prioccl reduce benchmark in nccl-tests' reduce_perf layout, with MPI_Reduce as the "
           "same-run baseline. Run under mpirun.";
  }
  const char* footer() const override { return kFooter; }
  const char* mpiName() const override { return "MPI_Reduce"; }
  const char* mpiNote() const override { return " (avg: MPI_SUM, then the root divides)"; }
  const char* osuTest() const override { return "osu_reduce"; }
  const char* osuTitle() const override { return "Reduce"; }
  const char* noun() const override { return "reduce"; }
  std::string model(const prioccl::Communicator&) const override {
    return "reduce to the root, per op up a binomial tree (ceil(log2 p) rounds per chunk) or a "
           "chain (p-2+chunks steps), whichever takes fewer steps, each rank reducing its "
           "children's partial results in a fixed order; the algorithm setting does not apply";
  }
  const char* busbwFormula() const override { return "algbw (reduce: factor 1)"; }

  bool takesOp() const override { return true; }
  bool takesRoot() const override { return true; }

  // nccl-tests' bus bandwidth factor for reduce is 1 (its PERFORMANCE.md): busbw = algbw.
  double busBandwidth(size_t nbytes, double seconds, int) const override {
    return nbytes / seconds / 1e9;
  }
  void call(prioccl::Communicator& comm, const perf::CallArgs& a) const override {
    comm.reduce(a.send, a.recv, a.count, a.sc.dt->type, a.sc.op->op, a.sc.root);
  }
  prioccl::Request callAsync(prioccl::Communicator& comm, const perf::CallArgs& a) const override {
    return comm.reduceAsync(a.send, a.recv, a.count, a.sc.dt->type, a.sc.op->op, a.sc.root);
  }
  // No MPI type for half and bfloat16; MPI counts are ints.
  bool mpiSupports(const perf::DtypeInfo& dt, size_t count) const override {
    return dt.mpi != MPI_DATATYPE_NULL && count <= INT_MAX;
  }
  // In place, the root passes MPI_IN_PLACE (its recvbuf holds its input) and the others their
  // send buffer, which is their recvbuf: the prioccl call's semantics. avg: MPI_SUM, then the root
  // divides.
  void mpiCall(const perf::CallArgs& a) const override {
    const bool root = a.sc.rank == a.sc.root;
    MPI_Reduce(a.inPlace && root ? MPI_IN_PLACE : a.send, a.recv, static_cast<int>(a.count),
               a.sc.dt->mpi, a.sc.op->mpi, a.sc.root, MPI_COMM_WORLD);
    if (root && a.sc.op->op == priocclAvg)
      perf::divideInPlace(a.sc.dt->type, a.recv, a.count, a.sc.nranks);
  }

  void fillSend(const perf::SweepCase& sc, void* send, size_t count) const override {
    perf::fill(perf::Inputs(sc.op->op, sc.nranks), sc.rank, sc.dt->type, send, count);
  }
  // The root: the reduction, bitwise. A non-root: its buffer unchanged (the poison out of place,
  // its own input in place).
  long long countWrong(const perf::SweepCase& sc, const void* recv, size_t count,
                       bool inPlace) const override {
    const perf::Inputs in(sc.op->op, sc.nranks);
    if (sc.rank == sc.root) return perf::countWrongBits(in, sc.dt->type, recv, count);
    if (inPlace) return perf::countInputsChanged(in, sc.rank, sc.dt->type, recv, count);
    return perf::countNotPoison(recv, count, sc.dt->size);
  }
};

}  // namespace

int main(int argc, char** argv) {
  return perf::runPerf(argc, argv, Reduce());
}
