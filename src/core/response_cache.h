// The negotiation's response cache (Horovod's response cache, in the coordinator protocol of
// negotiator.h): an op signature the coordinator has decided once (key, kind, count, dtype, op,
// root, layout) gets a slot number on every rank; later occurrences of it are announced and
// decided by slot number (16 bytes) instead of in full (72-byte announcements, 176-byte
// decisions), which is what rank 0 handles per op per rank.
//
// Every rank fills its cache from the decisions, in the one global order they are made and
// received, so slot numbers agree without a message of their own. A slot never changes meaning
// (no eviction: a signature learnt stays until the communicator ends; past `capacity` nothing new
// is learnt), so an announcement by slot can never be read with another signature than the one
// its sender meant, however late it arrives. A rank whose op differs from every slot announces it
// in full, and the coordinator compares it as before: every mismatch error is unchanged.
//
// Pure bookkeeping, like the negotiator that owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "common/wire.h"

namespace prioccl::detail {

class ResponseCache {
 public:
  explicit ResponseCache(size_t capacity) : capacity_(capacity) {}

  static constexpr uint32_t kNone = UINT32_MAX;
  // The slot of `a`'s signature (its occurrence aside), or kNone.
  uint32_t find(const Announce& a) const;
  // A decision in global order: an agreed op of a cacheable kind that no slot holds gets the next
  // slot while there is room. The same call on every rank, in the same order.
  void learn(const Decision& d);
  // Slot `slot`'s signature with `occurrence`; false when no such slot exists (a corrupt or
  // foreign message).
  bool announce(uint32_t slot, uint64_t occurrence, Announce* out) const;
  size_t size() const { return slots_.size(); }

  // Ops whose announcements are not their own (an all-to-all-v's are combined from every rank's)
  // or that carry no op (a join), and decisions that filled in joined ranks, stay in full.
  static bool cacheable(const Decision& d);

 private:
  static bool cacheableKind(int32_t kind);
  static bool sameSignature(const Announce& x, const Announce& y);
  size_t capacity_;
  std::vector<Announce> slots_;
  std::unordered_multimap<uint64_t, uint32_t> byKey_;  // key -> slots with that key
};

}  // namespace prioccl::detail
