// Which all-reduce ops a gradient-sync schedule ("mode") issues in one training iteration, when,
// and what waits for them. The emulator runs a plan; the fluid model predicts its time. Both
// read the same plan, so the prediction is of exactly what runs.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "profile.h"

namespace emu {

enum class Mode { kWfbp, kFused, kDdp, kSlice, kP3, kLagged, kDelayed };

struct ModeSpec {
  Mode mode = Mode::kWfbp;
  int k = 1;         // delayed:K
  std::string name;  // as given, e.g. "delayed:2"
};

// "wfbp", "fused", "ddp", "slice", "p3", "lagged", "delayed:K"; throws std::invalid_argument.
ModeSpec parseMode(const std::string& text);

struct PlanOptions {
  size_t sliceElems = 0;   // slice: each layer's gradient as ops of this many elements
  size_t fusionBytes = 0;  // fused: Horovod's fusion threshold
  double cycleMs = 1.0;    // fused: Horovod's cycle time
  size_t bucketBytes = 0;  // ddp: bucket size
};

struct PlannedOp {
  size_t offset = 0, count = 0;  // elements of the flat gradient buffer (layers in forward order)
  size_t firstLayer = 0, lastLayer = 0;
  size_t trigger = 0;  // issued once this layer's backward has produced its gradient...
  double delayMs = 0;  // ...and this much later (fused: the next cycle tick)
  int priority = 0;    // lower is more urgent
};

// What the next computation waits for.
enum class Wait {
  kEndOfIteration,  // every op of the iteration, before the next forward (wfbp, fused, ddp, slice)
  kBeforeForward,   // layer i's ops, before the next forward of layer i (p3)
  kNextIteration,   // the op of iteration t at the end of iteration t+1's backward (lagged)
  kPullNextStep,    // delayed:K (SSD-SGD's pull: issued at every K-th step, used at the next):
                    // iteration j's step, j a positive multiple of K, waits for the ops of
                    // iterations j-K..j-1 (DelayedSgd::step waits; the fluid model reads it)
};

// What submits the plan's ops.
enum class Through {
  kEngine,           // the runner, one allReduceAsync per op
  kLaggedAllReduce,  // lagged: prioccl::LaggedAllReduce (copy, one op)
  kDelayedSgd,       // delayed:K: prioccl::DelayedSgd::step (copy, one op, its waits, GLU update)
};

struct Plan {
  ModeSpec mode;
  std::vector<PlannedOp> ops;   // in submission order (the same on every rank)
  std::vector<size_t> offsets;  // per layer: its first element in the flat buffer
  size_t elements = 0;          // the flat buffer
  Wait wait = Wait::kEndOfIteration;
  bool fifo = true;  // FIFO schedule; else priority
  Through through = Through::kEngine;
  int period = 1;  // iterations per repeating pattern (K for delayed:K)
};

Plan makePlan(const Profile& scaledProfile, const ModeSpec& mode, const PlanOptions& options);

}  // namespace emu
