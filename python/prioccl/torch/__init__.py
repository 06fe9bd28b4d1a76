"""prioccl.torch: horovod.torch's API over prioccl. A Horovod script runs with its import changed:

    import prioccl.torch as hvd
    hvd.init()
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)

Every op also takes prioccl's `priority=` (smaller = more urgent). Not implemented (a clear
error, never a hang): Adasum, GPU tensors (issue 24).
"""
import prioccl
from prioccl import (PriocclError, ProcessSet, global_process_set, add_process_set,
                     remove_process_set, init, init_rank, get_unique_id, shutdown, is_initialized,
                     rank, size, local_rank, local_size, cross_rank, cross_size, is_homogeneous,
                     mpi_threads_supported, poll)
from prioccl.torch.compression import Compression
from prioccl.torch.mpi_ops import (
    Sum, Average, Min, Max, Product, Adasum,
    allreduce, allreduce_, allreduce_async, allreduce_async_,
    grouped_allreduce, grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_,
    allgather, allgather_async, grouped_allgather, grouped_allgather_async,
    broadcast, broadcast_, broadcast_async, broadcast_async_,
    alltoall, alltoall_async, reducescatter, reducescatter_async, grouped_reducescatter,
    grouped_reducescatter_async, sparse_allreduce_async, barrier, join, synchronize)
from prioccl.torch.functions import (broadcast_parameters, broadcast_optimizer_state,
                                     broadcast_object, allgather_object)
from prioccl.torch.optimizer import DistributedOptimizer
from prioccl.torch.ddp import PriorityState, ddp_comm_hook
from prioccl.torch import elastic  # noqa: F401 - hvd.elastic.run, hvd.elastic.TorchState
import torch.distributed as _dist
if _dist.is_available():
    from prioccl.torch import backend as _backend  # noqa: F401 - registers backend "prioccl"

HorovodInternalError = PriocclError  # what Horovod code catches around collectives


# What this build has, answered truthfully: prioccl runs over MPI (its default transport) on CPU
# tensors; it has no Gloo, NCCL (issue 24), DDL, oneCCL, CUDA or ROCm path.
def mpi_built():
    return True


def mpi_enabled():
    return True


def gloo_built():
    return False


def gloo_enabled():
    return False


def nccl_built():
    """Horovod's answer: NCCL_VERSION_CODE of the NCCL the library was built with, else 0."""
    return prioccl.nccl_version()


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return bool(prioccl.build_features() & prioccl.FEATURE_CUDA)


def rocm_built():
    return False


def start_timeline(file_path, mark_cycles=False):
    """Horovod's start_timeline (prioccl.start_timeline): this rank's ops from now on, as a
    Chrome trace per rank (file_path with %r, else ".rank<r>" inserted for ranks other than 0).
    mark_cycles has no meaning here (prioccl has no negotiation cycles) and is ignored."""
    prioccl.start_timeline(file_path)


def stop_timeline():
    prioccl.stop_timeline()
