// An op's completion (op.h), shared by the engine and every Request handle on the op.
#include "core/op.h"

namespace prioccl::detail {

uint64_t nextErrorSerial() {
  static std::atomic<uint64_t> serial{0};
  return ++serial;
}

void OpState::finish(priocclResult_t code, const std::string& message) {
  std::vector<Request::Callback> run;
  {
    std::lock_guard<std::mutex> lock(mutex);
    // Once only: a waiter may fail the op while the engine's thread is stuck in a transport call
    // (Engine::failStuck), and the engine fails it again should that call return.
    if (done.load(std::memory_order_relaxed)) return;
    result = code;
    error = message;
    run.swap(callbacks);
    done.store(true, std::memory_order_release);
  }
  cv.notify_all();
  if (code != priocclSuccess && errorLog) errorLog->set(message);
  for (auto& cb : run) cb(code, message);
}

}  // namespace prioccl::detail
