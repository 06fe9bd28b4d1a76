"""prioccl.pipeline.PipelineStage under mpirun: on 1 rank every variant is plain SGD to the last
bit; on several ranks the 1F1B schedule runs to the end with every message matched, the
staleness follows SpecTrain's formula, and evaluation agrees on every rank."""

import torch

import prioccl
from checks import check, finish
from prioccl.pipeline import PipelineStage

def main():
    prioccl.init()
    k, n = prioccl.rank(), prioccl.size()
    g = torch.Generator().manual_seed(5)
    batches = [(torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g))
               for _ in range(12)]
    loss_fn = torch.nn.CrossEntropyLoss()
    if n == 1:
        for variant in ("vanilla", "stashing", "spectrain"):
            torch.manual_seed(0)
            mod = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
            ref = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
            ref.load_state_dict(mod.state_dict())
            opt = torch.optim.SGD(mod.parameters(), lr=0.1, momentum=0.9)
            ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
            PipelineStage(mod, (8, 6), opt, variant=variant).train(batches, loss_fn)
            for x, y in batches:
                ref_opt.zero_grad()
                loss_fn(ref(x), y).backward()
                ref_opt.step()
            for (name, a), b in zip(mod.state_dict().items(), ref.state_dict().values()):
                check(torch.equal(a, b), f"{variant}: one stage is plain SGD ({name})")
    else:
        widths = [6] + [5] * (n - 1) + [3]
        torch.manual_seed(k)
        mod = torch.nn.Linear(widths[k], widths[k + 1])
        opt = torch.optim.SGD(mod.parameters(), lr=0.05, momentum=0.9)
        stage = PipelineStage(mod, (8, widths[k]), opt, variant="spectrain")
        check(stage.staleness[True] == k // 2 + n - k - 1, "forward staleness")
        check(stage.staleness[False] == k // 2, "backward staleness")
        before = mod.weight.detach().clone()
        stage.train(batches, loss_fn)
        check(not torch.equal(before, mod.weight), "the stage trained")
        acc = torch.tensor([stage.evaluate(batches)], dtype=torch.float64)
        lo, hi = acc.clone(), acc.clone()
        prioccl.allreduce_(lo, op=prioccl.Min)
        prioccl.allreduce_(hi, op=prioccl.Max)
        check(torch.equal(lo, hi) and 0 <= acc.item() <= 1, "evaluate agrees on every rank")
    finish("pipeline")


if __name__ == "__main__":
    main()
