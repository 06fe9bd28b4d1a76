// The training modes' vectorisable kernels over flat buffers, for every float dtype. Values
// are loaded into float (double for float64), computed, and stored back, one element at a time
// in a loop the compiler vectorises.
#include <cmath>

#include "api/op_rules.h"
#include "common/error.h"
#include "prioccl/modes.hpp"
#include "reduce/half.h"

namespace prioccl {
namespace {

// The 16-bit formats compute in float; the others in their own type.
template <typename Codec>
struct Widened : Codec {
  using Math = float;
};
template <typename T>
struct Native {
  using Storage = T;
  using Math = T;
  static T load(T v) { return v; }
  static T store(T v) { return v; }
};

// Calls fn(Codec{}) for a float dtype; anything else is an invalid argument.
template <typename Fn>
void withFloatCodec(priocclDataType_t datatype, const char* what, Fn fn) {
  detail::validateEnums(datatype, priocclSum);
  switch (datatype) {
    case priocclFloat16:
      return fn(Widened<reduce::HalfCodec>{});
    case priocclBfloat16:
      return fn(Widened<reduce::Bf16Codec>{});
    case priocclFloat32:
      return fn(Native<float>{});
    case priocclFloat64:
      return fn(Native<double>{});
    default:
      detail::fail(priocclInvalidArgument, what, ": datatype must be float16, bfloat16, float32 ",
                   "or float64");
  }
}

// Each argument with its name, so that the message says which one is wrong.
template <typename T>
struct Named {
  const char* name;
  T value;
};

void requireBuffers(size_t count, std::initializer_list<Named<const void*>> buffers,
                    const char* what) {
  if (count == 0) return;
  for (const auto& b : buffers)
    if (!b.value)
      detail::fail(priocclInvalidArgument, what, ": ", b.name, " is NULL (count ", count, ")");
}

void requireFinite(std::initializer_list<Named<double>> values, const char* what) {
  for (const auto& v : values)
    if (!std::isfinite(v.value))
      detail::fail(priocclInvalidArgument, what, ": ", v.name, " is not finite (", v.value, ")");
}

}  // namespace

void gluUpdate(void* weights, const void* grads, const void* preWeights, size_t count,
               priocclDataType_t datatype, const GluParams& p) {
  requireBuffers(count, {{"weights", weights}, {"grads", grads}, {"preWeights", preWeights}},
                 "gluUpdate");
  requireFinite({{"localLr", p.localLr},
                 {"alpha", p.alpha},
                 {"beta", p.beta},
                 {"weightDecay", p.weightDecay},
                 {"momentum", p.momentum},
                 {"lr", p.lr}},
                "gluUpdate");
  if (p.lr <= 0 || p.k < 1)
    detail::fail(priocclInvalidArgument, "gluUpdate: lr must be > 0 and k >= 1 (lr ", p.lr, ", k ",
                 p.k, ")");
  withFloatCodec(datatype, "gluUpdate", [&](auto codec) {
    using C = decltype(codec);
    using M = typename C::Math;
    auto* w = static_cast<typename C::Storage*>(weights);
    auto* g = static_cast<const typename C::Storage*>(grads);
    auto* pre = static_cast<const typename C::Storage*>(preWeights);
    const M lrLoc = static_cast<M>(p.localLr), alpha = static_cast<M>(p.alpha),
            beta = static_cast<M>(p.beta), wd = static_cast<M>(p.weightDecay),
            syncScale = static_cast<M>((1 - p.momentum) / (p.lr * p.k));
    for (size_t i = 0; i < count; ++i) {
      M wi = C::load(w[i]);
      M gsync = (C::load(pre[i]) - wi) * syncScale;
      w[i] = C::store(wi - lrLoc * (alpha * C::load(g[i]) + wd * wi + beta * gsync));
    }
  });
}

void sgdUpdate(void* weights, void* velocity, const void* grads, size_t count,
               priocclDataType_t datatype, const SgdParams& p) {
  requireBuffers(count, {{"weights", weights}, {"velocity", velocity}, {"grads", grads}},
                 "sgdUpdate");
  requireFinite({{"lr", p.lr}, {"momentum", p.momentum}, {"weightDecay", p.weightDecay}},
                "sgdUpdate");
  withFloatCodec(datatype, "sgdUpdate", [&](auto codec) {
    using C = decltype(codec);
    using M = typename C::Math;
    auto* w = static_cast<typename C::Storage*>(weights);
    auto* v = static_cast<typename C::Storage*>(velocity);
    auto* g = static_cast<const typename C::Storage*>(grads);
    const M lr = static_cast<M>(p.lr), m = static_cast<M>(p.momentum),
            wd = static_cast<M>(p.weightDecay);
    for (size_t i = 0; i < count; ++i) {
      M wi = C::load(w[i]);
      M vi = m * C::load(v[i]) + (C::load(g[i]) + wd * wi);
      v[i] = C::store(vi);
      w[i] = C::store(wi - lr * vi);
    }
  });
}

void specTrainPredict(void* predicted, const void* weights, const void* velocity, size_t count,
                      priocclDataType_t datatype, double lr, double staleness) {
  requireBuffers(count, {{"predicted", predicted}, {"weights", weights}, {"velocity", velocity}},
                 "specTrainPredict");
  requireFinite({{"lr", lr}, {"staleness", staleness}}, "specTrainPredict");
  withFloatCodec(datatype, "specTrainPredict", [&](auto codec) {
    using C = decltype(codec);
    using M = typename C::Math;
    auto* out = static_cast<typename C::Storage*>(predicted);
    auto* w = static_cast<const typename C::Storage*>(weights);
    auto* v = static_cast<const typename C::Storage*>(velocity);
    const M step = static_cast<M>(staleness * lr);
    for (size_t i = 0; i < count; ++i) out[i] = C::store(C::load(w[i]) - step * C::load(v[i]));
  });
}

int specTrainStaleness(int stage, int stages, bool forward, StalenessRule rule) {
  if (stages < 1 || stage < 0 || stage >= stages)
    detail::fail(priocclInvalidArgument, "specTrainStaleness: stage ", stage,
                 " is not in 0..stages-1 (stages ", stages, ")");
  // Forward of minibatch b on stage k comes N - k - 1 of the stage's updates before the one that
  // applies b's gradient (1F1B's warm-up depth); its backward comes right before that update.
  const int schedule = forward ? stages - stage - 1 : 0;
  switch (rule) {
    case StalenessRule::kPaper:
      // Eqs. 5 and 6 of the paper: floor(k/2) more than the schedule's, in both passes.
      return schedule + stage / 2;
    case StalenessRule::kSchedule:
      return schedule;
  }
  detail::fail(priocclInvalidArgument, "specTrainStaleness: rule ", static_cast<int>(rule),
               " is not a StalenessRule (0 paper, 1 schedule)");
}

double switchDecayLrRatio(long step, long warmupSteps) {
  if (step < 0 || warmupSteps < 0)
    detail::fail(priocclInvalidArgument, "switchDecayLrRatio: step ", step, " and warm-up ",
                 warmupSteps, " must be >= 0");
  if (step < warmupSteps) return 2.0 * static_cast<double>(step + 1) / warmupSteps;
  return 2.0 / 5.0;
}

}  // namespace prioccl
