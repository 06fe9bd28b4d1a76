// Control message encoding: header {magic, version, kind, entries, reserved}, then entries; a
// message is exactly as long as its entries (small messages stay on MPI's eager path).
#include "common/wire.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace prioccl::detail {
namespace {

struct Header {
  uint32_t magic;
  uint16_t version;
  uint16_t kind;
  uint32_t entries;
  uint32_t reserved;
};
static_assert(sizeof(Header) == 16, "header layout");

template <typename T>
std::vector<unsigned char> encode(ControlKind kind, const T* entries, size_t n) {
  std::vector<unsigned char> buf(sizeof(Header) + n * sizeof(T), 0);
  Header h{kControlMagic, kControlVersion, static_cast<uint16_t>(kind), static_cast<uint32_t>(n),
           0};
  std::memcpy(buf.data(), &h, sizeof h);
  if (n > 0) std::memcpy(buf.data() + sizeof h, entries, n * sizeof(T));
  return buf;
}

}  // namespace

namespace {

// A 64-bit mixer (splitmix64's finaliser): every input bit changes about half the output bits.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The pair (from, to) as one number: the weight of its count difference in Announce::pairWhere.
uint64_t pairIndex(int from, int to) {
  return (static_cast<uint64_t>(from) << 32) | static_cast<uint32_t>(to);
}

// The digest's term for `count` elements from `from` to `to`.
uint64_t pairHash(int from, int to, size_t count) {
  return mix(mix(pairIndex(from, to) + 0x9e3779b97f4a7c15ULL) ^ count);
}

}  // namespace

uint64_t layoutDigest(const std::vector<size_t>& counts) {
  uint64_t h = mix(counts.size());
  for (size_t c : counts) h = mix(h ^ c) + 0x9e3779b97f4a7c15ULL;
  return h | 1;
}

// The sums over all ranks are the sums over pairs (i, j) of D(i, j) = what i sends - what j
// expects from i, each pair's terms added by i and subtracted by j.
PairTerms pairTerms(int rank, const std::vector<size_t>& sendCounts,
                    const std::vector<size_t>& recvCounts) {
  PairTerms t;
  for (size_t j = 0; j < sendCounts.size(); ++j) {
    int peer = static_cast<int>(j);
    t.digest += pairHash(rank, peer, sendCounts[j]) - pairHash(peer, rank, recvCounts[j]);
    t.count += sendCounts[j] - recvCounts[j];
    t.where += sendCounts[j] * pairIndex(rank, peer) - recvCounts[j] * pairIndex(peer, rank);
  }
  return t;
}

bool sameArguments(const Announce& x, const Announce& y) {
  bool pairs = x.kind == kAllToAllVWireKind;  // count and pairing sums are combined, not compared
  return x.key == y.key && x.occurrence == y.occurrence && (pairs || x.count == y.count) &&
         x.dtype == y.dtype && x.op == y.op && x.kind == y.kind && x.root == y.root &&
         x.layout == y.layout &&
         (pairs || (x.pairDigest == y.pairDigest && x.pairCount == y.pairCount &&
                    x.pairWhere == y.pairWhere));
}

bool combineArguments(Announce* group, const Announce& next) {
  if (!sameArguments(*group, next)) return false;
  if (group->kind == kAllToAllVWireKind) {
    group->count = std::max(group->count, next.count);
    group->pairDigest += next.pairDigest;  // unsigned: wraps mod 2^64 by definition
    group->pairCount += next.pairCount;
    group->pairWhere += next.pairWhere;
  }
  return true;
}

std::vector<unsigned char> encodeAnnounces(const Announce* entries, size_t n) {
  return encode(ControlKind::kAnnounce, entries, n);
}

std::vector<unsigned char> encodeDecisions(const Decision* entries, size_t n) {
  return encode(ControlKind::kDecision, entries, n);
}

std::vector<unsigned char> encodeLaunches(const LaunchEntry* entries, size_t n) {
  return encode(ControlKind::kLaunch, entries, n);
}

std::vector<unsigned char> encodeCached(ControlKind kind, const CachedEntry* entries, size_t n) {
  return encode(kind, entries, n);
}

std::vector<unsigned char> encodeSignal(ControlKind kind) {
  return encode(kind, static_cast<const unsigned char*>(nullptr), 0);
}

// Entries are the abort's bytes: {origin, code}, then the text (no terminator).
std::vector<unsigned char> encodeAbort(const AbortNotice& notice) {
  size_t textBytes = std::min(notice.text.size(), kAbortTextBytes);
  std::vector<unsigned char> body(8 + textBytes);
  std::memcpy(body.data(), &notice.origin, 4);
  std::memcpy(body.data() + 4, &notice.code, 4);
  std::memcpy(body.data() + 8, notice.text.data(), textBytes);
  return encode(ControlKind::kAbort, body.data(), body.size());
}

bool decodeControl(const unsigned char* buf, size_t bytes, ControlKind* kind,
                   std::vector<Announce>* announces, std::vector<Decision>* decisions,
                   std::string* error, AbortNotice* abort, std::vector<LaunchEntry>* launches,
                   std::vector<CachedEntry>* cached) {
  Header h;
  if (bytes < sizeof h || bytes > kControlBytes) {
    *error =
        concat("control message of ", bytes, " bytes, expected ", sizeof h, " to ", kControlBytes);
    return false;
  }
  std::memcpy(&h, buf, sizeof h);
  if (h.magic != kControlMagic || h.version != kControlVersion) {
    *error = concat("control message with magic ", h.magic, " version ", h.version,
                    " (a different prioccl version or a foreign message)");
    return false;
  }
  size_t room = bytes - sizeof h;
  if (h.kind == static_cast<uint16_t>(ControlKind::kAnnounce) &&
      h.entries == room / sizeof(Announce) && room % sizeof(Announce) == 0) {
    *kind = ControlKind::kAnnounce;
    announces->resize(h.entries);
    if (h.entries) std::memcpy(announces->data(), buf + sizeof h, h.entries * sizeof(Announce));
    return true;
  }
  if (h.kind == static_cast<uint16_t>(ControlKind::kDecision) &&
      h.entries == room / sizeof(Decision) && room % sizeof(Decision) == 0) {
    *kind = ControlKind::kDecision;
    decisions->resize(h.entries);
    if (h.entries) std::memcpy(decisions->data(), buf + sizeof h, h.entries * sizeof(Decision));
    return true;
  }
  if (h.kind == static_cast<uint16_t>(ControlKind::kLaunch) &&
      h.entries == room / sizeof(LaunchEntry) && room % sizeof(LaunchEntry) == 0) {
    *kind = ControlKind::kLaunch;
    if (launches) {
      launches->resize(h.entries);
      if (h.entries) std::memcpy(launches->data(), buf + sizeof h, h.entries * sizeof(LaunchEntry));
    }
    return true;
  }
  bool byslot = h.kind == static_cast<uint16_t>(ControlKind::kAnnounceCached) ||
                h.kind == static_cast<uint16_t>(ControlKind::kDecisionCached);
  if (byslot && h.entries == room / sizeof(CachedEntry) && room % sizeof(CachedEntry) == 0) {
    *kind = static_cast<ControlKind>(h.kind);
    if (cached) {
      cached->resize(h.entries);
      if (h.entries) std::memcpy(cached->data(), buf + sizeof h, h.entries * sizeof(CachedEntry));
    }
    return true;
  }
  bool signal = h.kind == static_cast<uint16_t>(ControlKind::kHeartbeat) ||
                h.kind == static_cast<uint16_t>(ControlKind::kGoodbye);
  if (signal && h.entries == 0 && room == 0) {
    *kind = static_cast<ControlKind>(h.kind);
    return true;
  }
  if (h.kind == static_cast<uint16_t>(ControlKind::kAbort) && h.entries == room && room >= 8) {
    *kind = ControlKind::kAbort;
    if (abort) {
      std::memcpy(&abort->origin, buf + sizeof h, 4);
      std::memcpy(&abort->code, buf + sizeof h + 4, 4);
      abort->text.assign(reinterpret_cast<const char*>(buf + sizeof h + 8), room - 8);
    }
    return true;
  }
  *error = concat("control message of kind ", h.kind, " with ", h.entries, " entries is invalid");
  return false;
}

}  // namespace prioccl::detail
