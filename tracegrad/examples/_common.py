"""What every example shares: printing, progress lines, the backend, and optional plotting."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import tracegrad as tg
from tracegrad.runtime import backends
from tracegrad.base import config
from tracegrad.runtime import tiered


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
    if requested:
        how = ""
    elif config.backend():
        how = " (from TRACEGRAD_BACKEND)"
    else:
        how = " (fastest available here)"
    out(f"{title}")
    out(f"backend: {backend}{how}")
    out()


def check_positive(name: str, value: int, minimum: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ExampleError(
            f"--{name} must be an integer of at least {minimum}, got {value!r}", usage=True
        )
    return value


class Progress:
    """Training progress: a line every `every` steps (about ten lines a run) and a summary.

    Give the transforms the loop calls as `watch`: a step during which one of them traced and
    compiled (its `trace_count` grew) is timed apart from the others, so the speed reported is
    that of the steps that ran already-compiled programs, whichever step the compiling fell in.
    Without `watch`, the first step is assumed to be the one that compiles. A step answered on
    the NumPy interpreter while its kernels compiled in the background (tiered execution) is
    counted apart too: it ran no compiled program.
    """

    def __init__(
        self,
        out: Printer,
        name: str,
        total: int,
        every: int | None = None,
        unit: str = "step",
        label: str = "loss",
        show_total: bool = True,
        watch: Sequence[Any] = (),
    ):
        self.out, self.name, self.total = out, name, total
        self.every = every or max(1, total // 10)
        self.unit, self.label, self.show_total = unit, label, show_total
        self.watch = tuple(watch)
        self.width = len(str(total))
        self.start = time.perf_counter()
        self.first: float | None = None  # seconds taken by step 1
        self.last_time = self.start
        self.loss = float("nan")
        self._traces = self._trace_total()
        self._interpreted = tiered.interpreted_calls()
        self.compiled_steps, self.compile_seconds = 0, 0.0  # steps that traced and compiled
        # steps answered on the interpreter while the kernels compiled in the background
        self.interpreted_steps, self.interpreted_seconds = 0, 0.0
        self.steady_steps, self.steady_seconds = 0, 0.0  # steps that only ran compiled programs
        # since the last line: steady steps, their seconds, compiling steps, interpreted steps
        self._window = [0, 0.0, 0, 0]

    def _trace_total(self) -> int:
        return sum(t.trace_count for t in self.watch)

    def _where(self, i: int) -> str:
        total = f"/{self.total}" if self.show_total else ""
        return f"  {self.unit} {i:>{self.width}}{total}  {self.label} {self.loss:<11.6g}"

    def step(self, i: int, loss: float) -> None:
        """Record step i (1-based), just finished, and its loss; print a line when it is time."""
        now = time.perf_counter()
        seconds, self.last_time = now - self.last_time, now
        self.loss = float(loss)
        traces = self._trace_total()
        compiled = traces != self._traces if self.watch else i == 1
        self._traces = traces
        interpreted = tiered.interpreted_calls()
        on_interpreter, self._interpreted = interpreted != self._interpreted, interpreted
        if compiled:
            self.compiled_steps += 1
            self.compile_seconds += seconds
            self._window[2] += 1
        elif on_interpreter:
            self.interpreted_steps += 1
            self.interpreted_seconds += seconds
            self._window[3] += 1
        else:
            self.steady_steps += 1
            self.steady_seconds += seconds
            self._window[0] += 1
            self._window[1] += seconds
        if i == 1:
            self.first = seconds
            if not self.watch:
                how = "including any tracing and compiling"
            else:
                how = (
                    "with tracing and compiling"
                    if compiled
                    else "its programs were already compiled"
                )
            self.out(f"{self._where(1)}  (first {self.unit}: {seconds:.3f} s, {how})")
            self._window = [0, 0.0, 0, 0]
        elif i % self.every == 0 or i == self.total:
            steady, steady_seconds, compiling, interpreting = self._window
            notes = [f"+{compiling} tracing and compiling"] if compiling else []
            if interpreting:
                notes.append(f"+{interpreting} on the NumPy interpreter")
            note = f" ({', '.join(notes)})" if notes else ""
            if steady:
                rate = steady / max(steady_seconds, 1e-9)
                self.out(f"{self._where(i)}  {rate:>9,.0f} {self.unit}s/s{note}")
            elif interpreting and not compiling:
                self.out(f"{self._where(i)}  (on the NumPy interpreter: kernels compiling)")
            else:
                self.out(f"{self._where(i)}  (tracing and compiling)")
            self._window = [0, 0.0, 0, 0]

    def done(self, steps: int | None = None, extra: str = "") -> dict[str, float]:
        """Print the one-line summary; return the timings."""
        steps = self.total if steps is None else steps
        elapsed = time.perf_counter() - self.start
        rate = self.steady_steps / max(self.steady_seconds, 1e-9) if self.steady_steps else 0.0
        measured = []
        if self.steady_steps:
            measured.append(
                f"{rate:,.0f} {self.unit}s/s over the {self.steady_steps:,} that ran "
                "compiled programs"
            )
        if self.interpreted_steps:
            s = "s" if self.interpreted_steps != 1 else ""
            measured.append(
                f"{self.interpreted_steps:,} {self.unit}{s} on the NumPy interpreter while the "
                f"kernels compiled in the background ({self.interpreted_seconds:.2f} s)"
            )
        if self.compiled_steps:
            s = "s" if self.compiled_steps != 1 else ""
            measured.append(
                f"{self.compiled_steps} {self.unit}{s} with tracing and compiling "
                f"took {self.compile_seconds:.3f} s"
            )
        elif self.watch:
            measured.append("nothing traced or compiled (the programs were cached)")
        line = f"{self.name}: {steps:,} {self.unit}s in {elapsed:.2f} s"
        line += (": " + ", ".join(measured)) if measured else ""
        line += f"; final {self.label} {self.loss:.6g}" + (f"; {extra}" if extra else "")
        self.out(line)
        return {
            "seconds": elapsed,
            "first_step_seconds": self.first or 0.0,
            "steps_per_second": rate,
            "compiled_steps": self.compiled_steps,
            "compile_seconds": self.compile_seconds,
        }


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
        raise ExampleError(
            f"cannot write the plot to {os.fspath(plot)}: folder {folder} does not exist",
            usage=True,
        )


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
