// SSD-SGD (Algorithms 1 and 2 of the paper), all-reduce form.
//
// The parameter server becomes an exact replica of the global weights on every rank: each step's
// local gradient is all-reduced (averaged) in the background ("push"), and the server's momentum
// SGD is applied to the replica when the averages are needed. Every k steps the worker "pulls":
// the k averages pushed since the last pull are applied to the replica, oldest first, each with
// the learning rate current when it was pushed. As in the paper the pull is non-blocking: it is
// issued at step j-1 (the k-th of a cycle) and used at step j, so the all-reduce of step j-1's
// gradient has one whole forward+backward to finish. Step j's gradient was computed on the local
// weights before the pull; it is applied by GLU to the pulled weights.
//
// GLU (Algorithm 2): gsync = (pre - w)(1 - m) / (lr k) is computed first, from the weights of the
// last pull `pre` and the current weights; only then, at a pull, does `pre` become the pulled
// weights. So the step that uses a pull estimates the global gradient from two consecutive
// pulls, k server updates apart. The very first delayed step has gsync = 0 (pre == w), as in the
// paper. With a learning-rate schedule, lr k becomes the sum of the k updates' rates.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "common/error.h"
#include "modes/agree.h"
#include "prioccl/modes.hpp"

namespace prioccl {

using detail::fail;

struct DelayedSgd::State {
  Communicator comm;
  float* weights = nullptr;
  size_t count = 0;
  Options options;
  double localLrRatio = 4;  // localLr / sgd.lr, kept when the learning rate changes
  std::vector<float> global, velocity, preWeights;
  struct Push {
    std::vector<float> gradient;  // all-reduced in place
    double lr = 0;                // the server's learning rate when it was pushed
  };
  std::vector<Push> slots;  // k of them: one per step since the last pull
  std::vector<Request> pending;
  double syncLr = 0;  // GLU's lr: the mean rate of the k updates between pre and the last pull
  long steps = 0;
  long localUpdates = 0;  // delayed steps since the end of the warm-up (or the last flush)

  // The pull: applies the averages pushed since the last one, oldest first, and copies the
  // replica into the weights. Returns the mean of the learning rates applied (exactly the rate
  // when it did not change, so that a constant rate gives the paper's formula bit for bit).
  double pull() {
    double lrSum = 0;
    bool constant = true;
    for (size_t i = 0; i < pending.size(); ++i) {
      pending[i].wait();
      SgdParams sgd = options.sgd;
      sgd.lr = slots[i].lr;
      sgdUpdate(global.data(), velocity.data(), slots[i].gradient.data(), count, priocclFloat32,
                sgd);
      lrSum += slots[i].lr;
      constant = constant && slots[i].lr == slots[0].lr;
    }
    size_t applied = pending.size();
    pending.clear();
    if (count) std::memcpy(weights, global.data(), count * sizeof(float));
    if (!applied) return options.sgd.lr;
    return constant ? slots[0].lr : lrSum / static_cast<double>(applied);
  }
  // A new delay cycle from the replica, as at the end of the warm-up (Algorithm 1, line 10).
  void restart() {
    preWeights = global;
    localUpdates = 0;
    syncLr = options.sgd.lr;
  }
  void waitAll() noexcept {
    for (Request& r : pending) {
      try {
        r.wait();
      } catch (...) {  // reported to the caller of step()/flush() when it waits; here, only freed
      }
    }
    pending.clear();
  }
};

namespace {

// FNV-1a over the weights' bit patterns, one float at a time (a byte at a time costs seconds on
// a model of hundreds of MB): equal starting weights on every rank, checked without moving them.
long long hashOf(const float* data, size_t count) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, data + i, sizeof bits);
    h = (h ^ bits) * 1099511628211ull;
  }
  return static_cast<long long>(h);
}

}  // namespace

DelayedSgd::DelayedSgd(const Communicator& comm, float* weights, size_t count,
                       const Options& options)
    : s_(std::make_unique<State>()) {
  if (!comm.valid()) fail(priocclInvalidUsage, "DelayedSgd: the communicator is not live");
  if (count && !weights) fail(priocclInvalidArgument, "DelayedSgd: weights is NULL");
  if (options.k < 1 || options.warmupSteps < 0 || options.sgd.lr <= 0 || options.localLr < 0)
    fail(priocclInvalidArgument, "DelayedSgd: need k >= 1 (", options.k, "), warmupSteps >= 0 (",
         options.warmupSteps, "), sgd.lr > 0 (", options.sgd.lr, "), localLr >= 0 (",
         options.localLr, ")");
  if (options.key.empty()) fail(priocclInvalidArgument, "DelayedSgd: empty key");
  if (count > SIZE_MAX / 8 / sizeof(float))  // a few float buffers of it
    fail(priocclInvalidArgument, "DelayedSgd: count ", count, " overflows the address space");
  std::initializer_list<std::pair<const char*, double>> hyper = {
      {"sgd.lr", options.sgd.lr},
      {"sgd.momentum", options.sgd.momentum},
      {"sgd.weightDecay", options.sgd.weightDecay},
      {"alpha", options.alpha},
      {"beta", options.beta},
      {"localLr", options.localLr}};
  for (auto [name, v] : hyper)
    if (!std::isfinite(v))
      fail(priocclInvalidArgument, "DelayedSgd: ", name, " is not finite (", v, ")");
  detail::agreeAcrossRanks(comm, "DelayedSgd",
                           {{"count", static_cast<long long>(count)},
                            {"k", options.k},
                            {"warmupSteps", options.warmupSteps},
                            {"the starting weights (FNV-1a hash)", hashOf(weights, count)}});
  detail::agreeOnDoublesAcrossRanks(comm, "DelayedSgd", hyper);
  State& s = *s_;
  s.comm = comm;
  s.weights = weights;
  s.count = count;
  s.options = options;
  if (s.options.localLr == 0) s.options.localLr = 4 * options.sgd.lr;
  s.localLrRatio = s.options.localLr / s.options.sgd.lr;
  s.global.assign(weights, weights + count);
  s.velocity.assign(count, 0.0f);
  s.slots.resize(static_cast<size_t>(options.k));
  for (State::Push& p : s.slots) p.gradient.resize(count);
  s.restart();
}

DelayedSgd::~DelayedSgd() {
  if (s_) s_->waitAll();
}

void DelayedSgd::setLearningRate(double lr, double localLr) {
  if (!s_) fail(priocclInvalidUsage, "DelayedSgd::setLearningRate after destroy()");
  if (!std::isfinite(lr) || lr <= 0 || !std::isfinite(localLr) || localLr < 0)
    fail(priocclInvalidArgument, "DelayedSgd::setLearningRate: need a finite lr > 0 (", lr,
         ") and localLr >= 0 (", localLr, "; 0 keeps localLr/lr as constructed)");
  State& s = *s_;
  s.options.sgd.lr = lr;
  s.options.localLr = localLr > 0 ? localLr : s.localLrRatio * lr;
}

double DelayedSgd::learningRate() const {
  if (!s_) fail(priocclInvalidUsage, "DelayedSgd::learningRate after destroy()");
  return s_->options.sgd.lr;
}

bool DelayedSgd::step(const float* grads) {
  if (!s_) fail(priocclInvalidUsage, "DelayedSgd::step after destroy()");
  State& s = *s_;
  const Options& o = s.options;
  if (s.count && !grads) fail(priocclInvalidArgument, "DelayedSgd::step: grads is NULL");
  if (s.steps < o.warmupSteps) {  // the warm-up stage: synchronous SGD (Algorithm 1, 3-14)
    std::vector<float>& averaged = s.slots[0].gradient;  // no push is in flight yet
    s.comm.allReduce(grads, averaged.data(), s.count, priocclFloat32, priocclAvg);
    sgdUpdate(s.global.data(), s.velocity.data(), averaged.data(), s.count, priocclFloat32, o.sgd);
    if (s.count) std::memcpy(s.weights, s.global.data(), s.count * sizeof(float));
    ++s.steps;
    if (s.steps == o.warmupSteps) s.restart();
    return true;
  }
  // The pull issued at the previous step (the k-th of its cycle) is used now.
  const bool pulled = s.localUpdates > 0 && s.localUpdates % o.k == 0;
  double pulledLr = 0;
  if (pulled) pulledLr = s.pull();
  // Push this step's gradient before the local update: they overlap (Algorithm 1, 17-18).
  State::Push& slot = s.slots[s.pending.size()];
  if (s.count) std::memcpy(slot.gradient.data(), grads, s.count * sizeof(float));
  slot.lr = o.sgd.lr;
  s.pending.push_back(s.comm.allReduceAsync(slot.gradient.data(), slot.gradient.data(), s.count,
                                            priocclFloat32, priocclAvg, o.priority, o.key));
  // GLU (Algorithm 2): gsync from `pre` and the weights, then `pre` moves to the pulled weights.
  if (pulled) s.syncLr = pulledLr;
  GluParams glu;
  glu.localLr = o.localLr;
  glu.alpha = o.alpha;
  glu.beta = o.beta;
  glu.weightDecay = o.sgd.weightDecay;
  glu.momentum = o.sgd.momentum;
  glu.lr = s.syncLr;
  glu.k = o.k;
  gluUpdate(s.weights, grads, s.preWeights.data(), s.count, priocclFloat32, glu);
  if (pulled) s.preWeights = s.global;  // == the weights GLU just read
  ++s.localUpdates;
  ++s.steps;
  return pulled;
}

void DelayedSgd::flush() {
  if (!s_) fail(priocclInvalidUsage, "DelayedSgd::flush after destroy()");
  State& s = *s_;
  s.pull();
  if (s.steps >= s.options.warmupSteps) s.restart();
}

const float* DelayedSgd::globalWeights() const {
  if (!s_) fail(priocclInvalidUsage, "DelayedSgd::globalWeights after destroy()");
  return s_->global.data();
}

long DelayedSgd::steps() const {
  if (!s_) fail(priocclInvalidUsage, "DelayedSgd::steps after destroy()");
  return s_->steps;
}

void DelayedSgd::destroy() {
  if (!s_) return;
  std::unique_ptr<State> s = std::move(s_);
  s->waitAll();
}

}  // namespace prioccl
