"""PyTorch integration: horovod.torch.DistributedOptimizer, with prioccl's training modes.

    opt = prioccl.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             model.named_parameters(), mode="p3", model=model)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)   # works unchanged

The signature is horovod.torch's (optimizer, named_parameters=None, compression=Compression.none,
backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0, num_groups=0,
groups=None, sparse_as_dense=False, process_set=None), then prioccl's mode=, model= and the
modes' keywords. The result is an instance of a subclass of the wrapped optimizer's class
(Horovod's way), so it is a torch.optim.Optimizer: LR schedulers, param_groups, state_dict and
load_state_dict work. It takes over the wrapped optimizer's param groups and state; use it
instead of the original.

Modes:
- "sync": each gradient is all-reduced (averaged) as soon as backward has accumulated it;
  step() waits for them all, then runs the optimizer (Horovod's behaviour).
- "p3": the same all-reduces, with priority = the order in which the forward pass first uses each
  parameter (recorded by forward pre-hooks, not guessed from names). step() returns at once; the
  next forward of each module waits only for its own parameters' all-reduces and applies their
  update just before the module runs, so communication overlaps the next forward too. The update
  uses the hyper-parameters (lr, ...) of the step() that produced the gradient, even when a
  scheduler has changed them since: weights are bitwise identical to "sync". An update whose
  module did not run in the next forward (a branch not taken) is applied by the next step().
  A parameter its own module's forward does not use (nn.MultiheadAttention reads out_proj's
  without calling out_proj) is updated before the nearest enclosing module that ran.
  Consecutive modules are updated as one group until it holds p3_gate_bytes (256 KiB): the
  group's first module waits for the group's all-reduces and runs the optimizer once for all of
  it (per module, MobileNet-V2's 104 optimizer calls per step cost more than P3 saved).
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

Horovod's semantics (sync, p3, and lagged's warm-up; see DistributedOptimizer for the rest):
every rank all-reduces the same named gradients every step. A parameter whose hook did not fire
on a rank (a branch not taken) is all-reduced at step()/synchronize() with its gradient as it is
(zeros where it has none), so no rank waits for it forever and missing gradients count as zero.
Gradients accumulate locally over backward_passes_per_step backward passes; the all-reduce of
each starts with its last pass.

synchronize() finishes the current step's gradients (p.grad then holds the reduced gradient:
clip after it, then `with opt.skip_synchronize(): opt.step()`), and applies every pending update
(p3: the previous step's; lagged: the last aggregate; delayed: a pull, leaving the exact global
weights). Call it before evaluating or checkpointing. As in Horovod, it all-reduces every gradient
that the current step has not reduced yet, so called right after step() it all-reduces p.grad
once more (weights untouched).
"""
import contextlib
import ctypes
import os
import sys
import warnings
from collections import Counter

import torch

import prioccl
from prioccl import _lib
from prioccl.torch import _malloc
from prioccl.torch.compression import Compression

_LEAST_URGENT = 2 ** 31 - 1
_FLOAT32 = prioccl._C["priocclFloat32"]  # the only dtype lagged mode takes
_OPS = {prioccl.Sum: "Sum", prioccl.Prod: "Prod", prioccl.Min: "Min", prioccl.Max: "Max",
        prioccl.Average: "Average"}


ArgumentError = prioccl.ArgumentError  # a ValueError and a PriocclError

class NotSupportedError(prioccl.PriocclError, NotImplementedError):
    """A Horovod feature prioccl does not implement (op=Adasum)."""


def _is_adasum(op):
    if isinstance(op, str):
        return op.lower() == "adasum"
    adasum = getattr(prioccl, "Adasum", None)
    try:  # horovod.torch's op constants (prioccl.torch.mpi_ops), where that module exists
        from prioccl.torch import mpi_ops
        adasum = getattr(mpi_ops, "Adasum", adasum)
    except ImportError:
        pass
    return adasum is not None and op is adasum or (isinstance(op, int) and op == adasum)


def _check_op(op):
    if _is_adasum(op):
        raise NotSupportedError("DistributedOptimizer: op=Adasum is not implemented by prioccl; "
                                "use op=prioccl.Average (the default) or prioccl.Sum")
    if isinstance(op, bool) or not isinstance(op, int) or op not in _OPS:
        raise ArgumentError(f"DistributedOptimizer: op must be one of prioccl.Average, Sum, Min, "
                            f"Max, Prod, not {op!r}")


def _check_groups(num_groups, groups):
    """Horovod's groups: an int (that many groups of consecutive parameters) or a list of lists of
    parameters; num_groups is the older int spelling. Returns None, an int > 0 or a list."""
    if isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups < 0:
        raise ArgumentError(f"num_groups must be an int >= 0, not {num_groups!r}")
    if num_groups and groups is not None:
        raise ArgumentError("give groups= or num_groups= (its older spelling), not both")
    if groups is None:
        return num_groups or None
    if isinstance(groups, int) and not isinstance(groups, bool):
        if groups < 0:
            raise ArgumentError(f"groups must be an int >= 0 or a list of lists of parameters, "
                                f"not {groups}")
        return groups or None
    if not isinstance(groups, (list, tuple)):
        raise ArgumentError("groups must be an int >= 0 or a list of lists of torch.Tensor "
                            f"parameters, not {type(groups).__name__}")
    seen = set()
    out = []
    for group in groups:
        if not isinstance(group, (list, tuple)):
            raise ArgumentError("groups must be a list of lists of torch.Tensor parameters; an "
                                f"element is a {type(group).__name__}")
        for p in group:
            if not isinstance(p, torch.Tensor):
                raise ArgumentError("groups must consist of torch.Tensor parameters, not "
                                    f"{type(p).__name__}")
            if id(p) in seen:
                raise ArgumentError("a parameter can appear in only one group of groups")
            seen.add(id(p))
        out.append(list(group))
    return out


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=prioccl.Average,
                         gradient_predivide_factor=1.0, num_groups=0, groups=None,
                         sparse_as_dense=False, process_set=None, mode="sync", model=None,
                         warmup_steps=0, switch_decay=False, k=2, alpha=2.0, beta=0.5,
                         local_lr=0.0, p3_gate_bytes=256 << 10, fusion_bytes=1 << 20):
    """Wraps `optimizer` (see the module's docstring); returns a torch.optim.Optimizer.

    named_parameters: (name, parameter) pairs naming the all-reduces (model.named_parameters());
        None names them by position ("allreduce.noname.<i>", in param-group order, the same on
        every rank for the same model). Every parameter of the optimizer must be named
        (ValueError otherwise: it would train on local gradients); duplicate names are a
        ValueError; named parameters the optimizer does not hold are ignored, as Horovod does.
    compression: Compression.none, fp16 or bf16: gradients travel, and are summed, in the wire
        type, then are cast back into p.grad (sync, p3, lagged's warm-up).
    backward_passes_per_step: gradients accumulate locally over this many backward passes before
        their all-reduce (set_backward_passes_per_step() changes it). They are summed, not
        averaged: scale the loss by 1 / passes for a mean, as with Horovod.
    op: prioccl.Average (default), Sum, Min, Max or Prod. Adasum raises NotImplementedError.
    gradient_predivide_factor: f; gradients are multiplied by 1/f before the all-reduce and the
        result by f after (Horovod's split of the average; op=Average only, else ValueError).
    num_groups / groups: all-reduces of a group start together, once backward has produced all
        of its gradients (an int: that many groups of consecutive parameters; a list of lists of
        parameters, the rest one group each), in one prioccl.group(): the library fuses its
        small ones (PRIOCCL_FUSION_BYTES). Without them, given model= or sparse_as_dense=True
        (then every rank knows which gradients are sparse; sync, p3, lagged's warm-up):
        consecutive dense parameters (in param-group order), each and together at most
        fusion_bytes, form the groups; fusion_bytes=0: none, every gradient its own all-reduce.
        A fused op sums in another order than separate ones (other rounding), the same on every
        rank and in every run, and in sync and p3 alike.
    sparse_as_dense: sparse gradients (nn.Embedding(sparse=True)) are all-reduced as dense
        tensors and turned back into sparse ones. Without it they are all-gathered (indices and
        values, Horovod's default) at step()/synchronize(); every rank must then know the
        parameter's gradient is sparse: pass model= (its sparse embeddings are found) or make
        sure every rank produces that gradient at the first step.
    process_set: a prioccl.ProcessSet to all-reduce among (None: every rank); sync and p3 only.
        A rank outside the set does not communicate: it trains on its own gradients.
    mode, model, warmup_steps, switch_decay, k, alpha, beta, local_lr: see the module's docstring.
    p3_gate_bytes: p3 updates consecutive modules (in forward order) together until their
        parameters hold this many bytes: one optimizer call and one wait per group, not per
        module (0: per module). See the module's docstring.

    A feature that does not apply to a mode raises PriocclError here: compression and
    process_set in lagged and delayed (their fused float32 ops run on the global communicator),
    op other than Average, gradient_predivide_factor and groups in delayed.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise prioccl.PriocclError(f"optimizer must be a torch.optim.Optimizer, not "
                                   f"{type(optimizer).__name__}")
    if isinstance(compression, str):
        raise ArgumentError(f"compression must be a Compression (e.g. Compression.fp16), not "
                            f"{compression!r}: pass the mode by keyword, mode={compression!r}")
    if not (callable(getattr(compression, "compress", None))
            and callable(getattr(compression, "decompress", None))):
        raise ArgumentError("compression must have compress() and decompress() "
                            "(prioccl.torch.Compression.none, fp16, bf16)")
    _check_passes(backward_passes_per_step)
    _check_op(op)
    try:
        predivide = float(gradient_predivide_factor)
    except (TypeError, ValueError):
        raise ArgumentError(f"gradient_predivide_factor must be a number, not "
                            f"{gradient_predivide_factor!r}") from None
    if not predivide > 0:
        raise ArgumentError(f"gradient_predivide_factor must be > 0, not {predivide}")
    if predivide != 1.0 and op != prioccl.Average:
        raise ArgumentError("gradient_predivide_factor not supported with op != Average")
    groups = _check_groups(num_groups, groups)
    for kw, value in (("p3_gate_bytes", p3_gate_bytes), ("fusion_bytes", fusion_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ArgumentError(f"{kw} must be an int >= 0, not {value!r}")
    mode_class = _MODE_CLASSES.get(mode) if isinstance(mode, str) else None
    if mode_class is None:
        raise ArgumentError(f"mode must be one of {tuple(_MODE_CLASSES)}, not {mode!r}")
    why = mode_class._refusal(compression, process_set, op, predivide, groups, model)
    if why:
        raise ArgumentError(why if why.startswith("mode=") else
                            f"mode={mode!r} does not support {why}")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), _methods_of(mode_class))
    options = {"switch_decay": switch_decay, "k": k, "alpha": alpha, "beta": beta,
               "local_lr": local_lr, "p3_gate_bytes": p3_gate_bytes}
    return cls(optimizer, named_parameters, compression, backward_passes_per_step, op, predivide,
               groups, bool(sparse_as_dense), process_set, model, warmup_steps, fusion_bytes,
               options)


def _caller_level():
    """warnings.warn's stacklevel, for its caller's caller, that names the first frame outside
    this module and torch (step() is wrapped by torch's profiler hook and LR schedulers)."""
    frame, level = sys._getframe(2), 2
    torch_dir = os.path.dirname(torch.__file__)
    while frame is not None and (frame.f_code.co_filename == __file__
                                 or frame.f_code.co_filename.startswith(torch_dir)):
        frame, level = frame.f_back, level + 1
    return level


def _check_passes(passes):
    if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
        raise ArgumentError(f"backward_passes_per_step must be an int >= 1, not {passes!r}")


class _DistributedOptimizer(torch.optim.Optimizer):
    """The methods mixed into a subclass of the wrapped optimizer's class: alone, mode "sync".
    Each other mode is a subclass that overrides what it does differently (_MODE_CLASSES); the
    factory mixes one mode's methods in (_methods_of)."""

    mode = "sync"
    _auto_groups = True  # consecutive dense gradients fused into groups (fusion_bytes)

    @staticmethod
    def _refusal(compression, process_set, op, predivide, groups, model):
        """Why this mode cannot take DistributedOptimizer's arguments, or None."""
        return None


    def __init__(self, optimizer, named_parameters, compression, passes, op, predivide, groups,
                 sparse_as_dense, process_set, model, warmup_steps, fusion_bytes, options):
        if warmup_steps < 0:
            raise ArgumentError(f"warmup_steps must be >= 0, not {warmup_steps}")
        _malloc.prime()  # glibc's thresholds raised, as DDP's buckets do (_malloc.py says why)
        # The wrapped class's constructor, on the wrapped optimizer's groups (their dicts carry
        # every hyper-parameter) and then its state (momentum buffers, ...).
        super(self.__class__, self).__init__(optimizer.param_groups)
        self.state.update(optimizer.state)
        self.op = op
        self.backward_passes_per_step = passes
        self.gradient_predivide_factor = predivide
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._compression = compression
        self._set_names(named_parameters)  # argument errors before "not initialised", as Horovod
        prioccl._require()
        self._named = [(self._name[p], p) for p in self._order]
        # A rank outside process_set does not communicate (Horovod): it trains on its own.
        included = getattr(process_set, "included", None)
        self._local_only = process_set is not None and callable(included) and not included()
        self._handles = {}  # param -> (Handle, wire tensor, compression ctx, sparse dim or None)
        self._passes = {p: 0 for p in self._order}  # backward passes since its last reduction
        self._sparse_known = {}  # param -> sparse dim, for params whose gradients are sparse
        if model is not None:
            for m in model.modules():
                if (isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and m.sparse
                        and m.weight in self._name):
                    self._sparse_known[m.weight] = 1
        self._synchronized = False  # synchronize() has reduced this step's gradients
        self._should_synchronize = True  # False inside skip_synchronize()
        self._priority = {p: 0 for p in self._order}
        self._hooks = []
        self._steps = 0
        self._warmup = warmup_steps
        self._lagged = None
        self._delayed = []
        self._released = False  # the mode's fused objects went with a failed communicator
        self._ready = set()  # p3: params whose update waits for their module's next forward
        # Automatic groups only where every rank knows beforehand which gradients are sparse
        # (model= names the sparse embeddings; sparse_as_dense makes them dense): a group that a
        # sparse gradient splits on one rank only would fuse differently there, and the ops
        # would wait for each other until the timeout instead of failing at once.
        known = model is not None or sparse_as_dense
        self._make_groups(groups, fusion_bytes if self._auto_groups and known else 0)
        self._register_grad_hooks()
        self._mode_options = dict(model=model, **options)  # to set the mode up again (a shrink)
        self._setup_mode(**self._mode_options)

    def _setup_mode(self, **options):
        """The mode's own state, after the common one (options: model= and the mode's keywords)."""

    def _set_names(self, named_parameters):
        """Horovod's checks: (name, tensor) pairs, unique names, every parameter of the optimizer
        named (else it would train on local gradients: the ranks would diverge)."""
        order = [p for g in self.param_groups for p in g["params"]]
        if named_parameters is None:
            named = [(f"allreduce.noname.{i}", p) for i, p in enumerate(order)]
        else:
            named = list(named_parameters)
            for item in named:
                if not (isinstance(item, (tuple, list)) and len(item) == 2
                        and isinstance(item[1], torch.Tensor)):
                    raise ArgumentError("named_parameters must be a sequence of (name, parameter) "
                                        "tuples, as model.named_parameters() gives; got "
                                        f"{type(item).__name__} {str(item)[:60]}")
        counts = Counter(str(n) for n, _ in named)
        dups = sorted(n for n, c in counts.items() if c > 1)
        if dups:
            raise ArgumentError("parameter names in named_parameters must be unique; duplicates: "
                                + ", ".join(dups))
        name_of = {}
        for n, p in named:
            name_of.setdefault(p, str(n))
        unnamed = [f"param_groups[{gi}]['params'][{i}] (shape {tuple(p.shape)})"
                   for gi, g in enumerate(self.param_groups) for i, p in enumerate(g["params"])
                   if p not in name_of]
        if unnamed:
            raise ArgumentError(f"named_parameters does not name {len(unnamed)} parameter(s) of "
                                "the optimizer, whose gradients would not be all-reduced: "
                                + ", ".join(unnamed[:8]) + (" ..." if len(unnamed) > 8 else ""))
        # Parameters named but not in the optimizer are ignored (Horovod): e.g. two optimizers
        # over parts of one model, each given model.named_parameters().
        self._order = [p for p in order if p.requires_grad]  # the same order on every rank
        self._name = {p: name_of[p] for p in self._order}
        self._parameter_names = self._name  # Horovod's attribute (parameter -> name)

    def _make_groups(self, groups, fusion_bytes):
        self._groups = []  # lists of params whose all-reduces start together, in one group
        if groups is None and fusion_bytes:
            self._groups = self._fusion_groups(fusion_bytes)
        elif isinstance(groups, int):
            n = min(groups, len(self._order))
            base, extra = divmod(len(self._order), n) if n else (0, 0)
            at = 0
            for i in range(n):
                size = base + (i < extra)
                self._groups.append(self._order[at:at + size])
                at += size
        elif groups:
            for group in groups:
                mine = [p for p in group if p in self._name]  # others: not the optimizer's
                if mine:
                    self._groups.append(mine)
        self._groups = [g for g in self._groups if len(g) > 1]  # one param: no group needed
        self._group_of = {p: i for i, g in enumerate(self._groups) for p in g}
        self._arrived = [set() for _ in self._groups]

    def _fusion_groups(self, limit):
        """Runs of consecutive parameters (self._order: the same on every rank) of one dtype,
        each and together at most `limit` bytes: their all-reduces are submitted as one group,
        which the library fuses into one op. A MobileNet-V2's 158 gradients, each its own op,
        cost more CPU per step than gloo's whole all-reduce; in groups of at most 64 KiB they
        were still 47 ops, and each op's own costs (CPU, and on slow links the latency of its
        ring steps behind other ops' data) left P3 behind gloo at 100 Mbit/s and 3 Gbit/s. At
        1 MiB (the library's own fusion threshold, PRIOCCL_FUSION_BYTES) they are 12 ops
        (docs/benchmarks.md, "Fusion groups of 1 MiB")."""
        groups, run, size = [], [], 0
        for p in self._order:
            nbytes = p.numel() * p.element_size()
            if nbytes > limit or p in self._sparse_known:  # alone
                groups.append(run)
                run, size = [], 0
                continue
            if run and (size + nbytes > limit or p.dtype != run[0].dtype):
                groups.append(run)
                run, size = [], 0
            run.append(p)
            size += nbytes
        groups.append(run)
        return groups

    def _submit_group(self, params):
        """All-reduces of params (a group's, in order) in one group, through the library's batch
        path: one handle for the group, which every member's entry shares."""
        todo = [q for q in params if q not in self._handles and not self._is_sparse(q)]
        wires = [self._wire(q) for q in todo]
        handle = prioccl._allreduce_batch(
            [w[0] for w in wires], [f"grad.{self._name[q]}" for q in todo],
            [self._priority[q] for q in todo], op=self.op, **self._kwargs())
        for q, (wire, ctx, sparse_dim) in zip(todo, wires):
            self._handles[q] = (handle, wire, ctx, sparse_dim)

    def _base(self):
        return super(self.__class__, self)

    def set_backward_passes_per_step(self, passes):
        """Horovod's: the number of backward passes accumulated before each all-reduce."""
        _check_passes(passes)
        self.backward_passes_per_step = passes
        self._reset_counts()

    def _reset_counts(self):
        for p in self._passes:
            self._passes[p] = 0
        for arrived in self._arrived:
            arrived.clear()

    def _communicating(self):
        """Whether gradients are all-reduced one by one now (sync, p3, lagged's warm-up)."""
        return not self._local_only

    def zero_grad(self, set_to_none=False):
        self._zero_grad_checks()
        self._base().zero_grad(set_to_none=set_to_none)

    def _zero_grad_checks(self):
        if self._communicating() and any(self._passes.values()):
            raise prioccl.PriocclError(
                "optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step() or optimizer.synchronize(): the gradients' all-reduces are in "
                "flight or pending (Horovod forbids this too); call synchronize() first")
        self._reset_counts()
        self._synchronized = False

    def _forget_inflight(self):
        """After a lost rank (prioccl.torch.elastic): the all-reduces in flight have failed with
        the communicator; their requests are released and the step's counts forgotten, so that
        load_state_dict() and the next step start clean."""
        for handle, *_ in self._handles.values():
            try:
                prioccl.synchronize(handle)
            except prioccl.PriocclError:
                pass
        self._handles.clear()
        self._reset_counts()
        self._synchronized = False

    def _follow_shrink(self):
        """After the shrink that followed _forget_inflight(): sync and p3 hold nothing of the old
        communicator (they find the global one at each op)."""

    def load_state_dict(self, state_dict):
        """Finishes what is in flight (and p3's pending updates), forgets the accumulated passes
        (as Horovod), then loads. Call it between steps."""
        self._wait(list(self._handles))
        self._reset_counts()
        self._synchronized = False
        self._should_synchronize = True
        self._base().load_state_dict(state_dict)

    def step(self, closure=None):
        if closure is not None:
            raise prioccl.PriocclError("closures are not supported")
        self._steps += 1
        return self._step()

    def _step(self):
        self._finish_step(wait=True)
        return self._base().step()

    def _finish_step(self, wait):
        """The reduction part of step() in sync, p3 and lagged's warm-up (Horovod's rules)."""
        if self._local_only:
            self._reset_counts()
        elif not self._synchronized:
            self._complete(wait)
        elif self._should_synchronize:
            warnings.warn("optimizer.step() called without optimizer.skip_synchronize() after "
                          "optimizer.synchronize(): the gradients synchronize() reduced are "
                          "used as they are (not reduced again); write `with "
                          "optimizer.skip_synchronize(): optimizer.step()` after synchronize()",
                          stacklevel=_caller_level())
        self._synchronized = False

    def synchronize(self):
        """Finishes this step's gradients (p.grad then holds the reduced gradient) and applies
        every pending update: see the module's docstring."""
        if self._communicating():
            self._complete(wait=True)
            self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Horovod's idiom: synchronize(); clip; `with opt.skip_synchronize(): opt.step()`. The
        step() inside does not reduce the gradients again (nor warn). A step() inside without a
        synchronize() before it still finishes the reductions: it never applies local or
        half-reduced gradients."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    # -- gradient all-reduces: sync / p3 (and lagged's warm-up) --
    def _register_grad_hooks(self):
        """Every mode counts backward passes; sync, p3 and lagged's warm-up all-reduce."""
        self._accumulators = []  # kept alive: their hooks fire once the gradient is accumulated
        for p in self._order:
            self._hooks.append(p.register_hook(self._make_pre_hook(p)))
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            self._hooks.append(acc.register_hook(self._make_grad_hook(p)))
            self._accumulators.append(acc)

    def _make_pre_hook(self, p):
        def pre_hook(grad):  # before accumulation: p.grad may be in an all-reduce
            if self._passes[p] >= self.backward_passes_per_step:
                raise prioccl.PriocclError(
                    f"the gradient of {self._name[p]} was computed more than "
                    f"backward_passes_per_step={self.backward_passes_per_step} times before "
                    "step(): call step() in between, or raise backward_passes_per_step to "
                    "accumulate gradients locally")
            if p in self._ready:
                raise prioccl.PriocclError(
                    f"mode='p3': {self._name[p]} got a gradient before its module's forward "
                    "applied its previous update (a parameter used outside its own module, or "
                    "before it runs): use mode='sync' for this model")
            return None
        return pre_hook

    def _make_grad_hook(self, p):
        def hook(*_):
            self._passes[p] += 1
            self._synchronized = False
            if not self._communicating() or self._passes[p] < self.backward_passes_per_step:
                return
            self._learn_sparse(p)
            sparse = self._is_sparse(p)
            group = self._group_of.get(p)
            if group is None:
                if not sparse:  # sparse ones are all-gathered at step()/synchronize()
                    self._submit(p)
                return
            arrived = self._arrived[group]
            arrived.add(p)
            if len(arrived) == len(self._groups[group]):
                self._submit_group(self._groups[group])
        return hook

    def _learn_sparse(self, p):
        """Records the sparse dims of p's gradient (an empty one says nothing: torch's zero_()
        makes every dim sparse)."""
        if p.grad is not None and p.grad.is_sparse and p.grad._nnz() > 0:
            self._sparse_known[p] = p.grad.sparse_dim()

    def _is_sparse(self, p):
        """Whether p's gradient is all-gathered as a sparse one (not sparse_as_dense)."""
        if self.sparse_as_dense:
            return False
        return p.grad.is_sparse if p.grad is not None else p in self._sparse_known

    def _kwargs(self):
        return {} if self.process_set is None else {"process_set": self.process_set}

    def _submit(self, p):
        """Starts the all-reduce of p.grad (zeros where p has no gradient on this rank)."""
        wire, ctx, sparse_dim = self._wire(p)
        handle = prioccl.allreduce_async_(wire, op=self.op, priority=self._priority[p],
                                          name=f"grad.{self._name[p]}", **self._kwargs())
        self._handles[p] = (handle, wire, ctx, sparse_dim)

    def _wire(self, p):
        """(what goes on the wire, the compressor's context, the sparse dims to restore or None)
        for p's all-reduce: p.grad, zeros where p has no gradient on this rank."""
        g = p.grad
        sparse_dim = None
        if g is None:
            src = torch.zeros_like(p, memory_format=torch.contiguous_format)
            sparse_dim = self._sparse_known.get(p)  # sparse_as_dense: sparse like other ranks'
            if sparse_dim is None:
                p.grad = src
        elif g.is_sparse:  # sparse_as_dense
            sparse_dim = self._sparse_known.get(p, g.sparse_dim())
            src = g.to_dense()
        else:
            if not g.is_contiguous():
                g = p.grad = g.contiguous()
            src = g
        wire, ctx = self._compression.compress(src)
        if self.gradient_predivide_factor != 1.0:
            wire.mul_(1.0 / self.gradient_predivide_factor)
        return wire, ctx, sparse_dim

    def _complete(self, wait):
        """Horovod's forced all-reduce: every parameter not submitted yet in this step (its hook
        did not fire on this rank, its group is incomplete, or it has fewer passes) is submitted
        now, in the same order on every rank; sparse gradients are all-gathered."""
        forced = [p for p in self._order if p not in self._handles]
        sparse = [p for p in forced if self._is_sparse(p)]
        dense = set(forced) - set(sparse)  # sets: `in` on a list of tensors compares values
        # A group goes whole, in one prioccl.group(), as on a rank where its hooks all fired:
        # otherwise the library would fuse it differently there, and the ops would not match.
        for p in forced:
            if p not in dense or p in self._handles:  # submitted with its group just now
                continue
            group = self._group_of.get(p)
            if group is None:
                self._submit(p)
            else:
                self._submit_group(self._groups[group])
        for p in sparse:
            self._sparse_reduce(p)
        if wait:
            self._wait(list(self._handles))
        self._reset_counts()

    def _wait(self, params):
        """Waits for these parameters' all-reduces and puts the results into p.grad."""
        for p in params:
            entry = self._handles.pop(p, None)
            if entry is None:
                continue
            handle, wire, ctx, sparse_dim = entry
            prioccl.synchronize(handle)
            out = self._compression.decompress(wire, ctx)
            if self.gradient_predivide_factor != 1.0:
                out.mul_(self.gradient_predivide_factor)
            if sparse_dim is not None:
                out = out.to_sparse(sparse_dim)
                p.grad = out if out._nnz() else None  # as _sparse_reduce
            elif out is not p.grad:
                if p.grad is None or p.grad.is_sparse or p.grad.shape != out.shape:
                    p.grad = out
                else:
                    p.grad.copy_(out)

    def _sparse_reduce(self, p):
        """Horovod's sparse all-reduce: every rank's (index, value) rows all-gathered, values
        divided by the number of ranks for Average. Blocking; called in the same order on every
        rank. The first op, named as the dense all-reduce would be, gives the most rows of any
        rank: a rank that took the parameter for a dense one fails it (never a hang)."""
        if self.op not in (prioccl.Average, prioccl.Sum):
            raise prioccl.PriocclError(f"sparse gradient of {self._name[p]}: op must be Average or "
                                       "Sum (or pass sparse_as_dense=True)")
        name, priority, kw = f"grad.{self._name[p]}", self._priority[p], self._kwargs()
        g = p.grad
        dim = self._sparse_known.get(p, g.sparse_dim() if g is not None else 1)
        if g is None or g._nnz() == 0:
            idx = torch.empty((0, dim), dtype=torch.int64, device=p.device)
            val = torch.empty((0,) + tuple(p.shape[dim:]), dtype=p.dtype, device=p.device)
        else:
            g = g.coalesce()
            if g.sparse_dim() != dim:  # the same layout as every other rank's
                g = g.to_dense().to_sparse(dim)
            idx = g.indices().t().contiguous()
            val = g.values().contiguous()
        rows = torch.tensor([idx.shape[0]], dtype=torch.int64)  # on the host: read back at once
        prioccl.allreduce_(rows, op=prioccl.Max, priority=priority, name=name, **kw)
        most = int(rows.item())
        if most == 0:  # no rank has a row: no gradient (SparseAdam fails on an empty one)
            p.grad = None
            return
        pad = most - idx.shape[0]  # every rank sends `most` rows; index -1 marks padding
        idx = torch.cat([idx, idx.new_full((pad, dim), -1)])
        val = torch.cat([val, val.new_zeros((pad,) + tuple(val.shape[1:]))])
        all_idx = prioccl.allgather(idx, priority=priority, name=name + ".indices", **kw)
        all_val = prioccl.allgather(val, priority=priority, name=name + ".values", **kw)
        ranks = all_idx.shape[0] // most
        keep = all_idx[:, 0] >= 0
        values = all_val[keep]
        if self.op == prioccl.Average:
            values = values / ranks
        p.grad = torch.sparse_coo_tensor(all_idx[keep].t(), values, tuple(p.shape)).coalesce()

    def close(self):
        """Applies what is pending (synchronize()) and releases the mode's resources."""
        try:
            if self._lagged or self._delayed or self._handles or self._ready:
                self.synchronize()
        finally:
            for h in self._hooks:
                h.remove()
            self._hooks = []
            self._destroy_fused()

    def _destroy_fused(self):
        """Frees lagged's and delayed's objects in the library (close, or a failed communicator):
        each waits for its op in flight, which on a failed communicator has failed already."""
        if self._lagged:
            self._L.priocclLaggedDestroy(self._lagged)
            self._lagged = None
        for handle, _, _ in self._delayed:
            self._L.priocclDelayedDestroy(handle)
        self._delayed = []


class _P3(_DistributedOptimizer):
    """mode="p3": priorities from the forward order; updates applied in the next forward."""

    mode = "p3"

    @staticmethod
    def _refusal(compression, process_set, op, predivide, groups, model):
        if model is None:
            return "mode='p3' needs model= (its forward order sets priorities)"
        return None

    def _setup_mode(self, model, p3_gate_bytes, **_):
        self._ready_hyper = None  # the hyper-parameters of the step that produced them
        self._recorded = False
        self._zero_after_apply = None  # zero_grad() came while updates were pending
        self._gate_bytes = p3_gate_bytes
        self._register_forward_hooks(model)

    def zero_grad(self, set_to_none=False):
        self._zero_grad_checks()
        if not self._ready:
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

    def load_state_dict(self, state_dict):
        if self._ready:
            self._apply(list(self._ready))
        _DistributedOptimizer.load_state_dict(self, state_dict)

    def _step(self):
        # Updates of the previous step whose module did not run in this forward: now, with
        # that step's hyper-parameters, before their gradients are reduced again.
        if self._ready:
            self._apply(list(self._ready))
        self._finish_step(wait=False)
        # Updates happen in the next forward, module by module, with this step's
        # hyper-parameters; parameters no forward uses (or all, before the first forward has
        # recorded the order) are updated now.
        self._ready = set(self._order)
        self._ready_hyper = [{k: v for k, v in g.items() if k != "params"}
                             for g in self.param_groups]
        unhooked = [p for p in self._order if p not in self._hooked]
        if unhooked:
            self._apply(unhooked)
        return None

    def synchronize(self):
        if self._ready:
            self._apply(list(self._ready))
        _DistributedOptimizer.synchronize(self)

    def _apply(self, params):
        """Waits for these parameters' gradients and runs the optimizer on them alone, with the
        hyper-parameters of the step() that produced them."""
        params = [p for p in params if p in self._ready]
        if not params:
            return
        self._wait(params)
        # By id: a tensor's hash is a Python method, and this filter visits every parameter of
        # the model for each group P3 applies (MobileNet-V2: ~5,000 hashes a step).
        keep = {id(p) for p in params}
        saved = [dict(g) for g in self.param_groups]
        try:
            for g, hyper in zip(self.param_groups, self._ready_hyper):
                g.update(hyper)
                g["params"] = [p for p in g["params"] if id(p) in keep]
            self._base().step()
        finally:
            for g, old in zip(self.param_groups, saved):
                g.clear()
                g.update(old)
        self._ready.difference_update(params)
        if self._zero_after_apply:
            for p in params:
                if p.grad is None:
                    continue
                if self._zero_after_apply == "none":
                    p.grad = None
                else:
                    p.grad.detach_()
                    p.grad.zero_()
            if not self._ready:
                self._zero_after_apply = None

    def _register_forward_hooks(self, model):
        """A parameter's pending update is applied right before its module's forward. Every
        module is hooked: a parameter that its own module's forward never uses directly (such as
        nn.MultiheadAttention's out_proj, which the attention's forward reads without calling
        out_proj) is adopted, after the first forward, by its nearest enclosing module whose
        forward ran. Then consecutive modules are grouped (_group_updates)."""
        self._hooked = set()
        self._apply_at = {}  # module -> the parameters its pre-hook updates
        self._fired = {}  # the first forward: module -> the priority its first use would get
        self._model = model
        order = [0]
        for module in model.modules():
            own = [p for p in module.parameters(recurse=False) if p in self._name]
            self._hooked.update(own)
            if own:
                self._apply_at[module] = own

            def pre_hook(mod, inputs, own=own):
                if not self._recorded:  # the first forward: priority = order of first use
                    self._fired.setdefault(mod, order[0])
                    for p in own:
                        if p not in self._seen:
                            self._seen.add(p)
                            self._priority[p] = order[0]
                            order[0] += 1
                todo = self._apply_at.get(mod)
                if todo:
                    self._apply(todo)
            self._hooks.append(module.register_forward_pre_hook(pre_hook))
        self._seen = set()
        # The order is final once the first forward pass has completed.
        self._hooks.append(model.register_forward_hook(self._end_recording))

    def _end_recording(self, *_):
        if self._recorded:  # called after every forward: the first one decides
            return
        self._recorded = True
        parents = {child: parent for parent in self._model.modules()
                   for child in parent.children()}
        # Copies: adopted parameters are appended, and the hooks' own lists must stay as they are.
        uses = {m: list(self._apply_at.get(m, ())) for m in self._fired}
        for module in self._model.modules():
            unused = [p for p in module.parameters(recurse=False)
                      if p in self._hooked and p not in self._seen]
            if not unused:
                continue
            home = parents.get(module)
            while home is not None and home not in self._fired:
                home = parents.get(home)
            for p in unused:
                if home is None:  # no forward around it ran: updated at step(), as unhooked
                    self._hooked.discard(p)
                    continue
                uses[home].append(p)
                self._priority[p] = self._fired[home]
                self._seen.add(p)
        self._group_updates(uses)
        self._fired = {}

    def _group_updates(self, uses):
        """`uses`: module -> parameters, in the first forward's order. Consecutive modules form a
        group until it holds _gate_bytes: the group's first module to run updates all of it (its
        later modules' updates come earlier than they must, and wait for their all-reduces
        earlier), and each later module what is left of the group from it onwards, should the
        first one not run. A MobileNet-V2 has 158 parameters in 104 modules: one optimizer call
        each cost more CPU than P3's overlap saved."""
        groups, current, size = [], [], 0
        for module, params in uses.items():
            if not params:
                continue
            current.append((module, params))
            size += sum(p.numel() * p.element_size() for p in params)
            if size >= self._gate_bytes:
                groups.append(current)
                current, size = [], 0
        if current:
            groups.append(current)
        self._apply_at = {}
        for group in groups:
            for i, (module, _) in enumerate(group):
                self._apply_at[module] = [p for _, params in group[i:] for p in params]


class _Fused(_DistributedOptimizer):
    """What lagged and delayed share: one flat float32 buffer and fused ops on the global
    communicator."""

    @staticmethod
    def _refusal(compression, process_set, op, predivide, groups, model):
        if compression is not Compression.none:
            return "compression (its fused all-reduce is float32)"
        if process_set is not None:
            return "process_set (its fused ops run on the global communicator)"
        return None

    def _forget_inflight(self):
        """As the base's, and the mode's fused object is destroyed: it belongs to the failed
        communicator, which the shrink destroys next (its op in flight has failed: no wait)."""
        _DistributedOptimizer._forget_inflight(self)
        self._destroy_fused()
        self._released = True

    def _follow_shrink(self):
        """The mode set up again on the shrunk communicator, from the restored weights, as a new
        optimizer would be there: the step count (and with it the warm-up) starts over, and
        SSD-SGD's global momentum and pending averages, which no state_dict holds, start empty.
        So a shrunk job goes on exactly as a job restarted from the commit would."""
        if self._released:
            self._released = False
            self._steps = 0
            self._setup_mode(**self._mode_options)

    def _apply_flat_grads(self):
        if self.gradient_predivide_factor != 1.0:
            self._flat.mul_(self.gradient_predivide_factor)
        at = 0
        for _, p in self._named:
            n = p.numel()
            chunk = self._flat[at:at + n].view_as(p).to(p.device)  # a copy for CUDA parameters
            self._learn_sparse(p)
            if p in self._sparse_known:  # the optimizer (SparseAdam, ...) expects a sparse one
                sparse = chunk.to_sparse(self._sparse_known[p])  # on p's device, as chunk
                p.grad = sparse if sparse._nnz() else None
            elif p.grad is None:
                p.grad = chunk.clone()
            else:
                p.grad.copy_(chunk)
            at += n
        self._step_with_switch_decay()

    def _flatten_into(self, flat, tensors, named=None):
        """The fused modes' flat gradient; sparse gradients are made dense (the fused op is)."""
        at = 0
        for _, p in (named if named is not None else self._named):
            n = p.numel()
            t = tensors(p)
            if t is None:
                flat[at:at + n].zero_()
            else:
                if t.is_sparse:
                    t = t.to_dense()
                flat[at:at + n].copy_(t.reshape(-1))
            at += n


class _Lagged(_Fused):
    """mode="lagged": the last batch's gradient all-reduced in one fused op over the next step."""

    mode = "lagged"

    def _setup_mode(self, switch_decay, **_):
        self._setup_lagged(switch_decay)

    def _communicating(self):
        return not self._local_only and self._steps < self._warmup

    def _step(self):
        if self._steps <= self._warmup:
            self._finish_step(wait=True)
            self._step_with_switch_decay()
        else:
            self._reset_counts()
            self._lagged_step()
        return None

    def synchronize(self):
        _DistributedOptimizer.synchronize(self)
        if self._lagged:
            self._lagged_flush()

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
                          "synchronous warm-up)", stacklevel=4)
        # Where collectives run on the GPU, the flat gradient lives on the parameters' device (the
        # library keeps its staging there too); elsewhere on the host.
        device = "cpu"
        if prioccl._collectives_on_device():
            devices = {p.device for _, p in self._named}
            if len(devices) != 1 or next(iter(devices)).type != "cuda":
                raise prioccl.PriocclError("lagged mode under PRIOCCL_TRANSPORT=nccl needs every "
                                           f"parameter on one CUDA device, not {devices}")
            device = next(iter(devices))
        self._flat = torch.empty(self._numel, dtype=torch.float32, device=device)
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
        if self.gradient_predivide_factor != 1.0:
            self._flat.mul_(1.0 / self.gradient_predivide_factor)
        if self._flat.is_cuda:  # the library copies it on its own stream: the copy-in first
            torch.cuda.current_stream(self._flat.device).synchronize()
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


class _Delayed(_Fused):
    """mode="delayed": SSD-SGD's delayed averages with GLU local updates in between."""

    mode = "delayed"
    _auto_groups = False  # its all-reduces are one per param group

    @staticmethod
    def _refusal(compression, process_set, op, predivide, groups, model):
        why = _Fused._refusal(compression, process_set, op, predivide, groups, model)
        if why is None and op != prioccl.Average:
            why = "an op other than Average (SSD-SGD averages)"
        elif why is None and predivide != 1.0:
            why = "gradient_predivide_factor (the average is taken inside SSD-SGD's op)"
        elif why is None and groups is not None:
            why = "groups (its all-reduces are one per param group)"
        return why

    def _setup_mode(self, k, alpha, beta, local_lr, **_):
        self._setup_delayed(k, alpha, beta, local_lr)

    def _communicating(self):
        return False

    def _step(self):
        self._reset_counts()
        self._delayed_step()
        return None

    def synchronize(self):
        for handle, _, _ in self._delayed:
            prioccl._check(self._L.priocclDelayedFlush(handle), "delayed flush")

    # -- delayed --
    def _setup_delayed(self, k, alpha, beta, local_lr):
        self._L = prioccl._L
        _lib.declare_modes(self._L)
        if not isinstance(self, torch.optim.SGD):
            raise prioccl.PriocclError("delayed mode needs torch.optim.SGD (SSD-SGD's server "
                                       f"optimizer is momentum SGD), not {type(self).__name__}")
        if {p.dtype for _, p in self._named} != {torch.float32}:
            raise prioccl.PriocclError("delayed mode needs float32 parameters")
        on_device = sorted({str(p.device) for _, p in self._named if p.device.type != "cpu"})
        if on_device:
            raise prioccl.PriocclError(
                f"delayed mode needs CPU parameters, not {', '.join(on_device)}: its GLU local "
                "updates run on the host, on a flat buffer the parameters become views of")
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

_MODE_CLASSES = {c.mode: c for c in (_DistributedOptimizer, _P3, _Lagged, _Delayed)}


def _methods_of(mode_class):
    """The attributes a mode class and its bases up to torch's Optimizer define, the most
    derived winning: what the wrapped optimizer's subclass gets."""
    methods = {}
    for c in reversed(mode_class.__mro__[:mode_class.__mro__.index(torch.optim.Optimizer)]):
        methods.update({k: v for k, v in c.__dict__.items() if k not in ("__dict__", "__weakref__")})
    return methods
