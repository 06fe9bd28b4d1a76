#include "common/event_sleep.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "common/log.h"

namespace prioccl::detail {

EventSleep::EventSleep(int transportFd) : transportFd_(transportFd) {
  if (transportFd_ < 0) return;
  wakeFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wakeFd_ < 0)  // not fatal: the engine naps instead
    log(LogLevel::kWarn, "eventfd failed (errno ", errno, "): progress naps instead of sleeping");
}

EventSleep::~EventSleep() {
  if (wakeFd_ >= 0) close(wakeFd_);
}

void EventSleep::sleep(std::chrono::microseconds limit) {
  pollfd fds[2] = {{transportFd_, POLLIN, 0}, {wakeFd_, POLLIN, 0}};
  timespec timeout{static_cast<time_t>(limit.count() / 1000000),
                   static_cast<long>(limit.count() % 1000000) * 1000};
  // EINTR and errors only end the sleep early; the caller polls the transport either way.
  if (ppoll(fds, 2, &timeout, nullptr) > 0 && (fds[1].revents & POLLIN)) {
    uint64_t count;
    [[maybe_unused]] ssize_t n = read(wakeFd_, &count, sizeof count);
  }
}

void EventSleep::wake() {
  if (wakeFd_ < 0) return;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wakeFd_, &one, sizeof one);
}

}  // namespace prioccl::detail
