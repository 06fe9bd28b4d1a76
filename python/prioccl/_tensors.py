"""The tensor kinds the Python layer takes, one adapter each: numpy arrays and torch tensors (CPU
or CUDA). What the core needs of a tensor (its memory, a new one like it, a cast, a copy, integer
division, scaling) is written here once per kind, instead of a type test in every helper."""

from ._errors import PriocclError

# priocclDataType_t values by dtype name, read from the library when the package loads it
# (prioccl/__init__, _constants.py). The library has no int16 or bool: the core maps those onto
# its own codes (see _code in __init__).
NUMPY_TYPES = {}
TORCH_TYPES = {}


class _NumpyArrays:
    types = NUMPY_TYPES

    @staticmethod
    def memory(t, writable):
        """(address, elements, on a device) of a C-contiguous array."""
        if not t.flags["C_CONTIGUOUS"]:
            raise PriocclError("array is not C-contiguous: use numpy.ascontiguousarray")
        if writable and not t.flags["WRITEABLE"]:
            raise PriocclError("array is read-only")
        return t.__array_interface__["data"][0], t.size, False  # .ctypes is slower

    @staticmethod
    def empty_like(t):
        import numpy
        return numpy.empty_like(t, order="C")

    @staticmethod
    def new_empty(t, count, dtype=None):
        import numpy
        return numpy.empty(count, dtype=t.dtype if dtype is None else dtype)

    @staticmethod
    def cast(t, dtype):
        import numpy
        return numpy.ascontiguousarray(t.astype(dtype))

    @staticmethod
    def copy_into(dst, src):
        import numpy
        numpy.copyto(dst, src.reshape(dst.shape), casting="unsafe")

    @staticmethod
    def trunc_div(t, n):
        import numpy
        return (numpy.sign(t) * (numpy.abs(t) // n)).astype(t.dtype)

    @staticmethod
    def scale(t, factor, integer):
        import numpy
        if integer:  # in float64, truncated toward zero
            t[...] = (t.astype(numpy.float64) * factor).astype(t.dtype)
        elif t.dtype == numpy.float16:  # in float32, rounded once
            t[...] = (t.astype(numpy.float32) * numpy.float32(factor)).astype(t.dtype)
        else:
            t *= t.dtype.type(factor)

    @staticmethod
    def int64s(values):
        import numpy
        return numpy.array(values, dtype=numpy.int64)

    @staticmethod
    def storage(t):
        return t

    @staticmethod
    def on_device(t):  # noqa: ARG004 - arrays live in host memory
        return False


class _TorchTensors:
    types = TORCH_TYPES

    @staticmethod
    def memory(t, writable):  # noqa: ARG004 - a tensor has no read-only flag
        """(address, elements, on a device) of a contiguous CPU or CUDA tensor."""
        if not t.is_contiguous():
            raise PriocclError("tensor is not contiguous: call .contiguous() first")
        kind = t.device.type
        if kind not in ("cpu", "cuda"):
            raise PriocclError(f"tensor is on {t.device}: CPU and CUDA tensors only")
        return t.data_ptr(), t.numel(), kind == "cuda"

    @staticmethod
    def empty_like(t):
        import torch
        return torch.empty_like(t, memory_format=torch.contiguous_format)

    @staticmethod
    def new_empty(t, count, dtype=None):
        import torch
        return torch.empty(count, dtype=t.dtype if dtype is None else getattr(torch, dtype),
                           device=t.device)

    @staticmethod
    def cast(t, dtype):
        import torch
        return t.to(getattr(torch, dtype), copy=True).contiguous()

    @staticmethod
    def copy_into(dst, src):
        dst.copy_(src.reshape(dst.shape))

    @staticmethod
    def trunc_div(t, n):
        import torch
        return torch.div(t, n, rounding_mode="trunc")

    @staticmethod
    def scale(t, factor, integer):
        import torch
        if integer:  # in float64, truncated toward zero
            t.copy_((t.double() * factor).to(t.dtype))
        elif t.dtype in (torch.float16, torch.bfloat16) and not t.is_cuda:
            t.copy_((t.float() * factor).to(t.dtype))  # in float32 on the CPU, as Horovod
        else:
            t.mul_(factor)

    @staticmethod
    def int64s(values):
        import torch
        return torch.tensor(values, dtype=torch.int64)

    @staticmethod
    def storage(t):
        return t.data  # a Parameter's storage, not autograd's

    @staticmethod
    def on_device(t):
        return t.device.type == "cuda"


NUMPY, TORCH = _NumpyArrays(), _TorchTensors()


def is_torch(t):
    return hasattr(t, "data_ptr")


_by_type = {}  # type -> adapter: one dict lookup per op instead of attribute probes


def kind_of(t):
    """The adapter of `t`'s kind; PriocclError for anything else."""
    kind = _by_type.get(type(t))
    if kind is None:
        if hasattr(t, "data_ptr"):
            kind = TORCH
        elif hasattr(t, "__array_interface__"):
            kind = NUMPY
        else:
            raise PriocclError(f"expected a numpy array or a torch tensor, got {type(t).__name__}")
        _by_type[type(t)] = kind
    return kind
