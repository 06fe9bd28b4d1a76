"""horovod.torch's state helpers: parameters, optimizer state and any picklable object, from one
rank to all (or from all to all)."""
import io

import torch

import prioccl
from prioccl import global_process_set


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Overwrites every rank's tensors with root_rank's, in place: `params` is a state_dict or an
    iterable of (name, tensor), e.g. model.named_parameters(); names must match across ranks."""
    prioccl.broadcast_parameters(params, root_rank, process_set)


def _to_bytes(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)  # pickle, with tensors stored compactly and exactly
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)


def _from_bytes(t):
    return torch.load(io.BytesIO(t.numpy().tobytes()))


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """root_rank's `obj` (anything torch.save can pickle) on every rank: its length, then its
    bytes. The other ranks' `obj` is ignored. root_rank is a global rank, also in a process set."""
    base = name or "prioccl.broadcast_object"
    mine = process_set._global_rank() == root_rank
    data = _to_bytes(obj) if mine else None
    length = torch.tensor([data.numel() if mine else 0], dtype=torch.int64)
    prioccl.broadcast_(length, root_rank, name=f"{base}.length", process_set=process_set)
    if not mine:
        data = torch.empty(int(length[0]), dtype=torch.uint8)
    prioccl.broadcast_(data, root_rank, name=f"{base}.data", process_set=process_set)
    return obj if mine else _from_bytes(data)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Every rank's `obj`, in rank order (a list)."""
    base = name or "prioccl.allgather_object"
    data = _to_bytes(obj)
    lengths = prioccl.allgather(torch.tensor([data.numel()], dtype=torch.int64),
                                name=f"{base}.lengths", process_set=process_set)
    every = prioccl.allgather(data, name=f"{base}.data", process_set=process_set)
    out, at = [], 0
    for n in lengths.tolist():
        out.append(_from_bytes(every[at:at + n]))
        at += n
    return out


def _make_state(optimizer):
    """Horovod's state initialisation: zero gradients, and one step of the wrapped optimizer (a
    DistributedOptimizer's own step() would all-reduce, and wait for ranks that do not step)."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
    wrapped = getattr(optimizer, "_base", None)  # a DistributedOptimizer's wrapped optimizer
    (wrapped() if wrapped else optimizer).step()


def broadcast_optimizer_state(optimizer, root_rank, process_set=global_process_set):
    """Makes every rank's optimizer state (momentum buffers, step counts, hyper-parameters of
    every param group) root_rank's, bit for bit: root_rank's state_dict is broadcast and loaded.
    An optimizer without state yet gets one first as Horovod makes it: every parameter that
    requires a gradient gets a zero gradient, and the wrapped optimizer steps once on them (no
    communication). As in Horovod, that step applies weight decay to the parameters."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if not optimizer.state_dict()["state"]:
        _make_state(optimizer)
    mine = process_set._global_rank() == root_rank
    state = broadcast_object(optimizer.state_dict() if mine else None,
                             root_rank, name="prioccl.broadcast_optimizer_state",
                             process_set=process_set)
    optimizer.load_state_dict(state)
