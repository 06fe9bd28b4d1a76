// libFuzzer target over control messages. Input: one configuration byte (rank count, roles), then
// the message. It goes to decodeControl and to Negotiators as the engine delivers it: to the
// coordinator from each of its peers, and to another rank from the coordinator. Bad input must
// end in prioccl::Error; any other exception, a crash or a sanitizer report is a finding, and so
// is a message that decodes but does not survive re-encoding, or a coordinator whose own output
// another rank cannot take. Launch lists (a collective backend's order) also go to a collective
// runner that holds a few decided ops: it must launch them or reject the list with an Error.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/wire.h"
#include "core/collective_runner.h"
#include "core/negotiator.h"
#include "prioccl/prioccl.hpp"

namespace {

using namespace prioccl::detail;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_control: %s\n", what.c_str());
  std::abort();
}

template <class T>
bool sameEntries(const std::vector<T>& x, const std::vector<T>& y) {
  // The wire structs have no padding, so bytes compare them exactly.
  return x.size() == y.size() &&
         (x.empty() || !std::memcmp(x.data(), y.data(), x.size() * sizeof(T)));
}

struct Decoded {
  bool ok = false;
  ControlKind kind{};
  std::vector<Announce> announces;
  std::vector<Decision> decisions;
  std::vector<LaunchEntry> launches;
  std::vector<CachedEntry> cached;
  AbortNotice abort;
  std::string error;
};

// Every negotiator here has a small response cache, so that signatures decided twice in one
// message go out by slot, and slots that were never assigned arrive.
constexpr size_t kCache = 4;

Decoded decode(const unsigned char* buf, size_t bytes) {
  Decoded d;
  d.ok = decodeControl(buf, bytes, &d.kind, &d.announces, &d.decisions, &d.error, &d.abort,
                       &d.launches, &d.cached);
  if (!d.ok && d.error.empty()) finding("rejected without a reason");
  return d;
}

std::vector<unsigned char> encode(const Decoded& d) {
  switch (d.kind) {
    case ControlKind::kAnnounce:
      return encodeAnnounces(d.announces.data(), d.announces.size());
    case ControlKind::kDecision:
      return encodeDecisions(d.decisions.data(), d.decisions.size());
    case ControlKind::kAbort:
      return encodeAbort(d.abort);
    case ControlKind::kLaunch:
      return encodeLaunches(d.launches.data(), d.launches.size());
    case ControlKind::kAnnounceCached:
    case ControlKind::kDecisionCached:
      return encodeCached(d.kind, d.cached.data(), d.cached.size());
    default:
      return encodeSignal(d.kind);
  }
}

// A message is exactly as long as its entries, and re-encoding gives back the same entries.
void roundTrip(const Decoded& d, size_t bytes) {
  std::vector<unsigned char> again = encode(d);
  if (again.size() != bytes) finding("decoded message re-encodes to a different length");
  Decoded e = decode(again.data(), again.size());
  if (!e.ok) finding("re-encoded message does not decode: " + e.error);
  if (e.kind != d.kind || !sameEntries(e.announces, d.announces) ||
      !sameEntries(e.decisions, d.decisions) || !sameEntries(e.launches, d.launches) ||
      !sameEntries(e.cached, d.cached) || e.abort.origin != d.abort.origin ||
      e.abort.code != d.abort.code || e.abort.text != d.abort.text)
    finding("re-encoded message decodes to different entries");
}

// Another rank receives everything the coordinator sends it and must decide alike.
void relay(Negotiator& coordinator, int nranks) {
  std::vector<Decision> decided = coordinator.takeDecisions();
  Negotiator follower(1, nranks, kCache);
  for (const Negotiator::Outgoing& out : coordinator.takeOutgoing()) {
    if (out.bytes.size() > kControlBytes) finding("coordinator sent an oversized message");
    if (out.peer != 1) continue;
    try {
      follower.onMessage(Negotiator::kCoordinator, out.bytes.data(), out.bytes.size());
    } catch (const prioccl::Error& e) {
      finding(std::string("a rank rejects the coordinator's message: ") + e.what());
    }
  }
  if (!sameEntries(follower.takeDecisions(), decided))
    finding("a rank's decisions differ from the coordinator's");
}

// The coordinator, having submitted the same ops itself (or slightly different ones, so that
// mismatches are decided too), receives the message from every peer.
void coordinator(int nranks, bool differ, const unsigned char* msg, size_t bytes,
                 const Decoded& d) {
  Negotiator neg(Negotiator::kCoordinator, nranks, kCache);
  if (d.ok && d.kind == ControlKind::kAnnounce) {
    try {
      for (Announce a : d.announces) {
        if (differ) a.count ^= 1;
        neg.submit(a);
      }
    } catch (const prioccl::Error&) {
      // One op twice in the message, which the engine never submits twice: stop there.
    }
  }
  // Every peer sends the same message, so after the first rejection the others add nothing (and
  // exceptions are slow).
  for (int from = 1; from < nranks; ++from) {
    try {
      neg.onMessage(from, msg, bytes);
      if (!d.ok) finding("the coordinator accepted a message decodeControl rejects");
    } catch (const prioccl::Error&) {
      break;
    }
  }
  relay(neg, nranks);
}

void launches(const std::vector<LaunchEntry>& entries);  // below

// A rank other than the coordinator receives the message from the coordinator, twice unless
// rejected.
void follower(int nranks, int rank, const unsigned char* msg, size_t bytes, const Decoded& d) {
  Negotiator neg(rank, nranks, kCache);
  for (int i = 0; i < 2; ++i) {
    try {
      neg.onMessage(Negotiator::kCoordinator, msg, bytes);
      if (!d.ok) finding("a rank accepted a message decodeControl rejects");
    } catch (const prioccl::Error&) {
      break;
    }
  }
  neg.takeDecisions();
  neg.takeOutgoing();
  std::vector<LaunchEntry> entries = neg.takeLaunches();
  if (!entries.empty()) launches(entries);
}

// A backend that accepts every launch and completes each at once.
class NullBackend : public prioccl::CollBackend {
 public:
  const char* name() const override { return "null"; }
  int rank() const override { return 1; }
  int size() const override { return 3; }
  void launch(const prioccl::CollLaunch&, uint64_t cookie) override { cookies_.push_back(cookie); }
  size_t poll(std::vector<prioccl::Completion>& out) override {
    for (uint64_t c : cookies_) {
      prioccl::Completion done;
      done.cookie = c;
      out.push_back(done);
    }
    size_t n = cookies_.size();
    cookies_.clear();
    return n;
  }
  size_t pending() const override { return cookies_.size(); }
  void abandon() override { cookies_.clear(); }

 private:
  std::vector<uint64_t> cookies_;
};

struct Ignore : CollectiveRunner::Events {
  void opEnded(OpState&) override {}
};

// A rank that is not the coordinator follows the launch list with three decided ops (seq 0-2: a
// 3-launch all-reduce, a broadcast, a barrier); it launches entries in order or throws Error.
void launches(const std::vector<LaunchEntry>& entries) {
  NullBackend backend;
  prioccl::Config config;
  config.chunkBytes = 16;
  OpStats stats("", 1, 3, {});
  Ignore events;
  CollectiveRunner runner(backend, config, false, stats, events);
  std::vector<float> data(12), bcast(2);
  for (uint64_t seq = 0; seq < 3; ++seq) {
    auto op = std::make_shared<OpState>();
    op->globalSeq = seq;
    op->kind = seq == 0   ? OpState::Kind::kAllReduce
               : seq == 1 ? OpState::Kind::kBroadcast
                          : OpState::Kind::kBarrier;
    op->count = seq == 0 ? data.size() : seq == 1 ? bcast.size() : 0;
    op->send = op->recv = seq == 0 ? data.data() : bcast.data();
    op->root = seq == 1 ? 0 : -1;
    runner.add(op);
  }
  try {
    runner.follow(entries);
    for (int round = 0; round < 64 && !runner.empty(); ++round) {
      bool moved = runner.launch();
      moved |= runner.poll(CollectiveRunner::Clock::now());
      if (!moved) break;
    }
  } catch (const prioccl::Error&) {
  }
}

void writeFile(const std::string& path, uint8_t config, const std::vector<unsigned char>& msg) {
  if (FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fputc(config, f);
    std::fwrite(msg.data(), 1, msg.size(), f);
    std::fclose(f);
  }
}

// Seed inputs: a valid message of every kind, encoded by the library itself (so they follow the
// current wire version).
void writeSeeds(const std::string& dir) {
  std::vector<Announce> announces(5);
  for (size_t i = 0; i < announces.size(); ++i)
    announces[i] = {i % 2 ? 7u : 0u, i, 64 * i, 6, static_cast<int32_t>(i % 5)};
  std::vector<Decision> decisions(3);
  decisions[1].ok = 0;
  decisions[1].rankA = 0;
  decisions[1].rankB = 2;
  AbortNotice abort{3, 5, "rank 3 aborted"};
  writeFile(dir + "/announce", 2, encodeAnnounces(announces.data(), announces.size()));
  writeFile(
      dir + "/announce-full", 9,
      encodeAnnounces(std::vector<Announce>(kAnnouncesPerMessage).data(), kAnnouncesPerMessage));
  writeFile(dir + "/decision", 3, encodeDecisions(decisions.data(), decisions.size()));
  writeFile(dir + "/heartbeat", 1, encodeSignal(ControlKind::kHeartbeat));
  writeFile(dir + "/goodbye", 1, encodeSignal(ControlKind::kGoodbye));
  writeFile(dir + "/abort", 1, encodeAbort(abort));
  std::vector<LaunchEntry> plan = {{0, 0, 3}, {1, 0, 1}, {0, 1, 3}, {2, 0, 1}, {0, 2, 3}};
  writeFile(dir + "/launch", 1, encodeLaunches(plan.data(), plan.size()));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("PRIOCCL_FUZZ_SEEDS")) writeSeeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t config = data[0];
  const unsigned char* msg = data + 1;
  const size_t bytes = size - 1;
  const Decoded d = decode(msg, bytes);
  if (d.ok) roundTrip(d, bytes);
  // The rank count (2..5), whether the coordinator's own ops differ, and which rank is the
  // other one, from the configuration byte.
  const int nranks = 2 + (config & 3);
  coordinator(nranks, config & 4, msg, bytes, d);
  follower(nranks, 1 + (config >> 3) % (nranks - 1), msg, bytes, d);
  return 0;
}
