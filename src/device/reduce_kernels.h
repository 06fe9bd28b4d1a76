// Reductions on a CUDA device: reduce::apply and reduce::divide (reduce.h) as kernels, with the
// same element functions (reduce/elementwise.h), so a device computes the host's bits. Built when
// nvcc is found (target prioccl_cuda_kernels); checked against the host on a GPU by
// gpu.reduce_kernels. Not yet called by the data path, which reduces staged copies on the host
// (docs/architecture.md, "Device buffers").
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "prioccl/prioccl.h"

namespace prioccl::device {

// Queues dst[i] = op(in[i], local[i]) for i < n on `stream` (device pointers; dst may be in or
// local). Returns the launch's error (cudaErrorInvalidValue for an invalid dtype or op).
cudaError_t reduceOnDevice(void* dst, const void* in, const void* local, size_t n,
                           priocclDataType_t dt, priocclRedOp_t op, int divisor,
                           cudaStream_t stream);

// Queues data[i] /= divisor as an Avg's last step (divisor <= 1: nothing).
cudaError_t divideOnDevice(void* data, size_t n, priocclDataType_t dt, int divisor,
                           cudaStream_t stream);

}  // namespace prioccl::device
