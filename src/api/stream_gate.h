// Stream order at a communicator's door (docs/usage.md, "Streams"): an op on device buffers
// enters the engine (is announced, matched, planned) only once the work its user queued on the
// op's CUDA stream before it has finished (OpState::fence), and every op submitted after it waits
// behind it, so that ops reach the engine in submission order (unnamed ops match by it).
//
// Why at the door and not on the device (a launch waiting for the stream's event): the order in
// which a rank's ops run is agreed between ranks (the coordinator's plan) and may put an urgent
// op before one submitted earlier. If the urgent op's stream waits for the earlier op (a held
// stream: PRIOCCL_STREAM_HOLD, priocclStreamWaitRequest), a launch that waited on the device
// would wait for an op planned after it: a deadlock. An op that enters the engine only when its
// input is ready can wait for nothing the plan puts after it.
//
// The same door holds the second op of a ragged collective (api/ragged.h) until the exchange of
// sizes it is planned from has finished (OpState::after), for the same reason: the ops behind it
// must not overtake it. Unless it is named: then it matches by its name and its place among the
// ops of that name, and its exchange may need another rank to get past an op this rank submitted
// after it, so it waits aside and the ops behind it go on, but for those of its own name.
//
// An op with nothing to wait for goes in on the caller's thread at once; the others are handed
// over by the gate's thread, which polls the first one (from 10 us to 200 us apart, or sooner when
// its bell rings) and sleeps while nothing waits.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/op.h"

namespace prioccl::detail {

class StreamGate {
 public:
  // Wakes the gate's thread from its nap: an op it holds may be ready. Rung by the op it waits
  // for when that finishes; safe to ring after the gate is gone.
  class Bell {
   public:
    void ring();
    // Sleeps up to `nap`, less if rung meanwhile (a ring before it counts).
    void nap(std::chrono::microseconds nap);

   private:
    std::mutex mutex_;
    std::condition_variable cv_;
    bool rung_ = false;
  };
  std::shared_ptr<Bell> bell() const { return bell_; }

  // `handOver(op)`: the gate's thread hands a ready op to the engine (takes the communicator's
  // lock itself; fails the op if the engine is gone).
  explicit StreamGate(std::function<void(const std::shared_ptr<OpState>&)> handOver);
  ~StreamGate();  // fails what still waits, then stops the thread
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;

  // Under the communicator's lock: true when `op` may enter the engine now (no waiting op holds
  // it, its stream has nothing left to run, and the op it comes after has finished); else it
  // waits here, and false.
  bool admit(const std::shared_ptr<OpState>& op);
  // Under the communicator's lock, by the gate's thread only: takes `op` if it is still the first
  // waiting op that may go in (nothing else takes them), so that an op admitted meanwhile cannot
  // overtake it.
  bool take(const std::shared_ptr<OpState>& op);

  // Waits until nothing waits here or `limit` has passed (never under the communicator's lock).
  // True when nothing waits.
  bool drain(std::chrono::steady_clock::duration limit);
  // Fails every waiting op with `code` and `why` (abort, destroy).
  void failAll(priocclResult_t code, const std::string& why);

 private:
  void run();

  const std::function<void(const std::shared_ptr<OpState>&)> handOver_;
  std::mutex mutex_;
  std::condition_variable cv_;  // the thread: something waits; drain: nothing does
  std::deque<std::shared_ptr<OpState>> waiting_;  // in submission order
  bool stopping_ = false;
  const std::shared_ptr<Bell> bell_ = std::make_shared<Bell>();
  std::thread thread_;  // started with the first op that waits
};

}  // namespace prioccl::detail
