/* P3 from C: per-layer all-reduces submitted during backward, each waited for just before the
 * next forward uses its layer (priocclGate*). A toy 4-layer model trained with averaged SGD; at
 * the end every rank checks its weights against synchronous SGD computed with MPI_Allreduce.
 * Build: mpicc p3_gate.c $(pkg-config --cflags --libs prioccl) -lm
 * Run:   mpirun -np 4 ./a.out */
#include <math.h>
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

enum { kLayers = 4, kSteps = 10 };
static const size_t kSize[kLayers] = {1000, 250000, 60000, 10};
static const float kLr = 0.1f;

/* This rank's gradient of `layer`: depends on the weights and the rank, as a real one would. */
static void backward(int rank, int step, const float* w, float* g, size_t n) {
  for (size_t i = 0; i < n; ++i) g[i] = 0.5f * w[i] + (float)(rank + 1) * sinf((float)(i + step));
}

int main(int argc, char** argv) {
  int provided, rank, size;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  priocclComm_t comm = NULL;
  CHECK(priocclCommInitWorld(&comm));
  CHECK(priocclCommRank(comm, &rank));
  CHECK(priocclCommSize(comm, &size));
  priocclGate_t gate = NULL;
  CHECK(priocclGateCreate(comm, kLayers, "p3_gate.grad", &gate));

  float *w[kLayers], *g[kLayers], *ref[kLayers], *refG[kLayers];
  for (int l = 0; l < kLayers; ++l) {
    w[l] = malloc(kSize[l] * sizeof(float));
    g[l] = malloc(kSize[l] * sizeof(float));
    ref[l] = malloc(kSize[l] * sizeof(float));
    refG[l] = malloc(kSize[l] * sizeof(float));
    for (size_t i = 0; i < kSize[l]; ++i) w[l][i] = ref[l][i] = cosf((float)i);
  }
  for (int step = 0; step <= kSteps; ++step) {
    /* Forward: layer l waits only for its own gradient of the last step, then updates. */
    for (int l = 0; l < kLayers; ++l) {
      int submitted = 0;
      CHECK(priocclGateWait(gate, l, &submitted));
      for (size_t i = 0; submitted && i < kSize[l]; ++i) w[l][i] -= kLr * g[l][i];
      /* ... the layer's forward computation would run here, with w[l] ... */
    }
    if (step == kSteps) break;
    /* Backward, last layer first: each gradient goes out as soon as it exists. */
    for (int l = kLayers - 1; l >= 0; --l) {
      backward(rank, step, w[l], g[l], kSize[l]);
      CHECK(priocclGateSubmit(gate, l, g[l], g[l], kSize[l], priocclFloat32, priocclAvg));
    }
    /* The reference: the same step, synchronous, with MPI_Allreduce. */
    for (int l = 0; l < kLayers; ++l) {
      backward(rank, step, ref[l], refG[l], kSize[l]);
      MPI_Allreduce(MPI_IN_PLACE, refG[l], (int)kSize[l], MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      for (size_t i = 0; i < kSize[l]; ++i) ref[l][i] -= kLr * (refG[l][i] / (float)size);
    }
  }
  double worst = 0;
  for (int l = 0; l < kLayers; ++l)
    for (size_t i = 0; i < kSize[l]; ++i) {
      double err = fabs((double)w[l][i] - ref[l][i]) / (1 + fabs(ref[l][i]));
      if (err > worst) worst = err;
    }
  double worstAll = 0;
  MPI_Allreduce(&worst, &worstAll, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  CHECK(priocclGateDestroy(gate));
  for (int l = 0; l < kLayers; ++l) {
    free(w[l]);
    free(g[l]);
    free(ref[l]);
    free(refG[l]);
  }
  CHECK(priocclCommDestroy(comm));
  int ok = worstAll < 1e-5;
  if (rank == 0)
    printf(
        "p3_gate: %d ranks, %d steps, %d layers: largest relative difference from synchronous "
        "SGD %.2e: %s\n",
        size, kSteps, kLayers, worstAll, ok ? "OK" : "WRONG");
  MPI_Finalize();
  return ok ? 0 : 1;
}
