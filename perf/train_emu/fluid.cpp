#include "fluid.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <vector>

namespace emu {
namespace {

// The network: items released at known times, served one at a time (FIFO = equal priorities,
// release order breaks ties); a more urgent release preempts at once (fluid: no chunk boundary).
class Server {
 public:
  explicit Server(double elementsPerMs) : rate_(elementsPerMs) {}

  size_t release(double at, double elements, int priority) {
    serveUntil(at);
    items_.push_back({elements, priority, -1});
    active_.push_back(items_.size() - 1);
    return items_.size() - 1;
  }
  // When item `id` finishes (serving everything ahead of it).
  double finish(size_t id) {
    while (items_[id].done < 0) {
      if (active_.empty()) throw std::logic_error("fluid model: waiting on an idle server");
      serveOne(1e300);
    }
    return items_[id].done;
  }
  void serveUntil(double t) {
    if (t <= now_) return;
    while (!active_.empty() && serveOne(t)) {
    }
    now_ = std::max(now_, t);
  }

 private:
  struct Item {
    double remaining;
    int priority;
    double done;
  };
  // Serves the most urgent item until it ends or until `t`; true when it ended.
  bool serveOne(double t) {
    auto best = std::min_element(active_.begin(), active_.end(), [&](size_t a, size_t b) {
      return items_[a].priority != items_[b].priority ? items_[a].priority < items_[b].priority
                                                      : a < b;
    });
    Item& it = items_[*best];
    double end = now_ + it.remaining / rate_;
    if (end > t) {
      it.remaining -= (t - now_) * rate_;
      now_ = t;
      return false;
    }
    now_ = end;
    it.remaining = 0;
    it.done = end;
    active_.erase(best);
    return true;
  }
  double rate_, now_ = 0;
  std::vector<Item> items_;
  std::vector<size_t> active_;
};

}  // namespace

double predictIterationMs(const Profile& p, const Plan& plan, double commMs) {
  Server net(static_cast<double>(plan.elements) / commMs);
  const size_t layers = p.layers.size();
  const int window = 4 * plan.period, iterations = 3 * window;
  std::vector<std::vector<size_t>> items(iterations);      // per iteration: ids in plan order
  std::multimap<double, std::pair<int, size_t>> deferred;  // release time -> (iteration, op)
  auto releaseUpTo = [&](double t) {
    while (!deferred.empty() && deferred.begin()->first <= t) {
      auto [at, which] = *deferred.begin();
      deferred.erase(deferred.begin());
      const PlannedOp& op = plan.ops[which.second];
      items[which.first][which.second] =
          net.release(at, static_cast<double>(op.count), op.priority);
    }
  };
  auto waitFor = [&](double t, size_t id) { return std::max(t, net.finish(id)); };
  std::vector<double> start(iterations + 1);
  double t = 0;
  for (int it = 0; it < iterations; ++it) {
    start[it] = t;
    items[it].assign(plan.ops.size(), 0);
    for (size_t i = 0; i < layers; ++i) {
      if (plan.wait == Wait::kBeforeForward && it > 0) {
        releaseUpTo(t);
        for (size_t o = 0; o < plan.ops.size(); ++o)
          if (plan.ops[o].firstLayer == i) t = waitFor(t, items[it - 1][o]);
      }
      t += p.layers[i].fwdMs;
    }
    for (size_t i = layers; i-- > 0;) {
      t += p.layers[i].bwdMs;
      for (size_t o = 0; o < plan.ops.size(); ++o)
        if (plan.ops[o].trigger == i) deferred.emplace(t + plan.ops[o].delayMs, std::pair(it, o));
    }
    if (plan.wait == Wait::kEndOfIteration) {
      releaseUpTo(1e300);
      for (size_t id : items[it]) t = waitFor(t, id);
    } else if (plan.wait == Wait::kPullNextStep) {  // this step's op is pushed after the pull
      if (it > 0 && it % plan.period == 0)
        for (int back = it - plan.period; back < it; ++back)
          for (size_t id : items[back]) t = waitFor(t, id);
    } else if (plan.wait == Wait::kNextIteration) {
      releaseUpTo(t);
      if (it > 0)
        for (size_t id : items[it - 1]) t = waitFor(t, id);
    }
    releaseUpTo(t);
  }
  start[iterations] = t;
  return (start[iterations] - start[iterations - window]) / window;
}

}  // namespace emu
