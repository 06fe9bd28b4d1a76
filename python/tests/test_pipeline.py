"""prioccl.pipeline.PipelineStage under mpirun: on 1 rank every variant is plain SGD to the last
bit; on several ranks the 1F1B schedule runs to the end with every message matched, the
staleness follows SpecTrain's formula ("paper") or the loop's measured schedule ("schedule",
checked against optimizer steps counted while it runs), SpecTrain's prediction uses the
optimizer's last update (equal to the momentum buffer for momentum SGD, each param group's own
lr; non-zero under Adam), and evaluation agrees on every rank."""

import torch

import prioccl
from checks import check, finish
from prioccl.pipeline import PipelineStage

def check_schedule_staleness(make_stage, opt_fn, batches, loss_fn, k, n):
    """Counts this stage's optimizer steps while train() runs: the forward (backward) of
    minibatch b is the b-th forward (backward) pass and b's update is step b+1, so the steps
    between a pass and that update are b minus the steps done before the pass."""
    _, stage = make_stage(opt_fn, staleness="schedule")
    steps = [0]
    seen = {True: [], False: []}  # steps done before each pass, in minibatch order
    step, weights = stage.optimizer.step, stage.weights

    def counting_step(*a, **kw):
        steps[0] += 1
        return step(*a, **kw)

    def recording_weights(forward):
        seen[forward].append(steps[0])
        return weights(forward)

    stage.optimizer.step, stage.weights = counting_step, recording_weights
    stage.train(batches, loss_fn)
    check(steps[0] == len(batches), "one optimizer step per minibatch")
    fill = n - 1 - k
    for forward in (True, False):
        measured = [b - before for b, before in enumerate(seen[forward])]
        check(len(measured) == len(batches), f"a pass per minibatch (forward={forward})")
        # Minibatches before the pipeline fills meet version 0 (b steps intervene); after, the
        # steady state is the rule's value.
        want = [min(b, stage.staleness[forward]) for b in range(len(batches))]
        check(measured == want, f"forward={forward}: measured {measured}, want {want}")
    check(stage.staleness[True] == fill and stage.staleness[False] == 0,
          f"schedule staleness {stage.staleness} is N - k - 1 forward, 0 backward")


def check_momentum_equivalence(make_stage, batches, loss_fn):
    """For momentum SGD (no Nesterov) the update direction (w before - w after) / lr is the
    momentum buffer, so the prediction is the old momentum-buffer one; each param group's own lr
    (weight and bias differ here, with weight decay) is the one used."""
    def sgd_groups(m):
        return torch.optim.SGD([{"params": [m.weight]}, {"params": [m.bias], "lr": 0.02}],
                               lr=0.05, momentum=0.9, weight_decay=1e-3)
    for rule in ("schedule", "paper"):
        _, stage = make_stage(sgd_groups, staleness=rule)
        stage.train(batches, loss_fn)
        lrs = {"weight": 0.05, "bias": 0.02}
        for forward in (True, False):
            s = stage.staleness[forward]
            got = stage.weights(forward)
            for name, p in stage.params.items():
                buf = stage.optimizer.state[p]["momentum_buffer"]
                want = p.detach() - s * lrs[name] * buf
                err = (got[name] - want).abs().max().item()
                check(err < 1e-6, f"{rule} forward={forward} {name}: prediction from the "
                      f"update direction is the momentum-buffer one (max error {err:.3g})")
                if s > 0:
                    moved = (got[name] - p.detach()).abs().max().item()
                    check(moved > 1e-4, f"{rule} forward={forward} {name}: predicted ({moved})")


def check_adam_predicts(make_stage, batches, loss_fn):
    """Adam keeps no momentum buffer; the prediction is W - s lr d with d the last step's own
    update per unit of lr, measured here independently around the optimizer's step."""
    _, stage = make_stage(lambda m: torch.optim.Adam(m.parameters(), lr=0.01),
                          staleness="paper")
    before, after = {}, {}
    step = stage.optimizer.step

    def snapshot_step(*a, **kw):
        before.update({n: p.detach().clone() for n, p in stage.params.items()})
        out = step(*a, **kw)
        after.update({n: p.detach().clone() for n, p in stage.params.items()})
        return out

    stage.optimizer.step = snapshot_step
    stage.train(batches, loss_fn)
    for forward in (True, False):
        s = stage.staleness[forward]
        got = stage.weights(forward)
        for name, p in stage.params.items():
            d = (before[name] - after[name]) / 0.01
            want = p.detach() - s * 0.01 * d
            err = (got[name] - want).abs().max().item()
            check(err < 1e-6, f"adam forward={forward} {name}: W - s lr d (max error {err:.3g})")
            moved = (got[name] - p.detach()).abs().max().item()
            if s > 0:
                check(moved > 1e-4, f"adam forward={forward} {name}: a prediction ({moved:.3g})")
            else:
                check(moved == 0, f"adam forward={forward} {name}: s = 0 predicts nothing")


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

        def make_stage(opt_fn, **kw):
            torch.manual_seed(k)
            mod = torch.nn.Linear(widths[k], widths[k + 1])
            return mod, PipelineStage(mod, (8, widths[k]), opt_fn(mod), **kw)

        sgd = lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
        for bad in ("Paper", "", None, 1):
            try:
                make_stage(sgd, staleness=bad)
                check(False, f"staleness={bad!r} is refused")
            except prioccl.PriocclError as e:
                check("staleness" in str(e), f"staleness={bad!r}: the error names it ({e})")
        _, stage = make_stage(sgd, staleness="paper")
        check(stage.staleness[True] == k // 2 + n - k - 1, "paper forward staleness")
        check(stage.staleness[False] == k // 2, "paper backward staleness")
        check_schedule_staleness(make_stage, sgd, batches, loss_fn, k, n)
        check_momentum_equivalence(make_stage, batches, loss_fn)
        check_adam_predicts(make_stage, batches, loss_fn)

        mod, stage = make_stage(sgd)
        check(stage.staleness_rule == "paper", "the default staleness is the paper's")
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
