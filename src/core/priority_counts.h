// Amounts kept by scheduling priority (live chunks, bytes in flight), most urgent (lowest value)
// first. A sorted vector rather than a map: only a few priorities are live at a time, and a map
// node allocated and freed per chunk was a visible share of a small op's cost (issue 19).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/error.h"

namespace prioccl::detail {

class PriorityCounts {
 public:
  void add(int priority, uint64_t amount) {
    if (amount == 0) return;  // e.g. an empty message: nothing to count
    auto it = find(priority);
    if (it != entries_.end() && it->priority == priority)
      it->amount += amount;
    else
      entries_.insert(it, {priority, amount});
  }
  // Takes back what add() put in; a priority whose amount reaches zero is dropped.
  void remove(int priority, uint64_t amount) {
    if (amount == 0) return;
    auto it = find(priority);
    if (it == entries_.end() || it->priority != priority || it->amount < amount)
      fail(priocclInternalError, "priority ", priority, ": removing ", amount,
           " more than was added");
    if ((it->amount -= amount) == 0) entries_.erase(it);
  }
  bool empty() const { return entries_.empty(); }
  int mostUrgent() const { return entries_.front().priority; }  // only when not empty
  // The total at `priority` and every more urgent one.
  uint64_t atOrAbove(int priority) const {
    uint64_t sum = 0;
    for (const Entry& e : entries_) {
      if (e.priority > priority) break;
      sum += e.amount;
    }
    return sum;
  }
  void clear() { entries_.clear(); }

 private:
  struct Entry {
    int priority;
    uint64_t amount;  // never 0
  };
  std::vector<Entry>::iterator find(int priority) {
    return std::lower_bound(entries_.begin(), entries_.end(), priority,
                            [](const Entry& e, int p) { return e.priority < p; });
  }
  std::vector<Entry> entries_;  // ascending priority
};

}  // namespace prioccl::detail
