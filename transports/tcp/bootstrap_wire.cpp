// The TCP bootstrap's messages and their checks (bootstrap_wire.h).
#include "tcp/bootstrap_wire.h"

#include <arpa/inet.h>

#include <cstring>

#include "common/error.h"

namespace prioccl {

using detail::concat;

namespace {

// The id's layout inside priocclUniqueId.
constexpr uint32_t kIdMagic = 0x50434944;  // "PCID"
struct IdLayout {
  uint32_t magic;
  uint16_t version, family;
  uint16_t port, pad;
  uint8_t addr[16];
  uint8_t token[kTokenBytes];
};
static_assert(sizeof(IdLayout) <= kUniqueIdBytes, "fits priocclUniqueId");

}  // namespace

BootstrapEntry entryOf(const sockaddr_storage& a, uint16_t port, uint64_t hostKey) {
  BootstrapEntry e;
  e.family = a.ss_family;
  e.port = port;
  if (a.ss_family == AF_INET6)
    std::memcpy(e.addr, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, 16);
  else
    std::memcpy(e.addr, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, 4);
  e.hostKey = hostKey;
  return e;
}

sockaddr_storage addressOf(const BootstrapEntry& e) {
  sockaddr_storage a{};
  if (e.family == AF_INET6) {
    auto& v6 = reinterpret_cast<sockaddr_in6&>(a);
    v6.sin6_family = AF_INET6;
    v6.sin6_port = htons(e.port);
    std::memcpy(&v6.sin6_addr, e.addr, 16);
  } else {
    auto& v4 = reinterpret_cast<sockaddr_in&>(a);
    v4.sin_family = AF_INET;
    v4.sin_port = htons(e.port);
    std::memcpy(&v4.sin_addr, e.addr, 4);
  }
  return a;
}

uint16_t portOf(const sockaddr_storage& a) {
  return ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(a).sin6_port
                                       : reinterpret_cast<const sockaddr_in&>(a).sin_port);
}

void encodeUniqueId(const UniqueIdFields& id, unsigned char out[kUniqueIdBytes]) {
  std::memset(out, 0, kUniqueIdBytes);
  IdLayout l{};
  l.magic = kIdMagic;
  l.version = kBootstrapVersion;
  BootstrapEntry e = entryOf(id.root, portOf(id.root), 0);
  l.family = e.family;
  l.port = e.port;
  std::memcpy(l.addr, e.addr, sizeof l.addr);
  std::memcpy(l.token, id.token, kTokenBytes);
  std::memcpy(out, &l, sizeof l);
}

bool decodeUniqueId(const unsigned char in[kUniqueIdBytes], UniqueIdFields* id,
                    std::string* error) {
  IdLayout l{};
  std::memcpy(&l, in, sizeof l);
  if (l.magic != kIdMagic || l.version != kBootstrapVersion) {
    *error = "not a unique id of this prioccl (made by priocclGetUniqueId and passed unchanged?)";
    return false;
  }
  if ((l.family != AF_INET && l.family != AF_INET6) || l.port == 0) {
    *error = concat("the id's address is not IPv4 or IPv6 with a port (family ", l.family,
                    ", port ", l.port, ")");
    return false;
  }
  BootstrapEntry e;
  e.family = l.family;
  e.port = l.port;
  std::memcpy(e.addr, l.addr, sizeof e.addr);
  id->root = addressOf(e);
  std::memcpy(id->token, l.token, kTokenBytes);
  return true;
}

Frame frameOf(FrameType type, const UniqueIdFields& id, int rank, int size, uint64_t bytes) {
  Frame f;
  f.type = static_cast<uint16_t>(type);
  f.rank = rank;
  f.size = size;
  f.bytes = bytes;
  std::memcpy(f.token, id.token, kTokenBytes);
  return f;
}

std::string frameProblem(const Frame& f, FrameType want, const UniqueIdFields& id, int size) {
  if (f.magic != kBootstrapMagic) return "not a prioccl bootstrap message (wrong magic)";
  if (f.version != kBootstrapVersion)
    return concat("bootstrap protocol version ", f.version, ", this rank speaks ",
                  kBootstrapVersion);
  if (std::memcmp(f.token, id.token, kTokenBytes) != 0)
    return "another job's token (a different unique id)";
  if (f.type == static_cast<uint16_t>(FrameType::kFailed) && want != FrameType::kFailed)
    return "";  // the caller reads the reason
  if (f.type != static_cast<uint16_t>(want))
    return concat("message type ", f.type, " where ", static_cast<int>(want), " was expected");
  if (f.size != size) return concat("a job of ", f.size, " ranks, this one has ", size);
  if (f.rank < 0 || f.rank >= size) return concat("rank ", f.rank, " is not in 0..", size - 1);
  if (f.bytes > kMaxPayload) return concat("a payload of ", f.bytes, " bytes (garbage)");
  return "";
}

std::string helloProblem(const unsigned char* bytes, const UniqueIdFields& id, int size,
                         const std::vector<bool>& taken, int* rank, BootstrapEntry* entry) {
  Frame f;
  std::memcpy(&f, bytes, sizeof f);
  std::string why = frameProblem(f, FrameType::kHello, id, size);
  if (why.empty() && f.type != static_cast<uint16_t>(FrameType::kHello))
    why = "a verdict where a hello was expected";
  if (why.empty() && f.bytes != sizeof(BootstrapEntry)) why = "a hello of the wrong length";
  if (why.empty() && f.rank == 0) why = "a second rank 0";
  if (why.empty() && taken[static_cast<size_t>(f.rank)])
    why = concat("rank ", f.rank, " arrived twice");
  if (!why.empty()) return why;
  *rank = f.rank;
  std::memcpy(entry, bytes + sizeof f, sizeof *entry);
  return "";
}

bool parseGathered(const std::vector<char>& all, size_t size,
                   std::vector<std::vector<char>>* parts) {
  if (all.size() < size * sizeof(uint64_t)) return false;
  parts->assign(size, {});
  size_t offset = size * sizeof(uint64_t);
  for (size_t k = 0; k < size; ++k) {
    uint64_t n = 0;
    std::memcpy(&n, all.data() + k * sizeof n, sizeof n);
    if (n > all.size() - offset) return false;
    (*parts)[k].assign(all.data() + offset, all.data() + offset + n);
    offset += n;
  }
  return offset == all.size();
}

}  // namespace prioccl
