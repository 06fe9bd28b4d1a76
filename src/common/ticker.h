// A thread of its own that runs a check every `period` until the check says it is over or the
// ticker is destroyed (which stops and joins it). For watches that must not depend on any other
// thread of the library coming back: the engine's watch on a round stuck in a transport call.
#pragma once

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace prioccl::detail {

class Ticker {
 public:
  // `tick` returns false once there is nothing more to watch; `name` shows in top -H and gdb.
  Ticker(std::chrono::milliseconds period, std::function<bool()> tick, const char* name)
      : period_(period), tick_(std::move(tick)) {
    thread_ = std::thread([this, name] {
      pthread_setname_np(pthread_self(), name);
      std::unique_lock<std::mutex> lock(mutex_);
      while (!cv_.wait_for(lock, period_, [&] { return stopping_; })) {
        lock.unlock();
        bool more = tick_();
        lock.lock();
        if (!more) return;
      }
    });
  }
  ~Ticker() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;

 private:
  const std::chrono::milliseconds period_;
  const std::function<bool()> tick_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the rest is set
};

}  // namespace prioccl::detail
