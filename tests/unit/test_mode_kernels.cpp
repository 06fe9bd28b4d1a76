// The training modes' kernels against a scalar double-precision reference, for every float
// dtype, and their argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "prioccl/modes.hpp"
#include "reduce/half.h"

namespace prioccl {
namespace {

// A buffer of one dtype, read and written as doubles.
struct Buf {
  priocclDataType_t dt;
  std::vector<unsigned char> bytes;
  Buf(priocclDataType_t d, size_t n) : dt(d), bytes(n * size()) {}
  size_t size() const { return dt == priocclFloat64 ? 8 : dt == priocclFloat32 ? 4 : 2; }
  void* data() { return bytes.data(); }
  double get(size_t i) const {
    const unsigned char* p = bytes.data() + i * size();
    switch (dt) {
      case priocclFloat16:
        return reduce::halfToFloat(*reinterpret_cast<const uint16_t*>(p));
      case priocclBfloat16:
        return reduce::bf16ToFloat(*reinterpret_cast<const uint16_t*>(p));
      case priocclFloat32:
        return *reinterpret_cast<const float*>(p);
      default:
        return *reinterpret_cast<const double*>(p);
    }
  }
  void set(size_t i, double v) {
    unsigned char* p = bytes.data() + i * size();
    switch (dt) {
      case priocclFloat16:
        *reinterpret_cast<uint16_t*>(p) = reduce::floatToHalf(static_cast<float>(v));
        break;
      case priocclBfloat16:
        *reinterpret_cast<uint16_t*>(p) = reduce::floatToBf16(static_cast<float>(v));
        break;
      case priocclFloat32:
        *reinterpret_cast<float*>(p) = static_cast<float>(v);
        break;
      default:
        *reinterpret_cast<double*>(p) = v;
    }
  }
};

// Relative precision of one rounding to the dtype (its unit roundoff), plus float's for the
// narrow types (they compute in float).
double unitRoundoff(priocclDataType_t dt) {
  switch (dt) {
    case priocclFloat16:
      return std::ldexp(1.0, -11) + std::ldexp(1.0, -24) * 8;
    case priocclBfloat16:
      return std::ldexp(1.0, -8) + std::ldexp(1.0, -24) * 8;
    case priocclFloat32:
      return std::ldexp(1.0, -24) * 8;
    default:
      return std::ldexp(1.0, -53) * 8;
  }
}

constexpr priocclDataType_t kFloats[] = {priocclFloat16, priocclBfloat16, priocclFloat32,
                                         priocclFloat64};
constexpr size_t kCount = 1037;  // not a multiple of any vector width

Buf randomBuf(priocclDataType_t dt, std::mt19937& rng, double scale) {
  std::uniform_real_distribution<double> u(-scale, scale);
  Buf b(dt, kCount);
  for (size_t i = 0; i < kCount; ++i) b.set(i, u(rng));
  return b;
}

TEST(ModeKernels, GluMatchesScalarReference) {
  std::mt19937 rng(7);
  GluParams p;
  p.localLr = 0.4;
  p.alpha = 2.0;
  p.beta = 0.5;
  p.weightDecay = 1e-4;
  p.momentum = 0.9;
  p.lr = 0.1;
  p.k = 3;
  for (priocclDataType_t dt : kFloats) {
    Buf w = randomBuf(dt, rng, 1.0), g = randomBuf(dt, rng, 0.5), pre = randomBuf(dt, rng, 1.0);
    Buf before = w;
    gluUpdate(w.data(), g.data(), pre.data(), kCount, dt, p);
    for (size_t i = 0; i < kCount; ++i) {
      double wi = before.get(i), gi = g.get(i), pi = pre.get(i);
      double gsync = (pi - wi) * (1 - p.momentum) / (p.lr * p.k);
      double want = wi - p.localLr * (p.alpha * gi + p.weightDecay * wi + p.beta * gsync);
      // Error bound: a few roundings of terms no larger than these magnitudes.
      double scale =
          std::fabs(wi) +
          p.localLr * (p.alpha * std::fabs(gi) + p.weightDecay * std::fabs(wi) +
                       p.beta * (std::fabs(pi) + std::fabs(wi)) * (1 - p.momentum) / (p.lr * p.k));
      ASSERT_NEAR(w.get(i), want, 4 * unitRoundoff(dt) * scale) << "dtype " << dt << " i " << i;
    }
  }
}

TEST(ModeKernels, SgdMatchesScalarReference) {
  std::mt19937 rng(8);
  SgdParams p;
  p.lr = 0.05;
  p.momentum = 0.9;
  p.weightDecay = 5e-4;
  for (priocclDataType_t dt : kFloats) {
    Buf w = randomBuf(dt, rng, 1.0), v = randomBuf(dt, rng, 0.1), g = randomBuf(dt, rng, 0.5);
    Buf w0 = w, v0 = v;
    sgdUpdate(w.data(), v.data(), g.data(), kCount, dt, p);
    for (size_t i = 0; i < kCount; ++i) {
      double vi = p.momentum * v0.get(i) + g.get(i) + p.weightDecay * w0.get(i);
      double wi = w0.get(i) - p.lr * vi;
      double vscale = std::fabs(v0.get(i)) + std::fabs(g.get(i)) + std::fabs(w0.get(i));
      ASSERT_NEAR(v.get(i), vi, 4 * unitRoundoff(dt) * vscale) << "dtype " << dt;
      // w uses the velocity before its rounding to the dtype (kept in float).
      ASSERT_NEAR(w.get(i), wi, 4 * unitRoundoff(dt) * (std::fabs(w0.get(i)) + p.lr * vscale))
          << "dtype " << dt;
    }
  }
}

TEST(ModeKernels, SpecTrainPredictionMatchesScalarReference) {
  std::mt19937 rng(9);
  for (priocclDataType_t dt : kFloats) {
    Buf w = randomBuf(dt, rng, 1.0), v = randomBuf(dt, rng, 0.3), out(dt, kCount);
    specTrainPredict(out.data(), w.data(), v.data(), kCount, dt, 0.1, 3);
    for (size_t i = 0; i < kCount; ++i) {
      double want = w.get(i) - 3 * 0.1 * v.get(i);
      ASSERT_NEAR(out.get(i), want,
                  4 * unitRoundoff(dt) * (std::fabs(w.get(i)) + 0.3 * std::fabs(v.get(i))));
    }
  }
}

TEST(ModeKernels, SpecTrainStaleness) {
  // 4 stages: forward s = floor(k/2) + N - k - 1 = 3, 2, 2, 1; backward floor(k/2) = 0, 0, 1, 1.
  const int forward[] = {3, 2, 2, 1}, backward[] = {0, 0, 1, 1};
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(specTrainStaleness(k, 4, true), forward[k]) << k;
    EXPECT_EQ(specTrainStaleness(k, 4, false), backward[k]) << k;
    EXPECT_EQ(specTrainStaleness(k, 4, true, StalenessRule::kPaper), forward[k]) << k;
    EXPECT_EQ(specTrainStaleness(k, 4, false, StalenessRule::kPaper), backward[k]) << k;
  }
  EXPECT_EQ(specTrainStaleness(0, 1, true), 0);
  EXPECT_THROW(specTrainStaleness(4, 4, true), InvalidArgument);
  EXPECT_THROW(specTrainStaleness(-1, 4, true), InvalidArgument);
}

TEST(ModeKernels, SpecTrainStalenessFromTheSchedule) {
  // 1F1B on 4 stages, one update per minibatch: stage k runs N - k - 1 = 3, 2, 1, 0 forwards
  // ahead, so the forward of minibatch b meets the version b - (N - k - 1) and b's update is
  // applied to version b; the backward of b comes right before that update.
  const int forward[] = {3, 2, 1, 0};
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(specTrainStaleness(k, 4, true, StalenessRule::kSchedule), forward[k]) << k;
    EXPECT_EQ(specTrainStaleness(k, 4, false, StalenessRule::kSchedule), 0) << k;
  }
  EXPECT_EQ(specTrainStaleness(0, 1, true, StalenessRule::kSchedule), 0);
  EXPECT_THROW(specTrainStaleness(4, 4, true, StalenessRule::kSchedule), InvalidArgument);
  EXPECT_THROW(specTrainStaleness(0, 4, true, static_cast<StalenessRule>(2)), InvalidArgument);
  EXPECT_THROW(specTrainStaleness(0, 4, false, static_cast<StalenessRule>(-1)), InvalidArgument);

  // The C ABI: rule 0 is the paper's (what priocclSpecTrainStaleness gives), 1 the schedule's.
  const int paperForward[] = {3, 2, 2, 1}, paperBackward[] = {0, 0, 1, 1};
  for (int k = 0; k < 4; ++k) {
    for (int fwd = 0; fwd < 2; ++fwd) {
      int paper = -1, schedule = -1, old = -1;
      ASSERT_EQ(priocclSpecTrainStalenessRule(k, 4, fwd, priocclStalenessPaper, &paper),
                priocclSuccess);
      ASSERT_EQ(priocclSpecTrainStalenessRule(k, 4, fwd, priocclStalenessSchedule, &schedule),
                priocclSuccess);
      ASSERT_EQ(priocclSpecTrainStaleness(k, 4, fwd, &old), priocclSuccess);
      EXPECT_EQ(paper, fwd ? paperForward[k] : paperBackward[k]) << k << " " << fwd;
      EXPECT_EQ(schedule, fwd ? forward[k] : 0) << k << " " << fwd;
      EXPECT_EQ(old, paper) << k << " " << fwd;
    }
  }
  int s = -7;
  for (int rule : {2, -1, 100}) {
    EXPECT_EQ(priocclSpecTrainStalenessRule(0, 4, 1, rule, &s), priocclInvalidArgument) << rule;
    const std::string message = priocclGetLastError(nullptr);
    EXPECT_NE(message.find("rule"), std::string::npos) << message;
  }
  EXPECT_EQ(priocclSpecTrainStalenessRule(0, 4, 1, priocclStalenessSchedule, nullptr),
            priocclInvalidArgument);
  EXPECT_EQ(priocclSpecTrainStalenessRule(4, 4, 1, priocclStalenessSchedule, &s),
            priocclInvalidArgument);
  EXPECT_EQ(s, -7);  // no failed call wrote its out-argument
}

TEST(ModeKernels, SwitchDecay) {
  EXPECT_DOUBLE_EQ(switchDecayLrRatio(0, 4), 0.5);
  EXPECT_DOUBLE_EQ(switchDecayLrRatio(3, 4), 2.0);  // the end of warm-up: 2
  EXPECT_DOUBLE_EQ(switchDecayLrRatio(4, 4), 0.4);  // divided by 5 at the switch
  EXPECT_DOUBLE_EQ(switchDecayLrRatio(1000, 4), 0.4);
  EXPECT_DOUBLE_EQ(switchDecayLrRatio(0, 0), 0.4);
  EXPECT_THROW(switchDecayLrRatio(-1, 4), InvalidArgument);
}

TEST(ModeKernels, BadArgumentsAreRefused) {
  float w[4] = {}, g[4] = {}, pre[4] = {};
  int32_t ints[4] = {};
  GluParams p;
  EXPECT_THROW(gluUpdate(ints, ints, ints, 4, priocclInt32, p), InvalidArgument);
  EXPECT_THROW(gluUpdate(nullptr, g, pre, 4, priocclFloat32, p), InvalidArgument);
  gluUpdate(nullptr, nullptr, nullptr, 0, priocclFloat32, p);  // zero length: nothing to touch
  p.lr = 0;
  EXPECT_THROW(gluUpdate(w, g, pre, 4, priocclFloat32, p), InvalidArgument);
  SgdParams s;
  s.lr = NAN;
  EXPECT_THROW(sgdUpdate(w, g, pre, 4, priocclFloat32, s), InvalidArgument);
  EXPECT_THROW(specTrainPredict(w, g, nullptr, 4, priocclFloat32, 0.1, 1), InvalidArgument);
  // An int that is no datatype, as a C caller may pass: through the C ABI, which checks its bits
  // (reading it as the enum would be undefined).
  auto rawEnum = [](int v) {
    priocclDataType_t e;
    std::memcpy(&e, &v, sizeof e);
    return e;
  };
  EXPECT_EQ(priocclSpecTrainPredict(w, g, pre, 4, rawEnum(99), 0.1, 1), priocclInvalidArgument);
}

}  // namespace
}  // namespace prioccl
