// reduce_scatter_perf: prioccl reduce-scatter bandwidth with nccl-tests' reduce_scatter_perf
// options and output layout, and with MPI_Reduce_scatter_block timed in the same run as the
// baseline (on "#mpi" lines). The driver (options, timing, output) is every perf tool's:
// nccl_perf.cpp; this file is the reduce-scatter's Collective. Usage: kFooter below, or --help.
#include <climits>
#include <cstring>

#include "allreduce_common.h"
#include "nccl_perf.h"

namespace {

const char kFooter[] =
    "Sizes take K/M/G suffixes (binary: 4K = 4096; also 4KiB, 4KB). -d and -o accept 'all'\n"
    "(every datatype / op, nccl-tests' order). Datatypes: int8 char uint8 int32 int uint32\n"
    "int64 uint64 half float16 float float32 double float64 bfloat16 (printed with nccl-tests'\n"
    "names: half, float, double). Ops: sum prod max min avg.\n"
    "\n"
    "Sizes are nccl-tests': -b/-e give the send buffer, size = p * recvcount * element size,\n"
    "with recvcount = (size/element size/p) rounded down to a multiple of 16 bytes (so small\n"
    "sizes print size 0).\n"
    "Output (nccl-tests' reduce_scatter_perf layout): '#' header lines, then one data line per\n"
    "size, type and op with 13 fields: size count(= recvcount, per rank) type redop root(-1) |\n"
    "out-of-place: time(us) algbw busbw #wrong | in-place (recvbuf at this rank's block of\n"
    "sendbuf): time algbw busbw #wrong; busbw is field 8 (out-of-place) and 12 (in-place); then\n"
    "'# Out of bounds values : N OK|FAILED' and '# Avg bus bandwidth    : X' (mean prioccl busbw\n"
    "over all lines, both placements).\n"
    "algbw = size/time (GB/s), busbw = algbw*(p-1)/p (nccl-tests' reduce-scatter factor).\n"
    "#wrong = elements of any rank's result that differ bitwise from the expected reduction of\n"
    "its block, over the -c checked iterations and all ranks ('N/A' with -c 0); any wrong\n"
    "element exits 1. Inputs are small integers, exact in every type; out-of-place receive\n"
    "buffers start as 0xFF bytes, which no result has.\n"
    "With --baseline mpi (default) each data line is followed by a '#mpi' line:\n"
    "MPI_Reduce_scatter_block timed the same way (avg = MPI_SUM, then a local divide; in-place:\n"
    "MPI_IN_PLACE, which leaves the result at the start of the buffer, then each rank moves it\n"
    "to its own block, as the prioccl call leaves it), the same fields after '#mpi', then the\n"
    "out-of-place ratio MPI time / prioccl time; starting with '#', it is a comment to\n"
    "nccl-tests' parsers. No #mpi line where MPI lacks the type (half, bfloat16) or recvcount >\n"
    "INT_MAX. MPI_Reduce_scatter_block is always blocking.\n"
    "\n"
    "Defaults that differ from nccl-tests, to keep results comparable with all_reduce_perf's:\n"
    "-a 3 (the slowest rank's time; nccl-tests: 1) and -z 1 (blocking; nccl-tests: 0). Timed\n"
    "iterations are not checked; the -c checked iterations run after them (blocking).\n"
    "--osu: OSU osu_reduce_scatter's layout (Size, Avg/Min/Max Latency(us) over ranks of each\n"
    "rank's mean per-op time, Iterations), out-of-place only, no baseline.\n"
    "--json FILE: header facts and every line's fields; -F/--csv FILE: one CSV row per line.\n"
    "PRIOCCL_* variables set the configuration; --schedule/--chunk/--credit/--window/--transport\n"
    "override. The reduce-scatter is a ring: there is no --algo.\n";

class ReduceScatter final : public perf::Collective {
 public:
  const char* tool() const override { return "reduce_scatter_perf"; }
  const char* summary() const override {
    return "prioccl reduce-scatter benchmark in nccl-tests' reduce_scatter_perf layout, with "
           "MPI_Reduce_scatter_block as the same-run baseline. Run under mpirun.";
  }
  const char* footer() const override { return kFooter; }
  const char* mpiName() const override { return "MPI_Reduce_scatter_block"; }
  const char* mpiNote() const override {
    return " (avg: MPI_SUM, then a local divide; in-place: MPI_IN_PLACE, then each rank moves "
           "its result from the buffer's start to its block)";
  }
  const char* osuTest() const override { return "osu_reduce_scatter"; }
  const char* osuTitle() const override { return "Reduce_scatter"; }
  const char* noun() const override { return "reduce-scatter"; }
  std::string model(const prioccl::Communicator&) const override {
    return "ring reduce-scatter: block b's partial result goes around the ring from rank b+1 to "
           "b, p-1 steps per chunk, every link carrying (p-1)/p of the data; the algorithm "
           "setting does not apply";
  }
  const char* busbwFormula() const override {
    return "algbw*(p-1)/p (reduce-scatter; 0 when p = 1)";
  }

  bool takesOp() const override { return true; }

  // nccl-tests' ReduceScatterGetCollByteCount: each rank sends p blocks, receives one.
  perf::Counts counts(size_t count, size_t eltSize, int nranks) const override {
    const size_t b = perf::blockCount(count, eltSize, nranks);
    return {b * nranks, b, b, 0, b};
  }
  // nccl-tests' factor (p-1)/p of algbw = size/time, size the whole send buffer.
  double busBandwidth(size_t nbytes, double seconds, int nranks) const override {
    return nbytes / seconds / 1e9 * (nranks - 1) / nranks;
  }
  void call(prioccl::Communicator& comm, const perf::CallArgs& a) const override {
    comm.reduceScatter(a.send, a.recv, a.count, a.sc.dt->type, a.sc.op->op);
  }
  prioccl::Request callAsync(prioccl::Communicator& comm, const perf::CallArgs& a) const override {
    return comm.reduceScatterAsync(a.send, a.recv, a.count, a.sc.dt->type, a.sc.op->op);
  }
  // No MPI type for half and bfloat16; MPI counts are ints.
  bool mpiSupports(const perf::DtypeInfo& dt, size_t count) const override {
    return dt.mpi != MPI_DATATYPE_NULL && count <= INT_MAX;
  }
  // In place, the driver's buffer holds the whole input with a.recv at this rank's block; MPI's
  // MPI_IN_PLACE leaves the result at the buffer's start, so it is moved to a.recv (inside the
  // timed loop: part of doing what the prioccl call does). avg: MPI_SUM, then a local divide.
  void mpiCall(const perf::CallArgs& a) const override {
    const int n = static_cast<int>(a.count);
    if (a.inPlace) {
      void* buf = const_cast<void*>(a.send);  // in place, the send buffer is the driver's
      MPI_Reduce_scatter_block(MPI_IN_PLACE, buf, n, a.sc.dt->mpi, a.sc.op->mpi, MPI_COMM_WORLD);
      if (a.recv != buf) std::memmove(a.recv, buf, a.count * a.sc.dt->size);
    } else {
      MPI_Reduce_scatter_block(a.send, a.recv, n, a.sc.dt->mpi, a.sc.op->mpi, MPI_COMM_WORLD);
    }
    if (a.sc.op->op == priocclAvg) perf::divideInPlace(a.sc.dt->type, a.recv, a.count, a.sc.nranks);
  }

  // Element i of every rank's send buffer is its input i (allreduce_common.h's Inputs), so block
  // r's element j is input r * recvcount + j.
  void fillSend(const perf::SweepCase& sc, void* send, size_t count) const override {
    perf::fill(perf::Inputs(sc.op->op, sc.nranks), sc.rank, sc.dt->type, send, count);
  }
  // This rank's block, bitwise.
  long long countWrong(const perf::SweepCase& sc, const void* recv, size_t count,
                       bool) const override {
    return perf::countWrongBits(perf::Inputs(sc.op->op, sc.nranks), sc.dt->type, recv, count,
                                static_cast<size_t>(sc.rank) * count);
  }
};

}  // namespace

int main(int argc, char** argv) {
  return perf::runPerf(argc, argv, ReduceScatter());
}
