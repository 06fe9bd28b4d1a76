"""PyTorch integration: a drop-in for horovod.torch.DistributedOptimizer.

    opt = prioccl.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             model.named_parameters(), mode="p3", model=model)

Modes:
- "sync": each gradient is all-reduced (averaged) as soon as backward has accumulated it;
  step() waits for them all, then runs the wrapped optimizer (Horovod's behaviour).
- "p3": the same all-reduces, with priority = the order in which the forward pass first uses each
  parameter (recorded by forward pre-hooks, not guessed from names). step() returns at once; the
  next forward of each module waits only for its own parameters' all-reduces and applies their
  update just before the module runs, so communication overlaps the next forward too. Weights
  are bitwise identical to "sync": only the timing changes.
- "lagged": Last Batch Optimization through prioccl's lagged mode: the whole gradient in one
  fused all-reduce overlapping the next iteration; step() applies the previous step's aggregate
  (skipped at the switch step). warmup_steps synchronous steps first; switch_decay=True scales
  the learning rate by LB-SGD's ratio (0 -> 2 over the warm-up, then 2/5).
- "delayed": SSD-SGD through prioccl's delayed mode: gradients averaged in the background every
  step and waited every k steps, GLU local updates in between (alpha, beta, local_lr; defaults
  2, 0.5, 4 x lr), the exact global weights every k-th step. The parameters are moved into one
  flat float32 buffer (they become views of it); lr, momentum and weight_decay come from the
  wrapped SGD optimizer's first param group, which this mode replaces.
"""
import ctypes

import torch

import prioccl
from prioccl import _lib

_MODES = ("sync", "p3", "lagged", "delayed")


class DistributedOptimizer:
    def __init__(self, optimizer, named_parameters, mode="sync", model=None, op=prioccl.Average,
                 warmup_steps=0, switch_decay=False, k=2, alpha=2.0, beta=0.5, local_lr=0.0):
        if mode not in _MODES:
            raise prioccl.PriocclError(f"mode must be one of {_MODES}, not {mode!r}")
        if mode == "p3" and model is None:
            raise prioccl.PriocclError("mode='p3' needs model= (its forward order sets priorities)")
        prioccl._require()
        self.optimizer = optimizer
        self.mode = mode
        self.op = op
        self._named = [(n, p) for n, p in named_parameters if p.requires_grad]
        names = [n for n, _ in self._named]
        if len(set(names)) != len(names):
            raise prioccl.PriocclError("named_parameters has duplicate names")
        self._name = {p: n for n, p in self._named}
        self._handles = {}  # param -> Handle of its gradient's all-reduce
        self._priority = {p: 0 for _, p in self._named}
        self._hooks = []
        self._steps = 0
        if mode in ("sync", "p3"):
            self._register_grad_hooks()
        if mode == "p3":
            self._ready = set()  # params whose update waits for their module's next forward
            self._recorded = False
            self._zero_after_apply = None  # zero_grad() came while updates were pending
            self._register_forward_hooks(model)
        if mode == "lagged":
            self._setup_lagged(warmup_steps, switch_decay)
        if mode == "delayed":
            self._setup_delayed(k, warmup_steps, alpha, beta, local_lr)

    # -- the wrapped optimizer's interface --
    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state)

    def zero_grad(self, set_to_none=False):
        if self.mode != "p3" or not self._ready:
            self.optimizer.zero_grad(set_to_none=set_to_none)
            return
        # P3: gradients still waiting for their module's forward are zeroed after their update.
        for g in self.optimizer.param_groups:
            for p in g["params"]:
                if p not in self._ready and p.grad is not None:
                    if set_to_none:
                        p.grad = None
                    else:
                        p.grad.detach_()
                        p.grad.zero_()
        self._zero_after_apply = "none" if set_to_none else "zero"

    def step(self, closure=None):
        if closure is not None:
            raise prioccl.PriocclError("closures are not supported")
        self._steps += 1
        if self.mode == "sync":
            self._wait(list(self._handles))
            self.optimizer.step()
        elif self.mode == "p3":
            # Updates happen in the next forward, module by module; parameters no forward uses
            # (or all, before the first forward has recorded the order) are updated now.
            self._ready = set(self._handles)
            unhooked = [p for p in self._ready if p not in self._hooked]
            if unhooked:
                self._apply(unhooked)
        elif self.mode == "lagged":
            self._lagged_step()
        else:
            self._delayed_step()

    def synchronize(self):
        """Waits for every gradient in flight and applies every pending update now (delayed:
        applies the gradients in flight to the global weights and restarts from them)."""
        if self.mode == "p3" and self._ready:
            self._apply(list(self._ready))
        elif self.mode == "sync":
            self._wait(list(self._handles))
        elif self.mode == "delayed":
            prioccl._check(self._L.priocclDelayedFlush(self._delayed), "delayed flush")

    # -- sync / p3 --
    def _register_grad_hooks(self):
        self._accumulators = []  # kept alive: their hooks fire once the gradient is accumulated
        for _, p in self._named:
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            self._hooks.append(acc.register_hook(self._make_grad_hook(p)))
            self._accumulators.append(acc)

    def _make_grad_hook(self, p):
        def hook(*_):
            if p in self._handles:
                raise prioccl.PriocclError(f"gradient of {self._name[p]} produced twice before "
                                           "step(): call step() (or synchronize()) in between")
            self._handles[p] = prioccl.allreduce_async_(p.grad, op=self.op,
                                                        priority=self._priority[p],
                                                        name=f"grad.{self._name[p]}")
        return hook

    def _wait(self, params):
        for p in params:
            h = self._handles.pop(p, None)
            if h is not None:
                prioccl.synchronize(h)

    def _apply(self, params):
        """Waits for these parameters' gradients and runs the optimizer on them alone."""
        params = [p for p in params if p in self._ready]
        if not params:
            return
        self._wait(params)
        keep = set(params)
        saved = [g["params"] for g in self.optimizer.param_groups]
        try:
            for g in self.optimizer.param_groups:
                g["params"] = [p for p in g["params"] if p in keep]
            self.optimizer.step()
        finally:
            for g, ps in zip(self.optimizer.param_groups, saved):
                g["params"] = ps
        self._ready -= keep
        if self._zero_after_apply:
            for p in params:
                if self._zero_after_apply == "none":
                    p.grad = None
                else:
                    p.grad.detach_()
                    p.grad.zero_()
            if not self._ready:
                self._zero_after_apply = None

    def _register_forward_hooks(self, model):
        self._hooked = set()
        order = [0]
        for module in model.modules():
            own = [p for p in module.parameters(recurse=False) if p in self._name]
            if not own:
                continue
            self._hooked.update(own)

            def pre_hook(mod, inputs, own=own):
                if not self._recorded:  # the first forward: priority = order of first use
                    for p in own:
                        if p not in self._seen:
                            self._seen.add(p)
                            self._priority[p] = order[0]
                            order[0] += 1
                self._apply(own)
            self._hooks.append(module.register_forward_pre_hook(pre_hook))
        self._seen = set()
        # The order is final once the first forward pass has completed.
        self._hooks.append(model.register_forward_hook(self._end_recording))

    def _end_recording(self, *_):
        self._recorded = True

    # -- lagged --
    def _setup_lagged(self, warmup_steps, switch_decay):
        self._L = prioccl._L
        _lib.declare_modes(self._L)
        self._numel = sum(p.numel() for _, p in self._named)
        dtypes = {p.dtype for _, p in self._named}
        if dtypes != {torch.float32}:
            raise prioccl.PriocclError(f"lagged mode needs float32 parameters, not {dtypes}")
        self._flat = torch.empty(self._numel, dtype=torch.float32)
        self._lagged = ctypes.c_void_p()
        prioccl._check(self._L.priocclLaggedCreate(prioccl._comm, self._numel, 6, self.op,
                                                   warmup_steps, 2 ** 31 - 1,
                                                   b"prioccl.torch.lagged",
                                                   ctypes.byref(self._lagged)), "lagged create")
        self._warmup = warmup_steps
        self._switch_decay = switch_decay
        self._base_lr = [g["lr"] for g in self.optimizer.param_groups]

    def _lagged_step(self):
        self._flatten_into(self._flat, lambda p: p.grad)  # zeros where there is no gradient
        has = ctypes.c_int()
        prioccl._check(self._L.priocclLaggedStep(self._lagged, self._flat.data_ptr(),
                                                 self._flat.data_ptr(), ctypes.byref(has)),
                       "lagged step")
        if not has.value:
            return  # the switch step: no aggregate yet, no update
        at = 0
        for _, p in self._named:
            n = p.numel()
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad.copy_(self._flat[at:at + n].view_as(p))
            at += n
        if self._switch_decay:
            ratio = ctypes.c_double()
            prioccl._check(self._L.priocclSwitchDecayLrRatio(self._steps - 1, self._warmup,
                                                             ctypes.byref(ratio)), "switch decay")
            for g, lr in zip(self.optimizer.param_groups, self._base_lr):
                g["lr"] = lr * ratio.value
        self.optimizer.step()

    # -- delayed --
    def _flatten_into(self, flat, tensors):
        at = 0
        for _, p in self._named:
            n = p.numel()
            t = tensors(p)
            if t is None:
                flat[at:at + n].zero_()
            else:
                flat[at:at + n].copy_(t.reshape(-1))
            at += n

    def _setup_delayed(self, k, warmup_steps, alpha, beta, local_lr):
        self._L = prioccl._L
        _lib.declare_modes(self._L)
        if {p.dtype for _, p in self._named} != {torch.float32}:
            raise prioccl.PriocclError("delayed mode needs float32 parameters")
        group = self.optimizer.param_groups[0]
        n = sum(p.numel() for _, p in self._named)
        self._flat_w = torch.empty(n, dtype=torch.float32)
        self._flat_g = torch.empty(n, dtype=torch.float32)
        self._flatten_into(self._flat_w, lambda p: p.data)
        at = 0
        for _, p in self._named:  # the parameters become views of the flat buffer
            p.data = self._flat_w[at:at + p.numel()].view_as(p)
            at += p.numel()
        cfg = _lib.DelayedConfig(k=k, lr=group["lr"], momentum=group.get("momentum", 0.0),
                                 weightDecay=group.get("weight_decay", 0.0), alpha=alpha,
                                 beta=beta, localLr=local_lr, warmupSteps=warmup_steps,
                                 priority=2 ** 31 - 1)
        self._delayed = ctypes.c_void_p()
        prioccl._check(self._L.priocclDelayedCreate(prioccl._comm, self._flat_w.data_ptr(), n,
                                                    ctypes.byref(cfg), b"prioccl.torch.delayed",
                                                    ctypes.byref(self._delayed)), "delayed create")

    def _delayed_step(self):
        self._flatten_into(self._flat_g, lambda p: p.grad)
        synced = ctypes.c_int()
        prioccl._check(self._L.priocclDelayedStep(self._delayed, self._flat_g.data_ptr(),
                                                  ctypes.byref(synced)), "delayed step")
        self.last_step_synced = bool(synced.value)

    def close(self):
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self.mode == "lagged" and self._lagged:
            self._L.priocclLaggedDestroy(self._lagged)
            self._lagged = ctypes.c_void_p()
        if self.mode == "delayed" and self._delayed:
            self._L.priocclDelayedDestroy(self._delayed)
            self._delayed = ctypes.c_void_p()
