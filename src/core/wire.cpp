// Control message encoding: header {magic, version, kind, entries, reserved}, then entries; a
// message is exactly as long as its entries (small messages stay on MPI's eager path).
#include "core/wire.h"

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

std::vector<unsigned char> encodeAnnounces(const Announce* entries, size_t n) {
  return encode(ControlKind::kAnnounce, entries, n);
}

std::vector<unsigned char> encodeDecisions(const Decision* entries, size_t n) {
  return encode(ControlKind::kDecision, entries, n);
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
                   std::string* error, AbortNotice* abort) {
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
