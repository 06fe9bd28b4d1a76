#include "plan.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

namespace emu {

ModeSpec parseMode(const std::string& text) {
  ModeSpec m;
  m.name = text;
  if (text == "wfbp")
    m.mode = Mode::kWfbp;
  else if (text == "fused")
    m.mode = Mode::kFused;
  else if (text == "ddp")
    m.mode = Mode::kDdp;
  else if (text == "slice")
    m.mode = Mode::kSlice;
  else if (text == "p3")
    m.mode = Mode::kP3;
  else if (text == "lagged")
    m.mode = Mode::kLagged;
  else if (text.rfind("delayed:", 0) == 0) {
    char* end = nullptr;
    long k = std::strtol(text.c_str() + 8, &end, 10);
    if (end == text.c_str() + 8 || *end || k < 1 || k > 64)
      throw std::invalid_argument("mode '" + text + "': K must be an integer in 1..64");
    m.mode = Mode::kDelayed;
    m.k = static_cast<int>(k);
  } else {
    throw std::invalid_argument("unknown mode '" + text +
                                "' (wfbp, fused, ddp, slice, p3, lagged, delayed:K)");
  }
  return m;
}

namespace {

// One op per layer with weights, issued as its gradient is ready (backward: last layer first).
void perLayer(const Profile& p, Plan& plan, size_t sliceElems, bool prioritised) {
  for (size_t i = p.layers.size(); i-- > 0;) {
    size_t n = p.layers[i].params;
    size_t step = sliceElems ? sliceElems : std::max<size_t>(n, 1);
    for (size_t at = 0; at < n; at += step) {
      PlannedOp op;
      op.offset = plan.offsets[i] + at;
      op.count = std::min(step, n - at);
      op.firstLayer = op.lastLayer = op.trigger = i;
      op.priority = prioritised ? static_cast<int>(i) : 0;  // forward order: layer 0 first
      plan.ops.push_back(op);
    }
  }
}

// Consecutive layers (in backward order) grouped while `sameGroup` says so and the group stays
// under `capBytes`; a group is issued when its last-ready (lowest) layer is.
template <typename SameGroup>
void grouped(const Profile& p, Plan& plan, size_t capBytes, SameGroup sameGroup,
             const std::vector<double>& delays) {
  PlannedOp open;
  bool any = false;
  auto close = [&] {
    if (any) plan.ops.push_back(open);
    any = false;
  };
  for (size_t i = p.layers.size(); i-- > 0;) {
    size_t n = p.layers[i].params;
    if (!n) continue;
    if (any && (!sameGroup(open.trigger, i) || (open.count + n) * sizeof(float) > capBytes))
      close();
    if (!any) {
      open = PlannedOp{};
      open.lastLayer = i;
      open.count = 0;
      any = true;
    }
    open.firstLayer = open.trigger = i;
    open.offset = plan.offsets[i];
    open.count += n;
    open.delayMs = delays[i];
  }
  close();
}

// One fused op over the whole gradient once backward is over (the training modes' single op).
void wholeModel(const Profile& p, Plan& plan) {
  PlannedOp op;
  op.count = plan.elements;
  op.lastLayer = p.layers.size() - 1;
  op.priority = 1 << 20;  // least urgent: anything keyed or urgent preempts it
  plan.ops.push_back(op);
}

}  // namespace

Plan makePlan(const Profile& p, const ModeSpec& mode, const PlanOptions& o) {
  Plan plan;
  plan.mode = mode;
  size_t at = 0;
  for (const Layer& l : p.layers) {
    plan.offsets.push_back(at);
    at += l.params;
  }
  plan.elements = at;
  std::vector<double> none(p.layers.size(), 0.0);
  switch (mode.mode) {
    case Mode::kWfbp:
      perLayer(p, plan, 0, false);
      break;
    case Mode::kSlice:
      perLayer(p, plan, o.sliceElems, false);
      break;
    case Mode::kP3:  // one op per layer: the engine's preemptible chunks are P3's slices
      perLayer(p, plan, 0, true);
      plan.wait = Wait::kBeforeForward;
      plan.fifo = false;
      break;
    case Mode::kDdp:
      grouped(
          p, plan, o.bucketBytes, [](size_t, size_t) { return true; }, none);
      break;
    case Mode::kFused: {
      // Horovod fuses what is ready at each cycle tick: layers whose gradients appear within the
      // same cycle (counted from the start of backward) share an op, issued at the tick.
      std::vector<double> tick(p.layers.size()), delay(p.layers.size());
      double t = 0;
      for (size_t i = p.layers.size(); i-- > 0;) {
        t += p.layers[i].bwdMs;
        tick[i] = std::ceil(t / o.cycleMs - 1e-9) * o.cycleMs;
        delay[i] = tick[i] - t;
      }
      grouped(
          p, plan, o.fusionBytes, [&](size_t a, size_t b) { return tick[a] == tick[b]; }, delay);
      break;
    }
    case Mode::kLagged:
      wholeModel(p, plan);
      plan.wait = Wait::kNextIteration;
      plan.through = Through::kLaggedAllReduce;
      plan.fifo = false;
      break;
    case Mode::kDelayed:  // as the library runs SSD-SGD, not as per-layer ops of our own
      wholeModel(p, plan);
      plan.wait = Wait::kPullNextStep;
      plan.through = Through::kDelayedSgd;
      plan.period = mode.k;
      break;
  }
  return plan;
}

}  // namespace emu
