// broadcast_perf: prioccl broadcast bandwidth with nccl-tests' broadcast_perf options and output
// layout, and with MPI_Bcast timed in the same run as the baseline (on "#mpi" lines). The driver
// (options, timing, output) is every perf tool's: nccl_perf.cpp; this file is the broadcast's
// Collective. Usage: kFooter below, or --help.
#include <climits>
#include <cstring>

#include "nccl_perf.h"
#include "pattern_bytes.h"

namespace {

const char kFooter[] =
    "Sizes take K/M/G suffixes (binary: 4K = 4096; also 4KiB, 4KB). -d accepts 'all' (every\n"
    "datatype, nccl-tests' order). Datatypes: int8 char uint8 int32 int uint32 int64 uint64 half\n"
    "float16 float float32 double float64 bfloat16 (printed with nccl-tests' names: half, float,\n"
    "double). -r: one fixed root (nccl-tests' -r -1, every root in turn, is not supported).\n"
    "\n"
    "Output (nccl-tests' broadcast_perf layout): '#' header lines, then one data line per size\n"
    "and type with 13 fields: size count type redop(none) root | out-of-place: time(us) algbw\n"
    "busbw #wrong | in-place (sendbuf == recvbuf): time algbw busbw #wrong; busbw is field 8\n"
    "(out-of-place) and 12 (in-place); then '# Out of bounds values : N OK|FAILED' and\n"
    "'# Avg bus bandwidth    : X' (mean prioccl busbw over all lines, both placements).\n"
    "algbw = size/time (GB/s), busbw = algbw (nccl-tests' broadcast factor 1). #wrong = elements\n"
    "of any rank's receive buffer that differ bitwise from the root's data, over the -c checked\n"
    "iterations and all ranks ('N/A' with -c 0); any wrong element exits 1. Every rank's send\n"
    "buffer holds its own pseudo-random bytes (so a rank that read its own instead of the root's\n"
    "is caught); receive buffers start as 0xFF bytes, which the data never has.\n"
    "With --baseline mpi (default) each data line is followed by a '#mpi' line: MPI_Bcast of the\n"
    "same bytes (out-of-place: the root first copies sendbuf to recvbuf, as a broadcast into\n"
    "recvbuf must; in-place: MPI_Bcast alone) timed the same way, the same fields after '#mpi',\n"
    "then the out-of-place ratio MPI time / prioccl time; starting with '#', it is a comment to\n"
    "nccl-tests' parsers. No #mpi line where count > INT_MAX. MPI_Bcast is always blocking.\n"
    "\n"
    "Defaults that differ from nccl-tests, to keep results comparable with all_reduce_perf's: -a "
    "3\n"
    "(the slowest rank's time; nccl-tests: 1) and -z 1 (blocking; nccl-tests: 0). Timed\n"
    "iterations are not checked; the -c checked iterations run after them (blocking).\n"
    "--osu: OSU osu_bcast's layout (Size, Avg/Min/Max Latency(us) over ranks of each rank's mean\n"
    "per-op time, Iterations), out-of-place only, no baseline.\n"
    "--json FILE: header facts and every line's fields; -F/--csv FILE: one CSV row per line.\n"
    "PRIOCCL_* variables set the configuration; --schedule/--chunk/--credit/--window/--transport\n"
    "override. The broadcast picks its own shape (binomial tree or chain): there is no --algo.\n";

class Broadcast final : public perf::Collective {
 public:
  const char* tool() const override { return "broadcast_perf"; }
  const char* summary() const override {
    return "prioccl broadcast benchmark in nccl-tests' broadcast_perf layout, with MPI_Bcast as "
           "the same-run baseline. Run under mpirun.";
  }
  const char* footer() const override { return kFooter; }
  const char* mpiName() const override { return "MPI_Bcast"; }
  const char* mpiNote() const override {
    return " (out-of-place: the root copies sendbuf to recvbuf, then MPI_Bcast)";
  }
  const char* osuTest() const override { return "osu_bcast"; }
  const char* osuTitle() const override { return "Broadcast"; }
  const char* noun() const override { return "broadcast"; }
  std::string model(const prioccl::Communicator&) const override {
    return "broadcast from the root, per op a binomial tree (ceil(log2 p) rounds per chunk) or a "
           "chain (p-2+chunks steps), whichever takes fewer steps; the algorithm setting does not "
           "apply";
  }
  const char* busbwFormula() const override { return "algbw (broadcast: factor 1)"; }

  bool takesRoot() const override { return true; }

  // nccl-tests' bus bandwidth factor for broadcast is 1 (its PERFORMANCE.md): busbw = algbw.
  double busBandwidth(size_t nbytes, double seconds, int) const override {
    return nbytes / seconds / 1e9;
  }
  void call(prioccl::Communicator& comm, const perf::CallArgs& a) const override {
    comm.broadcast(a.send, a.recv, a.count, a.sc.dt->type, a.sc.root);
  }
  prioccl::Request callAsync(prioccl::Communicator& comm, const perf::CallArgs& a) const override {
    return comm.broadcastAsync(a.send, a.recv, a.count, a.sc.dt->type, a.sc.root);
  }
  bool mpiSupports(const perf::DtypeInfo&, size_t count) const override { return count <= INT_MAX; }
  // The same semantics as the prioccl call: out of place, the root's recvbuf gets a copy too.
  void mpiCall(const perf::CallArgs& a) const override {
    if (!a.inPlace && a.sc.rank == a.sc.root) std::memcpy(a.recv, a.send, a.count * a.sc.dt->size);
    MPI_Bcast(a.recv, static_cast<int>(a.count), perf::mpiBitsType(*a.sc.dt), a.sc.root,
              MPI_COMM_WORLD);
  }

  // Every rank's send buffer holds the data it would broadcast as root (its pattern_bytes.h
  // pattern, never 0xFF, the poison); only the root's is read.
  void fillSend(const perf::SweepCase& sc, void* send, size_t count) const override {
    perf::patternBytes(sc.rank, 0, static_cast<unsigned char*>(send), count * sc.dt->size);
  }
  // In place, only the root's buffer holds data; the others start poisoned.
  bool inPlaceInput(const perf::SweepCase& sc) const override { return sc.rank == sc.root; }
  // Elements that differ bitwise from the root's data.
  long long countWrong(const perf::SweepCase& sc, const void* recv, size_t count,
                       bool) const override {
    return perf::countWrongPattern(sc.root, 0, recv, count * sc.dt->size, sc.dt->size);
  }
};

}  // namespace

int main(int argc, char** argv) {
  return perf::runPerf(argc, argv, Broadcast());
}
