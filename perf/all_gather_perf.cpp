// all_gather_perf: prioccl all-gather bandwidth with nccl-tests' all_gather_perf options and
// output layout, and with MPI_Allgather timed in the same run as the baseline (on "#mpi" lines).
// The driver (options, timing, output) is every perf tool's: nccl_perf.cpp; this file is the
// all-gather's Collective. Usage: kFooter below, or --help.
#include <climits>

#include "nccl_perf.h"
#include "pattern_bytes.h"

namespace {

const char kFooter[] =
    "Sizes take K/M/G suffixes (binary: 4K = 4096; also 4KiB, 4KB). -d accepts 'all' (every\n"
    "datatype, nccl-tests' order). Datatypes: int8 char uint8 int32 int uint32 int64 uint64 half\n"
    "float16 float float32 double float64 bfloat16 (printed with nccl-tests' names: half, float,\n"
    "double).\n"
    "\n"
    "Sizes are nccl-tests': -b/-e give the gathered (receive) buffer, size = p * sendcount *\n"
    "element size, with sendcount = (size/element size/p) rounded down to a multiple of 16 bytes\n"
    "(so small sizes print size 0).\n"
    "Output (nccl-tests' all_gather_perf layout): '#' header lines, then one data line per size\n"
    "and type with 13 fields: size count(= sendcount, per rank) type redop(none) root(-1) |\n"
    "out-of-place: time(us) algbw busbw #wrong | in-place (sendbuf at this rank's block of\n"
    "recvbuf): time algbw busbw #wrong; busbw is field 8 (out-of-place) and 12 (in-place); then\n"
    "'# Out of bounds values : N OK|FAILED' and '# Avg bus bandwidth    : X' (mean prioccl busbw\n"
    "over all lines, both placements).\n"
    "algbw = size/time (GB/s), busbw = algbw*(p-1)/p (nccl-tests' all-gather factor). #wrong =\n"
    "elements of any rank's receive buffer that differ bitwise from what their sender generated,\n"
    "over the -c checked iterations and all ranks ('N/A' with -c 0); any wrong element exits 1.\n"
    "Every rank's send buffer holds its own pseudo-random bytes, which never contain 0xFF, the\n"
    "poison the receive buffers start with.\n"
    "With --baseline mpi (default) each data line is followed by a '#mpi' line: MPI_Allgather of\n"
    "the same bytes (MPI_IN_PLACE for in-place; half and bfloat16 as 16-bit integers) timed the\n"
    "same way, the same fields after '#mpi', then the out-of-place ratio MPI time / prioccl time;\n"
    "starting with '#', it is a comment to nccl-tests' parsers. No #mpi line where sendcount >\n"
    "INT_MAX. MPI_Allgather is always blocking.\n"
    "\n"
    "Defaults that differ from nccl-tests, to keep results comparable with all_reduce_perf's:\n"
    "-a 3 (the slowest rank's time; nccl-tests: 1) and -z 1 (blocking; nccl-tests: 0). Timed\n"
    "iterations are not checked; the -c checked iterations run after them (blocking).\n"
    "--osu: OSU osu_allgather's layout (Size, Avg/Min/Max Latency(us) over ranks of each rank's\n"
    "mean per-op time, Iterations), out-of-place only, no baseline.\n"
    "--json FILE: header facts and every line's fields; -F/--csv FILE: one CSV row per line.\n"
    "PRIOCCL_* variables set the configuration; --schedule/--chunk/--credit/--window/--transport\n"
    "override. The all-gather is a ring: there is no --algo.\n";

class AllGather final : public perf::Collective {
 public:
  const char* tool() const override { return "all_gather_perf"; }
  const char* summary() const override {
    return "prioccl all-gather benchmark in nccl-tests' all_gather_perf layout, with MPI_Allgather "
           "as the same-run baseline. Run under mpirun.";
  }
  const char* footer() const override { return kFooter; }
  const char* mpiName() const override { return "MPI_Allgather"; }
  const char* osuTest() const override { return "osu_allgather"; }
  const char* osuTitle() const override { return "Allgather"; }
  const char* noun() const override { return "all-gather"; }
  std::string model(const prioccl::Communicator&) const override {
    return "ring all-gather: each rank's block goes once around the ring, p-1 steps per chunk, "
           "every link carrying (p-1)/p of the data; the algorithm setting does not apply";
  }
  const char* busbwFormula() const override { return "algbw*(p-1)/p (all-gather; 0 when p = 1)"; }

  // nccl-tests' AllGatherGetCollByteCount: each rank sends one block, receives p.
  perf::Counts counts(size_t count, size_t eltSize, int nranks) const override {
    const size_t b = perf::blockCount(count, eltSize, nranks);
    return {b, b * nranks, b, b, 0};
  }
  // nccl-tests' factor (p-1)/p of algbw = size/time, size the whole gathered buffer.
  double busBandwidth(size_t nbytes, double seconds, int nranks) const override {
    return nbytes / seconds / 1e9 * (nranks - 1) / nranks;
  }
  void call(prioccl::Communicator& comm, const perf::CallArgs& a) const override {
    comm.allGather(a.send, a.recv, a.count, a.sc.dt->type);
  }
  prioccl::Request callAsync(prioccl::Communicator& comm, const perf::CallArgs& a) const override {
    return comm.allGatherAsync(a.send, a.recv, a.count, a.sc.dt->type);
  }
  bool mpiSupports(const perf::DtypeInfo&, size_t count) const override { return count <= INT_MAX; }
  // In place, MPI_IN_PLACE: MPI reads this rank's block of recvbuf, where the driver put it.
  void mpiCall(const perf::CallArgs& a) const override {
    const MPI_Datatype t = perf::mpiBitsType(*a.sc.dt);
    const int n = static_cast<int>(a.count);
    MPI_Allgather(a.inPlace ? MPI_IN_PLACE : a.send, n, t, a.recv, n, t, MPI_COMM_WORLD);
  }

  // This rank's pattern (pattern_bytes.h): never 0xFF, the poison.
  void fillSend(const perf::SweepCase& sc, void* send, size_t count) const override {
    perf::patternBytes(sc.rank, 0, static_cast<unsigned char*>(send), count * sc.dt->size);
  }
  // Block r must hold the first block's bytes of rank r's pattern.
  long long countWrong(const perf::SweepCase& sc, const void* recv, size_t count,
                       bool) const override {
    const size_t blockBytes = count / sc.nranks * sc.dt->size;
    const auto* got = static_cast<const unsigned char*>(recv);
    long long wrong = 0;
    for (int r = 0; r < sc.nranks; ++r)
      wrong += perf::countWrongPattern(r, 0, got + r * blockBytes, blockBytes, sc.dt->size);
    return wrong;
  }
};

}  // namespace

int main(int argc, char** argv) {
  return perf::runPerf(argc, argv, AllGather());
}
