// The scheduler's rules, apart from lanes, ops and transports (docs/scheduler.md): which chunk
// with a send ready goes next, whether the credit lets its send go now, when the wire has
// stalled, and what counts as a preemption. Plain values in, decisions out: the engine posts.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <vector>

#include "common/engine_clock.h"
#include "core/credit_tuner.h"
#include "core/priority_counts.h"

namespace prioccl::detail {

class Scheduler {
 public:
  using Clock = EngineClock;

  // A chunk with a send ready. Most urgent (lowest) priority first; ties in gid order, which
  // follows the lane's op order and then chunk order, so equal priorities go in submission order.
  struct Ready {
    int priority;
    uint64_t gid;
    uint32_t lane;
    bool operator>(const Ready& o) const {
      if (priority != o.priority) return priority > o.priority;
      return gid != o.gid ? gid > o.gid : lane > o.lane;
    }
  };
  // A chunk whose send went to the transport.
  struct Sent {
    uint32_t lane = 0;
    uint64_t gid = 0;
    int priority = 0;
  };

  // Sends in flight and none completing for this long: the wire may be waiting on peers that
  // have not reached those chunks yet, so each lane's oldest chunk may send regardless of the
  // credit (the deadlock argument at the top of lane_table.h).
  static constexpr std::chrono::milliseconds kStall{2};
  // While a more urgent chunk waits on its peers, less urgent ones may use 1/kFillDivisor of the
  // credit: enough to keep the wire busy, little enough not to delay the urgent chunk's next step.
  static constexpr size_t kFillDivisor = 4;

  // The credit starts at `creditBytes` and may grow to `creditMaxBytes` while it holds the wire
  // back (credit_tuner.h); `linkBytesPerSecond` <= 0 keeps it fixed.
  explicit Scheduler(size_t creditBytes, size_t creditMaxBytes = 0, double linkBytesPerSecond = 0)
      : credit_(creditBytes, creditMaxBytes, linkBytesPerSecond) {}

  // The ready heap. Entries may go stale (the chunk posted or finished another way): the engine
  // checks the top against its chunks and pops what is stale.
  void push(const Ready& r) { ready_.push(r); }
  bool empty() const { return ready_.empty(); }
  const Ready& top() const { return ready_.top(); }
  void pop() { ready_.pop(); }

  // Chunks activated and not finished, by scheduling priority.
  void chunkActivated(int priority) { active_.add(priority, 1); }
  void chunkFinished(int priority) { active_.remove(priority, 1); }

  // Whether a chunk at `priority` may post a send now. It counts only the bytes in flight at its
  // priority or more urgent ones: less urgent chunks' bytes already went first, and waiting for
  // them to drain would add their wire time to the urgent chunk's again. Its credit is the whole
  // credit, or 1/kFillDivisor of it while a more urgent chunk is active (waiting on its peers).
  bool mayPost(int priority) const {
    const bool urgentWaiting = !active_.empty() && priority > active_.mostUrgent();
    const size_t whole = credit_.credit();
    const size_t credit = urgentWaiting ? std::max<size_t>(1, whole / kFillDivisor) : whole;
    return inflight_.atOrAbove(priority) < credit;
  }
  // A ready send waited: mayPost() said no.
  void creditHeld() { credit_.held(); }
  const CreditTuner& credit() const { return credit_; }
  // A send of `bytes` at `priority` was posted / completed (credit accounting).
  void sendPosted(int priority, size_t bytes) {
    // A stall is measured from the last completion or from when the wire became busy.
    if (inflight_.empty()) {
      lastSendDone_ = Clock::now();
      credit_.wireStarted(lastSendDone_);
    }
    inflight_.add(priority, bytes);
  }
  // Returns true when the credit changed.
  bool sendDone(int priority, size_t bytes, Clock::time_point now) {
    inflight_.remove(priority, bytes);
    lastSendDone_ = now;
    return credit_.sendDone(bytes, now);
  }
  // Any bytes in flight can hold a send back (the fill rule), so a stall is any wait with sends
  // in flight and none completing.
  bool stalled(Clock::time_point now) const {
    return !inflight_.empty() && now - lastSendDone_ > kStall;
  }

  // Records that chunk (lane, gid) sent at `priority`. Returns the chunk that sent before it
  // when that was another, less urgent one: a preemption if that chunk still has work, which
  // only the caller knows.
  std::optional<Sent> recordSend(uint32_t lane, uint64_t gid, int priority) {
    std::optional<Sent> before;
    if (hasLast_ && (last_.lane != lane || last_.gid != gid) && priority < last_.priority)
      before = last_;
    last_ = Sent{lane, gid, priority};
    hasLast_ = true;
    return before;
  }

  // Forgets everything (the communicator failed; its chunks are gone).
  void clear() {
    ready_ = {};
    active_.clear();
    inflight_.clear();
    hasLast_ = false;
  }

 private:
  CreditTuner credit_;
  std::priority_queue<Ready, std::vector<Ready>, std::greater<Ready>> ready_;
  PriorityCounts active_;    // active chunks by scheduling priority
  PriorityCounts inflight_;  // bytes of sends in flight by scheduling priority
  Clock::time_point lastSendDone_ = Clock::now();
  // The chunk of the last send posted (a plain flag, not std::optional: GCC 12 under ASan warns
  // that an engaged optional's fields may be uninitialised).
  Sent last_;
  bool hasLast_ = false;
};

}  // namespace prioccl::detail
