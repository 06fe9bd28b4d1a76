#!/usr/bin/env python3
"""CPU per all-reduce: gloo's (torch.distributed) and prioccl's, of one buffer, in one run on the
same ranks. On 2 shared cores the CPU that communication takes is taken from the training beside
it, so a library that moves the same bytes with more CPU trains slower even where the link is
the limit (docs/benchmarks.md, "Where prioccl's extra CPU per byte goes").

    perf/testbed.sh up 4 3gbit
    PRIOCCL_LIBRARY=build/libprioccl.so PYTHONPATH=python OMP_NUM_THREADS=1 \\
      perf/testbed.sh run -x PRIOCCL_LIBRARY -x PYTHONPATH -x OMP_NUM_THREADS -- \\
      /usr/bin/python3 perf/real_training/allreduce_cpu.py --bytes 26214400 --reps 10

Rank 0 prints, per library and round, one line:
  ALLREDUCE_CPU lib=gloo|prioccl bytes=B wall_ms=W cpu_ms=C ctxsw=K
W: wall time per all-reduce; C: this process's CPU time per all-reduce (every thread: user and
system); K: its context switches per all-reduce. Then prioccl's engine counters for the run
(priocclGetCounters: sends posted, bytes). The ranks are launched by mpirun (perf/testbed.sh run);
gloo meets at --master (the testbed's first host; port 0: rank 0 picks a free one). Before it
exits, each library sums a small integer-valued buffer, which must come out exact.
"""
import argparse
import os
import resource
import socket
import sys
import time

import torch
import torch.distributed as dist

import prioccl


def usage():
    """This process's CPU seconds (user and system) and context switches (voluntary and
    involuntary), every thread's summed."""
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime, u.ru_nvcsw + u.ru_nivcsw


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bytes", type=int, default=25 << 20, help="buffer size (float32)")
    ap.add_argument("--reps", type=int, default=10, help="all-reduces timed per round")
    ap.add_argument("--rounds", type=int, default=2, help="rounds, each timing both libraries")
    ap.add_argument("--only", choices=("gloo", "prioccl"), help="time one library only")
    ap.add_argument("--master", default="198.18.0.1:0",
                    help="gloo's rendezvous host:port (port 0: rank 0 picks a free one)")
    ap.add_argument("--ifname", default="eth0", help="GLOO_SOCKET_IFNAME unless set")
    args = ap.parse_args()

    prioccl.init()
    rank, size = prioccl.rank(), prioccl.size()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", args.ifname)
    host, port = args.master.rsplit(":", 1)
    port = torch.tensor([int(port)])
    if rank == 0 and port.item() == 0:
        with socket.socket() as s:  # free now; gloo's store binds it right after
            s.bind((host, 0))
            port[0] = s.getsockname()[1]
    prioccl.broadcast_(port, root_rank=0)
    dist.init_process_group("gloo", init_method=f"tcp://{host}:{port.item()}", rank=rank,
                            world_size=size)
    x = torch.ones(args.bytes // 4)

    def timed(lib, allreduce):
        allreduce()
        allreduce()
        dist.barrier()
        prioccl.barrier()
        wall, (cpu, switches) = time.perf_counter(), usage()
        for _ in range(args.reps):
            allreduce()
        wall = (time.perf_counter() - wall) / args.reps
        cpu_end, switches_end = usage()
        cpu = (cpu_end - cpu) / args.reps
        switches = (switches_end - switches) / args.reps
        if rank == 0:
            print(f"ALLREDUCE_CPU lib={lib} bytes={x.numel() * 4} wall_ms={wall * 1e3:.1f} "
                  f"cpu_ms={cpu * 1e3:.1f} ctxsw={switches:.0f}", flush=True)

    for _ in range(args.rounds):
        if args.only != "prioccl":
            timed("gloo", lambda: dist.all_reduce(x))
        if args.only != "gloo":
            timed("prioccl", lambda: prioccl.allreduce_(x, op=prioccl.Sum))
    # Integers in float32 add exactly in any order: both libraries must give p(p+1)/2.
    want = size * (size + 1) / 2
    for lib, allreduce in (("gloo", dist.all_reduce),
                           ("prioccl", lambda t: prioccl.allreduce_(t, op=prioccl.Sum))):
        y = torch.full((4099,), float(rank + 1))
        allreduce(y)
        if not bool((y == want).all()):
            print(f"ALLREDUCE_CPU FAIL: {lib}'s sum on rank {rank} is not {want}", flush=True)
            sys.exit(1)
    counters = prioccl.counters()
    if rank == 0:
        print("ALLREDUCE_CPU prioccl counters " +
              " ".join(f"{k}={v}" for k, v in counters.items()), flush=True)
    dist.destroy_process_group()
    prioccl.shutdown()


if __name__ == "__main__":
    main()
