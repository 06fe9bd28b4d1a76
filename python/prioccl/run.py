"""Starts N local workers with torchrun's environment contract, for machines without a working
torchrun (Debian 12's crashes at start-up) and without mpirun:

    python3 -m prioccl.run -np 4 train.py --epochs 3
    python3 -m prioccl.run -np 4 --store train.py    # the id through a TCPStore, as torchrun

Each worker gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT;
prioccl.init() then joins them without MPI. The unique id travels through PRIOCCL_COMM_ID (a free
loopback port, set for every worker), or with --store through a torch.distributed TCPStore this
launcher serves at MASTER_ADDR:MASTER_PORT, as torchrun's agent does. When a worker fails, the
others get SIGTERM (then SIGKILL 5 s later), and the launcher exits with the first failure's
code. With --min-np K (an elastic job: prioccl.torch.elastic, prioccl.shrink) the others go on
while at least K workers are left; the launcher then exits with 0 when the workers left all
ended with 0, and names the ones that failed on stderr."""
import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(procs):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 5
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m prioccl.run", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-np", "--nproc", type=int, required=True, help="workers to start")
    parser.add_argument("--store", action="store_true",
                        help="pass the unique id through a TCPStore (needs torch) instead of "
                             "PRIOCCL_COMM_ID")
    parser.add_argument("--min-np", type=int, default=None,
                        help="elastic: keep the others running after a worker fails, while at "
                             "least this many are left")
    parser.add_argument("script", help="a Python script, or a program with -m-less --no-python")
    parser.add_argument("--no-python", action="store_true",
                        help="run `script` as a program, not with this Python")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    a = parser.parse_args(argv)
    if a.nproc < 1:
        parser.error("-np must be at least 1")
    if a.min_np is not None and not 1 <= a.min_np <= a.nproc:
        parser.error("--min-np must lie in 1..-np")
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
               WORLD_SIZE=str(a.nproc), LOCAL_WORLD_SIZE=str(a.nproc))
    for v in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"):  # not an MPI job
        env.pop(v, None)
    store = None
    if a.store:
        import datetime
        from torch.distributed import TCPStore
        store = TCPStore("127.0.0.1", int(env["MASTER_PORT"]), a.nproc + 1, True,
                         datetime.timedelta(seconds=300), wait_for_workers=False)
        env.pop("PRIOCCL_COMM_ID", None)
        # As torchrun sets it for its workers: init_process_group then uses this store.
        env.update(TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT="0")
    else:
        env.setdefault("PRIOCCL_COMM_ID", f"127.0.0.1:{_free_port()}")
    command = ([a.script] if a.no_python else [sys.executable, a.script]) + a.args
    procs = [subprocess.Popen(command, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
             for r in range(a.nproc)]
    code = 0
    lost = []  # elastic: workers that failed while enough were left
    try:
        while any(p.poll() is None for p in procs):
            failed = [p for p in procs if p.poll() not in (None, 0) and p not in lost]
            if failed and a.min_np is not None and len(procs) - len(lost) - 1 >= a.min_np:
                lost.append(failed[0])
                rank = procs.index(failed[0])
                print(f"prioccl.run: worker {rank} failed (exit {failed[0].returncode}); "
                      f"{len(procs) - len(lost)} go on (--min-np {a.min_np})", file=sys.stderr,
                      flush=True)
                continue
            if failed:
                code = failed[0].returncode
                _stop(procs)
                break
            time.sleep(0.05)
    except KeyboardInterrupt:
        _stop(procs)
        code = 130
    if code == 0:
        code = next((p.returncode for p in procs if p.returncode and p not in lost), 0)
    del store  # served until every worker is done
    return code


if __name__ == "__main__":
    sys.exit(main())
