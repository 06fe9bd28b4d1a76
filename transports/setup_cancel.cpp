#include "setup_cancel.h"

#include <atomic>

namespace prioccl {
namespace {

// Incremented by every cancelSetups(); a scope remembers the value it began with (0: no scope).
std::atomic<uint64_t> g_epoch{1};
thread_local uint64_t t_began = 0;

}  // namespace

void cancelSetups() {
  g_epoch.fetch_add(1, std::memory_order_acq_rel);
}

bool setupCancelled() {
  return t_began != 0 && g_epoch.load(std::memory_order_acquire) != t_began;
}

SetupScope::SetupScope() : outermost_(t_began == 0) {
  if (outermost_) t_began = g_epoch.load(std::memory_order_acquire);
}

SetupScope::~SetupScope() {
  if (outermost_) t_began = 0;
}

}  // namespace prioccl
