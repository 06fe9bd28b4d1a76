// The C++ API's Request: a handle on an op's state (core/op.h), waited on, tested, or given
// callbacks.
#include <memory>
#include <mutex>
#include <string>

#include "api/ragged.h"
#include "core/engine.h"
#include "device/device_memory.h"
#include "prioccl/prioccl.hpp"

namespace prioccl {

using detail::fail;

namespace {
detail::OpState& stateOf(const std::shared_ptr<detail::OpState>& s) {
  if (!s) fail(priocclInvalidUsage, "empty Request (default-constructed or moved from)");
  return *s;
}
void throwIfFailed(detail::OpState& s) {
  if (s.result != priocclSuccess) detail::raise(s.result, s.error);
}
}  // namespace

void Request::wait() const {
  detail::OpState& s = stateOf(state_);
  detail::driveUntilDone(s);
  std::unique_lock<std::mutex> lock(s.mutex);
  s.cv.wait(lock, [&] { return s.done.load(std::memory_order_acquire); });
  throwIfFailed(s);
}

bool Request::test() const {
  detail::OpState& s = stateOf(state_);
  if (!s.done.load(std::memory_order_acquire)) return false;
  std::lock_guard<std::mutex> lock(s.mutex);
  throwIfFailed(s);
  return true;
}

priocclResult_t Request::status(std::string* error) const {
  detail::OpState& s = stateOf(state_);
  if (!s.done.load(std::memory_order_acquire)) return priocclInProgress;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (error) *error = s.error;
  return s.result;
}

void Request::onComplete(Callback cb) const {
  detail::OpState& s = stateOf(state_);
  if (!cb) fail(priocclInvalidArgument, "onComplete needs a callable");
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.done.load(std::memory_order_acquire)) {
      s.callbacks.push_back(std::move(cb));
      return;
    }
  }
  cb(s.result, s.error);
}

void Request::streamWait(void* stream) const {
  detail::OpState& s = stateOf(state_);
  if (s.done.load(std::memory_order_acquire)) return;
  device::DeviceMemory* memory = device::current();
  if (!memory)
    fail(priocclInvalidUsage,
         "streamWait: no CUDA in this process (no stream can wait: wait for the request)");
  std::shared_ptr<device::StreamHold> held = memory->hold(stream);
  onComplete([held](priocclResult_t, const std::string&) { held->release(); });
}

const detail::RowsResult& Rows::ready() const {
  detail::OpState& s = stateOf(op_);
  if (!s.done.load(std::memory_order_acquire))
    fail(priocclInvalidUsage, "Rows: the op has not finished (wait for its request first)");
  std::lock_guard<std::mutex> lock(s.mutex);
  throwIfFailed(s);
  return *result_;
}

const void* Rows::data() const {
  return ready().data.data();
}

size_t Rows::bytes() const {
  return ready().data.size();
}

const std::vector<size_t>& Rows::rows() const {
  return ready().rows;
}

}  // namespace prioccl
