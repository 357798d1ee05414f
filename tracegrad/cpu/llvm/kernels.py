"""A fused loop's kernel compiled through llvmlite, called as its Numba kernel is called.

`native_kernel` lowers the loop (the same loop IR the Numba printer prints), prints it as LLVM IR
(`printer.py`), compiles it (`engine.py`: milliseconds, machine code cached on disk) and returns a
Python function with the Numba kernel's arguments, so the program's driver and its thread pool
call either the same way. The function calls the native code through ctypes, which releases the
GIL for the call. A call whose arrays are not what the kernel was compiled for (not
C-contiguous, not aligned, another shape: a caller's transposed input, say) runs the kernel's
Numba version instead, compiled then: the same numbers, later.

A kernel the printer cannot write (complex values, a construct `scalars.py` does not know)
returns None here, and the program compiles that kernel with Numba as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading
import time

import numpy as np
from llvmlite import ir

from ...base import config, progress
from ...fusion import render
from .. import lowering as lower_cpu
from ..kernels import KernelSource, LayoutRefused, pair_math
from .printer import ARRAY_DATA, ARRAY_DIMS, ARRAY_FLAGS, C_CONTIGUOUS, print_kernel
from .scalars import Unsupported, llvm_type

log = config.log


@functools.lru_cache(maxsize=1)
def layout_ok() -> bool:
    """Whether NumPy's array objects keep their data pointer, shape and flags where the
    kernels read them (they have since NumPy 1.7); if not, no native kernel is used."""
    a = np.zeros((3, 5))
    try:
        data = ctypes.c_void_p.from_address(id(a) + ARRAY_DATA).value
        dims = ctypes.cast(
            ctypes.c_void_p.from_address(id(a) + ARRAY_DIMS).value, ctypes.POINTER(ctypes.c_int64)
        )
        flags = ctypes.c_int32.from_address(id(a) + ARRAY_FLAGS).value
        t = a.T
        t_flags = ctypes.c_int32.from_address(id(t) + ARRAY_FLAGS).value
    except (ValueError, OSError):
        return False
    return (
        data == a.ctypes.data
        and (dims[0], dims[1]) == (3, 5)
        and bool(flags & C_CONTIGUOUS)
        and not t_flags & C_CONTIGUOUS
    )


def declare_vmath(printer, name: str, dtype) -> ir.Function:
    """Declares tracegrad.vmath's `name` for `dtype` in the printer's module, with the
    signature `vmath_ir.py` defines it with."""
    from . import vmath_ir

    fnty = vmath_ir.function_type(name, np.dtype(dtype))
    return printer.declare(vmath_ir.symbol(name, np.dtype(dtype)), fnty)


@functools.lru_cache(maxsize=1)
def printer_version() -> str:
    """A hash of the code that turns a loop into LLVM IR (part of each kernel's cache key)."""
    from ...base import cache_files
    from ...fusion import loop_ir

    here = os.path.dirname(__file__)
    files = [os.path.join(here, n) for n in ("kernels.py", "printer.py", "scalars.py")]
    return cache_files.source_hash([*files, lower_cpu.__file__, loop_ir.__file__])


def native_kernel(
    loop, src: KernelSource, nch: int, ints, floats, mode: str, names: dict, label: str
):
    """The kernel of `loop` as a Python function taking the Numba kernel's arguments, compiled
    through llvmlite; None when the printer cannot write it.

    The kernel's machine code is keyed by what it is printed from, so that a kernel found on
    disk is loaded without printing it: the kernel's Numba source (the loop, the dtypes and the
    versions), the run-time arguments of that source which the native kernel has written in
    (`ints`: sizes and offsets; `floats`: constants), the arrays' shapes, the chunks, the math
    mode and the printer's own code."""
    if not layout_ok():
        return None
    from . import engine

    # (Numba's source names no dtype where it only copies: its kernels take any arrays)
    shapes = [(tuple(b.shape), np.dtype(b.dtype).str) for b in src.arrays]
    shapes += [(tuple(p[1]), np.dtype(p[2]).str) for p in src.partials]
    origin = "\n; ".join(
        [
            src.module,
            f"shape {tuple(loop.shape)} nch {nch} mode {mode} printer {printer_version()}",
            f"arrays {shapes}",  # shapes and dtypes
            f"ints {np.asarray(ints, np.int64).tobytes().hex()}",
            f"floats {np.asarray(floats, np.float64).tobytes().hex()}",
        ]
    )
    key = engine.module_key(origin)
    name = f"tg_{key[:24]}"
    if key in _refused:
        return None

    def print_it() -> str:
        kernel = lower_cpu.lower(loop, render.Notes(names))
        pair_math(kernel, loop.op_types(), mode)
        kernel_ir = print_kernel(kernel, loop.shape, nch, mode, declare_vmath)
        return kernel_ir.text.replace(kernel_ir.name, name)

    start = time.perf_counter()
    had = engine.in_memory_key(key)
    try:
        module = engine.compile_module(print_it, name, key)
    except Unsupported as exc:
        _refused.add(key)
        log.debug("tracegrad: kernel %s goes to Numba: %s", label, exc)
        return None
    how = (
        progress.IN_MEMORY if had else progress.FROM_DISK if module.from_disk else progress.COMPILED
    )
    progress.kernel_compiled(label, time.perf_counter() - start, how)
    n = len(src.arrays) + len(src.partials)
    proto = ctypes.CFUNCTYPE(
        ctypes.c_int32, *([ctypes.py_object] * n), ctypes.c_int64, ctypes.c_int64, ctypes.c_int64
    )
    fn = proto(module.address(name + "_py"))
    kernel = _wrapper(fn, src, module)
    kernel.c_entry = module.address(name)  # void(i8** data, first, last, finish)
    return kernel


_refused: set[str] = set()  # kernels the printer cannot write, by key

# Where a refused layout compiles the kernel's Numba version rather than raise LayoutRefused:
# inside `numba_fallback()`, in this thread.
_fallback = threading.local()


@contextlib.contextmanager
def numba_fallback():
    """Kernels that refuse their arrays' layout run their Numba version (compiled then)."""
    before = getattr(_fallback, "allowed", False)
    _fallback.allowed = True
    try:
        yield
    finally:
        _fallback.allowed = before


def _wrapper(fn, src: KernelSource, module):
    """A function with the Numba kernel's parameters (arrays, then `src.params`) that calls the
    native entry with the arrays and partial results, or the Numba kernel when it refuses."""
    arrays = [f"b{k}" for k in range(len(src.arrays))]
    params = list(src.params)
    partials = [name for name, _, _ in src.partials]
    chunks = ["first", "last", "finish"] if "first" in params else ["0", "1", "1"]
    signature = ", ".join(arrays + params)
    call = ", ".join(arrays + partials + chunks)
    source = f"def kernel({signature}):\n    if _native({call}):\n        _numba()({signature})\n"
    numba_kernel = []

    def numba_version():
        if not numba_kernel:
            if not getattr(_fallback, "allowed", False):
                raise LayoutRefused
            from ...base import cache

            log.info(
                "tracegrad: a kernel's arrays are not the layout it was compiled for, also with "
                "the program's inputs copied: its Numba version is compiled and runs"
            )
            numba_kernel.append(cache.load_module(src.module).kernel)
        return numba_kernel[0]

    ns = {"_native": fn, "_numba": numba_version}
    exec(compile(source, "<tracegrad native kernel>", "exec"), ns)
    kernel = ns["kernel"]
    kernel.native = module
    kernel.ctypes_function = fn
    return kernel


__all__ = ["llvm_type", "native_kernel"]
