"""Pipelined model parallelism on scikit-learn's digits: a 4-layer MLP cut into one stage per
rank (run with 4 ranks), PipeDream's 1F1B schedule over prioccl send/recv, and the weight
policy --variant vanilla | stashing | spectrain (see prioccl/pipeline.py), and for SpecTrain
--staleness paper (the SpecTrain paper's version difference, the default) | schedule (how far
behind prioccl's 1F1B loop really is: N - k - 1 updates in the forward, 0 in the backward;
floor(k/2) less than the paper's).

    PYTHONPATH=python mpirun -np 4 /usr/bin/python3 examples/torch/pipeline_digits.py --variant spectrain

Closes with `RESULT mode=pipeline-<variant> staleness=... seed=... ranks=... epochs=...
test_accuracy=...`.
"""
import argparse

import torch

import digits_task
import prioccl
from prioccl.pipeline import PipelineStage

WIDTHS = [64, 128, 128, 64, 10]  # the MLP, one layer per stage


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", default="spectrain", choices=["vanilla", "stashing", "spectrain"])
    ap.add_argument("--staleness", default="paper", choices=["paper", "schedule"],
                    help="SpecTrain's prediction distance (spectrain variant only)")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="mlp", choices=["mlp", "cnn"],
                    help="cnn: digits_task's CNN cut into 4 stages")
    ap.add_argument("--augment", action="store_true", help="random shifts and noise (training)")
    ap.add_argument("--schedule", default="constant", choices=["constant", "cosine"],
                    help="cosine: decay to 0 over the run, stepped per epoch")
    a = ap.parse_args()
    prioccl.init()
    k, n = prioccl.rank(), prioccl.size()
    if n != 4:
        raise SystemExit("pipeline_digits.py: run with 4 ranks (one per stage)")
    torch.manual_seed(a.seed * 10 + k)
    if a.model == "cnn":
        stages, shapes = digits_task.cnn_stages()
        module, in_shape = stages[k], shapes[k]
    else:
        layers = [torch.nn.Linear(WIDTHS[k], WIDTHS[k + 1])]
        if k < n - 1:
            layers.append(torch.nn.ReLU())
        module, in_shape = torch.nn.Sequential(*layers), (WIDTHS[k],)
    opt = torch.optim.SGD(module.parameters(), lr=a.lr, momentum=0.9, weight_decay=1e-4)
    stage = PipelineStage(module, (a.batch,) + in_shape, opt, variant=a.variant,
                          staleness=a.staleness)
    sched = digits_task.cosine(opt, a.epochs) if a.schedule == "cosine" else None

    xtr, ytr, xte, yte = digits_task.data(a.model == "cnn")

    def batches(x, y, g=None):
        return [(digits_task.augment(x[i:i + a.batch], g) if g else x[i:i + a.batch],
                 y[i:i + a.batch]) for i in range(0, len(x) - a.batch + 1, a.batch)]

    g = torch.Generator().manual_seed(a.seed)  # the same order on every stage
    loss_fn = torch.nn.CrossEntropyLoss()
    for epoch in range(a.epochs):
        perm = torch.randperm(len(xtr), generator=g)
        stage.train(batches(xtr[perm], ytr[perm], g if a.augment else None), loss_fn)
        if sched:
            sched.step()
    acc = stage.evaluate(batches(xte, yte))
    prioccl.shutdown()
    if k == 0:
        print(f"RESULT mode=pipeline-{a.variant} staleness={a.staleness} "
              f"model={a.model}{'+augment' if a.augment else ''} schedule={a.schedule} "
              f"seed={a.seed} ranks={n} epochs={a.epochs} test_accuracy={acc:.4f}", flush=True)


if __name__ == "__main__":
    main()
