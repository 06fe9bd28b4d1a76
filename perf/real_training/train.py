#!/usr/bin/env python3
"""Data-parallel training of a real model, one variant per run: what a PyTorch user compares
prioccl with (issue 41). Launched one process per rank, by mpirun (perf/testbed.sh run, or
scripts/mpirun-local) or with torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).

    perf/testbed.sh run -- python3 perf/real_training/train.py --model resnet18 --variant p3

Variants, all with torch's and prioccl's default settings:
  compute      no communication (each rank trains alone): the compute time of a step
  gloo         DistributedDataParallel over torch.distributed's gloo backend
  sync         prioccl.torch.DistributedOptimizer, mode="sync" (Horovod's behaviour)
  p3           mode="p3" (priority = the next forward's order of use; updates overlap it)
  lagged       mode="lagged" (last-batch optimisation: one fused all-reduce per step)
  ddp_prioccl  DistributedDataParallel with prioccl's comm hook (prioccl.torch.ddp_comm_hook)
  ddp_backend  DistributedDataParallel over torch.distributed backend "prioccl" (unchanged DDP)

Rank 0 prints one line:
  REAL_TRAINING model=... variant=... ranks=P ... median_ms=M ... cpu_ms=C main_cpu_ms=T
                grad_bytes=G weights=H threads_cpu_ms=main:T,prioccl-prog:X,python3:Y,...
M is the median step time over --steps steps after --warmup steps (a step: forward, backward,
optimizer step; for p3 and lagged, whose communication overlaps the next step, the steady-state
period between step starts). C is rank 0's CPU time per measured step (every thread), T its
training thread's alone; threads_cpu_ms splits C by thread name (main: the training thread;
prioccl-prog: the library's progress thread; python3: every other unnamed thread, Python's,
torch's and gloo's). H fingerprints the final parameters (every rank's must agree; two runs
with the same settings should agree too).
"""
import argparse
import collections
import hashlib
import os
import socket
import statistics
import sys
import time

import torch
import torch.nn as nn

VARIANTS = ("compute", "gloo", "sync", "p3", "lagged", "ddp_prioccl", "ddp_backend")
MODELS = ("resnet18", "resnet50", "mobilenet_v2", "transformer")


class TransformerClassifier(nn.Module):
    """A BERT-small-like encoder from torch.nn: token + position embeddings, 4 layers of 256-wide
    self-attention, mean-pooled into a classifier."""

    def __init__(self, vocab=8000, seq=64, width=256, heads=4, layers=4, classes=10):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Parameter(torch.zeros(1, seq, width))
        layer = nn.TransformerEncoderLayer(width, heads, dim_feedforward=4 * width,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        h = self.encoder(self.tokens(x) + self.positions)
        return self.head(h.mean(dim=1))


def build(model, batch, image, seed):
    """The model (same initial weights on every rank: one seed) and a generator of this rank's
    batches (inputs, labels)."""
    torch.manual_seed(0)
    if model == "transformer":
        net = TransformerClassifier()
    else:
        import torchvision.models as tvm
        net = getattr(tvm, model)(num_classes=10)
    g = torch.Generator().manual_seed(seed)
    if model == "transformer":
        data = [(torch.randint(0, 8000, (batch, 64), generator=g),
                 torch.randint(0, 10, (batch,), generator=g)) for _ in range(4)]
    else:
        data = [(torch.randn(batch, 3, image, image, generator=g),
                 torch.randint(0, 10, (batch,), generator=g)) for _ in range(4)]
    return net, data


def rank_and_size():
    for r, s in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("RANK", "WORLD_SIZE"),
                 ("PMI_RANK", "PMI_SIZE")):
        if r in os.environ and s in os.environ:
            return int(os.environ[r]), int(os.environ[s])
    return 0, 1


def init_gloo(rank, size, backend="gloo"):
    """torch.distributed's default group over `backend` (gloo, or prioccl's). On the testbed
    (hosts pccl<i>) rank 0 is 198.18.0.1 and every host's link is eth0; elsewhere MASTER_ADDR
    (default 127.0.0.1)."""
    import torch.distributed as dist
    on_testbed = socket.gethostname().startswith("pccl")
    addr = os.environ.get("MASTER_ADDR", "198.18.0.1" if on_testbed else "127.0.0.1")
    port = os.environ.get("MASTER_PORT", "29517")
    if on_testbed:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")
    if backend == "prioccl":
        import prioccl.torch  # noqa: F401 - registers the backend
    dist.init_process_group(backend, init_method=f"tcp://{addr}:{port}", rank=rank,
                            world_size=size)
    return dist


def weights_hash(net):
    """The parameters' bytes (not buffers: BatchNorm's running statistics are each rank's own
    under Horovod's optimizer, while DDP broadcasts rank 0's)."""
    h = hashlib.sha256()
    for t in net.parameters():
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def thread_cpu():
    """{tid: (name, CPU ns)} of this process's threads (the training thread named "main")."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:  # the thread ended meanwhile
            continue
        out[int(tid)] = ("main" if int(tid) == os.getpid() else name, ns)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=MODELS, default="resnet18")
    ap.add_argument("--variant", choices=VARIANTS, default="sync")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--image", type=int, default=32, help="image side in pixels (CNNs)")
    ap.add_argument("--steps", type=int, default=10, help="measured steps (after the warm-up)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--tag", default="", help="copied to the output line (e.g. the link rate)")
    ap.add_argument("--p3-gate-bytes", type=int, default=None,
                    help="p3: DistributedOptimizer's p3_gate_bytes (default: the library's)")
    ap.add_argument("--fusion-bytes", type=int, default=None,
                    help="sync/p3: DistributedOptimizer's fusion_bytes, 0 = no groups "
                         "(default: the library's)")
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")
    torch.set_num_threads(args.threads)
    rank, size = rank_and_size()
    net, data = build(args.model, args.batch, args.image, seed=1000 + rank)
    grad_bytes = sum(p.numel() * p.element_size() for p in net.parameters() if p.requires_grad)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    dist = hvd = None
    model = net
    v = args.variant
    if v in ("gloo", "ddp_prioccl", "ddp_backend"):
        dist = init_gloo(rank, size, "prioccl" if v == "ddp_backend" else "gloo")
        model = nn.parallel.DistributedDataParallel(net)
    if v in ("sync", "p3", "lagged", "ddp_prioccl"):
        import prioccl.torch as hvd
        hvd.init()
        if hvd.size() != size:
            sys.exit(f"train.py: prioccl sees {hvd.size()} ranks, the launcher {size}")
    if v == "ddp_prioccl":
        model.register_comm_hook(hvd.PriorityState(model=net), hvd.ddp_comm_hook)
    elif v in ("sync", "p3", "lagged"):
        hvd.broadcast_parameters(net.state_dict(), root_rank=0)
        knobs = {} if args.p3_gate_bytes is None else {"p3_gate_bytes": args.p3_gate_bytes}
        if args.fusion_bytes is not None:
            knobs["fusion_bytes"] = args.fusion_bytes
        opt = hvd.DistributedOptimizer(opt, named_parameters=net.named_parameters(), mode=v,
                                       model=net if v in ("p3", "sync") else None, **knobs)
    loss_fn = nn.CrossEntropyLoss()
    starts = []
    cpu = {}  # process and main-thread CPU seconds at the first measured step and at the end
    for step in range(args.warmup + args.steps + 1):
        starts.append(time.perf_counter())
        if step in (args.warmup, args.warmup + args.steps):
            cpu[step] = (time.process_time(), time.thread_time(), thread_cpu())
        if step == args.warmup + args.steps:
            break
        x, y = data[step % len(data)]
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    if hvd is not None and v != "ddp_prioccl":
        opt.synchronize()  # p3 and lagged: apply the updates still pending
    periods = [(b - a) * 1e3 for a, b in zip(starts[args.warmup:], starts[args.warmup + 1:])]
    # CPU per measured step: the whole process (compute + every library thread) and the training
    # thread alone; the difference is what communication costs in CPU beside the compute.
    (p0, t0, th0), (p1, t1, th1) = cpu[args.warmup], cpu[args.warmup + args.steps]
    cpu_ms, main_cpu_ms = (p1 - p0) * 1e3 / args.steps, (t1 - t0) * 1e3 / args.steps
    by_name = collections.Counter()
    for tid, (name, ns) in th1.items():
        by_name[name] += (ns - th0.get(tid, (name, 0))[1]) / 1e6 / args.steps
    threads = ",".join(f"{n}:{ms:.1f}" for n, ms in by_name.most_common())
    mine = weights_hash(net)
    if rank == 0:
        q = statistics.quantiles(periods, n=4) if len(periods) > 1 else periods * 3
        print(f"REAL_TRAINING model={args.model} variant={v} ranks={size} batch={args.batch} "
              f"image={args.image} steps={args.steps} median_ms={statistics.median(periods):.1f} "
              f"p25_ms={q[0]:.1f} p75_ms={q[2]:.1f} cpu_ms={cpu_ms:.1f} main_cpu_ms={main_cpu_ms:.1f} "
              f"grad_bytes={grad_bytes} weights={mine} threads_cpu_ms={threads}"
              + (f" tag={args.tag}" if args.tag else ""), flush=True)
    # Every rank's weights must agree (compute trains each rank alone: there they differ).
    hashes = [mine]
    if dist is not None:
        hashes = [None] * size
        dist.all_gather_object(hashes, mine)
    elif hvd is not None:
        hashes = hvd.allgather_object(mine)
    if hvd is not None:
        hvd.shutdown()
    if len(set(hashes)) != 1:
        sys.exit(f"train.py: ranks ended with different weights: {hashes}")
    if dist is not None:
        # Not destroy_process_group(): torch 1.13's gloo group deadlocks tearing down on rank 0
        # once the others have left (its runLoop thread holds the lock the main thread waits for).
        sys.stdout.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
