// The TCP bootstrap (tcp_bootstrap.h): a star through rank 0 for the collectives, direct
// connections for send/recv, and a guard against whatever else reaches a listener.
#include "tcp/tcp_bootstrap.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

#include "common/error.h"
#include "common/host_name.h"
#include "common/log.h"
#include "setup_cancel.h"

namespace prioccl {

using detail::concat;
using detail::fail;
using detail::LogLevel;

namespace {

// How long an accepted connection may take to say who it is before it is dropped.
constexpr auto kHelloTimeout = std::chrono::seconds(10);
// How long past its own deadline a joining rank waits for rank 0's table or verdict.
constexpr auto kVerdictGrace = std::chrono::seconds(3);

uint64_t fnv(uint64_t h, const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}
constexpr uint64_t kFnvBasis = 0xCBF29CE484222325ull;

// A group made from `parent` (split, shrink): its token, derived from the parent's and `parts`
// (what tells this group from the parent's other children). The root address is the caller's.
UniqueIdFields childOf(const UniqueIdFields& parent,
                       std::initializer_list<std::pair<const void*, size_t>> parts) {
  uint64_t a = fnv(kFnvBasis, parent.token, kTokenBytes);
  for (const auto& [data, bytes] : parts) a = fnv(a, data, bytes);
  uint64_t b = fnv(a ^ 0x9E3779B97F4A7C15ull, parent.token, kTokenBytes);
  UniqueIdFields child;
  std::memcpy(child.token, &a, 8);
  std::memcpy(child.token + 8, &b, 8);
  return child;
}

socklen_t lengthOf(const sockaddr_storage& a) {
  return a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

// A listener on `at` (port 0: any free one), non-blocking; throws naming `at`.
int listenOn(const sockaddr_storage& at) {
  int fd = ::socket(at.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) fail(priocclSystemError, "bootstrap: socket(): ", errnoText(errno));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&at), lengthOf(at)) != 0 ||
      ::listen(fd, 128) != 0) {
    int e = errno;
    ::close(fd);
    fail(priocclSystemError, "bootstrap: cannot listen at ", addressText(at), ": ", errnoText(e),
         e == EADDRINUSE ? " (PRIOCCL_COMM_ID's port is taken: choose another)" : "");
  }
  return fd;
}

sockaddr_storage boundAddress(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return a;
}

// Small frames go out at once: a header and its payload are two writes, which Nagle's algorithm
// would hold for the peer's delayed acknowledgement (40 ms a message).
void noDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Sleeps for `d`, in slices of 100 ms so that a cancelled creation stops within one.
void napUnlessCancelled(std::chrono::milliseconds d) {
  const auto until = Clock::now() + d;
  for (auto now = Clock::now(); now < until && !setupCancelled(); now = Clock::now())
    std::this_thread::sleep_for(
        std::min<Clock::duration>(until - now, std::chrono::milliseconds(100)));
}

// One connection attempt to `at`, waiting for its answer until `until`: the socket (TCP_NODELAY
// set), or -1 with `*err` the errno (ETIMEDOUT: no answer by then; ECONNREFUSED: nobody listens).
int connectOnce(const sockaddr_storage& at, Clock::time_point until, int* err) {
  int fd = ::socket(at.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *err = errno;
    return -1;
  }
  *err = ::connect(fd, reinterpret_cast<const sockaddr*>(&at), lengthOf(at)) == 0 ? 0 : errno;
  if (*err == EINPROGRESS) {
    *err = ETIMEDOUT;
    if (waitFor(fd, POLLOUT, until)) {
      socklen_t len = sizeof *err;
      if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, err, &len) != 0) *err = errno;
    }
  }
  if (*err != 0) {
    ::close(fd);
    return -1;
  }
  noDelay(fd);
  return fd;
}

// Connects to `at`, retrying (the listener may not be up yet) until `deadline`; the socket, or -1
// with `error` set. The first retries come every millisecond, as NCCL's do: ranks that start
// together dial before rank 0 listens, and a back-off from 10 ms made that the larger part of a
// communicator's creation (docs/benchmarks.md, "Creating a communicator"). After kQuickRetries
// the pause doubles up to 500 ms, so a rank 0 that starts late is not dialled a thousand times
// a second by every rank.
int dial(const sockaddr_storage& at, Clock::time_point deadline, std::string* error) {
  constexpr int kQuickRetries = 64;
  auto pause = std::chrono::milliseconds(1);
  for (int attempt = 1;; ++attempt) {
    if (setupCancelled()) {
      *error = "the creation was cancelled (priocclCommInitCancel)";
      return -1;
    }
    int err = 0;
    int fd = connectOnce(at, std::min(deadline, Clock::now() + std::chrono::seconds(3)), &err);
    if (fd >= 0) return fd;
    *error = errnoText(err);
    if (Clock::now() + pause >= deadline) return -1;
    napUnlessCancelled(pause);
    if (attempt >= kQuickRetries) pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
}

bool sendAll(int fd, const void* p, size_t bytes, Clock::time_point deadline) {
  return moveFull(fd, static_cast<char*>(const_cast<void*>(p)), bytes, true, deadline);
}
// A frame, then its payload.
bool sendFramed(int fd, const Frame& f, const void* payload, size_t bytes,
                Clock::time_point deadline) {
  return sendAll(fd, &f, sizeof f, deadline) && sendAll(fd, payload, bytes, deadline);
}
bool recvAll(int fd, void* p, size_t bytes, Clock::time_point deadline) {
  return moveFull(fd, static_cast<char*>(p), bytes, false, deadline);
}

// Listeners made by newUniqueId for this process's rank 0, by token.
std::mutex g_listenersMutex;
std::map<std::string, int> g_listeners;

std::string tokenKey(const uint8_t* token) {
  return std::string(reinterpret_cast<const char*>(token), kTokenBytes);
}

int takeListener(const uint8_t* token) {
  std::lock_guard<std::mutex> lock(g_listenersMutex);
  auto it = g_listeners.find(tokenKey(token));
  if (it == g_listeners.end()) return -1;
  int fd = it->second;
  g_listeners.erase(it);
  return fd;
}

// "host:port" or "[v6]:port" (PRIOCCL_COMM_ID) as an address.
sockaddr_storage parseCommId(const std::string& text) {
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find("]:");
    if (close != std::string::npos) {
      host = text.substr(1, close - 1);
      port = text.substr(close + 2);
    }
  } else {
    size_t colon = text.rfind(':');
    if (colon != std::string::npos && text.find(':') == colon) {
      host = text.substr(0, colon);
      port = text.substr(colon + 1);
    }
  }
  char* end = nullptr;
  long number = port.empty() ? -1 : std::strtol(port.c_str(), &end, 10);
  if (host.empty() || !end || *end || number <= 0 || number > 65535)
    fail(priocclInvalidArgument, "PRIOCCL_COMM_ID='", text,
         "' is not host:port or [ipv6]:port with a port in 1..65535");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0 || !found)
    fail(priocclInvalidArgument, "PRIOCCL_COMM_ID='", text, "': cannot resolve '", host,
         "': ", ::gai_strerror(rc));
  sockaddr_storage a{};
  std::memcpy(&a, found->ai_addr, found->ai_addrlen);
  ::freeaddrinfo(found);
  return a;
}

}  // namespace

UniqueIdFields newUniqueId(const std::string& commId, const std::string& ifname) {
  UniqueIdFields id;
  if (!commId.empty()) {
    id.root = parseCommId(commId);
    // Every rank derives the same token from the same setting: it tells jobs apart, it is no
    // secret (anyone who can read the environment can read it).
    uint64_t a = fnv(kFnvBasis, commId.data(), commId.size());
    uint64_t b = fnv(a ^ 0x9E3779B97F4A7C15ull, commId.data(), commId.size());
    std::memcpy(id.token, &a, 8);
    std::memcpy(id.token + 8, &b, 8);
    return id;
  }
  std::vector<uint32_t> addrs = localAddresses(ifname);
  if (addrs.empty())
    fail(priocclSystemError, "priocclGetUniqueId: no IPv4 interface is up",
         ifname.empty() ? "" : concat(" that PRIOCCL_SOCKET_IFNAME='", ifname, "' lets through"),
         " (or set PRIOCCL_COMM_ID=host:port)");
  auto& v4 = reinterpret_cast<sockaddr_in&>(id.root);
  v4.sin_family = AF_INET;
  v4.sin_addr.s_addr = addrs.front();
  int fd = listenOn(id.root);
  id.root = boundAddress(fd);
  std::random_device random;
  for (size_t i = 0; i < kTokenBytes; i += 4) {
    uint32_t r = random();
    std::memcpy(id.token + i, &r, 4);
  }
  std::lock_guard<std::mutex> lock(g_listenersMutex);
  g_listeners[tokenKey(id.token)] = fd;
  return id;
}

uint64_t TcpBootstrap::hostKey() {
  std::string bootId;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> bootId;
  char ipc[128] = {};
  ssize_t n = ::readlink("/proc/self/ns/ipc", ipc, sizeof ipc - 1);
  std::string host = hostName();
  uint64_t h = fnv(kFnvBasis, bootId.data(), bootId.size());
  h = fnv(h, ipc, n > 0 ? static_cast<size_t>(n) : 0);
  return fnv(h, host.data(), host.size());
}

TcpBootstrap::TcpBootstrap(const UniqueIdFields& id, int rank, int size,
                           std::chrono::milliseconds timeout, int listenFd,
                           std::vector<int> processIds)
    : rank_(rank),
      size_(size),
      timeout_(timeout),
      id_(id),
      processIds_(std::move(processIds)),
      listenFd_(listenFd),
      fds_(static_cast<size_t>(size), -1),
      peers_(static_cast<size_t>(size), -1),
      table_(static_cast<size_t>(size)) {
  if (size < 1 || rank < 0 || rank >= size)
    fail(priocclInvalidArgument, "bootstrap: rank ", rank, " is not in 0..", size - 1, " (nranks ",
         size, ")");
  if (processIds_.empty())
    for (int r = 0; r < size; ++r) processIds_.push_back(r);
  try {
    if (rank == 0)
      joinAsRoot();
    else
      joinAsMember();
  } catch (...) {
    closeAll();
    throw;
  }
}

TcpBootstrap::~TcpBootstrap() {
  closeAll();
}

void TcpBootstrap::closeAll() {
  for (int* fd : {&listenFd_, &rootFd_})
    if (*fd >= 0) ::close(std::exchange(*fd, -1));
  for (auto* list : {&fds_, &peers_})
    for (int& fd : *list)
      if (fd >= 0) ::close(std::exchange(fd, -1));
}

namespace {

std::string peerText(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "an unknown peer";
  return addressText(a);
}

}  // namespace

// When `f` (checked by frameProblem) is a kFailed frame: reads its text (rank `from`'s verdict,
// at most 4 KiB) and raises it as the error of `what`.
static void raiseVerdict(int fd, const Frame& f, const char* what, int from,
                         Clock::time_point deadline) {
  if (f.type != static_cast<uint16_t>(FrameType::kFailed)) return;
  std::string text(std::min<uint64_t>(f.bytes, 4096), '\0');
  recvAll(fd, text.data(), text.size(), deadline);
  fail(priocclRemoteError, "bootstrap: ", what, ": rank ", from, " says: ", text);
}

// Reads one frame of `want` from `fd` (rank `from`) within the deadline; a kFailed frame's text
// is raised as rank 0's verdict. Throws naming the call and the rank otherwise.
static Frame readFrame(int fd, FrameType want, const UniqueIdFields& id, int size, int from,
                       const char* what, Clock::time_point deadline) {
  Frame f;
  if (!recvAll(fd, &f, sizeof f, deadline))
    fail(priocclRemoteError, "bootstrap: ", what, ": nothing from rank ", from,
         Clock::now() >= deadline ? " before the deadline (PRIOCCL_TIMEOUT_S)"
                                  : " (its connection closed: the process ended?)");
  std::string problem = frameProblem(f, want, id, size);
  if (!problem.empty())
    fail(priocclRemoteError, "bootstrap: ", what, ": rank ", from, " sent ", problem);
  raiseVerdict(fd, f, what, from, deadline);
  return f;
}

// A connection to rank 0's listener that has not said who it is yet.
struct TcpBootstrap::PendingHello {
  int fd;
  Clock::time_point until;
  size_t got = 0;
  unsigned char buf[kHelloBytes] = {};
};

namespace {

void drop(int fd, const std::string& why) {
  detail::log(LogLevel::kWarn, "bootstrap: dropped a connection from ", peerText(fd), ": ", why);
  ::close(fd);
}

constexpr char kNoFrame[] = "no opening message in time (a probe, or a stray)";

// One connection from a listener that the caller polled, and its opening frame, read within
// kHelloTimeout (and `end`): the socket (-1: nothing to accept), with `*why` empty when the frame
// is a `want` of job `id` of `size` ranks, else why it must be dropped (kNoFrame: it sent none).
int acceptFrame(int listenFd, FrameType want, const UniqueIdFields& id, int size,
                Clock::time_point end, Frame* f, std::string* why) {
  int fd = ::accept4(listenFd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return -1;
  noDelay(fd);
  *why = recvAll(fd, f, sizeof *f, std::min(end, Clock::now() + kHelloTimeout))
             ? frameProblem(*f, want, id, size)
             : kNoFrame;
  if (why->empty() && f->type != static_cast<uint16_t>(want))
    *why = "a verdict where a request was expected";
  return fd;
}

}  // namespace

int TcpBootstrap::listenAnywhere() const {
  sockaddr_storage any{};
  any.ss_family = id_.root.ss_family;
  return listenOn(any);
}

void TcpBootstrap::joinAsRoot() {
  if (listenFd_ < 0) listenFd_ = takeListener(id_.token);  // made by this process's GetUniqueId
  if (listenFd_ < 0) listenFd_ = listenOn(id_.root);       // PRIOCCL_COMM_ID, or another process
  table_[0] = entryOf(id_.root, portOf(boundAddress(listenFd_)), hostKey());
  std::vector<PendingHello> pending;
  int arrived = 1;
  const auto end = deadline();
  while (arrived < size_) {
    if (Clock::now() >= end || setupCancelled()) giveUp(pending);
    std::vector<pollfd> ready{{listenFd_, POLLIN, 0}};
    for (const PendingHello& p : pending) ready.push_back({p.fd, POLLIN, 0});
    ::poll(ready.data(), ready.size(), 100);  // then every connection is read without blocking
    for (;;) {
      int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;
      noDelay(fd);
      pending.push_back({fd, Clock::now() + kHelloTimeout, 0, {}});
    }
    for (size_t i = 0; i < pending.size();) {
      std::string why;
      if (readHello(pending[i], &why)) {
        ++arrived;
      } else if (!why.empty()) {
        drop(pending[i].fd, why);
      } else {
        ++i;
        continue;
      }
      pending.erase(pending.begin() + static_cast<long>(i));
    }
  }
  for (PendingHello& p : pending) drop(p.fd, "the job is complete");
  // A listener kept open at the id's address would take the next job's connections at the same
  // PRIOCCL_COMM_ID. Rank 0 listens on, as every rank does, at a port of its own: nobody dials it
  // for send/recv (the lower rank dials), but a shrink meets there when rank 0 remains.
  ::close(std::exchange(listenFd_, -1));
  listenFd_ = listenAnywhere();
  table_[0].port = portOf(boundAddress(listenFd_));
  Frame t = frameOf(FrameType::kTable, id_, 0, size_, table_.size() * sizeof(Entry));
  for (int r = 1; r < size_; ++r)
    if (!sendFramed(fds_[r], t, table_.data(), table_.size() * sizeof(Entry), end))
      fail(priocclRemoteError, "bootstrap: rank ", r, " went away before it got the table");
}

bool TcpBootstrap::readHello(PendingHello& p, std::string* why) {
  ssize_t r = ::recv(p.fd, p.buf + p.got, sizeof p.buf - p.got, MSG_DONTWAIT);
  if (r > 0) p.got += static_cast<size_t>(r);
  if (r == 0) *why = concat("closed after ", p.got, " of the hello's ", sizeof p.buf, " bytes");
  if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) *why = errnoText(errno);
  if (why->empty() && p.got == sizeof p.buf) {
    std::vector<bool> taken(fds_.size());
    for (size_t k = 0; k < fds_.size(); ++k) taken[k] = fds_[k] >= 0;
    int from = -1;
    Entry e;
    *why = helloProblem(p.buf, id_, size_, taken, &from, &e);
    if (why->empty()) {
      // The address rank 0 sees the connection come from: the one that reaches that rank.
      sockaddr_storage peer{};
      socklen_t len = sizeof peer;
      ::getpeername(p.fd, reinterpret_cast<sockaddr*>(&peer), &len);
      table_[from] = entryOf(peer, e.port, e.hostKey);
      fds_[from] = p.fd;
      return true;
    }
  }
  if (why->empty() && Clock::now() >= p.until)
    *why = concat("no valid hello within ", kHelloTimeout.count(), " s");
  return false;
}

void TcpBootstrap::giveUp(std::vector<PendingHello>& pending) {
  std::string missing;
  for (int r = 1; r < size_; ++r)
    if (fds_[r] < 0) missing += concat(missing.empty() ? "" : ", ", r);
  for (PendingHello& p : pending) drop(p.fd, "the job gave up waiting");
  pending.clear();
  std::string text =
      setupCancelled()
          ? concat("rank 0's creation was cancelled (priocclCommInitCancel) while rank(s) [",
                   missing, "] of ", size_, " had not arrived")
          : concat("rank(s) [", missing, "] of ", size_, " did not arrive within ",
                   timeout_.count() / 1000.0, " s (PRIOCCL_TIMEOUT_S); rank 0 listens at ",
                   addressText(id_.root));
  // Those that arrived hear why, so that they fail with the same message, naming the missing.
  Frame f = frameOf(FrameType::kFailed, id_, 0, size_, text.size());
  const auto until = Clock::now() + std::chrono::seconds(1);
  for (int r = 1; r < size_; ++r)
    if (fds_[r] >= 0) sendFramed(fds_[r], f, text.data(), text.size(), until);
  fail(priocclTimeout, "bootstrap: ", text);
}

void TcpBootstrap::joinAsMember() {
  const auto end = deadline();
  if (listenFd_ < 0) listenFd_ = listenAnywhere();
  // A connection that closes before rank 0 says anything was taken by a listener that is going
  // away (the previous job's at the same PRIOCCL_COMM_ID, or a rank 0 that restarts): dial again
  // until the deadline.
  auto pause = std::chrono::milliseconds(10);
  for (;;) {
    std::string error;
    rootFd_ = dial(id_.root, end, &error);
    if (rootFd_ < 0)
      fail(priocclTimeout, "bootstrap: rank ", rank_, " of ", size_, " cannot reach rank 0 at ",
           addressText(id_.root), " within ", timeout_.count() / 1000.0,
           " s (PRIOCCL_TIMEOUT_S): ", error);
    Entry mine = entryOf(boundAddress(rootFd_), portOf(boundAddress(listenFd_)), hostKey());
    Frame hello = frameOf(FrameType::kHello, id_, rank_, size_, sizeof mine);
    Frame t;
    // Rank 0 waits up to the same deadline for the others; its verdict may come just after it.
    if (sendFramed(rootFd_, hello, &mine, sizeof mine, end) &&
        recvAll(rootFd_, &t, sizeof t, end + kVerdictGrace)) {
      std::string problem = frameProblem(t, FrameType::kTable, id_, size_);
      if (!problem.empty()) fail(priocclRemoteError, "bootstrap: joining: rank 0 sent ", problem);
      raiseVerdict(rootFd_, t, "joining", 0, end + kVerdictGrace);
      if (t.bytes != table_.size() * sizeof(Entry))
        fail(priocclRemoteError, "bootstrap: rank 0's table is ", t.bytes, " bytes, not ",
             table_.size() * sizeof(Entry));
      if (!recvAll(rootFd_, table_.data(), t.bytes, end + kVerdictGrace))
        fail(priocclRemoteError, "bootstrap: rank 0's table stopped halfway");
      return;
    }
    ::close(std::exchange(rootFd_, -1));
    if (setupCancelled())
      fail(priocclInvalidUsage, "bootstrap: rank ", rank_, " of ", size_,
           ": the creation was cancelled (priocclCommInitCancel)");
    if (Clock::now() + pause >= end)
      fail(priocclTimeout, "bootstrap: rank ", rank_, " of ", size_, ": rank 0 at ",
           addressText(id_.root), " closed every connection without an answer within ",
           timeout_.count() / 1000.0,
           " s (PRIOCCL_TIMEOUT_S; is another job using that address, "
           "or rank ",
           rank_, " taken twice?)");
    napUnlessCancelled(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
}

std::vector<std::vector<char>> TcpBootstrap::allGather(const void* data, size_t bytes) {
  const size_t p = static_cast<size_t>(size_);
  std::vector<std::vector<char>> parts(p);
  const auto end = deadline();
  const char* at = static_cast<const char*>(data);
  if (rank_ != 0) {
    Frame g = frameOf(FrameType::kGather, id_, rank_, size_, bytes);
    if (!sendFramed(rootFd_, g, at, bytes, end))
      fail(priocclRemoteError, "bootstrap: allGather: rank 0 went away");
    Frame r = readFrame(rootFd_, FrameType::kGathered, id_, size_, 0, "allGather", end);
    std::vector<char> all(r.bytes);
    if (!recvAll(rootFd_, all.data(), all.size(), end))
      fail(priocclRemoteError, "bootstrap: allGather: rank 0's answer is cut short");
    if (!parseGathered(all, p, &parts))
      fail(priocclRemoteError, "bootstrap: allGather: rank 0's answer is inconsistent");
    return parts;
  }
  parts[0].assign(at, at + bytes);
  size_t total = p * sizeof(uint64_t) + bytes;
  for (int r = 1; r < size_; ++r) {
    Frame g = readFrame(fds_[r], FrameType::kGather, id_, size_, r, "allGather", end);
    parts[r].resize(g.bytes);
    if (!recvAll(fds_[r], parts[r].data(), g.bytes, end))
      fail(priocclRemoteError, "bootstrap: allGather: rank ", r, "'s part is cut short");
    total += g.bytes;
  }
  std::vector<char> all;
  all.reserve(total);
  for (const auto& part : parts) {
    uint64_t n = part.size();
    all.insert(all.end(), reinterpret_cast<char*>(&n), reinterpret_cast<char*>(&n) + sizeof n);
  }
  for (const auto& part : parts) all.insert(all.end(), part.begin(), part.end());
  Frame answer = frameOf(FrameType::kGathered, id_, 0, size_, all.size());
  for (int r = 1; r < size_; ++r)
    if (!sendFramed(fds_[r], answer, all.data(), all.size(), end))
      fail(priocclRemoteError, "bootstrap: allGather: rank ", r, " went away");
  return parts;
}

void TcpBootstrap::allReduceMax(std::vector<double>& values) {
  auto parts = allGather(values.data(), values.size() * sizeof(double));
  for (size_t k = 0; k < parts.size(); ++k) {
    if (parts[k].size() != values.size() * sizeof(double))
      fail(priocclInvalidUsage, "bootstrap: allReduceMax: rank ", k, " gave ",
           parts[k].size() / sizeof(double), " values, this rank ", values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      double v = 0;
      std::memcpy(&v, parts[k].data() + i * sizeof v, sizeof v);
      values[i] = std::max(values[i], v);
    }
  }
}

void TcpBootstrap::barrier() {
  allGather(nullptr, 0);
}

std::vector<char> TcpBootstrap::sameHost() {
  std::vector<char> same(table_.size());
  for (size_t r = 0; r < table_.size(); ++r)
    same[r] = table_[r].hostKey == table_[static_cast<size_t>(rank_)].hostKey;
  return same;
}

int TcpBootstrap::peerFd(int peer) {
  if (peer < 0 || peer >= size_ || peer == rank_)
    fail(priocclInvalidArgument, "bootstrap: peer ", peer, " is not another rank (this is rank ",
         rank_, " of ", size_, ")");
  if (peers_[peer] >= 0) return peers_[peer];
  if (rank_ > peer) {
    acceptPeer(peer);
    return peers_[peer];
  }
  const sockaddr_storage at = addressOf(table_[peer]);
  std::string error;
  int fd = dial(at, deadline(), &error);
  if (fd < 0)
    fail(priocclRemoteError, "bootstrap: rank ", rank_, " cannot reach rank ", peer, " at ",
         addressText(at), ": ", error);
  Frame f = frameOf(FrameType::kPeer, id_, rank_, size_, 0);
  if (!sendAll(fd, &f, sizeof f, deadline())) {
    ::close(fd);
    fail(priocclRemoteError, "bootstrap: rank ", peer, " closed the connection at once");
  }
  peers_[peer] = fd;
  return fd;
}

void TcpBootstrap::acceptPeer(int peer) {
  const auto end = deadline();
  while (peers_[peer] < 0) {
    if (!waitFor(listenFd_, POLLIN, end))
      fail(priocclRemoteError, "bootstrap: rank ", peer, " did not connect to rank ", rank_,
           " within ", timeout_.count() / 1000.0, " s (PRIOCCL_TIMEOUT_S)");
    Frame f;
    std::string why;
    int fd = acceptFrame(listenFd_, FrameType::kPeer, id_, size_, end, &f, &why);
    if (fd < 0) continue;
    if (why.empty() && (f.rank >= rank_ || peers_[f.rank] >= 0))
      why = concat("rank ", f.rank, " may not dial rank ", rank_, " now");
    if (!why.empty()) {
      drop(fd, why);
      continue;
    }
    peers_[f.rank] = fd;
  }
}

void TcpBootstrap::exchange(int toFd, const void* out, int fromFd, void* in, size_t bytes,
                            const char* what, int to, int from) {
  const auto end = deadline();
  Frame head = frameOf(FrameType::kData, id_, rank_, size_, bytes), got;
  const size_t total = sizeof(Frame) + bytes;
  size_t sent = toFd < 0 ? total : 0, received = fromFd < 0 ? total : 0;
  // One piece of a framed message: its header first, then its data.
  auto piece = [&](size_t done, void* header, void* data, size_t* length) -> char* {
    if (done < sizeof(Frame)) {
      *length = sizeof(Frame) - done;
      return static_cast<char*>(header) + done;
    }
    *length = total - done;
    return static_cast<char*>(data) + (done - sizeof(Frame));
  };
  while (sent < total || received < total) {
    pollfd p[2];
    nfds_t n = 0;
    if (sent < total) p[n++] = {toFd, POLLOUT, 0};
    if (received < total) p[n++] = {fromFd, POLLIN, 0};
    if (setupCancelled())
      fail(priocclInvalidUsage, "bootstrap: ", what, " on rank ", rank_,
           ": the creation was cancelled (priocclCommInitCancel)");
    if (Clock::now() >= end)
      fail(priocclRemoteError, "bootstrap: ", what, ": rank ", sent < total ? to : from,
           " did not take part within ", timeout_.count() / 1000.0, " s (PRIOCCL_TIMEOUT_S)");
    ::poll(p, n, 100);
    size_t length = 0;
    if (sent < total) {
      char* at = piece(sent, &head, const_cast<void*>(out), &length);
      ssize_t r = ::send(toFd, at, length, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (r > 0) sent += static_cast<size_t>(r);
      if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        fail(priocclRemoteError, "bootstrap: ", what, ": to rank ", to, ": ", errnoText(errno));
    }
    if (received < total) {
      char* at = piece(received, &got, in, &length);
      ssize_t r = ::recv(fromFd, at, length, MSG_DONTWAIT);
      if (r == 0)
        fail(priocclRemoteError, "bootstrap: ", what, ": rank ", from,
             " closed its connection (the process ended?)");
      if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        fail(priocclRemoteError, "bootstrap: ", what, ": from rank ", from, ": ", errnoText(errno));
      if (r > 0) {
        bool headerDone =
            received < sizeof(Frame) && received + static_cast<size_t>(r) >= sizeof(Frame);
        received += static_cast<size_t>(r);
        if (headerDone) {
          std::string problem = frameProblem(got, FrameType::kData, id_, size_);
          if (problem.empty() && got.bytes != bytes)
            problem = concat("a message of ", got.bytes, " bytes where ", bytes, " were expected");
          if (!problem.empty())
            fail(priocclRemoteError, "bootstrap: ", what, ": rank ", from, " sent ", problem);
        }
      }
    }
  }
}

void TcpBootstrap::send(int peer, const void* data, size_t bytes) {
  exchange(peerFd(peer), data, -1, nullptr, bytes, "send", peer, -1);
}

void TcpBootstrap::recv(int peer, void* data, size_t bytes) {
  exchange(-1, nullptr, peerFd(peer), data, bytes, "recv", -1, peer);
}

void TcpBootstrap::sendRecv(int to, const void* out, int from, void* in, size_t bytes) {
  // The connections this rank dials first: dialing never waits for the peer, accepting does, so
  // a ring of ranks each accepting first would wait for each other.
  if (to > rank_) peerFd(to);
  if (from > rank_) peerFd(from);
  exchange(peerFd(to), out, peerFd(from), in, bytes, "sendRecv", to, from);
}

std::unique_ptr<Bootstrap> TcpBootstrap::split(int color, int key) {
  // The new group's listener is made first: its port travels with the colour.
  int fd = color >= 0 ? listenAnywhere() : -1;
  struct Ask {
    int32_t color, key, rank;
    uint16_t port, pad;
  };
  Ask mine{color, key, rank_, fd >= 0 ? portOf(boundAddress(fd)) : uint16_t{0}, 0};
  std::vector<std::vector<char>> all;
  try {
    all = allGather(&mine, sizeof mine);
  } catch (...) {
    if (fd >= 0) ::close(fd);
    throw;
  }
  const uint64_t serial = splits_++;  // every rank splits in the same order
  if (color < 0) return nullptr;
  std::vector<Ask> members;
  for (const auto& part : all) {
    Ask a{};
    std::memcpy(&a, part.data(), std::min(part.size(), sizeof a));
    if (a.color == color) members.push_back(a);
  }
  std::sort(members.begin(), members.end(), [](const Ask& x, const Ask& y) {
    return x.key != y.key ? x.key < y.key : x.rank < y.rank;
  });
  int newRank = 0;
  std::vector<int> ids;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].rank == rank_) newRank = static_cast<int>(i);
    ids.push_back(processIds_[static_cast<size_t>(members[i].rank)]);
  }
  // Each group's own token: a connection meant for one group is never taken by another.
  UniqueIdFields child = childOf(id_, {{&serial, sizeof serial}, {&color, sizeof color}});
  Entry root = table_[static_cast<size_t>(members[0].rank)];
  root.port = members[0].port;
  child.root = addressOf(root);
  return std::make_unique<TcpBootstrap>(child, newRank, static_cast<int>(members.size()), timeout_,
                                        fd, std::move(ids));
}

std::unique_ptr<Bootstrap> TcpBootstrap::shrink(const std::vector<int>& excluded) {
  std::vector<char> out(static_cast<size_t>(size_), 0);
  for (int r : excluded) {
    if (r < 0 || r >= size_)
      fail(priocclInvalidArgument, "shrink: excluded rank ", r, " is not in 0..", size_ - 1);
    if (out[static_cast<size_t>(r)])
      fail(priocclInvalidArgument, "shrink: rank ", r, " is excluded twice");
    out[static_cast<size_t>(r)] = 1;
  }
  if (out[static_cast<size_t>(rank_)])
    fail(priocclInvalidArgument, "shrink: rank ", rank_,
         " excludes itself (an excluded rank does not call shrink)");
  std::vector<int> members;
  for (int r = 0; r < size_; ++r)
    if (!out[static_cast<size_t>(r)]) members.push_back(r);
  const int newSize = static_cast<int>(members.size());
  const int newRank =
      static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
  const uint64_t serial = shrinks_++;
  const char kind[] = "shrink";
  UniqueIdFields child =
      childOf(id_, {{kind, sizeof kind}, {&serial, sizeof serial}, {out.data(), out.size()}});
  if (newRank == 0) {
    int fd = listenAnywhere();
    const uint16_t port = portOf(boundAddress(fd));
    try {
      if (newSize > 1) answerShrink(child, members, port);
    } catch (...) {
      ::close(fd);
      throw;
    }
    return formGroup(child, members, port, fd);
  }
  return formGroup(child, members, askShrink(child, members[0], newRank, newSize), -1);
}

std::unique_ptr<Bootstrap> TcpBootstrap::formGroup(const UniqueIdFields& child,
                                                   const std::vector<int>& members, uint16_t port,
                                                   int listenFd) {
  std::vector<int> ids;
  for (int r : members) ids.push_back(processIds_[static_cast<size_t>(r)]);
  const int newRank =
      static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
  UniqueIdFields id = child;
  Entry root = table_[static_cast<size_t>(members[0])];
  root.port = port;
  id.root = addressOf(root);
  return std::make_unique<TcpBootstrap>(id, newRank, static_cast<int>(members.size()), timeout_,
                                        listenFd, std::move(ids));
}

namespace {

// Whether a process still listens at `at`: a refused connection says it is gone (its kernel
// closed the listener with it); 1 alive, 0 gone, -1 not known yet (no answer within `wait`: a
// host that is down, or a busy one).
int probe(const sockaddr_storage& at, std::chrono::milliseconds wait) {
  int err = 0;
  int fd = connectOnce(at, Clock::now() + wait, &err);
  if (fd >= 0) ::close(fd);
  return fd >= 0 ? 1 : err == ECONNREFUSED ? 0 : -1;
}

}  // namespace

std::unique_ptr<Bootstrap> TcpBootstrap::shrinkToLive() {
  const uint64_t serial = shrinks_++;
  const char kind[] = "live";
  const UniqueIdFields meeting = childOf(id_, {{kind, sizeof kind}, {&serial, sizeof serial}});
  const auto end = deadline();
  std::vector<int> members;
  uint16_t port = 0;
  int listenFd = -1;
  int leader = 0;
  while (leader < rank_ && !askToLead(meeting, leader, end, &members, &port)) ++leader;
  if (leader == rank_) {  // every rank below is gone: this one leads
    listenFd = listenAnywhere();
    port = portOf(boundAddress(listenFd));
    try {
      members = leadLiveGroup(meeting, port, end);
    } catch (...) {
      ::close(listenFd);
      throw;
    }
  }
  const UniqueIdFields child = childOf(meeting, {{members.data(), members.size() * sizeof(int)}});
  return formGroup(child, members, port, listenFd);
}

bool TcpBootstrap::askToLead(const UniqueIdFields& meeting, int leader, Clock::time_point end,
                             std::vector<int>* members, uint16_t* port) {
  const sockaddr_storage at = addressOf(table_[static_cast<size_t>(leader)]);
  int fd = -1;
  while (fd < 0) {
    if (setupCancelled() || Clock::now() >= end)
      fail(priocclRemoteError, "shrink: rank ", rank_, " could not tell whether rank ", leader,
           " at ", addressText(at), " is alive within ", timeout_.count() / 1000.0,
           " s (PRIOCCL_TIMEOUT_S)");
    int err = 0;
    fd = connectOnce(at, std::min(end, Clock::now() + std::chrono::seconds(1)), &err);
    if (fd < 0 && err == ECONNREFUSED) return false;  // nobody listens there: gone
  }
  // Rank `leader` answers once it leads, which may take until its own deadline (it waits for
  // every rank above it that is alive but has not asked), so this one waits a grace longer; a
  // connection closed unanswered means it died (or gave up) meanwhile.
  Frame ask = frameOf(FrameType::kLive, meeting, rank_, size_, 0), got;
  bool answered =
      sendAll(fd, &ask, sizeof ask, end) && recvAll(fd, &got, sizeof got, end + kVerdictGrace);
  if (!answered) {
    char byte;
    const bool closed =
        ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0 || errno == ECONNRESET || errno == EPIPE;
    ::close(fd);
    if (!closed)
      fail(priocclRemoteError, "shrink: rank ", leader, " did not answer rank ", rank_, " within ",
           timeout_.count() / 1000.0, " s (PRIOCCL_TIMEOUT_S) and a grace");
    return false;
  }
  std::string problem = frameProblem(got, FrameType::kLiveGroup, meeting, size_);
  std::vector<char> payload;
  if (problem.empty() && (got.bytes < sizeof(uint16_t) ||
                          got.bytes > sizeof(uint16_t) + static_cast<size_t>(size_) * sizeof(int) ||
                          (got.bytes - sizeof(uint16_t)) % sizeof(int) != 0))
    problem = concat("a group of ", got.bytes, " bytes");
  if (problem.empty()) {
    payload.resize(got.bytes);
    if (!recvAll(fd, payload.data(), payload.size(), Clock::now() + kHelloTimeout))
      problem = "half a group";
  }
  ::close(fd);
  if (!problem.empty())
    fail(priocclRemoteError, "shrink: rank ", leader, " (leading) sent ", problem);
  std::memcpy(port, payload.data(), sizeof *port);
  members->resize((payload.size() - sizeof(uint16_t)) / sizeof(int));
  std::memcpy(members->data(), payload.data() + sizeof(uint16_t), members->size() * sizeof(int));
  bool valid = !members->empty() && (*members)[0] == leader;
  for (size_t i = 1; i < members->size() && valid; ++i)
    valid = (*members)[i] > (*members)[i - 1] && (*members)[i] < size_;
  if (!valid || std::find(members->begin(), members->end(), rank_) == members->end())
    fail(priocclRemoteError, "shrink: rank ", leader, " (leading) sent members [",
         detail::commaList(*members), "], which are not ranks in order from it with rank ", rank_);
  return true;
}

std::vector<int> TcpBootstrap::leadLiveGroup(const UniqueIdFields& meeting, uint16_t port,
                                             Clock::time_point end) {
  // Every rank below this one was found gone by the caller; each above is in (it asked), gone
  // (its listener refuses), or unknown until it asks, or until the deadline leaves it out.
  enum State { kUnknown, kIn, kGone };
  std::vector<State> state(static_cast<size_t>(size_), kUnknown);
  std::vector<int> fds(static_cast<size_t>(size_), -1);
  for (int r = 0; r <= rank_; ++r) state[static_cast<size_t>(r)] = r == rank_ ? kIn : kGone;
  auto unknown = [&] { return std::count(state.begin(), state.end(), kUnknown); };
  auto closeAsked = [&] {
    for (int& fd : fds)
      if (fd >= 0) ::close(std::exchange(fd, -1));
  };
  try {
    auto nextProbe = Clock::now();
    while (unknown() > 0 && Clock::now() < end) {
      if (setupCancelled())
        fail(priocclInvalidUsage, "shrink: rank ", rank_, ": cancelled (priocclCommInitCancel)");
      if (Clock::now() >= nextProbe) {
        for (int r = rank_ + 1; r < size_; ++r)
          if (state[static_cast<size_t>(r)] == kUnknown &&
              probe(addressOf(table_[static_cast<size_t>(r)]), std::chrono::milliseconds(50)) == 0)
            state[static_cast<size_t>(r)] = kGone;
        nextProbe = Clock::now() + std::chrono::milliseconds(100);
      }
      if (unknown() == 0 ||
          !waitFor(listenFd_, POLLIN, std::min(end, Clock::now() + std::chrono::milliseconds(100))))
        continue;
      Frame f;
      std::string why;
      int fd = acceptFrame(listenFd_, FrameType::kLive, meeting, size_, end, &f, &why);
      if (fd < 0) continue;
      if (why.empty() && (state[static_cast<size_t>(f.rank)] == kIn || f.rank <= rank_))
        why = concat("rank ", f.rank, " may not join rank ", rank_, "'s group now");
      if (!why.empty()) {
        if (why == kNoFrame)
          ::close(fd);  // the probes of other leaders, or a caller that gave up: not news
        else
          drop(fd, why);
        continue;
      }
      state[static_cast<size_t>(f.rank)] = kIn;
      fds[static_cast<size_t>(f.rank)] = fd;
    }
    std::vector<int> members;
    for (int r = 0; r < size_; ++r)
      if (state[static_cast<size_t>(r)] == kIn) members.push_back(r);
    std::vector<char> payload(sizeof port + members.size() * sizeof(int));
    std::memcpy(payload.data(), &port, sizeof port);
    std::memcpy(payload.data() + sizeof port, members.data(), members.size() * sizeof(int));
    Frame answer = frameOf(FrameType::kLiveGroup, meeting, rank_, size_, payload.size());
    // A member that died since it asked fails the new group's join, naming it.
    for (int r : members)
      if (fds[static_cast<size_t>(r)] >= 0)
        sendFramed(fds[static_cast<size_t>(r)], answer, payload.data(), payload.size(),
                   Clock::now() + kHelloTimeout);
    closeAsked();
    if (unknown() > 0 || members.size() < static_cast<size_t>(size_))
      detail::log(LogLevel::kInfo, "shrink: rank ", rank_, " leads ranks [",
                  detail::commaList(members), "] of ", size_);
    return members;
  } catch (...) {
    closeAsked();
    throw;
  }
}

void TcpBootstrap::answerShrink(const UniqueIdFields& child, const std::vector<int>& members,
                                uint16_t port) {
  // This rank's listener is where the others' tables say it is; nothing else accepts on it now
  // (this group's connections were made while it was created), and a stray connection, or a
  // survivor that counts other ranks out, is dropped as at any join.
  const auto end = deadline();
  const int size = static_cast<int>(members.size());
  std::vector<bool> answered(static_cast<size_t>(size), false);
  answered[0] = true;
  int left = size - 1;
  while (left > 0) {
    if (!waitFor(listenFd_, POLLIN, end)) {
      std::vector<int> missing;
      for (int r = 1; r < size; ++r)
        if (!answered[static_cast<size_t>(r)]) missing.push_back(members[static_cast<size_t>(r)]);
      fail(priocclRemoteError, "shrink: rank(s) [", detail::commaList(missing),
           "] did not reach rank ", rank_, " (the first that remains) within ",
           timeout_.count() / 1000.0,
           " s (PRIOCCL_TIMEOUT_S; did every survivor exclude the same ranks?)");
    }
    Frame f;
    std::string why;
    int fd = acceptFrame(listenFd_, FrameType::kShrink, child, size, end, &f, &why);
    if (fd < 0) continue;
    if (why.empty() && (f.rank == 0 || answered[static_cast<size_t>(f.rank)]))
      why = concat("rank ", f.rank, " of the shrunk group asked twice");
    Frame answer = frameOf(FrameType::kShrink, child, 0, size, sizeof port);
    if (why.empty() && !sendFramed(fd, answer, &port, sizeof port, end))
      why = "it closed before the answer";
    if (!why.empty()) {
      drop(fd, why);
      continue;
    }
    ::close(fd);
    answered[static_cast<size_t>(f.rank)] = true;
    --left;
  }
}

uint16_t TcpBootstrap::askShrink(const UniqueIdFields& child, int first, int rank, int size) {
  const auto end = deadline();
  const sockaddr_storage at = addressOf(table_[static_cast<size_t>(first)]);
  std::string error;
  int fd = dial(at, end, &error);
  if (fd < 0)
    fail(priocclRemoteError, "shrink: rank ", rank_, " cannot reach rank ", first,
         " (the first that remains) at ", addressText(at), " within ", timeout_.count() / 1000.0,
         " s (PRIOCCL_TIMEOUT_S): ", error, " (has it failed too? exclude it)");
  Frame ask = frameOf(FrameType::kShrink, child, rank, size, 0);
  uint16_t port = 0;
  try {
    if (!sendAll(fd, &ask, sizeof ask, end))
      fail(priocclRemoteError, "shrink: rank ", first, " at ", addressText(at),
           " closed the connection (did it exclude other ranks than rank ", rank_, " did?)");
    Frame got = readFrame(fd, FrameType::kShrink, child, size, first, "shrink", end);
    if (got.bytes != sizeof port || !recvAll(fd, &port, sizeof port, end))
      fail(priocclRemoteError, "shrink: rank ", first, "'s answer is not a port");
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return port;
}

}  // namespace prioccl
