"""Pipelined model parallelism over prioccl's send/recv: one stage per rank, PipeDream's 1F1B
schedule with an optimizer step per minibatch, and three weight-version policies:

- "vanilla": forward and backward each use the weights current at that moment (the backward
  recomputes the stage's forward with them), so the gradient mixes weight versions;
- "stashing": the backward uses the weights its forward used (PipeDream's weight stashing);
- "spectrain": forward and backward use weights predicted for the version the update will meet,
  W - s lr v (v: the momentum buffer; s: prioccl's SpecTrain staleness for the stage and pass).

    stage = PipelineStage(module, in_shape, optimizer, variant="spectrain")
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


class PipelineStage:
    def __init__(self, module, in_shape, optimizer, variant="spectrain"):
        if variant not in _VARIANTS:
            raise prioccl.PriocclError(f"variant must be one of {_VARIANTS}, not {variant!r}")
        prioccl._require()
        _lib.declare_modes(prioccl._L)
        self.module, self.optimizer, self.variant = module, optimizer, variant
        self.k, self.n = prioccl.rank(), prioccl.size()
        self.in_shape = tuple(in_shape)  # this stage's input, batch dimension included
        with torch.no_grad():
            self.out_shape = tuple(module(torch.zeros(self.in_shape)).shape)
        self.params = dict(module.named_parameters())
        self.staleness = {fwd: self._staleness(fwd) for fwd in (True, False)}

    def _staleness(self, forward):
        s = ctypes.c_int()
        prioccl._check(prioccl._L.priocclSpecTrainStaleness(self.k, self.n, int(forward),
                                                            ctypes.byref(s)), "staleness")
        return s.value

    def _weights(self, forward):
        """The weights a pass uses under this variant (detached copies)."""
        if self.variant != "spectrain":
            return {n: p.detach().clone() for n, p in self.params.items()}
        lr = self.optimizer.param_groups[0]["lr"]
        out = {}
        for n, p in self.params.items():
            v = self.optimizer.state.get(p, {}).get("momentum_buffer")
            w = p.detach().clone()
            if v is not None:  # W_hat = W - s lr v, through prioccl's kernel
                prioccl._check(prioccl._L.priocclSpecTrainPredict(
                    w.data_ptr(), p.detach().data_ptr(), v.data_ptr(), w.numel(), 6, lr,
                    float(self.staleness[forward])), "spectrain predict")
            out[n] = w
        return out

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
                w = self._weights(forward=True)
                saved[step] = (x, w)
                if not last:
                    with torch.no_grad():
                        y = functional_call(self.module, w, (x,)).contiguous()
                    pending.append(prioccl.send_async(y, self.k + 1, tag=0, priority=0))
            b = step - warmup
            if b >= 0:  # backward of minibatch b, then this stage's update
                x, w_fwd = saved.pop(b)
                w = w_fwd if self.variant == "stashing" else self._weights(forward=False)
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
                self.optimizer.step()
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
