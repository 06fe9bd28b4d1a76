"""prioccl for Python: Horovod-style collectives over prioccl's C ABI (ctypes, no build step).

    import prioccl
    prioccl.init()
    avg = prioccl.allreduce(tensor)                      # a new tensor, averaged over ranks
    h = prioccl.allreduce_async_(tensor, priority=0)     # in place; smaller priority = more urgent
    prioccl.synchronize(h)

Works on numpy arrays and torch tensors, CPU or CUDA (contiguous; int8, uint8, int16, int32, uint32,
int64, uint64, float16, bfloat16 (torch), float32, float64, bool); CPU data without copies (int16
reductions go through int32, bool travels as uint8). A CUDA tensor's op starts after the work its
current stream queued before it (an event, not a stream sync); the library stages it through
pinned host memory over the host transports and passes it as is to PRIOCCL_TRANSPORT=nccl.
Errors raise PriocclError with the library's message.
Launch with mpirun; prioccl initialises MPI itself. allgather, alltoall (splits=...) and
reducescatter take first dimensions that differ between ranks or do not divide, as Horovod's.
Every op takes process_set= (a ProcessSet from add_process_set(); None: every rank).
prioccl.torch has horovod.torch's API on top of this module.
"""
import atexit
import ctypes
import operator
import os
import sys
import threading
import time
import zlib

from . import _constants, _lib, _tensors
from ._errors import ArgumentError, PriocclError

__all__ = ["init", "init_rank", "get_unique_id", "shutdown", "abort", "is_initialized", "rank",
           "size", "local_rank", "local_size", "cross_rank", "cross_size", "is_homogeneous",
           "mpi_threads_supported",
           "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce",
           "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
           "group", "counters", "synchronize", "poll", "broadcast", "broadcast_",
           "broadcast_async", "broadcast_async_",
           "broadcast_parameters", "reduce", "reduce_async", "allgather", "allgather_async",
           "reducescatter", "reducescatter_async", "alltoall", "alltoall_async", "barrier",
           "send_async", "recv_async", "PriocclError", "ProcessSet", "global_process_set",
           "add_process_set", "remove_process_set", "shrink", "Sum", "Prod", "Min", "Max",
           "Average", "build_features", "nccl_version", "ArgumentError", "FEATURE_UCX", "FEATURE_CUDA", "FEATURE_NCCL"]

# The library loads with the package, as Horovod's does: its constants (priocclRedOp_t values,
# data types, feature bits) are read from it, never restated here (_constants.py).
_L = _lib.load()
_C = _lib.constants
Sum, Prod, Max, Min, Average = (_C[_constants.OPS[n]] for n in ("Sum", "Prod", "Max", "Min",
                                                                "Average"))
_OP_NAMES = {_C[c]: name for name, c in _constants.OPS.items()}
_SHRINK_TO_LIVE = _C[_constants.SHRINK_TO_LIVE]
_LOST_PEER = frozenset(_C[c] for c in _constants.LOST_PEER)
_tensors.NUMPY_TYPES.update({k: _C[c] for k, c in _constants.NUMPY_DTYPES.items()})
_tensors.TORCH_TYPES.update({k: _C[c] for k, c in _constants.TORCH_DTYPES.items()})

_comm = None  # the communicator over every rank (global_process_set's)
_hosts = None  # (local_rank, local_size, cross_rank, cross_size, homogeneous), found at init


def _check(result, what, comm=None):
    if result != 0:
        detail = _L.priocclGetLastError(comm or _comm).decode(errors="replace")
        kind = _L.priocclGetErrorString(result).decode()
        raise PriocclError(f"{what}: {kind}: {detail}", result)


def _require():
    if _comm is None:
        raise PriocclError("prioccl is not initialised: call prioccl.init() first")


# ---- process sets: sub-communicators made by priocclCommSplit, as Horovod's process sets ----
class ProcessSet:
    """A set of ranks with its own communicator (Horovod's ProcessSet). Create it on every rank
    with the same ranks, then add_process_set() it on every rank (or pass it to init()); ops given
    process_set= run among its ranks only, ranked in the order of `ranks`."""

    def __init__(self, ranks=None):
        self.ranks = None if ranks is None else sorted({operator.index(r) for r in ranks})
        self.process_set_id = None  # set when registered; 0 is the global set
        self._comm = None  # this rank's communicator over the set; None where not included
        self._rank = -1

    def included(self):
        """True when this rank is in the set (False before registration)."""
        return self._comm is not None

    def size(self):
        return None if self.ranks is None else len(self.ranks)

    def rank(self):
        """This rank's index in the set; -1 where not included."""
        return self._rank

    def _global_rank(self):
        """This rank as ranks name it (the global rank, as root_rank is given); -1 where not
        included."""
        return self.ranks[self._rank] if self._rank >= 0 else -1

    def __repr__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


global_process_set = ProcessSet()
_process_sets = {}  # process_set_id -> ProcessSet, the global one included
_next_set_id = 1


def _target(process_set, what):
    """The registered ProcessSet an op runs in (the global one for None); raises where this rank
    is not a member (Horovod's rule), naming the op."""
    _require()
    ps = global_process_set if process_set is None else process_set
    if not isinstance(ps, ProcessSet):
        raise PriocclError(f"{what}: process_set must be a prioccl.ProcessSet, not "
                           f"{type(ps).__name__}")
    if ps.process_set_id is None or _process_sets.get(ps.process_set_id) is not ps:
        raise PriocclError(f"{what}: {ps!r} is not registered: add_process_set() it on every rank")
    if ps._comm is None:
        raise PriocclError(f"{what}: rank {rank()} is not in {ps!r}")
    return ps


def _register(ps, what):
    """Collective over every rank: checks that every rank passes the same ranks (an all-reduce of
    their digest), then splits the global communicator."""
    global _next_set_id
    p, me = size(), rank()
    if ps.ranks is None or not ps.ranks:
        raise PriocclError(f"{what}: a process set needs at least one rank")
    if ps.ranks[0] < 0 or ps.ranks[-1] >= p:
        raise PriocclError(f"{what}: ranks {ps.ranks} must lie in [0, {p})")
    if ps.process_set_id is not None:
        raise PriocclError(f"{what}: {ps!r} is registered already")
    digest = zlib.crc32(repr(ps.ranks).encode())
    # The digest's min and max over the ranks (min of -digest): equal only if every rank agrees.
    both = (ctypes.c_int64 * 2)(digest, -digest)
    _submit_wait(what, lambda r: _L.priocclAllReduceAsync(
        ctypes.addressof(both), ctypes.addressof(both), 2, _INT64, Min, 0, _comm, r), (both,))
    if both[0] != -both[1]:
        raise PriocclError(f"{what}: ranks passed different process sets (this rank: "
                           f"{ps.ranks})")
    for other in _process_sets.values():
        if other.ranks == ps.ranks:
            raise PriocclError(f"{what}: a process set with ranks {ps.ranks} exists already "
                               f"(id {other.process_set_id})")
    new = ctypes.c_void_p()
    color = 0 if me in ps.ranks else -1  # PRIOCCL_SPLIT_NOCOLOR
    _check(_L.priocclCommSplit(_comm, color, me, ctypes.byref(new)), what)
    ps.process_set_id = _next_set_id
    _next_set_id += 1
    if color == 0:
        ps._comm = new
        ps._rank = ps.ranks.index(me)
    _process_sets[ps.process_set_id] = ps
    return ps


def add_process_set(process_set):
    """Registers a ProcessSet (or a list of ranks) on every rank: collective over all ranks, which
    must pass the same ranks. Returns the ProcessSet."""
    _require()
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    return _register(ps, "add_process_set")


def remove_process_set(process_set):
    """Destroys a registered process set's communicator (after its pending ops). Call it on every
    rank. Returns False for the global set or an unregistered one, as Horovod does."""
    _require()
    if process_set is global_process_set or process_set.process_set_id not in _process_sets:
        return False
    del _process_sets[process_set.process_set_id]
    comm, process_set._comm = process_set._comm, None
    process_set.process_set_id, process_set._rank = None, -1
    if comm is not None:
        _check(_L.priocclCommDestroy(comm), "remove_process_set")
    return True


def init(comm=None, process_sets=None, store=None):
    """Creates the communicator over all ranks and registers process_sets (a list of ProcessSet).
    Idempotent. The ranks are, in this order: those of `comm` (an mpi4py communicator); those of
    MPI_COMM_WORLD when mpirun (or another MPI launcher) started this process; those torchrun's
    environment contract names (RANK, WORLD_SIZE), joined without MPI through a unique id that
    comes from PRIOCCL_COMM_ID (host:port, the same on every rank), or from `store` (a
    torch.distributed store), or from torchrun's store at MASTER_ADDR:MASTER_PORT; and else this
    process alone, without MPI."""
    if _comm is not None:
        return
    handle = ctypes.c_void_p()
    if comm is None and not _launched_by_mpi():
        _init_without_mpi(handle, store)
    elif comm is None:
        _check(_L.priocclCommInitWorld(ctypes.byref(handle)), "init")
    elif hasattr(comm, "py2f") or type(comm).__module__.startswith("mpi4py"):
        from mpi4py import MPI  # an mpi4py communicator: its MPI_Comm, duplicated by prioccl
        address = MPI._addressof(comm)
        _check(_L.priocclCommInitMPI(ctypes.byref(handle), ctypes.c_void_p(address), None),
               "init")
    else:
        raise PriocclError(f"init: comm must be None or an mpi4py communicator, not "
                           f"{type(comm).__name__} (a subset of ranks: process_sets=)")
    _install(handle, process_sets)


def get_unique_id():
    """A job id (bytes) for init_rank, as priocclGetUniqueId: rank 0 makes it (and listens at the
    address it holds) and hands it to the other ranks by any channel of the caller's (a store, a
    file, a broadcast of another library). With PRIOCCL_COMM_ID set every rank gets the same id
    without passing it."""
    uid = _lib.UniqueId()
    _check(_L.priocclGetUniqueId(ctypes.byref(uid)), "get_unique_id")
    return ctypes.string_at(ctypes.addressof(uid), ctypes.sizeof(uid))


def init_rank(size, unique_id, rank, process_sets=None):
    """Creates the global communicator as `rank` of `size` from get_unique_id()'s bytes (rank
    0's), as priocclCommInitRank; no MPI and no launcher needed. Blocks until every rank has
    joined (or PRIOCCL_TIMEOUT_S, naming the ranks that did not)."""
    if _comm is not None:
        raise PriocclError("init_rank: prioccl is initialized already (shutdown() first)")
    uid = _lib.UniqueId()
    if not isinstance(unique_id, (bytes, bytearray)) or len(unique_id) != ctypes.sizeof(uid):
        raise PriocclError(f"init_rank: unique_id must be the {ctypes.sizeof(uid)} bytes "
                           f"get_unique_id() returned, not {type(unique_id).__name__}"
                           + (f" of {len(unique_id)}" if isinstance(unique_id, (bytes, bytearray))
                              else ""))
    for name, value in (("size", size), ("rank", rank)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise PriocclError(f"init_rank: {name} must be an int, not {type(value).__name__}")
    ctypes.memmove(ctypes.byref(uid), bytes(unique_id), ctypes.sizeof(uid))
    handle = ctypes.c_void_p()
    _init_rank(handle, size, uid, rank, "init_rank")
    _install(handle, process_sets)


def _install(handle, process_sets=None):
    """`handle` becomes the global communicator."""
    _set_global(handle)
    atexit.register(_at_exit)
    for ps in process_sets or ():
        _register(ps, "init(process_sets)")


def _set_global(handle):
    """`handle` becomes the global communicator and global_process_set's (init, shrink)."""
    global _comm, _hosts
    _comm = handle
    global_process_set.process_set_id = 0
    global_process_set._comm = _comm
    global_process_set._rank = rank()
    global_process_set.ranks = list(range(size()))
    _process_sets[0] = global_process_set
    _hosts = _find_hosts()


def _launched_by_mpi():
    """Whether an MPI launcher started this process (Open MPI, MPICH/Hydra, PMIx)."""
    return any(v in os.environ for v in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"))


_STORE_KEY = "prioccl/unique_id/"
_inits = 0  # communicators made from a store in this process: each one's key differs


def _init_without_mpi(handle, store):
    """priocclCommInitRank as rank RANK of WORLD_SIZE (1 of 1 without them): the id from
    PRIOCCL_COMM_ID on every rank, or made by rank 0 and passed through the store."""
    global _inits
    try:
        rank, size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise PriocclError(f"init: RANK={os.environ.get('RANK')!r} and WORLD_SIZE="
                           f"{os.environ.get('WORLD_SIZE')!r} must be integers") from None
    if size > 1 and not os.environ.get("PRIOCCL_COMM_ID") and store is None:
        store = _launcher_store(rank, size)
    _join(handle, rank, size, store, f"{_STORE_KEY}{_inits}", "init")
    _inits += 1


def _join(handle, rank, size, store, key, what, config=None):
    """priocclCommInitRank into `handle` as `rank` of `size`: the id from PRIOCCL_COMM_ID on every
    rank (or a lone rank's own), else made by rank 0 and passed through `store` under `key`.
    `config`: a _lib.Config (priocclCommInitRankConfig), or None."""
    uid = _lib.UniqueId()
    via_store = size > 1 and not os.environ.get("PRIOCCL_COMM_ID")
    if not via_store or rank == 0:
        _check(_L.priocclGetUniqueId(ctypes.byref(uid)), f"{what} (unique id)")
    if via_store:
        if rank == 0:
            store.set(key, ctypes.string_at(ctypes.addressof(uid), ctypes.sizeof(uid)))
        else:
            ctypes.memmove(ctypes.byref(uid), store.get(key), ctypes.sizeof(uid))
    _init_rank(handle, size, uid, rank, what, config)


def _init_rank(handle, size, uid, rank, what, config=None):
    """priocclCommInitRank[Config] into `handle` (config: a _lib.Config or None), raising
    PriocclError naming `what`, such that Ctrl-C works meanwhile: the join waits for every rank,
    and a signal reaches Python only between bytecodes of the main thread, never while it is in
    a C call (Ctrl-C would wait for PRIOCCL_TIMEOUT_S). So on the main thread the call, and the
    reading of its error (kept per thread), go to a helper thread, and a KeyboardInterrupt
    cancels the join (priocclCommInitCancel: it returns within about 100 ms) and is raised."""
    def init():
        if config is None:
            result = _L.priocclCommInitRank(ctypes.byref(handle), size, uid, rank)
        else:
            result = _L.priocclCommInitRankConfig(ctypes.byref(handle), size, uid, rank,
                                                  ctypes.byref(config))
        _check(result, what)
    if threading.current_thread() is not threading.main_thread():
        init()
        return
    failed = []

    def run():
        try:
            init()
        except PriocclError as e:
            failed.append(e)
    helper = threading.Thread(target=run, name="prioccl-init", daemon=True)
    helper.start()
    try:
        while helper.is_alive():
            helper.join(0.05)
    except KeyboardInterrupt:
        _L.priocclCommInitCancel()
        helper.join()
        raise
    if failed:
        raise failed[0]


def _adopt(handle, rank, size):
    """A communicator made elsewhere (the torch backend's) as a registered ProcessSet of its own
    ranks 0..size-1, whose ops take process_set=; remove_process_set() destroys it."""
    global _next_set_id
    ps = ProcessSet(range(size))
    ps.process_set_id, ps._comm, ps._rank = _next_set_id, handle, rank
    _next_set_id += 1
    _process_sets[ps.process_set_id] = ps
    return ps


def _launcher_store(rank, size):
    """torchrun's store (its agent serves it at MASTER_ADDR:MASTER_PORT) as a client."""
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not addr or not port:
        raise PriocclError("init: RANK and WORLD_SIZE are set but neither PRIOCCL_COMM_ID "
                           "(host:port where rank 0 listens, the same on every rank) nor "
                           "MASTER_ADDR/MASTER_PORT (torchrun's store) is: set one, or launch "
                           "with python3 -m prioccl.run")
    try:
        import datetime
        from torch.distributed import TCPStore
    except ImportError:
        raise PriocclError("init: passing the unique id through MASTER_ADDR:MASTER_PORT needs "
                           "torch.distributed's TCPStore; without torch set PRIOCCL_COMM_ID "
                           "instead") from None
    timeout = float(os.environ.get("PRIOCCL_TIMEOUT_S", "300") or 300)
    return TCPStore(addr, int(port), size, False, datetime.timedelta(seconds=timeout))


def _find_hosts():
    """This rank's local rank/size, host index (cross rank), host count and whether every host
    has as many ranks, as the library grouped the ranks (shared memory and hostname, or
    PRIOCCL_HOST_ID). Asked of the library, not found with an op: an op on host memory is refused
    where collectives run on the GPU (PRIOCCL_TRANSPORT=nccl)."""
    out = [ctypes.c_int() for _ in range(5)]
    _check(_L.priocclCommHostInfo(_comm, *(ctypes.byref(x) for x in out)), "init (hosts)")
    local_rank, local_size, host, hosts, homogeneous = (x.value for x in out)
    return local_rank, local_size, host, hosts, bool(homogeneous)


def shutdown():
    """Finishes pending ops and destroys the communicators (finalising MPI if prioccl started
    it). Registered with atexit too."""
    global _comm, _next_set_id
    if _comm is None:
        return
    _reap()
    for ps in list(_process_sets.values()):
        if ps is not global_process_set:
            remove_process_set(ps)
    _process_sets.clear()
    global_process_set.process_set_id, global_process_set._comm = None, None
    global_process_set._rank = -1
    _next_set_id = 1
    comm, _comm = _comm, None
    result = _L.priocclCommDestroy(comm)
    if result != 0:
        raise PriocclError("shutdown: " + _L.priocclGetLastError(None).decode(errors="replace"))


def _at_exit():
    """At interpreter exit: ops still in flight (abandoned or never synchronised) get a few
    seconds; any still pending then is a rank leaving in the middle of a collective, so the
    communicator is aborted (the other ranks' ops fail naming this rank) instead of waiting for
    the timeout, and a warning names the ops."""
    if _comm is None:
        return
    with _lock:
        _orphans[:] = list(_ops)  # nobody will synchronize them now
    deadline = time.monotonic() + 3.0
    while _reap() and time.monotonic() < deadline:
        time.sleep(0.01)
    left = [op.what for op in _ops]
    if left:
        print(f"prioccl: rank {rank()} exits with {len(left)} op(s) unfinished "
              f"({', '.join(left[:5])}): aborting the communicator", file=sys.stderr, flush=True)
        _L.priocclCommAbort(_comm)
    try:
        shutdown()
    except PriocclError as e:
        print(f"prioccl: shutdown at exit: {e}", file=sys.stderr, flush=True)


def shrink(exclude=None):
    """After a lost rank, or to let ranks go (jobs launched without MPI): the global communicator
    is replaced by one of the remaining ranks, renumbered in order, so rank() and size() change.
    exclude=None: every live rank calls it, and they find out together who is gone (a rank whose
    process ended is left out at once, one alive that does not call after PRIOCCL_TIMEOUT_S);
    every caller gets the same members. exclude=[ranks]: those ranks are left out and do not call
    it. The old communicator is aborted (its pending ops fail) and destroyed, and so are the
    process sets other than the global one (add them again). Returns the new (rank, size)."""
    global _next_set_id
    _require()
    new = ctypes.c_void_p()
    if exclude is None:
        _check(_L.priocclCommShrink(_comm, None, _SHRINK_TO_LIVE, ctypes.byref(new)), "shrink")
    else:
        ranks = [operator.index(r) for r in exclude]
        _check(_L.priocclCommShrink(_comm, (ctypes.c_int * max(1, len(ranks)))(*ranks),
                                    len(ranks), ctypes.byref(new)), "shrink")
    old = _comm
    for ps in list(_process_sets.values()):
        if ps is not global_process_set and ps._comm is not None:
            _L.priocclCommAbort(ps._comm)
            _L.priocclCommDestroy(ps._comm)
        ps.process_set_id, ps._comm, ps._rank = None, None, -1
    _process_sets.clear()
    _next_set_id = 1
    _L.priocclCommAbort(old)
    _reap()  # the old communicator's ops have failed; their handles raise when synchronized
    _L.priocclCommDestroy(old)
    _set_global(new)
    return rank(), size()


def _lost_peer():
    """Whether the global communicator has failed because a peer is gone (its async error is a
    remote error or a timeout), without submitting anything: elastic training asks it when an
    error reaches it wrapped by another layer (DDP raises a RuntimeError with the op's message)."""
    if _comm is None:
        return False
    code = ctypes.c_int()
    return (_L.priocclCommGetAsyncError(_comm, ctypes.byref(code)) == 0
            and code.value in _LOST_PEER)


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
    """This rank's index among the ranks on its host (same hostname), in rank order."""
    _require()
    return _hosts[0]


def local_size():
    """The number of ranks on this rank's host."""
    _require()
    return _hosts[1]


def cross_rank():
    """The index of this rank's host, hosts numbered in the order of their first rank."""
    _require()
    return _hosts[2]


def cross_size():
    """The number of hosts."""
    _require()
    return _hosts[3]


def is_homogeneous():
    """True when every host runs the same number of ranks."""
    _require()
    return _hosts[4]


def mpi_threads_supported():
    """prioccl's communicators run a progress thread beside the caller's: MPI is initialised with
    MPI_THREAD_MULTIPLE (priocclCommInitWorld), so yes."""
    _require()
    return True


# ---- buffers: numpy arrays and torch tensors, seen as (pointer, count, priocclDataType_t) ----
# priocclDataType_t values (NCCL's numbering). The C library has no int16 or bool: bool travels
# as uint8 (its bytes are 0 or 1), int16 as bytes where nothing is computed and through int32
# where something is (see _Kind).
_NUMPY_TYPES, _TORCH_TYPES = _tensors.NUMPY_TYPES, _tensors.TORCH_TYPES
_UINT8, _INT32, _INT64 = (_C[n] for n in ("priocclUint8", "priocclInt32", "priocclInt64"))
# Codes beyond the library's, used only in the Python layer's own shape/dtype agreement.
_INT16_CODE, _BOOL_CODE = 101, 102
_DTYPE_NAMES = {code: name for name, code in _NUMPY_TYPES.items()}
_DTYPE_NAMES.update({_C["priocclBfloat16"]: "bfloat16", _INT16_CODE: "int16", _BOOL_CODE: "bool"})
_FLOAT_CODES = {_C[n] for n in ("priocclFloat16", "priocclFloat32", "priocclFloat64",
                                "priocclBfloat16")}


def _dtype_name(t):
    return str(t.dtype).replace("torch.", "")


_codes = {}  # dtype object -> _code(), so that an op does not format dtypes as strings


def _code(t):
    """The dtype code of a tensor: the library's, or _INT16_CODE/_BOOL_CODE; None if unsupported."""
    try:
        return _codes[t.dtype]
    except (KeyError, AttributeError, TypeError):
        pass
    kind = _tensors.kind_of(t)
    name = _dtype_name(t)
    if name == "int16":
        code = _INT16_CODE
    elif name == "bool":
        code = _BOOL_CODE
    else:
        code = kind.types.get(str(t.dtype))
    _codes[t.dtype] = code
    return code


def _buffer(t, writable=True):
    """(address, count, dtype code) of a contiguous numpy array or torch tensor (CPU or CUDA), as
    the wire sees it for an op that computes nothing (int16 as twice as many uint8, bool as
    uint8)."""
    ptr, count, on_device = _tensors.kind_of(t).memory(t, writable)
    if on_device:
        _ready_on_device(t)
    code = _code(t)
    if code is None:
        raise PriocclError(f"unsupported dtype {t.dtype}")
    if code == _INT16_CODE:
        return ptr, 2 * count, _UINT8
    if code == _BOOL_CODE:
        return ptr, count, _UINT8
    return ptr, count, code


FEATURE_UCX, FEATURE_CUDA, FEATURE_NCCL = (_C[n] for n in _constants.FLAGS)  # GetBuildFeatures
_features = None


def build_features():
    """What the loaded library was built with: FEATURE_UCX | FEATURE_CUDA | FEATURE_NCCL bits."""
    global _features
    if _features is None:
        bits = ctypes.c_int()
        _check(_L.priocclGetBuildFeatures(ctypes.byref(bits)), "build_features")
        _features = bits.value
    return _features


def nccl_version():
    """NCCL_VERSION_CODE of the nccl.h the library was built against (22809 for NCCL 2.28.9), or 0
    for a build without NCCL (FEATURE_NCCL)."""
    version = ctypes.c_int()
    _check(_L.priocclGetNcclVersion(ctypes.byref(version)), "nccl_version")
    return version.value


def _ready_on_device(t):
    """The library reads a CUDA tensor from its own thread and stream: the op must start only after
    what the caller's stream queued (the kernels computing t). The tensor's current stream becomes
    this thread's stream for the op (priocclSetStream): the op enters the library once an event
    recorded there has completed, and neither the stream nor this thread waits (no stream sync). The
    result is complete on the device when the op's handle completes, so work queued after
    synchronize() reads it."""
    if not build_features() & FEATURE_CUDA:
        raise PriocclError(f"tensor is on {t.device}, but this libprioccl was built without the "
                           "CUDA toolkit (PRIOCCL_WITH_CUDA): it cannot tell device memory from "
                           "host memory; rebuild with the toolkit, or pass CPU tensors")
    import torch
    stream = torch.cuda.current_stream(t.device).cuda_stream
    _check(_L.priocclSetStream(ctypes.c_void_p(stream), 0), "set_stream")


def _factor(t):
    """Wire elements per tensor element (2 for int16, sent as bytes)."""
    return 2 if _code(t) == _INT16_CODE else 1


_is_torch = _tensors.is_torch


def _empty_like(t):
    return _tensors.kind_of(t).empty_like(t)


def _new_empty(t, count, dtype=None):
    """A new contiguous 1-D tensor/array of t's kind with `count` elements (t's dtype unless
    dtype, a name such as "int32", is given)."""
    return _tensors.kind_of(t).new_empty(t, count, dtype)


def _cast(t, dtype):
    """A contiguous copy of t as dtype (a name); integer narrowing wraps (two's complement)."""
    return _tensors.kind_of(t).cast(t, dtype)


def _copy_into(dst, src):
    _tensors.kind_of(dst).copy_into(dst, src)


def _trunc_div(t, n):
    """Integer division rounding toward zero, as the library's integer Average does."""
    return _tensors.kind_of(t).trunc_div(t, n)


def _check_scales(t, what, *factors):
    """Scale factors apply to numbers, not to booleans (raises before anything is sent)."""
    if any(f != 1.0 for f in factors) and _code(t) == _BOOL_CODE:
        raise ArgumentError(f"{what}: prescale/postscale factors need a numeric tensor, "
                            f"not {t.dtype}")


def _scale(t, factor):
    """t *= factor in place, as Horovod scales: integers in float64, then truncated toward zero;
    16-bit floats on the CPU in float32, rounded once."""
    if factor != 1.0:
        _tensors.kind_of(t).scale(t, factor, _code(t) not in _FLOAT_CODES)


# ---- ops in flight: handles, names, abandoned handles ----
class _Op:
    """One submitted request and what it needs: the buffers it reads and writes stay referenced
    here until the op is complete, whoever still holds its Handle."""

    __slots__ = ("request", "tensors", "key", "kind", "shape", "finish", "ps")

    def __init__(self, request, tensors, key, kind, shape, finish, ps):
        self.request, self.tensors, self.key, self.kind = request, tensors, key, kind
        self.shape, self.finish, self.ps = shape, finish, ps

    @property
    def what(self):
        """The op as error messages name it: kind, name, shape (made only when one is needed)."""
        label = self.kind if self.key is None else f"{self.kind} '{self.key[1]}'"
        return label if self.shape is None else f"{label} (shape {list(self.shape)})"


_ops = set()  # _Op not yet waited for
_inflight = {}  # (process_set_id, name) -> _Op: a name may be in flight once per process set
_orphans = []  # _Op whose Handle was dropped before synchronize()
# Guards the three above. Ops are submitted and completed from several threads (the DDP hook's
# completion thread, a user's), and a request must be tested only while nobody can release it:
# an op leaves _ops (is claimed) under the lock before its request is waited for (released).
# Reentrant: a Handle's __del__ may run during garbage collection inside a locked region.
_lock = threading.RLock()


def _claim(op):
    """Takes the op out of the books; False if another caller already did (it completes it)."""
    with _lock:
        if op not in _ops:
            return False
        _ops.discard(op)
        if op.key is not None and _inflight.get(op.key) is op:
            del _inflight[op.key]
        return True


def _wait_claimed(op):
    """Waits for a claimed op and releases its request; raises on failure."""
    result = _L.priocclWait(op.request)
    op.tensors = None
    _check(result, op.what, op.ps._comm if op.ps is not None else None)


def _complete(op):
    """Waits for the op (unless another caller completes it); raises on failure."""
    if _claim(op):
        _wait_claimed(op)


def _reap():
    """Completes the abandoned ops that have finished (never blocks); True while ops remain in
    flight. Their errors have nobody to go to and are dropped (their Handle is gone)."""
    done = ctypes.c_int()
    finished = []
    with _lock:
        for op in list(_orphans):
            done.value = 0
            _L.priocclTest(op.request, ctypes.byref(done))
            if done.value and _claim(op):
                _orphans.remove(op)
                finished.append(op)
    for op in finished:
        try:
            _wait_claimed(op)  # finished: returns at once
            if op.finish is not None:
                op.finish()
        except PriocclError:
            pass
    return bool(_ops)


class Handle:
    """An op in flight; synchronize() waits for it and returns `result`. Dropping a Handle before
    synchronize() never blocks (Horovod's semantics): the op finishes in the background, its
    buffers kept alive until then."""

    def __init__(self, op, result):
        self._op = op
        self.result = result
        self._then = None  # result -> what synchronize() returns (the int16 paths set it)

    def __del__(self):
        op = getattr(self, "_op", None)
        if op is not None and _lock is not None:
            with _lock:
                if op in _ops:
                    _orphans.append(op)


# The C key of ops the caller did not name. Ops with one key match in submission order, as unnamed
# C ops do, but through the coordinator, which can answer them for a rank that has joined (join()).
_NONAME = b"prioccl.noname"


def _free_name(key, what):
    """Under _lock, before an op named key[1] is registered in process set key[0]: raises if one
    is in flight there (Horovod's rule). An op is in flight until synchronize() (or a poll() that
    saw it finish) has taken it; one whose Handle was dropped, until it has finished. Whether the
    engine has finished an op the caller still holds is a race the caller cannot see (Horovod's
    duplicate-name tests submit the same name twice in a row): not a reason to accept it."""
    old = _inflight.get(key)
    if old is None:
        return
    done = ctypes.c_int()
    if old in _orphans:
        _L.priocclTest(old.request, ctypes.byref(done))  # unclaimed: its request is still valid
    if not done.value:
        raise ArgumentError(f"{what}: an op named '{key[1]}' is already in flight on rank "
                            f"{rank()}: synchronize it first (names of ops in flight must be "
                            "unique)")
    del _inflight[key]


def _submit(what, name, unnamed, named, tensors=(), ps=None, finish=None, shape=None,
            shape_next=None):
    """Runs the C call (named(key, req); unnamed(req) where there is no named one) in process set
    ps; returns the _Op. A name already in flight in the same process set is an error (Horovod's
    rule), unless that op has finished. `shape`: the tensor's, which every rank's must equal
    (priocclShapeNext; a 1-D shape says no more than the count, and is not sent). `shape_next`:
    what goes to priocclShapeNext instead, where that is not the shape (a ragged op's rows)."""
    _require()
    ps = ps or global_process_set
    if _orphans:
        _reap()
    if shape is not None:
        shape = tuple(int(d) for d in shape)
    dims = shape if shape_next is None else tuple(int(d) for d in shape_next)
    key = None if name is None else (ps.process_set_id, str(name))
    with _lock:  # the name check and the registration as one step
        if named is None:
            return _submit_locked(what, key, shape, dims, unnamed, (), tensors, finish, ps)
        name_c = _NONAME if key is None else key[1].encode()
        return _submit_locked(what, key, shape, dims, named, (name_c,), tensors, finish, ps)


def _submit_locked(what, key, shape, dims, call, args, tensors, finish, ps):
    """Under _lock: one op's submission and its books. Frees its name (_free_name), gives the
    library the dims (priocclShapeNext: this thread's next call takes them; one dimension says no
    more than the count, and is not sent), runs call(*args, request) and keeps the _Op in _ops
    (and _inflight by name) until it is completed. Returns the _Op."""
    op = _Op(ctypes.c_void_p(), tensors, key, what, shape, finish, ps)
    if key is not None:
        _free_name(key, what)
    if dims is not None and len(dims) != 1:
        result = _L.priocclShapeNext((ctypes.c_int64 * len(dims))(*dims), len(dims))
        if result:
            _check(result, op.what, ps._comm)
    result = call(*args, ctypes.byref(op.request))
    if result:
        _check(result, op.what, ps._comm)
    _ops.add(op)
    if key is not None:
        _inflight[key] = op
    return op


def _submit_wait(what, call, tensors):
    """A blocking unnamed op on the global communicator (init's and process sets' exchanges)."""
    _complete(_submit(what, None, call, None, tensors))


def synchronize(handle):
    """Waits for the op (or every op of a grouped handle); returns its result. Raises
    PriocclError if it failed."""
    if isinstance(handle, GroupHandle):
        return [synchronize(h) for h in handle.handles]
    if isinstance(handle, _BatchHandle):
        return handle.wait()
    op, handle._op = handle._op, None
    if op is not None and _claim(op):
        _wait_claimed(op)
        if op.finish is not None:
            op.finish()
    if handle._then is not None:
        handle.result, handle._then = handle._then(handle.result), None
    return handle.result


def poll(handle):
    """True when the op has finished (synchronize() then returns at once)."""
    if isinstance(handle, GroupHandle):
        return all(poll(h) for h in handle.handles)
    if isinstance(handle, _BatchHandle):
        return handle.done()
    return _finished(handle._op)


def _finished(op):
    """Whether op has finished (True once claimed: its claimer completes it); raises if it
    failed."""
    done = ctypes.c_int()
    with _lock:  # a claimed op's request may be released at any moment
        if op is None or op not in _ops:
            return True
        result = _L.priocclTest(op.request, ctypes.byref(done))
    _check(result, "poll", op.ps._comm if op.ps is not None else None)
    return bool(done.value)


class GroupHandle:
    """The handles of a grouped op; synchronize() returns the list of results."""

    def __init__(self, handles):
        self.handles = handles


class _BatchHandle:
    """The handle of _allreduce_batch(): its ops in submission order, one _Op each (as the
    general path's, so that names in flight, orphans and errors work alike); synchronize()
    returns the list of tensors."""

    def __init__(self, ops, result):
        self._ops = ops
        self.result = result

    def wait(self):
        ops, self._ops = self._ops, None
        for i, op in enumerate(ops or ()):
            try:
                _complete(op)
            except PriocclError:
                self._ops = ops[i + 1:]  # not waited for: dropped as orphans, never leaked
                raise
        return self.result

    def done(self):
        return all(_finished(op) for op in self._ops or ())

    def __del__(self):
        ops = getattr(self, "_ops", None)
        if ops and _lock is not None:
            with _lock:
                _orphans.extend(op for op in ops if op in _ops)


def _pair(src, dst):
    """(send pointer, receive pointer, count, dtype code) of two buffers of one size and dtype."""
    s_ptr, count, code = _buffer(src, writable=False)
    d_ptr, d_count, d_code = _buffer(dst)
    if (count, code, _code(src)) != (d_count, d_code, _code(dst)):
        raise PriocclError("source and destination differ in size or dtype")
    return s_ptr, d_ptr, count, code


def _bool_op(op, what):
    """A reduction of bools as uint8 0/1: Sum and Max are OR, Prod and Min are AND."""
    if op == Average:
        raise PriocclError(f"{what}: Average of bool tensors is undefined (use Sum = OR or "
                           "Min = AND)")
    return {Sum: Max, Max: Max, Prod: Min, Min: Min}.get(op, op)


# ---- all-reduce ----
def _allreduce(src, dst, op, priority, name, process_set, prescale, postscale):
    """The all-reduce of src into dst (which may be src); a Handle whose result is dst."""
    ps = _target(process_set, "allreduce")
    _check_scales(src, "allreduce", prescale, postscale)
    code = _code(src)
    if code == _INT16_CODE:  # through int32: exact, then narrowed (wrapping as int16 would)
        wide = _cast(src, "int32")
        h = _allreduce(wide, wide, Sum if op == Average else op, priority, name, ps, prescale,
                       postscale)

        def narrow(res, n=ps.size()):
            out = _cast(res, "int16")
            _copy_into(dst, _trunc_div(out, n) if op == Average else out)
            return dst
        h._then = narrow
        return h
    if code == _BOOL_CODE:
        op = _bool_op(op, "allreduce")
    if prescale != 1.0:
        if src is not dst:
            _copy_into(dst, src)
            src = dst
        _scale(dst, prescale)
    s_ptr, d_ptr, count, wire = _pair(src, dst)
    comm = ps._comm
    op_ = _submit("allreduce", name,
                  lambda r: _L.priocclAllReduceAsync(s_ptr, d_ptr, count, wire, op, priority,
                                                     comm, r),
                  lambda k, r: _L.priocclAllReduceNamedAsync(s_ptr, d_ptr, count, wire, op,
                                                             priority, k, comm, r),
                  (src, dst), ps, (lambda: _scale(dst, postscale)) if postscale != 1.0 else None,
                  shape=src.shape)
    return Handle(op_, dst)


def allreduce_async_(tensor, op=Average, priority=0, name=None, process_set=None,
                     prescale_factor=1.0, postscale_factor=1.0):
    """Starts an in-place all-reduce of `tensor`; returns a handle for synchronize()/poll().
    prescale_factor multiplies the input before, postscale_factor the result after."""
    return _allreduce(tensor, tensor, op, priority, name, process_set, prescale_factor,
                      postscale_factor)


def allreduce_async(tensor, op=Average, priority=0, name=None, process_set=None,
                    prescale_factor=1.0, postscale_factor=1.0):
    """Starts an all-reduce into a new tensor (synchronize() returns it); `tensor` is unchanged."""
    return _allreduce(tensor, _empty_like(tensor), op, priority, name, process_set,
                      prescale_factor, postscale_factor)


def allreduce(tensor, op=Average, priority=0, name=None, process_set=None, prescale_factor=1.0,
              postscale_factor=1.0):
    return synchronize(allreduce_async(tensor, op, priority, name, process_set, prescale_factor,
                                       postscale_factor))


def allreduce_(tensor, op=Average, priority=0, name=None, process_set=None, prescale_factor=1.0,
               postscale_factor=1.0):
    return synchronize(allreduce_async_(tensor, op, priority, name, process_set, prescale_factor,
                                        postscale_factor))


class _Counters(ctypes.Structure):  # priocclCounters_t
    _fields_ = [(n, ctypes.c_ulonglong) for n in (
        "opsSubmitted", "opsCompleted", "opsFailed", "chunksCompleted", "sendsPosted",
        "bytesSent", "bytesReceived", "preemptions")] + [("queueWaitSeconds", ctypes.c_double)]


def counters(process_set=None):
    """The communicator's engine counters so far (priocclGetCounters), as a dict: opsSubmitted
    (a fused group counts once), opsCompleted, opsFailed, chunksCompleted, sendsPosted,
    bytesSent, bytesReceived, preemptions, queueWaitSeconds."""
    ps = _target(process_set, "counters")
    c = _Counters()
    _check(_L.priocclGetCounters(ps._comm, ctypes.byref(c)), "counters")
    return {name: getattr(c, name) for name, _ in _Counters._fields_}


class group:
    """`with prioccl.group(): ...`: priocclGroupStart/End around the block (NCCL's groups). Its
    ops are submitted together when the block ends; consecutive small all-reduces of one dtype
    and op run as one fused op (PRIOCCL_FUSION_BYTES), the same on every rank that submits the
    same ops. A failed blocking op in the block raises at its end."""

    def __init__(self, what="group"):
        self._what = what

    def __enter__(self):
        _require()
        _check(_L.priocclGroupStart(), self._what)
        return self

    def __exit__(self, kind, *_):
        ended = _L.priocclGroupEnd()
        if kind is None:
            _check(ended, self._what)
        return False


def _grouped(submit_one, tensors, name):
    """Submits one op per tensor in one group (named NAME.<i> when named); a GroupHandle."""
    tensors = list(tensors)
    with group("grouped op"):
        handles = [submit_one(t, None if name is None else f"{name}.{i}")
                   for i, t in enumerate(tensors)]
    return GroupHandle(handles)


def _batchable(t):
    """Whether allreduce_async_ would send t as it is: a contiguous CPU torch tensor of a dtype
    the library reduces itself (not int16 or bool, which take conversions)."""
    if not _is_torch(t) or t.device.type != "cpu" or not t.is_contiguous():
        return False
    code = _codes.get(t.dtype)
    if code is None:
        code = _code(t)
    return code is not None and code != _INT16_CODE and code != _BOOL_CODE


def _allreduce_batch(tensors, names, priorities, op=Average, process_set=None):
    """In-place all-reduces of torch tensors (names[i]: the op's name or None, priorities[i]: its
    priority), in one group: the ops allreduce_async_ would submit one by one in a
    prioccl.group(), with what cannot differ between them checked once. A MobileNet-V2's 158
    gradients paid the general path's Python every step on the training thread; a grouped
    tensor costs 9.4 us here against 13.9 through it (perf/python_overhead.py, 4 ranks;
    docs/benchmarks.md, "Python's cost per gradient"). A batch with a tensor the general path
    treats specially goes through it whole (a GroupHandle). Returns a handle for
    synchronize()/poll()."""
    tensors = list(tensors)
    if not all(_batchable(t) for t in tensors):
        with group("grouped op"):
            return GroupHandle([_allreduce(t, t, op, pr, n, process_set, 1.0, 1.0)
                                for t, n, pr in zip(tensors, names, priorities)])
    ps = _target(process_set, "allreduce")
    if _orphans:
        _reap()
    ops = []
    with group("grouped op"), _lock:  # each name's check and registration as one step
        try:
            _submit_batch(tensors, names, priorities, op, ps, ops)
        except BaseException:
            _orphans.extend(ops)  # submitted before the failure: completed in the background
            raise
    return _BatchHandle(ops, tensors)


def _submit_batch(tensors, names, priorities, op, ps, ops):
    """_allreduce_batch's C calls, under _lock in a group; appends each _Op to ops."""
    comm, psid, named = ps._comm, ps.process_set_id, _L.priocclAllReduceNamedAsync
    for t, name, priority in zip(tensors, names, priorities):
        key = None if name is None else (psid, str(name))
        ptr = t.data_ptr()
        args = (ptr, ptr, t.numel(), _codes[t.dtype], op, priority,
                _NONAME if key is None else key[1].encode(), comm)
        ops.append(_submit_locked("allreduce", key, t.shape, t.shape, named, args, (t,), None,
                                  ps))


def grouped_allreduce_async_(tensors, op=Average, priority=0, name=None, process_set=None,
                             prescale_factor=1.0, postscale_factor=1.0):
    """In-place all-reduces of a list of tensors, submitted as one group."""
    if prescale_factor == 1.0 and postscale_factor == 1.0:
        tensors = list(tensors)
        return _allreduce_batch(tensors, [None if name is None else f"{name}.{i}"
                                          for i in range(len(tensors))],
                                [priority] * len(tensors), op, process_set)
    return _grouped(lambda t, n: allreduce_async_(t, op, priority, n, process_set, prescale_factor,
                                                  postscale_factor), tensors, name)


def grouped_allreduce_async(tensors, op=Average, priority=0, name=None, process_set=None,
                            prescale_factor=1.0, postscale_factor=1.0):
    return _grouped(lambda t, n: allreduce_async(t, op, priority, n, process_set, prescale_factor,
                                                 postscale_factor), tensors, name)


def grouped_allreduce(tensors, op=Average, priority=0, name=None, process_set=None,
                      prescale_factor=1.0, postscale_factor=1.0):
    return synchronize(grouped_allreduce_async(tensors, op, priority, name, process_set,
                                               prescale_factor, postscale_factor))


def grouped_allreduce_(tensors, op=Average, priority=0, name=None, process_set=None,
                       prescale_factor=1.0, postscale_factor=1.0):
    return synchronize(grouped_allreduce_async_(tensors, op, priority, name, process_set,
                                                prescale_factor, postscale_factor))


# ---- broadcast, reduce ----
def _root_index(ps, root_rank, what):
    """root_rank is a global rank, in a process set too (Horovod's rule): its index in the set,
    which the set's communicator calls its root."""
    try:
        root_rank = operator.index(root_rank)
    except TypeError:
        raise PriocclError(f"{what}: root_rank must be an int, not {type(root_rank).__name__}")
    if root_rank not in ps.ranks:
        raise PriocclError(f"{what}: root_rank {root_rank} is not a rank of {ps!r}")
    return ps.ranks.index(root_rank)


def _broadcast_async(src, dst, root_rank, priority, name, process_set):
    ps = _target(process_set, "broadcast")
    root = _root_index(ps, root_rank, "broadcast")
    s_ptr, d_ptr, count, code = _pair(src, dst)
    comm = ps._comm
    op = _submit("broadcast", name,
                 lambda r: _L.priocclBroadcastAsync(s_ptr, d_ptr, count, code, root, priority,
                                                    comm, r),
                 lambda k, r: _L.priocclBroadcastNamedAsync(s_ptr, d_ptr, count, code, root,
                                                            priority, k, comm, r),
                 (src, dst), ps, shape=src.shape)
    return Handle(op, dst)


def broadcast_async_(tensor, root_rank=0, priority=0, name=None, process_set=None):
    """Starts overwriting `tensor` with root_rank's, bit for bit; returns a handle."""
    return _broadcast_async(tensor, tensor, root_rank, priority, name, process_set)


def broadcast_async(tensor, root_rank=0, priority=0, name=None, process_set=None):
    """Starts a broadcast into a new tensor (synchronize() returns it); `tensor` is unchanged."""
    return _broadcast_async(tensor, _empty_like(tensor), root_rank, priority, name, process_set)


def broadcast(tensor, root_rank=0, priority=0, name=None, process_set=None):
    """root_rank's `tensor`, as a new tensor on every rank."""
    return synchronize(broadcast_async(tensor, root_rank, priority, name, process_set))


def broadcast_(tensor, root_rank=0, priority=0, name=None, process_set=None):
    """Overwrites `tensor` with root_rank's, bit for bit (-0.0 and NaN payloads included)."""
    return synchronize(broadcast_async_(tensor, root_rank, priority, name, process_set))


def broadcast_parameters(params, root_rank=0, process_set=None):
    """Broadcasts a state_dict (or an iterable of (name, tensor)) from root_rank, in place. Every
    rank must pass the same names; ops are named, so dict order does not matter."""
    items = params.items() if hasattr(params, "items") else params
    handles = []
    for name, t in items:
        target = _tensors.kind_of(t).storage(t)  # a Parameter's storage, not autograd's
        handles.append(broadcast_async_(target, root_rank, name=f"prioccl.broadcast.{name}",
                                        process_set=process_set))
    for h in handles:
        synchronize(h)


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


def reduce_async(tensor, root_rank=0, op=Average, priority=0, name=None, process_set=None):
    """Starts a reduce of `tensor` to root_rank; synchronize() returns the result there (a new
    tensor) and None on the other ranks. `tensor` is unchanged."""
    ps = _target(process_set, "reduce")
    code = _code(tensor)
    if code == _INT16_CODE:  # through int32, as allreduce
        h = reduce_async(_cast(tensor, "int32"), root_rank, Sum if op == Average else op,
                         priority, name, ps)

        def narrow(res, n=ps.size()):
            if res is None:
                return None
            out = _cast(res, "int16").reshape(tuple(tensor.shape))
            return _trunc_div(out, n) if op == Average else out
        h._then = narrow
        return h
    if code == _BOOL_CODE:
        op = _bool_op(op, "reduce")
    root = _root_index(ps, root_rank, "reduce")
    s_ptr, count, wire = _buffer(tensor, writable=False)
    out = _empty_like(tensor) if ps.rank() == root else None
    d_ptr = _buffer(out)[0] if out is not None else None
    comm = ps._comm
    req = _submit("reduce", name,
                  lambda r: _L.priocclReduceAsync(s_ptr, d_ptr, count, wire, op, root, priority,
                                                  comm, r),
                  lambda k, r: _L.priocclReduceNamedAsync(s_ptr, d_ptr, count, wire, op, root,
                                                          priority, k, comm, r),
                  (tensor, out), ps, shape=tensor.shape)
    return Handle(req, out)


def reduce(tensor, root_rank=0, op=Average, priority=0, name=None, process_set=None):
    return synchronize(reduce_async(tensor, root_rank, op, priority, name, process_set))


# ---- allgather / alltoall / reducescatter, Horovod's semantics over the v-collectives ----
def _sizes(counts):
    """A ctypes size_t array (the C calls' const size_t*). The library copies it at submission;
    the op still keeps it alive until it completes, in case that ever changes."""
    return (ctypes.c_size_t * len(counts))(*counts)


def _shape_digest(dims):
    """A 63-bit FNV-1a of the dimensions after the first, exchanged so that ranks can tell shapes
    with the same elements per row apart ((2, 3) against (3, 2)) without a variable-size message."""
    h = 0xCBF29CE484222325
    for d in (len(dims),) + tuple(dims):
        h = ((h ^ int(d)) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h >> 1


def _collectives_on_device():
    """Whether collectives run on the GPU (PRIOCCL_TRANSPORT=nccl) and so refuse host memory."""
    return os.environ.get("PRIOCCL_TRANSPORT", "").lower() == "nccl"


def _exchange(what, values, all_to_all, priority, name, ps):
    """A blocking plain all-gather (every rank's `values`, concatenated in rank order) or all-to-all
    (block j of `values` to rank j) of int64s in process set ps; returns the received ints, k per
    rank."""
    p = ps.size()
    k = len(values) // p if all_to_all else len(values)
    if _collectives_on_device():
        # Collectives run on the GPU there and refuse host memory: the ints go through the
        # current device (CUDA tensors come from torch, so torch is there).
        import torch
        send = torch.tensor(list(values), dtype=torch.int64, device="cuda")
        recv = torch.empty(k * p, dtype=torch.int64, device="cuda")
        torch.cuda.current_stream().synchronize()
        s_ptr, d_ptr = send.data_ptr(), recv.data_ptr()
    else:
        send = (ctypes.c_int64 * len(values))(*values)
        recv = (ctypes.c_int64 * (k * p))()
        s_ptr, d_ptr = ctypes.addressof(send), ctypes.addressof(recv)
    comm = ps._comm
    if all_to_all:
        op = _submit(what, name,
                     lambda r: _L.priocclAllToAllAsync(s_ptr, d_ptr, k, _INT64, priority, comm, r),
                     lambda key, r: _L.priocclAllToAllNamedAsync(s_ptr, d_ptr, k, _INT64,
                                                                 priority, key, comm, r),
                     (send, recv), ps)
    else:
        op = _submit(what, name,
                     lambda r: _L.priocclAllGatherAsync(s_ptr, d_ptr, k, _INT64, priority, comm,
                                                        r),
                     lambda key, r: _L.priocclAllGatherNamedAsync(s_ptr, d_ptr, k, _INT64,
                                                                  priority, key, comm, r),
                     (send, recv), ps)
    _complete(op)
    if not isinstance(recv, ctypes.Array):
        recv = recv.cpu().tolist()
    return [recv[i:i + k] for i in range(0, k * p, k)]


def _describe(t):
    """(row elements, shape digest, dtype code) of a tensor, which every rank must share, plus
    (address, wire elements, wire dtype code) and its shape. A 0-d tensor is one row."""
    ptr, count, wire = _buffer(t, writable=False)
    shape = tuple(t.shape)
    return (_rows(t), _shape_digest(shape[1:]), _code(t)), (ptr, count, wire), shape


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
    return _tensors.kind_of(like).int64s(values)


_ROWS_FAILED = _C[_constants.ROWS_FAILED] % (1 << 64)  # (size_t)-1, which the library reads as -1


class _RowsResult:
    """A ragged op's result, held by the library (priocclRowsGet) until take() or this object's
    end frees it (priocclRowsFree)."""

    __slots__ = ("handle",)

    def __init__(self):
        self.handle = ctypes.c_void_p()

    def free(self):
        if self.handle and _L is not None:  # _L is None at interpreter exit
            _L.priocclRowsFree(self.handle)
            self.handle = ctypes.c_void_p()

    __del__ = free

    def take(self, like, p, what):
        """(the rows from every rank as a new tensor of `like`'s kind, dtype and trailing
        dimensions; the rows from each rank)."""
        data, nbytes, rows = ctypes.c_void_p(), ctypes.c_size_t(), (ctypes.c_size_t * p)()
        _check(_L.priocclRowsGet(self.handle, ctypes.byref(data), ctypes.byref(nbytes), rows), what)
        total = sum(rows)
        flat = _new_empty(like, total * _rows(like))
        if nbytes.value:
            ctypes.memmove(_buffer(flat)[0], data.value, nbytes.value)
        self.free()
        return _reshape_rows(flat, like, total), list(rows)


def _rows_op(what, tensor, name, priority, ps, unnamed, named, rows_of):
    """A ragged op (allgather, alltoall with splits) in one library call: the library learns every
    rank's rows inside the op. `unnamed(send, rows, row, code, result, request)` and
    `named(..., key, ...)` are its C calls; `rows_of(first)` gives this rank's rows argument from
    its first dimension, or raises. A rank that fails here still takes part, with
    PRIOCCL_ROWS_FAILED, so that every rank raises (its own error here, the others' naming it).
    Returns (the _Op, its _RowsResult)."""
    local = None
    try:
        (row, _, _), (s_ptr, _, code), shape = _describe(tensor)
        first = shape[0] if shape else 1
        rows = rows_of(first)
        row *= _factor(tensor)
        # The dimensions after the first, which must agree (priocclShapeNext; one is not sent:
        # the elements per row say as much).
        dims = shape[1:] if len(shape) > 2 else (row,)
    except PriocclError as e:
        local, s_ptr, rows, row, code, dims, shape = e, None, rows_of(None), 0, _UINT8, (0,), None
    result = _RowsResult()
    handle = ctypes.byref(result.handle)
    comm = ps._comm
    op = _submit(what, name,
                 lambda r: unnamed(s_ptr, rows, row, code, priority, comm, handle, r),
                 lambda k, r: named(s_ptr, rows, row, code, priority, k, comm, handle, r),
                 (tensor, rows, result), ps, shape=shape, shape_next=dims)
    if local is not None:
        try:  # fails on every rank, this one too: done at once
            _complete(op)
        except PriocclError:
            pass
        raise local
    return op, result


def allgather_async(tensor, priority=0, name=None, process_set=None):
    """Starts gathering every rank's `tensor`, concatenated along the first dimension in rank
    order (a new tensor from synchronize()). The first dimension may differ between ranks; the
    others and the dtype must not (every rank then raises PriocclError). One library op: the
    rows of each rank are learned inside it, so this never waits for the other ranks."""
    ps = _target(process_set, "allgather")
    if _collectives_on_device() or _tensors.kind_of(tensor).on_device(tensor):
        return _allgather_exchanged(tensor, priority, name, ps)
    failed = _ROWS_FAILED
    op, result = _rows_op("allgather", tensor, name, priority, ps, _L.priocclAllGatherRowsAsync,
                          _L.priocclAllGatherRowsNamedAsync,
                          lambda first: failed if first is None else first)
    h = Handle(op, None)
    h._then = lambda _: result.take(tensor, ps.size(), "allgather")[0]
    return h


def _allgather_exchanged(tensor, priority, name, ps):
    """allgather of CUDA tensors: the rows are exchanged first (a blocking all-gather, named
    `name` + ".sizes" when named), then gathered by an all-gather-v into a tensor on the device
    (the ragged op's result is host memory)."""
    local = None
    try:
        mine, (s_ptr, count, code), shape = _describe(tensor)
        first = shape[0] if shape else 1
    except PriocclError as e:  # still take part in the exchange, so the other ranks raise too
        local, mine, first = e, (0, 0, 0), -1
    peers = _exchange("allgather (sizes)", [first, *mine], False, priority,
                      None if name is None else f"{name}.sizes", ps)
    if local is not None:
        raise local
    _agree("allgather", peers)
    row = mine[0] * _factor(tensor)
    rows = [q[0] for q in peers]
    counts = _sizes([n * row for n in rows])
    flat = _new_empty(tensor, sum(rows) * mine[0])
    d_ptr = _buffer(flat)[0]
    comm = ps._comm
    op = _submit("allgather", name,
                 lambda r: _L.priocclAllGatherVAsync(s_ptr, d_ptr, counts, None, code, priority,
                                                     comm, r),
                 lambda k, r: _L.priocclAllGatherVNamedAsync(s_ptr, d_ptr, counts, None, code,
                                                             priority, k, comm, r),
                 (tensor, flat, counts), ps)
    return Handle(op, _reshape_rows(flat, tensor, sum(rows)))


def allgather(tensor, priority=0, name=None, process_set=None):
    return synchronize(allgather_async(tensor, priority, name, process_set))


def reducescatter_async(tensor, op=Average, priority=0, name=None, process_set=None,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts a reduce-scatter: `tensor`'s first dimension is cut into size() parts, as Horovod
    does (the first rows % size() ranks get one row more); rank r gets the reduction of every
    rank's part r (a new tensor). Every rank must pass the same shape."""
    ps = _target(process_set, "reducescatter")
    _check_scales(tensor, "reducescatter", prescale_factor, postscale_factor)
    code = _code(tensor)
    if code == _INT16_CODE:  # through int32, as allreduce
        h = reducescatter_async(_cast(tensor, "int32"), Sum if op == Average else op, priority,
                                name, ps, prescale_factor, postscale_factor)

        def narrow(res, n=ps.size()):
            out = _cast(res, "int16")
            return _trunc_div(out, n) if op == Average else out
        h._then = narrow
        return h
    if code == _BOOL_CODE:
        op = _bool_op(op, "reducescatter")
    if prescale_factor != 1.0:
        tensor = _cast(tensor, _dtype_name(tensor))  # a copy: the input stays unchanged
        _scale(tensor, prescale_factor)
    s_ptr, count, wire = _buffer(tensor, writable=False)
    p, me = ps.size(), ps.rank()
    shape = tuple(tensor.shape)
    if not shape:
        raise PriocclError("reducescatter: the tensor needs a first dimension to cut")
    base, extra = divmod(shape[0], p)
    row = _rows(tensor)
    mine = base + (me < extra)
    flat = _new_empty(tensor, mine * row)
    d_ptr = _buffer(flat)[0]
    comm = ps._comm
    finish = (lambda: _scale(flat, postscale_factor)) if postscale_factor != 1.0 else None
    if extra == 0:  # equal parts: the plain call (same result as the v-call)
        part = base * row
        req = _submit("reducescatter", name,
                      lambda r: _L.priocclReduceScatterAsync(s_ptr, d_ptr, part, wire, op,
                                                             priority, comm, r),
                      lambda k, r: _L.priocclReduceScatterNamedAsync(s_ptr, d_ptr, part, wire, op,
                                                                     priority, k, comm, r),
                      (tensor, flat), ps, finish, shape=shape)
        return Handle(req, _reshape_rows(flat, tensor, mine))
    # Every rank computes the same counts from its own shape: ranks whose shapes differ pass
    # different counts (or the plain kind), which the library fails on every rank.
    counts = _sizes([(base + (k < extra)) * row for k in range(p)])
    req = _submit("reducescatter", name,
                  lambda r: _L.priocclReduceScatterVAsync(s_ptr, d_ptr, counts, wire, op, priority,
                                                          comm, r),
                  lambda k, r: _L.priocclReduceScatterVNamedAsync(s_ptr, d_ptr, counts, wire, op,
                                                                  priority, k, comm, r),
                  (tensor, flat, counts), ps, finish, shape=shape)
    return Handle(req, _reshape_rows(flat, tensor, mine))


def reducescatter(tensor, op=Average, priority=0, name=None, process_set=None,
                  prescale_factor=1.0, postscale_factor=1.0):
    return synchronize(reducescatter_async(tensor, op, priority, name, process_set,
                                           prescale_factor, postscale_factor))


def _parse_splits(splits, p, rows):
    if splits is None:
        # Horovod's equal split is each rank's own: ranks may hold different first dimensions, so
        # the rows each rank receives are learnt inside the op, as with splits.
        if rows % p:
            raise ArgumentError(f"alltoall: the first dimension ({rows}) must divide into {p} "
                                f"equal parts (or pass splits)")
        return [rows // p] * p
    if hasattr(splits, "tolist"):  # numpy array or torch tensor
        splits = splits.tolist()
    try:
        out = [operator.index(s) for s in splits]  # ints only: 2.5 rows is a mistake
    except TypeError:
        raise ArgumentError(f"alltoall: splits must be a sequence of ints, got {splits!r}") from None
    if len(out) != p or min(out) < 0 or sum(out) != rows:
        raise ArgumentError(f"alltoall: splits {out} must be {p} ints >= 0 (one per rank) summing "
                            f"to the first dimension ({rows})")
    return out


def alltoall_async(tensor, splits=None, priority=0, name=None, return_received_splits=False,
                   process_set=None):
    """Starts an all-to-all: `tensor`'s first dimension is cut into parts of splits[j] rows
    (size() equal parts when splits is None: each rank's own, so first dimensions may differ
    between ranks, as in Horovod), part j goes to rank j, and the result (a new tensor) holds the
    parts every rank sent this one, in rank order. The other dimensions and the dtype must agree
    on every rank. Bad splits raise ArgumentError (a ValueError).

    synchronize() returns the result, or (result, received_splits) with
    return_received_splits=True: the rows received from each rank, an int64 tensor of the input's
    kind. One library op learns the rows each rank receives inside it (CUDA tensors: the splits
    are exchanged first, which blocks until every rank has called this, named `name` +
    ".splits" when named)."""
    ps = _target(process_set, "alltoall")
    p = ps.size()
    if not (_collectives_on_device() or _tensors.kind_of(tensor).on_device(tensor)):
        def send_rows(first):
            if first is None:
                return _sizes([_ROWS_FAILED] * p)
            if not tensor.shape:
                raise PriocclError("alltoall: the tensor needs a first dimension to split")
            return _sizes(_parse_splits(splits, p, first))
        op, result = _rows_op("alltoall", tensor, name, priority, ps, _L.priocclAllToAllRowsAsync,
                              _L.priocclAllToAllRowsNamedAsync, send_rows)
        h = Handle(op, None)

        def take(_):
            out, got = result.take(tensor, p, "alltoall")
            return (out, _int_tensor(tensor, got)) if return_received_splits else out
        h._then = take
        return h
    # CUDA tensors: the splits are exchanged first (the ragged op's result is host memory).
    comm = ps._comm
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
                      priority, None if name is None else f"{name}.splits", ps)
    if local is not None:
        raise local
    _agree("alltoall", peers)
    row = mine[0] * _factor(tensor)
    got = [q[0] for q in peers]
    send_counts = _sizes([n * row for n in sent])
    recv_counts = _sizes([n * row for n in got])
    flat = _new_empty(tensor, sum(got) * mine[0])
    d_ptr = _buffer(flat)[0]
    op = _submit("alltoall", name,
                 lambda r: _L.priocclAllToAllVAsync(s_ptr, send_counts, None, d_ptr, recv_counts,
                                                    None, code, priority, comm, r),
                 lambda k, r: _L.priocclAllToAllVNamedAsync(s_ptr, send_counts, None, d_ptr,
                                                            recv_counts, None, code, priority, k,
                                                            comm, r),
                 (tensor, flat, send_counts, recv_counts), ps)
    out = _reshape_rows(flat, tensor, sum(got))
    result = (out, _int_tensor(tensor, got)) if return_received_splits else out
    return Handle(op, result)


def alltoall(tensor, splits=None, priority=0, name=None, return_received_splits=False,
             process_set=None):
    return synchronize(alltoall_async(tensor, splits, priority, name, return_received_splits,
                                      process_set))


def barrier(priority=0, process_set=None):
    """Returns once every rank (of the process set) has called barrier() (or join())."""
    ps = _target(process_set, "barrier")
    comm = ps._comm
    synchronize(Handle(_submit("barrier", None,
                               lambda r: _L.priocclBarrierAsync(priority, comm, r),
                               lambda k, r: _L.priocclBarrierNamedAsync(priority, k, comm, r),
                               (), ps), None))


def start_timeline(path):
    """This rank's ops from now on go to a Chrome-trace file (PRIOCCL_TIMELINE's format and file
    naming: %r is the rank, else ".rank<r>" is inserted for ranks other than 0); an open timeline
    is closed first. Times line up with rank 0's only when PRIOCCL_TIMELINE was set at init()
    (the clock offset is measured then)."""
    _require()
    _check(_L.priocclTimelineStart(_comm, str(path).encode()), "start_timeline")


def stop_timeline():
    """Closes the timeline start_timeline() opened (or PRIOCCL_TIMELINE's)."""
    _require()
    _check(_L.priocclTimelineStop(_comm), "stop_timeline")


def join():
    """Horovod's join, for ranks with uneven work: blocks until every rank has called join() and
    returns the last rank to join. Until then this rank takes part in the other ranks'
    allreduce, reduce, reducescatter, broadcast (from a rank that has not joined) and barrier
    calls (on the global process set) with the op's identity element: 0 for Sum and Average (an
    average still divides by size()), 1 for Product, the extreme for Min and Max; their other
    ops fail on their ranks, naming this one. The results it takes part in are not kept here:
    broadcast the model from the returned rank afterwards, as Horovod advises."""
    _require()
    last = ctypes.c_int(-1)
    _check(_L.priocclJoin(_comm, ctypes.byref(last)), "join")
    return last.value


def send_async(tensor, peer, tag=0, priority=0, process_set=None):
    ps = _target(process_set, "send")
    ptr, count, code = _buffer(tensor, writable=False)
    comm = ps._comm
    op = _submit("send", None, lambda r: _L.priocclSendAsync(ptr, count, code, peer, tag, priority,
                                                             comm, r), None, (tensor,), ps)
    return Handle(op, tensor)


def recv_async(tensor, peer, tag=0, priority=0, process_set=None):
    ps = _target(process_set, "recv")
    ptr, count, code = _buffer(tensor)
    comm = ps._comm
    op = _submit("recv", None, lambda r: _L.priocclRecvAsync(ptr, count, code, peer, tag, priority,
                                                             comm, r), None, (tensor,), ps)
    return Handle(op, tensor)
