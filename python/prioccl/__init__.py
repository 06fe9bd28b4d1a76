"""prioccl for Python: Horovod-style collectives over prioccl's C ABI (ctypes, no build step).

    import prioccl
    prioccl.init()
    avg = prioccl.allreduce(tensor)                      # a new tensor, averaged over ranks
    h = prioccl.allreduce_async_(tensor, priority=0)     # in place; smaller priority = more urgent
    prioccl.synchronize(h)

Works on numpy arrays and CPU torch tensors (contiguous; int8, uint8, int32, uint32, int64,
uint64, float16, bfloat16 (torch), float32, float64) without copies. Errors raise PriocclError with the library's
message. Launch with mpirun; prioccl initialises MPI itself.
"""
import ctypes
import os

from . import _lib

__all__ = ["init", "shutdown", "abort", "is_initialized", "rank", "size", "local_rank", "allreduce",
           "allreduce_", "allreduce_async", "allreduce_async_", "synchronize", "poll",
           "broadcast", "broadcast_", "broadcast_async", "broadcast_async_", "broadcast_parameters",
           "reduce", "reduce_async", "allgather", "allgather_async", "reducescatter",
           "reducescatter_async", "alltoall", "alltoall_async", "barrier", "send_async", "recv_async", "PriocclError",
           "Sum", "Prod", "Min", "Max", "Average"]

# priocclRedOp_t
# priocclRedOp_t values (NCCL's numbering).
Sum, Prod, Max, Min, Average = 0, 1, 2, 3, 4


class PriocclError(RuntimeError):
    """A prioccl call failed; the message is the library's (priocclGetLastError)."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


_L = None
_comm = None


def _check(result, what):
    if result != 0:
        detail = _L.priocclGetLastError(_comm).decode(errors="replace")
        kind = _L.priocclGetErrorString(result).decode()
        raise PriocclError(f"{what}: {kind}: {detail}", result)


def _require():
    if _comm is None:
        raise PriocclError("prioccl is not initialised: call prioccl.init() first")


def init():
    """Creates the communicator over all ranks (MPI_COMM_WORLD). Idempotent."""
    global _L, _comm
    if _comm is not None:
        return
    if _L is None:
        _L = _lib.load()
    comm = ctypes.c_void_p()
    _check(_L.priocclCommInitWorld(ctypes.byref(comm)), "init")
    _comm = comm


def shutdown():
    """Finishes pending ops and destroys the communicator (finalising MPI if prioccl started it)."""
    global _comm
    if _comm is None:
        return
    comm, _comm = _comm, None
    result = _L.priocclCommDestroy(comm)
    if result != 0:
        raise PriocclError("shutdown: " + _L.priocclGetLastError(None).decode(errors="replace"))


def abort():
    """From any thread: fails every pending and later op at once and tells the other ranks (their
    ops fail naming this rank). shutdown() afterwards waits for nothing. For a stuck job."""
    _require()
    _check(_L.priocclCommAbort(_comm), "abort")


def is_initialized():
    return _comm is not None


def rank():
    _require()
    out = ctypes.c_int()
    _check(_L.priocclCommRank(_comm, ctypes.byref(out)), "rank")
    return out.value


def size():
    _require()
    out = ctypes.c_int()
    _check(_L.priocclCommSize(_comm, ctypes.byref(out)), "size")
    return out.value


def local_rank():
    """This rank's index on its host, from the launcher (Open MPI, MPICH/Hydra, Slurm)."""
    for var in ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"):
        if var in os.environ:
            return int(os.environ[var])
    return 0


# ---- buffers: numpy arrays and torch tensors, seen as (pointer, count, priocclDataType_t) ----
# priocclDataType_t values (NCCL's numbering).
_NUMPY_TYPES = {"int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5,
                "float16": 6, "float32": 7, "float64": 8}
_TORCH_TYPES = {"torch.int8": 0, "torch.uint8": 1, "torch.int32": 2, "torch.uint32": 3,
                "torch.int64": 4, "torch.uint64": 5, "torch.float16": 6, "torch.float32": 7,
                "torch.float64": 8, "torch.bfloat16": 9}


def _buffer(t, writable=True):
    """(address, count, dtype code) of a contiguous CPU numpy array or torch tensor."""
    if hasattr(t, "data_ptr"):  # torch
        if t.device.type != "cpu":
            raise PriocclError(f"tensor is on {t.device}: only CPU tensors (GPU: issue 10)")
        if not t.is_contiguous():
            raise PriocclError("tensor is not contiguous: call .contiguous() first")
        code = _TORCH_TYPES.get(str(t.dtype))
        if code is None:
            raise PriocclError(f"unsupported dtype {t.dtype}")
        return t.data_ptr(), t.numel(), code
    if hasattr(t, "__array_interface__"):  # numpy
        if not t.flags["C_CONTIGUOUS"]:
            raise PriocclError("array is not C-contiguous: use numpy.ascontiguousarray")
        if writable and not t.flags["WRITEABLE"]:
            raise PriocclError("array is read-only")
        code = _NUMPY_TYPES.get(str(t.dtype))
        if code is None:
            raise PriocclError(f"unsupported dtype {t.dtype}")
        return t.ctypes.data, t.size, code
    raise PriocclError(f"expected a numpy array or a torch tensor, got {type(t).__name__}")


class Handle:
    """An op in flight; keeps its buffers alive until it is synchronised."""

    def __init__(self, request, tensors, result):
        self._request = request
        self._tensors = tensors
        self.result = result

    def __del__(self):  # an abandoned handle: the op still must finish before its buffers go
        if getattr(self, "_request", None) is not None and _L is not None and _comm is not None:
            _L.priocclWait(self._request)


def _submit(what, name, unnamed, named):
    """Runs the C call (unnamed(req) or named(key, req)); returns the request."""
    _require()
    req = ctypes.c_void_p()
    if name is None:
        result = unnamed(ctypes.byref(req))
    else:
        result = named(str(name).encode(), ctypes.byref(req))
    _check(result, what)
    return req


def _pair(src, dst):
    """(send pointer, receive pointer, count, dtype code) of two buffers of one size and dtype."""
    _require()
    s_ptr, count, code = _buffer(src, writable=False)
    d_ptr, d_count, d_code = _buffer(dst)
    if (count, code) != (d_count, d_code):
        raise PriocclError("source and destination differ in size or dtype")
    return s_ptr, d_ptr, count, code


def _async(src, dst, op, priority, name):
    s_ptr, d_ptr, count, code = _pair(src, dst)
    req = _submit("allreduce", name,
                  lambda r: _L.priocclAllReduceAsync(s_ptr, d_ptr, count, code, op, priority,
                                                     _comm, r),
                  lambda k, r: _L.priocclAllReduceNamedAsync(s_ptr, d_ptr, count, code, op,
                                                             priority, k, _comm, r))
    return Handle(req, (src, dst), dst)


def _empty_like(t):
    if hasattr(t, "data_ptr"):
        import torch
        return torch.empty_like(t, memory_format=torch.contiguous_format)
    import numpy
    return numpy.empty_like(t, order="C")


def allreduce_async_(tensor, op=Average, priority=0, name=None):
    """Starts an in-place all-reduce of `tensor`; returns a handle for synchronize()/poll()."""
    return _async(tensor, tensor, op, priority, name)


def allreduce_async(tensor, op=Average, priority=0, name=None):
    """Starts an all-reduce into a new tensor (synchronize() returns it); `tensor` is unchanged."""
    return _async(tensor, _empty_like(tensor), op, priority, name)


def synchronize(handle):
    """Waits for the op; returns its result tensor. Raises PriocclError if the op failed."""
    req, handle._request = handle._request, None
    if req is None:
        return handle.result
    _check(_L.priocclWait(req), "synchronize")
    handle._tensors = None
    return handle.result


def poll(handle):
    """True when the op has finished (synchronize() then returns at once)."""
    if handle._request is None:
        return True
    done = ctypes.c_int()
    _check(_L.priocclTest(handle._request, ctypes.byref(done)), "poll")
    return bool(done.value)


def allreduce(tensor, op=Average, priority=0, name=None):
    return synchronize(allreduce_async(tensor, op, priority, name))


def allreduce_(tensor, op=Average, priority=0, name=None):
    return synchronize(allreduce_async_(tensor, op, priority, name))


def _broadcast_async(src, dst, root_rank, priority, name):
    s_ptr, d_ptr, count, code = _pair(src, dst)
    req = _submit("broadcast", name,
                  lambda r: _L.priocclBroadcastAsync(s_ptr, d_ptr, count, code, root_rank,
                                                     priority, _comm, r),
                  lambda k, r: _L.priocclBroadcastNamedAsync(s_ptr, d_ptr, count, code, root_rank,
                                                             priority, k, _comm, r))
    return Handle(req, (src, dst), dst)


def broadcast_async_(tensor, root_rank=0, priority=0, name=None):
    """Starts overwriting `tensor` with root_rank's, bit for bit; returns a handle."""
    return _broadcast_async(tensor, tensor, root_rank, priority, name)


def broadcast_async(tensor, root_rank=0, priority=0, name=None):
    """Starts a broadcast into a new tensor (synchronize() returns it); `tensor` is unchanged."""
    return _broadcast_async(tensor, _empty_like(tensor), root_rank, priority, name)


def broadcast(tensor, root_rank=0, priority=0, name=None):
    """root_rank's `tensor`, as a new tensor on every rank."""
    return synchronize(broadcast_async(tensor, root_rank, priority, name))


def broadcast_(tensor, root_rank=0, priority=0, name=None):
    """Overwrites `tensor` with root_rank's, bit for bit (-0.0 and NaN payloads included)."""
    return synchronize(broadcast_async_(tensor, root_rank, priority, name))


def broadcast_parameters(params, root_rank=0):
    """Broadcasts a state_dict (or an iterable of (name, tensor)) from root_rank, in place. Every
    rank must pass the same names; ops are named, so dict order does not matter."""
    items = params.items() if hasattr(params, "items") else params
    handles = []
    for name, t in items:
        target = t.data if hasattr(t, "data_ptr") else t  # a Parameter's storage, not autograd's
        handles.append(broadcast_async_(target, root_rank, name=f"prioccl.broadcast.{name}"))
    for h in handles:
        synchronize(h)


def _new_empty(t, count):
    """A new contiguous 1-D tensor/array of t's dtype with `count` elements."""
    if hasattr(t, "data_ptr"):
        import torch
        return torch.empty(count, dtype=t.dtype)
    import numpy
    return numpy.empty(count, dtype=t.dtype)


def _rows(t):
    """Elements per first-dimension row (1 for a 1-D or 0-D tensor)."""
    shape = tuple(t.shape)
    n = 1
    for d in shape[1:]:
        n *= d
    return n


def _reshape_rows(flat, like, rows):
    """`flat` as `rows` rows shaped like `like`'s trailing dimensions."""
    return flat.reshape((rows,) + tuple(like.shape)[1:])


def reduce_async(tensor, root_rank=0, op=Average, priority=0, name=None):
    """Starts a reduce of `tensor` to root_rank; synchronize() returns the result there (a new
    tensor) and None on the other ranks. `tensor` is unchanged."""
    s_ptr, count, code = _buffer(tensor, writable=False)
    out = _empty_like(tensor) if rank() == root_rank else None
    d_ptr = _buffer(out)[0] if out is not None else None
    req = _submit("reduce", name,
                  lambda r: _L.priocclReduceAsync(s_ptr, d_ptr, count, code, op, root_rank,
                                                  priority, _comm, r),
                  lambda k, r: _L.priocclReduceNamedAsync(s_ptr, d_ptr, count, code, op,
                                                          root_rank, priority, k, _comm, r))
    return Handle(req, (tensor, out), out)


def reduce(tensor, root_rank=0, op=Average, priority=0, name=None):
    return synchronize(reduce_async(tensor, root_rank, op, priority, name))


def allgather_async(tensor, priority=0, name=None):
    """Starts gathering every rank's `tensor` into one, concatenated along the first dimension in
    rank order (every rank must pass the same shape: ranks that differ all get a PriocclError)."""
    s_ptr, count, code = _buffer(tensor, writable=False)
    p = size()
    flat = _new_empty(tensor, count * p)
    d_ptr = _buffer(flat)[0]
    req = _submit("allgather", name,
                  lambda r: _L.priocclAllGatherAsync(s_ptr, d_ptr, count, code, priority, _comm, r),
                  lambda k, r: _L.priocclAllGatherNamedAsync(s_ptr, d_ptr, count, code, priority,
                                                             k, _comm, r))
    rows = tuple(tensor.shape)[0] * p if len(tuple(tensor.shape)) > 0 else p
    return Handle(req, (tensor, flat), _reshape_rows(flat, tensor, rows))


def allgather(tensor, priority=0, name=None):
    return synchronize(allgather_async(tensor, priority, name))


def reducescatter_async(tensor, op=Average, priority=0, name=None):
    """Starts a reduce-scatter: `tensor`'s first dimension is cut into size() equal parts; rank r
    gets the reduction of every rank's part r (a new tensor)."""
    s_ptr, count, code = _buffer(tensor, writable=False)
    p = size()
    shape = tuple(tensor.shape)
    if not shape or shape[0] % p:
        raise PriocclError(f"reducescatter: the first dimension ({shape[0] if shape else 'none'}) "
                           f"must divide into {p} equal parts, one per rank")
    part = count // p
    flat = _new_empty(tensor, part)
    d_ptr = _buffer(flat)[0]
    req = _submit("reducescatter", name,
                  lambda r: _L.priocclReduceScatterAsync(s_ptr, d_ptr, part, code, op, priority,
                                                         _comm, r),
                  lambda k, r: _L.priocclReduceScatterNamedAsync(s_ptr, d_ptr, part, code, op,
                                                                 priority, k, _comm, r))
    return Handle(req, (tensor, flat), _reshape_rows(flat, tensor, shape[0] // p))


def reducescatter(tensor, op=Average, priority=0, name=None):
    return synchronize(reducescatter_async(tensor, op, priority, name))


def alltoall_async(tensor, priority=0, name=None):
    """Starts an all-to-all with equal splits: `tensor`'s first dimension is cut into size()
    equal parts; part j goes to rank j, and the result holds every rank's part for this rank, in
    rank order (a new tensor of the same shape)."""
    s_ptr, count, code = _buffer(tensor, writable=False)
    p = size()
    shape = tuple(tensor.shape)
    if not shape or shape[0] % p:
        raise PriocclError(f"alltoall: the first dimension ({shape[0] if shape else 'none'}) "
                           f"must divide into {p} equal parts (uneven splits: not yet)")
    out = _empty_like(tensor)
    d_ptr = _buffer(out)[0]
    req = _submit("alltoall", name,
                  lambda r: _L.priocclAllToAllAsync(s_ptr, d_ptr, count // p, code, priority,
                                                    _comm, r),
                  lambda k, r: _L.priocclAllToAllNamedAsync(s_ptr, d_ptr, count // p, code,
                                                            priority, k, _comm, r))
    return Handle(req, (tensor, out), out)


def alltoall(tensor, priority=0, name=None):
    return synchronize(alltoall_async(tensor, priority, name))


def barrier(priority=0):
    """Returns once every rank has called barrier()."""
    _require()
    req = ctypes.c_void_p()
    _check(_L.priocclBarrierAsync(priority, _comm, ctypes.byref(req)), "barrier")
    synchronize(Handle(req, (), None))


def send_async(tensor, peer, tag=0, priority=0):
    _require()
    ptr, count, code = _buffer(tensor, writable=False)
    req = ctypes.c_void_p()
    _check(_L.priocclSendAsync(ptr, count, code, peer, tag, priority, _comm, ctypes.byref(req)),
           "send")
    return Handle(req, (tensor,), tensor)


def recv_async(tensor, peer, tag=0, priority=0):
    _require()
    ptr, count, code = _buffer(tensor)
    req = ctypes.c_void_p()
    _check(_L.priocclRecvAsync(ptr, count, code, peer, tag, priority, _comm, ctypes.byref(req)),
           "recv")
    return Handle(req, (tensor,), tensor)
