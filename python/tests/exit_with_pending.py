"""Rank 0 leaves with an all-reduce that rank 1 never submits (and without calling shutdown()):
the exit must neither hang nor wait for the op timeout. prioccl's atexit hook gives pending ops
a few seconds, then aborts the communicator, naming the op. CTest checks the message and the
time (its TIMEOUT is far below the op timeout)."""

import numpy as np

import prioccl

prioccl.init()
if prioccl.rank() == 0:
    held = prioccl.allreduce_async_(np.ones(10), name="never")  # kept: never synchronised
    print("rank 0 exits with an op pending", flush=True)
