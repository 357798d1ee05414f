"""What a compilation tells the user: true progress lines, per-kernel logs, a size guard.

- A compilation in the foreground (tracing, planning and compiling a program's kernels, up to
  the end of its first call) that takes more than `SHOW_AFTER_S` seconds writes one line on
  stderr: what is compiled, for which backend, and the stage it is at; when it ends, the line is
  finished with what happened: the kernels compiled and those loaded from disk, or that the first
  call was answered on the NumPy interpreter while the kernels compile in the background, or
  why the call waited for them (a program too large for the interpreter).
- A compilation in the background (tiered.py) writes one line when it ends, if the program had
  already been announced, took more than `SHOW_AFTER_S` or failed; a call on the interpreter
  that takes more than `SLOW_INTERPRETED_S` while it compiles says so once, with the call to
  make before timing (`tg.wait_compiled()`). So a program writes at most two lines: one while it
  is pending, one when it is compiled; never one per kernel.
- `TRACEGRAD_LOG=compile` logs every kernel with the seconds Numba took and whether its machine
  code came from the disk cache.
- `check_size` stops a program whose generated source would exceed `MAX_SOURCE_CHARS`, naming
  the user's line that made most of its nodes, instead of letting the compiler exhaust memory.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator

from . import config

log = config.log

SHOW_AFTER_S = 2.0
# an interpreted call this long, while the compiled program is not ready, is worth a line
SLOW_INTERPRETED_S = 1.0

_local = threading.local()

# how a kernel came by its machine code, as the progress line and the compile log say it
COMPILED, FROM_DISK, IN_MEMORY = "compiled", "loaded from disk", "already in memory"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class CompileJob:
    """One compilation under way on this thread: in the foreground (a call waits for it, and
    its line shows after SHOW_AFTER_S) or in the background (one line at the end, see
    `finish_background`)."""

    def __init__(self, what: str, backend: str = "cpu", stream=None, background: bool = False):
        self.what, self.backend, self.background = what, backend, background
        self.planned = 0  # kernels the program's plan holds
        self.compiled = 0  # kernels Numba compiled ...
        self.loaded = 0  # ... those whose machine code came from the disk cache ...
        self.reused = 0  # ... and those this process had compiled or loaded before
        self.interpreted = False  # the first call was answered on the NumPy interpreter
        self.waits_because = ""  # why the call waits for the kernels, when tiering is on
        self.why_said = False  # ... said already, by the line's stage
        self.start = time.monotonic()
        self.stream = stream if stream is not None else sys.stderr
        self.shown = False
        self.line_open = False  # the line shown waits for its end
        self.finished = False
        self._lock = threading.Lock()
        self._timer = None
        if not background:
            self._timer = threading.Timer(SHOW_AFTER_S, self._show)
            self._timer.daemon = True
            self._timer.start()

    def add_kernels(self, n: int) -> None:
        with self._lock:
            self.planned += n

    def kernel_done(self, how: str = COMPILED) -> None:
        with self._lock:
            if how == FROM_DISK:
                self.loaded += 1
            elif how == IN_MEMORY:
                self.reused += 1
            else:
                self.compiled += 1

    @property
    def done(self) -> int:
        return self.compiled + self.loaded + self.reused

    def kernels_text(self) -> str:
        """'5 kernels compiled, 2 loaded from disk', '' when none were planned."""
        if not self.planned:
            return ""
        parts = []
        for n, how in (
            (self.compiled, COMPILED),
            (self.loaded, FROM_DISK),
            (self.reused, IN_MEMORY),
        ):
            if n or (how == COMPILED and not self.done):
                parts.append(f"{str(n) if parts else _plural(n, 'kernel')} {how}")
        rest = self.planned - self.done
        if rest > 0:
            parts.append(f"{rest} more when first run")
        return ", ".join(parts)

    def _stage(self) -> str:
        if self.planned:
            said, self.why_said = self.waits_because, bool(self.waits_because)
            why = f" before the first call ({said})" if said else ""
            return f"{self.done}/{_plural(self.planned, 'kernel')} done{why}"
        return "tracing, differentiating and planning"

    def _show(self) -> None:
        with self._lock:
            if self.finished:
                return
            self.shown = True
            elapsed = time.monotonic() - self.start
            # with each kernel logged (TRACEGRAD_LOG=compile), the line ends here, and its end
            # comes as a line of its own
            self.line_open = not _log_compile()
            self.stream.write(
                f"tracegrad: compiling {self.what} ({self.backend}): {self._stage()} after "
                f"{elapsed:.0f} s ...{'' if self.line_open else chr(10)}"
            )
            self.stream.flush()

    def ending(self, elapsed: float) -> str:
        """How the line of a foreground compilation ends: what the call did."""
        if self.interpreted:
            return (
                f" answered in {elapsed:.1f} s on the NumPy interpreter; the kernels compile in "
                "the background (tg.wait_compiled() waits for them)"
            )
        if self.backend == "numpy":
            return f" done in {elapsed:.1f} s (the numpy backend compiles no kernels)"
        kernels = self.kernels_text()
        unsaid = self.waits_because and not self.why_said
        why = f" (before the first call: {self.waits_because})" if unsaid else ""
        return f" done in {elapsed:.1f} s" + (f": {kernels}" if kernels else "") + why

    def finish(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            self.finished = True
            if self.shown:
                head = (
                    "" if self.line_open else f"tracegrad: compiling {self.what} ({self.backend}):"
                )
                self.stream.write(head + self.ending(time.monotonic() - self.start) + "\n")
                self.stream.flush()

    def finish_background(self, announced: bool, error: BaseException | None = None) -> None:
        """The one line of a background compilation: when the program was announced before
        (`announced`), took longer than SHOW_AFTER_S, or failed."""
        elapsed = time.monotonic() - self.start
        self.finished = True
        if error is not None:
            line = (
                f"tracegrad: compiling {self.what} ({self.backend}) in the background failed "
                f"after {elapsed:.1f} s ({type(error).__name__}: {error}); its next call raises "
                "the error"
            )
        elif announced or elapsed > SHOW_AFTER_S:
            kernels = self.kernels_text()
            line = (
                f"tracegrad: {self.what} ({self.backend}) is compiled, in the background in "
                f"{elapsed:.1f} s{': ' + kernels if kernels else ''}; its calls run compiled now"
            )
        else:
            return
        with contextlib.suppress(OSError, ValueError):  # a closed stream: the line is lost
            self.stream.write(line + "\n")
            self.stream.flush()


@contextlib.contextmanager
def compiling(what: str, backend: str = "cpu", background: bool = False) -> Iterator[CompileJob]:
    """Track the compilation of `what` on this thread (nested ones report to the outer one)."""
    outer = getattr(_local, "job", None)
    if outer is not None:
        yield outer
        return
    job = CompileJob(what, backend, background=background)
    _local.job = job
    try:
        yield job
    finally:
        _local.job = None
        if not background:
            job.finish()


def current() -> CompileJob | None:
    return getattr(_local, "job", None)


def kernels_planned(n: int) -> None:
    job = current()
    if job is not None:
        job.add_kernels(n)


def kernel_compiled(
    label: str, seconds: float, how: str = COMPILED, job: CompileJob | None = None
) -> None:
    """A kernel's first call in a program returned: Numba compiled it, loaded it from disk, or
    had it in memory (`how`). It counts for `job`, else for this thread's compilation."""
    job = job if job is not None else current()
    if job is not None:
        job.kernel_done(how)
    if _log_compile():
        log.info("tracegrad: kernel %s %s in %.2f s", label, how, seconds)


def functions_compiled(label: str, seconds: float, how: str, kernels: int) -> None:
    """One compiled function that calls `kernels` kernels (a program's `run`, cpu/runner.py;
    a scan's loop, cpu/scan_loop.py) was compiled or loaded: they all were with it."""
    job = current()
    if job is not None:
        for _ in range(kernels):
            job.kernel_done(how)
    if _log_compile():
        calls = _plural(kernels, "kernel")
        log.info("tracegrad: %s (calling %s) %s in %.2f s", label, calls, how, seconds)


def _log_compile() -> bool:
    return config.log_enabled("compile")


def how_made(dispatcher, had: bool) -> str:
    """How a Numba dispatcher came by its machine code, after its first call: IN_MEMORY if it
    `had` some before, FROM_DISK if its disk cache gave it, else COMPILED."""
    if had:
        return IN_MEMORY
    stats = getattr(dispatcher, "stats", None)
    hits = getattr(stats, "cache_hits", None)
    misses = getattr(stats, "cache_misses", None)
    if hits and sum(hits.values()) > 0 and not (misses and sum(misses.values())):
        return FROM_DISK
    return COMPILED


def has_code(dispatcher) -> bool:
    """Whether a Numba dispatcher holds machine code already (compiled or loaded before)."""
    return bool(getattr(dispatcher, "signatures", None))


def timed_first_call(namespace: dict, key: str, kernel, label: str):
    """A stand-in for `namespace[key]` that times the kernel's first call (where Numba compiles
    or loads it), reports it, and puts the kernel itself in its place."""
    lock = threading.Lock()
    reported = []
    # the compilation this program is built in: its first call may run a kernel on a thread of
    # the pool, which has no compilation of its own
    job = current()

    def first(*args):
        had = has_code(kernel)
        start = time.perf_counter()
        out = kernel(*args)
        with lock:
            if not reported:
                reported.append(True)
                namespace[key] = kernel
                kernel_compiled(label, time.perf_counter() - start, how_made(kernel, had), job)
        return out

    return first
