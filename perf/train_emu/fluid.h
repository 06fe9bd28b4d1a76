// Fluid-model prediction of a plan's steady-state iteration time: compute runs the profile's
// layer times one after another; the network is a single server that moves the all-reduce of
// `commMs / model bytes` per byte, serving FIFO or by preemptive priority as the plan says, with
// no per-op cost. It is the time the plan would take on a perfect engine.
#pragma once

#include "plan.h"
#include "profile.h"

namespace emu {

double predictIterationMs(const Profile& scaledProfile, const Plan& plan, double commMs);

}  // namespace emu
