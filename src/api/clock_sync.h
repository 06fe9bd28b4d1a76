// The timeline's common clock across ranks, measured once at communicator creation.
#pragma once

#include "bootstrap.h"
#include "common/timeline.h"

namespace prioccl::detail {

// Collective over `bootstrap`, blocking, before the transport exists; with
// PRIOCCL_TIMELINE_CLOCK_SKEW_US (a testing aid) each rank's clock runs rank x N us ahead. A
// failed exchange leaves this rank on its own origin (a warning), never fails the communicator.
TimelineClock measureClock(Bootstrap& bootstrap);

}  // namespace prioccl::detail
