// Cancelling a communicator's creation that waits on other ranks (priocclCommInitCancel): a
// caller that gave up (Ctrl-C in Python, a launcher's own deadline) must not stay blocked until
// PRIOCCL_TIMEOUT_S. The creation runs inside a SetupScope on its thread; the waits of the TCP
// bootstrap and of socket set-up (waitFor, their retry loops) look at setupCancelled() at least
// every 100 ms and end as if their deadline had passed once cancelSetups() has been called.
// MPI's bootstrap cannot be cancelled (MPI's calls do not return early).
#pragma once

#include <cstdint>

namespace prioccl {

// Every creation in progress in this process (every thread's SetupScope) ends early.
void cancelSetups();

// True on a thread inside a SetupScope that cancelSetups() was called after it began.
bool setupCancelled();

class SetupScope {
 public:
  SetupScope();  // nested scopes share the outermost's start
  ~SetupScope();
  SetupScope(const SetupScope&) = delete;
  SetupScope& operator=(const SetupScope&) = delete;
  bool cancelled() const { return setupCancelled(); }

 private:
  bool outermost_;
};

}  // namespace prioccl
