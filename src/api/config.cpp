// Config: built-in defaults, overridden by PRIOCCL_* environment variables.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>

#include "algo/registry.h"
#include "algo/select.h"
#include "api/params.h"
#include "common/error.h"

namespace prioccl {

using detail::concat;
using detail::fail;

namespace {

size_t roundToPowerOfTwo(double bytes) {
  size_t p = 1;
  while (static_cast<double>(p) * 1.5 < bytes) p <<= 1;
  return p;
}

size_t ceilPowerOfTwo(double bytes) {
  size_t p = 1;
  while (static_cast<double>(p) < bytes) p <<= 1;
  return p;
}

}  // namespace

std::vector<AlgoRule> parseAlgorithmRules(const char* name, const std::string& text) {
  std::vector<AlgoRule> rules;
  size_t pos = 0;
  while (!text.empty()) {
    size_t comma = text.find(',', pos);
    std::string term =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t lt = term.find('<');
    priocclAlgorithm_t algo = parseAlgorithm(term.substr(0, lt));
    bool last = comma == std::string::npos;
    size_t below = SIZE_MAX;
    if (lt != std::string::npos)
      below = detail::parseSizeNamed(name, term.substr(lt + 1).c_str(), 1, ~0ULL >> 1);
    if (algo == priocclNumAlgos || last != (lt == std::string::npos) ||
        (!rules.empty() && below <= rules.back().below))
      fail(priocclInvalidArgument, name, "='", text,
           "' is not a size rule list ALGO<SIZE,...,ALGO (ALGO one of auto, ring, tree, rd, hd; "
           "sizes increasing; the last term without a size), e.g. 'rd<64K,tree'");
    rules.push_back({below, algo});
    if (last) break;
    pos = comma + 1;
  }
  return rules;
}

// Names from the algorithm registry (algo/registry.cpp), plus "auto".
priocclAlgorithm_t parseAlgorithm(const std::string& name) {
  if (!strcasecmp(name.c_str(), "auto")) return priocclAlgoAuto;
  const AlgoEntry* e = findAlgo(name.c_str());
  return e ? e->id : priocclNumAlgos;
}

const char* algorithmName(priocclAlgorithm_t a) {
  if (a == priocclAlgoAuto) return "auto";
  for (const AlgoEntry& e : algoRegistry())
    if (e.id == a) return e.name;
  return "invalid";
}

// Every PRIOCCL_* variable of the parameter table (params.cpp) over the defaults.
Config Config::fromEnv() {
  Config c;
  detail::readEnv(c);
  return c;
}

// Auto tuning. The chunk is the unit of preemption and of reduction order: a chunk's ring
// segment should take a fraction of a millisecond on the wire, so that an urgent chunk never
// waits long behind one, and be long enough that per-message costs stay small. The chunk size
// also decides which rank starts each element's sum, so the same job must cut alike in every
// run: the link measurement varies by 30% from run to run (0.09-0.125 GB/s on the 1 Gbit/s
// testbed), and a rule proportional to it flipped between two chunk sizes, and so between two
// results, near a boundary. So the link only picks one of two classes, split at 600 MB/s, well
// away from common links (1-3 Gbit/s below, 10 Gbit/s and shared memory above), and ranks that
// all share one host are in the fast class without a measurement (a busy host measures its
// shared memory or loopback low):
// - networks up to ~5 Gbit/s: 32 KiB ring segments (128 KiB chunks at 4 ranks), the best point
//   of docs/chunk_sweep.md at 1 Gbit/s (a segment is 0.26 ms on the wire at 1 Gbit/s, 2.6 ms at
//   100 Mbit/s, 0.09 ms at 3 Gbit/s);
// - faster links and shared memory: 256 KiB segments (chunks capped at 1 MiB, the sweep's best
//   there).
// The cap holds only while a segment stays at least kMinSegmentBytes (32 KiB where that is the
// target): beyond 16 ranks (32 on slow links) the chunk grows with the rank count instead. With
// a fixed cap a ring's step shrank to 1 MiB / p, and per-message costs took over: simulated at
// 100 Gbit/s (perf/sim, docs/scaling.md), busbw fell from 98% of the link at 4 ranks to 8% at
// 256, and 64 KiB steps give a 256 MiB op 99% there. The chunks of 2-16 ranks are unchanged.
// (Scratch blocks follow the chunk: at 1,024 ranks a hierarchical op's block is 64 MiB.)
// The credit starts at about kCreditSeconds of the link: sends complete only once the receiver
// has them (transport.h), so every credit byte is queued in front of an urgent op's next
// message; it covers at least two ring segments (with one, a send waits for the previous one's
// acknowledgement: stop and wait). Its link-time part stops at kMaxStartCreditBytes, reached
// above ~10 Gbit/s: 0.5 ms of a 100 Gbit/s link is 6 MB, hundreds of round trips, all queued in
// front of each of an urgent op's steps (simulated, docs/scaling.md: a 1 MiB urgent op behind a
// 16 MiB one at 4 ranks was slowed 5.91x with it, 1.38x with 512 KiB, the bulk op's busbw the
// same to 0.3%). It may grow to kMaxCreditSeconds of the link where it holds an underused link
// back (core/credit_tuner.h: hosts whose cores are busy answer in milliseconds). An explicit
// credit stays fixed unless a maximum is also given.
void Config::resolveAuto(double bytesPerSecond, double latencySeconds, int nranks, bool oneHost) {
  constexpr double kFastLinkBytesPerSecond = 600e6;
  constexpr size_t kSlowSegmentBytes = 32 << 10, kFastSegmentBytes = 256 << 10;
  constexpr size_t kMinSegmentBytes = 64 << 10, kCappedChunkBytes = 1 << 20;
  constexpr double kCreditSeconds = 0.5e-3, kMaxCreditSeconds = 16e-3;
  constexpr size_t kMinCreditBytes = 32 << 10, kCreditSegments = 2;
  constexpr size_t kMaxCreditBytes = 16 << 20, kMaxStartCreditBytes = 512 << 10;
  linkBytesPerSecond = bytesPerSecond;
  linkLatencySeconds = latencySeconds;
  double bw = bytesPerSecond > 0 ? bytesPerSecond : 1e9;  // unmeasured (one rank): moderate
  const double ranks = std::max(1, nranks);
  const bool fast = oneHost || bw >= kFastLinkBytesPerSecond;
  slowLinks = !fast;
  if (chunkBytes == 0) {
    size_t segment = fast ? kFastSegmentBytes : kSlowSegmentBytes;
    size_t cap = std::max<size_t>(
        kCappedChunkBytes,
        ceilPowerOfTwo(static_cast<double>(std::min(segment, kMinSegmentBytes)) * ranks));
    chunkBytes =
        std::clamp<size_t>(ceilPowerOfTwo(static_cast<double>(segment) * ranks), 64 << 10, cap);
  }
  const bool creditAuto = creditBytes == 0;
  if (creditAuto) {
    size_t segments = ceilPowerOfTwo(static_cast<double>(kCreditSegments * chunkBytes) / ranks);
    const size_t linkTime = std::min(roundToPowerOfTwo(bw * kCreditSeconds), kMaxStartCreditBytes);
    creditBytes = std::clamp<size_t>(std::max(linkTime, segments), kMinCreditBytes, 64 << 20);
  }
  if (creditMaxBytes == 0)
    creditMaxBytes = creditAuto
                         ? std::clamp<size_t>(roundToPowerOfTwo(bw * kMaxCreditSeconds),
                                              creditBytes, std::max(creditBytes, kMaxCreditBytes))
                         : creditBytes;
  creditMaxBytes = std::max(creditMaxBytes, creditBytes);
}

std::string Config::describe() const {
  return concat(detail::describeParams(*this), " link=", linkBytesPerSecond / 1e9, "GB/s,",
                linkLatencySeconds * 1e6, "us",
                slowLinks ? " (slow: long waits poll every 50 us)" : "");
}

}  // namespace prioccl
