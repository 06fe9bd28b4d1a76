// alltoall_perf: prioccl all-to-all bandwidth with nccl-tests' alltoall_perf options and output
// layout, and with MPI_Alltoall timed in the same run as the baseline (on "#mpi" lines). The
// driver (options, timing, output) is every perf tool's: nccl_perf.cpp; this file is the
// all-to-all's Collective. Usage: kFooter below, or --help.
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
    "Sizes are nccl-tests': -b/-e give each buffer (send and receive alike), size = p * count *\n"
    "element size, with count (one block, per peer) = (size/element size/p) rounded down to a\n"
    "multiple of 16 bytes (so small sizes print size 0).\n"
    "Output (nccl-tests' alltoall_perf layout): '#' header lines, then one data line per size\n"
    "and type with 13 fields: size count(per peer) type redop(none) root(-1) | out-of-place:\n"
    "time(us) algbw busbw #wrong | in-place: N/A N/A N/A N/A; busbw is field 8; then\n"
    "'# Out of bounds values : N OK|FAILED' and '# Avg bus bandwidth    : X' (mean prioccl busbw\n"
    "over all lines, out-of-place only).\n"
    "An all-to-all is never in place (prioccl refuses overlapping buffers), so the in-place\n"
    "fields are 'N/A', for prioccl and MPI alike: nothing is run there. (nccl-tests times its\n"
    "in-place alltoall, which is not a correct one, and prints 'N/A' under #wrong.)\n"
    "algbw = size/time (GB/s), busbw = algbw*(p-1)/p (nccl-tests' alltoall factor). #wrong =\n"
    "elements of any rank's receive buffer that differ bitwise from what their sender generated\n"
    "for that rank, over the -c checked iterations and all ranks ('N/A' with -c 0); any wrong\n"
    "element exits 1. Every rank's send buffer holds its own pseudo-random bytes, which never\n"
    "contain 0xFF, the poison the receive buffers start with.\n"
    "With --baseline mpi (default) each data line is followed by a '#mpi' line: MPI_Alltoall of\n"
    "the same bytes (half and bfloat16 as 16-bit integers) timed the same way, the same fields\n"
    "after '#mpi', then the ratio MPI time / prioccl time; starting with '#', it is a comment to\n"
    "nccl-tests' parsers. No #mpi line where count > INT_MAX. MPI_Alltoall is always blocking.\n"
    "\n"
    "Defaults that differ from nccl-tests, to keep results comparable with all_reduce_perf's:\n"
    "-a 3 (the slowest rank's time; nccl-tests: 1) and -z 1 (blocking; nccl-tests: 0). Timed\n"
    "iterations are not checked; the -c checked iterations run after them (blocking).\n"
    "--osu: OSU osu_alltoall's layout (Size, Avg/Min/Max Latency(us) over ranks of each rank's\n"
    "mean per-op time, Iterations), no baseline.\n"
    "--json FILE: header facts and every line's fields (in_place null); -F/--csv FILE: one CSV\n"
    "row per line (in-place fields empty).\n"
    "PRIOCCL_* variables set the configuration; --schedule/--chunk/--credit/--window/--transport\n"
    "override. The all-to-all sends each block straight to its rank: there is no --algo.\n";

class AllToAll final : public perf::Collective {
 public:
  const char* tool() const override { return "alltoall_perf"; }
  const char* summary() const override {
    return "prioccl all-to-all benchmark in nccl-tests' alltoall_perf layout, with MPI_Alltoall "
           "as the same-run baseline. Run under mpirun.";
  }
  const char* footer() const override { return kFooter; }
  const char* mpiName() const override { return "MPI_Alltoall"; }
  const char* osuTest() const override { return "osu_alltoall"; }
  const char* osuTitle() const override { return "All-to-All Personalized Exchange"; }
  const char* noun() const override { return "all-to-all"; }
  std::string model(const prioccl::Communicator&) const override {
    return "pairwise all-to-all: in step s = 1..p-1 rank r sends its block for r+s straight to it "
           "and receives r-s's, every send and receive posted at once, each block crossing one "
           "link once; the algorithm setting does not apply";
  }
  const char* busbwFormula() const override { return "algbw*(p-1)/p (alltoall; 0 when p = 1)"; }

  // nccl-tests' AlltoAllGetCollByteCount: p blocks each way; never in place.
  perf::Counts counts(size_t count, size_t eltSize, int nranks) const override {
    const size_t b = perf::blockCount(count, eltSize, nranks);
    return {b * nranks, b * nranks, b};
  }
  bool inPlaceSupported() const override { return false; }
  // nccl-tests' factor (p-1)/p of algbw = size/time, size one whole buffer.
  double busBandwidth(size_t nbytes, double seconds, int nranks) const override {
    return nbytes / seconds / 1e9 * (nranks - 1) / nranks;
  }
  void call(prioccl::Communicator& comm, const perf::CallArgs& a) const override {
    comm.allToAll(a.send, a.recv, a.count, a.sc.dt->type);
  }
  prioccl::Request callAsync(prioccl::Communicator& comm, const perf::CallArgs& a) const override {
    return comm.allToAllAsync(a.send, a.recv, a.count, a.sc.dt->type);
  }
  bool mpiSupports(const perf::DtypeInfo&, size_t count) const override { return count <= INT_MAX; }
  void mpiCall(const perf::CallArgs& a) const override {
    const MPI_Datatype t = perf::mpiBitsType(*a.sc.dt);
    const int n = static_cast<int>(a.count);
    MPI_Alltoall(a.send, n, t, a.recv, n, t, MPI_COMM_WORLD);
  }

  // This rank's pattern (pattern_bytes.h) over its whole send buffer: block j is the pattern's
  // bytes from j * block bytes, so every destination gets different bytes.
  void fillSend(const perf::SweepCase& sc, void* send, size_t count) const override {
    perf::patternBytes(sc.rank, 0, static_cast<unsigned char*>(send), count * sc.dt->size);
  }
  // Block i must hold sender i's block for this rank: rank i's pattern from this rank's block.
  long long countWrong(const perf::SweepCase& sc, const void* recv, size_t count,
                       bool) const override {
    const size_t blockBytes = count / sc.nranks * sc.dt->size;
    const auto* got = static_cast<const unsigned char*>(recv);
    long long wrong = 0;
    for (int i = 0; i < sc.nranks; ++i)
      wrong += perf::countWrongPattern(i, static_cast<size_t>(sc.rank) * blockBytes,
                                       got + i * blockBytes, blockBytes, sc.dt->size);
    return wrong;
  }
};

}  // namespace

int main(int argc, char** argv) {
  return perf::runPerf(argc, argv, AllToAll());
}
