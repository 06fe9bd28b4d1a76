// The credit (bytes of sends in flight at once) as the wire behaves now, not as it measured at
// creation.
//
// Sends complete end to end (transport.h): a credit byte comes back only once the peer's transport
// has taken the message, which needs the peer's process on a core. On a host whose cores are all
// busy (4 ranks training on 2 cores, or a neighbour's job) that takes milliseconds, not the
// microseconds the creation-time rule assumes, and a credit of 0.5 ms of the link leaves the link
// idle most of the time: 4 ranks of the 1 Gbit/s testbed under 4 busy loops all-reduced 8 MiB in
// 2.45 s with 64 KiB of credit, 0.18 s with 1 MiB, 0.13 s with 4 MiB (0.11 s without the loops).
// A large credit is not free either: every credit byte is queued in front of an urgent op's next
// message. So the credit grows only while it is what holds the wire back, and shrinks again once
// the wire has been busy for a while.
//
// Rules, per window of at least kWindow of busy wire (a window restarts whenever sends go in
// flight after none were, so time when this rank had nothing to send is never counted):
// - sends waited for the credit in the window and the bytes completed came to less than
//   kUnderused of the link (the rank's share of its host's NIC where hosts have several ranks,
//   chunk_runner.cpp): the credit doubles, up to `max`;
// - sends waited and the wire ran at kBusy of the link or more for kBusyWindowsToShrink windows
//   in a row: the credit halves, down to `base` (if that starves the wire, the next window
//   doubles it again: a sawtooth costing about one window in kBusyWindowsToShrink);
// - windows without a wait change nothing: the credit was not what set the pace.
// So the credit stays within [base, max], takes log2(max / base) windows to reach max, and with
// max == base (an explicit PRIOCCL_CREDIT_BYTES, or PRIOCCL_CREDIT_MAX_BYTES equal to it) never
// changes. Credit is local to a rank: it changes no bits, only when messages go.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>

#include "common/engine_clock.h"

namespace prioccl::detail {

class CreditTuner {
 public:
  using Clock = EngineClock;
  static constexpr std::chrono::milliseconds kWindow{10};
  static constexpr double kUnderused = 0.7, kBusy = 0.9;
  static constexpr int kBusyWindowsToShrink = 50;

  // `linkBytesPerSecond` <= 0 (not measured: one rank) keeps the credit at `base`.
  CreditTuner(size_t base, size_t max, double linkBytesPerSecond)
      : base_(std::max<size_t>(1, base)),
        max_(linkBytesPerSecond > 0 ? std::max(max, base_) : base_),
        link_(linkBytesPerSecond),
        credit_(base_) {}

  size_t credit() const { return credit_; }
  size_t base() const { return base_; }
  size_t max() const { return max_; }

  // A ready send waited because the credit was spent.
  void held() { held_ = true; }

  // The first send in flight after none were: a new window starts.
  void wireStarted(Clock::time_point now) {
    started_ = true;
    startWindow(now);
  }

  // A send of `bytes` completed at `now`. Returns true when the credit changed.
  bool sendDone(size_t bytes, Clock::time_point now) {
    if (max_ == base_ || !started_) return false;
    bytes_ += bytes;
    const auto elapsed = now - windowStart_;
    if (elapsed < kWindow) return false;
    const double seconds = std::chrono::duration<double>(elapsed).count();
    const double rate = static_cast<double>(bytes_) / seconds;
    const size_t before = credit_;
    if (held_ && rate < kUnderused * link_) {
      credit_ = std::min(max_, credit_ * 2);
      busyWindows_ = 0;
    } else if (held_ && rate >= kBusy * link_) {
      if (++busyWindows_ >= kBusyWindowsToShrink) {
        credit_ = std::max(base_, credit_ / 2);
        busyWindows_ = 0;
      }
    }
    startWindow(now);
    return credit_ != before;
  }

 private:
  void startWindow(Clock::time_point now) {
    windowStart_ = now;
    bytes_ = 0;
    held_ = false;
  }

  const size_t base_, max_;
  const double link_;
  size_t credit_;
  bool started_ = false, held_ = false;
  Clock::time_point windowStart_;
  size_t bytes_ = 0;
  int busyWindows_ = 0;
};

}  // namespace prioccl::detail
