"""Operands of the traced NumPy namespace (stage: tracing): what a handler makes of its arguments
(IR values, weakly typed Python numbers, constants, hidden inputs) and of an axis argument.

Handlers receive IR values (`Var`) for tracers and arrays at the top level, Python scalars as they
are, and anything nested (lists of arrays) raw; `as_var`/`as_operand` convert the rest: a list or
tuple that holds traced values (`np.sum([a, b * b])`) is stacked, as `np.array` would read it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import ir
from .. import primitives as P
from ..ir import Var
from ..trace import operand
from ..tracing.dispatch import FUNCTIONS
from ..tracing.source import at_source


def as_var(x: Any) -> Var:
    """An IR value: tracers arrive as values already; numbers and arrays become constants."""
    if isinstance(x, Var):
        return x
    if isinstance(x, np.ndarray):
        return _array_operand(x)
    if isinstance(x, (list, tuple)) and holds_value(x):
        return FUNCTIONS["stack"](
            [as_var(item) for item in x]
        )  # equal shapes, as np.array requires
    return P.const(_array(x))


def holds_value(x: list | tuple) -> bool:
    """Whether a list or tuple holds an IR value (a traced value), also in nested lists."""
    return any(
        isinstance(item, Var) or (isinstance(item, (list, tuple)) and holds_value(item))
        for item in x
    )


def read_while_tracing(x: np.ndarray) -> None:
    """Tracing is about to use the contents of the array `x` (a static index or mask, baked into
    the program): if the function read it from outside its arguments, those contents are guarded
    (tracing/scope.py), even where the computation also uses `x` as an operand."""
    builder = ir.active_builder()
    scope = None if builder is None else builder.root.scope
    if scope is not None:
        scope.read_while_tracing(x)


def as_operand(x: Any):
    """An operand: a value, or a Python number kept weakly typed for NumPy's promotion."""
    if isinstance(x, Var) or (
        isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic)
    ):
        return x
    return as_var(x)


def _array_operand(x: np.ndarray) -> Var:
    """A NumPy array used as an operand: a hidden input of the program when the traced function
    read it from outside its arguments (a global, a closure: see tracing/scope.py), else a constant."""
    return operand(x, ir.current_builder())


def _array(x: Any) -> np.ndarray:
    arr = np.asarray(x)
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise TypeError(
            f"cannot use a value of dtype {arr.dtype} in a traced computation{at_source()}"
        )
    return arr


def normalize_axis(axis: int, ndim: int) -> int:
    if not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an int, got {axis!r}{at_source()}")
    if not -ndim <= axis < max(ndim, 1):
        raise np.exceptions.AxisError(f"axis {axis} is out of bounds for array of dimension {ndim}")
    return int(axis) % max(ndim, 1)


def full_ranges(x: Var) -> list[tuple[int, int, int]]:
    return [(0, d, 1) for d in x.shape]


def slice_along(x: Var, axis: int, start: int, stop: int, step: int = 1) -> Var:
    ranges = full_ranges(x)
    ranges[axis] = (start, stop, step)
    return P.slice_(x, tuple(ranges))


def zeros_along(x: Var, axis: int, n: int, value: float = 0) -> Var:
    shape = list(x.shape)
    shape[axis] = n
    return P.const(value, tuple(shape), x.dtype)
