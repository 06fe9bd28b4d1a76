// The reduction kernels (reduce_kernels.h): one grid-stride loop over functors that call
// elementwise.h's functions, dispatched by dtype and op as reduce.cpp dispatches its loops.
#include <cstdint>

#include "device/reduce_kernels.h"
#include "reduce/elementwise.h"

namespace prioccl::device {
namespace {

using reduce::Bf16Codec;
using reduce::HalfCodec;

template <class F>
__global__ void forEach(size_t n, F f) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(blockDim.x) * gridDim.x)
    f(i);
}

constexpr unsigned kThreads = 256;
constexpr size_t kMaxBlocks = 4096;  // the grid-stride loop covers the rest

template <class F>
cudaError_t launch(size_t n, F f, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  size_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  forEach<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(n, f);
  return cudaGetLastError();
}

template <priocclRedOp_t Op, class T>
struct Combine {
  T* d;
  const T* a;
  const T* b;
  __device__ void operator()(size_t i) const { d[i] = reduce::combine<Op>(a[i], b[i]); }
};

template <class T>
struct Average {
  T* d;
  const T* a;
  const T* b;
  reduce::DivisorOf<T> div;
  __device__ void operator()(size_t i) const { d[i] = reduce::average(a[i], b[i], div); }
};

template <class Codec, priocclRedOp_t Op>
struct Combine16 {
  uint16_t* d;
  const uint16_t* a;
  const uint16_t* b;
  float div;
  __device__ void operator()(size_t i) const {
    d[i] = reduce::combine16<Codec, Op>(a[i], b[i], div);
  }
};

template <class T>
struct Divide {
  T* d;
  reduce::DivisorOf<T> div;
  __device__ void operator()(size_t i) const { d[i] = reduce::divideBy(d[i], div); }
};

template <class Codec>
struct Divide16 {
  uint16_t* d;
  float div;
  __device__ void operator()(size_t i) const { d[i] = reduce::divide16<Codec>(d[i], div); }
};

template <class T>
cudaError_t typed(void* dst, const void* in, const void* local, size_t n, priocclRedOp_t op,
                  int divisor, cudaStream_t s) {
  T* d = static_cast<T*>(dst);
  const T* a = static_cast<const T*>(in);
  const T* b = static_cast<const T*>(local);
  switch (op) {
    case priocclSum:
      return launch(n, Combine<priocclSum, T>{d, a, b}, s);
    case priocclProd:
      return launch(n, Combine<priocclProd, T>{d, a, b}, s);
    case priocclMin:
      return launch(n, Combine<priocclMin, T>{d, a, b}, s);
    case priocclMax:
      return launch(n, Combine<priocclMax, T>{d, a, b}, s);
    case priocclAvg:
      if (divisor > 1)
        return launch(n, Average<T>{d, a, b, static_cast<reduce::DivisorOf<T>>(divisor)}, s);
      return launch(n, Combine<priocclSum, T>{d, a, b}, s);
    default:
      return cudaErrorInvalidValue;
  }
}

template <class Codec>
cudaError_t halves(void* dst, const void* in, const void* local, size_t n, priocclRedOp_t op,
                   int divisor, cudaStream_t s) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* a = static_cast<const uint16_t*>(in);
  const uint16_t* b = static_cast<const uint16_t*>(local);
  switch (op) {
    case priocclSum:
      return launch(n, Combine16<Codec, priocclSum>{d, a, b, 1.0f}, s);
    case priocclProd:
      return launch(n, Combine16<Codec, priocclProd>{d, a, b, 1.0f}, s);
    case priocclMin:
      return launch(n, Combine16<Codec, priocclMin>{d, a, b, 1.0f}, s);
    case priocclMax:
      return launch(n, Combine16<Codec, priocclMax>{d, a, b, 1.0f}, s);
    case priocclAvg:
      if (divisor > 1)
        return launch(n, Combine16<Codec, priocclAvg>{d, a, b, static_cast<float>(divisor)}, s);
      return launch(n, Combine16<Codec, priocclSum>{d, a, b, 1.0f}, s);
    default:
      return cudaErrorInvalidValue;
  }
}

template <class T>
cudaError_t divideTyped(void* data, size_t n, int divisor, cudaStream_t s) {
  return launch(n, Divide<T>{static_cast<T*>(data), static_cast<reduce::DivisorOf<T>>(divisor)}, s);
}

template <class Codec>
cudaError_t divideHalves(void* data, size_t n, int divisor, cudaStream_t s) {
  return launch(n, Divide16<Codec>{static_cast<uint16_t*>(data), static_cast<float>(divisor)}, s);
}

}  // namespace

cudaError_t reduceOnDevice(void* dst, const void* in, const void* local, size_t n,
                           priocclDataType_t dt, priocclRedOp_t op, int divisor,
                           cudaStream_t stream) {
  switch (dt) {
    case priocclInt8:
      return typed<int8_t>(dst, in, local, n, op, divisor, stream);
    case priocclUint8:
      return typed<uint8_t>(dst, in, local, n, op, divisor, stream);
    case priocclInt32:
      return typed<int32_t>(dst, in, local, n, op, divisor, stream);
    case priocclUint32:
      return typed<uint32_t>(dst, in, local, n, op, divisor, stream);
    case priocclInt64:
      return typed<int64_t>(dst, in, local, n, op, divisor, stream);
    case priocclUint64:
      return typed<uint64_t>(dst, in, local, n, op, divisor, stream);
    case priocclFloat16:
      return halves<HalfCodec>(dst, in, local, n, op, divisor, stream);
    case priocclBfloat16:
      return halves<Bf16Codec>(dst, in, local, n, op, divisor, stream);
    case priocclFloat32:
      return typed<float>(dst, in, local, n, op, divisor, stream);
    case priocclFloat64:
      return typed<double>(dst, in, local, n, op, divisor, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t divideOnDevice(void* data, size_t n, priocclDataType_t dt, int divisor,
                           cudaStream_t stream) {
  if (divisor <= 1) return cudaSuccess;
  switch (dt) {
    case priocclInt8:
      return divideTyped<int8_t>(data, n, divisor, stream);
    case priocclUint8:
      return divideTyped<uint8_t>(data, n, divisor, stream);
    case priocclInt32:
      return divideTyped<int32_t>(data, n, divisor, stream);
    case priocclUint32:
      return divideTyped<uint32_t>(data, n, divisor, stream);
    case priocclInt64:
      return divideTyped<int64_t>(data, n, divisor, stream);
    case priocclUint64:
      return divideTyped<uint64_t>(data, n, divisor, stream);
    case priocclFloat16:
      return divideHalves<HalfCodec>(data, n, divisor, stream);
    case priocclBfloat16:
      return divideHalves<Bf16Codec>(data, n, divisor, stream);
    case priocclFloat32:
      return divideTyped<float>(data, n, divisor, stream);
    case priocclFloat64:
      return divideTyped<double>(data, n, divisor, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace prioccl::device
