// What the engine has handed to the transport. Every posted transfer has a record, found by its
// cookie (the transport's only handle on it) and reused once its completion has been handled.
// Beside it, the control channel: one standing receive per control peer on the top tag, and the
// buffers of control sends, kept until they leave.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "common/engine_clock.h"
#include "transport.h"

namespace prioccl::detail {

class Transfers {
 public:
  using Clock = EngineClock;
  enum class Kind : uint8_t { kDataSend, kDataRecv, kControlSend, kControlRecv };
  struct Posted {
    Kind kind;
    uint32_t lane;
    bool exact;
    int peer;
    int step;      // data: the chunk's step; control receive: index into controlPeers()
    int priority;  // data send: its chunk's scheduling priority
    uint64_t gid;  // data: the chunk
    size_t bytes;
    Clock::time_point start;  // when posted; read only with `stampStart`
  };

  // `stampStart`: read the clock for each transfer (the timeline's spans need it; nothing else
  // does, and a clock read per transfer shows in a small op's cost).
  Transfers(Transport& transport, uint64_t controlTag, std::vector<int> controlPeers,
            size_t controlBytes, bool stampStart);

  void stampStarts(bool on) { stampStart_ = on; }  // a timeline started or stopped at run time

  // Hands a transfer to the transport; returns its cookie. The record lives until release().
  uint64_t post(Kind kind, int peer, uint64_t tag, void* buf, size_t bytes,
                SendCompletion completion = SendCompletion::kEndToEnd);
  // The record of a cookie the transport reported; throws InternalError for one never posted.
  Posted& at(uint64_t cookie) {
    if (cookie >= posted_.size()) throwUnknown(cookie);
    return posted_[cookie];
  }
  void release(uint64_t cookie) { free_.push_back(cookie); }
  // Calls f(record) for every transfer posted and not released.
  template <typename F>
  void forEachPosted(F f) const {
    std::vector<bool> isFree(posted_.size(), false);
    for (uint64_t c : free_) isFree[c] = true;
    for (size_t c = 0; c < posted_.size(); ++c)
      if (!isFree[c]) f(posted_[c]);
  }

  const std::vector<int>& controlPeers() const { return controlPeers_; }
  // Posts the standing receive of every control peer (once, at start).
  void postControlReceives();
  // The message that completed control receive `i` (of controlPeers()[i]); valid until
  // repostControlReceive(i), which posts that receive again.
  const unsigned char* controlMessage(size_t i) const { return controlRecv_[i].data(); }
  void repostControlReceive(size_t i);
  // Posts `bytes` to `peer` on the control tag; the buffer is kept until controlSent(cookie).
  uint64_t sendControl(int peer, std::vector<unsigned char> bytes,
                       SendCompletion completion = SendCompletion::kEndToEnd);
  void controlSent(uint64_t cookie) { controlSends_.erase(cookie); }

  // Forgets every record (the transport's transfers were cancelled). The buffers of control
  // sends still under way are kept until endTraffic(): the transport may still read them (an
  // abort notice goes on after cancelAll, transport.h).
  void clear();
  // The transport has stopped for good (Transport::quiesce: true), or cannot promise it (false:
  // the buffers above stay allocated for the process's life, a few KiB per failed communicator).
  void endTraffic(bool transportQuiesced);

 private:
  [[noreturn]] static void throwUnknown(uint64_t cookie);

  Transport& transport_;
  const uint64_t controlTag_;
  const std::vector<int> controlPeers_;
  const size_t controlBytes_;
  bool stampStart_;
  std::vector<Posted> posted_;                                   // by cookie
  std::vector<uint64_t> free_;                                   // cookies to reuse
  std::vector<std::vector<unsigned char>> controlRecv_;          // one per control peer
  std::map<uint64_t, std::vector<unsigned char>> controlSends_;  // by cookie, until sent
  std::vector<std::vector<unsigned char>> retired_;  // control sends cleared while under way
};

}  // namespace prioccl::detail
