// What every C ABI file shares: handle tables (opaque ids, never raw pointers, so a destroyed
// object is reported instead of dereferenced), error recording and the exception-to-result guard.
#pragma once

#include <cstdint>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>

#include "common/error.h"
#include "prioccl/prioccl.hpp"

namespace prioccl::capi {

// Handle kinds: an id's low bits, so that handles of different kinds never share a value.
constexpr uintptr_t kCommHandle = 1, kRequestHandle = 2, kLaggedHandle = 3, kDelayedHandle = 4,
                    kGateHandle = 5, kRowsHandle = 6;
constexpr int kKindBits = 3;

// Ids are never reused.
template <typename T, uintptr_t Kind>
class HandleTable {
 public:
  using Value = T;
  uintptr_t add(T value) {
    std::lock_guard<std::mutex> lock(mutex_);
    uintptr_t id = (++next_ << kKindBits) | Kind;
    map_.emplace(id, std::move(value));
    return id;
  }
  bool find(uintptr_t id, T* out) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(id);
    if (it == map_.end()) return false;
    *out = it->second;
    return true;
  }
  bool take(uintptr_t id, T* out) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(id);
    if (it == map_.end()) return false;
    *out = std::move(it->second);
    map_.erase(it);
    return true;
  }
  // The value behind the handle `h` (the C ABI's name for it: `what`), or the C ABI's errors:
  // InvalidArgument when NULL, InvalidUsage "<what> <dead>" when it is not live.
  T get(const void* h, const char* what, const char* dead) {
    T value;
    if (!find(checked(h, what), &value)) detail::fail(priocclInvalidUsage, what, " ", dead);
    return value;
  }
  // As get(), and the handle dies.
  T release(const void* h, const char* what, const char* dead) {
    T value;
    if (!take(checked(h, what), &value)) detail::fail(priocclInvalidUsage, what, " ", dead);
    return value;
  }

 private:
  static uintptr_t checked(const void* h, const char* what) {
    if (!h) detail::fail(priocclInvalidArgument, what, " is NULL");
    return reinterpret_cast<uintptr_t>(h);
  }

  std::mutex mutex_;
  std::unordered_map<uintptr_t, T> map_;
  uintptr_t next_ = 0;
};

HandleTable<Communicator, kCommHandle>& comms();
Communicator lookup(priocclComm_t comm);  // throws unless live

// Requests handed out by the C ABI (priocclTest/priocclWait look them up).
constexpr const char* kDeadRequest =
    "is not live (already released by priocclWait, or never created)";
HandleTable<Request, kRequestHandle>& requests();

// The results of ragged ops (priocclRowsGet, priocclRowsFree).
constexpr const char* kDeadRows =
    "is not live (already released by priocclRowsFree, or never created)";
HandleTable<Rows, kRowsHandle>& rowsResults();

// Every failure goes to this thread's record and, for a live communicator, to its own log.
void record(priocclComm_t comm, const std::string& message);
const std::string& lastError(uint64_t* serial);  // this thread's record

// Runs `body`, turning every exception into a result code and a recorded message.
template <typename F>
priocclResult_t guarded(const char* func, priocclComm_t comm, F&& body) {
  try {
    body();
    return priocclSuccess;
  } catch (const Error& e) {
    record(comm, std::string(func) + ": " + e.what());
    return e.code();
  } catch (const std::bad_alloc&) {
    record(comm, std::string(func) + ": out of memory");
    return priocclSystemError;
  } catch (const std::exception& e) {
    record(comm, std::string(func) + ": " + e.what());
    return priocclInternalError;
  } catch (...) {
    record(comm, std::string(func) + ": unknown exception");
    return priocclInternalError;
  }
}

}  // namespace prioccl::capi
