#include "api/c_api_support.h"

#include "common/error.h"
#include "core/op.h"

namespace prioccl::capi {
namespace {

thread_local std::string t_lastError;    // this thread's most recent failure
thread_local uint64_t t_lastSerial = 0;  // ... and its place among all recorded failures

}  // namespace

HandleTable<Communicator, kCommHandle>& comms() {
  static HandleTable<Communicator, kCommHandle> table;
  return table;
}

HandleTable<Request, kRequestHandle>& requests() {
  static HandleTable<Request, kRequestHandle> table;
  return table;
}

HandleTable<Rows, kRowsHandle>& rowsResults() {
  static HandleTable<Rows, kRowsHandle> table;
  return table;
}

Communicator lookup(priocclComm_t comm) {
  return comms().get(comm, "comm", "is not a live communicator (destroyed or never created)");
}

void record(priocclComm_t comm, const std::string& message) {
  Communicator c;
  if (comm && comms().find(reinterpret_cast<uintptr_t>(comm), &c) && c.valid())
    c.recordError(message);
  t_lastError = message;
  t_lastSerial = detail::nextErrorSerial();
}

const std::string& lastError(uint64_t* serial) {
  *serial = t_lastSerial;
  return t_lastError;
}

}  // namespace prioccl::capi
