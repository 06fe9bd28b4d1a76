// Lets the progress thread sleep until its transport has something to report, instead of
// napping for fixed intervals, while any thread can still wake it (a new submission).
//
// Why: on oversubscribed cores a napping rank either wakes too early (wasted polls, stolen
// cycles) or too late (up to a nap's length of added latency per step). UCX offers a
// descriptor that becomes readable when its worker has progress to make.
#pragma once

#include <chrono>

namespace prioccl::detail {

class EventSleep {
 public:
  // `transportFd` < 0: no descriptor; available() is false and nothing is opened.
  explicit EventSleep(int transportFd);
  ~EventSleep();
  EventSleep(const EventSleep&) = delete;
  EventSleep& operator=(const EventSleep&) = delete;

  bool available() const { return wakeFd_ >= 0; }
  // Returns when the transport's descriptor is readable, wake() was called (since the last
  // sleep), or `limit` has passed.
  void sleep(std::chrono::microseconds limit);
  void wake();  // any thread

 private:
  int transportFd_;
  int wakeFd_ = -1;  // an eventfd, owned
};

}  // namespace prioccl::detail
