// Randomised stress of the engine: T threads per rank stream async collectives (all-reduce mostly;
// broadcast, reduce, all-gather, reduce-scatter and all-to-all mixed in) of random sizes, dtypes,
// reduction ops, roots, priorities and keys, and every element of every result is compared bitwise
// with a value computed locally. Every rank samples its resident memory (VmRSS) at each progress
// line. Rank 0 ends with
//   MEMORY rank=R ... (one line per rank: VmRSS at the baseline, at the end, the largest after it)
//   STRESS ranks=P threads=T seconds=S ops=N bytes_per_rank=XGiB wrong=W failed=F
// and every rank exits 0 only if no op anywhere was wrong or failed (--help: the options).
//
// Agreement: each thread's op stream is a function of (--seed, thread) alone, the same on every
// rank. Thread 0 submits unnamed ops (matched by submission order, so one thread only); the other
// threads name theirs from a per-thread pool of keys ("t<thread>.k<j>"), matched by (key,
// occurrence). So ranks agree on every op as long as each thread runs the same number of ops on
// every rank: with --ops that is fixed; with --seconds the threads vote on when to stop (worker()).
#include <malloc.h>
#include <mpi.h>
#include <prioccl/prioccl.hpp>

#include "common/parse_size.h"

#include <algorithm>
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
const char* kMixRules =
    "rd<2K,tree<32K,hd<128K,ring<256K,rd<1M,hd<2M,tree<8M,hier<16M,ring<32M,auto";

const char* kUsage =
    "usage: stress [--seconds S=30 | --ops N] [--threads T=3] [--seed X=1] [--max-bytes B=64M]\n"
    "  [--max-inflight-bytes B=512M] [--window K=8] [--fifo]\n"
    "  [--algo auto|ring|tree|rd|hd|mix|RULES]\n"
    "  [--progress S] [--stall-seconds S=120] [--soak] [--inject N] [--kinds all|K,...]\n"
    "  [--rss-baseline S=300] [--max-rss-growth PCT]\n"
    "--ops N: N ops per rank in all. --max-inflight-bytes: buffers of pending ops, per rank.\n"
    "--window K: most ops in flight per thread. --algo: default mix (size bands covering every\n"
    "algorithm) unless PRIOCCL_ALGO is set. --soak: --seconds 3600 and a PROGRESS line every 60 s\n"
    "(--progress S). --stall-seconds: a rank whose ops all stop completing that long prints STALL\n"
    "and aborts. --inject N: flip a bit of thread 0's op N on rank 0 (checks the checker).\n"
    "--kinds: all (all-reduce half the ops, the other kinds the rest), or some of all-reduce,\n"
    "broadcast, reduce, all-gather, reduce-scatter, all-to-all.\n"
    "allreduce.\n"
    "--rss-baseline S: memory growth is measured from the first sample at or after S seconds\n"
    "(from half the run when the run is shorter). --max-rss-growth: the run fails (GROWTH) when\n"
    "a rank's VmRSS floor grew more than PCT percent from the baseline period to the last.\n";

struct Options {
  double seconds = 30, progress = 0, stallSeconds = 120, rssBaseline = 300;
  double maxRssGrowth = -1;  // percent; < 0: no limit
  long long ops = 0;         // > 0: a fixed op count instead of a time bound
  long long inject = -1;     // >= 0: corrupt that op of thread 0 on rank 0
  int threads = 3, window = 8;
  ull seed = 1;
  size_t maxBytes = 64 << 20, maxInflightBytes = 512 << 20;
  bool fifo = false, help = false;
  std::vector<int> kinds;  // --kinds: the kinds drawn from (empty: the default mix)
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

enum class Kind { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll };
const char* kKindNames[] = {"all-reduce", "broadcast",      "reduce",
                            "all-gather", "reduce-scatter", "all-to-all"};
// The kinds whose buffers hold one block of `count` elements per rank.
bool blocked(Kind k) {
  return k == Kind::kAllGather || k == Kind::kReduceScatter || k == Kind::kAllToAll;
}

struct Op {
  Kind kind = Kind::kAllReduce;
  int thread = 0, root = 0;
  ull index = 0, seed = 0;
  const TypeDesc* type = nullptr;
  priocclRedOp_t red = priocclSum;
  size_t count = 0;  // elements per block of the blocked kinds
  int priority = 0;
  size_t window = 1;  // most ops of this thread in flight once this one is submitted
  std::string key;    // empty: unnamed (thread 0 only)
  bool inPlace = false, blocking = false;
  size_t bytes() const { return count * type->bytes; }
  std::string describe() const {
    char s[320];
    std::snprintf(s, sizeof s,
                  "thread %d op %llu %s key='%s' count=%zu %s %s root=%d prio=%d %s%s seed=%llx",
                  thread, index, kKindNames[static_cast<int>(kind)], key.c_str(), count, type->name,
                  kRedNames[red], root, priority, inPlace ? "in-place" : "out-of-place",
                  blocking ? " blocking" : "", seed);
    return s;
  }
};

// The same stream on every rank: it depends on the seed, the thread and the rank count only.
Op nextOp(std::mt19937_64& rng, const Options& o, int nranks, int thread, uint64_t index) {
  Op op;
  op.thread = thread;
  op.index = index;
  op.seed = rng();
  op.type = &kTypes[rng() % 8];
  op.red = static_cast<priocclRedOp_t>(rng() % 4);
  // Half all-reduces, the rest the other kinds alike; --kinds: those kinds alike.
  uint64_t k = rng() % 10;
  op.kind = !o.kinds.empty() ? static_cast<Kind>(o.kinds[k % o.kinds.size()])
            : k < 5          ? Kind::kAllReduce
                             : static_cast<Kind>(k - 4);
  op.root = static_cast<int>(rng() % static_cast<uint64_t>(nranks));
  double u = static_cast<double>(rng() >> 11) * 0x1p-53;  // log-uniform: mostly small, some huge
  size_t bytes = static_cast<size_t>(std::exp(u * std::log(static_cast<double>(o.maxBytes) + 1)));
  if (blocked(op.kind)) bytes /= static_cast<size_t>(nranks);  // the buffers hold a block per rank
  op.count = rng() % 32 == 0 ? 0 : std::min(bytes, o.maxBytes) / op.type->bytes;
  uint64_t p = rng() % 10;  // ties among a few levels, any int, and the extremes
  op.priority = p < 5   ? static_cast<int>(rng() % 8)
                : p < 9 ? static_cast<int>(static_cast<uint32_t>(rng()))
                        : (rng() & 1 ? INT_MIN : INT_MAX);
  if (thread > 0)
    op.key = "t" + std::to_string(thread) + ".k" + std::to_string(rng() % kKeysPerThread);
  op.inPlace = (rng() & 1) && op.kind != Kind::kAllToAll;  // all-to-all is never in place
  op.blocking = thread == 0 && rng() % 16 == 0;            // the blocking API has no key
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
// `seed`: the op's, or one derived from it for each block of the blocked kinds.
struct Patterns {
  size_t w, len, shift;
  std::vector<unsigned char> in, want;
  Patterns(const Op& op, uint64_t seed, int nranks, int rank)
      : w(op.type->bytes),
        len(std::min(op.count, kPattern)),
        shift(len > 1 ? 1 + seed % (len - 1) : 0),
        in(len * w),
        want(len * w) {
    Values v(op, nranks);
    std::vector<uint64_t> u(nranks);
    for (size_t j = 0; j < len; ++j) {
      for (int r = 0; r < nranks; ++r) u[r] = mix64(seed + mix64(r) + j);
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
  // The elements of buf that differ from the result (or from this rank's input: the data-moving
  // kinds): how many, the first one. `offset`: buf's first element within the op's buffer.
  Mismatch check(size_t count, const unsigned char* buf, bool result = true,
                 size_t offset = 0) const {
    const std::vector<unsigned char>& ref = result ? want : in;
    Mismatch m;
    forEachRun(count, [&](size_t i, size_t j, size_t n) {
      if (!std::memcmp(buf + i * w, &ref[j * w], n * w)) return;
      for (size_t k = 0; k < n; ++k) {
        if (!std::memcmp(buf + (i + k) * w, &ref[(j + k) * w], w) || m.count++) continue;
        m.at = offset + i + k;
        std::memcpy(&m.want, &ref[(j + k) * w], w);
        std::memcpy(&m.got, buf + (i + k) * w, w);
      }
    });
    return m;
  }
};

// What one op's buffers hold: block b of the send buffer is `send[b]`'s input; block b of the
// receive buffer must end as `recv[b]`'s result (or input, `recvIsInput`). A block of the op's
// count; the unblocked kinds have one block (recv empty: nothing to check on this rank).
struct Expected {
  std::deque<Patterns> pats;
  std::vector<const Patterns*> send, recv;
  bool recvIsInput = false;
};

uint64_t blockSeed(uint64_t seed, int block) {
  return mix64(seed ^ mix64(0x5eed0000ULL + static_cast<uint64_t>(block)));
}

Expected expected(const Op& op, int p, int me) {
  Expected e;
  auto add = [&](uint64_t seed, int rank) {
    e.pats.emplace_back(op, seed, p, rank);
    return &e.pats.back();
  };
  switch (op.kind) {
    case Kind::kAllReduce:
      e.send = e.recv = {add(op.seed, me)};
      break;
    case Kind::kReduce:
      e.send = {add(op.seed, me)};
      if (me == op.root) e.recv = e.send;
      break;
    case Kind::kBroadcast:  // every rank ends with the root's input
      e.send = e.recv = {add(op.seed, op.root)};
      e.recvIsInput = true;
      break;
    case Kind::kAllGather:  // block b: rank b's input
      for (int b = 0; b < p; ++b) e.recv.push_back(add(op.seed, b));
      e.send = {e.recv[me]};
      e.recvIsInput = true;
      break;
    case Kind::kReduceScatter:  // block b of every rank is reduced onto rank b
      for (int b = 0; b < p; ++b) e.send.push_back(add(blockSeed(op.seed, b), me));
      e.recv = {e.send[me]};
      break;
    case Kind::kAllToAll:  // block b goes to rank b; block b received is rank b's block `me`
      for (int b = 0; b < p; ++b) e.send.push_back(add(blockSeed(op.seed, b), me));
      for (int b = 0; b < p; ++b) e.recv.push_back(add(blockSeed(op.seed, me), b));
      e.recvIsInput = true;
      break;
  }
  return e;
}

// Elements of an op's send and receive buffers (a block per rank for the blocked kinds).
size_t sendElements(const Op& op, int p) {
  bool perRank = op.kind == Kind::kReduceScatter || op.kind == Kind::kAllToAll;
  return perRank ? op.count * static_cast<size_t>(p) : op.count;
}
size_t recvElements(const Op& op, int p) {
  bool perRank = op.kind == Kind::kAllGather || op.kind == Kind::kAllToAll;
  return perRank ? op.count * static_cast<size_t>(p) : op.count;
}
constexpr size_t kAlign = 64;
size_t roundUp(size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}
// The bytes an op's buffers take: the send buffer, then the receive buffer (in place: one, the
// larger).
size_t bufferBytes(const Op& op, int p) {
  size_t a = sendElements(op, p) * op.type->bytes, b = recvElements(op, p) * op.type->bytes;
  return op.inPlace ? std::max(a, b) : roundUp(a) + b;
}

// A thread's buffers for its ops in flight, carved first-fit out of one block that is written
// once at the start. The harness's memory is then resident and constant, so the process's VmRSS
// changes only with the library's (and the harness's small) allocations: a malloc per op would
// leave VmRSS to the allocator's caching of freed buffers instead.
class Arena {
 public:
  explicit Arena(size_t bytes) : size_(roundUp(bytes)), base_(new unsigned char[size_]) {
    std::memset(base_.get(), 0, size_);
    free_[0] = size_;
  }
  // `bytes` from the arena, or null when no free run is that long now.
  unsigned char* take(size_t bytes) {
    bytes = roundUp(std::max<size_t>(bytes, 1));
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < bytes) continue;
      size_t at = it->first, left = it->second - bytes;
      free_.erase(it);
      if (left) free_[at + bytes] = left;
      return base_.get() + at;
    }
    return nullptr;
  }
  void give(unsigned char* p, size_t bytes) {
    size_t at = static_cast<size_t>(p - base_.get());
    bytes = roundUp(std::max<size_t>(bytes, 1));
    auto next = free_.lower_bound(at);
    if (next != free_.end() && next->first == at + bytes) bytes += next->second, free_.erase(next);
    auto prev = free_.lower_bound(at);
    if (prev != free_.begin() && (--prev)->first + prev->second == at) {
      prev->second += bytes;
      return;
    }
    free_[at] = bytes;
  }

 private:
  size_t size_;
  std::unique_ptr<unsigned char[]> base_;
  std::map<size_t, size_t> free_;  // offset -> length of each free run
};

// An op's buffer: from the thread's arena, or (an op larger than the arena) from the heap.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(arena_, o.arena_), std::swap(p_, o.p_), std::swap(bytes_, o.bytes_);
    std::swap(heap_, o.heap_);
    return *this;
  }
  ~Buffer() {
    if (arena_ && p_) arena_->give(p_, bytes_);
  }
  bool take(Arena& arena, size_t bytes) {
    p_ = arena.take(bytes);
    if (p_) arena_ = &arena, bytes_ = bytes;
    return p_ != nullptr;
  }
  void takeHeap(size_t bytes) {
    heap_.reset(new unsigned char[std::max<size_t>(bytes, 1)]);
    p_ = heap_.get();
  }
  unsigned char* get() const { return p_; }

 private:
  Arena* arena_ = nullptr;
  unsigned char* p_ = nullptr;
  size_t bytes_ = 0;
  std::unique_ptr<unsigned char[]> heap_;
};

struct Pending {
  Op op;
  std::optional<Expected> exp;
  Buffer buf;                    // the send buffer, then the receive buffer (in place: one)
  unsigned char* out = nullptr;  // where the result lands (null: no receive buffer here)
  prioccl::Request req;
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
  std::vector<std::unique_ptr<Arena>> arenas;  // one per thread: its ops' buffers
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
      p.op.count > 0 && !p.exp->recv.empty())
    p.out[p.op.bytes() - 1] ^= 1;  // --inject: show that the check catches a wrong bit
  const Expected& e = *p.exp;
  const size_t count = p.op.count, w = p.op.type->bytes;
  Mismatch m;
  for (size_t b = 0; b < e.recv.size(); ++b) {
    Mismatch mb = e.recv[b]->check(count, p.out + b * count * w, !e.recvIsInput, b * count);
    if (mb.count && !m.count)
      m = mb;
    else
      m.count += mb.count;
  }
  if (m.count) {
    ++st.wrongOps, st.wrongElems += m.count;
    char d[160];
    std::snprintf(d, sizeof d,
                  ": %zu of %zu elements WRONG, first at %zu: expected 0x%llx got 0x%llx", m.count,
                  count * e.recv.size(), m.at, m.want, m.got);
    s.report("WRONG rank " + std::to_string(s.rank) + ": " + p.op.describe() + d);
  }
  st.bytes += recvElements(p.op, s.nranks) * w;
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

// Submits the op in its form: blocking (no key), unnamed, or named.
prioccl::Request start(prioccl::Communicator& comm, const Op& op, const void* in, void* out) {
  const priocclDataType_t dt = op.type->dt;
  const size_t c = op.count;
  const int prio = op.priority;
  const bool named = !op.key.empty();
  switch (op.kind) {
    case Kind::kAllReduce:
      if (op.blocking) return comm.allReduce(in, out, c, dt, op.red), prioccl::Request();
      return named ? comm.allReduceAsync(in, out, c, dt, op.red, prio, op.key)
                   : comm.allReduceAsync(in, out, c, dt, op.red, prio);
    case Kind::kBroadcast:
      if (op.blocking) return comm.broadcast(in, out, c, dt, op.root), prioccl::Request();
      return named ? comm.broadcastAsync(in, out, c, dt, op.root, prio, op.key)
                   : comm.broadcastAsync(in, out, c, dt, op.root, prio);
    case Kind::kReduce:
      if (op.blocking) return comm.reduce(in, out, c, dt, op.red, op.root), prioccl::Request();
      return named ? comm.reduceAsync(in, out, c, dt, op.red, op.root, prio, op.key)
                   : comm.reduceAsync(in, out, c, dt, op.red, op.root, prio);
    case Kind::kAllGather:
      if (op.blocking) return comm.allGather(in, out, c, dt), prioccl::Request();
      return named ? comm.allGatherAsync(in, out, c, dt, prio, op.key)
                   : comm.allGatherAsync(in, out, c, dt, prio);
    case Kind::kReduceScatter:
      if (op.blocking) return comm.reduceScatter(in, out, c, dt, op.red), prioccl::Request();
      return named ? comm.reduceScatterAsync(in, out, c, dt, op.red, prio, op.key)
                   : comm.reduceScatterAsync(in, out, c, dt, op.red, prio);
    case Kind::kAllToAll:
      if (op.blocking) return comm.allToAll(in, out, c, dt), prioccl::Request();
      return named ? comm.allToAllAsync(in, out, c, dt, prio, op.key)
                   : comm.allToAllAsync(in, out, c, dt, prio);
  }
  return prioccl::Request();
}

// False when the submission itself failed (counted; nothing to wait for).
bool submit(Shared& s, ThreadStats& st, Pending& p) {
  const Op& op = p.op;
  const size_t w = op.type->bytes, block = op.count * w;
  const size_t me = static_cast<size_t>(s.rank);
  const bool root = s.rank == op.root;
  p.exp.emplace(expected(op, s.nranks, s.rank));
  const size_t sendBytes = sendElements(op, s.nranks) * w,
               recvBytes = recvElements(op, s.nranks) * w;
  unsigned char* in = nullptr;
  if (op.inPlace) {  // one buffer; the blocked kinds' own block is the other side's
    in = p.out = p.buf.get();
    std::memset(p.out, 0xa5, std::max(sendBytes, recvBytes));
    if (op.kind == Kind::kAllGather) in += me * block;
    if (op.kind == Kind::kReduceScatter) p.out += me * block;
  } else {
    // A broadcast's other ranks have no send buffer, a reduce's no receive buffer.
    if (op.kind != Kind::kBroadcast || root) in = p.buf.get();
    if (op.kind != Kind::kReduce || root) {
      p.out = p.buf.get() + roundUp(sendBytes);
      std::memset(p.out, 0xa5, recvBytes);  // a stale output cannot pass
    }
  }
  if (op.kind != Kind::kBroadcast || root)
    for (size_t b = 0; b < p.exp->send.size(); ++b) p.exp->send[b]->fill(op.count, in + b * block);
  ++st.submitted;
  try {
    p.req = start(s.comm, op, in, p.out);
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
  Arena& arena = *s.arenas[t];
  MPI_Request vote = MPI_REQUEST_NULL;
  int64_t mine[3], sum[3];  // stop votes, wrong ops, failed ops
  auto noteOldest = [&] {
    std::lock_guard<std::mutex> lock(st.m);
    st.oldest = window.empty() ? "" : window.front().op.describe();
  };
  auto waitOldest = [&] {
    finish(s, st, window.front(), true);
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
    p.op = nextOp(rng, s.o, s.nranks, t, n);
    const size_t need = bufferBytes(p.op, s.nranks);
    for (auto it = window.begin(); it != window.end();)  // whatever is done, in any order
      if (finish(s, st, *it, false))
        it = window.erase(it);
      else
        ++it;
    // Room in the window and in the arena, waiting for this thread's older ops (which every rank
    // has submitted) as needed; an op bigger than the arena runs alone, from the heap. Arenas are
    // per thread: a shared one would let one thread's ops wait on another's, which other ranks
    // may schedule differently (deadlock).
    for (;;) {
      if (window.size() < p.op.window && p.buf.take(arena, need)) break;
      if (window.empty()) {
        p.buf.takeHeap(need);
        break;
      }
      waitOldest();
    }
    if (!submit(s, st, p)) continue;
    if (p.op.blocking) {
      retire(s, st, p);
      continue;
    }
    window.push_back(std::move(p));
    noteOldest();
  }
  while (!window.empty()) waitOldest();
  --s.running;
}

// This process's resident memory in kB (VmRSS), or 0 where /proc does not tell.
long long residentKb() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  long long kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmRSS: %lld kB", &kb) == 1) break;
  std::fclose(f);
  return kb;
}

// VmRSS, sampled every second and summarised per period (a progress interval): its floor (the
// least sample) and its peak. The floor is what the process holds with the fewest buffers in
// flight, so a leak raises it period after period, while the peak also moves with the ops that
// happen to be in flight. Growth: the last period's floor (peak) against the floor (peak) of the
// first period that starts at or after the baseline time.
struct MemoryTrack {
  struct Period {
    double start, end;
    long long floor, peak;
  };
  double baselineAt = 0;
  long long first = 0;
  std::vector<Period> periods;
  Period current{0, 0, 0, 0};
  void sample(double t, long long kb) {
    if (!first) first = kb;
    current.floor = current.floor ? std::min(current.floor, kb) : kb;
    current.peak = std::max(current.peak, kb);
    current.end = t;
  }
  // Ends the current period (when it has samples); returns it.
  const Period* close() {
    if (!current.floor) return nullptr;
    periods.push_back(current);
    current = Period{current.end, current.end, 0, 0};
    return &periods.back();
  }
  const Period* baseline() const {
    for (const Period& p : periods)
      if (p.start >= baselineAt) return &p;
    return periods.empty() ? nullptr : &periods.back();
  }
};

// The byte-size syntax shared with PRIOCCL_* and the benchmarks (src/common/parse_size.h).
size_t parseBytes(const char* v) {
  unsigned long long b = 0;
  if (!prioccl::common::parseSize(v, &b) || b > SIZE_MAX) throw std::invalid_argument(v);
  return static_cast<size_t>(b);
}

// "all" (the default mix) or a comma-separated list of kind names (kKindNames).
std::vector<int> parseKinds(const std::string& list) {
  std::vector<int> kinds;
  if (list == "all") return kinds;
  for (size_t at = 0; at <= list.size();) {
    size_t end = std::min(list.find(',', at), list.size());
    std::string name = list.substr(at, end - at);
    auto it = std::find_if(std::begin(kKindNames), std::end(kKindNames),
                           [&](const char* k) { return name == k; });
    if (it == std::end(kKindNames)) throw std::invalid_argument("--kinds " + name);
    kinds.push_back(static_cast<int>(it - std::begin(kKindNames)));
    at = end + 1;
  }
  return kinds;
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
      {"--inject", [&](const char* v) { o.inject = std::stoll(v); }},
      {"--rss-baseline", [&](const char* v) { o.rssBaseline = std::stod(v); }},
      {"--max-rss-growth", [&](const char* v) { o.maxRssGrowth = std::stod(v); }},
      {"--kinds", [&](const char* v) { o.kinds = parseKinds(v); }}};
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
  for (int t = 0; t < o.threads; ++t)
    s.arenas.push_back(std::make_unique<Arena>(o.maxInflightBytes / o.threads));
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
  // Progress lines (rank 0), memory samples and the stall watchdog (every rank) while the
  // workers run.
  MemoryTrack memory;
  memory.baselineAt = std::min(o.rssBaseline, o.ops ? 0.0 : o.seconds / 2);
  const double period = o.progress > 0 ? o.progress : 10;
  memory.sample(0, residentKb());
  for (double next = o.progress, nextSample = 1, nextPeriod = period; s.running > 0;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (s.elapsed() >= nextSample) {
      memory.sample(s.elapsed(), residentKb());
      nextSample += 1;
    }
    if (s.elapsed() >= nextPeriod) {
      const MemoryTrack::Period* p = memory.close();
      if (p && o.progress > 0) {
        struct mallinfo2 mi = mallinfo2();  // what malloc hands out, against what is resident
        std::printf(
            "RSS rank=%d t=%.0fs VmRSS_floor=%lldkB VmRSS_peak=%lldkB malloc_in_use=%zukB\n", rank,
            p->end, p->floor, p->peak, (mi.uordblks + mi.hblkhd) / 1024);
        std::fflush(stdout);
      }
      nextPeriod += period;
    }
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
  if (memory.current.end - memory.current.start >= period / 2) memory.close();  // not a stub
  const MemoryTrack::Period* base = memory.baseline();
  const MemoryTrack::Period* last = memory.periods.empty() ? nullptr : &memory.periods.back();
  priocclCounters_t counters = s.comm.counters();
  s.comm.destroy();

  // Per rank: ops, payload bytes (sum of the receive buffers' sizes, each op once), wrong ops,
  // wrong elements, failed ops, bytes sent, preemptions; VmRSS in kB: the first sample, the
  // baseline period's floor and peak, the last period's floor and peak.
  constexpr int kFields = 12;
  ull mine[kFields] = {0,
                       0,
                       0,
                       0,
                       0,
                       counters.bytesSent,
                       counters.preemptions,
                       static_cast<ull>(memory.first),
                       static_cast<ull>(base ? base->floor : 0),
                       static_cast<ull>(base ? base->peak : 0),
                       static_cast<ull>(last ? last->floor : 0),
                       static_cast<ull>(last ? last->peak : 0)};
  for (ThreadStats& st : s.stats)
    mine[0] += st.retired, mine[1] += st.bytes, mine[2] += st.wrongOps, mine[3] += st.wrongElems,
        mine[4] += st.failed;
  std::vector<ull> all(kFields * nranks);
  MPI_Gather(mine, kFields, MPI_UNSIGNED_LONG_LONG, all.data(), kFields, MPI_UNSIGNED_LONG_LONG, 0,
             MPI_COMM_WORLD);
  int ok = 1;
  if (rank == 0) {
    ull wrong = 0, failed = 0;
    double worstGrowth = -100, worstPeakGrowth = -100;
    auto pct = [](ull from, ull to) {
      return from ? 100.0 * (static_cast<double>(to) - static_cast<double>(from)) / from : 0.0;
    };
    for (int r = 0; r < nranks; ++r) {
      const ull* a = &all[kFields * r];
      worstGrowth = std::max(worstGrowth, pct(a[8], a[10]));
      worstPeakGrowth = std::max(worstPeakGrowth, pct(a[9], a[11]));
      if (!a[8])
        std::printf("MEMORY rank=%d VmRSS_start=%llukB; the run was shorter than a period\n", r,
                    a[7]);
      else
        std::printf(
            "MEMORY rank=%d VmRSS_start=%llukB baseline(t>=%.0fs) floor=%llukB peak=%llukB; last "
            "period floor=%llukB peak=%llukB; growth floor=%.2f%% peak=%.2f%%\n",
            r, a[7], base ? base->start : 0.0, a[8], a[9], a[10], a[11], pct(a[8], a[10]),
            pct(a[9], a[11]));
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
    if (o.maxRssGrowth >= 0 && worstGrowth > o.maxRssGrowth) {
      std::printf("MEMORY GROWTH: a rank's VmRSS floor grew %.2f%% (--max-rss-growth %g)\n",
                  worstGrowth, o.maxRssGrowth);
      ok = 0;
    }
    std::printf(
        "STRESS ranks=%d threads=%d seconds=%.1f ops=%llu bytes_per_rank=%.2fGiB "
        "rss_floor_growth=%.2f%% rss_peak_growth=%.2f%% wrong=%llu failed=%llu\n",
        nranks, o.threads, seconds, all[0], all[1] / 1073741824.0, worstGrowth, worstPeakGrowth,
        wrong, failed);
    std::fflush(stdout);
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  for (MPI_Comm& c : s.ctl) MPI_Comm_free(&c);
  MPI_Finalize();
  return ok ? 0 : 1;
}
