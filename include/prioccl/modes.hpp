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
  // grads and out may be host or device memory; result() is device memory (the current device at
  // construction) where the collectives take only that (PRIOCCL_TRANSPORT=nccl), else host memory.
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

// P3's per-layer gate for C++ training loops. Backward hands each layer's gradient to submit()
// as soon as it is computed; its all-reduce gets priority = layer, so layer 0, which the next
// forward needs first, is the most urgent. The next forward calls wait(layer) just before the
// layer runs: it waits for that layer's all-reduce only (then the caller applies that layer's
// update), so communication of the later layers overlaps the forward of the earlier ones.
// Every rank creates it with the same layer count and key (checked) and submits every layer
// once per iteration; ops are matched by name, so ranks may submit layers in any order.
class PRIOCCL_API LayerGate {
 public:
  LayerGate(const Communicator& comm, int layers, const std::string& key = "prioccl.gate");
  ~LayerGate();  // waits for what is in flight (errors are the caller's to collect by wait())
  LayerGate(const LayerGate&) = delete;
  LayerGate& operator=(const LayerGate&) = delete;

  // Starts the all-reduce of `layer`'s gradient (in place when send == recv). The buffers must
  // stay untouched until wait(layer) returns. InvalidUsage if `layer` was submitted and not
  // waited for since.
  void submit(int layer, const void* send, void* recv, size_t count, priocclDataType_t datatype,
              priocclRedOp_t op);
  // Waits for `layer`'s all-reduce; false when none was submitted since the last wait (e.g.
  // the first forward). Throws the op's error.
  bool wait(int layer);
  void waitAll();
  int layers() const;

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

// SSD-SGD (Algorithms 1 and 2 of the paper) over a flat buffer of float32 weights, updated in
// place. Every rank constructs it with the same arguments and starting weights (both checked:
// InvalidUsage names what differs) and calls step() once per iteration.
//
// After warmupSteps synchronous SGD steps, each step pushes this rank's gradient (an averaging
// all-reduce in the background) and moves the local weights by GLU:
//   w -= localLr (alpha g + wd w + beta gsync),  gsync = (pre - w)(1 - m) / (lr k),
// with `pre` the weights of the last pull. Every k steps the worker pulls: the averages pushed
// since the last pull are applied to an exact replica of the global weights (momentum SGD, each
// with the rate current when it was pushed) and the weights become that replica. As in the paper
// the pull issued at the k-th step is used one step later, so communication overlaps a whole
// iteration; k = 1 is the paper's asynchronous "1-Step" SGD, not synchronous SGD.
class PRIOCCL_API DelayedSgd {
 public:
  struct Options {
    int k = 2;                       // pull the global weights every k steps
    SgdParams sgd;                   // the global (server-side) optimizer
    double alpha = 2.0, beta = 0.5;  // GLU: weight of the local and of the sync gradient
    double localLr = 0;              // GLU's lr; 0: 4 x sgd.lr (the paper's default)
    int warmupSteps = 500;           // synchronous SGD steps first (the paper's warm-up stage)
    int priority = INT_MAX;          // of the background all-reduces
    std::string key = "prioccl.delayed";
  };
  DelayedSgd(const Communicator& comm, float* weights, size_t count, const Options& options);
  ~DelayedSgd();
  DelayedSgd(const DelayedSgd&) = delete;
  DelayedSgd& operator=(const DelayedSgd&) = delete;

  // One iteration with this rank's gradient `grads` (copied): updates the weights in place.
  // Returns true when the weights now derive from the global ones: every warm-up step (then they
  // are exactly global) and every step that uses a pull (global, then one GLU step).
  bool step(const float* grads);
  // The learning-rate schedule (e.g. a warm-up, then a decay): call before step() with the same
  // value on every rank (not checked: it would cost a collective per call). Applies to the
  // gradients pushed from now on. localLr 0 keeps localLr/lr as constructed.
  void setLearningRate(double lr, double localLr = 0);
  double learningRate() const;
  // Waits for the gradients in flight, applies them to the global weights and copies those into
  // the weights: they are then exactly the global ones (to evaluate or checkpoint). The next
  // step starts a new delay cycle, as after the warm-up.
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
// How far ahead SpecTrain predicts, for stage k (0-based) of a pipeline of N stages:
// - kPaper: the SpecTrain paper's version difference (its Eqs. 5 and 6), floor(k/2) + N - k - 1
//   in the forward pass and floor(k/2) in the backward pass: time units, in the paper's
//   schedule, until the minibatch completes its round trip (its backward on stage 0).
// - kSchedule: the number of this stage's own optimizer steps between the pass and the update
//   that applies the minibatch's gradient, in a 1F1B schedule with one update per minibatch per
//   stage (prioccl.pipeline's, measured in its test): N - k - 1 in the forward pass, 0 in the
//   backward pass (it comes right before that update). That is the steady state; while the
//   pipeline fills (minibatch b < N - k - 1 of a run) only b steps intervene in the forward.
// Under such a schedule kPaper overshoots kSchedule by floor(k/2) in both passes; the two agree
// on stages 0 and 1.
enum class StalenessRule { kPaper, kSchedule };
// The staleness s under `rule`. Throws InvalidArgument unless 0 <= k < N and `rule` is one of
// the above.
PRIOCCL_API int specTrainStaleness(int stage, int stages, bool forward,
                                   StalenessRule rule = StalenessRule::kPaper);

}  // namespace prioccl
