"""The Python layer's cost per small op: an 8-byte all-reduce (two float32) timed through each
layer in the same run, medians over ranks' max. Compare with the C ABI's own number from
`all_reduce_perf -b 8 -e 8` (run it beside this one).

    PYTHONPATH=python scripts/mpirun-local -np 4 /usr/bin/python3 perf/python_overhead.py -n 2000

Layers: ctypes straight onto priocclAllReduce (the floor any Python binding pays) and onto
priocclAllReduceAsync + priocclWait (what the Python layer calls: async, so the caller can go on)
and its named form (priocclAllReduceNamedAsync: matched through rank 0's negotiation, as every
Python op with a name is),
prioccl's core
(prioccl.allreduce_ on a numpy array and on a torch tensor), and prioccl.torch (hvd.allreduce_,
and hvd.allreduce, which adds autograd and a new output tensor); then per tensor of a group of 16
(prioccl.grouped_allreduce_, one group per call: the library fuses them into one op,
PRIOCCL_FUSION_BYTES), against 16 separate prioccl.allreduce_async_ waited together.
"""
import argparse
import ctypes
import statistics
import time

import numpy as np
import torch

import prioccl
import prioccl.torch as hvd


def timed(fn, n, warmup, per=1):
    """us per op; fn submits `per` ops per call."""
    n = max(1, n // per)
    for _ in range(max(1, warmup // per)):
        fn()
    prioccl.barrier()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    mine = np.array([(time.perf_counter() - start) / (n * per) * 1e6])
    return float(prioccl.allreduce(mine, op=prioccl.Max)[0])  # the slowest rank's mean, us


def async_wait(L, ptr, comm, req=ctypes.c_void_p()):
    L.priocclAllReduceAsync(ptr, ptr, 2, 7, prioccl.Sum, 0, comm, ctypes.byref(req))
    L.priocclWait(req)


def named_async_wait(L, ptr, comm, req=ctypes.c_void_p()):
    L.priocclAllReduceNamedAsync(ptr, ptr, 2, 7, prioccl.Sum, 0, b"overhead.x", comm,
                                 ctypes.byref(req))
    L.priocclWait(req)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=2000, help="ops per measurement")
    ap.add_argument("-w", type=int, default=200, help="warm-up ops")
    ap.add_argument("--reps", type=int, default=3, help="measurements per layer (median)")
    a = ap.parse_args()
    hvd.init()
    arr = np.ones(2, dtype=np.float32)
    ten = torch.ones(2)
    group = [torch.ones(2) for _ in range(16)]
    L, comm = prioccl._L, prioccl._comm
    ptr = arr.ctypes.data
    layers = [
        ("ctypes priocclAllReduce", lambda: L.priocclAllReduce(ptr, ptr, 2, 7, prioccl.Sum, comm)),
        ("ctypes Async + Wait", lambda: async_wait(L, ptr, comm)),
        ("ctypes NamedAsync + Wait", lambda: named_async_wait(L, ptr, comm)),
        ("prioccl.allreduce_ numpy", lambda: prioccl.allreduce_(arr, op=prioccl.Sum)),
        ("prioccl.allreduce_ torch", lambda: prioccl.allreduce_(ten, op=prioccl.Sum)),
        ("hvd.allreduce_", lambda: hvd.allreduce_(ten, op=hvd.Sum)),
        ("hvd.allreduce", lambda: hvd.allreduce(ten, op=hvd.Sum)),
        ("16 allreduce_async_ (each)", lambda: [prioccl.synchronize(h) for h in [
            prioccl.allreduce_async_(t, op=prioccl.Sum) for t in group]], 16),
        ("grouped_allreduce_ 16 (each)",
         lambda: prioccl.grouped_allreduce_(group, op=prioccl.Sum), 16),
    ]
    results = {layer[0]: [] for layer in layers}
    for _ in range(a.reps):  # interleaved, so drift hits every layer alike
        for name, fn, *per in layers:
            results[name].append(timed(fn, a.n, a.w, *per))
    if hvd.rank() == 0:
        base = statistics.median(results[layers[0][0]])
        print(f"# {hvd.size()} ranks, 8 B all-reduce, {a.n} ops x {a.reps} (median of the "
              "slowest rank's mean), us per op")
        for name, runs in results.items():
            med = statistics.median(runs)
            print(f"{name:28s} {med:9.2f} us  (+{med - base:7.2f} over ctypes)  runs "
                  + " ".join(f"{r:.2f}" for r in runs))
    hvd.shutdown()


main()
