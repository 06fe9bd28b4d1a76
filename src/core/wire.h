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
constexpr uint16_t kControlVersion = 4;         // 4: Announce carries the op's kind and root

// Announce/Decision carry op identities (negotiator.h); the others keep failures loud (liveness.h):
// a heartbeat says "alive", a goodbye "my communicator is destroyed, do not wait for me", an
// abort "my communicator failed, and why".
enum class ControlKind : uint16_t {
  kAnnounce = 1,
  kDecision = 2,
  kHeartbeat = 3,
  kGoodbye = 4,
  kAbort = 5
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
};

// Whether two announcements describe the same op with the same arguments.
inline bool sameArguments(const Announce& x, const Announce& y) {
  return x.key == y.key && x.occurrence == y.occurrence && x.count == y.count &&
         x.dtype == y.dtype && x.op == y.op && x.kind == y.kind && x.root == y.root;
}

// The coordinator's verdict on one op. On a mismatch, the two disagreeing announcements.
struct Decision {
  uint64_t key = 0;
  uint64_t occurrence = 0;
  uint32_t ok = 1;
  int32_t rankA = -1, rankB = -1;
  uint32_t reserved = 0;  // keeps the layout free of padding
  Announce a{}, b{};
};

static_assert(sizeof(Announce) == 40 && sizeof(Decision) == 112, "wire layout");

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
constexpr size_t kAnnouncesPerMessage = (kControlBytes - 16) / sizeof(Announce);
constexpr size_t kDecisionsPerMessage = (kControlBytes - 16) / sizeof(Decision);

// Decodes a control message; returns false with `error` set when it is not a valid one. An abort
// fills `abort` (ignored when null).
bool decodeControl(const unsigned char* buf, size_t bytes, ControlKind* kind,
                   std::vector<Announce>* announces, std::vector<Decision>* decisions,
                   std::string* error, AbortNotice* abort = nullptr);

}  // namespace prioccl::detail
