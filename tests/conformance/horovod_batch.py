"""Runs Horovod's test_torch.py tests one after another in one process per rank, as Horovod's own
CI does (one pytest per rank), instead of one mpirun per test: the per-test start-up (MPI,
Python, torch) was most of the suite's time.

Each test's verdict goes to this rank's file in VERDICT_DIR as the test ends, one line each:
    <test name> pass|skip|fail <reason>
After each test the ranks compare verdicts through those files (the communicator may be what
failed). A rank that failed a test exits at once (mpirun then ends the other, which may be stuck
in that test); one that passed waits for the other's verdict and exits if it failed. So a batch
stops after a failed test: a failed test can leave the job's ops unmatched
(one rank raised before a barrier that the other entered), and every later test would inherit
that. horovod_suite.sh starts a new batch from the next test and runs the failed one alone.

Usage (under a 2-rank mpirun, from the suite's folder, with its runner's PYTHONPATH):
    horovod_batch.py VERDICT_DIR TEST_NAME...
"""
import os
import sys
import time
import unittest

PEER_WAIT_S = 150  # a peer stuck in a test fails by PRIOCCL_TIMEOUT_S (the runner's 30 s) first


def verdicts(path):
    """{test name: verdict} from a rank's file so far (complete lines only)."""
    try:
        with open(path) as f:
            lines = f.read().split("\n")[:-1]
    except FileNotFoundError:
        return {}
    return {line.split(" ")[0]: line.split(" ")[1] for line in lines if " " in line}


def main():
    out_dir, names = sys.argv[1], sys.argv[2:]
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    mine, peer = (os.path.join(out_dir, f"rank{r}") for r in (rank, 1 - rank))
    sys.path.insert(0, os.getcwd())
    import test_torch  # Horovod's file, unmodified: its module-level set-up runs as in run.sh

    with open(mine, "a", buffering=1) as out:
        for name in names:
            result = unittest.TestResult()
            test_torch.TorchTests(name).run(result)
            if result.errors or result.failures:
                trace = (result.errors + result.failures)[0][1].strip().splitlines()
                verdict, why = "fail", trace[-1] if trace else "failed"
            elif result.skipped:
                verdict, why = "skip", result.skipped[0][1]
            else:
                verdict, why = "pass", ""
            out.write(f"{name} {verdict} {' '.join(why.split())[:200]}\n")
            if verdict == "fail":  # the peer may be stuck in this test: mpirun ends it
                os._exit(1)  # nothing of the failed job's state is worth a clean shutdown
            deadline = time.monotonic() + PEER_WAIT_S
            while name not in verdicts(peer) and time.monotonic() < deadline:
                time.sleep(0.01)
            if verdicts(peer).get(name, "fail") == "fail":
                os._exit(1)


if __name__ == "__main__":
    main()
