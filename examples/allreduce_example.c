/* A 4-rank (or any-rank) all-reduce with the C ABI, checked against MPI_Allreduce.
 * Build: mpicc allreduce_example.c $(pkg-config --cflags --libs prioccl)
 * Run:   mpirun -np 4 ./a.out */
#include <mpi.h>
#include <prioccl/prioccl.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                             \
  do {                                                                          \
    priocclResult_t r_ = (call);                                                \
    if (r_ != priocclSuccess) {                                                 \
      fprintf(stderr, "%s failed: %s (%s)\n", #call, priocclGetErrorString(r_), \
              priocclGetLastError(comm));                                       \
      MPI_Abort(MPI_COMM_WORLD, 1);                                             \
    }                                                                           \
  } while (0)

int main(int argc, char** argv) {
  int provided, rank, size;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  priocclComm_t comm = NULL;
  CHECK(priocclCommInitWorld(&comm));
  CHECK(priocclCommRank(comm, &rank));
  CHECK(priocclCommSize(comm, &size));

  /* One large blocking all-reduce of floats, and eight small async int ops of mixed priority. */
  size_t n = 1000003;
  float* grad = malloc(n * sizeof *grad);
  float* expect = malloc(n * sizeof *expect);
  for (size_t i = 0; i < n; ++i) grad[i] = (float)((rank + 1) * (int)(i % 1000));
  MPI_Allreduce(grad, expect, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  CHECK(priocclAllReduce(grad, grad, n, priocclFloat32, priocclSum, comm));

  int small[8][64], smallExpect[8][64];
  priocclRequest_t req[8];
  for (int k = 0; k < 8; ++k) {
    for (int i = 0; i < 64; ++i) small[k][i] = rank * 1000 + k * 64 + i;
    MPI_Allreduce(small[k], smallExpect[k], 64, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    CHECK(priocclAllReduceAsync(small[k], small[k], 64, priocclInt32, priocclMax, 7 - k, comm,
                                &req[k]));
  }
  for (int k = 0; k < 8; ++k) CHECK(priocclWait(req[k]));

  long wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += grad[i] != expect[i];
  for (int k = 0; k < 8; ++k)
    for (int i = 0; i < 64; ++i) wrong += small[k][i] != smallExpect[k][i];
  long totalWrong = 0;
  MPI_Allreduce(&wrong, &totalWrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    printf("prioccl all-reduce on %d ranks: %zu floats + 8 async int ops, %ld wrong values: %s\n",
           size, n, totalWrong, totalWrong ? "FAILED" : "OK (matches MPI_Allreduce)");
  free(grad);
  free(expect);
  CHECK(priocclCommDestroy(comm));
  MPI_Finalize();
  return totalWrong ? 1 : 0;
}
