"""horovod.torch's collectives, with its signatures and semantics, over prioccl's core module.

Differences from the core (prioccl.allreduce etc.): Horovod's argument order (name before op),
`average=` (deprecated), `compression=`, torch tensors only, autograd support (allreduce,
allgather, broadcast, alltoall and reducescatter are differentiable, as Horovod's), alltoall
returning received splits as Horovod does. prioccl's `priority=` is accepted last everywhere.
"""
import functools
import warnings

import torch

import prioccl
from prioccl import (PriocclError, ProcessSet, global_process_set, add_process_set,
                     remove_process_set, poll)
from prioccl.torch.compression import Compression

Sum, Average, Min, Max = prioccl.Sum, prioccl.Average, prioccl.Min, prioccl.Max
Product = prioccl.Prod
Adasum = 5  # Horovod's op; not implemented by prioccl (a clear error when used)
_OPS = {Sum, Average, Min, Max, Product}


def _op(op, average, what):
    """Horovod's rule for the deprecated `average`, and the ops prioccl runs."""
    if op is not None and average is not None:
        raise ValueError(f"{what}: the op parameter supersedes average: give only one of them")
    if average is not None:
        warnings.warn("average is deprecated: use op=Average or op=Sum", DeprecationWarning,
                      stacklevel=3)
        op = Average if average else Sum
    if op is None:
        op = Average
    if op == Adasum:
        raise PriocclError(f"{what}: Adasum is not implemented by prioccl (Sum, Average, Min, "
                           "Max, Product are)")
    if op not in _OPS:
        raise PriocclError(f"{what}: unknown reduction op {op!r}")
    return op


# Horovod's handle map: the handle of an async op stays here until synchronize(), also when its
# caller drops it, so that the op's name stays taken until then (prioccl._free_name), as
# Horovod's tests expect of a name submitted twice in a row. As in Horovod, a handle that is
# never synchronized keeps its tensors.
_handles = set()  # add and discard are atomic under the GIL: no lock on the op's path


def _kept(submit):
    """An async op of this module whose handle is kept until synchronize()."""
    @functools.wraps(submit)
    def keep(*args, **kwargs):
        handle = submit(*args, **kwargs)
        if len(_handles) >= 64:  # drop those synchronized through prioccl.synchronize
            _handles.difference_update([h for h in list(_handles) if _taken(h)])
        _handles.add(handle)
        return handle
    return keep


def _taken(handle):
    """Whether prioccl.synchronize() has taken the handle (and every member of a group)."""
    members = getattr(handle, "handles", None)  # a GroupHandle's
    if members is not None:
        return all(map(_taken, members))
    return getattr(handle, "_op", None) is None and not getattr(handle, "_ops", None)


def synchronize(handle):
    """Waits for the op and returns its result (prioccl.synchronize); its name is free again."""
    _handles.discard(handle)
    return prioccl.synchronize(handle)


def _tensor(t, what):
    if not isinstance(t, torch.Tensor):
        raise PriocclError(f"{what}: expected a torch.Tensor, got {type(t).__name__}")
    return t


# ---- allreduce ----
@_kept
def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set, priority=0):
    """Starts an all-reduce into a new tensor; `tensor` is unchanged. A handle for
    synchronize()/poll()."""
    op = _op(op, average, "allreduce")
    return prioccl.allreduce_async(_tensor(tensor, "allreduce"), op, priority, name, process_set,
                                   prescale_factor, postscale_factor)


@_kept
def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set, priority=0):
    """Starts an in-place all-reduce of `tensor`."""
    op = _op(op, average, "allreduce")
    return prioccl.allreduce_async_(_tensor(tensor, "allreduce"), op, priority, name,
                                    process_set, prescale_factor, postscale_factor)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set, priority=0):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set, priority))


class _Allreduce(torch.autograd.Function):
    """d(sum_k x_k)/dx_r = 1 on every rank: the gradient is the same all-reduce of the output's
    gradients (scaled alike)."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, process_set, priority):
        ctx.args = (op, prescale, postscale, process_set)
        return synchronize(allreduce_async(tensor, None, name, op, prescale, postscale,
                                           process_set, priority))

    @staticmethod
    def backward(ctx, grad):
        op, prescale, postscale, process_set = ctx.args
        out = allreduce(grad.contiguous(), op=op, prescale_factor=prescale,
                        postscale_factor=postscale, process_set=process_set)
        return out, None, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set,
              priority=0):
    """The all-reduce of `tensor` over the ranks (Average unless op= says otherwise), as a new
    tensor; differentiable. compression= casts what travels (Compression.fp16, bf16)."""
    op = _op(op, average, "allreduce")
    wire, ctx = compression.compress(_tensor(tensor, "allreduce"))
    out = _Allreduce.apply(wire, name, op, prescale_factor, postscale_factor, process_set,
                           priority)
    return compression.decompress(out, ctx)


@_kept
def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set, priority=0):
    """All-reduces of a list of tensors submitted as one group; synchronize() returns the list."""
    op = _op(op, average, "grouped_allreduce")
    return prioccl.grouped_allreduce_async([_tensor(t, "grouped_allreduce") for t in tensors],
                                           op, priority, name, process_set, prescale_factor,
                                           postscale_factor)


@_kept
def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set, priority=0):
    op = _op(op, average, "grouped_allreduce")
    return prioccl.grouped_allreduce_async_([_tensor(t, "grouped_allreduce") for t in tensors],
                                            op, priority, name, process_set, prescale_factor,
                                            postscale_factor)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set,
                      priority=0):
    """The all-reduce of each tensor of the list (differentiable, each as allreduce())."""
    op = _op(op, average, "grouped_allreduce")
    packed = [compression.compress(_tensor(t, "grouped_allreduce")) for t in tensors]
    if any(t.requires_grad for t, _ in packed) and torch.is_grad_enabled():
        outs = [_Allreduce.apply(t, None if name is None else f"{name}.{i}", op, prescale_factor,
                                 postscale_factor, process_set, priority)
                for i, (t, _) in enumerate(packed)]
    else:
        outs = synchronize(prioccl.grouped_allreduce_async(
            [t for t, _ in packed], op, priority, name, process_set, prescale_factor,
            postscale_factor))
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, packed)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set, priority=0):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set, priority))


# ---- allgather ----
@_kept
def allgather_async(tensor, name=None, process_set=global_process_set, priority=0):
    """Starts gathering every rank's tensor along the first dimension (which may differ)."""
    return prioccl.allgather_async(_tensor(tensor, "allgather"), priority, name, process_set)


class _Allgather(torch.autograd.Function):
    """Rank r's rows of the output came from rank r's input: its gradient is its rows of every
    rank's output gradient, averaged over the ranks as Horovod's is (the data-parallel
    convention: each rank's loss is one sample of the mean loss)."""

    @staticmethod
    def forward(ctx, tensor, name, process_set, priority):
        ctx.process_set = process_set
        ctx.rows = tensor.shape[0] if tensor.dim() else 1
        return synchronize(allgather_async(tensor, name, process_set, priority))

    @staticmethod
    def backward(ctx, grad):
        ps = ctx.process_set
        averaged = prioccl.allreduce(grad.contiguous(), op=Average, process_set=ps)
        rows = prioccl.allgather(torch.tensor([ctx.rows], dtype=torch.int64), process_set=ps)
        start = int(rows[:ps.rank()].sum())
        return averaged.narrow(0, start, ctx.rows), None, None, None


def allgather(tensor, name=None, process_set=global_process_set, priority=0):
    """Every rank's tensor concatenated along the first dimension in rank order; differentiable."""
    return _Allgather.apply(_tensor(tensor, "allgather"), name, process_set, priority)


@_kept
def grouped_allgather_async(tensors, name=None, process_set=global_process_set, priority=0):
    # The members unkept: the group's handle is kept, and synchronize() takes it.
    return prioccl.GroupHandle([allgather_async.__wrapped__(
        t, None if name is None else f"{name}.{i}", process_set, priority)
        for i, t in enumerate(tensors)])


def grouped_allgather(tensors, name=None, process_set=global_process_set, priority=0):
    return [allgather(t, None if name is None else f"{name}.{i}", process_set, priority)
            for i, t in enumerate(tensors)]


# ---- broadcast ----
@_kept
def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set, priority=0):
    return prioccl.broadcast_async(_tensor(tensor, "broadcast"), root_rank, priority, name,
                                   process_set)


@_kept
def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set, priority=0):
    return prioccl.broadcast_async_(_tensor(tensor, "broadcast"), root_rank, priority, name,
                                    process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set, priority=0):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set, priority))


class _Broadcast(torch.autograd.Function):
    """Only the root's input reaches the outputs: its gradient is every rank's output gradient
    averaged over the ranks (as Horovod's, see _Allgather), the others' zero."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set, priority):
        ctx.root, ctx.process_set = root_rank, process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set, priority))

    @staticmethod
    def backward(ctx, grad):
        averaged = prioccl.allreduce(grad.contiguous(), op=Average, process_set=ctx.process_set)
        if ctx.process_set._global_rank() != ctx.root:
            averaged.zero_()
        return averaged, None, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set, priority=0):
    """root_rank's tensor as a new tensor on every rank; differentiable."""
    return _Broadcast.apply(_tensor(tensor, "broadcast"), root_rank, name, process_set, priority)


# ---- alltoall ----
@_kept
def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set, priority=0):
    """synchronize() returns (output, received_splits), as Horovod's."""
    return prioccl.alltoall_async(_tensor(tensor, "alltoall"), splits, priority, name, True,
                                  process_set)


class _Alltoall(torch.autograd.Function):
    """The inverse all-to-all sends every received row's gradient back where it came from."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set, priority):
        out, received = synchronize(alltoall_async(tensor, splits, name, process_set, priority))
        ctx.received, ctx.process_set = received, process_set
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, _):
        back = prioccl.alltoall(grad.contiguous(), splits=ctx.received,
                                process_set=ctx.process_set)
        return back, None, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set, priority=0):
    """Part j of tensor's first dimension (splits[j] rows; equal parts without splits) goes to
    rank j. Returns the received rows, and with splits (output, received_splits), as Horovod's;
    differentiable."""
    out, received = _Alltoall.apply(_tensor(tensor, "alltoall"), splits, name, process_set,
                                    priority)
    return out if splits is None else (out, received)


# ---- sparse allreduce ----
def sparse_allreduce_async(tensor, name=None, op=Average, process_set=global_process_set,
                           priority=0):
    """Horovod's all-reduce of a sparse COO tensor: every rank's indices and values are
    all-gathered (two ragged allgathers: ranks may hold different numbers of entries; neither
    waits for the other ranks to start). Returns a callable: calling it waits and gives the sum
    (op=Sum) or the average (op=Average) as a coalesced sparse tensor of the input's size."""
    op = _op(op, None, "sparse_allreduce")
    if op not in (Sum, Average):
        raise prioccl.ArgumentError(f"sparse_allreduce: op must be Sum or Average, not {op!r}")
    t = _tensor(tensor, "sparse_allreduce")
    if not t.is_sparse:
        raise prioccl.ArgumentError("sparse_allreduce: expected a sparse (COO) tensor; use "
                                    "allreduce for a dense one")
    t = t.coalesce()
    # Rows of (index per sparse dim): allgather concatenates along the first dimension.
    indices = prioccl.allgather_async(t.indices().t().contiguous(), priority,
                                      None if name is None else f"{name}.indices", process_set)
    values = prioccl.allgather_async(t.values().contiguous(), priority,
                                     None if name is None else f"{name}.values", process_set)

    def result():
        got_values = prioccl.synchronize(values)
        got_indices = prioccl.synchronize(indices)
        if op == Average:
            got_values = got_values / (process_set or global_process_set).size()
        return torch.sparse_coo_tensor(got_indices.t(), got_values, t.shape).coalesce()
    return result


# ---- reducescatter ----
@_kept
def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0, priority=0):
    op = _op(op, None, "reducescatter")
    return prioccl.reducescatter_async(_tensor(tensor, "reducescatter"), op, priority, name,
                                       process_set, prescale_factor, postscale_factor)


class _Reducescatter(torch.autograd.Function):
    """Output r is the (scaled) reduction of every rank's part r: each input part's gradient is
    the gradient of the output it went to, gathered from its owner, scaled by the factors and, as
    Horovod's, by size() for a Sum (the average convention of _Allgather, seen from the other
    side: Horovod's gradient of a Sum is size() times that of an Average)."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale, postscale, priority):
        ctx.args = (op, process_set, prescale * postscale)
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale, postscale,
                                               priority))

    @staticmethod
    def backward(ctx, grad):
        op, ps, scale = ctx.args
        back = prioccl.allgather(grad.contiguous(), process_set=ps)
        if op == Sum:
            scale *= ps.size()
        if scale != 1.0:
            back = back * scale
        return back, None, None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0,
                  priority=0):
    """Rank r's part of the reduction of every rank's tensor (first dimension cut into size()
    parts, the first ones a row longer when it does not divide); differentiable."""
    op = _op(op, None, "reducescatter")
    wire, ctx = compression.compress(_tensor(tensor, "reducescatter"))
    out = _Reducescatter.apply(wire, name, op, process_set, prescale_factor, postscale_factor,
                               priority)
    return compression.decompress(out, ctx)


@_kept
def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0, priority=0):
    op = _op(op, None, "grouped_reducescatter")
    return prioccl._grouped(lambda t, n: prioccl.reducescatter_async(
        _tensor(t, "grouped_reducescatter"), op, priority, n, process_set, prescale_factor,
        postscale_factor), tensors, name)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0, priority=0):
    return [reducescatter(t, None if name is None else f"{name}.{i}", compression, op,
                          process_set, prescale_factor, postscale_factor, priority)
            for i, t in enumerate(tensors)]


def barrier(process_set=global_process_set):
    prioccl.barrier(process_set=process_set)


def join(device=-1):
    """Horovod's join (prioccl.join): blocks until every rank has joined, taking part in the
    others' allreduces (with zeros), reduces, reducescatters, broadcasts and barriers meanwhile;
    returns the last rank to join. `device` is accepted for Horovod's signature (CPU only)."""
    return prioccl.join()
