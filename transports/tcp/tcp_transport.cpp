// TCP transport: one non-blocking socket per peer, read into posted receives, written with
// sendmsg from the senders' buffers; see tcp_transport.h.
#include "tcp/tcp_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "tcp/socket_util.h"

namespace prioccl {

using detail::concat;
using detail::fail;

namespace {

enum Kind : uint32_t { kData = 1, kDataAck = 2, kAck = 3, kBye = 4 };

constexpr auto kConnectTimeout = std::chrono::seconds(3);  // per address tried
// Set-up waits for peers that are still connecting to others (ranks connect in turn).
constexpr auto kSetupTimeout = std::chrono::seconds(120);
// How long quiesce() waits for an abort notice's acknowledgement (an idle peer polls at least
// once per heartbeat period, at most 1 s).
constexpr auto kNoticeTimeout = std::chrono::milliseconds(1500);
constexpr uint64_t kMagic = 0x70726963636c7470ULL;  // "pricclTP"-ish: not a stray client
// Reads: a header is read with up to kInputBytes after it into the transport's input buffer, so
// that a message of up to about 4 KiB costs one recv (not three: header, payload, and the EAGAIN
// that said nothing was left). The rest of a longer payload is read straight into its receive
// buffer: at most kInputBytes of any message is copied twice. (A 64 KiB input buffer copied most
// of every 32 KiB ring segment: memmove was 2.4% of a training rank's CPU.)
constexpr size_t kInputBytes = 4096;

struct Hello {
  uint64_t magic;
  uint64_t token;  // the job's, from rank 0
  int32_t from, to;
  int32_t ok;  // in the reply: 1 when `to` took the connection
  int32_t pad;
};

bool writeFull(int fd, Hello h, Clock::time_point deadline) {
  return moveFull(fd, reinterpret_cast<char*>(&h), sizeof h, true, deadline);
}

bool readFull(int fd, Hello* h, Clock::time_point deadline) {
  return moveFull(fd, reinterpret_cast<char*>(h), sizeof *h, false, deadline);
}

// A non-blocking connect with a timeout; the socket, or -1.
int connectTo(const sockaddr_in& addr) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) return fd;
  if (errno == EINPROGRESS && waitFor(fd, POLLOUT, Clock::now() + kConnectTimeout)) {
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) return fd;
  }
  ::close(fd);
  return -1;
}

std::string addressText(uint32_t ipv4, uint16_t port) {
  char text[INET_ADDRSTRLEN] = {};
  in_addr a{};
  a.s_addr = ipv4;
  ::inet_ntop(AF_INET, &a, text, sizeof text);
  return concat(text, ":", port);
}

}  // namespace

std::vector<uint32_t> dialOrder(std::vector<uint32_t> addrs, uint16_t port, bool sameHost,
                                uint16_t ownPort, const std::vector<uint32_t>& ownAddrs) {
  auto loopback = [](uint32_t a) { return (ntohl(a) >> 24) == 127; };
  // Our own listener takes the connection and then waits, as we do, for a hello that never
  // comes: until the set-up deadline, and then every rank fails (seen on the testbed: two
  // namespaces' listeners drew the same port, and loopback was tried first).
  addrs.erase(std::remove_if(addrs.begin(), addrs.end(),
                             [&](uint32_t a) {
                               return port == ownPort &&
                                      (loopback(a) || std::find(ownAddrs.begin(), ownAddrs.end(),
                                                                a) != ownAddrs.end());
                             }),
              addrs.end());
  if (sameHost) std::stable_partition(addrs.begin(), addrs.end(), loopback);  // never leaves it
  return addrs;
}

TcpTransport::TcpTransport(Bootstrap& bootstrap, const std::string& ifname,
                           std::vector<char> sameHost, size_t sndbuf)
    : rank_(bootstrap.rank()),
      size_(bootstrap.size()),
      sndbuf_(sndbuf),
      peers_(bootstrap.size()),
      input_(kInputBytes) {
  try {
    connectAll(bootstrap, ifname, std::move(sameHost));
  } catch (...) {
    closeAll();
    throw;
  }
}

TcpTransport::~TcpTransport() {
  closeAll();
}

void TcpTransport::connectAll(Bootstrap& bootstrap, const std::string& ifname,
                              std::vector<char> sameHost) {
  // Listen on every interface; offer the filtered addresses.
  listenFd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listenFd_ < 0) fail(priocclSystemError, "tcp transport: socket(): ", errnoText(errno));
  int one = 1;
  ::setsockopt(listenFd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  any.sin_port = 0;
  if (::bind(listenFd_, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0 ||
      ::listen(listenFd_, std::max(size_, 128)) != 0)
    fail(priocclSystemError, "tcp transport: rank ", rank_, " cannot listen: ", errnoText(errno));
  socklen_t len = sizeof any;
  ::getsockname(listenFd_, reinterpret_cast<sockaddr*>(&any), &len);
  const std::vector<uint32_t> everyLocal = localAddresses("");  // dialOrder: never our own port
  std::vector<uint32_t> mine = ifname.empty() ? everyLocal : localAddresses(ifname);
  if (mine.empty())
    fail(priocclInvalidUsage, "tcp transport: rank ", rank_, " has no IPv4 address",
         ifname.empty() ? std::string()
                        : concat(" on an interface matching PRIOCCL_SOCKET_IFNAME=", ifname));
  // What every rank publishes: token (rank 0's counts), port, addresses.
  uint64_t token = 0;
  if (rank_ == 0) token = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  std::vector<char> card(sizeof token + sizeof(uint16_t) + mine.size() * sizeof(uint32_t));
  std::memcpy(card.data(), &token, sizeof token);
  const uint16_t port = ntohs(any.sin_port);
  std::memcpy(card.data() + sizeof token, &port, sizeof port);
  std::memcpy(card.data() + sizeof token + sizeof port, mine.data(),
              mine.size() * sizeof(uint32_t));
  std::vector<std::vector<char>> cards = bootstrap.allGather(card.data(), card.size());
  if (sameHost.empty()) sameHost = bootstrap.sameHost();  // collective: every rank or none
  std::memcpy(&token, cards[0].data(), sizeof token);

  const Clock::time_point deadline = Clock::now() + kSetupTimeout;
  // Connect to every higher rank (its listener exists: the all-gather came after it), then take
  // the lower ranks' connections. The highest rank only accepts, so every chain of waits ends.
  for (int peer = rank_ + 1; peer < size_; ++peer) {
    const std::vector<char>& c = cards[peer];
    uint16_t peerPort = 0;
    std::memcpy(&peerPort, c.data() + sizeof token, sizeof peerPort);
    size_t n = (c.size() - sizeof token - sizeof peerPort) / sizeof(uint32_t);
    std::vector<uint32_t> addrs(n);
    std::memcpy(addrs.data(), c.data() + sizeof token + sizeof peerPort, n * sizeof(uint32_t));
    addrs = dialOrder(addrs, peerPort, sameHost[peer] != 0, port, everyLocal);
    std::string tried;
    for (uint32_t a : addrs) {
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_addr.s_addr = a;
      to.sin_port = htons(peerPort);
      std::string text = addressText(a, peerPort);
      tried += (tried.empty() ? "" : ", ") + text;
      int fd = connectTo(to);
      if (fd < 0) continue;
      Hello hello{kMagic, token, rank_, peer, 0, 0}, reply{};
      if (writeFull(fd, hello, deadline) && readFull(fd, &reply, deadline) &&
          reply.magic == kMagic && reply.token == token && reply.from == peer &&
          reply.to == rank_ && reply.ok == 1) {
        peers_[peer].fd = fd;
        peers_[peer].address = text;
        break;
      }
      ::close(fd);  // someone else's listener (another rank's on this host, ...): next address
    }
    if (peers_[peer].fd < 0)
      fail(priocclSystemError, "tcp transport: rank ", rank_, " cannot reach rank ", peer, " at ",
           tried.empty() ? "no address" : tried,
           " (set PRIOCCL_SOCKET_IFNAME to the interface the ranks share)");
  }
  for (int accepted = 0; accepted < rank_;) {
    if (!waitFor(listenFd_, POLLIN, deadline))
      fail(priocclSystemError, "tcp transport: rank ", rank_, " waited ",
           std::chrono::duration_cast<std::chrono::seconds>(kSetupTimeout).count(),
           " s for the lower ranks to connect; ", accepted, " of ", rank_, " did");
    sockaddr_in from{};
    socklen_t fromLen = sizeof from;
    int fd = ::accept4(listenFd_, reinterpret_cast<sockaddr*>(&from), &fromLen, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Hello hello{}, reply{kMagic, token, rank_, -1, 0, 0};
    bool ok = readFull(fd, &hello, Clock::now() + std::chrono::seconds(10)) &&
              hello.magic == kMagic && hello.token == token && hello.to == rank_ &&
              hello.from >= 0 && hello.from < rank_ && peers_[hello.from].fd < 0;
    reply.to = hello.from;
    reply.ok = ok ? 1 : 0;
    if (ok && writeFull(fd, reply, deadline)) {
      peers_[hello.from].fd = fd;
      peers_[hello.from].address = addressText(from.sin_addr.s_addr, ntohs(from.sin_port));
      ++accepted;
    } else {
      if (hello.magic == kMagic) writeFull(fd, reply, deadline);
      ::close(fd);
    }
  }
  ::close(listenFd_);
  listenFd_ = -1;
  epollFd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epollFd_ < 0) fail(priocclSystemError, "tcp transport: epoll_create1: ", errnoText(errno));
  for (int peer = 0; peer < size_; ++peer) {
    int fd = peers_[peer].fd;
    if (fd < 0) continue;
    setNonBlocking(fd);
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (sndbuf_ > 0) capSendBuffer(peer);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = static_cast<uint32_t>(peer);
    if (::epoll_ctl(epollFd_, EPOLL_CTL_ADD, fd, &ev) != 0)
      fail(priocclSystemError, "tcp transport: epoll_ctl: ", errnoText(errno));
  }
  // Every rank has its connections before anyone sends: a message never meets a half-built mesh.
  bootstrap.barrier();
}

// At least 4 segments: with a buffer of one or two (loopback's are 64 KiB), every write waits
// for the peer's delayed acknowledgement, and a 64 MiB all-reduce crawled for minutes. The kernel
// doubles the value for its bookkeeping and caps it at net.core.wmem_max.
void TcpTransport::capSendBuffer(int peer) {
  Peer& p = peers_[peer];
  size_t want = sndbuf_;
  int mss = 0;
  socklen_t len = sizeof mss;
  if (::getsockopt(p.fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &len) == 0 && mss > 0)
    want = std::max(want, 4 * static_cast<size_t>(mss));
  const int value = static_cast<int>(std::min<size_t>(want, 1 << 30));
  p.cappedSndbuf = ::setsockopt(p.fd, SOL_SOCKET, SO_SNDBUF, &value, sizeof value) == 0;
}

std::string TcpTransport::describePeers() const {
  std::string s;
  for (int peer = 0; peer < size_; ++peer)
    if (peer != rank_)
      s += concat(s.empty() ? "" : ", ", "rank ", peer, ": ", peers_[peer].address);
  return s;
}

uint32_t TcpTransport::takeSlot(int peer, char* buf, size_t bytes, uint64_t cookie, bool isRecv) {
  uint32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    id = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  Slot& s = slots_[id];
  s = Slot{};
  s.cookie = cookie;
  s.peer = peer;
  s.buf = buf;
  s.bytes = bytes;
  s.isRecv = isRecv;
  s.inUse = true;
  ++pending_;
  return id;
}

// A withdrawn transfer (cancelAll) is never reported; either way its slot is free again.
void TcpTransport::finish(uint32_t slot, Completion c) {
  Slot& s = slots_[slot];
  if (!s.withdrawn) {
    c.cookie = s.cookie;
    finished_.push_back(std::move(c));  // still pending until poll() reports it
  }
  s.inUse = false;
  free_.push_back(slot);
}

void TcpTransport::complete(uint32_t slot, size_t received) {
  Completion c;
  c.bytes = received;
  finish(slot, std::move(c));
}

void TcpTransport::completeError(uint32_t slot, priocclResult_t code, const std::string& error,
                                 bool lost) {
  Completion c;
  c.ok = false;
  c.code = code;
  c.error = error;
  c.peerLost = lost;
  finish(slot, std::move(c));
}

void TcpTransport::postSend(int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t cookie,
                            SendCompletion completion) {
  if (peer < 0 || peer >= size_)
    fail(priocclInternalError, "tcp transport: send to rank ", peer, " of ", size_);
  uint32_t slot = takeSlot(peer, static_cast<char*>(const_cast<void*>(buf)), bytes, cookie, false);
  Peer& p = peers_[peer];
  if (peer == rank_) {  // to itself: straight into a posted receive, else kept aside
    auto it = p.posted.find(tag);
    if (it != p.posted.end() && !it->second.empty()) {
      uint32_t r = it->second.front();
      it->second.pop_front();
      if (it->second.empty()) p.posted.erase(it);
      if (bytes > slots_[r].bytes) {
        completeError(
            r, priocclInternalError,
            concat("tcp transport: rank ", rank_, " sent itself ", bytes, " bytes with tag ", tag,
                   ", more than its receive of ", slots_[r].bytes),
            false);
      } else {
        if (bytes) std::memcpy(slots_[r].buf, buf, bytes);
        complete(r, bytes);
      }
    } else {
      auto* b = static_cast<const char*>(buf);
      p.unexpected[tag].push_back(Unexpected{std::vector<char>(b, b + bytes)});
    }
    complete(slot, 0);
    return;
  }
  if (p.lost || closed_) {
    completeError(
        slot, priocclRemoteError,
        p.lost ? p.lostWhy : concat("the connection to rank ", peer, " is closed (tcp transport)"),
        true);
    return;
  }
  bool ack =
      completion == SendCompletion::kDelivered ||
      (completion == SendCompletion::kEndToEnd && bytes >= kEndToEndSendMin && !p.cappedSndbuf);
  slots_[slot].awaitsAck = ack;
  slots_[slot].delivered = completion == SendCompletion::kDelivered;
  Outgoing o;
  o.header = Header{tag, bytes, ack ? kDataAck : kData, slot};
  o.payload = static_cast<const char*>(buf);
  o.slot = slot;
  o.completesOnWrite = !ack;
  p.out.push_back(o);
  if (p.out.size() == 1) flushPeer(peer);  // starts on the wire now, as MPI_Isend would
}

void TcpTransport::postRecv(int peer, uint64_t tag, void* buf, size_t bytes, uint64_t cookie) {
  if (peer < 0 || peer >= size_)
    fail(priocclInternalError, "tcp transport: receive from rank ", peer, " of ", size_);
  uint32_t slot = takeSlot(peer, static_cast<char*>(buf), bytes, cookie, true);
  Peer& p = peers_[peer];
  auto tooLong = [&](size_t got) {
    return concat("a message of ", got, " bytes from rank ", peer, " (tag ", tag,
                  ") is longer than its receive of ", bytes, " bytes (tcp transport)");
  };
  // Messages from one peer match in the order they came: those kept aside first...
  auto it = p.unexpected.find(tag);
  if (it != p.unexpected.end() && !it->second.empty()) {
    Unexpected u = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) p.unexpected.erase(it);
    if (u.data.size() > bytes) {
      completeError(slot, priocclRemoteError, tooLong(u.data.size()), false);
    } else {
      if (!u.data.empty()) std::memcpy(buf, u.data.data(), u.data.size());
      complete(slot, u.data.size());
    }
    return;
  }
  // ... then the one arriving now, which takes the rest of its bytes straight into `buf`...
  if (p.inPayload && p.target < 0 && p.header.tag == tag) {
    p.target = slot;
    if (p.header.bytes > bytes) {
      p.overflow = true;  // goes on into `held`; the receive fails when it has all arrived
    } else {
      if (p.payloadGot) std::memcpy(buf, p.held.data.data(), p.payloadGot);
      p.dst = static_cast<char*>(buf);
      p.held.data.clear();
    }
    return;
  }
  if ((p.lost && !p.saidBye) || closed_) {
    completeError(
        slot, priocclRemoteError,
        p.lost ? p.lostWhy : concat("the connection to rank ", peer, " is closed (tcp transport)"),
        true);
    return;
  }
  p.posted[tag].push_back(slot);  // ... else it waits for its message
}

void TcpTransport::flushPeer(int peer) {
  Peer& p = peers_[peer];
  while (!p.out.empty() && !p.lost) {
    constexpr int kIov = 64;
    iovec iov[kIov];
    int n = 0;
    for (auto it = p.out.begin(); it != p.out.end() && n + 2 <= kIov; ++it) {
      size_t w = it->written;
      if (w < sizeof(Header)) {
        iov[n++] = {reinterpret_cast<char*>(&it->header) + w, sizeof(Header) - w};
        w = 0;
      } else {
        w -= sizeof(Header);
      }
      size_t payload = it->payloadBytes();
      if (payload > w) iov[n++] = {const_cast<char*>(it->payload) + w, payload - w};
    }
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<size_t>(n);
    ssize_t r = ::sendmsg(p.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        losePeer(peer, concat("failed: ", errnoText(errno)));
      return;
    }
    auto left = static_cast<size_t>(r);
    while (!p.out.empty()) {
      Outgoing& o = p.out.front();
      size_t total = sizeof(Header) + o.payloadBytes();
      size_t need = total - o.written;
      if (left < need) {
        o.written += left;
        return;  // the socket took what it could
      }
      left -= need;
      if (o.completesOnWrite) complete(o.slot, 0);
      p.out.pop_front();
    }
  }
}

void TcpTransport::readPeer(int peer) {
  Peer& p = peers_[peer];
  for (int rounds = 0; rounds < 256 && !p.lost; ++rounds) {
    // A payload's rest goes straight into its buffer; a header comes through input_ with
    // whatever follows it, so that one recv takes a short message whole.
    const bool direct = p.inPayload;
    char* into = direct ? p.dst + p.payloadGot : input_.data();
    const size_t want = direct ? p.header.bytes - p.payloadGot : input_.size();
    ssize_t r = ::recv(p.fd, into, want, MSG_DONTWAIT);
    if (r == 0) {
      losePeer(peer, p.saidBye ? "was closed: that rank has left the communicator"
                               : "was closed by the peer without a goodbye (the process ended?)");
      return;
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        losePeer(peer, concat("failed: ", errnoText(errno)));
      return;
    }
    const auto got = static_cast<size_t>(r);
    if (!direct) {
      consumeInput(peer, got);
    } else if ((p.payloadGot += got) == p.header.bytes) {
      messageArrived(peer);
    }
    // A short read drained the socket: the descriptor (level-triggered) reports what comes next,
    // so no recv is spent on learning that nothing is left.
    if (got < want) return;
  }
}

// input_'s first `bytes`: headers and payload pieces, in the order they came. The parse state
// (header, payload, target) lives in the peer, so a message may span any number of reads.
void TcpTransport::consumeInput(int peer, size_t bytes) {
  Peer& p = peers_[peer];
  const char* at = input_.data();
  while (bytes > 0 && !p.lost) {
    if (p.inPayload) {
      size_t take = std::min(bytes, p.header.bytes - p.payloadGot);
      std::memcpy(p.dst + p.payloadGot, at, take);
      at += take;
      bytes -= take;
      if ((p.payloadGot += take) == p.header.bytes) messageArrived(peer);
      continue;
    }
    size_t take = std::min(bytes, sizeof(Header) - p.headerGot);
    std::memcpy(reinterpret_cast<char*>(&p.header) + p.headerGot, at, take);
    at += take;
    bytes -= take;
    if ((p.headerGot += take) < sizeof(Header)) continue;
    p.headerGot = 0;
    headerArrived(peer);
  }
}

void TcpTransport::headerArrived(int peer) {
  Peer& p = peers_[peer];
  const Header& h = p.header;
  if (h.kind == kAck) {
    uint32_t s = h.sendId;
    if (s >= slots_.size() || !slots_[s].inUse || slots_[s].isRecv || !slots_[s].awaitsAck ||
        slots_[s].peer != peer) {
      losePeer(peer, concat("sent an acknowledgement for no send of ours (slot ", s,
                            "): a corrupted stream"));
      return;
    }
    complete(s, 0);
    return;
  }
  if (h.kind == kBye) {
    p.saidBye = true;
    return;
  }
  if (h.kind != kData && h.kind != kDataAck) {
    losePeer(peer, concat("sent a message of unknown kind ", h.kind, ": a corrupted stream"));
    return;
  }
  p.inPayload = true;
  p.payloadGot = 0;
  p.overflow = false;
  p.target = -1;
  auto it = p.posted.find(h.tag);
  if (it != p.posted.end() && !it->second.empty()) {
    p.target = it->second.front();
    it->second.pop_front();
    if (it->second.empty()) p.posted.erase(it);
    p.overflow = h.bytes > slots_[p.target].bytes;
  }
  if (p.target < 0 || p.overflow) {
    p.held.data.resize(h.bytes);
    p.dst = p.held.data.data();
  } else {
    p.dst = slots_[p.target].buf;
  }
  if (h.bytes == 0) messageArrived(peer);
}

void TcpTransport::messageArrived(int peer) {
  Peer& p = peers_[peer];
  const Header h = p.header;
  p.inPayload = false;
  if (p.target < 0) {
    p.unexpected[h.tag].push_back(std::move(p.held));
    p.held = Unexpected{};
  } else if (p.overflow) {
    const Slot& s = slots_[p.target];
    completeError(static_cast<uint32_t>(p.target), priocclRemoteError,
                  concat("a message of ", h.bytes, " bytes from rank ", peer, " (tag ", h.tag,
                         ") is longer than its receive of ", s.bytes, " bytes (tcp transport)"),
                  false);
  } else {
    complete(static_cast<uint32_t>(p.target), h.bytes);
  }
  p.target = -1;
  p.overflow = false;
  p.dst = nullptr;
  if (h.kind == kDataAck) {
    Outgoing ack;
    ack.header = Header{h.tag, 0, kAck, h.sendId};
    ack.isAck = true;
    p.out.push_back(ack);
  }
}

void TcpTransport::losePeer(int peer, const std::string& why) {
  Peer& p = peers_[peer];
  if (p.lost) return;
  p.lost = true;
  std::string message =
      concat("the connection to rank ", peer, " (", p.address, ") ", why, " (tcp transport)");
  p.lostWhy = message;
  if (p.fd >= 0) {
    ::epoll_ctl(epollFd_, EPOLL_CTL_DEL, p.fd, nullptr);
    ::close(p.fd);
    p.fd = -1;
  }
  // After a bye only sends fail: receives wait, as they would for a peer that never sends.
  for (uint32_t s = 0; s < slots_.size(); ++s)
    if (slots_[s].inUse && slots_[s].peer == peer && (!p.saidBye || !slots_[s].isRecv))
      completeError(s, priocclRemoteError, message, true);
  p.out.clear();
  if (!p.saidBye) {
    p.posted.clear();
    p.unexpected.clear();
  }
  p.inPayload = false;
  p.target = -1;
}

size_t TcpTransport::poll(std::vector<Completion>& out) {
  if (!closed_ && epollFd_ >= 0) {
    epoll_event events[64];
    int n = ::epoll_wait(epollFd_, events, 64, 0);
    for (int i = 0; i < n; ++i) {
      int peer = static_cast<int>(events[i].data.u32);
      // Writability alone (armEvents) needs no recv: the flush below writes.
      if ((events[i].events & ~static_cast<uint32_t>(EPOLLOUT)) && !peers_[peer].lost)
        readPeer(peer);
    }
    for (int peer = 0; peer < size_; ++peer)
      if (!peers_[peer].out.empty() && !peers_[peer].lost) flushPeer(peer);
  }
  size_t n = finished_.size();
  pending_ -= n;
  for (Completion& c : finished_) out.push_back(std::move(c));
  finished_.clear();
  return n;
}

bool TcpTransport::armEvents() {
  if (!finished_.empty()) return false;
  // A connection with bytes still to write (its socket buffer was full) also wakes the sleeper
  // once its socket can take more, so that the engine sleeps instead of polling a full socket:
  // on a saturated link the unwritten queue is rarely empty, and the progress thread used to
  // spin through every such wait, taking a core from the training beside it. Only while there is
  // something to write: an idle socket is always writable.
  for (int peer = 0; peer < size_ && !closed_; ++peer) {
    Peer& p = peers_[peer];
    const bool want = !p.out.empty();
    if (p.lost || p.fd < 0 || want == p.watchesWrites) continue;
    epoll_event ev{};
    ev.events = EPOLLIN | (want ? EPOLLOUT : 0u);
    ev.data.u32 = static_cast<uint32_t>(peer);
    if (::epoll_ctl(epollFd_, EPOLL_CTL_MOD, p.fd, &ev) != 0) return false;  // poll on instead
    p.watchesWrites = want;
  }
  return true;
}

void TcpTransport::cancelAll() {
  // The engine forgets every cookie it posted (Transfers::clear): nothing posted so far may be
  // reported any more, sends included, nor what finished and waits in finished_.
  pending_ -= finished_.size();
  finished_.clear();
  for (Peer& p : peers_) {
    for (auto& entry : p.posted)
      for (uint32_t s : entry.second) {
        withdraw(s);
        finish(s, {});  // frees the slot, unreported
      }
    p.posted.clear();
    if (p.inPayload && p.target >= 0 && !p.overflow) {  // its buffer is not ours to fill now
      discard_.resize(std::max(discard_.size(), p.header.bytes));
      p.dst = discard_.data();
    }
    // A send not yet begun never goes (MPI_Cancel's sense), so the abort notice the engine
    // posts next does not wait behind it; one partly written is written out, or the stream would
    // lose its framing. Acknowledgements still go: the peer's sends wait for them.
    for (auto it = p.out.begin(); it != p.out.end();) {
      if (!it->isAck && it->written == 0) {
        withdraw(it->slot);
        finish(it->slot, {});
        it = p.out.erase(it);
      } else {
        ++it;
      }
    }
  }
  // The rest (the receive a payload is arriving into, sends on the wire or awaiting their
  // acknowledgement) finish unreported and free their slots then: an acknowledgement still
  // finds its send.
  for (uint32_t s = 0; s < slots_.size(); ++s)
    if (slots_[s].inUse) withdraw(s);
}

void TcpTransport::withdraw(uint32_t slot) {
  Slot& s = slots_[slot];
  if (s.withdrawn) return;
  s.withdrawn = true;
  --pending_;
}

bool TcpTransport::quiesce() {
  // An abort notice must reach its peer before the connection closes under it, and so must the
  // acknowledgements still queued (a full socket buffer held them back): a peer's last send
  // completes only with its acknowledgement.
  auto notices = [&] {
    for (const Slot& s : slots_)
      if (s.inUse && s.delivered && !s.withdrawn && !peers_[s.peer].lost) return true;
    for (const Peer& p : peers_)
      if (!p.lost && !p.out.empty()) return true;
    return false;
  };
  // The bye goes last on every connection: the peer tells this orderly end from a death.
  for (int peer = 0; peer < size_; ++peer) {
    Peer& p = peers_[peer];
    if (closed_ || p.lost || p.fd < 0) continue;
    Outgoing bye;
    bye.header = Header{0, 0, kBye, 0};
    bye.isAck = true;  // header only, no slot
    p.out.push_back(bye);
  }
  const Clock::time_point until = Clock::now() + kNoticeTimeout;
  std::vector<Completion> ignored;
  while (!closed_ && notices() && Clock::now() < until) {
    poll(ignored);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  closeAll();
  return true;
}

void TcpTransport::closeAll() {
  if (closed_) return;
  closed_ = true;
  for (Peer& p : peers_) {
    if (p.fd >= 0) ::close(p.fd);
    p.fd = -1;
  }
  if (listenFd_ >= 0) ::close(listenFd_);
  if (epollFd_ >= 0) ::close(epollFd_);
  listenFd_ = epollFd_ = -1;
}

}  // namespace prioccl
