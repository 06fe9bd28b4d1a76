// Config: built-in defaults, overridden by PRIOCCL_* environment variables.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>

#include "algo/select.h"
#include "core/error.h"

namespace prioccl {

using detail::concat;
using detail::fail;

namespace {

// "4194304", "4M", "512k", "1G" (binary multiples). Anything else is an error, never a silent 0.
unsigned long long parseSize(const char* name, const char* text, unsigned long long lo,
                             unsigned long long hi) {
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text, &end, 10);
  bool ok = end != text && errno == 0 && text[0] != '-';
  if (ok && *end) {
    unsigned shift = 0;
    switch (*end) {
      case 'k':
      case 'K':
        shift = 10;
        break;
      case 'm':
      case 'M':
        shift = 20;
        break;
      case 'g':
      case 'G':
        shift = 30;
        break;
      default:
        ok = false;
    }
    if (ok && (end[1] == 'i' || end[1] == 'I')) ++end;  // accept KiB-style "Ki"
    if (ok && (end[1] == 'b' || end[1] == 'B')) ++end;
    ok = ok && end[1] == '\0' && v <= (~0ULL >> shift);
    v <<= shift;
  }
  if (!ok || v < lo || v > hi)
    fail(priocclInvalidArgument, name, "='", text, "' is not a size between ", lo, " and ", hi,
         " (a number with an optional K, M or G suffix)");
  return v;
}

bool parseBool(const char* name, const char* text) {
  if (!std::strcmp(text, "1") || !strcasecmp(text, "true") || !strcasecmp(text, "yes")) return true;
  if (!std::strcmp(text, "0") || !strcasecmp(text, "false") || !strcasecmp(text, "no"))
    return false;
  fail(priocclInvalidArgument, name, "='", text, "' is not a boolean (1/0, true/false, yes/no)");
}

template <typename T>
void readSize(const char* name, T& field, unsigned long long lo, unsigned long long hi) {
  if (const char* v = std::getenv(name); v && *v)
    field = static_cast<T>(parseSize(name, v, lo, hi));
}

// Non-negative seconds, decimals allowed ("300", "2.5"); 0 turns the feature off.
void readSeconds(const char* name, double& field) {
  const char* v = std::getenv(name);
  if (!v || !*v) return;
  errno = 0;
  char* end = nullptr;
  double s = std::strtod(v, &end);
  if (end == v || *end || errno != 0 || !(s >= 0) || s > 1e9)
    fail(priocclInvalidArgument, name, "='", v,
         "' is not a number of seconds between 0 (off) and 1e9");
  field = s;
}

// One of a few names (case-insensitive); anything else is an error listing them.
template <typename T>
void readChoice(const char* name, T& field,
                std::initializer_list<std::pair<const char*, T>> choices) {
  const char* v = std::getenv(name);
  if (!v || !*v) return;
  std::string names;
  for (const auto& [text, value] : choices) {
    if (!strcasecmp(v, text)) {
      field = value;
      return;
    }
    names += concat(names.empty() ? "" : " or ", "'", text, "'");
  }
  fail(priocclInvalidArgument, name, "='", v, "' is not ", names);
}

// As readSize, but "auto" (or "0") selects the measured default.
template <typename T>
void readSizeOrAuto(const char* name, T& field, unsigned long long lo, unsigned long long hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return;
  if (!strcasecmp(v, "auto") || !std::strcmp(v, "0"))
    field = 0;
  else
    field = static_cast<T>(parseSize(name, v, lo, hi));
}

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
      below = parseSize(name, term.substr(lt + 1).c_str(), 1, ~0ULL >> 1);
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

priocclAlgorithm_t parseAlgorithm(const std::string& name) {
  for (int a = priocclAlgoAuto; a < priocclNumAlgos; ++a)
    if (!strcasecmp(name.c_str(), algorithmName(static_cast<priocclAlgorithm_t>(a))))
      return static_cast<priocclAlgorithm_t>(a);
  if (!strcasecmp(name.c_str(), "recursive_doubling")) return priocclAlgoRecursiveDoubling;
  if (!strcasecmp(name.c_str(), "halving_doubling")) return priocclAlgoHalvingDoubling;
  return priocclNumAlgos;
}

const char* algorithmName(priocclAlgorithm_t a) {
  switch (a) {
    case priocclAlgoAuto:
      return "auto";
    case priocclAlgoRing:
      return "ring";
    case priocclAlgoTree:
      return "tree";
    case priocclAlgoRecursiveDoubling:
      return "rd";
    case priocclAlgoHalvingDoubling:
      return "hd";
    default:
      return "invalid";
  }
}

Config Config::fromEnv() {
  Config c;
  readSizeOrAuto("PRIOCCL_CHUNK_BYTES", c.chunkBytes, 1, 1ULL << 30);
  readSizeOrAuto("PRIOCCL_CREDIT_BYTES", c.creditBytes, 1, 1ULL << 40);
  readSize("PRIOCCL_WINDOW_CHUNKS", c.windowChunks, 1, 1ULL << 20);
  if (const char* v = std::getenv("PRIOCCL_MPI_THREAD_CHECK"); v && *v)
    c.requireThreadMultiple = parseBool("PRIOCCL_MPI_THREAD_CHECK", v);
  readChoice("PRIOCCL_SCHEDULE", c.schedule,
             {{"priority", priocclSchedulePriority}, {"fifo", priocclScheduleFifo}});
  if (const char* v = std::getenv("PRIOCCL_CALIBRATE"); v && *v)
    c.calibrate = parseBool("PRIOCCL_CALIBRATE", v);
  if (const char* v = std::getenv("PRIOCCL_ALGO"); v && std::strpbrk(v, "<,")) {
    parseAlgorithmRules("PRIOCCL_ALGO", v);  // validates now: a bad value fails here, named
    c.algorithmRules = v;
  } else if (v && *v) {
    c.algorithm = parseAlgorithm(v);
    if (c.algorithm == priocclNumAlgos)
      fail(priocclInvalidArgument, "PRIOCCL_ALGO='", v,
           "' is not 'auto', 'ring', 'tree', 'rd' or 'hd'");
  }
  readChoice("PRIOCCL_TRANSPORT", c.transport,
             {{"mpi", priocclTransportMpi}, {"ucx", priocclTransportUcx}});
  if (const char* v = std::getenv("PRIOCCL_TIMELINE")) c.timelinePath = v;
  readSeconds("PRIOCCL_TIMEOUT_S", c.timeoutSeconds);
  readSeconds("PRIOCCL_STALL_WARN_S", c.stallWarnSeconds);
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
  return concat("chunkBytes=", chunkBytes, " creditBytes=", creditBytes,
                " windowChunks=", windowChunks, " requireThreadMultiple=", requireThreadMultiple,
                " schedule=", schedule == priocclScheduleFifo ? "fifo" : "priority", " algorithm=",
                algorithmRules.empty() ? std::string(algorithmName(algorithm)) : algorithmRules,
                " calibrate=", calibrate,
                " transport=", transport == priocclTransportUcx ? "ucx" : "mpi",
                " timeline=", timelinePath.empty() ? "off" : timelinePath,
                " timeoutSeconds=", timeoutSeconds, " stallWarnSeconds=", stallWarnSeconds,
                " link=", linkBytesPerSecond / 1e9, "GB/s,", linkLatencySeconds * 1e6, "us");
}

}  // namespace prioccl
