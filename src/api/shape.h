// The tensor shape a framework gives for its next collective (priocclShapeNext): Horovod fails
// ranks whose tensors have one element count but different shapes, which counts alone cannot
// tell. Per thread, as a group is: set just before the call, taken by it.
#pragma once

#include <cstdint>

namespace prioccl::detail::shape {

// Records dims[0, ndims) for this thread's next collective.
void setNext(const int64_t* dims, int ndims);
// The digest of the shape set since the last take (never 0), or 0 when none was; clears it.
uint64_t takeNext();

}  // namespace prioccl::detail::shape
