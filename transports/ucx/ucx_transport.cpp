// UCX transport: one UCP worker per communicator, an endpoint per peer, tag send/receive with the
// sender's rank in the tag's low bits; completions gathered from UCX callbacks during poll().
#include "ucx/ucx_transport.h"

#include <ucs/debug/log_def.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "common/error.h"
#include "common/log.h"

namespace prioccl {

using detail::concat;
using detail::fail;

namespace {

constexpr uint64_t kFullMask = ~uint64_t{0};
// How long closing the endpoints may wait for data still leaving this rank, before forcing.
constexpr auto kCloseTimeout = std::chrono::seconds(2);
// How long after posting an abort notice closing a failed communicator's endpoints may wait for
// the peer to match it: an idle peer polls once per heartbeat period (at most 1 s).
constexpr auto kNoticeTimeout = std::chrono::milliseconds(1500);

// Swallows UCX's log lines while we probe for peer error handling: the refusal is expected and
// handled, and UCX would print it as an ERROR.
ucs_log_func_rc_t quietLog(const char*, unsigned, const char*, ucs_log_level_t,
                           const ucs_log_component_config_t*, const char*, va_list) {
  return UCS_LOG_FUNC_RC_STOP;
}

int bitsFor(int values) {
  int bits = 1;
  while ((1LL << bits) < values) ++bits;
  return bits;
}

// Runs `progress` until `done` or the deadline; true when done. The deadline holds even while
// UCX keeps reporting progress (a transport retrying a dead peer's connection does).
template <typename Done>
bool progressUntil(ucp_worker_h worker, Done done, std::chrono::steady_clock::duration limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    ucp_worker_progress(worker);
    if (std::chrono::steady_clock::now() > deadline) return done();
  }
  return true;
}

// Whether UCX may carry traffic between ranks of one host over shared memory, from UCX_TLS (unset
// or "all": yes; a list: when it names a shared-memory transport; "^list": unless it excludes
// them all as "sm"/"shm").
bool sharedMemoryAllowed() {
  const char* env = std::getenv("UCX_TLS");
  std::string tls = env ? env : "";
  if (tls.empty()) return true;
  bool exclude = tls[0] == '^';
  if (exclude) tls.erase(0, 1);
  bool all = false, alias = false, one = false;  // "all"; "sm"/"shm"; a shared-memory transport
  for (size_t at = 0; at <= tls.size();) {
    size_t end = std::min(tls.find(',', at), tls.size());
    std::string name = tls.substr(at, end - at);
    all |= name == "all";
    alias |= name == "sm" || name == "shm";
    one |= name == "posix" || name == "sysv" || name == "xpmem" || name == "cma" || name == "knem";
    at = end + 1;
  }
  return exclude ? !(all || alias) : all || alias || one;
}

}  // namespace

UcxTransport::UcxTransport(Bootstrap& bootstrap, bool wakeup, const std::string& netDevices)
    : wakeup_(wakeup), rank_(bootstrap.rank()), size_(bootstrap.size()) {
  srcBits_ = bitsFor(size_);
  tagSpace_ = uint64_t{1} << (64 - srcBits_);

  // Every rank must learn whether every other one got this far, or some would wait in the
  // address exchange for a rank that gave up.
  ucp_address_t* address = nullptr;
  size_t length = 0;
  std::string failure = startWorker(&address, &length, netDevices);
  agree(bootstrap, failure, "UCX set-up");

  // Every rank's worker address, gathered over the bootstrap.
  std::vector<std::vector<char>> addresses;
  try {
    addresses = bootstrap.allGather(address, length);
  } catch (...) {
    if (address) ucp_worker_release_address(worker_, address);
    close();
    throw;
  }
  if (address) ucp_worker_release_address(worker_, address);

  eps_.assign(static_cast<size_t>(size_), nullptr);
  peerErrors_.assign(static_cast<size_t>(size_), std::string());
  std::vector<char> local;
  try {
    local = bootstrap.sameHost();
  } catch (...) {
    close();
    throw;
  }
  const bool shmAllowed = sharedMemoryAllowed();
  for (int peer = 0; peer < size_ && failure.empty(); ++peer) {
    if (peer == rank_) continue;
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = reinterpret_cast<const ucp_address_t*>(addresses[peer].data());
    ucs_status_t status = UCS_ERR_UNREACHABLE;
    // Peer error handling: a peer that goes away fails the transfers to it instead of leaving
    // them pending, and UCX's network transports handle a lost connection only in this mode
    // (without it, a survivor of a killed rank over UCX_TLS=tcp sometimes died in UCX's teardown
    // of the dead endpoint). Not within a host where shared memory may carry the traffic: UCX
    // 1.13's shared-memory transports cannot report a lost peer, so asking for it would move
    // that traffic onto TCP loopback (measured: 0.36x the busbw of shared memory); there a lost
    // peer is left to the engine's timeout.
    if (!local[peer] || !shmAllowed) {
      ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = &UcxTransport::onPeerError;
      ep.err_handler.arg = this;
      ucs_log_push_handler(&quietLog);
      status = ucp_ep_create(worker_, &ep, &eps_[peer]);
      ucs_log_pop_handler();
    }
    if (status == UCS_ERR_UNREACHABLE) {
      ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
      ep.field_mask &= ~static_cast<uint64_t>(UCP_EP_PARAM_FIELD_ERR_HANDLER);
      status = ucp_ep_create(worker_, &ep, &eps_[peer]);
      if (status == UCS_OK && !local[peer] && !warnedNoPeerErrors_) {
        warnedNoPeerErrors_ = true;
        detail::log(detail::LogLevel::kInfo, "rank ", rank_,
                    ": UCX transports in use cannot report lost peers (UCX_TLS=",
                    std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "default",
                    "); endpoints without peer error handling");
      }
    }
    if (status != UCS_OK) {
      eps_[peer] = nullptr;
      failure = concat("ucp_ep_create to rank ", peer, ": ", ucs_status_string(status));
    }
  }
  agree(bootstrap, failure, "UCX endpoint creation");
}

std::string UcxTransport::startWorker(ucp_address_t** address, size_t* length,
                                      const std::string& netDevices) {
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK)
    return concat("ucp_config_read (check the UCX_* variables): ", ucs_status_string(status));
  if (!netDevices.empty()) {  // the device nearest this rank (PRIOCCL_PLACEMENT)
    status = ucp_config_modify(config, "NET_DEVICES", netDevices.c_str());
    if (status != UCS_OK) {
      ucp_config_release(config);
      return concat("ucp_config_modify(NET_DEVICES=", netDevices,
                    ") (PRIOCCL_PLACEMENT=0 leaves UCX's choice): ", ucs_status_string(status));
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
  // WAKEUP: the engine may sleep on the worker's descriptor while waiting for peers. It does
  // not change which transports UCX picks (checked with ucp_ep_print_info: sm, tcp, default).
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.estimated_num_eps = static_cast<size_t>(size_);
  status = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (status != UCS_OK) {
    context_ = nullptr;
    return concat("ucp_init: ", ucs_status_string(status));
  }
  // The engine serialises every call (progress thread or a waiting application thread).
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  status = ucp_worker_create(context_, &wp, &worker_);
  if (status != UCS_OK) {
    worker_ = nullptr;
    return concat("ucp_worker_create: ", ucs_status_string(status));
  }
  // Opt-in (PRIOCCL_UCX_WAKEUP=1) until an intermittent failure is understood: with it, the
  // preemption test over UCX_TLS=sm on 2 ranks failed in 1 of ~4 full runs (the urgent op
  // finished after the low one), and one overloaded np5 run over tcp stalled.
  if (!wakeup_) {
    eventFd_ = -1;
  } else if (ucp_worker_get_efd(worker_, &eventFd_) != UCS_OK) {
    eventFd_ = -1;  // not fatal: the engine naps between polls instead
    detail::log(detail::LogLevel::kInfo, "rank ", rank_, ": UCX worker has no event descriptor");
  }
  status = ucp_worker_get_address(worker_, address, length);
  if (status != UCS_OK) {
    *address = nullptr;
    *length = 0;
    return concat("ucp_worker_get_address: ", ucs_status_string(status));
  }
  return "";
}

void UcxTransport::agree(Bootstrap& bootstrap, const std::string& failure, const char* stage) {
  std::vector<double> failed = {failure.empty() ? 0.0 : 1.0};
  try {
    bootstrap.allReduceMax(failed);
  } catch (...) {
    close();
    throw;
  }
  if (failed[0] == 0) return;
  int myRank = rank_;
  close();
  if (!failure.empty()) fail(priocclSystemError, stage, " failed on rank ", myRank, ": ", failure);
  fail(priocclSystemError, stage, " failed on another rank (see its error)");
}

UcxTransport::~UcxTransport() {
  close();
}

bool UcxTransport::quiesce() {
  close();
  return true;
}

void UcxTransport::close() {
  if (closed_) return;
  closed_ = true;
  if (worker_) closeWorker();
  if (context_) ucp_cleanup(context_);
  context_ = nullptr;
}

void UcxTransport::closeWorker() {
  // A failed communicator's endpoints are all closed by force: nothing it sent matters any more,
  // and a flush towards a peer that cannot be reached would not finish, while UCX 1.13 asserts
  // when ucp_worker_destroy finds an endpoint with requests still pending (seen after a 20 s
  // link outage).
  const bool failed = abandoned_;
  if (failed) {
    // Its abort notices first, until kNoticeTimeout after the last was posted: closed by force
    // under them, the endpoints would drop them, and the peers would report the closed endpoint
    // instead of this rank's reason. The engine's control receives stand meanwhile, so that a
    // peer that failed too has its notice to this rank taken as well. (Where UCX reports lost
    // peers, a notice to a lost one fails at once.)
    auto now = std::chrono::steady_clock::now(), until = now;
    for (const Slot& slot : slots_)
      if (slot.inUse && slot.delivered && !slot.done)
        until = std::max(until, slot.posted + kNoticeTimeout);
    progressUntil(
        worker_, [&] { return undeliveredNotices() == 0; }, until - now);
  }
  cancelAll();
  // A clean end lets what is still in flight finish first (a forced close purges it).
  if (!failed)
    progressUntil(
        worker_, [&] { return orphans() == 0; }, kCloseTimeout);
  // Every endpoint's close at once, then one wait for them all (and for the purged transfers).
  std::vector<void*> closing;
  for (size_t peer = 0; peer < eps_.size(); ++peer) {
    if (!eps_[peer]) continue;
    // Flush: sends this rank reported complete may still be leaving it. An endpoint UCX has
    // failed (its peer is lost) has nothing left to flush: UCX wants it closed by force.
    ucp_request_param_t p{};
    if (failed || !peerErrors_[peer].empty()) {
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    }
    ucs_status_ptr_t req = ucp_ep_close_nbx(eps_[peer], &p);
    if (UCS_PTR_IS_PTR(req)) closing.push_back(req);
    eps_[peer] = nullptr;  // invalid once its close has started: never closed a second time
  }
  // A flush that cannot finish in time (a peer lost after a clean end) is left to
  // ucp_worker_destroy; a close request cannot be cancelled, nor an endpoint closed twice.
  progressUntil(
      worker_,
      [&] {
        for (void* req : closing)
          if (ucp_request_check_status(req) == UCS_INPROGRESS) return false;
        return orphans() == 0;
      },
      kCloseTimeout);
  for (void* req : closing) ucp_request_free(req);
  ucp_worker_destroy(worker_);
  worker_ = nullptr;
  eventFd_ = -1;
}

UcxTransport::Slot& UcxTransport::takeSlot(int peer, size_t bytes, uint64_t cookie, bool isRecv) {
  if (peer < 0 || peer >= size_ || peer == rank_)
    fail(priocclInternalError, "UCX transfer to invalid peer ", peer);
  Slot* s;
  if (free_.empty()) {
    slots_.emplace_back();
    s = &slots_.back();
  } else {
    s = free_.back();
    free_.pop_back();
  }
  *s = Slot{};
  s->owner = this;
  s->inUse = true;
  s->cookie = cookie;
  s->peer = peer;
  s->bytes = bytes;
  s->isRecv = isRecv;
  ++pending_;
  return *s;
}

void UcxTransport::release(Slot& slot) {
  if (slot.request) ucp_request_free(slot.request);
  slot = Slot{};
  free_.push_back(&slot);
}

size_t UcxTransport::orphans() const {
  size_t n = 0;
  for (const Slot& slot : slots_) n += slot.orphan;
  return n;
}

size_t UcxTransport::undeliveredNotices() const {
  size_t n = 0;
  for (const Slot& slot : slots_) n += slot.inUse && slot.delivered && !slot.done;
  return n;
}

void UcxTransport::finish(Slot& slot, ucs_status_t status, size_t received) {
  if (slot.orphan) {  // freeing a request inside its own callback is allowed
    release(slot);
    return;
  }
  slot.done = true;
  slot.status = status;
  slot.received = received;
  finished_.push_back(&slot);
}

void UcxTransport::onSend(void*, ucs_status_t status, void* user) {
  auto* slot = static_cast<Slot*>(user);
  slot->owner->finish(*slot, status, 0);
}

void UcxTransport::onRecv(void*, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  auto* slot = static_cast<Slot*>(user);
  slot->owner->finish(*slot, status, status == UCS_OK && info ? info->length : 0);
}

void UcxTransport::onPeerError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* self = static_cast<UcxTransport*>(arg);
  for (size_t peer = 0; peer < self->eps_.size(); ++peer)
    if (self->eps_[peer] == ep) {
      self->peerErrors_[peer] = ucs_status_string(status);
      detail::log(detail::LogLevel::kWarn, "rank ", self->rank_, ": UCX lost rank ", peer, ": ",
                  ucs_status_string(status));
    }
}

void UcxTransport::postSend(int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t cookie,
                            SendCompletion completion) {
  Slot& slot = takeSlot(peer, bytes, cookie, false);
  slot.delivered = completion == SendCompletion::kDelivered;
  if (slot.delivered) slot.posted = std::chrono::steady_clock::now();
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = &UcxTransport::onSend;
  p.user_data = &slot;
  uint64_t wireTag = (tag << srcBits_) | static_cast<uint64_t>(rank_);
  // End-to-end credit, as in the MPI transport: UCX completes an eager send once it has copied it
  // (over TCP into a socket buffer that can hold milliseconds of traffic); a synchronous send
  // completes once the receiver has matched it. On 4 hosts at 1 Gbit/s with UCX_TLS=tcp, a 1 MiB
  // urgent op under a 64 MiB op was slowed 17x in one of two runs without it.
  bool sync = completesAtReceiver(completion, bytes);
  ucs_status_ptr_t r = sync ? ucp_tag_send_sync_nbx(eps_[peer], buf, bytes, wireTag, &p)
                            : ucp_tag_send_nbx(eps_[peer], buf, bytes, wireTag, &p);
  if (UCS_PTR_IS_PTR(r))
    slot.request = r;
  else
    finish(slot, UCS_PTR_STATUS(r), 0);  // done at once (UCS_OK), or failed
}

void UcxTransport::postRecv(int peer, uint64_t tag, void* buf, size_t bytes, uint64_t cookie) {
  Slot& slot = takeSlot(peer, bytes, cookie, true);
  ucp_tag_recv_info_t info{};
  ucp_request_param_t p{};
  // Always through the callback: UCX 1.13 leaves recv_info's length at 0 when a receive
  // matches an already arrived message at once (seen here), and the length is what the engine
  // checks.
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                   UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  p.cb.recv = &UcxTransport::onRecv;
  p.user_data = &slot;
  p.recv_info.tag_info = &info;
  uint64_t wireTag = (tag << srcBits_) | static_cast<uint64_t>(peer);
  ucs_status_ptr_t r = ucp_tag_recv_nbx(worker_, buf, bytes, wireTag, kFullMask, &p);
  if (UCS_PTR_IS_PTR(r))
    slot.request = r;
  else
    finish(slot, UCS_PTR_STATUS(r), UCS_PTR_STATUS(r) == UCS_OK ? info.length : 0);
}

size_t UcxTransport::poll(std::vector<Completion>& out) {
  // Drain what UCX has ready; bounded so that one poll cannot starve the scheduler.
  for (int i = 0; i < 64 && ucp_worker_progress(worker_) != 0; ++i) {
  }
  size_t reported = 0;
  for (Slot* slot : finished_) {
    Completion c;
    c.cookie = slot->cookie;
    if (slot->status == UCS_OK) {
      c.bytes = slot->received;
    } else {
      c.ok = false;
      const std::string& lost = peerErrors_[slot->peer];
      c.peerLost = !lost.empty() || slot->status == UCS_ERR_CONNECTION_RESET ||
                   slot->status == UCS_ERR_ENDPOINT_TIMEOUT || slot->status == UCS_ERR_UNREACHABLE;
      c.code = slot->status == UCS_ERR_MESSAGE_TRUNCATED || c.peerLost ? priocclRemoteError
                                                                       : priocclSystemError;
      c.error = concat(slot->isRecv ? "receive from rank " : "send to rank ", slot->peer,
                       " failed (UCX): ", ucs_status_string(slot->status));
      if (slot->status == UCS_ERR_MESSAGE_TRUNCATED)
        c.error +=
            " (ranks disagree on the count or datatype of an op, or submitted different ops)";
      else if (!lost.empty())
        c.error += concat("; rank ", slot->peer, " is unreachable: ", lost);
    }
    out.push_back(std::move(c));
    release(*slot);
    --pending_;
    ++reported;
  }
  finished_.clear();
  return reported;
}

// Withdraws everything: receives are cancelled; what UCX still holds (a send in progress, a
// cancellation not yet delivered) becomes an orphan, recycled silently when UCX lets it go, as
// the engine has dropped its records of these transfers. An abort notice
// (SendCompletion::kDelivered) is not cancelled: it goes on, and closeWorker() waits for it.
void UcxTransport::cancelAll() {
  abandoned_ = true;
  for (Slot& slot : slots_) {
    if (!slot.inUse || slot.orphan) continue;
    if (slot.done) {
      release(slot);
    } else {
      slot.orphan = true;
      if (slot.request && !slot.delivered) ucp_request_cancel(worker_, slot.request);
    }
  }
  finished_.clear();
  pending_ = 0;
}

bool UcxTransport::armEvents() {
  // Completions gathered but not reported yet would not make the descriptor readable.
  if (eventFd_ < 0 || !finished_.empty()) return false;
  return ucp_worker_arm(worker_) == UCS_OK;  // UCS_ERR_BUSY: events wait to be progressed
}

std::string UcxTransport::describeLanes() const {
  if (size_ == 1) return "one rank: no endpoints";
  int peer = (rank_ + 1) % size_;
  char* text = nullptr;
  size_t length = 0;
  FILE* stream = open_memstream(&text, &length);
  if (!stream) return "(ucp_ep_print_info: no memory stream)";
  ucp_ep_print_info(eps_[peer], stream);
  std::fclose(stream);
  std::string result = concat("endpoint rank ", rank_, " -> ", peer, ":\n", text ? text : "");
  std::free(text);
  return result;
}

}  // namespace prioccl
