// Element-wise reduction kernels for every prioccl data type and reduction op.
#ifndef PRIOCCL_REDUCE_REDUCE_H_
#define PRIOCCL_REDUCE_REDUCE_H_

#include <cstddef>

#include "prioccl/prioccl.h"

namespace prioccl {
namespace reduce {

size_t dtypeSize(priocclDataType_t dt);  // 0 for an invalid type
bool isValidDtype(int dt);
bool isValidOp(int op);
const char* dtypeName(priocclDataType_t dt);  // "float32", ...; "invalid" otherwise
const char* opName(priocclRedOp_t op);        // "sum", ...; "invalid" otherwise

// dst[i] = op(in[i], local[i]) for i in [0, n). dst may be in or local (or both), but must not
// overlap either partially.
//
// divisor is 1 on every step except the last one of an Avg, where the sum is then divided by it
// (the rank count). Values below 1 are treated as 1. With divisor 1, Avg is exactly Sum.
//
// Semantics, the library's definition:
// - int8/uint8/int32/uint32/int64/uint64: Sum and Prod wrap modulo 2^bits; Min/Max exact; Avg
//   divides the wrapped sum with C++ integer division (truncating toward zero).
// - float32/float64: computed in the type. Min/Max return a NaN operand if there is one (in's
//   first), else the smaller/larger, in's on ties (so min(+0, -0) is in's zero). Avg: sum, then
//   divide by divisor in the type.
// - float16/bfloat16: both operands widened to float32, computed there as above (Avg divides by
//   (float)divisor), result rounded once to the 16-bit type, nearest even. Min/Max return the
//   chosen operand's bits unchanged.
// Invalid dt or op (the caller validates): does nothing.
void apply(void* dst, const void* in, const void* local, size_t n, priocclDataType_t dt,
           priocclRedOp_t op, int divisor);

// Fills dst[0, n) with op's identity element, what a rank that takes part without data
// contributes (a joined rank, priocclJoin): 0 for Sum and Avg (-0.0 for the floating-point
// types), 1 for Prod, the type's largest value for Min and its smallest for Max (+/-infinity for
// the floating-point types), so that apply() with it returns the other operand's bits (NaNs
// aside). Invalid dt or op: does nothing.
void fillIdentity(void* dst, size_t n, priocclDataType_t dt, priocclRedOp_t op);

// An Avg's division on its own, for a backend that sums first (a collective library without an
// average): data[i] becomes data[i] / divisor as apply()'s Avg computes it (integers truncating
// toward zero, floats in the type, 16-bit floats in float32 rounded once). divisor <= 1: nothing.
void divide(void* data, size_t n, priocclDataType_t dt, int divisor);

// For the simulator (perf/sim): what the arithmetic covered, and whether to do it.
struct ArithmeticTap {
  // Runs without payload: apply(), fillIdentity() and divide() leave memory alone, so the
  // engines' step machines run at a thousand ranks without the arithmetic on data nobody reads.
  bool skip = false;
  // The bytes of output they covered (the simulator charges a rank's CPU for them); the tap's
  // owner reads and clears it.
  size_t bytes = 0;
};
// While set, every call above counts into *tap and skips when it says so. Process-wide and
// unsynchronised: only for one thread's simulation, while no real communicator runs. nullptr
// ends it. Costs a real job one relaxed load per call.
void tapArithmetic(ArithmeticTap* tap);

}  // namespace reduce
}  // namespace prioccl

#endif  // PRIOCCL_REDUCE_REDUCE_H_
