"""A worker of tests/launch/launch_without_mpi.sh (its contract: RANK, WORLD_SIZE,
PRIOCCL_COMM_ID) through the Python package: init without MPI, all-reduces until a rank is
killed (LAUNCH_LOOP_S), then prioccl.shrink() (the survivors find out who is gone, or
LAUNCH_SHRINK=named: the launcher's LAUNCH_VICTIM is named), and an exact all-reduce on the
shrunk communicator. Without a kill it ends with a planned shrink: the last rank leaves.
Prints "LAUNCH rank=R joined", "LAUNCH rank=R lost: ...", "LAUNCH rank=R ok"."""
import os
import sys
import time

import numpy as np

import prioccl


def check_shrunk(me, size, gone):
    """After the shrink: ranks renumbered in order, and their old ranks' sum, exactly."""
    want = me - (me > gone)
    if (prioccl.rank(), prioccl.size()) != (want, size - 1):
        print(f"LAUNCH rank={me} FAILED shrink: rank {prioccl.rank()} of {prioccl.size()}, "
              f"not {want} of {size - 1}", flush=True)
        sys.exit(1)
    total = prioccl.allreduce(np.array([me], dtype=np.int64), op=prioccl.Sum)
    if int(total[0]) != size * (size - 1) // 2 - gone:
        print(f"LAUNCH rank={me} FAILED all-reduce after the shrink: {total}", flush=True)
        sys.exit(1)


def main():
    prioccl.init()
    me, size = prioccl.rank(), prioccl.size()
    x = np.full(1 << 18, me + 1, dtype=np.float64)
    y = prioccl.allreduce(x, op=prioccl.Sum)
    if not np.all(y == size * (size + 1) / 2):
        print(f"LAUNCH rank={me} FAILED all-reduce", flush=True)
        return 1
    gone = int(os.environ.get("LAUNCH_VICTIM", size - 1))
    named = os.environ.get("LAUNCH_SHRINK") == "named"
    loop = os.environ.get("LAUNCH_LOOP_S")
    if loop:
        print(f"LAUNCH rank={me} joined", flush=True)
        end = time.monotonic() + float(loop)
        while time.monotonic() < end:
            try:
                prioccl.allreduce_(x, op=prioccl.Max)
            except prioccl.PriocclError as e:
                print(f"LAUNCH rank={me} lost: {e}", flush=True)
                prioccl.shrink([gone] if named else None)
                check_shrunk(me, size, gone)
                break
    elif size > 1:  # a planned scale-down: the last rank leaves, the others go on without it
        if me != size - 1:
            prioccl.shrink([size - 1])
            check_shrunk(me, size, size - 1)
    prioccl.shutdown()
    print(f"LAUNCH rank={me} ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
