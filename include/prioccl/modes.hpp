// prioccl training modes (C++): what training code calls, built on the public engine API.
//
// - LaggedAllReduce: last-batch optimisation. The whole gradient is all-reduced in one fused op
//   that overlaps the next forward+backward; step() returns the previous step's aggregate.
// - DelayedSgd: SSD-SGD. Gradients are all-reduced every step in the background and waited for
//   every K steps; between, GLU local updates; at each boundary the exact global weights.
// - Kernels over flat buffers (every float dtype): the GLU update, momentum SGD, SpecTrain's
//   weight prediction, and the switch-decay learning-rate ratio.
// The C ABI (prioccl.h, "Training modes") wraps these.
#pragma once

#include <climits>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "prioccl/prioccl.hpp"

namespace prioccl {

// Last Batch Optimization. One object per flat gradient buffer; every rank creates it with the
// same arguments (checked) and calls step() the same number of times.
class PRIOCCL_API LaggedAllReduce {
 public:
  struct Options {
    int warmupSteps = 0;                 // synchronous steps first (S-SGD during the LR warm-up)
    int priority = INT_MAX;              // the fused op's priority: least urgent by default
    std::string key = "prioccl.lagged";  // its op name: distinct per object on a communicator
  };
  LaggedAllReduce(const Communicator& comm, size_t count, priocclDataType_t datatype,
                  priocclRedOp_t op, const Options& options);
  LaggedAllReduce(const Communicator& comm, size_t count, priocclDataType_t datatype,
                  priocclRedOp_t op)
      : LaggedAllReduce(comm, count, datatype, op, Options()) {}
  ~LaggedAllReduce();
  LaggedAllReduce(const LaggedAllReduce&) = delete;
  LaggedAllReduce& operator=(const LaggedAllReduce&) = delete;

  // During warm-up: all-reduces `grads` into `out` and returns true. Afterwards: copies `grads`
  // (the caller may reuse it at once), starts its fused all-reduce, and returns the previous
  // step's aggregate: in `out` when given, and through result() until the next call. Returns
  // false at the switch step (no previous step: the optimizer skips that update).
  // With out == nullptr a step costs one copy of the gradient (the copy-in); with `out`, two.
  bool step(const void* grads, void* out);
  // The pending aggregate, if any (waits for it): into `out` when given and through result().
  bool flush(void* out);
  // The aggregate returned by the last step()/flush() that returned true (nullptr before).
  const void* result() const;
  long steps() const;  // step() calls so far
  // Waits for the pending op and releases the buffers; later calls throw InvalidUsage.
  void destroy();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// The learning-rate multiplier of LB-SGD's "switch decay": rises linearly from 0 to 2 over the
// warm-up steps, then is divided by 5 at the switch (0.4), to multiply the user's own schedule.
PRIOCCL_API double switchDecayLrRatio(long step, long warmupSteps);

// Momentum SGD with weight decay as PyTorch's SGD (dampening 0): d = g + wd*w; v = m*v + d;
// w -= lr*v. The server-side optimizer of SSD-SGD.
struct SgdParams {
  double lr = 0.1, momentum = 0.9, weightDecay = 0;
};

// SSD-SGD over a flat buffer of float32 weights (updated in place). Every rank constructs it
// with the same arguments and calls step() once per iteration.
class PRIOCCL_API DelayedSgd {
 public:
  struct Options {
    int k = 2;                       // wait for the all-reduced gradients every k steps
    SgdParams sgd;                   // the global (server-side) optimizer
    double alpha = 2.0, beta = 0.5;  // GLU: weight of the local and of the sync gradient
    double localLr = 0;              // GLU's lr; 0: 4 x sgd.lr (the paper's default)
    int warmupSteps = 500;           // synchronous SGD steps first
    int priority = INT_MAX;          // of the background all-reduces
    std::string key = "prioccl.delayed";
  };
  DelayedSgd(const Communicator& comm, float* weights, size_t count, const Options& options);
  ~DelayedSgd();
  DelayedSgd(const DelayedSgd&) = delete;
  DelayedSgd& operator=(const DelayedSgd&) = delete;

  // One iteration with this rank's gradient `grads` (copied): updates the weights in place.
  // Returns true when the weights are now the exact global ones (warm-up and every k-th step).
  bool step(const float* grads);
  // Waits for the gradients in flight, applies them to the global weights and copies those
  // into the weights.
  void flush();
  const float* globalWeights() const;  // the replica as of the last boundary
  long steps() const;
  void destroy();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Kernels over flat buffers of `datatype` (float16, bfloat16, float32, float64; others throw
// InvalidArgument). Accumulation in float (float64 for float64).
//
// GLU local update: w -= localLr * (alpha*g + wd*w + beta*gsync) with
// gsync = (preWeights - w) * (1 - momentum) / (lr * k).
struct GluParams {
  double localLr = 0.4, alpha = 2.0, beta = 0.5, weightDecay = 0, momentum = 0.9, lr = 0.1;
  int k = 2;
};
PRIOCCL_API void gluUpdate(void* weights, const void* grads, const void* preWeights, size_t count,
                           priocclDataType_t datatype, const GluParams& p);
PRIOCCL_API void sgdUpdate(void* weights, void* velocity, const void* grads, size_t count,
                           priocclDataType_t datatype, const SgdParams& p);
// SpecTrain: predicted = weights - s * lr * velocity, s = specTrainStaleness(...).
PRIOCCL_API void specTrainPredict(void* predicted, const void* weights, const void* velocity,
                                  size_t count, priocclDataType_t datatype, double lr,
                                  double staleness);
// The version difference s of stage `stage` (0-based) of `stages`: floor(k/2) + N - k - 1 in the
// forward pass, floor(k/2) in the backward pass. Throws InvalidArgument unless 0 <= k < N.
PRIOCCL_API int specTrainStaleness(int stage, int stages, bool forward);

}  // namespace prioccl
