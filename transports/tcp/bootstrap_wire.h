// The TCP bootstrap's messages (tcp_bootstrap.h): the unique id's bytes, the frame every message
// starts with, and what a receiver checks before it trusts one. Pure functions over bytes, so
// that the fuzzer (tests/fuzz/fuzz_bootstrap.cpp) drives the same checks the bootstrap runs.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace prioccl {

// What a unique id (priocclUniqueId, kUniqueIdBytes opaque bytes) carries: where rank 0 listens
// and the job's token, which every connection must present.
constexpr size_t kUniqueIdBytes = 128;
constexpr size_t kTokenBytes = 16;
struct UniqueIdFields {
  sockaddr_storage root{};
  uint8_t token[kTokenBytes] = {};
};
void encodeUniqueId(const UniqueIdFields& id, unsigned char out[kUniqueIdBytes]);
// False, with `error` set, unless the bytes are an id this build wrote.
bool decodeUniqueId(const unsigned char in[kUniqueIdBytes], UniqueIdFields* id, std::string* error);

// One rank's entry in the table rank 0 hands out: where its listener is, and its host key.
struct BootstrapEntry {
  uint16_t family = 0, port = 0;
  uint8_t addr[16] = {};
  uint64_t hostKey = 0;
};
static_assert(sizeof(BootstrapEntry) == 32, "wire layout");
BootstrapEntry entryOf(const sockaddr_storage& a, uint16_t port, uint64_t hostKey);
sockaddr_storage addressOf(const BootstrapEntry& e);
uint16_t portOf(const sockaddr_storage& a);

constexpr uint32_t kBootstrapMagic = 0x50434242;  // "PCBB"
constexpr uint16_t kBootstrapVersion = 1;
// The largest payload a frame may announce: the bootstrap carries addresses and settings, so
// anything larger is garbage (a stray client), not a message to allocate for.
constexpr uint64_t kMaxPayload = 64ull << 20;

enum class FrameType : uint16_t {
  kHello = 1,      // a rank to rank 0: its BootstrapEntry
  kTable = 2,      // rank 0 to every rank: every BootstrapEntry
  kGather = 3,     // a rank's part of an allGather
  kGathered = 4,   // rank 0's answer: lengths, then the parts
  kFailed = 5,     // rank 0: the job cannot start (text)
  kPeer = 6,       // the dialer of a direct connection says who it is
  kData = 7,       // a send/recv message
  kShrink = 8,     // a survivor to the shrunk group's first rank, and its answer: that group's port
  kLive = 9,       // shrinkToLive: a survivor asks a lower rank to lead
  kLiveGroup = 10  // the leader's answer: the new group's port and its members
};

struct Frame {
  uint32_t magic = kBootstrapMagic;
  uint16_t version = kBootstrapVersion;
  uint16_t type = 0;
  int32_t rank = -1, size = 0;
  uint64_t bytes = 0;
  uint8_t token[kTokenBytes] = {};
};
static_assert(sizeof(Frame) == 40, "wire layout");

Frame frameOf(FrameType type, const UniqueIdFields& id, int rank, int size, uint64_t bytes);

// Why `f` is not a frame of `want` for this job of `size` ranks ("" when it is; also "" for a
// kFailed frame, whose text the caller reads).
std::string frameProblem(const Frame& f, FrameType want, const UniqueIdFields& id, int size);

// A hello as rank 0 receives it: exactly sizeof(Frame) + sizeof(BootstrapEntry) bytes. "" and
// the rank and its entry when it may join (`taken[r]`: rank r has arrived already), else why not.
constexpr size_t kHelloBytes = sizeof(Frame) + sizeof(BootstrapEntry);
std::string helloProblem(const unsigned char* bytes, const UniqueIdFields& id, int size,
                         const std::vector<bool>& taken, int* rank, BootstrapEntry* entry);

// Rank 0's answer to an allGather of `size` ranks (lengths, then the parts) into `parts`; false
// when the lengths do not add up to the bytes.
bool parseGathered(const std::vector<char>& all, size_t size,
                   std::vector<std::vector<char>>* parts);

}  // namespace prioccl
