/* An application that initialised MPI with MPI_THREAD_SERIALIZED: prioccl refuses it with a clear
 * priocclInvalidUsage (its progress thread would call MPI concurrently with the application), and
 * accepts it when the application promises, through the config, not to call MPI meanwhile. */
#include <mpi.h>
#include <prioccl/prioccl.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  int provided, failures = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  if (provided != MPI_THREAD_SERIALIZED) {
    printf("SKIP: MPI gave thread level %d instead of MPI_THREAD_SERIALIZED\n", provided);
    MPI_Finalize();
    return 0;
  }
  priocclComm_t comm = NULL;
  priocclResult_t r = priocclCommInitWorld(&comm);
  const char* msg = priocclGetLastError(NULL);
  if (r != priocclInvalidUsage || !strstr(msg, "MPI_THREAD_MULTIPLE") ||
      !strstr(msg, "PRIOCCL_MPI_THREAD_CHECK=0")) {
    printf("FAIL: expected priocclInvalidUsage naming the thread level, got %d: %s\n", r, msg);
    ++failures;
  }
  priocclConfig_t config = PRIOCCL_CONFIG_INITIALIZER;
  config.requireThreadMultiple = 0;
  r = priocclCommInitMPI(&comm, NULL, &config);
  if (r != priocclSuccess) {
    printf("FAIL: SERIALIZED with requireThreadMultiple=0 refused: %s\n",
           priocclGetLastError(NULL));
    ++failures;
  } else {
    int size, v[100];
    priocclCommSize(comm, &size);
    for (int i = 0; i < 100; ++i) v[i] = i;
    r = priocclAllReduce(v, v, 100, priocclInt32, priocclSum, comm);
    if (r != priocclSuccess || v[99] != 99 * size) {
      printf("FAIL: all-reduce under SERIALIZED gave %d, v[99]=%d\n", r, v[99]);
      ++failures;
    }
    priocclCommDestroy(comm);
  }
  MPI_Finalize();
  if (!failures) printf("thread level check: refused without the promise, worked with it\n");
  return failures ? 1 : 0;
}
