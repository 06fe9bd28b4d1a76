"""Data-parallel training on scikit-learn's handwritten digits (shipped with python3-sklearn: real
data, no download), through prioccl.torch.DistributedOptimizer.

    PYTHONPATH=python mpirun -np 4 /usr/bin/python3 examples/torch/digits.py --mode p3

Each rank trains on its shard of the training set (batch --batch per rank); all ranks end with
the same weights. Prints one line per epoch on rank 0 and a closing
`RESULT mode=... seed=... ranks=... epochs=... test_accuracy=...`.
"""
import argparse
import sys

import torch

import digits_task
import prioccl
import prioccl.torch as ptorch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", default="sync",
                    choices=["sync", "p3", "lagged", "lagged-warmup", "lagged-tricks", "delayed"])
    ap.add_argument("--k", type=int, default=2, help="delayed: wait every K steps")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch", type=int, default=16, help="per rank")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup-epochs", type=int, default=2,
                    help="lagged-warmup, lagged-tricks and delayed: synchronous epochs first")
    ap.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    ap.add_argument("--augment", action="store_true", help="random shifts and noise (training)")
    ap.add_argument("--schedule", default="constant", choices=["constant", "cosine"],
                    help="cosine: decay to 0 over the run, per step, via torch.optim.lr_scheduler")
    a = ap.parse_args()

    prioccl.init()
    rank, size = prioccl.rank(), prioccl.size()
    torch.manual_seed(a.seed)
    xtr, ytr, xte, yte = digits_task.data(a.model == "cnn")
    model = digits_task.model(a.model)
    prioccl.broadcast_parameters(model.state_dict(), root_rank=0)
    sgd = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=1e-4)
    shard = torch.arange(rank, len(xtr), size)
    steps_per_epoch = len(shard) // a.batch
    kwargs = {}
    mode = a.mode
    if mode in ("lagged-warmup", "lagged-tricks"):  # LB-SGD's tricks: warm-up (+ switch decay)
        kwargs = dict(warmup_steps=a.warmup_epochs * steps_per_epoch,
                      switch_decay=mode == "lagged-tricks")
        mode = "lagged"
    if mode == "delayed":  # SSD-SGD: the paper's GLU defaults, S-SGD warm-up epochs first
        kwargs = dict(k=a.k, warmup_steps=a.warmup_epochs * steps_per_epoch)
    opt = ptorch.DistributedOptimizer(sgd, model.named_parameters(), mode=mode, model=model,
                                      **kwargs)
    sched = digits_task.cosine(opt, a.epochs * steps_per_epoch) if a.schedule == "cosine" else None
    loss_fn = torch.nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(a.seed * 1000 + rank)
    for epoch in range(a.epochs):
        perm = shard[torch.randperm(len(shard), generator=g)]
        total = 0.0
        for s in range(steps_per_epoch):
            idx = perm[s * a.batch:(s + 1) * a.batch]
            x = digits_task.augment(xtr[idx], g) if a.augment else xtr[idx]
            opt.zero_grad()
            loss = loss_fn(model(x), ytr[idx])
            loss.backward()
            opt.step()
            if sched:
                sched.step()
            total += loss.item()
        if rank == 0 and (epoch + 1) % 5 == 0:
            print(f"epoch {epoch + 1}: mean loss {total / steps_per_epoch:.4f}", flush=True)
    opt.synchronize()
    with torch.no_grad():
        acc = (model(xte).argmax(1) == yte).float().mean().item()
    same = digits_task.identical_weights(model)
    if hasattr(opt, "close"):
        opt.close()
    prioccl.shutdown()
    if rank == 0:
        label = f"delayed:{a.k}" if a.mode == "delayed" else a.mode
        print(f"RESULT mode={label} model={a.model}{'+augment' if a.augment else ''} "
              f"schedule={a.schedule} seed={a.seed} ranks={size} epochs={a.epochs} "
              f"test_accuracy={acc:.4f} identical_weights={int(same)}", flush=True)
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
