// Control messages between engines: at most kControlBytes, with a validated header. Everything read
// off the wire is checked (magic, version, kind, entry count) before use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace prioccl::detail {

constexpr size_t kControlBytes = 4096;
constexpr uint32_t kControlMagic = 0x50434331;  // "PCC1"
// 4: Announce carries the op's kind and root; 5: the v-collectives' layout digest and pairing sums;
// 6: joins (Decision::filled, the shape digest in Announce::layout), launch lists; 7: announcements
// and decisions by response-cache slot (response_cache.h).
constexpr uint16_t kControlVersion = 7;

// Announce/Decision carry op identities (negotiator.h); the others keep failures loud (liveness.h):
// a heartbeat says "alive", a goodbye "my communicator is destroyed, do not wait for me", an
// abort "my communicator failed, and why".
enum class ControlKind : uint16_t {
  kAnnounce = 1,
  kDecision = 2,
  kHeartbeat = 3,
  kGoodbye = 4,
  kAbort = 5,
  kLaunch = 6,  // the coordinator's launch order for a collective backend (collective_runner.h)
  // Announce and Decision of an op whose signature has a response-cache slot (response_cache.h).
  kAnnounceCached = 7,
  kDecisionCached = 8
};

// What a rank says of one op it submitted.
struct Announce {
  uint64_t key = 0;         // hash of the op's key; unkeyed ops share one reserved key
  uint64_t occurrence = 0;  // how many earlier ops with this key this rank submitted
  uint64_t count = 0;
  int32_t dtype = 0;
  int32_t op = 0;     // the reduction op (0 for collectives without one)
  int32_t kind = 0;   // OpState::Kind: ranks must submit the same collective
  int32_t root = -1;  // the root of a rooted collective (broadcast), else -1
  // The v-collectives (per-rank counts). All-gather-v and reduce-scatter-v: a digest of the
  // per-rank counts, which every rank must have alike. The other kinds: a digest of the tensor
  // shape the caller gave (priocclShapeNext; 0 without one), which must be alike too.
  uint64_t layout = 0;
  // All-to-all-v: what rank i sends rank j must be what rank j expects from rank i, a condition
  // on pairs that no rank sees whole. Each rank adds what it sends and subtracts what it expects,
  // and the group's sums (mod 2^64) are combined as the announcements are: a digest of (i, j,
  // count) terms, 0 when every pair matches; and the count differences D(i, j), plain and weighted
  // by i * nranks + j, which name the pair when one pair differs. count is the largest block of
  // any rank (the group's maximum), so every rank cuts the op into the same chunks.
  uint64_t pairDigest = 0, pairCount = 0, pairWhere = 0;
};

// Announce::kind of an all-to-all-v and of a join (OpState::Kind's, checked there).
constexpr int32_t kAllToAllVWireKind = 11;
constexpr int32_t kJoinWireKind = 12;

// Announce::layout of per-rank counts (never 0), and one rank's all-to-all-v pairing terms: `rank`
// sends sendCounts[j] elements to rank j and expects recvCounts[j] from it.
uint64_t layoutDigest(const std::vector<size_t>& counts);
struct PairTerms {
  uint64_t digest = 0, count = 0, where = 0;
};
PairTerms pairTerms(int rank, const std::vector<size_t>& sendCounts,
                    const std::vector<size_t>& recvCounts);

// Whether two announcements describe the same op with the same arguments. An all-to-all-v's
// count and pairing sums differ from rank to rank and are combined instead (combineArguments).
bool sameArguments(const Announce& x, const Announce& y);

// Folds `next` into `group` (the announcements of a group of ranks so far) when they describe the
// same op: an all-to-all-v's count becomes the maximum and its pairing sums the sums. False, and
// `group` untouched, when they disagree.
bool combineArguments(Announce* group, const Announce& next);

// The coordinator's verdict on one op. On a mismatch, the two disagreeing announcements.
// `filled`: how many ranks took part without announcing it, because they had joined (priocclJoin);
// they run stand-ins with a.kind's arguments. A join's decision carries the last rank to join in
// a.root.
struct Decision {
  uint64_t key = 0;
  uint64_t occurrence = 0;
  uint32_t ok = 1;
  int32_t rankA = -1, rankB = -1;
  uint32_t filled = 0;
  Announce a{}, b{};
};

// An announcement or decision by response-cache slot: the slot's signature with this occurrence.
// A decision's rankA is the first rank to announce, as in a full Decision.
struct CachedEntry {
  uint32_t slot = 0;
  int32_t rankA = -1;
  uint64_t occurrence = 0;
};

// One launch of a collective backend: chunk `chunk` of the op decided `op`-th (its global
// sequence among decided ops), which every rank launches in the coordinator's order.
struct LaunchEntry {
  uint64_t op = 0;
  uint32_t chunk = 0;
  uint32_t chunks = 0;  // the op's launches in all (a check: every rank cuts it alike)
};

static_assert(sizeof(Announce) == 72 && sizeof(Decision) == 176 && sizeof(LaunchEntry) == 16 &&
                  sizeof(CachedEntry) == 16,
              "wire layout");

// A failure that ended a rank's communicator: the rank where it happened, its priocclResult_t and
// the message (at most kAbortTextBytes, cut if longer).
struct AbortNotice {
  int32_t origin = -1;
  int32_t code = 0;
  std::string text;
};
constexpr size_t kAbortTextBytes = kControlBytes - 16 - 8;

std::vector<unsigned char> encodeAnnounces(const Announce* entries, size_t n);
std::vector<unsigned char> encodeSignal(ControlKind kind);  // heartbeat or goodbye
std::vector<unsigned char> encodeAbort(const AbortNotice& notice);
std::vector<unsigned char> encodeDecisions(const Decision* entries, size_t n);
std::vector<unsigned char> encodeLaunches(const LaunchEntry* entries, size_t n);
// kind: kAnnounceCached or kDecisionCached.
std::vector<unsigned char> encodeCached(ControlKind kind, const CachedEntry* entries, size_t n);
constexpr size_t kAnnouncesPerMessage = (kControlBytes - 16) / sizeof(Announce);
constexpr size_t kDecisionsPerMessage = (kControlBytes - 16) / sizeof(Decision);
constexpr size_t kLaunchesPerMessage = (kControlBytes - 16) / sizeof(LaunchEntry);
constexpr size_t kCachedPerMessage = (kControlBytes - 16) / sizeof(CachedEntry);

// Decodes a control message; returns false with `error` set when it is not a valid one. An abort
// fills `abort`, a launch list `launches`, announcements or decisions by slot `cached` (each
// ignored when null).
bool decodeControl(const unsigned char* buf, size_t bytes, ControlKind* kind,
                   std::vector<Announce>* announces, std::vector<Decision>* decisions,
                   std::string* error, AbortNotice* abort = nullptr,
                   std::vector<LaunchEntry>* launches = nullptr,
                   std::vector<CachedEntry>* cached = nullptr);

}  // namespace prioccl::detail
