// The negotiation's response cache; see response_cache.h.
#include "core/response_cache.h"

namespace prioccl::detail {

bool ResponseCache::sameSignature(const Announce& x, const Announce& y) {
  Announce same = y;
  same.occurrence = x.occurrence;
  return sameArguments(x, same);
}

bool ResponseCache::cacheableKind(int32_t kind) {
  return kind != kAllToAllVWireKind && kind != kJoinWireKind;
}

bool ResponseCache::cacheable(const Decision& d) {
  return d.ok && d.filled == 0 && cacheableKind(d.a.kind);
}

uint32_t ResponseCache::find(const Announce& a) const {
  if (!cacheableKind(a.kind)) return kNone;
  auto [from, to] = byKey_.equal_range(a.key);
  for (auto it = from; it != to; ++it)
    if (sameSignature(slots_[it->second], a)) return it->second;
  return kNone;
}

void ResponseCache::learn(const Decision& d) {
  if (slots_.size() >= capacity_ || !cacheable(d) || find(d.a) != kNone) return;
  byKey_.emplace(d.a.key, static_cast<uint32_t>(slots_.size()));
  slots_.push_back(d.a);
}

bool ResponseCache::announce(uint32_t slot, uint64_t occurrence, Announce* out) const {
  if (slot >= slots_.size()) return false;
  *out = slots_[slot];
  out->occurrence = occurrence;
  return true;
}

}  // namespace prioccl::detail
