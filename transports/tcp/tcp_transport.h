// Transport over plain TCP sockets, one connection per pair of ranks (Gloo's design): no MPI and
// no UCX on the data path. The bootstrap only exchanges listening addresses.
//
// Why it exists: over Open MPI's TCP path every message up to its eager limit (the scheduler's
// 32 KiB ring segments on slow links) is copied from Open MPI's fragments into the receive
// buffer, and its progress engine runs under every poll: a tenth of all CPU in ResNet-18 P3
// training on the 3 Gbit/s testbed (docs/benchmarks.md, "TCP transport"). Here a message whose
// receive is posted is read straight into its buffer; only a message that arrives before its
// receive (unexpected) is kept aside and copied once.
//
// Wire: every message is a 24-byte header (tag, payload bytes, kind, send id) and its payload.
// Sends that must complete end to end (transport.h) ask for an acknowledgement: the receiver
// sends a header-only ack once the whole payload has arrived. With a capped socket send buffer
// (`sndbuf`, PRIOCCL_SOCKET_SNDBUF; off by default) a send completes once its socket has taken
// it instead: the kernel holds at most that much in front of a more urgent message (transport.h:
// the wire is about to take it), and TCP's own acknowledgements free the buffer without the
// peer's process having to run. That saves the ack (half of all packets) and about 40% of the
// CPU per byte, but the small buffer drains while the sender is off its core, where the ack's
// credit keeps the wire busy (docs/benchmarks.md, "Sends that complete in a capped socket
// buffer"). Abort notices always wait for their ack.
//
// A peer's end closing is told apart from its death: quiesce() sends a bye before it closes. After
// a bye, the peer's posted receives simply never complete (as over MPI, where a peer freeing its
// communicator fails nothing), and only sends to it fail. A connection that closes or breaks
// without a bye fails everything that waits on that peer, naming it (peerLost).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "bootstrap.h"
#include "tcp/socket_util.h"
#include "transport.h"

namespace prioccl {

// The addresses (network byte order) to dial, in order, for a peer listening on `port`:
// loopback first when the peer is on this host (`sameHost`), last otherwise (the peer's own
// order), and never this rank's own listener (`ownPort` on loopback or on one of `ownAddrs`).
std::vector<uint32_t> dialOrder(std::vector<uint32_t> addrs, uint16_t port, bool sameHost,
                                uint16_t ownPort, const std::vector<uint32_t>& ownAddrs);

class TcpTransport final : public Transport {
 public:
  // Collective over `bootstrap`. `ifname`: PRIOCCL_SOCKET_IFNAME's filter for the addresses this
  // rank offers its peers ("" = all but loopback first, loopback last). `sameHost`: per rank, 1
  // on this host (loopback is dialled first); empty: bootstrap.sameHost(). `sndbuf`: each
  // socket's send buffer (at least 4 TCP segments: below 2, every write waits for a delayed
  // acknowledgement), and sends complete once written; 0: the kernel's own sizing, and sends that
  // must complete end to end wait for the receiver's acknowledgement.
  TcpTransport(Bootstrap& bootstrap, const std::string& ifname, std::vector<char> sameHost = {},
               size_t sndbuf = 0);
  ~TcpTransport() override;
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "tcp"; }
  const char* pollCall() const override { return "epoll_wait/recv/sendmsg"; }
  uint64_t tagSpace() const override { return uint64_t{1} << 63; }
  void postSend(int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t cookie,
                SendCompletion completion) override;
  void postRecv(int peer, uint64_t tag, void* buf, size_t bytes, uint64_t cookie) override;
  size_t poll(std::vector<Completion>& out) override;
  size_t pending() const override { return pending_; }
  void cancelAll() override;
  bool quiesce() override;
  int eventFd() const override { return epollFd_; }
  bool armEvents() override;

  // "rank 1: 198.18.0.2:40123, ..." for logs.
  std::string describePeers() const;

  struct Header {
    uint64_t tag;
    uint64_t bytes;
    uint32_t kind;
    uint32_t sendId;  // the sender's slot, echoed by the ack
  };
  static_assert(sizeof(Header) == 24);

 private:
  // One posted transfer; lives in slots_ (stable addresses) until poll() reports it.
  struct Slot {
    uint64_t cookie = 0;
    int peer = 0;
    char* buf = nullptr;
    size_t bytes = 0;
    bool isRecv = false;
    bool inUse = false;
    bool awaitsAck = false;  // a send that completes when the receiver acknowledges it
    bool delivered = false;  // SendCompletion::kDelivered (an abort notice)
    bool withdrawn = false;  // cancelAll(): never reported, never touched again
  };
  struct Outgoing {
    Header header;
    const char* payload = nullptr;
    size_t written = 0;  // of header + payload
    uint32_t slot = 0;   // the send's slot (not for acks)
    bool isAck = false;
    bool completesOnWrite = false;
    size_t payloadBytes() const { return isAck ? 0 : header.bytes; }
  };
  struct Unexpected {
    std::vector<char> data;
  };
  struct Peer {
    int fd = -1;
    bool lost = false;
    bool saidBye = false;        // it closed its end in order (quiesce): its receives stay posted
    bool watchesWrites = false;  // registered for EPOLLOUT (armEvents: `out` was not empty)
    bool cappedSndbuf = false;   // its send buffer is capped: sends complete once written
    std::string lostWhy;         // the message its transfers failed with
    std::string address;         // host:port it was reached at, for messages
    std::deque<Outgoing> out;
    std::unordered_map<uint64_t, std::deque<uint32_t>> posted;  // tag -> receive slots
    std::unordered_map<uint64_t, std::deque<Unexpected>> unexpected;
    // The message being read: its header, then its payload into `dst`.
    Header header{};
    size_t headerGot = 0;
    bool inPayload = false;
    char* dst = nullptr;
    size_t payloadGot = 0;
    int64_t target = -1;    // the receive slot it fills; -1: unexpected (into `held`)
    bool overflow = false;  // longer than its receive: read into `held`, the receive failed
    Unexpected held;
  };

  uint32_t takeSlot(int peer, char* buf, size_t bytes, uint64_t cookie, bool isRecv);
  void finish(uint32_t slot, Completion c);
  void withdraw(uint32_t slot);  // cancelAll(): never reported; counted out of pending_
  void complete(uint32_t slot, size_t received);
  void completeError(uint32_t slot, priocclResult_t code, const std::string& error, bool lost);
  void readPeer(int peer);
  void consumeInput(int peer, size_t bytes);
  void headerArrived(int peer);
  void messageArrived(int peer);
  void flushPeer(int peer);
  void losePeer(int peer, const std::string& why);
  void connectAll(Bootstrap& bootstrap, const std::string& ifname, std::vector<char> sameHost);
  void capSendBuffer(int peer);
  void closeAll();

  int rank_ = 0, size_ = 1;
  size_t sndbuf_ = 0;
  int listenFd_ = -1;
  int epollFd_ = -1;
  std::vector<Peer> peers_;
  std::deque<Slot> slots_;
  std::vector<uint32_t> free_;
  std::vector<Completion> finished_;
  size_t pending_ = 0;
  bool closed_ = false;
  std::vector<char> discard_;  // where a withdrawn receive's remaining bytes go
  std::vector<char> input_;    // what one recv read, parsed before the next (readPeer)
};

}  // namespace prioccl
