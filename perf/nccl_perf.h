// The nccl-tests-style perf tools' shared driver (nccl_perf.cpp): options, timing, the check
// loop, the MPI baseline's "#mpi" lines, --osu, --json and -F. What differs between collectives
// is a Collective (below): all_reduce_perf is allreduce_perf.cpp's, broadcast_perf is
// broadcast_perf.cpp's, reduce_perf, all_gather_perf, reduce_scatter_perf and alltoall_perf are
// reduce_perf.cpp's, all_gather_perf.cpp's, reduce_scatter_perf.cpp's and alltoall_perf.cpp's. A
// new tool is one more Collective (a source file with its main) and one prioccl_perf_tool() line
// in perf/CMakeLists.txt (docs/benchmarks.md, "Output format" and the per-tool sections).
#pragma once

#include <mpi.h>
#include <prioccl/prioccl.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "perf_common.h"

namespace perf {

// The command line, parsed (nccl-tests' options plus prioccl's).
struct BenchOptions {
  long long minBytes = 1 << 10, maxBytes = 64 << 20, factor = 4;
  long long stepBytes = 0;  // -i: sizes grow by this many bytes instead of by -f
  // -d / -o (several with "all"); dtype and op: the combination being run now. ops is {nullptr}
  // for a collective without a reduction op (Collective::takesOp false).
  std::vector<const DtypeInfo*> dtypes{findDtype("float")};
  std::vector<const OpInfo*> ops{findOp("sum")};
  const DtypeInfo* dtype = dtypes[0];
  const OpInfo* op = ops[0];
  int root = 0;  // -r (Collective::takesRoot), else unused
  int iters = 20, warmup = 5;
  int check = 1;         // -c: checked iterations per size and placement (0: none)
  int aggIters = 1;      // -m: ops back to back per timed iteration
  int average = 3;       // -a: the rank-0 (0), mean (1), min (2) or max (3) time over ranks
  bool blocking = true;  // -z 1: one blocking call per op; -z 0: submit all, then wait
  bool osu = false;      // --osu: OSU's latency layout (osu_allreduce, osu_bcast, ...)
  std::string jsonFile, csvFile, commandLine;
  bool mpiBaseline = true;
  bool compareAlgorithms = false;  // --algo all (all-reduce only): see algo_compare.h
  bool compareTransports = false;  // --transport all (all-reduce only): see transport_compare.h
  prioccl::Config config;
};

// The sweep's next size after `bytes` (-i steps, else -f factors); > maxBytes ends the sweep.
inline long long nextBytes(const BenchOptions& o, long long bytes) {
  if (o.stepBytes > 0) return bytes + o.stepBytes;
  return o.factor >= 2 ? bytes * o.factor : o.maxBytes + 1;  // -b == -e: one size
}

// "N/A" when not checked (w < 0).
inline std::string wrongText(long long w) {
  return w < 0 ? "N/A" : std::to_string(w);
}

// Poison for receive buffers (0xFF: NaN for floats, -1/255 for integers -- never an expected
// value of any Collective's data), so an element the collective never writes is caught.
inline void poison(void* buf, size_t nbytes) {
  std::memset(buf, 0xff, nbytes);
}

// Elements of `buf` (`count` elements of `eltSize` bytes) that are not all poison bytes: written
// where nothing should have been.
inline long long countNotPoison(const void* buf, size_t count, size_t eltSize) {
  const auto* b = static_cast<const unsigned char*>(buf);
  long long wrong = 0;
  for (size_t e = 0; e < count; ++e)
    for (size_t k = 0; k < eltSize; ++k)
      if (b[e * eltSize + k] != 0xff) {
        ++wrong;
        break;
      }
  return wrong;
}

// The per-rank block of the blocked collectives (all-gather, reduce-scatter, alltoall) at a sweep
// size of `count` elements, as current nccl-tests' GetCollByteCount computes it: count / nranks
// rounded down to a multiple of 16 bytes ((count/nranks) & -(16/eltSize)), so every block starts
// 16-byte aligned; small sizes give 0.
inline size_t blockCount(size_t count, size_t eltSize, int nranks) {
  const size_t align = eltSize < 16 ? 16 / eltSize : 1;
  return count / static_cast<size_t>(nranks) / align * align;
}

// The closing line, as nccl-tests prints it ("N OK" / "N FAILED", N = wrong elements).
inline void printOutOfBounds(int check, long long wrongTotal) {
  if (!check)
    std::printf("# Out of bounds values : 0 OK (not checked: -c 0)\n");
  else if (wrongTotal)
    std::printf("# Out of bounds values : %lld FAILED\n", wrongTotal);
  else
    std::printf("# Out of bounds values : 0 OK\n");
}

// One sweep's fixed parameters: the data a Collective fills and checks depends on these only
// (never on the size: the largest size's fill serves every size, as nccl-tests does).
struct SweepCase {
  const DtypeInfo* dt;
  const OpInfo* op;  // nullptr when the collective takes none
  int root;          // -1 when the collective has none
  int rank, nranks;
};

// One call's element counts at a sweep size of `count` elements, as nccl-tests'
// GetCollByteCount gives them: what this rank sends and receives, the call's count argument, and
// where in place puts the buffers inside the one in-place buffer (which holds max(send, recv)
// elements): rank r's send buffer at r * sendInPlaceOffset, its receive buffer at
// r * recvInPlaceOffset. The data line's size is max(send, recv) elements (in bytes), its count
// `param`, as nccl-tests prints them.
struct Counts {
  size_t send, recv, param;
  size_t sendInPlaceOffset = 0, recvInPlaceOffset = 0;
};

// One call: `count` elements (Counts::param); in place, send and recv lie in one buffer.
struct CallArgs {
  const SweepCase& sc;
  const void* send;
  void* recv;
  size_t count;
  bool inPlace;
};

// What one collective's perf tool adds to the driver: its names and help text, the prioccl call
// and its MPI baseline, nccl-tests' bus-bandwidth factor, and the data (this rank's send buffer,
// the expected receive buffer). One instance per program, passed to runPerf().
class Collective {
 public:
  virtual ~Collective() = default;

  // ---- names and text ----
  virtual const char* tool() const = 0;     // nccl-tests' program name ("all_reduce_perf")
  virtual const char* summary() const = 0;  // --help's first line
  virtual const char* footer() const = 0;   // --help's closing text
  virtual const char* mpiName() const = 0;  // the baseline call, "MPI_Allreduce"
  // Printed after "<mpiName> in the same run" on the header's "#mpi lines" line ("" or a note on
  // what the baseline does besides the call).
  virtual const char* mpiNote() const { return ""; }
  virtual const char* osuTest() const = 0;   // "osu_allreduce"
  virtual const char* osuTitle() const = 0;  // "Allreduce" (OSU's "OSU MPI <title> Latency Test")
  virtual const char* noun() const = 0;      // "all-reduce"
  // The header's "# model:" text.
  virtual std::string model(const prioccl::Communicator& comm) const = 0;
  // The header's busbw definition, after "busbw = ".
  virtual const char* busbwFormula() const = 0;

  // ---- options ----
  virtual bool takesOp() const { return false; }    // -o and the redop column ("none" if not)
  virtual bool takesRoot() const { return false; }  // -r and the root column (-1 if not)
  // --algo NAME and the compare modes (--algo all, --transport all); see compare().
  virtual bool hasCompareModes() const { return false; }

  // ---- the measurement ----
  // The counts at a sweep size of `count` elements of `eltSize` bytes; by default every one is
  // `count` and in place is send == recv (all-reduce, broadcast, reduce). An all-gather sends
  // b = blockCount(count, eltSize, p) and receives b * p, its in-place send buffer at rank * b.
  virtual Counts counts(size_t count, size_t /*eltSize*/, int /*nranks*/) const {
    return {count, count, count};
  }
  // False for a collective with no in-place form (alltoall): then neither prioccl nor the MPI
  // baseline runs in place, and the in-place fields print "N/A".
  virtual bool inPlaceSupported() const { return true; }
  virtual double busBandwidth(size_t nbytes, double seconds, int nranks) const = 0;  // GB/s
  virtual void call(prioccl::Communicator& comm, const CallArgs& a) const = 0;
  virtual prioccl::Request callAsync(prioccl::Communicator& comm, const CallArgs& a) const = 0;
  // Whether the baseline can run this dtype at this count (Counts::param); then mpiCall runs it
  // (blocking).
  virtual bool mpiSupports(const DtypeInfo& dt, size_t count) const = 0;
  virtual void mpiCall(const CallArgs& a) const = 0;

  // ---- the data ----
  // This rank's send buffer, `count` elements (Counts::send of the largest size).
  virtual void fillSend(const SweepCase& sc, void* send, size_t count) const = 0;
  // Before an in-place op, the in-place buffer is poisoned; then, when this returns true, this
  // rank's send data is copied to its in-place send position (false: a rank whose input the
  // collective ignores, e.g. a broadcast's non-root).
  virtual bool inPlaceInput(const SweepCase& /*sc*/) const { return true; }
  // Elements of this rank's receive buffer (`count` = Counts::recv elements) that differ from the
  // expected result of the op, run in place or not (for a reduce's non-root, whose buffer must
  // keep what it held: the poison out of place, its own input in place).
  virtual long long countWrong(const SweepCase& sc, const void* recv, size_t count,
                               bool inPlace) const = 0;

  // The compare modes (hasCompareModes): one table for o.dtype and o.op; returns the wrong
  // elements over all ranks. Collective.
  virtual long long compare(const BenchOptions& /*o*/, int /*rank*/, int /*nranks*/) const {
    return 0;
  }
};

// The whole program: MPI_Init, options, the sweep over every dtype (x op), output, MPI_Finalize.
// Returns main's exit status: 0, 1 when any element was wrong, 2 for a bad option.
int runPerf(int argc, char** argv, const Collective& c);

}  // namespace perf
