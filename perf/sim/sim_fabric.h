// The simulated network under prioccl's own engines (perf/sim): a discrete-event fabric of
// per-rank NICs, and SimTransport, the Transport (transports/transport.h) each engine is given.
//
// Time is virtual, in nanoseconds, and moves only from event to event; the engines read it
// through EngineClock (common/engine_clock.h), which the fabric points at its clock. Everything
// runs on one thread and in one order (events by time, then by when they were made), so a run
// is repeatable to the nanosecond.
//
// The model, per message of n bytes from rank a to rank b posted at a's time t:
//   - a's CPU: each post, and each completion a's engine takes, costs `cpuPerMessage` of a's
//     time (the rank's clock moves on by that much within its round of progress); optionally
//     (copyBytesPerSecond, intraCopyBytesPerSecond between ranks of one host) a's post and b's
//     completion also cost n bytes' copy, a network stack's, and (reduceBytesPerSecond) each
//     rank's reductions their output bytes' time;
//   - optionally every rank shares a few cores (sharedCores, one machine running them all as the
//     testbed does): a rank's round of progress takes the core free soonest, and waits for it;
//   - a's NIC sends one message at a time, in post order: it leaves at max(t, a's NIC free) and
//     takes n / (rate * wireEfficiency); the last byte reaches b `latency` later;
//   - b's NIC takes one message at a time too (incast: two senders share its rate);
//   - optionally (hostsPerLeaf) a message between leaf switches also crosses a's leaf's uplink
//     and b's leaf's downlink, each at its oversubscribed rate, one message at a time;
//   - the bytes go eagerly (no rendezvous): a message whose receive is not posted waits at b, as
//     MPI's and UCX's unexpected messages do, and completes when the receive comes;
//   - a send completes as the transport promises (SendCompletion): a buffered one when its last
//     byte has left a's NIC, an end-to-end one when b has matched it plus `latency` (the
//     acknowledgement's way back).
// Hosts (ranksPerHost > 1) share one NIC, and their ranks copy to each other through memory.
// Without payload (FabricSpec::payload) the same run costs a fraction of the memory and time.
// Not modelled (yet): rendezvous for large messages, rail-optimised cores, the engines' own copies
// (staging, out-of-place), a kernel's work at arrival.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <queue>
#include <utility>
#include <vector>

#include "common/engine_clock.h"
#include "reduce/reduce.h"
#include "transport.h"

namespace prioccl::sim {

struct FabricSpec {
  double bitsPerSecond = 10e9;  // each NIC, each direction
  double latencySeconds = 5e-6;
  double cpuPerMessageSeconds = 1e-6;
  // The payload's share of the bits a NIC sends: headers take the rest. 1448 / 1514 for TCP over
  // Ethernet with a 1500-byte MTU as a shaper counts it (the testbed's tbf); 1 for none.
  double wireEfficiency = 1.0;
  // Consecutive ranks share a host, this many to one: they share its NIC (each direction), and
  // their messages to each other go through its memory instead, at intraBitsPerSecond (each
  // sender's copies one at a time) after intraLatencySeconds.
  int ranksPerHost = 1;
  double intraBitsPerSecond = 100e9;
  double intraLatencySeconds = 1e-6;
  // false: a message longer than a control message (kControlBytes) carries only its head (the
  // algorithms' headers), and the reductions are skipped (reduce::tapArithmetic), so the ranks'
  // buffers may be one shared buffer of garbage. Every time is the same as with payload: the
  // model's per-byte costs count the bytes a message or a reduction covers, not what it
  // carries (reduce::ArithmeticTap counts skipped reductions too). For rank counts whose data
  // would not fit.
  bool payload = true;
  // CPU per byte; 0: free. copy: what a rank spends on each byte it sends to another host (at
  // the post) and receives from one (at the completion), a TCP stack's copies. reduce: a core's
  // rate through the reductions, in bytes of output (reduce::apply's, counted by its tap).
  double copyBytesPerSecond = 0;
  double reduceBytesPerSecond = 0;
  // The same as copy for messages between ranks of one host (TCP over loopback, or shared
  // memory's copies in and out); 0: free, the copy then costs only its time at intraBitsPerSecond.
  double intraCopyBytesPerSecond = 0;
  // Every rank's CPU work runs on this many cores, one round of progress at a time each (one
  // machine running every rank, as the testbed does); 0: each rank has a core of its own.
  int sharedCores = 0;
  // A two-level fat tree: hosts in groups of hostsPerLeaf under a leaf switch, whose uplink to
  // the core (and downlink from it) carries hostsPerLeaf NICs' rate / oversubscription. A
  // message between leaves crosses both in turn, each one message at a time. 0: one switch,
  // full bisection.
  int hostsPerLeaf = 0;
  double oversubscription = 1;
};

class SimFabric {
 public:
  using TimePoint = detail::EngineClock::time_point;

  SimFabric(int ranks, const FabricSpec& spec);
  ~SimFabric();  // gives the engines' clock back to real time
  SimFabric(const SimFabric&) = delete;
  SimFabric& operator=(const SimFabric&) = delete;

  int ranks() const { return static_cast<int>(ranks_.size()); }
  int hostOf(int r) const { return r / spec_.ranksPerHost; }
  const FabricSpec& spec() const { return spec_; }
  int64_t now() const { return now_; }  // the event being handled, ns

  // Rank r's round of progress starts: its clock reads the later of now() and the end of what it
  // did before (its CPU was busy until then). Returns that time.
  int64_t beginRound(int r);
  // ... and ends: returns the rank's clock, which its CPU's work in the round moved on.
  int64_t endRound(int r);
  // Rank r's clock, while its round runs.
  int64_t rankTime(int r) const { return ranks_[r].clock; }

  // The transport's calls (SimTransport forwards them), at rank `me`'s clock.
  void send(int me, int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t cookie,
            SendCompletion completion);
  void recv(int me, int peer, uint64_t tag, void* buf, size_t bytes, uint64_t cookie);
  size_t poll(int me, std::vector<Completion>& out);
  size_t pending(int me) const { return ranks_[me].pending; }
  // Forgets every transfer `me` posted (a failed engine's cancelAll): none of them completes.
  void cancelAll(int me);

  // Events. Each that concerns a rank makes it due for a round (takeDue).
  // A round for r no later than t (a timer, a submission): r's rounds ask again for what they
  // still need.
  void wakeAt(int r, int64_t t);
  bool empty() const { return events_.empty(); }
  int64_t nextTime() const { return events_.top().time; }
  // Handles every event at the earliest time, which becomes now(); appends the ranks due.
  void advance(std::vector<int>& due);

  // Totals, for the report.
  uint64_t messages() const { return messages_; }
  uint64_t messagesOf(int r) const { return ranks_[r].messages; }  // sent and received
  uint64_t bytes() const { return bytes_; }                        // each message's once
  uint64_t bytesOf(int r) const { return ranks_[r].bytes; }        // sent and received
  // The CPU time every rank's rounds took, summed: what the model charged (per message, copies,
  // reductions), to set against a testbed's measured busy time.
  double cpuSeconds() const { return static_cast<double>(roundsCpuNs_) * 1e-9; }

 private:
  struct Message {
    int src, dst;
    uint64_t tag;
    size_t bytes;
    std::vector<unsigned char> data;  // copied at the post (a buffered send's buffer is free):
                                      // all `bytes`, or their head without payload
    uint64_t sendCookie;
    uint64_t sendEpoch;
    SendCompletion completion;
  };
  struct PostedRecv {
    void* buf;
    size_t bytes;
    uint64_t cookie;
  };
  enum class EventKind : uint8_t { kArrive, kSendDone, kWake };
  struct Event {
    int64_t time;
    uint64_t seq;
    EventKind kind;
    int rank;
    uint64_t cookie;                   // kSendDone
    uint64_t epoch;                    // kSendDone: the rank's epoch when posted
    std::shared_ptr<Message> message;  // kArrive
    bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
  };
  struct Rank {
    int64_t clock = 0;              // during a round: the rank's time; after: when its CPU is free
    int core = -1;                  // during a round on a shared core: which
    int64_t roundStart = 0;         // during a round: when its CPU work began
    int64_t memoryOut = 0;          // when its copies to ranks of its host are done
    int64_t wakeAt = -1;            // the kWake queued (-1: none; older ones are stale)
    size_t pending = 0;             // posted, not yet polled
    double copyInNs = 0;            // the copies of what landed, not yet polled (charged then)
    uint64_t epoch = 0;             // cancelAll's count: older sends' completions are dropped
    std::vector<Completion> ready;  // completions the engine has not polled
    std::map<std::pair<int, uint64_t>, std::deque<PostedRecv>> posted;  // (peer, tag)
    std::map<std::pair<int, uint64_t>, std::deque<std::shared_ptr<Message>>> unexpected;
    uint64_t messages = 0;  // sent and received
    uint64_t bytes = 0;     // sent and received
  };

  // What a byte between ranks a and b costs each end's CPU in copies (ns): the intra-host rate
  // within a host, else the network stack's.
  double copyNsPerByte(int a, int b) const {
    return hostOf(a) == hostOf(b) ? intraCopyNsPerByte_ : copyNsPerByte_;
  }
  void push(int64_t time, EventKind kind, int rank, uint64_t cookie,
            std::shared_ptr<Message> message);
  // Message m lands in receive r at time t (at m's receiver): both ends complete.
  void land(const Message& m, const PostedRecv& r, int64_t t);
  void complete(int r, uint64_t cookie, size_t bytes);
  void publishClock(int64_t t);
  // The reductions the running rank did since the last charge move its clock on.
  void chargeArithmetic(Rank& k);

  FabricSpec spec_;
  int64_t latencyNs_, cpuNs_, intraLatencyNs_;
  double nsPerByte_, intraNsPerByte_, copyNsPerByte_, intraCopyNsPerByte_, reduceNsPerByte_;
  reduce::ArithmeticTap tap_;
  int64_t roundsCpuNs_ = 0;
  std::vector<int64_t> cores_;  // sharedCores: when each is free
  std::vector<Rank> ranks_;
  struct Nic {
    int64_t out = 0;  // when it has sent everything queued
    int64_t in = 0;   // when it has taken everything arriving
  };
  std::vector<Nic> nics_;    // one per host
  std::vector<Nic> leaves_;  // one per leaf switch: out its uplink, in its downlink
  double leafNsPerByte_ = 0;
  int leafOf(int host) const { return host / spec_.hostsPerLeaf; }
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t seq_ = 0;
  int64_t now_ = 0;
  TimePoint clock_;  // what EngineClock::now() reads
  uint64_t messages_ = 0;
  uint64_t bytes_ = 0;
};

// The transport each simulated engine is given: every call goes to the fabric at the rank's time.
class SimTransport final : public Transport {
 public:
  // The tag space of the real transports (UCX's 64-bit tags).
  static constexpr uint64_t kTagSpace = uint64_t{1} << 62;

  SimTransport(SimFabric& fabric, int rank) : fabric_(fabric), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return fabric_.ranks(); }
  const char* name() const override { return "sim"; }
  uint64_t tagSpace() const override { return kTagSpace; }
  void postSend(int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t cookie,
                SendCompletion completion) override {
    fabric_.send(rank_, peer, tag, buf, bytes, cookie, completion);
  }
  void postRecv(int peer, uint64_t tag, void* buf, size_t bytes, uint64_t cookie) override {
    fabric_.recv(rank_, peer, tag, buf, bytes, cookie);
  }
  size_t poll(std::vector<Completion>& out) override { return fabric_.poll(rank_, out); }
  size_t pending() const override { return fabric_.pending(rank_); }
  void cancelAll() override { fabric_.cancelAll(rank_); }
  bool quiesce() override { return true; }

 private:
  SimFabric& fabric_;
  int rank_;
};

}  // namespace prioccl::sim
