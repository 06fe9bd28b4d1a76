// libFuzzer target over the TCP bootstrap's messages (transports/tcp/bootstrap_wire.h): what
// rank 0 reads from a connection that says it is a rank (helloProblem), what a rank reads as
// rank 0's answer to an allGather (parseGathered), and a unique id's bytes (decodeUniqueId).
// Input: one configuration byte (the job's size 1-8, whether the ranks that arrived so far are
// odd or even ones), then the bytes. A crash, a sanitizer report or a broken invariant is a
// finding: a hello taken must name a free rank in 1..size-1 and carry this job's token; an
// answer taken must account for every byte; an id taken must re-encode to the same bytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tcp/bootstrap_wire.h"

namespace {

using namespace prioccl;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_bootstrap: %s\n", what.c_str());
  std::abort();
}

UniqueIdFields jobId() {
  UniqueIdFields id;
  auto& v4 = reinterpret_cast<sockaddr_in&>(id.root);
  v4.sin_family = AF_INET;
  v4.sin_port = htons(29500);
  v4.sin_addr.s_addr = htonl(0xC6120001);  // 198.18.0.1
  for (size_t i = 0; i < kTokenBytes; ++i) id.token[i] = static_cast<uint8_t>(0xA0 + i);
  return id;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int ranks = 1 + (data[0] & 7);
  std::vector<bool> taken(static_cast<size_t>(ranks));
  taken[0] = true;
  for (int r = 1; r < ranks; ++r) taken[static_cast<size_t>(r)] = ((data[0] >> 3) & 1) == (r & 1);
  ++data;
  --size;
  const UniqueIdFields id = jobId();

  // A hello: the fuzzer's bytes; or, for shorter inputs, this job's frame (magic, version, type,
  // token) with the fuzzer's rank, size, length and entry, so that the checks past the token are
  // reached too.
  unsigned char hello[kHelloBytes] = {};
  if (size >= kHelloBytes) {
    std::memcpy(hello, data, kHelloBytes);
  } else {
    Frame f = frameOf(FrameType::kHello, id, 1, ranks, sizeof(BootstrapEntry));
    std::memcpy(hello, &f, sizeof f);
    const size_t head = std::min<size_t>(size, 16);  // rank, size, bytes
    std::memcpy(hello + 8, data, head);
    std::memcpy(hello + sizeof f, data + head, std::min(size - head, sizeof(BootstrapEntry)));
  }
  int rank = -1;
  BootstrapEntry entry;
  std::string why = helloProblem(hello, id, ranks, taken, &rank, &entry);
  if (why.empty()) {
    Frame f;
    std::memcpy(&f, hello, sizeof f);
    if (rank < 1 || rank >= ranks || taken[static_cast<size_t>(rank)])
      finding("a hello taken for rank " + std::to_string(rank) + " of " + std::to_string(ranks));
    if (std::memcmp(f.token, id.token, kTokenBytes) != 0) finding("a hello of another job taken");
  }

  // Rank 0's answer to an allGather.
  std::vector<char> all(reinterpret_cast<const char*>(data),
                        reinterpret_cast<const char*>(data) + size);
  std::vector<std::vector<char>> parts;
  if (parseGathered(all, static_cast<size_t>(ranks), &parts)) {
    size_t total = static_cast<size_t>(ranks) * sizeof(uint64_t);
    for (const auto& p : parts) total += p.size();
    if (parts.size() != static_cast<size_t>(ranks) || total != all.size())
      finding("an allGather answer taken whose parts do not add up to its bytes");
  }

  // A unique id.
  unsigned char bytes[kUniqueIdBytes] = {};
  std::memcpy(bytes, data, std::min(size, kUniqueIdBytes));
  UniqueIdFields back;
  std::string error;
  if (decodeUniqueId(bytes, &back, &error)) {
    unsigned char again[kUniqueIdBytes];
    encodeUniqueId(back, again);
    UniqueIdFields twice;
    if (!decodeUniqueId(again, &twice, &error) ||
        std::memcmp(twice.token, back.token, kTokenBytes) != 0 ||
        portOf(twice.root) != portOf(back.root))
      finding("a unique id that does not survive re-encoding");
  }
  return 0;
}
