"""Small matrix products on one BLAS thread.

NumPy's OpenBLAS shares every product among its threads, and they synchronise at its end. For a
small product (a thin network's layer: 2,048 x 64 by 64 x 64) the work per thread is tiny, and on
a machine whose cores are busy a thread that has been descheduled makes the others wait for it:
measured on a loaded 2-core machine, the 10-64-64-1 network's value_and_grad (N = 2,048, float64)
took 42 ms per step with OpenBLAS's two threads and 3.8-5.5 ms with one (JAX: 3.5-6.2 ms in the
same runs). The cpu backend's driver calls products of fewer than `SMALL_PRODUCT` multiply-adds
(all of a thin network's, none of W2's 4096x256 by 256x512) through `single_threaded`, which
lowers OpenBLAS's thread count to one for the call; the larger ones keep all threads.

Only NumPy's bundled OpenBLAS (the wheels' `scipy_openblas`) is known; with any other BLAS the
products run as NumPy runs them. The thread count is process-wide: a counter of products running
on one thread keeps concurrent callers from restoring it too early, and a NumPy product started
by another thread meanwhile runs on one thread too (slower, never wrong).
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
import threading
from collections.abc import Callable

import numpy as np

# products with fewer multiply-adds than this run on one BLAS thread
SMALL_PRODUCT = 1 << 27

_lock = threading.Lock()
_state = {"active": 0, "saved": 0}


@functools.lru_cache(maxsize=1)
def _openblas() -> tuple[Callable, Callable] | None:
    """(get, set) of the thread count of NumPy's bundled OpenBLAS, or None."""
    folder = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for path in sorted(glob.glob(os.path.join(folder, "*openblas*"))):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for suffix in ("64_", ""):
            get = getattr(lib, f"scipy_openblas_get_num_threads{suffix}", None)
            set_ = getattr(lib, f"scipy_openblas_set_num_threads{suffix}", None)
            if get is not None and set_ is not None:
                get.restype, set_.argtypes = ctypes.c_int, [ctypes.c_int]
                return get, set_
    return None


def single_threaded(matmul: Callable = np.matmul) -> Callable:
    """`matmul` that runs on one OpenBLAS thread (as it is, without a known OpenBLAS)."""
    blas = _openblas()
    if blas is None:
        return matmul
    get, set_ = blas

    def call(a, b, out=None):
        with _lock:
            if _state["active"] == 0:
                _state["saved"] = get()
                if _state["saved"] > 1:
                    set_(1)
            _state["active"] += 1
        try:
            return matmul(a, b) if out is None else matmul(a, b, out=out)
        finally:
            with _lock:
                _state["active"] -= 1
                if _state["active"] == 0 and _state["saved"] > 1:
                    set_(_state["saved"])

    return call
