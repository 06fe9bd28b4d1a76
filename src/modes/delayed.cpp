// SSD-SGD, all-reduce form. Each step's local gradient is all-reduced (averaged) in the
// background; every k steps the k averaged gradients are applied in order to an exact replica of
// the global weights with momentum SGD, and the local weights restart from it. In between, the
// GLU local update moves the local weights with the local gradient and a pull towards the
// last global weights.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "modes/agree.h"
#include "prioccl/modes.hpp"

namespace prioccl {

using detail::fail;

struct DelayedSgd::State {
  Communicator comm;
  float* weights = nullptr;
  size_t count = 0;
  Options options;
  std::vector<float> global, velocity, preWeights, averaged;
  std::vector<std::vector<float>> inFlight;  // one buffer per step since the last boundary
  std::vector<Request> pending;
  long steps = 0;

  // Applies the averaged gradients in flight, oldest first, and restarts from the global weights.
  void synchronise() {
    for (size_t i = 0; i < pending.size(); ++i) {
      pending[i].wait();
      sgdUpdate(global.data(), velocity.data(), inFlight[i].data(), count, priocclFloat32,
                options.sgd);
    }
    pending.clear();
    restart();
  }
  void restart() {
    if (!count) return;
    std::memcpy(weights, global.data(), count * sizeof(float));
    preWeights = global;
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
  if (count > SIZE_MAX / 4 / sizeof(float))  // a few float buffers of it
    fail(priocclInvalidArgument, "DelayedSgd: count ", count, " overflows the address space");
  for (auto [name, v] : {std::pair<const char*, double>{"sgd.lr", options.sgd.lr},
                         {"sgd.momentum", options.sgd.momentum},
                         {"sgd.weightDecay", options.sgd.weightDecay},
                         {"alpha", options.alpha},
                         {"beta", options.beta},
                         {"localLr", options.localLr}})
    if (!std::isfinite(v))
      fail(priocclInvalidArgument, "DelayedSgd: ", name, " is not finite (", v, ")");
  detail::agreeAcrossRanks(comm, "DelayedSgd",
                           {{"count", static_cast<long long>(count)},
                            {"k", options.k},
                            {"warmupSteps", options.warmupSteps}});
  State& s = *s_;
  s.comm = comm;
  s.weights = weights;
  s.count = count;
  s.options = options;
  if (s.options.localLr == 0) s.options.localLr = 4 * options.sgd.lr;
  s.global.assign(weights, weights + count);
  s.velocity.assign(count, 0.0f);
  s.preWeights = s.global;
  s.averaged.resize(count);
  s.inFlight.assign(static_cast<size_t>(options.k), std::vector<float>(count));
}

DelayedSgd::~DelayedSgd() {
  if (s_) s_->waitAll();
}

bool DelayedSgd::step(const float* grads) {
  if (!s_) fail(priocclInvalidUsage, "DelayedSgd::step after destroy()");
  State& s = *s_;
  const Options& o = s.options;
  if (s.count && !grads) fail(priocclInvalidArgument, "DelayedSgd::step: grads is NULL");
  if (s.steps < o.warmupSteps) {  // synchronous SGD
    s.comm.allReduce(grads, s.averaged.data(), s.count, priocclFloat32, priocclAvg);
    sgdUpdate(s.global.data(), s.velocity.data(), s.averaged.data(), s.count, priocclFloat32,
              o.sgd);
    s.restart();
    ++s.steps;
    return true;
  }
  std::vector<float>& slot = s.inFlight[s.pending.size()];
  if (s.count) std::memcpy(slot.data(), grads, s.count * sizeof(float));
  s.pending.push_back(s.comm.allReduceAsync(slot.data(), slot.data(), s.count, priocclFloat32,
                                            priocclAvg, o.priority, o.key));
  ++s.steps;
  if (s.pending.size() == static_cast<size_t>(o.k)) {
    s.synchronise();
    return true;
  }
  GluParams glu;
  glu.localLr = o.localLr;
  glu.alpha = o.alpha;
  glu.beta = o.beta;
  glu.weightDecay = o.sgd.weightDecay;
  glu.momentum = o.sgd.momentum;
  glu.lr = o.sgd.lr;
  glu.k = o.k;
  gluUpdate(s.weights, grads, s.preWeights.data(), s.count, priocclFloat32, glu);
  return false;
}

void DelayedSgd::flush() {
  if (!s_) fail(priocclInvalidUsage, "DelayedSgd::flush after destroy()");
  s_->synchronise();
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
