"""Prints a fingerprint of float32 sums whose bits depend on the reduction order: rank 0 prints
"BITS <hex>" once every rank's results agree. tests/mpi/check_reproducible.sh runs it as
separate jobs and compares: with default settings (and the same rank count) every run must give
the same bits (issue 41), and a different chunk size must not (else the check could not fail).

Sizes straddle the fixed rule's algorithms (rd, hd, ring) and ops of several chunks; values
span many magnitudes, so float32 addition in another order almost always rounds differently."""

import hashlib
import sys

try:
    import numpy as np
except ImportError:
    print("SKIPPED: numpy is missing (scripts/setup.sh installs python3-numpy)", flush=True)
    sys.exit(0)

import prioccl

prioccl.init()
me = prioccl.rank()
digest = hashlib.sha256()
for n in (1000, 12000, 300000, 3000000):
    rng = np.random.default_rng(1000 * n + me)
    x = (rng.standard_normal(n) * np.exp(rng.uniform(-20, 20, n))).astype(np.float32)
    digest.update(prioccl.allreduce(x, op=prioccl.Sum, name=f"sum{n}").tobytes())
mine = digest.hexdigest()[:16]
fingerprint = np.frombuffer(bytes.fromhex(mine), dtype=np.int64)
low = prioccl.allreduce(fingerprint, op=prioccl.Min, name="fingerprint.min")
high = prioccl.allreduce(fingerprint, op=prioccl.Max, name="fingerprint.max")
prioccl.shutdown()
if low[0] != high[0]:
    print(f"FAIL: ranks ended with different bits (rank {me}: {mine})", flush=True)
    sys.exit(1)
if me == 0:
    print(f"BITS {mine}", flush=True)
