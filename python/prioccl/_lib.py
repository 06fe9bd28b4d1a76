"""Loads libprioccl.so and declares the C ABI (include/prioccl/prioccl.h) for ctypes."""
import ctypes
import ctypes.util
import os
import sysconfig
from pathlib import Path

from . import _constants

c_int_p = ctypes.POINTER(ctypes.c_int)
c_void_pp = ctypes.POINTER(ctypes.c_void_p)
c_size_t_p = ctypes.POINTER(ctypes.c_size_t)  # the v-collectives' count/displacement arrays


class UniqueId(ctypes.Structure):
    """priocclUniqueId: a job id for launching without MPI (passed by value)."""
    _fields_ = [("internal", ctypes.c_char * 128)]


# The path (or loader name) load() loaded, for checks and diagnostics; None until then.
loaded_path = None


def _candidates():
    """Where load() looks, in order: PRIOCCL_LIBRARY; the library installed beside this package
    (cmake --install puts the package in <prefix>/lib/python3.X/dist-packages and the library in
    <prefix>/<libdir>); the source tree's build/ (package run from python/); the system's loader."""
    env = os.environ.get("PRIOCCL_LIBRARY")
    if env:
        yield env
    here = Path(__file__).resolve().parent  # .../prioccl
    # <prefix>/lib*/python3[.X]/{dist,site}-packages/prioccl -> <prefix>
    up = here.parents
    if (len(up) >= 4 and up[0].name in ("dist-packages", "site-packages")
            and up[1].name.startswith("python") and up[2].name.startswith("lib")):
        prefix = up[3]
        libdirs = [up[2].name, "lib"]
        multiarch = sysconfig.get_config_var("MULTIARCH")  # Debian's lib/x86_64-linux-gnu
        if multiarch:
            libdirs.append("lib/" + multiarch)
        libdirs.append("lib64")
        for libdir in dict.fromkeys(libdirs):
            for name in ("libprioccl.so.1", "libprioccl.so"):
                yield str(prefix / libdir / name)
    repo = here.parent.parent  # <repo>/python/prioccl
    if here.parent.name == "python" and (repo / "CMakeLists.txt").is_file():
        yield str(repo / "build" / "libprioccl.so")
    found = ctypes.util.find_library("prioccl")
    if found:
        yield found
    yield "libprioccl.so.1"


constants = {}  # the library's constants by C name (_constants.py), once load() has run


def load():
    """The library, loaded RTLD_GLOBAL: Open MPI's plugins resolve MPI's symbols through it.
    Sets loaded_path; the OSError, when nothing loads, names every place tried."""
    global loaded_path
    errors = [] if os.environ.get("PRIOCCL_LIBRARY") else ["PRIOCCL_LIBRARY: unset"]
    seen = set()
    for path in _candidates():  # lazily: find_library() runs ldconfig, only if needed
        if path in seen:
            continue
        seen.add(path)
        if os.sep in path and not os.path.exists(path):
            errors.append(f"{path}: no such file")
            continue
        try:
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            errors.append(f"{path}: {e}" if os.sep in path else f"{path} (system loader): {e}")
            continue
        _declare(lib)
        loaded_path = path
        global constants
        constants = _constants.read(lib, path)
        return lib
    raise OSError("cannot load libprioccl.so (build it with scripts/build.sh, or set "
                  "PRIOCCL_LIBRARY to its path); tried: " + "; ".join(errors))


def _declare(lib):
    R = ctypes.c_int  # priocclResult_t
    v, sz, i = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
    sigs = {
        "priocclGetErrorString": (ctypes.c_char_p, [i]),
        "priocclGetBuildFeatures": (R, [ctypes.POINTER(ctypes.c_int)]),
        "priocclGetNcclVersion": (R, [ctypes.POINTER(ctypes.c_int)]),
        "priocclGetLastError": (ctypes.c_char_p, [v]),
        "priocclCommInitWorld": (R, [c_void_pp]),
        "priocclCommDestroy": (R, [v]),
        "priocclCommAbort": (R, [v]),
        "priocclCommRank": (R, [v, c_int_p]),
        "priocclCommSize": (R, [v, c_int_p]),
        "priocclCommHostInfo": (R, [v, c_int_p, c_int_p, c_int_p, c_int_p, c_int_p]),
        "priocclCommInitMPI": (R, [c_void_pp, v, v]),
        "priocclGetUniqueId": (R, [ctypes.POINTER(UniqueId)]),
        "priocclCommInitRank": (R, [c_void_pp, i, UniqueId, i]),
        "priocclCommInitRankConfig": (R, [c_void_pp, i, UniqueId, i, ctypes.POINTER(Config)]),
        "priocclCommInitCancel": (R, []),
        "priocclCommSplit": (R, [v, i, i, c_void_pp]),
        "priocclCommShrink": (R, [v, ctypes.POINTER(i), i, c_void_pp]),
        "priocclCommGetAsyncError": (R, [v, c_int_p]),
        "priocclGetCounters": (R, [v, v]),
        "priocclGroupStart": (R, []),
        "priocclGroupEnd": (R, []),
        "priocclAllReduce": (R, [v, v, sz, i, i, v]),
        "priocclAllReduceAsync": (R, [v, v, sz, i, i, i, v, c_void_pp]),
        "priocclAllReduceNamedAsync": (R, [v, v, sz, i, i, i, ctypes.c_char_p, v, c_void_pp]),
        "priocclBroadcastAsync": (R, [v, v, sz, i, i, i, v, c_void_pp]),
        "priocclBroadcastNamedAsync": (R, [v, v, sz, i, i, i, ctypes.c_char_p, v, c_void_pp]),
        "priocclReduceAsync": (R, [v, v, sz, i, i, i, i, v, c_void_pp]),
        "priocclReduceNamedAsync": (R, [v, v, sz, i, i, i, i, ctypes.c_char_p, v, c_void_pp]),
        "priocclAllGatherAsync": (R, [v, v, sz, i, i, v, c_void_pp]),
        "priocclAllGatherNamedAsync": (R, [v, v, sz, i, i, ctypes.c_char_p, v, c_void_pp]),
        "priocclReduceScatterAsync": (R, [v, v, sz, i, i, i, v, c_void_pp]),
        "priocclReduceScatterNamedAsync": (R, [v, v, sz, i, i, i, ctypes.c_char_p, v,
                                               c_void_pp]),
        "priocclAllToAllAsync": (R, [v, v, sz, i, i, v, c_void_pp]),
        "priocclAllToAllNamedAsync": (R, [v, v, sz, i, i, ctypes.c_char_p, v, c_void_pp]),
        # The ragged collectives: the result is the library's (priocclRows_t), read after the op.
        "priocclAllGatherRowsAsync": (R, [v, sz, sz, i, i, v, c_void_pp, c_void_pp]),
        "priocclAllGatherRowsNamedAsync": (R, [v, sz, sz, i, i, ctypes.c_char_p, v, c_void_pp,
                                               c_void_pp]),
        "priocclAllToAllRowsAsync": (R, [v, c_size_t_p, sz, i, i, v, c_void_pp, c_void_pp]),
        "priocclAllToAllRowsNamedAsync": (R, [v, c_size_t_p, sz, i, i, ctypes.c_char_p, v,
                                              c_void_pp, c_void_pp]),
        "priocclRowsGet": (R, [v, c_void_pp, c_size_t_p, c_size_t_p]),
        "priocclRowsFree": (R, [v]),
        # The v-collectives: per-rank counts/displacements as arrays of nranks size_t (None for
        # displacements = packed blocks).
        "priocclAllGatherV": (R, [v, v, c_size_t_p, c_size_t_p, i, v]),
        "priocclAllGatherVAsync": (R, [v, v, c_size_t_p, c_size_t_p, i, i, v, c_void_pp]),
        "priocclAllGatherVNamedAsync": (R, [v, v, c_size_t_p, c_size_t_p, i, i, ctypes.c_char_p,
                                            v, c_void_pp]),
        "priocclReduceScatterV": (R, [v, v, c_size_t_p, i, i, v]),
        "priocclReduceScatterVAsync": (R, [v, v, c_size_t_p, i, i, i, v, c_void_pp]),
        "priocclReduceScatterVNamedAsync": (R, [v, v, c_size_t_p, i, i, i, ctypes.c_char_p, v,
                                                c_void_pp]),
        "priocclAllToAllV": (R, [v, c_size_t_p, c_size_t_p, v, c_size_t_p, c_size_t_p, i, v]),
        "priocclAllToAllVAsync": (R, [v, c_size_t_p, c_size_t_p, v, c_size_t_p, c_size_t_p, i, i,
                                      v, c_void_pp]),
        "priocclAllToAllVNamedAsync": (R, [v, c_size_t_p, c_size_t_p, v, c_size_t_p, c_size_t_p,
                                           i, i, ctypes.c_char_p, v, c_void_pp]),
        "priocclBarrierAsync": (R, [i, v, c_void_pp]),
        "priocclBarrierNamedAsync": (R, [i, ctypes.c_char_p, v, c_void_pp]),
        "priocclJoin": (R, [v, c_int_p]),
        "priocclTimelineStart": (R, [v, ctypes.c_char_p]),
        "priocclTimelineStop": (R, [v]),
        "priocclShapeNext": (R, [ctypes.POINTER(ctypes.c_int64), i]),
        "priocclSendAsync": (R, [v, sz, i, i, i, i, v, c_void_pp]),
        "priocclRecvAsync": (R, [v, sz, i, i, i, i, v, c_void_pp]),
        "priocclTest": (R, [v, c_int_p]),
        "priocclWait": (R, [v]),
        "priocclSetStream": (R, [v, i]),
        "priocclStreamWaitRequest": (R, [v, v]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


class Config(ctypes.Structure):
    """priocclConfig_t; Config.initial() is PRIOCCL_CONFIG_INITIALIZER (every field from its
    PRIOCCL_* variable, or the default)."""
    _fields_ = [("size", ctypes.c_size_t), ("chunkBytes", ctypes.c_longlong),
                ("creditBytes", ctypes.c_longlong), ("windowChunks", ctypes.c_longlong),
                ("requireThreadMultiple", ctypes.c_int), ("schedule", ctypes.c_int),
                ("algorithm", ctypes.c_int), ("transport", ctypes.c_int),
                ("timeoutSeconds", ctypes.c_double), ("stallWarnSeconds", ctypes.c_double)]

    @classmethod
    def initial(cls):
        return cls(ctypes.sizeof(cls), -1, -1, -1, -1, -1, -1, -1, -1.0, -1.0)


class DelayedConfig(ctypes.Structure):
    """priocclDelayedConfig_t"""
    _fields_ = [("k", ctypes.c_int), ("lr", ctypes.c_double), ("momentum", ctypes.c_double),
                ("weightDecay", ctypes.c_double), ("alpha", ctypes.c_double),
                ("beta", ctypes.c_double), ("localLr", ctypes.c_double),
                ("warmupSteps", ctypes.c_int), ("priority", ctypes.c_int)]


def declare_modes(lib):
    """The training modes' C ABI (priocclLagged*, kernels), declared on first use."""
    if getattr(lib, "_modes_declared", False):
        return
    R, v, sz, i, d = ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_double
    sigs = {
        "priocclLaggedCreate": (R, [v, sz, i, i, i, i, ctypes.c_char_p, c_void_pp]),
        "priocclLaggedStep": (R, [v, v, v, c_int_p]),
        "priocclLaggedFlush": (R, [v, v, c_int_p]),
        "priocclLaggedDestroy": (R, [v]),
        "priocclSwitchDecayLrRatio": (R, [ctypes.c_long, ctypes.c_long, ctypes.POINTER(d)]),
        "priocclGluUpdate": (R, [v, v, v, sz, i, d, d, d, d, d, d, i]),
        "priocclSpecTrainPredict": (R, [v, v, v, sz, i, d, d]),
        "priocclSpecTrainStaleness": (R, [i, i, i, c_int_p]),
        "priocclSpecTrainStalenessRule": (R, [i, i, i, i, c_int_p]),
        "priocclDelayedCreate": (R, [v, v, sz, ctypes.POINTER(DelayedConfig), ctypes.c_char_p,
                                     c_void_pp]),
        "priocclDelayedStep": (R, [v, v, c_int_p]),
        "priocclDelayedSetLearningRate": (R, [v, d, d]),
        "priocclDelayedFlush": (R, [v]),
        "priocclDelayedDestroy": (R, [v]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    lib._modes_declared = True
