"""Small matrix products on one BLAS thread, or on all of them, as a program's timing says.

NumPy's OpenBLAS shares every product among its threads, and they synchronise at its end. For a
small product (a thin network's layer: 2,048 x 64 by 64 x 64) the work per thread is tiny, and on
a machine whose cores are busy a thread that has been descheduled makes the others wait for it:
measured on a loaded 2-core machine, the 10-64-64-1 network's value_and_grad (N = 2,048, float64)
took 42 ms per step with OpenBLAS's two threads and 3.8-5.5 ms with one (JAX: 3.5-6.2 ms in the
same runs). On an idle machine the same products run 1.4-1.9x faster on both threads.

Products of fewer than `SMALL_PRODUCT` multiply-adds (all of a thin network's, none of W2's
4096x256 by 256x512) are small. A cpu program whose products are all small runs under
`one_thread` and shares them out over tracegrad's own threads (cpu/products.py). A program that
also has large products calls its small ones through its `ThreadChoice`, which times the
program's calls with one thread and with all, keeps the faster, and checks again every few
seconds; the larger products keep all threads. `single_threaded` and `small_on_one_thread`
(np.linalg's factorisations of small matrices) always use one.

Only NumPy's bundled OpenBLAS (the wheels' `scipy_openblas`) is known; with any other BLAS the
products run as NumPy runs them. The thread count is process-wide: a counter of products running
on one thread keeps concurrent callers from restoring it too early, and a NumPy product started
by another thread meanwhile runs on one thread too (slower, never wrong).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import sys
import threading
import time
from collections.abc import Callable

import numpy as np

# products with fewer multiply-adds than this run on one BLAS thread
SMALL_PRODUCT = 1 << 27

_lock = threading.Lock()
_state: dict = {"active": 0, "saved": []}


def openblas_libraries(folder: str) -> list[ctypes.CDLL]:
    """The OpenBLAS libraries a wheel bundles in its `.libs` folder, loaded."""
    try:  # (not glob: one import less for every process that traces)
        names = sorted(n for n in os.listdir(folder) if "openblas" in n and n[0] != ".")
    except OSError:
        return []
    found = []
    for name in names:
        try:
            found.append(ctypes.CDLL(os.path.join(folder, name)))
        except OSError:
            continue
    return found


def numpy_libs() -> str:
    """The folder of the libraries NumPy's wheel bundles."""
    return os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")


def _openblas_in(folder: str) -> tuple[Callable, Callable] | None:
    """(get, set) of the thread count of the bundled OpenBLAS in a wheel's `.libs` folder."""
    for lib in openblas_libraries(folder):
        for suffix in ("64_", ""):
            get = getattr(lib, f"scipy_openblas_get_num_threads{suffix}", None)
            set_ = getattr(lib, f"scipy_openblas_set_num_threads{suffix}", None)
            if get is not None and set_ is not None:
                get.restype, set_.argtypes = ctypes.c_int, [ctypes.c_int]
                return get, set_
    return None


@functools.lru_cache(maxsize=1)
def _openblas() -> tuple[Callable, Callable] | None:
    """(get, set) of the thread count of NumPy's bundled OpenBLAS, or None."""
    return _openblas_in(numpy_libs())


def openblas_known() -> bool:
    """Whether NumPy's OpenBLAS is the bundled one, whose thread count tracegrad can set."""
    return _openblas() is not None


_scipy_found: list = []  # [(get, set) or None] once looked for


def _scipy_openblas() -> tuple[Callable, Callable] | None:
    """The same for SciPy's own bundled OpenBLAS (its LAPACK: solve_triangular), once SciPy's
    linear algebra is imported (None before, so that this never imports SciPy)."""
    if not _scipy_found:
        module = sys.modules.get("scipy.linalg")
        if module is None:
            return None  # looked for again next time
        site = os.path.dirname(os.path.dirname(os.path.dirname(module.__file__)))
        _scipy_found.append(_openblas_in(os.path.join(site, "scipy.libs")))
    return _scipy_found[0]


@contextlib.contextmanager
def one_thread():
    """Run the block with NumPy's (and, once imported, SciPy's) OpenBLAS on one thread."""
    libraries = [lib for lib in (_openblas(), _scipy_openblas()) if lib is not None]
    with _lock:
        if _state["active"] == 0:
            _state["saved"] = [(set_, get()) for get, set_ in libraries]
            for set_, count in _state["saved"]:
                if count > 1:
                    set_(1)
        _state["active"] += 1
    try:
        yield
    finally:
        with _lock:
            _state["active"] -= 1
            if _state["active"] == 0:
                for set_, count in _state["saved"]:
                    if count > 1:
                        set_(count)


def single_threaded(matmul: Callable = np.matmul) -> Callable:
    """`matmul` that runs on one OpenBLAS thread (as it is, without a known OpenBLAS)."""
    if _openblas() is None:
        return matmul

    def call(a, b, out=None):
        with one_thread():
            return matmul(a, b) if out is None else matmul(a, b, out=out)

    return call


def small_on_one_thread(fn: Callable, work: Callable[..., int]) -> Callable:
    """`fn` on one OpenBLAS thread when `work(*args)` (its multiply-adds) is below
    `SMALL_PRODUCT`: the factorisations and solves of np.linalg on small matrices."""

    def call(*args, **kwargs):
        if work(*args) >= SMALL_PRODUCT:
            return fn(*args, **kwargs)
        with one_thread():
            return fn(*args, **kwargs)

    call.__name__ = getattr(fn, "__name__", "call")
    call.__wrapped__ = fn
    return call


class ThreadChoice:
    """One program's choice, for its small products, between one OpenBLAS thread and all of
    them, made from the timing of the program's own calls.

    Neither is right everywhere. On an idle machine all threads run the 10-64-64-1 network's
    products 1.4-1.9x faster; on a loaded one OpenBLAS's threads wait for each other and one
    thread was 11x faster (see the module docstring). So a program times its calls: after its
    first call (which loads or compiles), `EXPLORE` calls with each setting, alternating; the
    faster median is kept for `KEEP_S` seconds (and at least `KEEP_CALLS` calls), then both are
    timed again. Each check that confirms the setting doubles the time to the next one (up to
    `MAX_KEEP_S`): under load a check costs a few slow calls. A setting changes which threads
    compute the products, and with them how OpenBLAS rounds: its products on one thread and on
    several differ in the last bits (measured: float64 up to 6e-14 relative on an element of a
    300 x 64 by 64 x 64 product; float32 up to 1e-2 relative on an element with cancellation in a
    4096 x 10 by 10 x 512 product). So such a program's calls can give results that differ at
    rounding level while it explores, and after a check changes the setting (docs/limitations.md).
    Calls made from several threads at once share the setting; their timings all count.
    """

    EXPLORE = 3
    KEEP_S = 4.0
    MAX_KEEP_S = 64.0
    KEEP_CALLS = 50

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.one = True  # the setting calls use now: one thread (what was measured safe)
        self.clock = clock
        self.choices: list[bool] = []  # every setting chosen, in order (for tests and logs)
        self._lock = threading.Lock()
        self._samples: dict[bool, list[float]] = {True: [], False: []}
        self._exploring = True
        self._skip = 1  # the first call loads or compiles: not timed
        self._until, self._calls_left = 0.0, 0
        self._keep_s = self.KEEP_S
        self._single = single_threaded()

    def matmul(self, a, b, out=None):
        if self.one:
            return self._single(a, b, out)
        return np.matmul(a, b) if out is None else np.matmul(a, b, out=out)

    def timed(self, run: Callable) -> Callable:
        """`run`, timed while the choice is being made."""

        def call(*args):
            if not self._exploring:
                self._calls_left -= 1
                if self._calls_left > 0 or self.clock() < self._until:
                    return run(*args)
                with self._lock:
                    self._start_exploring()
            setting = self.one
            start = self.clock()
            out = run(*args)
            self._record(setting, self.clock() - start)
            return out

        return call

    def _start_exploring(self) -> None:
        if not self._exploring:
            self._exploring = True
            self._samples = {True: [], False: []}

    def _record(self, setting: bool, seconds: float) -> None:
        with self._lock:
            if not self._exploring:
                return
            if self._skip:
                self._skip -= 1
                return
            self._samples[setting].append(seconds)
            ones, alls = self._samples[True], self._samples[False]
            if min(len(ones), len(alls)) >= self.EXPLORE:
                self.one = float(np.median(ones)) <= float(np.median(alls))
                confirmed = bool(self.choices) and self.choices[-1] == self.one
                self._keep_s = min(2 * self._keep_s, self.MAX_KEEP_S) if confirmed else self.KEEP_S
                self.choices.append(self.one)
                self._exploring = False
                self._until = self.clock() + self._keep_s
                self._calls_left = self.KEEP_CALLS
            else:
                self.one = len(ones) <= len(alls)  # alternate, starting from one thread


def thread_choice() -> ThreadChoice | None:
    """A new program's choice of BLAS threads, or None where OpenBLAS is not known (products
    then run as NumPy runs them)."""
    return ThreadChoice() if _openblas() is not None else None
