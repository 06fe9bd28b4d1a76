// Control message encoding: header {magic, version, kind, entries, reserved}, then entries; a
// message is exactly as long as its entries (small messages stay on MPI's eager path).
#include "core/wire.h"

#include <cstring>

#include "core/error.h"

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
  std::memcpy(buf.data() + sizeof h, entries, n * sizeof(T));
  return buf;
}

}  // namespace

std::vector<unsigned char> encodeAnnounces(const Announce* entries, size_t n) {
  return encode(ControlKind::kAnnounce, entries, n);
}

std::vector<unsigned char> encodeDecisions(const Decision* entries, size_t n) {
  return encode(ControlKind::kDecision, entries, n);
}

bool decodeControl(const unsigned char* buf, size_t bytes, ControlKind* kind,
                   std::vector<Announce>* announces, std::vector<Decision>* decisions,
                   std::string* error) {
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
    std::memcpy(announces->data(), buf + sizeof h, h.entries * sizeof(Announce));
    return true;
  }
  if (h.kind == static_cast<uint16_t>(ControlKind::kDecision) &&
      h.entries == room / sizeof(Decision) && room % sizeof(Decision) == 0) {
    *kind = ControlKind::kDecision;
    decisions->resize(h.entries);
    std::memcpy(decisions->data(), buf + sizeof h, h.entries * sizeof(Decision));
    return true;
  }
  *error = concat("control message of kind ", h.kind, " with ", h.entries, " entries is invalid");
  return false;
}

}  // namespace prioccl::detail
