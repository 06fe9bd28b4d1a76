"""What the Python tests share: failed checks are collected and printed with their rank and the
"FAIL:" tag CTest looks for; finish() shuts prioccl down and sets the exit code."""
import sys

import prioccl

_failures = []


def check(cond, what):
    if not cond:
        _failures.append(what)
        rank = prioccl.rank() if prioccl.is_initialized() else "?"
        print(f"[rank {rank}] FAIL: {what}", file=sys.stderr, flush=True)


def finish(name):
    rank, size = prioccl.rank(), prioccl.size()
    prioccl.shutdown()
    if _failures:
        sys.exit(1)
    if rank == 0:
        print(f"{name}: all checks passed on {size} ranks", flush=True)
