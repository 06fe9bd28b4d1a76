// Runs a plan for real: compute is slept (layer by layer, against absolute deadlines so sleep
// overheads do not add up), gradients are written and all-reduced through prioccl, and every
// reduced gradient is checked (delayed:K: the weights prioccl::DelayedSgd ends with).
#pragma once

#include <prioccl/modes.hpp>
#include <prioccl/prioccl.hpp>

#include <vector>

#include "plan.h"
#include "profile.h"

namespace emu {

struct RunResult {
  std::vector<double> iterationMs;  // start-to-start, warm-up excluded
  long long wrong = 0;              // checked elements whose sum was not the expected one
  long long checked = 0;
};

RunResult runPlan(const Profile& scaledProfile, const Plan& plan, prioccl::Communicator& comm,
                  int iterations, int warmup);

}  // namespace emu
