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
#include "common/error.h"
#include "common/params.h"

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

// Auto tuning. A chunk's ring segment should take about kStepSeconds on the wire: long enough
// that per-message costs stay small, short enough that an urgent chunk never waits long behind
// one. Rounded up: on the 4-host 1 Gbit/s testbed (full-size VGG-19 under P3, docs/chunk_sweep.md)
// 128 KiB chunks came within 3% of the fluid model while 64 KiB lost 50% to per-chunk costs, and
// the link measurement there varies between 0.09 and 0.125 GB/s, which rounding to the nearest
// power of two split between the two. The credit keeps about kCreditSeconds of data in flight:
// sends complete only once the receiver has them (transport.h), so every credit byte is queued in
// front of an urgent op's next message, but the credit must also cover a send's acknowledgement,
// so it is at least two ring segments (with one, a chunk of 256 KiB on the testbed moved at half
// the link rate: stop and wait). Gives 128 KiB chunks / 64 KiB credit there, and 1 MiB / 2 MiB on
// shared memory.
void Config::resolveAuto(double bytesPerSecond, double latencySeconds, int nranks) {
  constexpr double kStepSeconds = 250e-6, kCreditSeconds = 0.5e-3;
  constexpr size_t kMinCreditBytes = 32 << 10, kCreditSegments = 2;
  linkBytesPerSecond = bytesPerSecond;
  linkLatencySeconds = latencySeconds;
  double bw = bytesPerSecond > 0 ? bytesPerSecond : 1e9;  // unmeasured (one rank): moderate
  if (chunkBytes == 0)
    chunkBytes = std::clamp<size_t>(ceilPowerOfTwo(bw * kStepSeconds * std::max(1, nranks)),
                                    64 << 10, 1 << 20);
  if (creditBytes == 0) {
    size_t segments =
        ceilPowerOfTwo(static_cast<double>(kCreditSegments * chunkBytes) / std::max(1, nranks));
    creditBytes = std::clamp<size_t>(std::max(roundToPowerOfTwo(bw * kCreditSeconds), segments),
                                     kMinCreditBytes, 64 << 20);
  }
}

std::string Config::describe() const {
  return concat(detail::describeParams(*this), " link=", linkBytesPerSecond / 1e9, "GB/s,",
                linkLatencySeconds * 1e6, "us");
}

}  // namespace prioccl
