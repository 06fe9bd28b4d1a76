"""PyTorch integration: a drop-in for horovod.torch.DistributedOptimizer.

    opt = prioccl.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             model.named_parameters(), mode="p3", model=model)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)   # works unchanged

The result is an instance of a subclass of the wrapped optimizer's class (Horovod's way), so
it is a torch.optim.Optimizer: LR schedulers, param_groups, state_dict and load_state_dict work.
It takes over the wrapped optimizer's param groups and state; use it instead of the original.

Modes:
- "sync": each gradient is all-reduced (averaged) as soon as backward has accumulated it;
  step() waits for them all, then runs the optimizer (Horovod's behaviour).
- "p3": the same all-reduces, with priority = the order in which the forward pass first uses each
  parameter (recorded by forward pre-hooks, not guessed from names). step() returns at once; the
  next forward of each module waits only for its own parameters' all-reduces and applies their
  update just before the module runs, so communication overlaps the next forward too. The update
  uses the hyper-parameters (lr, ...) of the step() that produced the gradient, even when a
  scheduler has changed them since: weights are bitwise identical to "sync".
- "lagged": Last Batch Optimization: the whole gradient in one fused all-reduce overlapping the
  next iteration; step() applies the previous step's aggregate (none at the switch step).
  warmup_steps synchronous steps first (all-reduces overlapped with backward, as "sync");
  switch_decay=True multiplies the learning rate the user's schedule sets by LB-SGD's ratio
  (0 -> 2 over the warm-up, then 2/5) for the update only: the schedule itself is untouched.
- "delayed": SSD-SGD (the paper's Algorithms 1-2): gradients averaged in the background every
  step; every k steps the global weights are pulled, used one step later; GLU local updates
  (alpha, beta, local_lr; defaults 2, 0.5, 4 x lr). Needs torch.optim.SGD without nesterov or
  dampening (the paper's server optimizer). Each param group becomes one flat float32 buffer
  (its parameters become views of it) with its own lr, momentum and weight decay; the group's
  current lr is read at every step, so schedulers work.

synchronize() waits for every gradient in flight so that p.grad holds the averaged gradient
(sync, p3: clip after it, then step(); skip_synchronize() is accepted for Horovod code), and
applies every update still pending (p3: the previous step's; lagged: the last aggregate;
delayed: a pull, leaving the exact global weights). Call it before evaluating or checkpointing.
"""
import contextlib
import ctypes
import warnings

import torch

import prioccl
from prioccl import _lib

_MODES = ("sync", "p3", "lagged", "delayed")
_LEAST_URGENT = 2 ** 31 - 1
_FLOAT32 = prioccl._TORCH_TYPES["torch.float32"]  # priocclFloat32, the only dtype lagged mode takes


def DistributedOptimizer(optimizer, named_parameters, mode="sync", model=None, op=prioccl.Average,
                         warmup_steps=0, switch_decay=False, k=2, alpha=2.0, beta=0.5,
                         local_lr=0.0):
    """Wraps `optimizer` (see the module's docstring); returns a torch.optim.Optimizer."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise prioccl.PriocclError(f"optimizer must be a torch.optim.Optimizer, not "
                                   f"{type(optimizer).__name__}")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer, named_parameters, mode, model, op, warmup_steps, switch_decay, k, alpha,
               beta, local_lr)


class _DistributedOptimizer(torch.optim.Optimizer):
    """The methods mixed into a subclass of the wrapped optimizer's class."""

    def __init__(self, optimizer, named_parameters, mode, model, op, warmup_steps, switch_decay,
                 k, alpha, beta, local_lr):
        if mode not in _MODES:
            raise prioccl.PriocclError(f"mode must be one of {_MODES}, not {mode!r}")
        if mode == "p3" and model is None:
            raise prioccl.PriocclError("mode='p3' needs model= (its forward order sets priorities)")
        if warmup_steps < 0:
            raise prioccl.PriocclError(f"warmup_steps must be >= 0, not {warmup_steps}")
        prioccl._require()
        # The wrapped class's constructor, on the wrapped optimizer's groups (their dicts carry
        # every hyper-parameter) and then its state (momentum buffers, ...).
        super(self.__class__, self).__init__(optimizer.param_groups)
        self.state.update(optimizer.state)
        self.mode = mode
        self.op = op
        self._named = [(n, p) for n, p in named_parameters if p.requires_grad]
        names = [n for n, _ in self._named]
        if len(set(names)) != len(names):
            raise prioccl.PriocclError("named_parameters has duplicate names")
        self._name = {p: n for n, p in self._named}
        grouped = {p for g in self.param_groups for p in g["params"]}
        missing = [n for n, p in self._named if p not in grouped]
        if missing:
            raise prioccl.PriocclError(f"parameters not in the optimizer: {missing[:5]}")
        self._handles = {}  # param -> Handle of its gradient's all-reduce
        self._produced = set()  # params whose gradient this iteration's backward produced
        self._priority = {p: 0 for _, p in self._named}
        self._hooks = []
        self._steps = 0
        self._warmup = warmup_steps
        self._lagged = None
        self._delayed = []
        if mode != "delayed":
            self._register_grad_hooks()
        if mode == "p3":
            self._ready = set()  # params whose update waits for their module's next forward
            self._ready_hyper = None  # the hyper-parameters of the step that produced them
            self._recorded = False
            self._zero_after_apply = None  # zero_grad() came while updates were pending
            self._register_forward_hooks(model)
        if mode == "lagged":
            self._setup_lagged(switch_decay)
        if mode == "delayed":
            self._setup_delayed(k, alpha, beta, local_lr)

    def _base(self):
        return super(self.__class__, self)

    def zero_grad(self, set_to_none=False):
        if self.mode != "p3" or not self._ready:
            self._base().zero_grad(set_to_none=set_to_none)
            return
        # P3: gradients still waiting for their module's forward are zeroed after their update.
        for g in self.param_groups:
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
        if self.mode == "sync" or (self.mode == "lagged" and self._steps <= self._warmup):
            self._wait(list(self._handles))
            self._produced.clear()
            if self.mode == "lagged":
                self._step_with_switch_decay()
            else:
                self._base().step()
        elif self.mode == "p3":
            # Updates happen in the next forward, module by module, with this step's
            # hyper-parameters; parameters no forward uses (or all, before the first forward has
            # recorded the order) are updated now.
            self._ready = set(self._produced)
            self._produced.clear()
            self._ready_hyper = [{k: v for k, v in g.items() if k != "params"}
                                 for g in self.param_groups]
            unhooked = [p for p in self._ready if p not in self._hooked]
            if unhooked:
                self._apply(unhooked)
        elif self.mode == "lagged":
            self._lagged_step()
        else:
            self._delayed_step()

    def synchronize(self):
        """Waits for every gradient in flight (p.grad then holds the average) and applies every
        pending update: see the module's docstring."""
        if self.mode == "p3" and self._ready:
            self._apply(list(self._ready))
        self._wait(list(self._handles))
        if self.mode == "lagged" and self._lagged:
            self._lagged_flush()
        if self.mode == "delayed":
            for handle, _, _ in self._delayed:
                prioccl._check(self._L.priocclDelayedFlush(handle), "delayed flush")

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Horovod's idiom (synchronize(); clip; with skip_synchronize(): step()): step() never
        waits twice for a gradient, so there is nothing to skip."""
        yield

    # -- sync / p3 (and lagged's warm-up) --
    def _register_grad_hooks(self):
        self._accumulators = []  # kept alive: their hooks fire once the gradient is accumulated
        for _, p in self._named:
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            self._hooks.append(acc.register_hook(self._make_grad_hook(p)))
            self._accumulators.append(acc)

    def _make_grad_hook(self, p):
        def hook(*_):
            if self.mode == "lagged" and self._steps >= self._warmup:
                return  # lagged after its warm-up: one fused op in step()
            if p in self._produced:
                raise prioccl.PriocclError(f"gradient of {self._name[p]} produced twice before "
                                           "step(): call step() in between")
            self._produced.add(p)
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
        """Waits for these parameters' gradients and runs the optimizer on them alone, with the
        hyper-parameters of the step() that produced them."""
        params = [p for p in params if p in self._ready]
        if not params:
            return
        self._wait(params)
        keep = set(params)
        saved = [dict(g) for g in self.param_groups]
        try:
            for g, hyper in zip(self.param_groups, self._ready_hyper):
                g.update(hyper)
                g["params"] = [p for p in g["params"] if p in keep]
            self._base().step()
        finally:
            for g, old in zip(self.param_groups, saved):
                g.clear()
                g.update(old)
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
    def _setup_lagged(self, switch_decay):
        self._L = prioccl._L
        _lib.declare_modes(self._L)
        self._numel = sum(p.numel() for _, p in self._named)
        dtypes = {p.dtype for _, p in self._named}
        if dtypes != {torch.float32}:
            raise prioccl.PriocclError(f"lagged mode needs float32 parameters, not {dtypes}")
        if switch_decay and self._warmup == 0:
            warnings.warn("prioccl lagged mode: switch_decay without warmup_steps scales the "
                          "learning rate by 0.4 from the first step (LB-SGD pairs it with a "
                          "synchronous warm-up)", stacklevel=3)
        self._flat = torch.empty(self._numel, dtype=torch.float32)
        self._lagged = ctypes.c_void_p()
        # The warm-up runs here as "sync" (overlapped with backward): the fused op starts after.
        prioccl._check(self._L.priocclLaggedCreate(prioccl._comm, self._numel, _FLOAT32, self.op, 0,
                                                   _LEAST_URGENT, b"prioccl.torch.lagged",
                                                   ctypes.byref(self._lagged)), "lagged create")
        self._switch_decay = switch_decay

    def _step_with_switch_decay(self):
        """The optimizer's step, at the user's learning rate times the switch-decay ratio."""
        if not self._switch_decay:
            self._base().step()
            return
        ratio = ctypes.c_double()
        prioccl._check(self._L.priocclSwitchDecayLrRatio(self._steps - 1, self._warmup,
                                                         ctypes.byref(ratio)), "switch decay")
        user = [g["lr"] for g in self.param_groups]
        try:
            for g in self.param_groups:
                g["lr"] = g["lr"] * ratio.value
            self._base().step()
        finally:
            for g, lr in zip(self.param_groups, user):
                g["lr"] = lr

    def _lagged_step(self):
        self._flatten_into(self._flat, lambda p: p.grad)  # zeros where there is no gradient
        has = ctypes.c_int()
        prioccl._check(self._L.priocclLaggedStep(self._lagged, self._flat.data_ptr(),
                                                 self._flat.data_ptr(), ctypes.byref(has)),
                       "lagged step")
        if has.value:  # none at the switch step
            self._apply_flat_grads()

    def _lagged_flush(self):
        has = ctypes.c_int()
        prioccl._check(self._L.priocclLaggedFlush(self._lagged, self._flat.data_ptr(),
                                                  ctypes.byref(has)), "lagged flush")
        if has.value:
            self._apply_flat_grads()

    def _apply_flat_grads(self):
        at = 0
        for _, p in self._named:
            n = p.numel()
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad.copy_(self._flat[at:at + n].view_as(p))
            at += n
        self._step_with_switch_decay()

    def _flatten_into(self, flat, tensors, named=None):
        at = 0
        for _, p in (named if named is not None else self._named):
            n = p.numel()
            t = tensors(p)
            if t is None:
                flat[at:at + n].zero_()
            else:
                flat[at:at + n].copy_(t.reshape(-1))
            at += n

    # -- delayed --
    def _setup_delayed(self, k, alpha, beta, local_lr):
        self._L = prioccl._L
        _lib.declare_modes(self._L)
        if not isinstance(self, torch.optim.SGD):
            raise prioccl.PriocclError("delayed mode needs torch.optim.SGD (SSD-SGD's server "
                                       f"optimizer is momentum SGD), not {type(self).__name__}")
        if {p.dtype for _, p in self._named} != {torch.float32}:
            raise prioccl.PriocclError("delayed mode needs float32 parameters")
        for i, group in enumerate(self.param_groups):
            if group.get("nesterov") or group.get("dampening", 0):
                raise prioccl.PriocclError(f"delayed mode: param group {i} has nesterov or "
                                           "dampening, which SSD-SGD's update does not have")
            members = {id(q) for q in group["params"]}
            mine = [(n, p) for n, p in self._named if id(p) in members]
            if not mine:
                continue
            flat_w = torch.empty(sum(p.numel() for _, p in mine), dtype=torch.float32)
            self._flatten_into(flat_w, lambda p: p.data, mine)
            at = 0
            for _, p in mine:  # the parameters become views of the flat buffer
                p.data = flat_w[at:at + p.numel()].view_as(p)
                at += p.numel()
            cfg = _lib.DelayedConfig(k=k, lr=group["lr"], momentum=group.get("momentum", 0.0),
                                     weightDecay=group.get("weight_decay", 0.0), alpha=alpha,
                                     beta=beta, localLr=local_lr, warmupSteps=self._warmup,
                                     priority=_LEAST_URGENT)
            handle = ctypes.c_void_p()
            prioccl._check(self._L.priocclDelayedCreate(
                prioccl._comm, flat_w.data_ptr(), flat_w.numel(), ctypes.byref(cfg),
                f"prioccl.torch.delayed.{i}".encode(), ctypes.byref(handle)), "delayed create")
            self._delayed.append((handle, group, (mine, flat_w, torch.empty_like(flat_w),
                                                  [group["lr"]])))

    def _delayed_step(self):
        synced = ctypes.c_int()
        for handle, group, (mine, _, flat_g, lr) in self._delayed:
            if group["lr"] != lr[0]:  # the user's schedule moved: localLr keeps its ratio
                prioccl._check(self._L.priocclDelayedSetLearningRate(handle, group["lr"], 0.0),
                               "delayed learning rate")
                lr[0] = group["lr"]
            self._flatten_into(flat_g, lambda p: p.grad, mine)
            prioccl._check(self._L.priocclDelayedStep(handle, flat_g.data_ptr(),
                                                      ctypes.byref(synced)), "delayed step")
        self.last_step_synced = bool(synced.value)

    def close(self):
        """Applies what is pending (synchronize()) and releases the mode's resources."""
        try:
            if self._lagged or self._delayed or self._handles or getattr(self, "_ready", None):
                self.synchronize()
        finally:
            for h in self._hooks:
                h.remove()
            self._hooks = []
            if self._lagged:
                self._L.priocclLaggedDestroy(self._lagged)
                self._lagged = None
            for handle, _, _ in self._delayed:
                self._L.priocclDelayedDestroy(handle)
            self._delayed = []
