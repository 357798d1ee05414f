"""What a long compilation tells the user: one progress line, per-kernel logs, a size guard.

- A compilation (tracing, planning and compiling a program's kernels, up to the end of its first
  call) that takes more than `SHOW_AFTER_S` seconds writes one line on stderr saying what is being
  compiled and how many of its kernels are done, finished with the total time when it ends.
- `TRACEGRAD_LOG=compile` logs every kernel with the time Numba took to compile (or load) it.
- `check_size` stops a program whose generated source would exceed `MAX_SOURCE_CHARS`, naming
  the user's line that made most of its nodes, instead of letting the compiler exhaust memory.
"""

from __future__ import annotations

import collections
import contextlib
import sys
import threading
import time
from collections.abc import Iterator

from .. import config
from ..errors import TracingError
from ..ir import Graph

log = config.log

SHOW_AFTER_S = 2.0
# Far above any program the fusion planner makes for a graph of a few thousand nodes (a kernel is
# a few kilobytes), far below what makes Numba run out of memory.
MAX_SOURCE_CHARS = 8_000_000
# Planning and compiling a graph of this many nodes takes minutes: stop and say why instead.
MAX_GRAPH_NODES = 25_000

_local = threading.local()


class CompileJob:
    """One compilation under way on this thread."""

    def __init__(self, what: str, stream=None):
        self.what = what
        self.total = 0
        self.done = 0
        self.start = time.monotonic()
        self.stream = stream if stream is not None else sys.stderr
        self.shown = False
        self.finished = False
        self._lock = threading.Lock()
        self._timer = threading.Timer(SHOW_AFTER_S, self._show)
        self._timer.daemon = True
        self._timer.start()

    def add_kernels(self, n: int) -> None:
        with self._lock:
            self.total += n

    def kernel_done(self) -> None:
        with self._lock:
            self.done += 1

    def _show(self) -> None:
        with self._lock:
            if self.finished:
                return
            self.shown = True
            elapsed = time.monotonic() - self.start
            stage = (
                f"{self.done}/{self.total} kernels done"
                if self.total
                else "tracing, differentiating and planning"
            )
            self.stream.write(
                f"tracegrad: compiling {self.what}: {stage} after {elapsed:.0f} s ..."
            )
            self.stream.flush()

    def finish(self) -> None:
        self._timer.cancel()
        with self._lock:
            self.finished = True
            if self.shown:
                elapsed = time.monotonic() - self.start
                self.stream.write(f" done: {self.total} kernels in {elapsed:.1f} s\n")
                self.stream.flush()


@contextlib.contextmanager
def compiling(what: str) -> Iterator[CompileJob]:
    """Track the compilation of `what` on this thread (nested ones report to the outer one)."""
    outer = getattr(_local, "job", None)
    if outer is not None:
        yield outer
        return
    job = CompileJob(what)
    _local.job = job
    try:
        yield job
    finally:
        _local.job = None
        job.finish()


def current() -> CompileJob | None:
    return getattr(_local, "job", None)


def kernels_planned(n: int) -> None:
    job = current()
    if job is not None:
        job.add_kernels(n)


def kernel_compiled(label: str, seconds: float) -> None:
    job = current()
    if job is not None:
        job.kernel_done()
    if _log_compile():
        log.info("tracegrad: kernel %s compiled or loaded in %.2f s", label, seconds)


def _log_compile() -> bool:
    return config.log_enabled("compile")


def timed_first_call(namespace: dict, key: str, kernel, label: str):
    """A stand-in for `namespace[key]` that times the kernel's first call (where Numba compiles
    or loads it), reports it, and puts the kernel itself in its place."""
    lock = threading.Lock()
    reported = []

    def first(*args):
        start = time.perf_counter()
        out = kernel(*args)
        with lock:
            if not reported:
                reported.append(True)
                namespace[key] = kernel
                kernel_compiled(label, time.perf_counter() - start)
        return out

    return first


class ProgramTooLarge(TracingError):
    """The generated code of a program would be too large to compile."""


def check_graph(graph: Graph, backend: str) -> None:
    """Before planning: a graph beyond `MAX_GRAPH_NODES` would take minutes to plan and compile."""
    if len(graph.nodes) > MAX_GRAPH_NODES:
        _too_large(graph, backend, f"{len(graph.nodes)} nodes, over the {MAX_GRAPH_NODES} limit")


def check_size(chars: int, graph: Graph, backend: str) -> None:
    if chars > MAX_SOURCE_CHARS:
        _too_large(
            graph,
            backend,
            f"{chars / 1e6:.1f} MB of source, over the {MAX_SOURCE_CHARS / 1e6:.0f} MB limit",
        )


def _too_large(graph: Graph, backend: str, what: str) -> None:
    # the user's line, without the mark of the transform that made the node ("grad file:line")
    lines = collections.Counter(
        node.source.rsplit(" ", 1)[-1] for node in graph.nodes if node.source
    )
    culprit = ""
    if lines:
        source, count = lines.most_common(1)[0]
        culprit = f" {count} of its {len(graph.nodes)} nodes come from {source}."
    raise ProgramTooLarge(
        f"tracegrad: the {backend} program would be too large to compile ({what}).{culprit} A "
        "Python loop that tracegrad cannot roll (see docs/limitations.md) is the usual cause: "
        "write it with tg.fori_loop or tg.scan, or run this function on backend='numpy'."
    )
