#include "runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <memory>
#include <thread>

namespace emu {
namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::duration<double, std::milli>;

// Gradients: a constant per (iteration, layer) everywhere, and a position-dependent value every
// kStride elements, so a chunk that lands in the wrong place or is reduced twice is caught by a
// sampled check (chunks are >= 64 KiB = 16384 floats, longer than the stride). Small integers:
// every sum is exact in float.
constexpr size_t kStride = 4096;
float base(int iteration, size_t layer) {
  return 1.0f + static_cast<float>((iteration + layer) % 5);
}
float sample(int iteration, size_t k) {
  return 1.0f + static_cast<float>((k + iteration) % 251);
}
size_t samplePos(size_t k) {
  return k * kStride + (k * 97) % kStride;
}

struct Pending {
  prioccl::Request request;
  int iteration;
  size_t op;
  float* buffer;  // the flat buffer the op reduced (its offsets are the plan's)
};

class Run {
 public:
  Run(const Profile& p, const Plan& plan, prioccl::Communicator& comm)
      : p_(p),
        plan_(plan),
        comm_(comm),
        rank_(comm.rank()),
        ranks_(comm.size()),
        grads_(plan.elements) {
    // Lagged: the library's LaggedAllReduce (its double buffer, its single fused op).
    if (plan.through == Through::kLaggedAllReduce)
      lagged_ = std::make_unique<prioccl::LaggedAllReduce>(comm, plan.elements, priocclFloat32,
                                                           priocclSum, laggedOptions(plan));
    // Delayed: the library's DelayedSgd on weights of the model's size (from zero), so that its
    // copy, fused op, waits and GLU pass over the weights are all in the iteration time.
    if (plan.through == Through::kDelayedSgd) {
      weights_.assign(plan.elements, 0.0f);
      delayed_ = std::make_unique<prioccl::DelayedSgd>(comm, weights_.data(), plan.elements,
                                                       delayedOptions(plan));
    }
  }

  RunResult run(int iterations, int warmup) {
    RunResult r;
    deadline_ = Clock::now();
    std::vector<Clock::time_point> starts;
    for (int it = 0; it < iterations + warmup; ++it) {
      starts.push_back(Clock::now());
      iteration(it);
    }
    starts.push_back(Clock::now());
    while (!pending_.empty()) finishOldest();
    if (lagged_ && lagged_->flush(nullptr)) checkLagged(iterations + warmup - 1);
    if (delayed_) {
      delayed_->flush();
      checkDelayed(iterations + warmup);
    }
    for (size_t i = static_cast<size_t>(warmup) + 1; i < starts.size(); ++i)
      r.iterationMs.push_back(Ms(starts[i] - starts[i - 1]).count());
    r.wrong = wrong_;
    r.checked = checked_;
    return r;
  }

 private:
  void iteration(int it) {
    for (size_t i = 0; i < p_.layers.size(); ++i) {
      if (plan_.wait == Wait::kBeforeForward)  // p3: only this layer's ops of the last iteration
        waitWhere([&](const Pending& q) { return plan_.ops[q.op].firstLayer == i; });
      deadline_ = std::max(deadline_, Clock::now());  // compute resumes when the wait ends
      compute(p_.layers[i].fwdMs);
    }
    for (size_t i = p_.layers.size(); i-- > 0;) {
      compute(p_.layers[i].bwdMs);
      produce(it, i);
      for (size_t o = 0; o < plan_.ops.size(); ++o)
        if (plan_.ops[o].trigger == i)
          deferred_.emplace(deadline_ + toDuration(plan_.ops[o].delayMs), std::pair(it, o));
    }
    submitDue(Clock::time_point::max());
    if (plan_.wait == Wait::kEndOfIteration)
      waitWhere([](const Pending&) { return true; });
    else if (plan_.wait == Wait::kNextIteration)
      waitWhere([&](const Pending& q) { return q.iteration < it; });
    deadline_ = std::max(deadline_, Clock::now());
  }

  static Clock::duration toDuration(double ms) {
    return std::chrono::duration_cast<Clock::duration>(Ms(ms));
  }

  // Sleeps `ms` of compute, issuing deferred ops (fused's cycle ticks) as they come due.
  void compute(double ms) {
    deadline_ += toDuration(ms);
    submitDue(deadline_);
    std::this_thread::sleep_until(deadline_);
  }

  void submitDue(Clock::time_point limit) {
    while (!deferred_.empty() && deferred_.begin()->first <= limit) {
      auto [due, which] = *deferred_.begin();
      deferred_.erase(deferred_.begin());
      std::this_thread::sleep_until(due);
      submit(which.first, which.second);
    }
  }

  void produce(int it, size_t layer) {
    size_t n = p_.layers[layer].params;
    float* g = grads_.data() + plan_.offsets[layer];
    float scale = static_cast<float>(rank_ + 1);
    std::fill(g, g + n, scale * base(it, layer));
    for (size_t k = 0; samplePos(k) < n; ++k) g[samplePos(k)] = scale * sample(it, k);
  }

  static prioccl::LaggedAllReduce::Options laggedOptions(const Plan& plan) {
    prioccl::LaggedAllReduce::Options o;
    o.priority = plan.ops.front().priority;
    o.key = "train_emu.lagged";
    return o;
  }

  // SSD-SGD's own settings but k = K, and no synchronous warm-up steps (warmupSteps = 0): the
  // emulator's --warmup iterations only keep start-up costs out of the timing, so they run the
  // delayed path too. Momentum SGD with weight decay 0, as DelayedSgd's defaults.
  static prioccl::DelayedSgd::Options delayedOptions(const Plan& plan) {
    prioccl::DelayedSgd::Options o;
    o.k = plan.period;
    o.warmupSteps = 0;
    o.priority = plan.ops.front().priority;
    o.key = "train_emu.delayed";
    return o;
  }

  // The gradient was copied by step(); the previous iteration's aggregate is its result().
  void checkLagged(int iteration) {
    Pending q;
    q.iteration = iteration;
    q.op = 0;
    q.buffer = static_cast<float*>(const_cast<void*>(lagged_->result()));
    check(q);
  }

  void submit(int it, size_t o) {
    const PlannedOp& op = plan_.ops[o];
    if (lagged_) {  // one op over the whole buffer: offset 0
      if (lagged_->step(grads_.data(), nullptr)) checkLagged(it - 1);
      return;
    }
    if (delayed_) {  // it copies the gradient, so the next backward may overwrite it at once
      delayed_->step(grads_.data());
      return;
    }
    float* at = grads_.data() + op.offset;
    pending_.push_back(
        {comm_.allReduceAsync(at, at, op.count, priocclSum, op.priority), it, o, grads_.data()});
  }

  template <typename Which>
  void waitWhere(Which which) {
    for (auto q = pending_.begin(); q != pending_.end();) {
      if (!which(*q)) {
        ++q;
        continue;
      }
      q->request.wait();
      check(*q);
      q = pending_.erase(q);
    }
  }

  void finishOldest() {
    pending_.front().request.wait();
    check(pending_.front());
    pending_.pop_front();
  }

  void check(const Pending& q) {
    const PlannedOp& op = plan_.ops[q.op];
    const float ranksSum = static_cast<float>(ranks_ * (ranks_ + 1) / 2);
    for (size_t layer = op.firstLayer; layer <= op.lastLayer; ++layer) {
      size_t begin = std::max(op.offset, plan_.offsets[layer]);
      size_t end = std::min(op.offset + op.count, plan_.offsets[layer] + p_.layers[layer].params);
      if (begin >= end) continue;
      const float* g = q.buffer + plan_.offsets[layer];
      sampled(layer, begin - plan_.offsets[layer], end - plan_.offsets[layer],
              [&](size_t pos, auto value) {
                ++checked_;
                wrong_ += g[pos] != ranksSum * value(q.iteration);
              });
    }
  }

  // After flush() the weights are DelayedSgd's global replica: synchronous momentum SGD, from
  // zero, on every step's averaged gradient (the library's contract), here in double. The bound
  // leaves room for a float rounding per step over thousands of steps; a step lost or applied
  // twice is off by far more.
  void checkDelayed(int steps) {
    const prioccl::SgdParams sgd = delayedOptions(plan_).sgd;
    const double meanScale = (ranks_ + 1) / 2.0;  // of the ranks' scales 1..ranks
    for (size_t layer = 0; layer < p_.layers.size(); ++layer) {
      const float* w = weights_.data() + plan_.offsets[layer];
      sampled(layer, 0, p_.layers[layer].params, [&](size_t pos, auto value) {
        double v = 0, ref = 0;
        for (int it = 0; it < steps; ++it) {
          v = sgd.momentum * v + meanScale * value(it) + sgd.weightDecay * ref;
          ref -= sgd.lr * v;
        }
        ++checked_;
        wrong_ += !(std::fabs(w[pos] - ref) <= 1e-4 * (1 + std::fabs(ref)));
      });
    }
  }

  // Calls f(pos, value) for the checked elements of `layer` in [first, last) (positions in the
  // layer): the sample positions and the last element. value(iteration) is the gradient there,
  // before the rank's scale.
  template <typename F>
  static void sampled(size_t layer, size_t first, size_t last, F f) {
    if (first >= last) return;
    for (size_t k = 0; samplePos(k) < last; ++k)
      if (samplePos(k) >= first) f(samplePos(k), [k](int it) { return sample(it, k); });
    size_t tail = last - 1;
    if (tail % kStride != (tail / kStride * 97) % kStride)  // not itself a sample position
      f(tail, [layer](int it) { return base(it, layer); });
  }

  const Profile& p_;
  const Plan& plan_;
  prioccl::Communicator& comm_;
  const int rank_, ranks_;
  std::vector<float> grads_;    // the flat gradient, rewritten by every backward
  std::vector<float> weights_;  // delayed: the flat weights DelayedSgd updates
  std::unique_ptr<prioccl::LaggedAllReduce> lagged_;
  std::unique_ptr<prioccl::DelayedSgd> delayed_;
  std::deque<Pending> pending_;
  std::multimap<Clock::time_point, std::pair<int, size_t>> deferred_;
  Clock::time_point deadline_;
  long long wrong_ = 0, checked_ = 0;
};

}  // namespace

RunResult runPlan(const Profile& p, const Plan& plan, prioccl::Communicator& comm, int iterations,
                  int warmup) {
  return Run(p, plan, comm).run(iterations, warmup);
}

}  // namespace emu
