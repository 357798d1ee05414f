"""NumPy arrays the function reaches by name and indexes with traced values: `X[i]`, where `X` is
a global (a closure variable, an attribute of an object the function reaches...) and `i` is
traced (`i = np.floor(x).astype(int)`).

NumPy indexes a plain ndarray itself: it converts the indices with `__array__`, which a traced
value cannot answer, and no NumPy hook hands the indexing to tracegrad. So when a trace meets such
an indexing (`Tracer.__array__`, asked by the subscript the user's frame is running, for an array
the scope found: tracing/scope.py), the trace stops (`IndexedByTraced`) and the function is traced
again from the start with that array replaced where it lives by an `IndexableArray`, as
random_draws.py replaces generators: a view of the same memory that is the array in everything
but a traced index, which it hands to the array's traced form, a hidden input read afresh on every
call like every array the function reaches. The original is put back when the trace ends, and the
program keeps no stand-in.

An array that cannot be replaced where it lives (an item of a tuple, a view no name holds, an
array made inside the function by a function tracegrad does not trace) keeps the error, which says
what to write instead.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import ir
from ..trace import Tracer, to_var
from .dispatch import provides
from .fillable import traced_form, holds_traced
from .guards import Path, parent_and_step, read_step, write_step
from .source import user_source

# traces that install stand-ins take one lock, so two threads never install them over each other
_LOCK = threading.RLock()


class IndexedByTraced(BaseException):
    """The trace met `X[traced]` for the array at `path`: trace again with it stood in for
    (calls/derive.trace_program catches it). A BaseException, so that an `except Exception:` in
    the user's code does not swallow it."""

    def __init__(self, path: Path):
        super().__init__(path.description)
        self.path = path


@provides("indexed_plain_array")
def restart_for(container: np.ndarray) -> None:
    """Called when NumPy converts a traced index of the plain array `container`: raises
    `IndexedByTraced` when the running top-level trace can stand in for it, else returns (the
    caller raises the error)."""
    builder = ir.active_builder()
    scope = builder.root.scope if builder is not None else None
    if scope is None:
        return
    path = scope.path_of(container)
    if path is None or not path.steps or path in scope.stand_ins:
        return
    try:  # only where a value can be bound (a dict item, an attribute, a cell; not a tuple)
        parent, step = parent_and_step(path, scope.roots)
        write_step(parent, step, read_step(parent, step))
    except Exception:
        return
    raise IndexedByTraced(path)


def build_with_stand_ins(walk: Callable[[], Any], build: Callable[[Any], Any]) -> tuple[Any, Any]:
    """`(scope, build(scope))` for a fresh `scope = walk()`: run again, with one more stand-in,
    each time the build meets an array it can stand in for (bounded: a path is stood in for once,
    and an array met again is the caller's error)."""
    stand_ins: tuple[Path, ...] = ()
    while True:
        scope = walk()
        scope.stand_ins = stand_ins
        try:
            with standing_in(scope):
                return scope, build(scope)
        except IndexedByTraced as again:
            stand_ins = (*stand_ins, again.path)


@provides("indexed_plain_array_advice")
def advice(container: np.ndarray) -> str:
    """What to write instead, for a plain array indexed by a traced value that no stand-in takes."""
    builder = ir.active_builder()
    scope = builder.root.scope if builder is not None else None
    path = scope.path_of(container) if scope is not None else None
    fix = (
        "pass it as an argument of the transformed function (it is then traced), or index a "
        "copy made inside the function: np.copy(A)[i] takes traced indices."
    )
    if path is None:
        return (
            " NumPy indexes a NumPy array itself and does not pass traced indices to tracegrad. "
            "This array is not one the function reaches by name (a global, a closure variable, "
            f"an attribute or item of those): {fix}"
        )
    return (
        f" NumPy indexes a NumPy array itself and does not pass traced indices to tracegrad. This "
        f"array is {path.description}, held where tracegrad cannot replace it while tracing (an "
        f"item of a tuple, a read-only attribute, a static argument): hold it in a list, a dict or "
        f"an attribute, or {fix}"
    )


@contextlib.contextmanager
def standing_in(scope: Any):
    """While the body traces, each array at `scope.stand_ins` is an `IndexableArray`."""
    if not scope.stand_ins:
        yield
        return
    with _LOCK:
        undo: list[tuple[Any, tuple[str, Any], Any]] = []
        try:
            for path in scope.stand_ins:
                parent, step = parent_and_step(path, scope.roots)
                original = read_step(parent, step)
                if isinstance(original, np.ndarray) and type(original) is not IndexableArray:
                    write_step(parent, step, IndexableArray.of(original))
                    undo.append((parent, step, original))
            yield
        finally:
            for parent, step, original in reversed(undo):
                write_step(parent, step, original)


class IndexableArray(np.ndarray):
    """A reachable array, where it lives while a trace runs, that takes traced indices. Every
    other use is the array's: NumPy functions and ufuncs get the array itself, views of it are
    views of the same memory, writes go into it. Outside the trace (another thread) it is a plain
    view of the array."""

    _tg_array: np.ndarray | None = None  # the array it stands for (None: a view of a stand-in)

    @staticmethod
    def of(array: np.ndarray) -> IndexableArray:
        stand_in = array.view(IndexableArray)
        stand_in._tg_array = array
        return stand_in

    def __array_finalize__(self, obj) -> None:
        self._tg_array = None

    def _tracegrad_current(self) -> np.ndarray:
        """The plain array (trace.operand reads it as the hidden input it is)."""
        array = self._tg_array
        return array if array is not None else self.view(np.ndarray)

    def __getitem__(self, index):
        if holds_traced(index):
            builder = ir.active_builder()
            if builder is not None:
                with ir.source_location(user_source()):
                    traced = Tracer(to_var(self._tracegrad_current(), builder), builder)
                return traced[traced_form(index)]
        return np.ndarray.__getitem__(self, index)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if "out" in kwargs:
            kwargs["out"] = _plain(kwargs["out"])
        return getattr(ufunc, method)(*_plain(inputs), **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return func(*_plain(args), **{k: _plain(v) for k, v in kwargs.items()})

    def __repr__(self) -> str:
        return repr(self._tracegrad_current())

    def __str__(self) -> str:
        return str(self._tracegrad_current())

    def __reduce__(self):
        return self._tracegrad_current().__reduce__()


def _plain(obj: Any) -> Any:
    if isinstance(obj, IndexableArray):
        return obj._tracegrad_current()
    if type(obj) in (list, tuple):
        return type(obj)(_plain(x) for x in obj)
    return obj
