"""PyTorch DistributedDataParallel on scikit-learn's handwritten digits, its gradient buckets
all-reduced through prioccl (a DDP communication hook, the first layers' bucket most urgent) or
through DDP's own gloo all-reduce.

    PYTHONPATH=python scripts/mpirun-local -np 4 /usr/bin/python3 examples/torch/ddp_hook.py \
        --hook prioccl

DDP needs a process group: rank 0 picks a free loopback port, prioccl broadcasts it and every
rank joins a gloo group there. Each rank trains on its shard of the training set. Prints the
buckets' priorities, one line per 5 epochs on rank 0 and a closing
`RESULT hook=... ranks=... epochs=... final_loss=... test_accuracy=... identical_weights=0|1`
(exit status 1 when the ranks' weights differ).
"""
import argparse
import os
import socket
import sys

import torch
import torch.distributed as dist

import digits_task
import prioccl
import prioccl.torch.ddp as pddp


def init_gloo(rank, size):
    port = torch.zeros(1, dtype=torch.int64)
    if rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port[0] = s.getsockname()[1]
    prioccl.broadcast_(port, root_rank=0, name="ddp_hook.port")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{int(port[0])}", rank=rank,
                            world_size=size)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hook", default="prioccl", choices=["prioccl", "none"],
                    help="prioccl: ddp_comm_hook; none: DDP's own all-reduce (gloo)")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=16, help="per rank")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bucket-kb", type=float, default=2,
                    help="DDP's bucket size (its first bucket's too): 2 KiB gives the small MLP "
                         "one bucket per layer")
    a = ap.parse_args()

    prioccl.init()
    rank, size = prioccl.rank(), prioccl.size()
    init_gloo(rank, size)
    torch.manual_seed(a.seed)
    xtr, ytr, xte, yte = digits_task.data(False)
    model = digits_task.model("mlp")
    dist._DEFAULT_FIRST_BUCKET_BYTES = int(a.bucket_kb * 1024)  # torch's knob, read by DDP()
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=a.bucket_kb / 1024)
    state = None
    if a.hook == "prioccl":
        state = pddp.PriorityState(model)
        ddp.register_comm_hook(state, pddp.ddp_comm_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=0.9, weight_decay=1e-4)
    shard = torch.arange(rank, len(xtr), size)
    steps_per_epoch = len(shard) // a.batch  # the same on every rank: DDP needs equal steps
    steps_per_epoch = int(prioccl.allreduce(torch.tensor([steps_per_epoch]), op=prioccl.Min))
    loss_fn = torch.nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(a.seed * 1000 + rank)
    mean_loss = float("nan")
    for epoch in range(a.epochs):
        perm = shard[torch.randperm(len(shard), generator=g)]
        total = 0.0
        for s in range(steps_per_epoch):
            idx = perm[s * a.batch:(s + 1) * a.batch]
            opt.zero_grad()
            loss = loss_fn(ddp(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
            total += loss.item()
        mean_loss = total / steps_per_epoch
        if rank == 0 and epoch == 0 and state is not None:
            print(f"bucket priorities after the rebuild (bucket index: priority): "
                  f"{dict(sorted(state.priorities.items()))}", flush=True)
        if rank == 0 and (epoch + 1) % 5 == 0:
            print(f"epoch {epoch + 1}: mean loss {mean_loss:.4f}", flush=True)
    with torch.no_grad():
        acc = (model(xte).argmax(1) == yte).float().mean().item()
    same = digits_task.identical_weights(model)
    # The mean training loss of the last epoch over every rank's shard.
    final_loss = float(prioccl.allreduce(torch.tensor([mean_loss], dtype=torch.float64)))
    if state is not None:
        state.close()
    dist.destroy_process_group()
    prioccl.shutdown()
    if rank == 0:
        print(f"RESULT hook={a.hook} seed={a.seed} ranks={size} epochs={a.epochs} "
              f"final_loss={final_loss:.4f} test_accuracy={acc:.4f} identical_weights={int(same)}",
              flush=True)
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
