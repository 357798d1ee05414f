"""Tiered execution: a new program answers at once on the NumPy interpreter, compiles meanwhile.

Compiling a program for the cpu backend costs Numba's start-up (importing it and its registries,
about half a second) and the compilation of its kernels (another half second or more), where
the optimised graph runs on the NumPy interpreter in milliseconds for small and medium arrays.
So the first calls of a new program run on the interpreter (the oracle the compiled backends are
tested against: exact), while one background thread compiles the program; the first call after
the compiled program is ready switches to it, for good.

- `TRACEGRAD_TIERED=0` turns it off: every program is compiled before its first call returns.
- `wait_compiled()` waits until every program compiling in the background is ready (for
  benchmarks, and before timing anything).
- A program whose interpreted work would be large (`MAX_WORK` element operations, about a
  tenth of a second on the interpreter) is compiled in the foreground, as without tiering.
- An error while compiling in the background is raised, as a `BackendError` naming the function
  and chained to the original error, by every later call of that program and by
  `wait_compiled()`; the results computed before were the interpreter's, exact.
- Threads: the compiled program replaces the interpreter only on the calling thread, between
  calls; Numba's own lock serialises its compilations. A process that exits while a program
  compiles waits for the step under way (importing Numba and loading the kernel modules, or
  compiling them) and starts no other, so that Numba's compiler is never torn down under a
  running compilation; a forked child starts with no worker and compiles again what its parent
  had not finished.
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..base import config
from .. import interpreter
from .. import primitives as P
from ..base.errors import BackendError
from ..ir import Graph
from ..base import progress
from .program import store_generation, fresh_flags, fresh_outputs

log = config.log

# element operations (the sum of the sizes of the values the graph computes, and NODE_COST for
# each node the interpreter visits) above which a program is compiled before its first call:
# about half a second on the interpreter, where compiling takes seconds
MAX_WORK = 1 << 27
# what the interpreter's visit of one node costs, in element operations (a few microseconds)
NODE_COST = 1000
# a while loop's trip count is known only when it runs: the work of this many trips is assumed
# (an interpreted call slower than that says so: progress.SLOW_INTERPRETED_S)
WHILE_TRIPS = 100
TIERED_BACKENDS = frozenset({"cpu"})
# a process exiting while a program compiles waits for it: this long without a word
EXIT_QUIET_S = 1.0


def enabled() -> bool:
    """Whether new programs run tiered (TRACEGRAD_TIERED, on unless set to 0/off/false/no)."""
    return config.tiered()


def interpreted_work(graph: Graph) -> int:
    """About how many element operations the interpreter spends on one call of `graph` (a loop:
    its body's times its trip count; a while loop's, unknown, WHILE_TRIPS)."""
    work = 0
    for node in graph.nodes:
        work += node.out.size + NODE_COST
        for value in node.params.values():
            if isinstance(value, Graph):
                steps = node.params.get("length", WHILE_TRIPS if "cond" in node.params else 1)
                work += steps * interpreted_work(value)
            elif isinstance(value, tuple) and value and isinstance(value[0], Graph):
                work += max(interpreted_work(g) for g in value)
    return work


_interpreted = [0]  # calls answered on the interpreter, in this process


def interpreted_calls() -> int:
    """How many calls of tiered programs this process has answered on the NumPy interpreter
    (while their kernels compiled): what a timing loop must not count as compiled."""
    return _interpreted[0]


def compile(backend: Any, graph: Graph, name: str = "a function") -> Any:
    """The executable of `graph` on `backend`: tiered where that pays, else compiled now."""
    if backend.name in TIERED_BACKENDS and enabled():
        work = interpreted_work(graph)
        if work <= MAX_WORK:
            return Tiered(backend, graph, name)
        job = progress.current()
        if job is not None:  # the progress line says why this call waits
            job.waits_because = (
                f"too large for the NumPy interpreter to answer first: about {work:.0e} "
                "element operations a call"
            )
    return backend.compile(graph)


class Tiered:
    """An executable that runs `graph` on the interpreter until its compiled program is ready.

    `CompiledCall` (program.py) attaches itself, so that the switch replaces its run and
    its fresh-output flags: after it, calls go straight to the compiled code."""

    def __init__(self, backend: Any, graph: Graph, name: str):
        self.backend, self.graph, self.name = backend, graph, name
        # Not vouched for: a caller holding these flags copies every result (the compiled
        # program's may alias), whichever run answers, before or after the switch
        self.fresh_outputs = (False,) * len(graph.outputs)
        self.compiled: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.submitted_in = -1  # the worker epoch it was queued in (a fork starts a new one)
        self.interpreted_calls = 0
        self._program: Any = None
        self.job: progress.CompileJob | None = None  # the foreground compile of its first call
        self.announced = False  # a line said that its calls run on the interpreter

    def attach(self, program: Any) -> None:
        self._program = program

    @property
    def ready(self) -> bool:
        return self.done.is_set()

    def __call__(self, arrays: Sequence[np.ndarray]) -> list:
        if self.done.is_set():
            return self._switch()(arrays)
        # arrays of their own: a caller on another thread may read the compiled program's
        # fresh-output flags, switched meanwhile, and copy nothing
        start = time.perf_counter()
        outs = fresh_outputs(interpreter.evaluate(self.graph, arrays), self.fresh_outputs, arrays)
        self.interpreted_calls += 1
        _interpreted[0] += 1
        job = progress.current()
        if job is not None:  # the first call: its progress line says how it was answered
            job.interpreted, self.job = True, job
        elif not self.announced and time.perf_counter() - start > progress.SLOW_INTERPRETED_S:
            self._say_slow(time.perf_counter() - start)
        if self.submitted_in != _worker.epoch:
            _worker.submit(self, arrays)
        return outs

    def _say_slow(self, seconds: float) -> None:
        """One line, once: a call ran slowly on the interpreter while the kernels compile."""
        self.announced = True
        if self.job is not None and self.job.shown:
            return  # its first line said so already
        sys.stderr.write(
            f"tracegrad: {self.name} ran on the NumPy interpreter ({seconds:.1f} s) while its "
            "kernels compile in the background; call tg.wait_compiled() before timing it\n"
        )
        sys.stderr.flush()

    def _switch(self):
        """The compiled executable (raising the background error if there was one), installed
        in the program this runs for."""
        if self.error is not None:
            raise BackendError(
                f"compiling {self.name} for the {self.backend.name} backend failed in the "
                f"background ({type(self.error).__name__}: {self.error}). Earlier calls ran on "
                f"the NumPy interpreter and were exact; set {config.TIERED}=0 to compile before the first "
                "call, or pass backend='numpy'."
            ) from self.error
        compiled = self.compiled
        program = self._program
        if program is not None and program.run is self:
            program.fresh = fresh_flags(compiled, len(self.graph.outputs))
            program.run = compiled
            store_generation[0] += 1  # the fast paths made with the interpreter's run are stale
        return compiled

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until compiled (or failed); False on a timeout. Starts compiling if it had not
        (a forked child)."""
        if not self.done.is_set() and self.submitted_in != _worker.epoch:
            _worker.submit(self, None)
        return self.done.wait(timeout)


class _Worker:
    """One daemon thread that compiles queued programs in order."""

    def __init__(self):
        self.epoch = 0
        self._reset()
        self._registered = False
        self._closing = False
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._after_fork)

    def _reset(self) -> None:
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)
        self.queue: collections.deque = collections.deque()
        self.pending: list[Tiered] = []
        self.failed: list[Tiered] = []  # failed since the last wait(): it raises their error
        self.thread: threading.Thread | None = None

    def _after_fork(self) -> None:  # the child has no worker thread: start afresh when needed
        self.epoch += 1
        self._reset()

    def submit(self, tiered: Tiered, arrays: Sequence[np.ndarray] | None) -> None:
        with self.lock:
            if tiered.submitted_in == self.epoch or tiered.done.is_set():
                return
            if self._closing:  # the interpreter is shutting down: compile nothing new
                return
            tiered.submitted_in = self.epoch
            self.queue.append((tiered, None if arrays is None else _snapshot(arrays)))
            self.pending.append(tiered)
            if self.thread is None:
                self._start()
            self.wake.notify()

    def _start(self) -> None:
        if not self._registered:
            # before Python joins threads and runs atexit handlers (Numba's, llvmlite's among
            # them): finish the compilation under way, drop the queue
            register = getattr(threading, "_register_atexit", None)
            if register is not None:
                register(self.close)
            else:  # pragma: no cover
                import atexit

                atexit.register(self.close)
            self._registered = True
        self.thread = threading.Thread(target=self._run, name="tracegrad-compile", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            with self.lock:
                while not self.queue and not self._closing:
                    self.wake.wait()
                if self._closing:
                    return
                tiered, arrays = self.queue.popleft()
            _compile(tiered, arrays)
            with self.lock:
                if tiered in self.pending:
                    self.pending.remove(tiered)
                if tiered.error is not None:
                    self.failed.append(tiered)

    def close(self) -> None:
        with self.lock:
            self._closing = True
            self.queue.clear()
            self.wake.notify_all()
            thread = self.thread
            pending = [t.name for t in self.pending]
        if thread is not None and thread is not threading.current_thread():
            thread.join(EXIT_QUIET_S)
            if thread.is_alive():  # a compilation under way: say why the exit waits
                with contextlib.suppress(OSError, ValueError):
                    sys.stderr.write(
                        f"tracegrad: the process waits for the compilation of "
                        f"{pending[0] if pending else 'a program'} under way in the background "
                        "before it exits (a compilation cannot be stopped halfway); "
                        f"{config.TIERED}=0 compiles before a first call returns instead\n"
                    )
                    sys.stderr.flush()
            thread.join()

    def wait(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            pending = list(self.pending)
        for tiered in pending:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not tiered.wait(left):
                return False
        with self.lock:
            failed, self.failed = self.failed, []
        if failed:
            failed[0]._switch()  # raises its error
        return True


# The first call's arrays that the background run keeps copies of: index and mask arrays, and
# every array up to this size. The caller may change its arrays once the call has returned; a
# kept copy of an index can never point outside its array (the interpreter has run on it).
_COPY_BYTES = 1 << 20


def _snapshot(arrays: Sequence[np.ndarray]) -> list:
    return [a.copy() if a.dtype.kind in "biu" or a.nbytes <= _COPY_BYTES else a for a in arrays]


def _is_data_error(exc: BaseException) -> bool:
    """An error of the data (an IndexError or a LinAlgError, from a large array the caller
    changed after its call), not of Numba, of the code generator or of the machine."""
    module = type(exc).__module__ or ""
    data = isinstance(exc, (IndexError, ValueError, ArithmeticError))
    return data and not module.startswith(("numba", "llvmlite", "tracegrad"))


def _compile(tiered: Tiered, arrays: list | None) -> None:
    """Compile a program, and run it once on the first call's arrays (unless it draws random
    numbers): Numba compiles each kernel for its argument types when it is first called. Its results are dropped; an error of the data
    in that run (not of the compiler) leaves the program compiled, and the next call that meets
    such data raises it itself."""
    with progress.compiling(tiered.name, tiered.backend.name, background=True) as job:
        _compile_on(tiered, arrays)
    if tiered.compiled is None and tiered.error is None:
        return  # the process is exiting
    try:
        foreground = tiered.job
        deadline = time.monotonic() + 1.0
        while foreground is not None and not foreground.finished and time.monotonic() < deadline:
            time.sleep(0.01)  # its line ends when the first call returns: this one comes after
        announced = tiered.announced or (foreground is not None and foreground.shown)
        job.finish_background(announced, tiered.error)
    finally:  # after the line: what a caller prints once wait_compiled() returns comes after it
        tiered.done.set()


def _compile_on(tiered: Tiered, arrays: list | None) -> None:
    start = time.perf_counter()
    try:
        compiled = tiered.backend.compile(tiered.graph)  # imports Numba, loads the modules
        if _worker._closing:  # the process is exiting: do not start Numba's compiler now
            return
        if arrays is None:
            arrays = [np.zeros(v.shape, v.dtype) for v in tiered.graph.inputs]
        # A program that draws random numbers is not run here: the run would draw from the
        # user's generator, and every later call would get the numbers one draw late. Its
        # kernels compile on its first compiled call instead.
        try:
            if not P.draws_in(tiered.graph.nodes):
                compiled(arrays)
        except Exception as exc:
            if not _is_data_error(exc):
                raise
            log.info("tracegrad: the background run of %s met %r (the data)", tiered.name, exc)
    except BaseException as exc:  # surfaced by the program's next call
        tiered.error = exc
        log.info("tracegrad: compiling %s in the background failed: %r", tiered.name, exc)
    else:
        tiered.compiled = compiled
        log.info(
            "tracegrad: compiled %s in the background (%.2f s)",
            tiered.name,
            time.perf_counter() - start,
        )


_worker = _Worker()


def wait_compiled(timeout: float | None = None) -> bool:
    """Wait until every program compiling in the background is ready.

    With tiered execution (the default; `TRACEGRAD_TIERED=0` turns it off), a new program's first
    calls run on the NumPy interpreter while its kernels compile on a background thread. Call
    this before timing compiled code. Returns False if `timeout` seconds passed first; raises
    the `BackendError` of a program whose compilation failed since the last call.

    >>> import tracegrad as tg
    >>> tg.wait_compiled()
    True
    """
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, (int, float, np.integer, np.floating))
    ):
        raise TypeError(
            f"wait_compiled: timeout must be a number of seconds or None, got {timeout!r}"
        )
    return _worker.wait(timeout)
