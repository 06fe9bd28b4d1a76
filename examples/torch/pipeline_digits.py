"""Pipelined model parallelism on scikit-learn's digits: a 4-layer MLP cut into one stage per
rank (run with 4 ranks), PipeDream's 1F1B schedule over prioccl send/recv, and the weight
policy --variant vanilla | stashing | spectrain (see prioccl/pipeline.py).

    PYTHONPATH=python mpirun -np 4 /usr/bin/python3 examples/torch/pipeline_digits.py --variant spectrain

Closes with `RESULT mode=pipeline-<variant> seed=... ranks=... epochs=... test_accuracy=...`.
"""
import argparse

import torch
from sklearn.datasets import load_digits

import prioccl
from prioccl.pipeline import PipelineStage

WIDTHS = [64, 128, 128, 64, 10]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", default="spectrain", choices=["vanilla", "stashing", "spectrain"])
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    prioccl.init()
    k, n = prioccl.rank(), prioccl.size()
    if n != 4:
        raise SystemExit("pipeline_digits.py: run with 4 ranks (one per stage)")
    torch.manual_seed(a.seed * 10 + k)
    layers = [torch.nn.Linear(WIDTHS[k], WIDTHS[k + 1])]
    if k < n - 1:
        layers.append(torch.nn.ReLU())
    module = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(module.parameters(), lr=a.lr, momentum=0.9, weight_decay=1e-4)
    stage = PipelineStage(module, (a.batch, WIDTHS[k]), opt, variant=a.variant)

    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1234))  # fixed split
    train, test = order[:1400], order[1400:]

    def batches(idx):
        return [(x[idx[i:i + a.batch]], y[idx[i:i + a.batch]])
                for i in range(0, len(idx) - a.batch + 1, a.batch)]

    g = torch.Generator().manual_seed(a.seed)  # the same order on every stage
    loss_fn = torch.nn.CrossEntropyLoss()
    for epoch in range(a.epochs):
        stage.train(batches(train[torch.randperm(len(train), generator=g)]), loss_fn)
    acc = stage.evaluate(batches(test))
    prioccl.shutdown()
    if k == 0:
        print(f"RESULT mode=pipeline-{a.variant} seed={a.seed} ranks={n} epochs={a.epochs} "
              f"test_accuracy={acc:.4f}", flush=True)


if __name__ == "__main__":
    main()
