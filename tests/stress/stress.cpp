// Randomised stress of the all-reduce engine: T threads per rank stream async all-reduces of
// random sizes, dtypes, reduction ops, priorities and keys, and every element of every result is
// compared bitwise with a value computed locally. Rank 0 ends with
//   STRESS ranks=P threads=T seconds=S ops=N bytes_per_rank=XGiB wrong=W failed=F
// and every rank exits 0 only if no op anywhere was wrong or failed (--help: the options).
//
// Agreement: each thread's op stream is a function of (--seed, thread) alone, the same on every
// rank. Thread 0 submits unnamed ops (matched by submission order, so one thread only); the other
// threads name theirs from a per-thread pool of keys ("t<thread>.k<j>"), matched by (key,
// occurrence). So ranks agree on every op as long as each thread runs the same number of ops on
// every rank: with --ops that is fixed; with --seconds the threads vote on when to stop (worker()).
#include <mpi.h>
#include <prioccl/prioccl.hpp>

#include "common/parse_size.h"

#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using ull = unsigned long long;         // printf's %llu
constexpr int kKeysPerThread = 5;       // small pool, so keys recur (occurrences > 0)
constexpr uint64_t kCheckpointOps = 8;  // ops between two stop votes of a thread (time mode)
constexpr int kMaxReports = 20;         // WRONG/FAILED lines per rank
// Every algorithm on small and on large ops (there is no per-op algorithm in the API).
const char* kMixRules = "rd<2K,tree<32K,hd<128K,ring<256K,rd<1M,hd<2M,tree<8M,ring<32M,auto";

const char* kUsage =
    "usage: stress [--seconds S=30 | --ops N] [--threads T=3] [--seed X=1] [--max-bytes B=64M]\n"
    "  [--max-inflight-bytes B=512M] [--window K=8] [--fifo]\n"
    "  [--algo auto|ring|tree|rd|hd|mix|RULES]\n"
    "  [--progress S] [--stall-seconds S=120] [--soak] [--inject N]\n"
    "--ops N: N ops per rank in all. --max-inflight-bytes: buffers of pending ops, per rank.\n"
    "--window K: most ops in flight per thread. --algo: default mix (size bands covering every\n"
    "algorithm) unless PRIOCCL_ALGO is set. --soak: --seconds 3600 and a PROGRESS line every 60 s\n"
    "(--progress S). --stall-seconds: a rank whose ops all stop completing that long prints STALL\n"
    "and aborts. --inject N: flip a bit of thread 0's op N on rank 0 (checks the checker).\n";

struct Options {
  double seconds = 30, progress = 0, stallSeconds = 120;
  long long ops = 0;      // > 0: a fixed op count instead of a time bound
  long long inject = -1;  // >= 0: corrupt that op of thread 0 on rank 0
  int threads = 3, window = 8;
  ull seed = 1;
  size_t maxBytes = 64 << 20, maxInflightBytes = 512 << 20;
  bool fifo = false, help = false;
  std::string algo;
};

uint64_t mix64(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

struct TypeDesc {
  priocclDataType_t dt;
  const char* name;
  int bytes;
  bool isFloat, isSigned;
  int mantBits;
  int64_t exact;  // largest integer the type holds exactly (sums and products stay within it)
};
const TypeDesc kTypes[] = {
    {priocclInt8, "int8", 1, false, true, 0, INT8_MAX},
    {priocclUint8, "uint8", 1, false, false, 0, UINT8_MAX},
    {priocclInt32, "int32", 4, false, true, 0, INT32_MAX},
    {priocclInt64, "int64", 8, false, true, 0, INT64_MAX},
    {priocclFloat16, "float16", 2, true, true, 10, 2048},
    {priocclBfloat16, "bfloat16", 2, true, true, 7, 256},
    {priocclFloat32, "float32", 4, true, true, 23, 1 << 24},
    {priocclFloat64, "float64", 8, true, true, 52, 1LL << 53},
};
const char* kRedNames[] = {"sum", "prod", "min", "max"};

struct Op {
  int thread = 0;
  ull index = 0, seed = 0;
  const TypeDesc* type = nullptr;
  priocclRedOp_t red = priocclSum;
  size_t count = 0;
  int priority = 0;
  size_t window = 1;  // most ops of this thread in flight once this one is submitted
  std::string key;    // empty: unnamed (thread 0 only)
  bool inPlace = false, blocking = false;
  size_t bytes() const { return count * type->bytes; }
  std::string describe() const {
    char s[256];
    std::snprintf(s, sizeof s, "thread %d op %llu key='%s' count=%zu %s %s prio=%d %s%s seed=%llx",
                  thread, index, key.c_str(), count, type->name, kRedNames[red], priority,
                  inPlace ? "in-place" : "out-of-place", blocking ? " blocking" : "", seed);
    return s;
  }
};

// The same stream on every rank: it depends on the seed and the thread only.
Op nextOp(std::mt19937_64& rng, const Options& o, int thread, uint64_t index) {
  Op op;
  op.thread = thread;
  op.index = index;
  op.seed = rng();
  op.type = &kTypes[rng() % 8];
  op.red = static_cast<priocclRedOp_t>(rng() % 4);
  double u = static_cast<double>(rng() >> 11) * 0x1p-53;  // log-uniform: mostly small, some huge
  size_t bytes = static_cast<size_t>(std::exp(u * std::log(static_cast<double>(o.maxBytes) + 1)));
  op.count = rng() % 32 == 0 ? 0 : std::min(bytes, o.maxBytes) / op.type->bytes;
  uint64_t p = rng() % 10;  // ties among a few levels, any int, and the extremes
  op.priority = p < 5   ? static_cast<int>(rng() % 8)
                : p < 9 ? static_cast<int>(static_cast<uint32_t>(rng()))
                        : (rng() & 1 ? INT_MIN : INT_MAX);
  if (thread > 0)
    op.key = "t" + std::to_string(thread) + ".k" + std::to_string(rng() % kKeysPerThread);
  op.inPlace = rng() & 1;
  op.blocking = thread == 0 && rng() % 16 == 0;  // the blocking API has no key
  op.window = 1 + rng() % o.window;
  return op;
}

// A draw in [0, span) from the high bits of u * span; span 0 stands for 2^64 (all of u).
uint64_t pick(uint64_t u, uint64_t span) {
  return span ? static_cast<uint64_t>((static_cast<unsigned __int128>(u) * span) >> 64) : u;
}

template <typename F>
uint64_t bitsOf(F f) {
  uint64_t b = 0;
  std::memcpy(&b, &f, sizeof f);
  return b;
}

// One element's input on each rank, drawn independently from 64 random bits, and the exact
// result. Sums and products stay integers within the type's exact range (so they are exact in
// any reduction order); min/max inputs are keys spanning the type's whole range (floats: every
// finite non-zero value, denormals included; not zeros, as min(-0, +0) has no one answer).
struct Values {
  const TypeDesc& t;
  priocclRedOp_t red;
  int p, bits;
  uint64_t mask, lo = 0, span = 0;  // sum: lo + [0, span); min/max: keys lo + [0, span)
  Values(const Op& op, int nranks)
      : t(*op.type),
        red(op.red),
        p(nranks),
        bits(8 * t.bytes),
        mask(bits == 64 ? ~0ULL : (1ULL << bits) - 1) {
    uint64_t top = 1ULL << (bits - 1), finite = ((top - 1) >> t.mantBits << t.mantBits) - 1;
    if (red == priocclSum)
      lo = t.isSigned ? -(t.exact / p) : 0, span = t.exact / p - lo + 1;
    else if (red == priocclProd)  // from 1, -1, 2, -2 (unsigned: 1, 2); 2^p must stay exact
      span = (t.isSigned ? 2 : 1) * (p < 62 && (1LL << p) <= t.exact ? 2 : 1);
    else if (t.isFloat)  // key k >= 0: the (k+1)-th positive value; k < 0: the (-k)-th negative
      lo = -finite, span = 2 * finite;
    else
      lo = t.isSigned ? -top : 0, span = 2 * top;  // 0 for int64: all of u
  }
  int64_t number(uint64_t u) const {  // sum, prod
    static const int64_t kSigned[] = {1, -1, 2, -2}, kUnsigned[] = {1, 2};
    if (red == priocclSum) return static_cast<int64_t>(lo + pick(u, span));
    return (t.isSigned ? kSigned : kUnsigned)[pick(u, span)];
  }
  uint64_t encode(int64_t v) const {  // v is exactly representable
    if (!t.isFloat) return static_cast<uint64_t>(v) & mask;
    if (t.bytes == 8) return bitsOf(static_cast<double>(v));
    uint64_t b32 = bitsOf(static_cast<float>(v));
    if (t.bytes == 4) return b32;
    if (t.mantBits == 7) return b32 >> 16;  // bfloat16: the top half
    if (v == 0) return 0;
    return ((b32 >> 16) & 0x8000) | ((((b32 >> 23) & 0xff) - 112) << 10) | ((b32 >> 13) & 0x3ff);
  }
  uint64_t keyBits(int64_t k) const {
    if (!t.isFloat) return static_cast<uint64_t>(k) & mask;
    return k >= 0 ? static_cast<uint64_t>(k) + 1 : (1ULL << (bits - 1)) | static_cast<uint64_t>(-k);
  }
  // Rank `rank`'s input and the result, both as the type's bits, for random bits u[0..p).
  void element(const uint64_t* u, int rank, uint64_t* in, uint64_t* want) const {
    bool arith = red == priocclSum || red == priocclProd;
    int64_t acc = red == priocclProd ? 1 : 0;
    for (int r = 0; r < p; ++r) {
      int64_t v = arith ? number(u[r]) : static_cast<int64_t>(lo + pick(u[r], span));
      if (r == rank) *in = arith ? encode(v) : keyBits(v);
      if (red == priocclSum) acc += v;
      if (red == priocclProd) acc *= v;
      if (!arith && (r == 0 || (red == priocclMax ? v > acc : v < acc))) acc = v;
    }
    *want = arith ? encode(acc) : keyBits(acc);
  }
};

// This rank's input and the exact result of one op, as patterns of len = min(count, kPattern)
// elements, so that filling and checking an op are memcpy and memcmp. Element i of the op is
// pattern element (i + (i / len) * shift) % len: each tile of len elements is the pattern rotated
// by its own amount, so data that lands in the wrong tile (a chunk or offset mix-up) mismatches.
// kPattern is prime: tiles never line up with the engine's power-of-two chunks.
constexpr size_t kPattern = 4093;
struct Mismatch {
  size_t count = 0, at = 0;
  ull want = 0, got = 0;
};
struct Patterns {
  size_t w, len, shift;
  std::vector<unsigned char> in, want;
  Patterns(const Op& op, int nranks, int rank)
      : w(op.type->bytes),
        len(std::min(op.count, kPattern)),
        shift(len > 1 ? 1 + op.seed % (len - 1) : 0),
        in(len * w),
        want(len * w) {
    Values v(op, nranks);
    std::vector<uint64_t> u(nranks);
    for (size_t j = 0; j < len; ++j) {
      for (int r = 0; r < nranks; ++r) u[r] = mix64(op.seed + mix64(r) + j);
      uint64_t a = 0, b = 0;
      v.element(u.data(), rank, &a, &b);
      std::memcpy(&in[j * w], &a, w);  // little-endian: the low w bytes
      std::memcpy(&want[j * w], &b, w);
    }
  }
  // Calls f(op element, pattern element, elements) for each run of the op's elements.
  template <typename F>
  void forEachRun(size_t count, F f) const {
    for (size_t i = 0, tile = 0; i < count; ++tile) {
      size_t off = tile * shift % len, runs[2][2] = {{off, len - off}, {0, off}};
      for (auto& run : runs) {
        size_t n = std::min(run[1], count - i);
        if (n) f(i, run[0], n);
        i += n;
      }
    }
  }
  void fill(size_t count, unsigned char* buf) const {
    forEachRun(count,
               [&](size_t i, size_t j, size_t n) { std::memcpy(buf + i * w, &in[j * w], n * w); });
  }
  // The elements of buf that differ from the result: how many, the first one.
  Mismatch check(size_t count, const unsigned char* buf) const {
    Mismatch m;
    forEachRun(count, [&](size_t i, size_t j, size_t n) {
      if (!std::memcmp(buf + i * w, &want[j * w], n * w)) return;
      for (size_t k = 0; k < n; ++k) {
        if (!std::memcmp(buf + (i + k) * w, &want[(j + k) * w], w) || m.count++) continue;
        m.at = i + k;
        std::memcpy(&m.want, &want[(j + k) * w], w);
        std::memcpy(&m.got, buf + (i + k) * w, w);
      }
    });
    return m;
  }
};

struct Pending {
  Op op;
  std::optional<Patterns> pat;
  std::unique_ptr<unsigned char[]> send, recv;  // send: out of place only
  prioccl::Request req;
  size_t mem = 0;
};

struct ThreadStats {
  std::atomic<ull> submitted{0}, retired{0}, bytes{0}, wrongOps{0}, wrongElems{0}, failed{0};
  std::atomic<int64_t> globalWrong{0}, globalFailed{0};  // all ranks, as of the last checkpoint
  std::mutex m;
  std::string oldest;  // the op this thread waits for longest (STALL reports)
};

struct Shared {
  Options o;
  prioccl::Communicator comm;
  int rank = 0, nranks = 1;
  std::vector<MPI_Comm> ctl;  // one per thread: the checkpoints' collectives never interleave
  std::deque<ThreadStats> stats;
  Clock::time_point start;
  std::atomic<double> lastRetire{0};  // elapsed() when an op last completed here
  std::atomic<int> reports{0}, running{0};
  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start).count(); }
  void report(const std::string& line) {
    if (reports++ < kMaxReports) std::printf("%s\n", line.c_str()), std::fflush(stdout);
  }
};

void fail(Shared& s, ThreadStats& st, const Op& op, const char* what) {
  ++st.failed, ++st.retired;
  s.report("FAILED rank " + std::to_string(s.rank) + ": " + op.describe() + ": " + what);
}

void retire(Shared& s, ThreadStats& st, Pending& p) {
  if (s.o.inject == static_cast<long long>(p.op.index) && p.op.thread == 0 && s.rank == 0 &&
      p.op.count > 0)
    p.recv[p.op.bytes() - 1] ^= 1;  // --inject: show that the check catches a wrong bit
  Mismatch m = p.pat->check(p.op.count, p.recv.get());
  if (m.count) {
    ++st.wrongOps, st.wrongElems += m.count;
    char d[160];
    std::snprintf(d, sizeof d,
                  ": %zu of %zu elements WRONG, first at %zu: expected 0x%llx got 0x%llx", m.count,
                  p.op.count, m.at, m.want, m.got);
    s.report("WRONG rank " + std::to_string(s.rank) + ": " + p.op.describe() + d);
  }
  st.bytes += p.op.bytes();
  ++st.retired;
  s.lastRetire = s.elapsed();
}

// Waits for (or, block == false, polls) one op; false while it runs.
bool finish(Shared& s, ThreadStats& st, Pending& p, bool block) {
  try {
    if (p.req.valid() && !(block ? (p.req.wait(), true) : p.req.test())) return false;
  } catch (const prioccl::Error& e) {
    fail(s, st, p.op, e.what());
    return true;
  }
  retire(s, st, p);
  return true;
}

// False when the submission itself failed (counted; nothing to wait for).
bool submit(Shared& s, ThreadStats& st, Pending& p) {
  const Op& op = p.op;
  size_t n = op.bytes();
  p.pat.emplace(op, s.nranks, s.rank);
  p.recv.reset(new unsigned char[n]);
  if (!op.inPlace) p.send.reset(new unsigned char[n]);
  unsigned char* in = op.inPlace ? p.recv.get() : p.send.get();
  p.pat->fill(op.count, in);
  if (!op.inPlace) std::memset(p.recv.get(), 0xa5, n);  // a stale output cannot pass
  ++st.submitted;
  try {
    if (op.blocking)
      s.comm.allReduce(in, p.recv.get(), op.count, op.type->dt, op.red);
    else if (op.key.empty())
      p.req = s.comm.allReduceAsync(in, p.recv.get(), op.count, op.type->dt, op.red, op.priority);
    else
      p.req = s.comm.allReduceAsync(in, p.recv.get(), op.count, op.type->dt, op.red, op.priority,
                                    op.key);
  } catch (const prioccl::Error& e) {
    fail(s, st, op, e.what());
    return false;
  }
  return true;
}

// Open MPI may finish one thread's request inside another thread's MPI call: TSan sees MPI's
// copies into and out of the vote buffers but not the hand-over that orders them, so this code
// touches them only here, uninstrumented.
__attribute__((no_sanitize("thread"))) void copyVote(const int64_t* from, int64_t* to) {
  for (int i = 0; i < 3; ++i) to[i] = from[i];
}

// Time mode: every kCheckpointOps ops, thread t of every rank votes "stop" (its clock passed the
// deadline) in an MPI_Iallreduce on its own communicator and collects the previous vote's sum;
// all ranks see the same sums at the same op index, so they stop after the same op count. The
// vote overlaps the next kCheckpointOps ops, so it costs no round trip.
void worker(Shared& s, int t, uint64_t opLimit) {
  ThreadStats& st = s.stats[t];
  std::mt19937_64 rng(mix64(s.o.seed) ^ mix64(0x100 + t));
  std::deque<Pending> window;
  size_t mem = 0, budget = s.o.maxInflightBytes / s.o.threads;
  MPI_Request vote = MPI_REQUEST_NULL;
  int64_t mine[3], sum[3];  // stop votes, wrong ops, failed ops
  auto noteOldest = [&] {
    std::lock_guard<std::mutex> lock(st.m);
    st.oldest = window.empty() ? "" : window.front().op.describe();
  };
  auto waitOldest = [&] {
    finish(s, st, window.front(), true);
    mem -= window.front().mem;
    window.pop_front();
    noteOldest();
  };
  for (uint64_t n = 0; n < opLimit; ++n) {
    if (s.o.ops == 0 && n % kCheckpointOps == 0) {
      if (vote != MPI_REQUEST_NULL) {
        for (int done = 0; MPI_Test(&vote, &done, MPI_STATUS_IGNORE), !done;)
          std::this_thread::sleep_for(std::chrono::microseconds(500));  // drives MPI progress
        int64_t got[3];
        copyVote(sum, got);
        st.globalWrong = got[1], st.globalFailed = got[2];
        if (got[0] > 0) break;
      }
      int64_t next[3] = {s.elapsed() >= s.o.seconds, static_cast<int64_t>(st.wrongOps.load()),
                         static_cast<int64_t>(st.failed.load())};
      copyVote(next, mine);
      MPI_Iallreduce(mine, sum, 3, MPI_INT64_T, MPI_SUM, s.ctl[t], &vote);
    }
    Pending p;
    p.op = nextOp(rng, s.o, t, n);
    p.mem = p.op.bytes() * (p.op.inPlace ? 1 : 2);
    for (auto it = window.begin(); it != window.end();)  // whatever is done, in any order
      if (finish(s, st, *it, false))
        mem -= it->mem, it = window.erase(it);
      else
        ++it;
    // An op bigger than the budget runs alone. Budgets are per thread: a shared one would let one
    // thread's ops wait on another's, which other ranks may schedule differently (deadlock).
    while (!window.empty() && (window.size() >= p.op.window || mem + p.mem > budget)) waitOldest();
    if (!submit(s, st, p)) continue;
    if (p.op.blocking) {
      retire(s, st, p);
      continue;
    }
    mem += p.mem;
    window.push_back(std::move(p));
    noteOldest();
  }
  while (!window.empty()) waitOldest();
  --s.running;
}

// The byte-size syntax shared with PRIOCCL_* and the benchmarks (src/common/parse_size.h).
size_t parseBytes(const char* v) {
  unsigned long long b = 0;
  if (!prioccl::common::parseSize(v, &b) || b > SIZE_MAX) throw std::invalid_argument(v);
  return static_cast<size_t>(b);
}

// Throws std::invalid_argument (with the offending word) on a bad command line.
Options parse(int argc, char** argv) {
  Options o;
  bool soak = false, seconds = false, progress = false;
  const std::map<std::string, std::function<void(const char*)>> valued = {
      {"--seconds", [&](const char* v) { o.seconds = std::stod(v), seconds = true; }},
      {"--ops", [&](const char* v) { o.ops = std::stoll(v); }},
      {"--threads", [&](const char* v) { o.threads = std::stoi(v); }},
      {"--seed", [&](const char* v) { o.seed = std::stoull(v, nullptr, 0); }},
      {"--max-bytes", [&](const char* v) { o.maxBytes = parseBytes(v); }},
      {"--max-inflight-bytes", [&](const char* v) { o.maxInflightBytes = parseBytes(v); }},
      {"--window", [&](const char* v) { o.window = std::stoi(v); }},
      {"--algo", [&](const char* v) { o.algo = v; }},
      {"--progress", [&](const char* v) { o.progress = std::stod(v), progress = true; }},
      {"--stall-seconds", [&](const char* v) { o.stallSeconds = std::stod(v); }},
      {"--inject", [&](const char* v) { o.inject = std::stoll(v); }}};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto it = valued.find(a);
    if (it != valued.end() && i + 1 < argc)
      it->second(argv[++i]);
    else if (a == "--fifo" || a == "--soak" || a == "--help" || a == "-h")
      (a == "--fifo" ? o.fifo : a == "--soak" ? soak : o.help) = true;
    else
      throw std::invalid_argument(a);
  }
  if (soak && !seconds) o.seconds = 3600;
  if (soak && !progress) o.progress = 60;
  if (o.threads < 1 || o.window < 1 || o.ops < 0 || o.maxBytes < 1)
    throw std::invalid_argument("threads, window and max-bytes must be positive");
  return o;
}

prioccl::Config makeConfig(const Options& o) {
  prioccl::Config c = prioccl::Config::fromEnv();  // transport etc. from PRIOCCL_* variables
  if (o.fifo) c.schedule = priocclScheduleFifo;
  const char* env = std::getenv("PRIOCCL_ALGO");
  std::string algo = !o.algo.empty() ? o.algo : env && *env ? "" : "mix";
  if (algo == "mix") algo = kMixRules;
  if (algo.find_first_of("<,") != std::string::npos) {
    c.algorithmRules = algo;  // validated by the communicator
  } else if (!algo.empty()) {
    c.algorithm = prioccl::parseAlgorithm(algo);
    c.algorithmRules.clear();
    if (c.algorithm == priocclNumAlgos) throw std::invalid_argument("--algo " + algo);
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0, rank = 0, nranks = 1;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  Shared s;
  bool bad = false;
  try {
    if (provided < MPI_THREAD_MULTIPLE) throw std::invalid_argument("no MPI_THREAD_MULTIPLE");
    s.o = parse(argc, argv);
    if (!s.o.help) s.comm = prioccl::Communicator::fromMpi(nullptr, makeConfig(s.o));
  } catch (const std::exception& e) {
    if (rank == 0) std::fprintf(stderr, "stress: %s\n", e.what());
    bad = true;
  }
  if (bad || s.o.help) {
    if (rank == 0) std::fputs(kUsage, stderr);
    MPI_Finalize();
    return bad ? 2 : 0;
  }
  const Options& o = s.o;
  s.rank = rank, s.nranks = nranks;
  s.ctl.resize(o.threads);
  for (MPI_Comm& c : s.ctl) MPI_Comm_dup(MPI_COMM_WORLD, &c);
  s.stats.resize(o.threads);
  if (rank == 0)
    std::printf("stress: %d ranks, %d threads, %s %g, seed %llu, max %zu bytes, %s\n", nranks,
                o.threads, o.ops ? "ops" : "seconds", o.ops ? double(o.ops) : o.seconds, o.seed,
                o.maxBytes, s.comm.config().describe().c_str());
  std::fflush(stdout);

  MPI_Barrier(MPI_COMM_WORLD);
  s.start = Clock::now();
  s.running = o.threads;
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t)
    threads.emplace_back(worker, std::ref(s), t,
                         o.ops ? o.ops / o.threads + (t < o.ops % o.threads) : UINT64_MAX);
  // Progress lines (rank 0) and the stall watchdog (every rank) while the workers run.
  for (double next = o.progress; s.running > 0;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (rank == 0 && o.progress > 0 && s.elapsed() >= next) {
      ull ops = 0, bytes = 0;
      long long wrong = 0, failed = 0;
      for (ThreadStats& st : s.stats)
        ops += st.retired, bytes += st.bytes, wrong += st.globalWrong, failed += st.globalFailed;
      std::printf(
          "PROGRESS t=%.0fs ops=%llu GiB=%.2f wrong=%lld failed=%lld (ops, GiB: rank 0; "
          "wrong, failed: all ranks at the last vote)\n",
          s.elapsed(), ops, bytes / 1073741824.0, wrong, failed);
      std::fflush(stdout);
      next += o.progress;
    }
    double idle = s.elapsed() - s.lastRetire;
    if (idle < o.stallSeconds) continue;
    for (int t = 0; t < o.threads; ++t) {
      std::lock_guard<std::mutex> lock(s.stats[t].m);
      std::printf(
          "STALL rank %d: no op completed for %.0f s; thread %d submitted %llu, completed "
          "%llu, oldest pending: %s\n",
          rank, idle, t, s.stats[t].submitted.load(), s.stats[t].retired.load(),
          s.stats[t].oldest.c_str());
    }
    std::fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  for (std::thread& th : threads) th.join();
  double seconds = s.elapsed();
  priocclCounters_t counters = s.comm.counters();
  s.comm.destroy();

  // Per rank: ops, payload bytes (sum of count * element size, each op once), wrong ops, wrong
  // elements, failed ops, bytes sent, preemptions.
  ull mine[7] = {0, 0, 0, 0, 0, counters.bytesSent, counters.preemptions};
  for (ThreadStats& st : s.stats)
    mine[0] += st.retired, mine[1] += st.bytes, mine[2] += st.wrongOps, mine[3] += st.wrongElems,
        mine[4] += st.failed;
  std::vector<ull> all(7 * nranks);
  MPI_Gather(mine, 7, MPI_UNSIGNED_LONG_LONG, all.data(), 7, MPI_UNSIGNED_LONG_LONG, 0,
             MPI_COMM_WORLD);
  int ok = 1;
  if (rank == 0) {
    ull wrong = 0, failed = 0;
    for (int r = 0; r < nranks; ++r) {
      const ull* a = &all[7 * r];
      std::printf(
          "rank %d: ops=%llu payload=%.2fGiB sent=%.2fGiB preemptions=%llu wrong_ops=%llu "
          "wrong_elements=%llu failed_ops=%llu\n",
          r, a[0], a[1] / 1073741824.0, a[5] / 1073741824.0, a[6], a[2], a[3], a[4]);
      wrong += a[2], failed += a[4];
      if (a[0] != all[0])
        std::printf("MISMATCH: rank %d ran %llu ops, rank 0 %llu\n", r, a[0], all[0]);
      ok &= a[0] == all[0];
    }
    ok &= wrong == 0 && failed == 0;
    std::printf(
        "STRESS ranks=%d threads=%d seconds=%.1f ops=%llu bytes_per_rank=%.2fGiB wrong=%llu "
        "failed=%llu\n",
        nranks, o.threads, seconds, all[0], all[1] / 1073741824.0, wrong, failed);
    std::fflush(stdout);
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  for (MPI_Comm& c : s.ctl) MPI_Comm_free(&c);
  MPI_Finalize();
  return ok ? 0 : 1;
}
