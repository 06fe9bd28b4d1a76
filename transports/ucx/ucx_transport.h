// Transport over UCX tag matching (ucp_tag_send_nbx / ucp_tag_recv_nbx): InfiniBand/RoCE verbs,
// shared memory and TCP, whichever UCX selects (UCX_TLS, UCX_NET_DEVICES).
//
// Why tags and not active messages: the step machines post each receive into its final place
// (the user's buffer or a scratch slot) before the data arrives, which is exactly tag matching,
// and UCX's rendezvous then moves large messages zero-copy into that buffer. Active messages
// would land in UCX's buffers and cost a copy. UCX matches on the tag alone, not on the sender,
// so the sender's rank travels in the tag's low bits.
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <deque>
#include <string>
#include <vector>

#include "bootstrap.h"
#include "transport.h"

namespace prioccl {

class UcxTransport final : public Transport {
 public:
  // Collective over `bootstrap` (exchanges worker addresses), which is used only here. `wakeup`
  // (Config::ucxWakeup): waiters may sleep on the worker's event descriptor. `netDevices`: UCX's
  // NET_DEVICES for this rank ("" leaves UCX's own choice or the user's UCX_NET_DEVICES).
  UcxTransport(Bootstrap& bootstrap, bool wakeup, const std::string& netDevices = "");
  ~UcxTransport() override;
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "ucx"; }
  const char* pollCall() const override { return "ucp_worker_progress"; }
  uint64_t tagSpace() const override { return tagSpace_; }
  void postSend(int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t cookie,
                SendCompletion completion) override;
  void postRecv(int peer, uint64_t tag, void* buf, size_t bytes, uint64_t cookie) override;
  size_t poll(std::vector<Completion>& out) override;
  size_t pending() const override { return pending_; }
  void cancelAll() override;
  bool quiesce() override;  // closes the endpoints and the worker: nothing outlives it
  int eventFd() const override { return eventFd_; }
  bool armEvents() override;

  // The UCX transports in use towards each peer (e.g. "rank 1: tcp/lo"), for logs and the README.
  std::string describeLanes() const;

 private:
  // One posted transfer; lives in slots_ (stable addresses) until poll() reports it.
  struct Slot {
    UcxTransport* owner = nullptr;
    void* request = nullptr;  // UCX's, freed once reported
    uint64_t cookie = 0;
    int peer = 0;
    size_t bytes = 0;
    size_t received = 0;
    bool isRecv = false;
    bool delivered = false;  // a send posted SendCompletion::kDelivered (an abort notice)
    std::chrono::steady_clock::time_point posted;  // when, for `delivered` sends only
    bool inUse = false;
    bool done = false;    // UCX finished it; poll() reports it
    bool orphan = false;  // withdrawn by cancelAll(): recycled when UCX finishes it, not reported
    ucs_status_t status = UCS_OK;
  };
  static void onSend(void* request, ucs_status_t status, void* user);
  static void onRecv(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                     void* user);
  static void onPeerError(void* arg, ucp_ep_h ep, ucs_status_t status);
  Slot& takeSlot(int peer, size_t bytes, uint64_t cookie, bool isRecv);
  void finish(Slot& slot, ucs_status_t status, size_t received);
  void release(Slot& slot);
  size_t orphans() const;
  size_t undeliveredNotices() const;  // SendCompletion::kDelivered sends not finished
  void close();  // everything UCX; safe on a partly built object and when closed already
  void closeWorker();
  // Creates context and worker; returns what failed ("" when all went well).
  std::string startWorker(ucp_address_t** address, size_t* length, const std::string& netDevices);
  // Collective: throws on every rank (after close()) when `failure` is set on any.
  void agree(Bootstrap& bootstrap, const std::string& failure, const char* stage);

  bool closed_ = false;
  bool wakeup_ = false;  // PRIOCCL_UCX_WAKEUP (Config::ucxWakeup)
  int rank_ = 0, size_ = 1;
  int srcBits_ = 1;
  uint64_t tagSpace_ = 0;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int eventFd_ = -1;           // the worker's (UCP_FEATURE_WAKEUP), -1 when UCX has none
  std::vector<ucp_ep_h> eps_;  // by peer rank; none to ourselves
  std::vector<std::string> peerErrors_;
  std::deque<Slot> slots_;
  std::vector<Slot*> free_;
  std::vector<Slot*> finished_;
  size_t pending_ = 0;
  bool warnedNoPeerErrors_ = false;
  bool abandoned_ = false;  // cancelAll(): the communicator failed (or is closing)
};

}  // namespace prioccl
