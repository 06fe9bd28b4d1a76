"""torch.distributed backend "prioccl": `import prioccl.torch` registers it, and

    torch.distributed.init_process_group("prioccl")      # under torchrun, or prioccl.run
    ddp = torch.nn.parallel.DistributedDataParallel(model) # unchanged

runs the process group's collectives through prioccl: allreduce (sum, product, min, max, avg),
broadcast, allgather (and _allgather_base), reduce_scatter (and _reduce_scatter_base),
alltoall_base, reduce, barrier, send and recv, on CPU tensors.

The default group is prioccl's global communicator (made from the group's store, rank and size,
or the one prioccl.init() made already when it has the same rank and size), so Horovod-style
prioccl calls and the process group share one engine. A group from new_group() gets a
communicator of its own through its store (not with PRIOCCL_COMM_ID set, which would put every
group at one address).

Priorities, on by default: each all-reduce is more urgent than every one before it on the group
(priority = minus its sequence number). DDP all-reduces its buckets in the order their gradients
are ready, the last layers' first, so the first layers' bucket, which the next forward pass needs
first, is the most urgent of those in flight. Set PRIOCCL_BACKEND_PRIORITIES=0 for priority 0.

Chunks: a communicator the backend makes itself (not one prioccl.init() made) cuts ops into 1 MiB
chunks on every link (the library's own rule picks that on fast links at 4 ranks or more; on slow
ones 128 KiB), unless PRIOCCL_CHUNK_BYTES is set. DDP waits for all its buckets before the
optimizer step, so preempting one bucket for another cannot shorten a step, while on slow links the
library's own 32 KiB messages cost each rank a third more communication CPU than gloo
(docs/benchmarks.md, "DDP over the backend: the chunk size").

Completion: a call never blocks (except barrier); it returns a Work made from a torch Future that
one background thread per group completes in submission order. A failed op fails its Work: DDP
and wait() raise the PriocclError's message instead of hanging. opts.timeout is not used:
PRIOCCL_TIMEOUT_S governs every op.
"""
import os
import queue
import threading
import weakref

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup, _create_work_from_future

import prioccl
from prioccl.torch.ddp import _STOP, _complete_in_order, _failable_future

__all__ = ["ProcessGroupPrioccl", "follow_shrink"]


_BULK_CHUNK_BYTES = 1 << 20  # the largest chunk the library's own link-measured rule picks


def _bulk_config():
    """The config of the backend's own communicators: 1 MiB chunks unless PRIOCCL_CHUNK_BYTES is
    set; everything else from the environment, as for any communicator."""
    config = prioccl._lib.Config.initial()
    if "PRIOCCL_CHUNK_BYTES" not in os.environ:
        config.chunkBytes = _BULK_CHUNK_BYTES
    return config


def _prioccl_op(reduce_op, what):
    """prioccl's reduction for torch's ReduceOp (an error for the bitwise and premultiplied ones,
    which prioccl has not)."""
    for torch_op, ours in ((dist.ReduceOp.SUM, prioccl.Sum), (dist.ReduceOp.PRODUCT, prioccl.Prod),
                           (dist.ReduceOp.MIN, prioccl.Min), (dist.ReduceOp.MAX, prioccl.Max),
                           (dist.ReduceOp.AVG, prioccl.Average)):
        if reduce_op == torch_op:
            return ours
    raise prioccl.PriocclError(f"{what}: backend prioccl has no {reduce_op} (it has SUM, "
                               f"PRODUCT, MIN, MAX and AVG)")


def _failable_work():
    """A future for the group's thread to complete, and the Work torch gets from it (through
    _failable_future: an op's error reaches DDP as torch's own, not as a Python exception)."""
    fut, result = _failable_future()
    return fut, _create_work_from_future(result)


class ProcessGroupPrioccl(ProcessGroup):
    """A torch.distributed process group whose collectives run on a prioccl communicator."""

    def __init__(self, store, rank, size, timeout=None):
        super().__init__(rank, size)
        if not prioccl.is_initialized():
            handle = prioccl.ctypes.c_void_p()
            prioccl._join(handle, rank, size, store, "prioccl/unique_id", "init_process_group",
                          _bulk_config())
            prioccl._install(handle)
            self._ps = prioccl.global_process_set
        elif prioccl.rank() == rank and prioccl.size() == size and not dist.is_initialized():
            self._ps = prioccl.global_process_set
        else:
            if size > 1 and os.environ.get("PRIOCCL_COMM_ID"):
                raise prioccl.PriocclError(
                    "new_group with backend prioccl: a group's communicator comes through its "
                    "store, which PRIOCCL_COMM_ID (one address for every group) overrides: unset "
                    "it (python3 -m prioccl.run --store)")
            handle = prioccl.ctypes.c_void_p()
            prioccl._join(handle, rank, size, store, "prioccl/unique_id", "new_group",
                          _bulk_config())
            self._ps = prioccl._adopt(handle, rank, size)
        self._priorities = os.environ.get("PRIOCCL_BACKEND_PRIORITIES", "1") != "0"
        self._seq = 0
        self._work = queue.Queue()
        self._thread = threading.Thread(target=_complete_in_order, args=(self._work,),
                                        name="prioccl-process-group", daemon=True)
        self._thread.start()
        weakref.finalize(self, self._work.put, _STOP)

    def getBackendName(self):  # noqa: N802 - torch's name
        return "prioccl"

    def name(self):
        return "prioccl"

    def _next_priority(self):
        self._seq += 1
        return -(self._seq % (1 << 30)) if self._priorities else 0

    def _async(self, submit, finish=lambda result: result):
        """A Work completed by the group's thread once the op that submit() started has (its
        value finish(op's result)); a failure to submit fails the Work at once."""
        fut, work = _failable_work()
        try:
            handle = submit()
        except Exception as e:  # noqa: BLE001 - the Work carries it
            fut.set_exception(e)
            return work
        self._work.put((handle, fut, finish))
        return work

    def _one(self, tensors, what):
        if len(tensors) != 1:
            raise prioccl.PriocclError(f"{what}: backend prioccl takes one tensor per call, "
                                       f"not {len(tensors)}")
        return tensors[0]

    def allreduce(self, tensors, opts=None):
        op = _prioccl_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, "allreduce")
        t = self._one(tensors, "allreduce")
        return self._async(lambda: prioccl.allreduce_async_(
            t, op=op, priority=self._next_priority(), process_set=self._ps),
            lambda _: tensors)

    def _global(self, root):
        """torch's root (the group's rank) as prioccl's root_rank (a global rank, as Horovod's);
        one out of range is passed on for prioccl's error."""
        return self._ps.ranks[root] if 0 <= root < len(self._ps.ranks) else root

    def broadcast(self, tensors, opts=None):
        t = self._one(tensors, "broadcast")
        root = self._global(opts.rootRank if opts is not None else 0)
        return self._async(lambda: prioccl.broadcast_async_(t, root_rank=root,
                                                            process_set=self._ps),
                           lambda _: tensors)

    def reduce(self, tensors, opts=None):
        t = self._one(tensors, "reduce")
        op = _prioccl_op(opts.reduceOp, "reduce")
        root = opts.rootRank

        def finish(result):
            if self._ps.rank() == root:
                t.copy_(result)
            return tensors
        return self._async(lambda: prioccl.reduce_async(t, root_rank=self._global(root), op=op,
                                                        process_set=self._ps), finish)

    def allgather(self, output_tensors, input_tensors, opts=None):
        t = self._one(input_tensors, "allgather")
        outs = self._one(output_tensors, "allgather")
        p = self._ps.size()

        def finish(result):
            parts = result.reshape((p,) + tuple(t.shape))
            for k, out in enumerate(outs):
                out.copy_(parts[k])
            return output_tensors
        return self._async(lambda: prioccl.allgather_async(t.reshape((1,) + tuple(t.shape)),
                                                           process_set=self._ps), finish)

    def _allgather_base(self, output, input, opts=None):  # noqa: A002 - torch's names
        def finish(result):
            output.copy_(result.reshape(output.shape))
            return [output]
        return self._async(lambda: prioccl.allgather_async(input.reshape(1, -1),
                                                           process_set=self._ps), finish)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        out = self._one(output_tensors, "reduce_scatter")
        parts = self._one(input_tensors, "reduce_scatter")
        op = _prioccl_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM,
                         "reduce_scatter")
        stacked = torch.stack([x.reshape(-1) for x in parts])

        def finish(result):
            out.copy_(result.reshape(out.shape))
            return output_tensors
        return self._async(lambda: prioccl.reducescatter_async(stacked, op=op,
                                                               process_set=self._ps), finish)

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002 - torch's names
        op = _prioccl_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM,
                         "reduce_scatter")
        p = self._ps.size()

        def finish(result):
            output.copy_(result.reshape(output.shape))
            return [output]
        return self._async(lambda: prioccl.reducescatter_async(
            input.reshape(p, -1), op=op, process_set=self._ps), finish)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes,  # noqa: A002
                      opts=None):
        splits = list(input_split_sizes) if input_split_sizes else None

        def finish(result):
            got = result[0] if isinstance(result, tuple) else result
            output.copy_(got.reshape(output.shape))
            return [output]
        return self._async(lambda: prioccl.alltoall_async(input, splits=splits,
                                                          process_set=self._ps), finish)

    def barrier(self, opts=None):
        fut, work = _failable_work()
        try:
            prioccl.barrier(process_set=self._ps)
            fut.set_result([])
        except Exception as e:  # noqa: BLE001 - the Work carries it
            fut.set_exception(e)
        return work

    def send(self, tensors, dst, tag=0):
        t = self._one(tensors, "send")
        return self._async(lambda: prioccl.send_async(t, dst, tag, process_set=self._ps),
                           lambda _: tensors)

    def recv(self, tensors, src, tag=0):
        t = self._one(tensors, "recv")
        return self._async(lambda: prioccl.recv_async(t, src, tag, process_set=self._ps),
                           lambda _: tensors)


_remade = 0  # default groups remade after a shrink in this process (each one's store prefix)


def follow_shrink():
    """After prioccl.shrink() (prioccl.torch.elastic calls it): torch.distributed's default group,
    when it is prioccl's, is made again over the shrunk communicator, with the new rank and
    size. A process group's size is fixed when it is made, and DDP divides by it. The other groups
    go with the old default one (as prioccl.shrink() drops its process sets), and so does every
    DDP built on it: build DDP again afterwards (an elastic reset callback). init_process_group
    meets the other survivors through the old group's store, under a prefix of its own. That store
    must have outlived the lost ranks: an agent's (torchrun's, or prioccl.run --store), or one
    in a rank that is still there. Returns whether a group was made again."""
    global _remade
    if not dist.is_initialized() or dist.get_backend() != "prioccl":
        return False
    store = dist.distributed_c10d._get_default_store()
    dist.destroy_process_group()
    _remade += 1
    try:
        dist.init_process_group("prioccl", store=dist.PrefixStore(f"prioccl/shrink{_remade}",
                                                                    store),
                                rank=prioccl.rank(), world_size=prioccl.size())
    except RuntimeError as e:  # the store's connection: its server's process ended
        raise prioccl.PriocclError(
            f"shrink: torch.distributed's default group cannot be made again over the "
            f"{prioccl.size()} ranks left: its store failed ({e}). It probably lived in a lost "
            f"rank's process (init_process_group's env:// store lives in rank 0's): launch with "
            f"an agent's store (torchrun, or python3 -m prioccl.run --store)") from e
    return True


def _create(store, rank, size, timeout):
    return ProcessGroupPrioccl(store, rank, size, timeout)


if not hasattr(dist.Backend, "PRIOCCL"):  # once per process
    dist.Backend.register_backend("prioccl", _create)
