#include "api/shape.h"

#include "common/error.h"

namespace prioccl::detail::shape {
namespace {

thread_local uint64_t t_next = 0;

}  // namespace

void setNext(const int64_t* dims, int ndims) {
  if (ndims < 0) fail(priocclInvalidArgument, "shape: ndims ", ndims, " is negative");
  if (ndims > 0 && !dims) fail(priocclInvalidArgument, "shape: dims is null with ndims ", ndims);
  uint64_t h = 1469598103934665603ULL;  // FNV-1a over ndims, then each dimension's bytes
  auto mix = [&](uint64_t v) {
    for (int b = 0; b < 8; ++b, v >>= 8) h = (h ^ (v & 0xff)) * 1099511628211ULL;
  };
  mix(static_cast<uint64_t>(ndims));
  for (int i = 0; i < ndims; ++i) {
    if (dims[i] < 0)
      fail(priocclInvalidArgument, "shape: dims[", i, "] = ", dims[i], " is negative");
    mix(static_cast<uint64_t>(dims[i]));
  }
  t_next = h | 1;  // never 0: 0 means "no shape given"
}

uint64_t takeNext() {
  uint64_t s = t_next;
  t_next = 0;
  return s;
}

}  // namespace prioccl::detail::shape
