"""The device side of the cuda backend: finding a GPU (or Numba's simulator), launch sizes, arrays.

Everything here touches `numba.cuda`, which is imported only when the cuda backend is used.
Under Numba's CUDA simulator (`NUMBA_ENABLE_CUDASIM=1`, read when numba is first imported) device
arrays are NumPy arrays in a wrapper and each simulated thread is a Python thread, so the launch
configuration is small and fixed there; on a GPU it comes from the device's properties.

Arrays. A device array here is a numba device array (a `DeviceNDArray`, or the simulator's
`FakeCUDAArray`). Foreign GPU arrays (CuPy, PyTorch...) are wrapped without a copy through their
`__cuda_array_interface__`. Views (transposes, slices, broadcasts, reshapes of contiguous data) are
new device arrays over the same memory with other strides; nothing is copied for them.
Internally a 0-d value lives in a 1-element 1-D array, so that every kernel indexes with `[0]`.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
import threading
import types
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np


def simulated() -> bool:
    """Whether numba.cuda is (or will be, once imported) the CPU simulator."""
    if "numba" in sys.modules:
        from numba.core import config

        return bool(getattr(config, "ENABLE_CUDASIM", False))
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "") == "1"


def cuda():
    """The numba.cuda module (imported on first use)."""
    from numba import cuda as module

    return module


def availability() -> tuple[bool, str]:
    """(usable here, why not). Never raises."""
    try:
        module = cuda()
    except ImportError as exc:
        return False, (
            f"numba's CUDA target is not installed ({exc}); install it with "
            "`pip install numba-cuda` (or tracegrad[cuda])"
        )
    except Exception as exc:
        return False, f"numba.cuda cannot be imported ({type(exc).__name__}: {exc})"
    if simulated():
        return True, ""
    try:
        found = module.is_available()
    except Exception as exc:
        return False, f"the CUDA driver failed to start ({type(exc).__name__}: {exc})"
    if not found:
        return False, (
            "no CUDA GPU was found (numba.cuda.is_available() is False: no NVIDIA "
            "driver or device on this machine)"
        )
    return True, ""


# ----------------------------------------------------------------------------------------------
# Launch configuration


@dataclass(frozen=True)
class LaunchConfig:
    """How kernels are launched on this device. Generated kernel sources bake these numbers in."""

    threads: int  # threads per block of 1-D kernels (a power of two)
    blocks: int  # blocks that fill the device once; grid-stride loops use at most this many
    warp: int  # threads that run in lockstep; a reduction's kept lanes are at most this many
    shared_bytes: int  # shared memory one block may use
    mm_threads: int  # matrix product: threads per side of a block (mm_threads^2 threads)
    mm_micro: int  # matrix product: outputs per thread along each side
    mm_depth: int  # matrix product: the k-extent of a shared-memory tile
    mm_blocks: int  # matrix product: fewer tiles than this, and k is split across blocks too
    device: str  # what it was derived from (part of the kernel cache key)

    @property
    def mm_tile(self) -> int:
        return self.mm_threads * self.mm_micro

    def describe(self) -> str:
        return (
            f"{self.device}: {self.threads} threads x up to {self.blocks} blocks, matmul tiles "
            f"{self.mm_tile}x{self.mm_tile}x{self.mm_depth} on {self.mm_threads}^2 threads"
        )


# Under the simulator each thread is a Python thread: a few of them, a couple of blocks (so that
# cross-block combines still run), small matmul tiles.
SIMULATOR_CONFIG = LaunchConfig(
    threads=16,
    blocks=2,
    warp=4,
    shared_bytes=48 * 1024,
    mm_threads=2,
    mm_micro=4,
    mm_depth=4,
    mm_blocks=2,
    device="simulator",
)


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, int(n)).bit_length() - 1)


def config_from_properties(
    sms: int,
    max_threads_per_block: int,
    max_threads_per_sm: int,
    warp: int,
    shared_bytes: int,
    name: str,
) -> LaunchConfig:
    """The launch configuration for a device with these properties.

    A quarter of the largest block (256 threads on every NVIDIA GPU so far) leaves room for
    several blocks per multiprocessor; one full wave of resident blocks keeps every
    multiprocessor busy, and grid-stride loops do the rest.
    """
    threads = _pow2_floor(max(warp, max_threads_per_block // 4))
    per_sm = max(1, max_threads_per_sm // threads)
    mm_threads = _pow2_floor(max(1, math.isqrt(threads)))
    return LaunchConfig(
        threads=threads,
        blocks=max(1, sms * per_sm),
        warp=warp,
        shared_bytes=shared_bytes,
        mm_threads=mm_threads,
        mm_micro=4,
        mm_depth=16,
        mm_blocks=2 * sms,
        device=name,
    )


@functools.lru_cache(maxsize=1)
def launch_config() -> LaunchConfig:
    if simulated():
        return SIMULATOR_CONFIG
    dev = cuda().get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    cc = ".".join(map(str, dev.compute_capability))
    return config_from_properties(
        sms=int(dev.MULTIPROCESSOR_COUNT),
        max_threads_per_block=int(dev.MAX_THREADS_PER_BLOCK),
        max_threads_per_sm=int(dev.MAX_THREADS_PER_MULTIPROCESSOR),
        warp=int(dev.WARP_SIZE),
        shared_bytes=int(dev.MAX_SHARED_MEMORY_PER_BLOCK),
        name=f"{name} (cc {cc}, {int(dev.MULTIPROCESSOR_COUNT)} SMs)",
    )


# ----------------------------------------------------------------------------------------------
# Arrays


def is_device_array(x: Any) -> bool:
    return not isinstance(x, np.ndarray) and (
        hasattr(x, "__cuda_array_interface__") or getattr(x, "__cuda_ndarray__", False)
    )


def adopt(x: Any):
    """A numba device array for a GPU array of any library, without a copy."""
    if getattr(x, "__cuda_ndarray__", False):
        return x  # numba's own (or the simulator's)
    return cuda().as_cuda_array(x)


def internal_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(shape) if shape else (1,)


def to_device(host: np.ndarray):
    """Copy a host array in (once); a 0-d array becomes a 1-element array."""
    host = np.ascontiguousarray(host).reshape(internal_shape(host.shape))
    return cuda().to_device(host)


def empty(shape: tuple[int, ...], dtype) -> Any:
    return cuda().device_array(internal_shape(shape), dtype=np.dtype(dtype))


def memory_users(arr) -> int:
    """How many things hold a device array's memory: numba counts the pointers that own an
    allocation (the array's, and one per view or slice made of it); in the simulator, NumPy
    views refer to the array's NumPy array."""
    if _is_fake(arr):
        return sys.getrefcount(arr._ary)
    mem = getattr(arr.gpu_data, "_mem", None)
    refct = getattr(mem, "refct", None)
    return refct if isinstance(refct, int) else sys.getrefcount(arr.gpu_data)


def to_host(arr, shape: tuple[int, ...]) -> np.ndarray:
    """A fresh host array with the IR `shape` (arr must be C-contiguous)."""
    host = arr.copy_to_host()
    return host.reshape(shape) if host.shape != tuple(shape) else host


def layout(arr) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """(shape, strides in bytes, data address) of a device array."""
    if _is_fake(arr):
        iface = arr._ary.__array_interface__
        return tuple(arr._ary.shape), tuple(arr._ary.strides), iface["data"][0]
    iface = arr.__cuda_array_interface__
    shape = tuple(iface["shape"])
    strides = iface.get("strides") or c_strides(shape, np.dtype(iface["typestr"]).itemsize)
    return shape, tuple(strides), iface["data"][0]


def c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))


def is_c_contiguous(arr) -> bool:
    shape, strides, _ = layout(arr)
    expect = c_strides(shape, arr.dtype.itemsize)
    return all(d <= 1 or s == e for d, s, e in zip(shape, strides, expect, strict=True))


def _is_fake(arr) -> bool:
    return type(arr).__name__ == "FakeCUDAArray"


class _HostView:
    """Carries an `__array_interface__` (a strided view of simulated device memory)."""

    def __init__(self, owner, desc):
        self.owner = owner  # keeps the memory alive
        self.__array_interface__ = desc


def view(arr, shape: tuple[int, ...], strides: tuple[int, ...], offset: int = 0):
    """A device array over `arr`'s memory: `shape`, byte `strides`, starting `offset` bytes in."""
    _, _, address = layout(arr)
    dtype = np.dtype(arr.dtype)
    desc = {
        "shape": tuple(int(d) for d in shape),
        "strides": tuple(int(s) for s in strides),
        "typestr": dtype.str,
        "data": (address + int(offset), False),
        "version": 3,
    }
    if _is_fake(arr):
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return FakeCUDAArray(np.asarray(_HostView(arr._ary, desc)))
    return cuda().from_cuda_array_interface(desc, owner=arr, sync=False)


def as_shape(arr, ir_shape: tuple[int, ...]):
    """View a device array holding an IR value of shape `ir_shape` in its internal shape."""
    if ir_shape and tuple(arr.shape) == tuple(ir_shape):  # the common case, fast
        return arr
    shape, _, _ = layout(arr)
    want = internal_shape(ir_shape)
    if shape == want:
        return arr
    if not ir_shape:  # a user's 0-d array
        return view(arr, (1,), (arr.dtype.itemsize,))
    raise ValueError(f"device array of shape {shape} where {ir_shape} was expected")


def ir_layout(arr, ir_shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shape, strides) of an internal array seen with its IR shape (0-d: no strides)."""
    shape, strides, _ = layout(arr)
    if not ir_shape:
        return (), ()
    return shape, strides


def user_array(arr, ir_shape: tuple[int, ...]):
    """The device array handed to the user: its IR shape (a 0-d view for 0-d values)."""
    if ir_shape:
        return arr
    return view(arr, (), ())


def prepare_kernels(module: types.ModuleType) -> None:
    """Get a freshly loaded kernel module ready to launch (simulated or on the GPU)."""
    if simulated():
        quiet_simulated_kernels(module)
        return
    for name, value in list(vars(module).items()):
        options = getattr(value, "targetoptions", None)
        if options is not None and not options.get("device", False) and hasattr(value, "py_func"):
            setattr(module, name, _Launcher(value))


class _Launcher:
    """Stands in for a kernel in its module: `kernel[grid, block]` is made once per configuration.

    numba.cuda warns at every launch of fewer than 128 blocks; tracegrad sizes its grids to the
    work on purpose (a 10-element gradient is one block), so the configuration is made once, with
    that warning silenced, and reused by every call (which also skips its per-launch setup)."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.py_func = kernel.py_func
        self._configured: dict = {}

    def __getitem__(self, config):
        launch = self._configured.get(config)
        if launch is None:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=r"Grid size .* under-utilization")
                launch = self._configured[config] = self.kernel[config]
        return launch


def quiet_simulated_kernels(module: types.ModuleType) -> None:
    """Make simulated kernels behave like GPU code on special values.

    On a GPU, sqrt(-1) is nan and 1/0 is inf; in the simulator the kernel is Python, where
    `math.sqrt(-1.0)` raises and NumPy scalar arithmetic warns. So every simulated kernel runs
    with NumPy's floating-point errors ignored and its module's `math` replaced by NumPy's
    ufuncs (which return nan and inf like CUDA's math library).
    """
    _thread_safe_simulated_shared_arrays()
    with _quiet_lock:
        _quiet_module(module)


_quiet_lock = threading.Lock()


def _quiet_module(module: types.ModuleType) -> None:
    module.math = _SIM_MATH
    for value in list(vars(module).values()):
        fn = getattr(value, "fn", None)
        if (
            type(value).__name__ == "FakeCUDAKernel"
            and callable(fn)
            and not hasattr(fn, "_tg_quiet")
        ):
            value.fn = _quiet(fn)


_shared_lock = threading.Lock()


def _thread_safe_simulated_shared_arrays() -> None:
    """Make the simulator's `cuda.shared.array` safe for the threads of a block.

    The simulator creates a block's shared array when the first of its threads reaches the line,
    by a lookup then an insert without a lock: two threads that arrive together can each create
    one, and then write to memory the others never read (a matrix product came out wrong about
    one run in five). Same lookup, same keys (the caller's file and line), under a lock.
    """
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support

    shared = kernelapi.FakeCUDAShared
    if getattr(shared.array, "_tg_locked", False):
        return
    original = shared.array

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:  # dynamic shared memory: no lookup involved
            return original(self, shape, dtype, alignment)
        if not isinstance(dtype, np.dtype) and hasattr(dtype, "key"):  # a numba type
            dtype = numpy_support.as_dtype(dtype)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        with _shared_lock:
            res = self._allocations.get(key)
            if res is None:
                res = self._allocations[key] = np.empty(shape, dtype)
        return res

    array._tg_locked = True
    shared.array = array


# The simulator's kernel context is global: a kernel launched while another host thread's launch
# runs is taken for a device function called from that kernel, and runs on the host thread
# (AttributeError: 'Thread' object has no attribute 'blockIdx'). Simulated programs run one at a
# time; on a GPU they run concurrently.
_simulator_lock = threading.RLock()


@contextlib.contextmanager
def simulator_threads():
    """While simulated kernels run: this host thread alone launches, and Python switches between
    threads often.

    The simulator runs each CUDA thread as a Python thread and polls them from the launching
    one; with Python's default 5 ms switch interval a block of a few threads takes tens of
    milliseconds, with 0.1 ms about a fifth of that. Restored afterwards."""
    with _simulator_lock:
        before = sys.getswitchinterval()
        sys.setswitchinterval(min(before, 1e-4))
        try:
            yield
        finally:
            sys.setswitchinterval(before)


def _quiet(fn):
    # Defined in the kernel's own globals, so the simulator's swap of `cuda` in them (how
    # cuda.threadIdx works) still reaches the kernel.
    scope = fn.__globals__
    scope["_tg_np"] = np
    scope[f"_tg_fn_{fn.__name__}"] = fn
    source = (
        f"def _tg_quiet_{fn.__name__}(*args):\n"
        f"    with _tg_np.errstate(all='ignore'):\n"
        f"        return _tg_fn_{fn.__name__}(*args)\n"
    )
    # into a namespace of its own (its globals are still the kernel's): two threads quieting
    # the same cached module at once must not take each other's function
    defined: dict = {}
    exec(compile(source, "<tracegrad simulator>", "exec"), scope, defined)
    quiet = defined[f"_tg_quiet_{fn.__name__}"]
    quiet._tg_quiet = True
    return quiet


def _sim_math() -> types.SimpleNamespace:
    table = {name: getattr(math, name) for name in dir(math) if not name.startswith("_")}
    ufuncs = {
        "exp": np.exp,
        "expm1": np.expm1,
        "log": np.log,
        "log1p": np.log1p,
        "sqrt": np.sqrt,
        "sin": np.sin,
        "cos": np.cos,
        "tan": np.tan,
        "asin": np.arcsin,
        "acos": np.arccos,
        "atan": np.arctan,
        "sinh": np.sinh,
        "cosh": np.cosh,
        "tanh": np.tanh,
        "pow": np.power,
        "log2": np.log2,
        "log10": np.log10,
        "exp2": np.exp2,
    }
    table.update(ufuncs)
    return types.SimpleNamespace(**table)


_SIM_MATH = _sim_math()
