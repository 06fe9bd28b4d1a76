"""The library's constants (data types, reduction ops, flags), read from the library itself
(priocclGetConstant) when it loads, as Horovod reads its own from its library: the package names
them and never restates a value. python.constants checks that every name here is in prioccl.h."""

from ._errors import PriocclError

# Array and tensor dtypes by name -> the C data type they travel as. The library has no int16 or
# bool: the package maps those itself (see _code in __init__).
NUMPY_DTYPES = {"int8": "priocclInt8", "uint8": "priocclUint8", "int32": "priocclInt32",
                "uint32": "priocclUint32", "int64": "priocclInt64", "uint64": "priocclUint64",
                "float16": "priocclFloat16", "float32": "priocclFloat32",
                "float64": "priocclFloat64"}
TORCH_DTYPES = dict({f"torch.{k}": v for k, v in NUMPY_DTYPES.items()},
                    **{"torch.bfloat16": "priocclBfloat16"})
# The reduction ops, by the names the Python API gives them (Horovod's).
OPS = {"Sum": "priocclSum", "Prod": "priocclProd", "Max": "priocclMax", "Min": "priocclMin",
       "Average": "priocclAvg"}
FLAGS = ("PRIOCCL_FEATURE_UCX", "PRIOCCL_FEATURE_CUDA", "PRIOCCL_FEATURE_NCCL")
# A ragged op's rows from a rank that failed before it ((size_t)-1, read as the int -1).
ROWS_FAILED = "PRIOCCL_ROWS_FAILED"
# priocclCommShrink's excludeCount for "the live ranks find out who is gone".
SHRINK_TO_LIVE = "PRIOCCL_SHRINK_TO_LIVE"
# The result codes of a lost peer (elastic training shrinks and carries on after these).
LOST_PEER = ("priocclRemoteError", "priocclTimeout")


def names():
    """Every C name the package asks the library for."""
    return sorted(set(NUMPY_DTYPES.values()) | set(TORCH_DTYPES.values()) | set(OPS.values())
                  | set(FLAGS) | set(LOST_PEER) | {ROWS_FAILED, SHRINK_TO_LIVE})


def read(lib, path):
    """{C name: value} from the loaded library `lib` (loaded from `path`)."""
    import ctypes
    get = getattr(lib, "priocclGetConstant", None)
    if get is None:
        raise PriocclError(f"{path} has no priocclGetConstant: the library is older than this "
                           f"package (rebuild it, or point PRIOCCL_LIBRARY at a current one)")
    value = ctypes.c_int()
    values = {}
    for name in names():
        if get(name.encode(), ctypes.byref(value)) != 0:
            raise PriocclError(f"{path}: priocclGetConstant does not know {name}: the library "
                               f"and this package are from different versions")
        values[name] = value.value
    return values
