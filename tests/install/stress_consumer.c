/* An independent program written only against the installed prioccl.h: thousands of async ops of
 * random sizes, dtypes, ops and priorities in flight at once, each compared with MPI_Allreduce
 * (integers exactly, floats within rounding). Exit status 0 only if every value on every rank
 * matches. Usage: mpirun -np 4 ./stress_consumer [nops] */
#include <math.h>
#include <mpi.h>
#include <prioccl/prioccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  priocclDataType_t pt;
  MPI_Datatype mt;
  size_t size;
  int isFloat;
} Type;

static const Type kTypes[] = {
    {priocclInt8, MPI_INT8_T, 1, 0},     {priocclUint8, MPI_UINT8_T, 1, 0},
    {priocclInt32, MPI_INT32_T, 4, 0},   {priocclInt64, MPI_INT64_T, 8, 0},
    {priocclFloat32, MPI_FLOAT, 4, 1},   {priocclFloat64, MPI_DOUBLE, 8, 1},
    {priocclUint32, MPI_UINT32_T, 4, 0}, {priocclUint64, MPI_UINT64_T, 8, 0}};
#define NUM_TYPES ((int)(sizeof kTypes / sizeof kTypes[0]))
static const priocclRedOp_t kOps[] = {priocclSum, priocclProd, priocclMin, priocclMax};

static uint64_t rng_state;
static uint64_t next(void) { /* xorshift64*: the same sequence on every rank */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ULL;
}

int main(int argc, char** argv) {
  int provided, rank, size;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int nops = argc > 1 ? atoi(argv[1]) : 2000;
  MPI_Op mpiOps[4] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX};
  priocclComm_t comm;
  if (priocclCommInitWorld(&comm) != priocclSuccess) {
    fprintf(stderr, "init failed: %s\n", priocclGetLastError(NULL));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  void** bufs = calloc(nops, sizeof *bufs);
  void** expect = calloc(nops, sizeof *expect);
  int* typeIdx = calloc(nops, sizeof *typeIdx);
  size_t* counts = calloc(nops, sizeof *counts);
  priocclRequest_t* reqs = calloc(nops, sizeof *reqs);
  rng_state = 0x9E3779B97F4A7C15ULL;
  uint64_t local = 0x1234567ULL * (rank + 1);
  for (int k = 0; k < nops; ++k) {
    int t = (int)(next() % NUM_TYPES), o = (int)(next() % 4);
    size_t n = next() % 8 == 0 ? next() % 300000 : next() % 3000;
    int prio = (int)(next() % 100) - 50;
    const Type* ty = &kTypes[t];
    typeIdx[k] = t;
    counts[k] = n;
    bufs[k] = malloc(n * ty->size + 1);
    expect[k] = malloc(n * ty->size + 1);
    for (size_t i = 0; i < n; ++i) {
      local = local * 6364136223846793005ULL + 1442695040888963407ULL;
      unsigned char* p = (unsigned char*)bufs[k] + i * ty->size;
      if (ty->pt == priocclFloat32) {
        float f = o == 1 ? 0.75f + (float)(local >> 40) / (1 << 24) * 0.5f
                         : (float)(local >> 40) / (1 << 23) - 1.0f;
        memcpy(p, &f, 4);
      } else if (ty->pt == priocclFloat64) {
        double d = o == 1 ? 0.75 + (double)(local >> 11) / 9007199254740992.0 * 0.5
                          : (double)(local >> 11) / 4503599627370496.0 - 1.0;
        memcpy(p, &d, 8);
      } else {
        memcpy(p, &local, ty->size);
      }
    }
    MPI_Allreduce(bufs[k], expect[k], (int)n, ty->mt, mpiOps[o], MPI_COMM_WORLD);
    if (priocclAllReduceAsync(bufs[k], bufs[k], n, ty->pt, kOps[o], prio, comm, &reqs[k]) !=
        priocclSuccess) {
      fprintf(stderr, "submit failed: %s\n", priocclGetLastError(comm));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  long wrong = 0;
  for (int k = nops - 1; k >= 0; --k) { /* wait in reverse order */
    if (priocclWait(reqs[k]) != priocclSuccess) {
      fprintf(stderr, "op %d failed: %s\n", k, priocclGetLastError(comm));
      ++wrong;
      continue;
    }
    const Type* ty = &kTypes[typeIdx[k]];
    for (size_t i = 0; i < counts[k]; ++i) {
      const unsigned char* a = (unsigned char*)bufs[k] + i * ty->size;
      const unsigned char* b = (unsigned char*)expect[k] + i * ty->size;
      if (!ty->isFloat) {
        wrong += memcmp(a, b, ty->size) != 0;
      } else {
        double x, y;
        if (ty->size == 4) {
          float fx, fy;
          memcpy(&fx, a, 4);
          memcpy(&fy, b, 4);
          x = fx;
          y = fy;
        } else {
          memcpy(&x, a, 8);
          memcpy(&y, b, 8);
        }
        double eps = ty->size == 4 ? 1.2e-7 : 2.3e-16;
        /* Both sides round once per rank; sums of values in [-1,1) stay below `size`. */
        wrong += !(fabs(x - y) <= 2.0 * size * eps * (size > fabs(y) ? size : fabs(y)));
      }
    }
  }
  long total = 0;
  MPI_Allreduce(&wrong, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    printf("stress_consumer: %d async ops on %d ranks, %ld wrong values\n", nops, size, total);
  for (int k = 0; k < nops; ++k) {
    free(bufs[k]);
    free(expect[k]);
  }
  free(bufs);
  free(expect);
  free(typeIdx);
  free(counts);
  free(reqs);
  priocclCommDestroy(comm);
  MPI_Finalize();
  return total ? 1 : 0;
}
