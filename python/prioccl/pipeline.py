"""Pipelined model parallelism over prioccl's send/recv: one stage per rank, PipeDream's 1F1B
schedule with an optimizer step per minibatch, and three weight-version policies:

- "vanilla": forward and backward each use the weights current at that moment (the backward
  recomputes the stage's forward with them), so the gradient mixes weight versions;
- "stashing": the backward uses the weights its forward used (PipeDream's weight stashing);
- "spectrain": forward and backward use predicted weights W - s lr d (prioccl's kernel), with
  lr the parameter's own param group's current learning rate, d the optimizer's last update
  direction (w before its last step - w after, divided by that step's lr, recorded around this
  stage's own optimizer.step() calls, so any optimizer works: for momentum SGD without Nesterov
  d is the momentum buffer up to rounding; before the first step d is unknown and nothing is
  predicted), and s the staleness, by `staleness=`:
  - "schedule": the number of this stage's optimizer steps between the pass and the update
    that applies the minibatch's gradient, in this class's own 1F1B loop: N - k - 1 in the
    forward of stage k (0-based) of N, 0 in the backward (it comes right before that update).
    With a perfect prediction each minibatch then sees the weights sequential SGD would give
    it. That is the steady state; while the pipeline fills (the first N - k - 1 minibatches of
    each train() call) fewer steps intervene.
  - "paper" (the default): the SpecTrain paper's version difference (Eqs. 5, 6), floor(k/2) +
    N - k - 1 forward and floor(k/2) backward, counted in the paper's schedule to the end of
    the minibatch's round trip. In this loop that is floor(k/2) steps further than the update
    (stages >= 2; on the last stages a one-step look-ahead, as Nesterov's). It is the default
    because it is the published method and trained more robustly at a high learning rate
    (examples/torch/pipeline_digits.py at lr 0.05, 10 seeds: 1 run below 50 % against 3 for
    "schedule"; at lr 0.01 the two are alike).

    stage = PipelineStage(module, in_shape, optimizer, variant="spectrain", staleness="paper")
    stage.train(batches, loss_fn)          # every rank calls it with the same batches
    accuracy = stage.evaluate(batches)     # the last stage's correct count, shared with all
Activations go at priority 0, activation gradients at priority 1 (tags 0 and 1).
"""
import ctypes

import torch
from torch.nn.utils.stateless import functional_call

import prioccl
from prioccl import _lib

_VARIANTS = ("vanilla", "stashing", "spectrain")
_STALENESS_RULES = {"paper": 0, "schedule": 1}  # priocclStalenessRule_t


class PipelineStage:
    def __init__(self, module, in_shape, optimizer, variant="spectrain", staleness="paper"):
        if variant not in _VARIANTS:
            raise prioccl.PriocclError(f"variant must be one of {_VARIANTS}, not {variant!r}")
        if not isinstance(staleness, str) or staleness not in _STALENESS_RULES:
            raise prioccl.PriocclError(f"staleness must be one of {tuple(_STALENESS_RULES)}, "
                                       f"not {staleness!r}")
        prioccl._require()
        _lib.declare_modes(prioccl._L)
        self.module, self.optimizer, self.variant = module, optimizer, variant
        self.staleness_rule = staleness
        self.k, self.n = prioccl.rank(), prioccl.size()
        self.in_shape = tuple(in_shape)  # this stage's input, batch dimension included
        with torch.no_grad():
            self.out_shape = tuple(module(torch.zeros(self.in_shape)).shape)
        self.params = dict(module.named_parameters())
        self.staleness = {fwd: self._staleness(fwd) for fwd in (True, False)}
        # Each parameter's own param group, for its learning rate (groups may differ); a
        # parameter the optimizer does not hold is never updated, so never predicted.
        group_of = {id(p): g for g in optimizer.param_groups for p in g["params"]}
        self._groups = {n: group_of[id(p)] for n, p in self.params.items() if id(p) in group_of}
        # The last step's update direction per parameter (contiguous, the parameter's dtype);
        # empty until this stage's first step.
        self.direction = {}

    def _staleness(self, forward):
        s = ctypes.c_int()
        prioccl._check(prioccl._L.priocclSpecTrainStalenessRule(
            self.k, self.n, int(forward), _STALENESS_RULES[self.staleness_rule],
            ctypes.byref(s)), "staleness")
        return s.value

    def weights(self, forward):
        """The weights (detached copies) this stage's next forward (forward=True) or backward
        pass uses under its variant: for "spectrain" W - s lr d per parameter."""
        if self.variant != "spectrain":
            return {n: p.detach().clone() for n, p in self.params.items()}
        s = float(self.staleness[forward])
        out = {}
        for n, p in self.params.items():
            d = self.direction.get(n)
            if d is None or s == 0:  # no step yet, or nothing to predict: W itself
                out[n] = p.detach().clone()
                continue
            src = p.detach().contiguous()
            w = torch.empty_like(src)
            ptr, count, dtype = prioccl._buffer(w)
            prioccl._check(prioccl._L.priocclSpecTrainPredict(
                ptr, src.data_ptr(), d.data_ptr(), count, dtype, float(self._groups[n]["lr"]), s),
                "spectrain predict")
            out[n] = w
        return out

    def _step(self):
        """optimizer.step(), recording for "spectrain" each parameter's update direction
        d = (w before - w after) / lr of this step: the optimizer's own update, whatever it is,
        scaled to one unit of learning rate so that a later lr applies to it."""
        if self.variant != "spectrain":
            self.optimizer.step()
            return
        lrs = {}
        for n, group in self._groups.items():
            p = self.params[n].detach()
            d = self.direction.get(n)
            if d is None:
                d = self.direction[n] = torch.empty_like(p, memory_format=torch.contiguous_format)
            d.copy_(p)  # w before the step, until it is turned into the direction below
            lrs[n] = float(group["lr"])
        try:
            self.optimizer.step()
        except BaseException:
            self.direction = {}  # they hold weights, not directions: none is known
            raise
        for n, lr in lrs.items():
            d = self.direction[n]
            if lr == 0:  # no learning rate to divide by (and no update to extrapolate)
                d.zero_()
            else:
                d.sub_(self.params[n].detach()).div_(lr)

    def train(self, batches, loss_fn):
        """One pass over `batches` (list of (x, y); x used by stage 0, y by the last stage)."""
        first, last = self.k == 0, self.k == self.n - 1
        warmup = self.n - 1 - self.k
        saved = {}  # minibatch -> (input, weights used by its forward)
        pending = []
        for step in range(len(batches) + warmup):
            if step < len(batches):  # forward of minibatch `step`
                if first:
                    x = batches[step][0]
                else:
                    x = torch.empty(self.in_shape)
                    prioccl.synchronize(prioccl.recv_async(x, self.k - 1, tag=0, priority=0))
                w = self.weights(forward=True)
                saved[step] = (x, w)
                if not last:
                    with torch.no_grad():
                        y = functional_call(self.module, w, (x,)).contiguous()
                    pending.append(prioccl.send_async(y, self.k + 1, tag=0, priority=0))
            b = step - warmup
            if b >= 0:  # backward of minibatch b, then this stage's update
                x, w_fwd = saved.pop(b)
                w = w_fwd if self.variant == "stashing" else self.weights(forward=False)
                w = {n: t.requires_grad_() for n, t in w.items()}
                xin = x.clone().requires_grad_(not first)
                out = functional_call(self.module, w, (xin,))
                if last:
                    loss_fn(out, batches[b][1]).backward()
                else:
                    g = torch.empty(self.out_shape)
                    prioccl.synchronize(prioccl.recv_async(g, self.k + 1, tag=1, priority=1))
                    out.backward(g)
                if not first:
                    pending.append(prioccl.send_async(xin.grad.contiguous(), self.k - 1, tag=1,
                                                      priority=1))
                for n, p in self.params.items():
                    p.grad = w[n].grad
                self._step()
        for h in pending:
            prioccl.synchronize(h)

    def evaluate(self, batches):
        """Fraction of correct predictions over `batches`, on every rank."""
        correct = torch.zeros(2, dtype=torch.float64)
        for x, y in batches:
            if self.k > 0:
                x = torch.empty(self.in_shape)
                prioccl.synchronize(prioccl.recv_async(x, self.k - 1, tag=0))
            with torch.no_grad():
                out = self.module(x).contiguous()
            if self.k < self.n - 1:
                prioccl.synchronize(prioccl.send_async(out, self.k + 1, tag=0))
            else:
                correct += torch.tensor([(out.argmax(1) == y).sum().item(), len(y)],
                                        dtype=torch.float64)
        prioccl.allreduce_(correct, op=prioccl.Sum)
        return (correct[0] / correct[1]).item()
