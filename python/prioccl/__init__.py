"""prioccl for Python: Horovod-style collectives over prioccl's C ABI (ctypes, no build step).

    import prioccl
    prioccl.init()
    avg = prioccl.allreduce(tensor)                      # a new tensor, averaged over ranks
    h = prioccl.allreduce_async_(tensor, priority=0)     # in place; smaller priority = more urgent
    prioccl.synchronize(h)

Works on numpy arrays and CPU torch tensors (contiguous; int8, uint8, int32, uint32, int64,
uint64, float16, bfloat16 (torch), float32, float64) without copies. Errors raise PriocclError with the library's
message. Launch with mpirun; prioccl initialises MPI itself. allgather, alltoall (splits=...)
and reducescatter take first dimensions that differ between ranks or do not divide, as Horovod's.
"""
import ctypes
import operator
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


# ---- allgather / alltoall / reducescatter, Horovod's semantics over the v-collectives ----
_DTYPE_NAMES = {code: name for name, code in _NUMPY_TYPES.items()}
_DTYPE_NAMES[9] = "bfloat16"
_INT64 = 4  # priocclDataType_t of the size exchanges' int64s


def _sizes(counts):
    """A ctypes size_t array (the C calls' const size_t*). The library copies it at submission;
    the Handle still keeps it alive until the op completes, in case that ever changes."""
    return (ctypes.c_size_t * len(counts))(*counts)


def _shape_digest(dims):
    """A 63-bit FNV-1a of the dimensions after the first, exchanged so that ranks can tell shapes
    with the same elements per row apart ((2, 3) against (3, 2)) without a variable-size message."""
    h = 0xCBF29CE484222325
    for d in (len(dims),) + tuple(dims):
        h = ((h ^ int(d)) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h >> 1


def _exchange(what, values, all_to_all, priority, name):
    """A blocking plain all-gather (every rank's `values`, concatenated in rank order) or all-to-all
    (block j of `values` to rank j) of int64s; returns the received ints, k per rank."""
    p = size()
    send = (ctypes.c_int64 * len(values))(*values)
    k = len(values) // p if all_to_all else len(values)
    recv = (ctypes.c_int64 * (k * p))()
    s_ptr, d_ptr = ctypes.addressof(send), ctypes.addressof(recv)
    if all_to_all:
        req = _submit(what, name,
                      lambda r: _L.priocclAllToAllAsync(s_ptr, d_ptr, k, _INT64, priority, _comm,
                                                        r),
                      lambda key, r: _L.priocclAllToAllNamedAsync(s_ptr, d_ptr, k, _INT64,
                                                                  priority, key, _comm, r))
    else:
        req = _submit(what, name,
                      lambda r: _L.priocclAllGatherAsync(s_ptr, d_ptr, k, _INT64, priority, _comm,
                                                         r),
                      lambda key, r: _L.priocclAllGatherNamedAsync(s_ptr, d_ptr, k, _INT64,
                                                                   priority, key, _comm, r))
    synchronize(Handle(req, (send, recv), None))
    return [recv[i:i + k] for i in range(0, k * p, k)]


def _describe(t):
    """(row elements, shape digest, dtype code) of a tensor, which every rank must share, plus
    (address, elements, dtype code) and its shape. A 0-d tensor is one row, as it always was."""
    ptr, count, code = _buffer(t, writable=False)
    shape = tuple(t.shape)
    return (_rows(t), _shape_digest(shape[1:]), code), (ptr, count, code), shape


def _agree(what, peers):
    """Raises unless every rank reported the same (row elements, shape digest, dtype). `peers[k]`
    is (first, row elements, digest, dtype) from rank k, first < 0 when rank k failed locally.
    Every rank sees the same `peers`, so every rank raises (never one rank left waiting)."""
    failed = [k for k, q in enumerate(peers) if q[0] < 0]
    if failed:
        raise PriocclError(f"{what}: rank(s) {failed} failed before the op (their error says why)")
    codes = [q[3] for q in peers]
    if len(set(codes)) > 1:
        raise PriocclError(f"{what}: ranks differ in dtype (by rank: "
                           f"{[_DTYPE_NAMES.get(c, c) for c in codes]})")
    rows = [q[1] for q in peers]
    if len(set(rows)) > 1 or len({q[2] for q in peers}) > 1:
        raise PriocclError(f"{what}: ranks differ in the dimensions after the first (elements per "
                           f"row by rank: {rows}); only the first dimension may differ")


def _int_tensor(like, values):
    """`values` as a 1-D int64 tensor of `like`'s kind (torch tensor or numpy array)."""
    if hasattr(like, "data_ptr"):
        import torch
        return torch.tensor(values, dtype=torch.int64)
    import numpy
    return numpy.array(values, dtype=numpy.int64)


def allgather_async(tensor, priority=0, name=None):
    """Starts gathering every rank's `tensor`, concatenated along the first dimension in rank
    order (a new tensor from synchronize()). The first dimension may differ between ranks; the
    others and the dtype must not (every rank then raises PriocclError). Exchanging the sizes
    first blocks until every rank has called this (named `name` + ".sizes" when named)."""
    _require()
    local = None
    try:
        mine, (s_ptr, count, code), shape = _describe(tensor)
        first = shape[0] if shape else 1
    except PriocclError as e:  # still take part in the exchange, so the other ranks raise too
        local, mine, first = e, (0, 0, 0), -1
    peers = _exchange("allgather (sizes)", [first, *mine], False, priority,
                      None if name is None else f"{name}.sizes")
    if local is not None:
        raise local
    _agree("allgather", peers)
    row = mine[0]
    rows = [q[0] for q in peers]
    counts = _sizes([n * row for n in rows])
    flat = _new_empty(tensor, sum(rows) * row)
    d_ptr = _buffer(flat)[0]
    req = _submit("allgather", name,
                  lambda r: _L.priocclAllGatherVAsync(s_ptr, d_ptr, counts, None, code, priority,
                                                      _comm, r),
                  lambda k, r: _L.priocclAllGatherVNamedAsync(s_ptr, d_ptr, counts, None, code,
                                                              priority, k, _comm, r))
    return Handle(req, (tensor, flat, counts), _reshape_rows(flat, tensor, sum(rows)))


def allgather(tensor, priority=0, name=None):
    return synchronize(allgather_async(tensor, priority, name))


def reducescatter_async(tensor, op=Average, priority=0, name=None):
    """Starts a reduce-scatter: `tensor`'s first dimension is cut into size() parts, as Horovod
    does (the first rows % size() ranks get one row more); rank r gets the reduction of every
    rank's part r (a new tensor). Every rank must pass the same shape."""
    s_ptr, count, code = _buffer(tensor, writable=False)
    p, me = size(), rank()
    shape = tuple(tensor.shape)
    if not shape:
        raise PriocclError("reducescatter: the tensor needs a first dimension to cut")
    base, extra = divmod(shape[0], p)
    row = _rows(tensor)
    mine = base + (me < extra)
    flat = _new_empty(tensor, mine * row)
    d_ptr = _buffer(flat)[0]
    if extra == 0:  # equal parts: the plain call, as before (same result as the v-call)
        part = base * row
        req = _submit("reducescatter", name,
                      lambda r: _L.priocclReduceScatterAsync(s_ptr, d_ptr, part, code, op,
                                                             priority, _comm, r),
                      lambda k, r: _L.priocclReduceScatterNamedAsync(s_ptr, d_ptr, part, code, op,
                                                                     priority, k, _comm, r))
        return Handle(req, (tensor, flat), _reshape_rows(flat, tensor, mine))
    # Every rank computes the same counts from its own shape: ranks whose shapes differ pass
    # different counts (or the plain kind), which the library fails on every rank.
    counts = _sizes([(base + (k < extra)) * row for k in range(p)])
    req = _submit("reducescatter", name,
                  lambda r: _L.priocclReduceScatterVAsync(s_ptr, d_ptr, counts, code, op, priority,
                                                          _comm, r),
                  lambda k, r: _L.priocclReduceScatterVNamedAsync(s_ptr, d_ptr, counts, code, op,
                                                                  priority, k, _comm, r))
    return Handle(req, (tensor, flat, counts), _reshape_rows(flat, tensor, mine))


def reducescatter(tensor, op=Average, priority=0, name=None):
    return synchronize(reducescatter_async(tensor, op, priority, name))


def _parse_splits(splits, p, rows):
    if hasattr(splits, "tolist"):  # numpy array or torch tensor
        splits = splits.tolist()
    try:
        out = [operator.index(s) for s in splits]  # ints only: 2.5 rows is a mistake
    except TypeError:
        raise PriocclError(f"alltoall: splits must be a sequence of ints, got {splits!r}") from None
    if len(out) != p or min(out) < 0 or sum(out) != rows:
        raise PriocclError(f"alltoall: splits {out} must be {p} ints >= 0 (one per rank) summing "
                           f"to the first dimension ({rows})")
    return out


def alltoall_async(tensor, splits=None, priority=0, name=None, return_received_splits=False):
    """Starts an all-to-all: `tensor`'s first dimension is cut into parts of splits[j] rows
    (size() equal parts when splits is None), part j goes to rank j, and the result (a new tensor)
    holds the parts every rank sent this one, in rank order. The other dimensions and the dtype
    must agree on every rank.

    synchronize() returns the result, or (result, received_splits) with
    return_received_splits=True: the rows received from each rank, an int64 tensor of the input's
    kind. (Horovod returns that pair whenever splits are given; here the flag chooses, so that
    alltoall(t, splits) returns one tensor either way.) With splits, the splits are exchanged
    first, which blocks until every rank has called this (named `name` + ".splits" when named)."""
    _require()
    p = size()
    if splits is None:
        s_ptr, count, code = _buffer(tensor, writable=False)
        shape = tuple(tensor.shape)
        if not shape or shape[0] % p:
            raise PriocclError(f"alltoall: the first dimension ({shape[0] if shape else 'none'}) "
                               f"must divide into {p} equal parts (or pass splits)")
        out = _empty_like(tensor)
        d_ptr = _buffer(out)[0]
        req = _submit("alltoall", name,
                      lambda r: _L.priocclAllToAllAsync(s_ptr, d_ptr, count // p, code, priority,
                                                        _comm, r),
                      lambda k, r: _L.priocclAllToAllNamedAsync(s_ptr, d_ptr, count // p, code,
                                                                priority, k, _comm, r))
        result = (out, _int_tensor(tensor, [shape[0] // p] * p)) if return_received_splits else out
        return Handle(req, (tensor, out), result)
    local = None
    try:
        mine, (s_ptr, count, code), shape = _describe(tensor)
        if not shape:
            raise PriocclError("alltoall: the tensor needs a first dimension to split")
        sent = _parse_splits(splits, p, shape[0])
    except PriocclError as e:  # still take part in the exchange, so the other ranks raise too
        local, mine, sent = e, (0, 0, 0), [-1] * p
    # To rank j: (rows for j, row elements, shape digest, dtype), so that every rank sees every
    # rank's shape and dtype and all of them raise alike on a mismatch.
    peers = _exchange("alltoall (splits)", [v for j in range(p) for v in (sent[j], *mine)], True,
                      priority, None if name is None else f"{name}.splits")
    if local is not None:
        raise local
    _agree("alltoall", peers)
    row = mine[0]
    got = [q[0] for q in peers]
    send_counts = _sizes([n * row for n in sent])
    recv_counts = _sizes([n * row for n in got])
    flat = _new_empty(tensor, sum(got) * row)
    d_ptr = _buffer(flat)[0]
    req = _submit("alltoall", name,
                  lambda r: _L.priocclAllToAllVAsync(s_ptr, send_counts, None, d_ptr, recv_counts,
                                                     None, code, priority, _comm, r),
                  lambda k, r: _L.priocclAllToAllVNamedAsync(s_ptr, send_counts, None, d_ptr,
                                                             recv_counts, None, code, priority, k,
                                                             _comm, r))
    out = _reshape_rows(flat, tensor, sum(got))
    result = (out, _int_tensor(tensor, got)) if return_received_splits else out
    return Handle(req, (tensor, flat, send_counts, recv_counts), result)


def alltoall(tensor, splits=None, priority=0, name=None, return_received_splits=False):
    return synchronize(alltoall_async(tensor, splits, priority, name, return_received_splits))


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
