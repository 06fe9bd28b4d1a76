// The driver every nccl-tests-style perf tool shares (nccl_perf.h): nccl-tests' options and
// output layout, so tools written for nccl-tests read the results, with the matching MPI
// collective timed in the same run as the baseline (on "#mpi" lines, which nccl-tests' parsers
// skip as comments). --osu prints OSU's latency layout instead; --json / -F write the results as
// JSON / CSV. The collective itself (call, baseline, busbw, data, help text) is a Collective.
#include "nccl_perf.h"

#include <sched.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

namespace perf {
namespace {

using Options = BenchOptions;

std::string baseName(const char* path) {
  std::string s = path;
  size_t slash = s.rfind('/');
  return slash == std::string::npos ? s : s.substr(slash + 1);
}

// Thrown for a bad option value: parseOptions prints it and exits 2.
struct BadOption {
  std::string message;
};

long long sizeOption(const std::string& opt, const std::string& text, long long min) {
  long long v = 0;
  if (!parseBytes(text.c_str(), &v) || v < min)
    throw BadOption{opt + " '" + text + "' is not a size of at least " + std::to_string(min) +
                    " bytes (a number with an optional K, M or G suffix)"};
  return v;
}

// -r: one fixed root in 0..p-1. nccl-tests' -r -1 (every root in turn) is not supported.
int rootOption(const std::string& text, int p) {
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (end != text.c_str() && !*end && errno == 0 && v == -1)
    throw BadOption{
        "-r -1 (every root in turn, as nccl-tests) is not supported: give one root, 0.." +
        std::to_string(p - 1)};
  if (end == text.c_str() || *end || errno != 0 || v < 0 || v >= p)
    throw BadOption{"-r '" + text + "' is not a rank of this run (0.." + std::to_string(p - 1) +
                    ")"};
  return static_cast<int>(v);
}

// Parses the command line into *o. Returns -1 to run, else the exit code (0 after --help).
int parseOptions(int argc, char** argv, int rank, int p, const Collective& c, Options* o) {
  const std::string name = baseName(argv[0]);
  CLI::App app{c.summary(), name};
  app.footer(c.footer());
  std::string b = "1K", e = "64M", f, i, d = "float", op = "sum", root = "0", baseline = "mpi";
  std::string schedule, chunk, credit, window, algo, transport;
  int blocking = 1, nthreads = 1, ngpus = 1;
  app.add_option("-b,--minbytes", b, "smallest size in bytes (default 1K)")->type_name("BYTES");
  app.add_option("-e,--maxbytes", e, "largest size in bytes (default 64M)")->type_name("BYTES");
  auto* fOpt =
      app.add_option("-f,--stepfactor", f, "multiply the size by this (default 4)")->type_name("N");
  app.add_option("-i,--stepbytes", i, "add this many bytes to the size instead of -f")
      ->type_name("BYTES")
      ->excludes(fOpt);
  app.add_option("-n,--iters", o->iters, "timed iterations per size (default 20)")
      ->check(CLI::Range(1, 1000000000));
  app.add_option("-w,--warmup_iters", o->warmup, "untimed iterations first (default 5)")
      ->check(CLI::Range(0, 1000000000));
  app.add_option("-m,--agg_iters", o->aggIters, "ops back to back per timed iteration (default 1)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("-c,--check", o->check,
                 "checked iterations per size and placement, 0 = none (default 1)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("-d,--datatype", d, "datatype or 'all' (default float)")->type_name("NAME");
  if (c.takesOp())
    app.add_option("-o,--op", op, "sum prod max min avg or 'all' (default sum)")->type_name("NAME");
  if (c.takesRoot())
    app.add_option("-r,--root", root, "the root rank, 0..nranks-1 (default 0; no -1)")
        ->type_name("RANK");
  app.add_option("-a,--average", o->average,
                 "time over ranks: 0 rank 0, 1 mean, 2 min, 3 max (default 3)")
      ->check(CLI::Range(0, 3));
  app.add_option("-z,--blocking", blocking,
                 "1: blocking call per op; 0: submit all timed ops, then wait (default 1)")
      ->check(CLI::Range(0, 1));
  app.add_option("-t,--nthreads", nthreads, "nccl-tests' threads per process: only 1")
      ->check(CLI::Range(1, 1));
  app.add_option("-g,--ngpus", ngpus, "nccl-tests' GPUs per thread: only 1 (one rank a process)")
      ->check(CLI::Range(1, 1));
  app.add_flag("--osu", o->osu,
               std::string("print OSU ") + c.osuTest() + "'s latency layout instead");
  app.add_option("--json", o->jsonFile, "write the results as JSON to FILE")->type_name("FILE");
  app.add_option("-F,--csv", o->csvFile, "write the results as CSV to FILE")->type_name("FILE");
  app.add_option("--baseline", baseline,
                 std::string("mpi (default): ") + c.mpiName() + " on #mpi lines; or none")
      ->check(CLI::IsMember({"mpi", "none"}));
  app.add_option("--schedule", schedule, "priority or fifo")
      ->check(CLI::IsMember({"priority", "fifo"}));
  app.add_option("--chunk", chunk, "chunk bytes")->type_name("BYTES");
  app.add_option("--credit", credit, "credit bytes")->type_name("BYTES");
  app.add_option("--window", window, "window in chunks")->type_name("N");
  if (c.hasCompareModes()) {
    app.add_option("--algo", algo, "auto ring tree rd hd hier, or all (compare mode)")
        ->type_name("NAME");
    app.add_option("--transport", transport, "mpi ucx, or all (compare mode)")
        ->check(CLI::IsMember({"mpi", "ucx", "all"}));
  } else {
    app.add_option("--transport", transport, "mpi or ucx")->check(CLI::IsMember({"mpi", "ucx"}));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& err) {
    if (err.get_exit_code() == 0) {  // --help
      if (rank == 0) std::fputs(app.help().c_str(), stdout);
      return 0;
    }
    if (rank == 0)
      std::fprintf(stderr, "%s: %s\nRun with --help for the usage.\n", name.c_str(), err.what());
    return 2;
  }

  try {
    o->config = prioccl::Config::fromEnv();
  } catch (const prioccl::Error& err) {  // a malformed PRIOCCL_* variable
    if (rank == 0) std::fprintf(stderr, "%s: %s\n", name.c_str(), err.what());
    return 2;
  }
  try {
    o->minBytes = sizeOption("-b", b, 1);
    o->maxBytes = sizeOption("-e", e, 1);
    if (!f.empty()) o->factor = sizeOption("-f", f, 1);
    if (!i.empty()) o->stepBytes = sizeOption("-i", i, 1);
    if (o->minBytes > o->maxBytes) throw BadOption{"-b " + b + " is larger than -e " + e};
    if (o->stepBytes == 0 && o->factor < 2 && o->minBytes != o->maxBytes)
      throw BadOption{"-f must be at least 2 (or use -i to step by bytes)"};
    o->dtypes.clear();
    if (d == "all") {
      for (const auto& t : allDtypes()) o->dtypes.push_back(&t);
    } else if (const DtypeInfo* t = findDtype(d)) {
      o->dtypes.push_back(t);
    } else {
      throw BadOption{"-d '" + d +
                      "' is not a datatype (int8 char uint8 int32 int uint32 int64 uint64 half "
                      "float16 float float32 double float64 bfloat16, or all)"};
    }
    o->ops.clear();
    if (!c.takesOp()) {
      o->ops.push_back(nullptr);
    } else if (op == "all") {
      for (const auto& x : allOps()) o->ops.push_back(&x);
    } else if (const OpInfo* x = findOp(op)) {
      o->ops.push_back(x);
    } else {
      throw BadOption{"-o '" + op + "' is not an op (sum prod max min avg, or all)"};
    }
    if (c.takesRoot()) o->root = rootOption(root, p);
    o->dtype = o->dtypes[0];
    o->op = o->ops[0];
    o->blocking = blocking == 1;
    o->mpiBaseline = baseline == "mpi";
    if (schedule == "fifo") o->config.schedule = priocclScheduleFifo;
    if (schedule == "priority") o->config.schedule = priocclSchedulePriority;
    if (!chunk.empty()) o->config.chunkBytes = sizeOption("--chunk", chunk, 1);
    if (!credit.empty()) o->config.creditBytes = sizeOption("--credit", credit, 1);
    if (!window.empty()) o->config.windowChunks = sizeOption("--window", window, 1);
    o->compareAlgorithms = algo == "all";
    if (!algo.empty() && !o->compareAlgorithms) {
      priocclAlgorithm_t a = prioccl::parseAlgorithm(algo);
      if (a == priocclNumAlgos)
        throw BadOption{"--algo '" + algo + "' is not auto, ring, tree, rd, hd or all"};
      o->config.algorithm = a;
    }
    o->compareTransports = transport == "all";
    if (transport == "mpi") o->config.transport = priocclTransportMpi;
    if (transport == "ucx") o->config.transport = priocclTransportUcx;
    if (o->compareAlgorithms && o->compareTransports)
      throw BadOption{
          "--algo all and --transport all cannot be combined: one compare mode per run (pick one "
          "transport for --algo all, or one algorithm for --transport all)"};
    if ((o->compareAlgorithms || o->compareTransports) &&
        (o->osu || !o->jsonFile.empty() || !o->csvFile.empty() || o->average != 3 || !o->blocking ||
         o->aggIters != 1))
      throw BadOption{
          "--algo all / --transport all print their own tables: no --osu, --json, "
          "-F, -a, -z or -m with them"};
  } catch (const BadOption& err) {
    if (rank == 0)
      std::fprintf(stderr, "%s: %s\nRun with --help for the usage.\n", name.c_str(),
                   err.message.c_str());
    return 2;
  }
  for (int k = 0; k < argc; ++k) o->commandLine += (k ? " " : "") + std::string(argv[k]);
  return -1;
}

// One placement's time: each rank's mean seconds per op, and its statistics over ranks.
struct Timing {
  double rank0 = NAN, mean = NAN, min = NAN, max = NAN;
  long long wrong = -1;  // wrong elements over the checked iterations and ranks; -1: not checked

  // The time -a asks for.
  double reported(int average) const {
    return average == 0 ? rank0 : average == 1 ? mean : average == 2 ? min : max;
  }
};

// Collective: the statistics over ranks of this rank's `seconds`.
Timing overRanks(double seconds, int p) {
  Timing t;
  double v[3] = {seconds, -seconds, seconds};  // sum, -min, max in one reduction
  MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  t.min = -v[1];
  t.max = v[2];
  double sum = seconds;
  MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  t.mean = sum / p;
  t.rank0 = seconds;
  MPI_Bcast(&t.rank0, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return t;
}

// Mean seconds per op on this rank: `warmup` blocking ops, then iters * aggIters timed ops.
// blocking(): one op to completion; submit(): one op started (-z 0; nullptr: always blocking).
template <typename Blocking, typename Submit>
double timeOps(const Options& o, Blocking&& blocking, Submit&& submit, bool async) {
  for (int i = 0; i < o.warmup; ++i) blocking();
  MPI_Barrier(MPI_COMM_WORLD);
  const long long ops = static_cast<long long>(o.iters) * o.aggIters;
  double t0 = MPI_Wtime();
  if (async) {
    // All timed ops in flight at once, as nccl-tests' -z 0 queues them on a stream. They share
    // the buffers, so in-place results chain; the checked iterations below use fresh inputs.
    std::vector<prioccl::Request> reqs;
    reqs.reserve(static_cast<size_t>(ops));
    for (long long k = 0; k < ops; ++k) reqs.push_back(submit());
    for (const prioccl::Request& r : reqs) r.wait();
  } else {
    for (long long k = 0; k < ops; ++k) blocking();
  }
  return (MPI_Wtime() - t0) / static_cast<double>(ops);
}

struct Row {
  const DtypeInfo* dt;
  const OpInfo* op;  // nullptr: the collective takes none ("none")
  // The size and count columns, as nccl-tests prints them: max(send, recv) elements in bytes, and
  // the call's count argument (Counts::param: per rank for the blocked collectives).
  size_t nbytes, count;
  Timing out, in;        // prioccl; `in` unmeasured (NAN) under --osu
  bool mpi = false;      // the baseline ran at this size
  Timing mpiOut, mpiIn;  // the MPI collective
};

struct RankInfo {
  int pid, cpu;
  char host[64];
};

class Bench {
 public:
  Bench(const Collective& c, const Options& o, int rank, int p)
      : c_(c), o_(o), rank_(rank), p_(p) {}

  long long run() {
    prioccl::Communicator comm = prioccl::Communicator::world(o_.config);
    gatherRanks();
    if (rank_ == 0) {
      if (o_.osu)
        printOsuPreamble();
      else
        printHeader(comm);
    }
    for (const DtypeInfo* dt : o_.dtypes)
      for (const OpInfo* op : o_.ops) runCombination(comm, dt, op);
    if (rank_ == 0) printFooter();
    config_ = comm.config().describe();
    comm.destroy();
    if (rank_ == 0) writeFiles();
    return wrongTotal_;
  }

 private:
  void gatherRanks() {
    RankInfo me{};
    me.pid = static_cast<int>(getpid());
    me.cpu = sched_getcpu();
    gethostname(me.host, sizeof me.host - 1);
    ranks_.resize(p_);
    MPI_Gather(&me, sizeof me, MPI_BYTE, ranks_.data(), sizeof me, MPI_BYTE, 0, MPI_COMM_WORLD);
  }

  static const char* averageName(int a) {
    static const char* names[] = {"rank0", "mean", "min", "max"};
    return names[a];
  }

  std::string stepText() const {
    return o_.stepBytes > 0 ? std::to_string(o_.stepBytes) + "(bytes)"
                            : std::to_string(o_.factor) + "(factor)";
  }

  int rootColumn() const { return c_.takesRoot() ? o_.root : -1; }

  static const char* opName(const OpInfo* op) { return op ? op->name : "none"; }

  // nccl-tests' header, adapted: ranks instead of GPUs, a CPU instead of a device.
  void printHeader(prioccl::Communicator& comm) const {
    std::printf(
        "# nThread 1 nRanks %d minBytes %lld maxBytes %lld step: %s warmup iters: %d iters: %d "
        "agg iters: %d validation: %d blocking: %d average: %d(%s)\n",
        p_, o_.minBytes, o_.maxBytes, stepText().c_str(), o_.warmup, o_.iters, o_.aggIters,
        o_.check, o_.blocking ? 1 : 0, o_.average, averageName(o_.average));
    std::printf("#\n# prioccl config: %s\n", comm.config().describe().c_str());
    std::printf("# model: %s\n#\n# Using cpus\n", c_.model(comm).c_str());
    for (int r = 0; r < p_; ++r)
      std::printf("#  Rank %2d Group  0 Pid %6d on %10s cpu %2d [prioccl rank %d of %d]\n", r,
                  ranks_[r].pid, ranks_[r].host, ranks_[r].cpu, r, p_);
    std::printf(
        "#\n# time: mean per op (us), %s over ranks (-a %d); algbw = size/time; "
        "busbw = %s\n",
        averageName(o_.average), o_.average, c_.busbwFormula());
    if (o_.mpiBaseline)
      std::printf(
          "# #mpi lines: %s in the same run%s, the same fields, then ratio = MPI time / "
          "prioccl time (out-of-place)\n",
          c_.mpiName(), c_.mpiNote());
    if (!c_.inPlaceSupported())
      std::printf(
          "# in-place: N/A (the %s has no in-place form: run neither for prioccl nor MPI)\n",
          c_.noun());
    std::printf("#\n");
    // The placement labels centred over their four 37-character column groups.
    std::printf("# %10s  %12s  %8s  %6s  %6s%12s%-25s%14s%-23s\n", "", "", "", "", "", "",
                "out-of-place", "", "in-place");
    std::printf("# %10s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s  %9s  %7s  %7s  %6s\n", "size",
                "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
                "algbw", "busbw", "#wrong");
    std::printf("# %10s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s  %9s  %7s  %7s  %6s\n", "(B)",
                "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                "(GB/s)", "");
    std::fflush(stdout);
  }

  void printOsuPreamble() const {
    std::printf(
        "# OSU MPI %s Latency Test layout (%s), measuring prioccl's "
        "%s over %d ranks\n",
        c_.osuTitle(), c_.osuTest(), c_.noun(), p_);
    std::printf(
        "# latency: each rank's mean per op, then avg/min/max over ranks; blocking %d, "
        "warmup %d\n",
        o_.blocking ? 1 : 0, o_.warmup);
  }

  double busbw(size_t nbytes, double seconds) const { return c_.busBandwidth(nbytes, seconds, p_); }

  // "time algbw busbw #wrong" of one placement; all four "N/A" where it was not run (a
  // collective with no in-place form).
  std::string cols(const Timing& t, size_t nbytes) const {
    double s = t.reported(o_.average);
    char buf[96];
    if (std::isnan(s))
      std::snprintf(buf, sizeof buf, "  %9s  %7s  %7s  %6s", "N/A", "N/A", "N/A", "N/A");
    else
      std::snprintf(buf, sizeof buf, "  %9.2f  %7.3f  %7.3f  %6s", s * 1e6, nbytes / s / 1e9,
                    busbw(nbytes, s), wrongText(t.wrong).c_str());
    return buf;
  }

  std::string line(const Row& r, const Timing& out, const Timing& in) const {
    char head[96];
    std::snprintf(head, sizeof head, "%12zu  %12zu  %8s  %6s  %6d", r.nbytes, r.count, r.dt->name,
                  opName(r.op), rootColumn());
    return head + cols(out, r.nbytes) + cols(in, r.nbytes);
  }

  // Before an in-place op: the in-place buffer poisoned, then this rank's send data at its
  // in-place send position, unless the collective ignores this rank's input.
  void prepareInPlace(const SweepCase& sc, const Counts& n, const unsigned char* send,
                      unsigned char* buf) const {
    const size_t elt = sc.dt->size;
    poison(buf, std::max(n.send, n.recv) * elt);
    if (c_.inPlaceInput(sc))
      std::memcpy(buf + sc.rank * n.sendInPlaceOffset * elt, send, n.send * elt);
  }

  // The call's buffers: out of place the two buffers, in place positions in `buf`.
  CallArgs callArgs(const SweepCase& sc, const Counts& n, const unsigned char* send,
                    unsigned char* buf, bool inPlace) const {
    const size_t elt = sc.dt->size;
    if (!inPlace) return CallArgs{sc, send, buf, n.param, false};
    return CallArgs{sc, buf + sc.rank * n.sendInPlaceOffset * elt,
                    buf + sc.rank * n.recvInPlaceOffset * elt, n.param, true};
  }

  // Wrong elements over o.check checked iterations of `once` and all ranks (-1 when -c 0). Each
  // iteration starts from fresh inputs: in place, the buffer is prepared again (prepareInPlace);
  // out of place, recv is poisoned so an element never written is caught.
  template <typename Once>
  long long checkOps(const SweepCase& sc, const Counts& n, const unsigned char* send,
                     unsigned char* buf, const CallArgs& a, Once&& once) const {
    if (!o_.check) return -1;
    long long wrong = 0;
    for (int k = 0; k < o_.check; ++k) {
      if (a.inPlace)
        prepareInPlace(sc, n, send, buf);
      else
        poison(a.recv, n.recv * sc.dt->size);
      once();
      wrong += c_.countWrong(sc, a.recv, n.recv, a.inPlace);
    }
    return sumOverRanks(wrong);
  }

  void runCombination(prioccl::Communicator& comm, const DtypeInfo* dt, const OpInfo* op) {
    const SweepCase sc{dt, op, rootColumn(), rank_, p_};
    // The largest size's buffers (recvBuf also serves in place, so it holds max(send, recv)
    // elements); the data does not depend on the size, so one fill serves all.
    // At least 16 bytes each, so no buffer is null where a block count rounds down to 0.
    const Counts most = c_.counts(std::max<size_t>(1, o_.maxBytes / dt->size), dt->size, p_);
    std::vector<unsigned char> sendBuf(std::max<size_t>(16, most.send * dt->size));
    std::vector<unsigned char> recvBuf(
        std::max<size_t>(16, std::max(most.send, most.recv) * dt->size));
    c_.fillSend(sc, sendBuf.data(), most.send);
    const unsigned char* send = sendBuf.data();
    unsigned char* buf = recvBuf.data();
    if (rank_ == 0 && o_.osu) {
      if (c_.takesOp())
        std::printf("# Datatype: %s, op: %s\n", dt->name, opName(op));
      else if (c_.takesRoot())
        std::printf("# Datatype: %s, root: %d\n", dt->name, sc.root);
      else
        std::printf("# Datatype: %s\n", dt->name);
      std::printf("%-10s%18s%18s%18s%12s\n", "# Size", "Avg Latency(us)", "Min Latency(us)",
                  "Max Latency(us)", "Iterations");
    }
    for (long long bytes = o_.minBytes; bytes <= o_.maxBytes; bytes = nextBytes(o_, bytes)) {
      const Counts n = c_.counts(std::max<size_t>(1, bytes / dt->size), dt->size, p_);
      Row r{dt, op, std::max(n.send, n.recv) * dt->size, n.param, {}, {}, false, {}, {}};
      // prioccl, out of place, then in place (where the collective has an in-place form).
      const bool runInPlace = c_.inPlaceSupported() && !o_.osu;  // OSU's: out of place only
      for (bool inPlace : {false, true}) {
        if (inPlace && !runInPlace) break;
        if (inPlace) prepareInPlace(sc, n, send, buf);
        const CallArgs a = callArgs(sc, n, send, buf, inPlace);
        auto once = [&] { c_.call(comm, a); };
        auto submit = [&] { return c_.callAsync(comm, a); };
        Timing& t = inPlace ? r.in : r.out;
        t = overRanks(timeOps(o_, once, submit, !o_.blocking), p_);
        t.wrong = checkOps(sc, n, send, buf, a, once);
      }
      // The MPI collective, the same two placements (always blocking).
      r.mpi = o_.mpiBaseline && !o_.osu && c_.mpiSupports(*dt, n.param);
      for (bool inPlace : {false, true}) {
        if (!r.mpi || (inPlace && !runInPlace)) break;
        if (inPlace) prepareInPlace(sc, n, send, buf);
        const CallArgs a = callArgs(sc, n, send, buf, inPlace);
        auto once = [&] { c_.mpiCall(a); };
        auto noSubmit = [] { return prioccl::Request(); };
        Timing& t = inPlace ? r.mpiIn : r.mpiOut;
        t = overRanks(timeOps(o_, once, noSubmit, false), p_);
        t.wrong = checkOps(sc, n, send, buf, a, once);
      }
      for (const Timing* t : {&r.out, &r.in, &r.mpiOut, &r.mpiIn})
        wrongTotal_ += std::max(0LL, t->wrong);
      if (rank_ == 0) printRow(r);
      rows_.push_back(r);
    }
  }

  void printRow(const Row& r) {
    if (o_.osu) {
      std::printf("%-10zu%18.2f%18.2f%18.2f%12lld\n", r.nbytes, r.out.mean * 1e6, r.out.min * 1e6,
                  r.out.max * 1e6, static_cast<long long>(o_.iters) * o_.aggIters);
      if (r.out.wrong > 0) std::printf("# ^ %lld wrong elements\n", r.out.wrong);
    } else {
      std::printf("%s\n", line(r, r.out, r.in).c_str());
      for (double s : {r.out.reported(o_.average), r.in.reported(o_.average)})
        if (!std::isnan(s)) busbws_.push_back(busbw(r.nbytes, s));  // not run: no in-place
      if (r.mpi) {
        // "#mpi" replaces the row's leading blanks, so the fields stay aligned when they fit.
        std::string l = line(r, r.mpiOut, r.mpiIn);
        l = l.compare(0, 5, "     ") == 0 ? "#mpi" + l.substr(4) : "#mpi " + l;
        double ratio = r.mpiOut.reported(o_.average) / r.out.reported(o_.average);
        std::printf("%s  %7.3f\n", l.c_str(), ratio);
        mpiBusbws_.push_back(busbw(r.nbytes, r.mpiOut.reported(o_.average)));
        ratios_.push_back(ratio);
      }
    }
    std::fflush(stdout);
  }

  static double mean(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / v.size();
  }

  void printFooter() const {
    if (o_.osu) {
      std::printf("# Validation: %s\n", !o_.check     ? "not checked (-c 0)"
                                        : wrongTotal_ ? "FAILED"
                                                      : "passed");
      return;
    }
    printOutOfBounds(o_.check, wrongTotal_);
    std::printf("# Avg bus bandwidth    : %.4f \n", mean(busbws_));
    if (o_.mpiBaseline) {
      if (mpiBusbws_.empty())
        std::printf("# Avg MPI bus bandwidth (out-of-place) : n/a\n# Median ratio : n/a\n");
      else
        std::printf("# Avg MPI bus bandwidth (out-of-place) : %.4f\n# Median ratio : %.3f\n",
                    mean(mpiBusbws_), median(ratios_));
    }
    std::printf("#\n");
    std::fflush(stdout);
  }

  nlohmann::json timingJson(const Timing& t, size_t nbytes) const {
    if (std::isnan(t.mean)) return nullptr;
    double s = t.reported(o_.average);
    nlohmann::json j = {{"time_us", s * 1e6},
                        {"algbw_gbs", nbytes / s / 1e9},
                        {"busbw_gbs", busbw(nbytes, s)},
                        {"wrong", t.wrong < 0 ? nlohmann::json(nullptr) : nlohmann::json(t.wrong)},
                        {"time_us_rank0", t.rank0 * 1e6},
                        {"time_us_mean", t.mean * 1e6},
                        {"time_us_min", t.min * 1e6},
                        {"time_us_max", t.max * 1e6}};
    return j;
  }

  void writeFiles() const {
    if (!o_.jsonFile.empty()) writeJson();
    if (!o_.csvFile.empty()) writeCsv();
  }

  void writeJson() const {
    char date[32];
    std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    nlohmann::json j;
    j["tool"] = c_.tool();
    j["layout"] = o_.osu ? "osu" : "nccl-tests";
    j["command_line"] = o_.commandLine;
    j["date"] = date;
#ifdef PRIOCCL_GIT_COMMIT
    j["git_commit"] = PRIOCCL_GIT_COMMIT;  // at configure time
#endif
    j["nranks"] = p_;
    j["min_bytes"] = o_.minBytes;
    j["max_bytes"] = o_.maxBytes;
    if (o_.stepBytes > 0)
      j["step_bytes"] = o_.stepBytes;
    else
      j["step_factor"] = o_.factor;
    j["warmup_iters"] = o_.warmup;
    j["iters"] = o_.iters;
    j["agg_iters"] = o_.aggIters;
    j["check_iters"] = o_.check;
    j["blocking"] = o_.blocking;
    j["average"] = averageName(o_.average);
    j["baseline"] = o_.mpiBaseline && !o_.osu ? c_.mpiName() : "none";
    j["config"] = config_;
    for (int r = 0; r < p_; ++r)
      j["ranks"].push_back(
          {{"rank", r}, {"pid", ranks_[r].pid}, {"host", ranks_[r].host}, {"cpu", ranks_[r].cpu}});
    j["results"] = nlohmann::json::array();
    for (const Row& r : rows_) {
      nlohmann::json row = {{"size", r.nbytes},
                            {"count", r.count},
                            {"type", r.dt->name},
                            {"redop", opName(r.op)},
                            {"root", rootColumn()},
                            {"out_of_place", timingJson(r.out, r.nbytes)},
                            {"in_place", timingJson(r.in, r.nbytes)}};
      if (r.mpi)
        row["mpi"] = {{"out_of_place", timingJson(r.mpiOut, r.nbytes)},
                      {"in_place", timingJson(r.mpiIn, r.nbytes)}};
      else
        row["mpi"] = nullptr;
      j["results"].push_back(row);
    }
    j["out_of_bounds"] = o_.check ? nlohmann::json(wrongTotal_) : nlohmann::json(nullptr);
    j["ok"] = wrongTotal_ == 0;
    if (!o_.osu) j["avg_bus_bandwidth"] = mean(busbws_);
    std::ofstream f(o_.jsonFile);
    f << j.dump(2) << "\n";
    if (!f) std::fprintf(stderr, "%s: cannot write %s\n", c_.tool(), o_.jsonFile.c_str());
  }

  void writeCsv() const {
    std::FILE* f = std::fopen(o_.csvFile.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "%s: cannot write %s\n", c_.tool(), o_.csvFile.c_str());
      return;
    }
    std::fprintf(f,
                 "size,count,type,redop,root,oop_time_us,oop_algbw,oop_busbw,oop_wrong,"
                 "ip_time_us,ip_algbw,ip_busbw,ip_wrong,mpi_oop_time_us,mpi_oop_busbw,"
                 "mpi_oop_wrong,mpi_ip_time_us,mpi_ip_busbw,mpi_ip_wrong\n");
    // Empty fields: not measured (in place under --osu, MPI where it has no such type) or not
    // checked (#wrong under -c 0).
    auto fields = [&](const Timing& t, size_t nbytes, bool algbw) {
      if (std::isnan(t.mean)) return std::string(algbw ? ",,," : ",,");
      double s = t.reported(o_.average);
      char buf[128];
      if (algbw)
        std::snprintf(buf, sizeof buf, "%.3f,%.6f,%.6f,", s * 1e6, nbytes / s / 1e9,
                      busbw(nbytes, s));
      else
        std::snprintf(buf, sizeof buf, "%.3f,%.6f,", s * 1e6, busbw(nbytes, s));
      return buf + (t.wrong < 0 ? std::string() : std::to_string(t.wrong));
    };
    for (const Row& r : rows_) {
      std::string l = std::to_string(r.nbytes) + "," + std::to_string(r.count) + "," + r.dt->name +
                      "," + opName(r.op) + "," + std::to_string(rootColumn()) + "," +
                      fields(r.out, r.nbytes, true) + "," + fields(r.in, r.nbytes, true) + "," +
                      fields(r.mpi ? r.mpiOut : Timing(), r.nbytes, false) + "," +
                      fields(r.mpi ? r.mpiIn : Timing(), r.nbytes, false);
      std::fprintf(f, "%s\n", l.c_str());
    }
    std::fclose(f);
  }

  const Collective& c_;
  const Options& o_;
  int rank_, p_;
  std::vector<RankInfo> ranks_;
  std::vector<Row> rows_;
  std::vector<double> busbws_, mpiBusbws_, ratios_;
  long long wrongTotal_ = 0;
  std::string config_;
};

}  // namespace

int runPerf(int argc, char** argv, const Collective& c) {
  const std::string name = baseName(argv[0]);
  if (!initMpi(&argc, &argv)) {
    std::fprintf(stderr, "%s: MPI does not provide MPI_THREAD_MULTIPLE\n", name.c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  int rank = 0, p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  Options o;
  int code = parseOptions(argc, argv, rank, p, c, &o);
  if (code >= 0) {
    MPI_Finalize();
    return code;
  }

  long long wrongTotal = 0;
  try {
    if (o.compareAlgorithms || o.compareTransports) {
      // One compare table per datatype and op (-d all / -o all).
      for (const DtypeInfo* dt : o.dtypes)
        for (const OpInfo* op : o.ops) {
          o.dtype = dt;
          o.op = op;
          wrongTotal += c.compare(o, rank, p);
        }
    } else {
      wrongTotal = Bench(c, o, rank, p).run();
    }
  } catch (const prioccl::Error& e) {
    std::fprintf(stderr, "%s: rank %d: %s\n", name.c_str(), rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  MPI_Finalize();
  return wrongTotal ? 1 : 0;
}

}  // namespace perf
