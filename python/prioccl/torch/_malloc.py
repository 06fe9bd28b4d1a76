"""glibc's malloc in a CPU training process: why DistributedOptimizer frees one large block.

glibc serves a block of at least its mmap threshold with a fresh mapping, unmapped again on
free, and returns the top of its heap to the system once more than its trim threshold is free
there. Both thresholds start low (128 KiB) and rise, the mmap threshold to the size of the
largest mapped block freed so far (up to 32 MiB) and the trim threshold to twice that (mallopt(3),
M_MMAP_THRESHOLD). Until they have risen, every training step maps, faults in and unmaps its
large tensors again. A DDP process raises them early by accident (its gradient buckets); a
process training through DistributedOptimizer did not, and on CPU-bound steps the page faults
cost it more than its communication gained (docs/benchmarks.md, "Page faults").

prime() does that once per process: a 24 MiB malloc and free, so that later blocks up to that
size come from the heap, and up to 48 MiB of freed heap is kept. PRIOCCL_TORCH_MALLOC_PRIME=0
turns it off. Nothing happens under another allocator (jemalloc, tcmalloc preloaded): there
malloc is not glibc's, and a malloc and free are all it costs.
"""
import ctypes
import os

PRIME_BYTES = 24 << 20  # below glibc's 32 MiB cap: a block past it does not raise the threshold

_primed = False


def _glibc():
    """This process's C library if it is glibc (it has gnu_get_libc_version), else None."""
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "gnu_get_libc_version"):
        return None
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    return libc


def prime():
    """Raises glibc's dynamic thresholds once per process (see the module's docstring); True if
    it did so now."""
    global _primed
    if _primed or os.environ.get("PRIOCCL_TORCH_MALLOC_PRIME", "1") == "0":
        return False
    _primed = True
    libc = _glibc()
    if libc is None:
        return False
    block = libc.malloc(PRIME_BYTES)  # mapped (never touched), then freed: the threshold rises
    if not block:
        return False
    libc.free(block)
    return True
