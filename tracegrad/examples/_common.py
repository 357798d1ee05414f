"""What every example shares: printing, progress lines, the backend, and optional plotting."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import tracegrad as tg
from tracegrad import backends


class ExampleError(Exception):
    """A problem the user can fix (a missing optional package, a bad option): message + hint.

    `usage` marks a bad option value: the command line exits with status 2 for it."""

    def __init__(self, message: str, hint: str = "", usage: bool = False):
        super().__init__(message)
        self.hint = hint
        self.usage = usage


class Printer:
    """print(), unless quiet. Lines are flushed so progress shows as it happens."""

    def __init__(self, quiet: bool = False, stream=None):
        self.quiet = quiet
        self.stream = stream

    def __call__(self, text: str = "") -> None:
        if not self.quiet:
            print(text, file=self.stream or sys.stdout, flush=True)


def resolve_backend(backend: str | None) -> str:
    """The backend to run on: the one asked for, else the fastest available here.

    Raises `tracegrad.BackendError` (with a hint) for an unknown or unusable name.
    """
    name = backend or tg.default_backend_name()
    backends.get_backend(name)
    return name


def header(out: Printer, title: str, backend: str, requested: str | None) -> None:
    how = "" if requested else " (fastest available here)"
    out(f"{title}")
    out(f"backend: {backend}{how}")
    out()


def check_positive(name: str, value: int, minimum: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ExampleError(f"--{name} must be an integer of at least {minimum}, got {value!r}",
                           usage=True)
    return value


class Progress:
    """Training progress: a line every `every` steps (about ten lines a run) and a summary.

    The first step is timed on its own, since it includes tracing and compiling (unless the
    program is already cached); the speed in steps/s is measured over the steps after it.
    """

    def __init__(self, out: Printer, name: str, total: int, every: int | None = None,
                 unit: str = "step", label: str = "loss", show_total: bool = True):
        self.out, self.name, self.total = out, name, total
        self.every = every or max(1, total // 10)
        self.unit, self.label, self.show_total = unit, label, show_total
        self.width = len(str(total))
        self.start = time.perf_counter()
        self.first: float | None = None  # seconds taken by step 1
        self.last_time = self.start
        self.last_step = 0
        self.loss = float("nan")

    def _where(self, i: int) -> str:
        total = f"/{self.total}" if self.show_total else ""
        return f"  {self.unit} {i:>{self.width}}{total}  {self.label} {self.loss:<11.6g}"

    def step(self, i: int, loss: float) -> None:
        """Record step i (1-based) and its loss; print a line when it is time."""
        now = time.perf_counter()
        self.loss = float(loss)
        if i == 1:
            self.first = now - self.start
            self.out(f"{self._where(1)}  (first {self.unit}: {self.first:.3f} s, with tracing and compiling)")
            self.last_time, self.last_step = now, 1
        elif i % self.every == 0 or i == self.total:
            rate = (i - self.last_step) / max(now - self.last_time, 1e-9)
            self.out(f"{self._where(i)}  {rate:>9,.0f} {self.unit}s/s")
            self.last_time, self.last_step = now, i

    def done(self, steps: int | None = None, extra: str = "") -> dict[str, float]:
        """Print the one-line summary; return the timings."""
        steps = self.total if steps is None else steps
        elapsed = time.perf_counter() - self.start
        first = self.first if self.first is not None else elapsed
        rate = (steps - 1) / max(elapsed - first, 1e-9) if steps > 1 else 0.0
        tail = f"; {extra}" if extra else ""
        self.out(
            f"{self.name}: {steps:,} {self.unit}s in {elapsed:.2f} s ({rate:,.0f} {self.unit}s/s after a "
            f"{first:.3f} s first {self.unit}), final {self.label} {self.loss:.6g}{tail}"
        )
        return {"seconds": elapsed, "first_step_seconds": first, "steps_per_second": rate}


def new_figure(size: tuple[float, float] = (6.0, 4.0)):
    """A matplotlib Figure that draws off-screen, without touching pyplot's global state."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ExampleError(
            "--plot needs matplotlib, an optional dependency that is not installed",
            hint='install it with: python3 -m pip install matplotlib   (or: python3 -m pip install -e ".[plot]")',
        ) from None
    return Figure(figsize=size, layout="constrained")


def check_plot_path(plot: str | os.PathLike | None) -> None:
    """Fail before the work, not after it, when the plot cannot be written."""
    if plot is None:
        return
    new_figure()  # raises ExampleError if matplotlib is missing
    folder = os.path.dirname(os.path.abspath(os.fspath(plot)))
    if not os.path.isdir(folder):
        raise ExampleError(f"cannot write the plot to {os.fspath(plot)}: folder {folder} does not exist",
                           usage=True)


def save(fig, plot: str | os.PathLike, out: Printer) -> str:
    path = os.fspath(plot)
    fig.savefig(path, dpi=120)
    out(f"plot saved to {path}")
    return path


def no_plot(name: str, plot: Any) -> None:
    if plot is not None:
        raise ExampleError(f"the {name} example draws no plot", hint="leave out --plot", usage=True)


def timed(fun: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fun()
    return result, time.perf_counter() - start
