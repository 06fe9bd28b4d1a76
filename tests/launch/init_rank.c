/* A job started without mpirun (tests/launch/launch_without_mpi.sh starts one process per rank
 * with torchrun's environment contract: RANK, WORLD_SIZE, and PRIOCCL_COMM_ID for the id): the C
 * ABI's unique-id init, then an all-reduce, a ragged all-gather, a split and a ring of sends,
 * each checked exactly. Prints "LAUNCH rank=R ok" and exits 0, or names what failed.
 * With LAUNCH_LOOP_S=S it prints "LAUNCH rank=R joined" after the first all-reduce and then
 * all-reduces for S seconds (the launcher kills a rank meanwhile: the others must fail). With
 * LAUNCH_SHRINK=1 as well, a rank whose all-reduce failed prints "LAUNCH rank=R lost: <error>"
 * and carries on: it shrinks the communicator without rank LAUNCH_VICTIM (default: the last;
 * with LAUNCH_SHRINK=live it does not say which: the survivors find out, PRIOCCL_SHRINK_TO_LIVE),
 * checks an all-reduce there and prints "LAUNCH rank=R ok". Without a kill, the last part ends
 * with a planned shrink: every rank but the last makes a communicator without it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prioccl/prioccl.h"

static int fail(int rank, const char* what, priocclComm_t comm) {
  printf("LAUNCH rank=%d FAILED %s: %s\n", rank, what, priocclGetLastError(comm));
  return 1;
}

/* Every rank but `gone` (which must not call it) shrinks `comm`; the new communicator must
 * renumber the others in order and sum their old ranks exactly. Returns 0 when it did. */
static int shrinkWithout(int gone, int rank, int size, priocclComm_t comm) {
  const int excluded[1] = {gone};
  priocclComm_t rest = NULL;
  /* LAUNCH_SHRINK=live: the survivors find out who is gone themselves. */
  const char* how = getenv("LAUNCH_SHRINK");
  const int live = how && strcmp(how, "live") == 0;
  if (priocclCommShrink(comm, live ? NULL : excluded, live ? PRIOCCL_SHRINK_TO_LIVE : 1, &rest))
    return fail(rank, "priocclCommShrink", comm);
  int newRank = -1, newSize = -1;
  priocclCommRank(rest, &newRank);
  priocclCommSize(rest, &newSize);
  const int want = rank - (rank > gone);
  if (newRank != want || newSize != size - 1) {
    printf("LAUNCH rank=%d FAILED shrink: rank %d of %d, not %d of %d\n", rank, newRank, newSize,
           want, size - 1);
    return 1;
  }
  int64_t mine = rank, sum = 0;
  if (priocclAllReduce(&mine, &sum, 1, priocclInt64, priocclSum, rest) ||
      sum != (int64_t)size * (size - 1) / 2 - gone)
    return fail(rank, "all-reduce on the shrunk communicator", rest);
  if (priocclCommDestroy(rest)) return fail(rank, "priocclCommDestroy (shrunk)", NULL);
  return 0;
}

int main(void) {
  const char* r = getenv("RANK");
  const char* w = getenv("WORLD_SIZE");
  if (!r || !w) {
    printf("LAUNCH FAILED: RANK and WORLD_SIZE must be set\n");
    return 1;
  }
  const int rank = atoi(r), size = atoi(w);
  priocclUniqueId id;
  if (priocclGetUniqueId(&id)) return fail(rank, "priocclGetUniqueId", NULL);
  priocclComm_t comm = NULL;
  if (priocclCommInitRank(&comm, size, id, rank)) return fail(rank, "priocclCommInitRank", NULL);

  enum { kCount = 1 << 20 };
  double* x = malloc(kCount * sizeof(double));
  for (int i = 0; i < kCount; ++i) x[i] = (double)(rank + 1) * (i % 7);
  if (priocclAllReduce(x, x, kCount, priocclFloat64, priocclSum, comm))
    return fail(rank, "priocclAllReduce", comm);
  for (int i = 0; i < kCount; ++i)
    if (x[i] != (double)size * (size + 1) / 2 * (i % 7)) {
      printf("LAUNCH rank=%d FAILED all-reduce element %d: %g\n", rank, i, x[i]);
      return 1;
    }

  const char* loop = getenv("LAUNCH_LOOP_S");
  if (loop) {
    printf("LAUNCH rank=%d joined\n", rank);
    fflush(stdout);
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
      if (priocclAllReduce(x, x, kCount, priocclFloat64, priocclMax, comm)) {
        if (!getenv("LAUNCH_SHRINK")) return fail(rank, "priocclAllReduce in the loop", comm);
        printf("LAUNCH rank=%d lost: %s\n", rank, priocclGetLastError(comm));
        fflush(stdout);
        const char* victim = getenv("LAUNCH_VICTIM");
        if (shrinkWithout(victim ? atoi(victim) : size - 1, rank, size, comm)) return 1;
        priocclCommDestroy(comm);
        free(x);
        printf("LAUNCH rank=%d ok\n", rank);
        return 0;
      }
      clock_gettime(CLOCK_MONOTONIC, &now);
    } while (now.tv_sec - t0.tv_sec < atoi(loop));
  }

  /* Rank k gives k rows of 3 int32s, each holding k. */
  int32_t rows[64 * 3];
  for (int i = 0; i < rank * 3; ++i) rows[i] = rank;
  priocclRows_t result = NULL;
  priocclRequest_t req = NULL;
  if (priocclAllGatherRowsAsync(rows, (size_t)rank, 3, priocclInt32, 0, comm, &result, &req) ||
      priocclWait(req))
    return fail(rank, "priocclAllGatherRowsAsync", comm);
  const void* data = NULL;
  size_t bytes = 0;
  if (priocclRowsGet(result, &data, &bytes, NULL)) return fail(rank, "priocclRowsGet", comm);
  const int32_t* got = data;
  for (int k = 0, at = 0; k < size; ++k)
    for (int i = 0; i < k * 3; ++i, ++at)
      if (got[at] != k) {
        printf("LAUNCH rank=%d FAILED ragged all-gather at %d: %d\n", rank, at, got[at]);
        return 1;
      }
  priocclRowsFree(result);

  /* Evens and odds: each half sums its own ranks. */
  priocclComm_t half = NULL;
  if (priocclCommSplit(comm, rank % 2, rank, &half)) return fail(rank, "priocclCommSplit", comm);
  int64_t mine = rank, sum = 0, want = 0;
  for (int k = rank % 2; k < size; k += 2) want += k;
  if (priocclAllReduce(&mine, &sum, 1, priocclInt64, priocclSum, half) || sum != want)
    return fail(rank, "all-reduce on the split", half);
  priocclCommDestroy(half);

  /* A ring of sends. */
  if (size > 1) {
    int64_t to = rank, from = -1;
    priocclRequest_t s = NULL, q = NULL;
    if (priocclSendAsync(&to, 1, priocclInt64, (rank + 1) % size, 0, 0, comm, &s) ||
        priocclRecvAsync(&from, 1, priocclInt64, (rank + size - 1) % size, 0, 0, comm, &q) ||
        priocclWait(s) || priocclWait(q) || from != (rank + size - 1) % size)
      return fail(rank, "ring of sends", comm);
  }
  /* A planned scale-down: the last rank leaves, the others go on without it. */
  if (size > 1 && rank < size - 1 && shrinkWithout(size - 1, rank, size, comm)) return 1;
  if (priocclCommDestroy(comm)) return fail(rank, "priocclCommDestroy", NULL);
  free(x);
  printf("LAUNCH rank=%d ok\n", rank);
  return 0;
}
