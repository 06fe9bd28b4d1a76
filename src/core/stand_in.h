// A joined rank's part in an op it never submitted (priocclJoin, negotiator.h): an op with the
// decided arguments and a buffer of its own holding the reduction's identity, so the others'
// results are theirs alone.
#pragma once

#include <memory>

#include "common/wire.h"
#include "core/op.h"

namespace prioccl::detail {

// The stand-in for decision `d` (ok, with ranks filled in) on `rank` of `nranks`: named, at
// priority 0, its algorithm left to the engine as a submitted op's.
std::shared_ptr<OpState> makeStandIn(const Decision& d, int rank, int nranks);

}  // namespace prioccl::detail
