// The CUDA reduction kernels (src/device/reduce_kernels.h) against the host's reduce::apply and
// reduce::divide, bitwise: every dtype x op, Avg's last step, in place, on arbitrary bit patterns
// (NaNs with payloads, -0, subnormals, infinities, integer overflow). Without a usable GPU it
// prints why and exits 77 (CTest: skipped).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "device/reduce_kernels.h"
#include "reduce/reduce.h"

namespace {

using prioccl::reduce::dtypeName;
using prioccl::reduce::dtypeSize;
using prioccl::reduce::opName;

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::vector<unsigned char> bytesOf(uint64_t seed, size_t n) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t h = mix(seed * 0x100000001b3ULL + i);
    std::memcpy(v.data() + i, &h, n - i < 8 ? n - i : 8);
  }
  return v;
}

int failures = 0;

// Whether the element at p, of a floating type, is a NaN: every exponent bit set, a nonzero
// mantissa (little-endian IEEE layouts; bfloat16 is float32's upper half).
bool isNan(const unsigned char* p, priocclDataType_t dt) {
  uint64_t v = 0;
  std::memcpy(&v, p, dtypeSize(dt));
  switch (dt) {
    case priocclFloat16:
      return (v & 0x7c00) == 0x7c00 && (v & 0x03ff) != 0;
    case priocclBfloat16:
      return (v & 0x7f80) == 0x7f80 && (v & 0x007f) != 0;
    case priocclFloat32:
      return (v & 0x7f800000) == 0x7f800000 && (v & 0x007fffff) != 0;
    case priocclFloat64:
      return (v & 0x7ff0000000000000ULL) == 0x7ff0000000000000ULL &&
             (v & 0x000fffffffffffffULL) != 0;
    default:
      return false;
  }
}

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "FAIL: %s: %s\n", what, cudaGetErrorString(e));
  ++failures;
}

void* upload(const std::vector<unsigned char>& h) {
  void* d = nullptr;
  check(cudaMalloc(&d, h.size()), "cudaMalloc");
  check(cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice), "upload");
  return d;
}

std::vector<unsigned char> download(const void* d, size_t n) {
  std::vector<unsigned char> h(n);
  check(cudaMemcpy(h.data(), d, n, cudaMemcpyDeviceToHost), "download");
  return h;
}

void compare(const std::vector<unsigned char>& got, const std::vector<unsigned char>& want,
             const char* what, priocclDataType_t dt, priocclRedOp_t op, int divisor) {
  // A NaN's payload is the one bit pattern allowed to differ: the host loops keep an input NaN's
  // payload (x86 propagates the first NaN operand), CUDA's arithmetic returns its canonical NaN.
  // Every other element, and the NaN-ness itself, must match.
  const size_t width = dtypeSize(dt);
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i]) continue;
    size_t first = i - i % width;
    if (isNan(&want[first], dt) && isNan(&got[first], dt)) {
      i = first + width - 1;
      continue;
    }
    std::fprintf(stderr, "FAIL: %s %s %s divisor %d: byte %zu is %02x, the host's %02x\n", what,
                 dtypeName(dt), opName(op), divisor, i, got[i], want[i]);
    ++failures;
    return;
  }
}

}  // namespace

int main() {
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("no usable GPU: %s\n", e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
    return 77;
  }
  const size_t n = 100003;  // more than one grid's worth of threads per block, and odd
  for (int dt = 0; dt < priocclNumTypes; ++dt) {
    const auto type = static_cast<priocclDataType_t>(dt);
    const size_t bytes = n * dtypeSize(type);
    auto a = bytesOf(2 * dt + 1, bytes), b = bytesOf(2 * dt + 2, bytes);
    void* da = upload(a);
    void* db = upload(b);
    void* dd = upload(std::vector<unsigned char>(bytes, 0));
    for (int o = 0; o < priocclNumOps; ++o) {
      const auto op = static_cast<priocclRedOp_t>(o);
      for (int divisor : {1, 3}) {
        std::vector<unsigned char> want(bytes);
        prioccl::reduce::apply(want.data(), a.data(), b.data(), n, type, op, divisor);
        check(prioccl::device::reduceOnDevice(dd, da, db, n, type, op, divisor, nullptr),
              "reduceOnDevice");
        check(cudaDeviceSynchronize(), "reduceOnDevice's kernel");
        compare(download(dd, bytes), want, "reduce", type, op, divisor);
        // In place: dst is local.
        void* dl = upload(b);
        check(prioccl::device::reduceOnDevice(dl, da, dl, n, type, op, divisor, nullptr),
              "reduceOnDevice in place");
        check(cudaDeviceSynchronize(), "in-place kernel");
        compare(download(dl, bytes), want, "reduce in place", type, op, divisor);
        cudaFree(dl);
      }
    }
    std::vector<unsigned char> want = a;
    prioccl::reduce::divide(want.data(), n, type, 5);
    check(prioccl::device::divideOnDevice(da, n, type, 5, nullptr), "divideOnDevice");
    check(cudaDeviceSynchronize(), "divide kernel");
    compare(download(da, bytes), want, "divide", type, priocclAvg, 5);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dd);
  }
  check(prioccl::device::reduceOnDevice(nullptr, nullptr, nullptr, 1, priocclNumTypes, priocclSum,
                                        1, nullptr) == cudaErrorInvalidValue
            ? cudaSuccess
            : cudaErrorUnknown,
        "an invalid dtype is refused");
  if (failures) return 1;
  std::printf("reduce kernels: every dtype x op bitwise equal to the host\n");
  return 0;
}
