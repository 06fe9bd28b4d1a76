"""prioccl.get_unique_id() and prioccl.init_rank() (priocclGetUniqueId + priocclCommInitRank from
Python), started without mpirun (python3 -m prioccl.run, which sets PRIOCCL_COMM_ID): first the id
every rank derives from PRIOCCL_COMM_ID, then rank 0's random id passed through a file, as a user
would pass it through any channel of their own; bad arguments raise before anything is sent;
Ctrl-C during a join that waits for a missing rank 0 ends it at once (priocclCommInitCancel)."""
import os
import signal
import subprocess
import sys
import time

import numpy as np

import prioccl
from checks import check, finish

rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def raises(what, f):
    try:
        f()
    except prioccl.PriocclError as e:
        return str(e)
    check(False, f"{what}: no PriocclError")
    return ""


def sum_of_ranks(what):
    x = np.full(1000, float(rank + 1))
    prioccl.allreduce_(x, op=prioccl.Sum, name=what)
    check(np.array_equal(x, np.full(1000, size * (size + 1) / 2)), f"{what}: all-reduce")


# Bad arguments: each one raises here, on every rank, and nobody waits for anybody.
good = prioccl.get_unique_id()
check(isinstance(good, bytes) and len(good) == 128, f"get_unique_id: {type(good)} {len(good)}")
msg = raises("short id", lambda: prioccl.init_rank(size, good[:5], rank))
check("128 bytes" in msg, f"short id: {msg!r}")
raises("a str id", lambda: prioccl.init_rank(size, "x" * 128, rank))
raises("rank as a float", lambda: prioccl.init_rank(size, good, float(rank)))
msg = raises("rank == size", lambda: prioccl.init_rank(size, good, size))
check("init_rank" in msg and f"{size}" in msg, f"rank == size: {msg!r}")
check(not prioccl.is_initialized(), "a failed init_rank left prioccl initialized")

# 1. PRIOCCL_COMM_ID: the same id on every rank, no passing needed.
derived = prioccl.get_unique_id()
check(derived == good, "PRIOCCL_COMM_ID: two calls gave different ids")
prioccl.init_rank(size, derived, rank)
check(prioccl.rank() == rank and prioccl.size() == size,
      f"rank/size {prioccl.rank()}/{prioccl.size()}")
ids = prioccl.allgather(np.frombuffer(derived, dtype=np.uint8).reshape(1, -1), name="ids")
check(all(bytes(i) == derived for i in ids), "PRIOCCL_COMM_ID: ranks derived different ids")
sum_of_ranks("derived")
msg = raises("init_rank twice", lambda: prioccl.init_rank(size, derived, rank))
check("initialized already" in msg, f"init_rank twice: {msg!r}")
prioccl.shutdown()

# 2. Rank 0's own random id, through a file (written whole, then renamed into place).
port = os.environ["PRIOCCL_COMM_ID"].rsplit(":", 1)[1]
del os.environ["PRIOCCL_COMM_ID"]
path = f"/tmp/prioccl-test-uid-{port}"
if rank == 0:
    uid = prioccl.get_unique_id()
    check(uid != derived, "without PRIOCCL_COMM_ID rank 0's id is the derived one")
    with open(path + ".tmp", "wb") as f:
        f.write(uid)
    os.rename(path + ".tmp", path)
else:
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            print(f"[rank {rank}] FAIL: rank 0's id never appeared at {path}", flush=True)
            sys.exit(1)
        time.sleep(0.01)
    with open(path, "rb") as f:
        uid = f.read()
prioccl.init_rank(size, uid, rank)
sum_of_ranks("random")


def ctrl_c_during_init():
    """A process waiting in init_rank for a rank 0 that never comes takes Ctrl-C (SIGINT) at once:
    KeyboardInterrupt within a few seconds, not at PRIOCCL_TIMEOUT_S (60 s here)."""
    env = dict(os.environ, PRIOCCL_TIMEOUT_S="60", PRIOCCL_COMM_ID=f"127.0.0.1:{int(port) + 1}")
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import prioccl; prioccl.init_rank(2, prioccl.get_unique_id(), 1)"],
        env=env, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    sent = time.monotonic()
    child.send_signal(signal.SIGINT)
    try:
        _, err = child.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        check(False, "Ctrl-C during init_rank: still waiting 30 s later")
        return
    took = time.monotonic() - sent
    check(child.returncode != 0 and "KeyboardInterrupt" in err,
          f"Ctrl-C during init_rank: exit {child.returncode}, stderr {err[-300:]!r}")
    check(took < 5, f"Ctrl-C during init_rank: took {took:.1f} s")


if rank == 0:
    ctrl_c_during_init()
prioccl.barrier()
if rank == 0:
    os.remove(path)
finish("test_unique_id")
