"""`tg.debug_print`: print values while a compiled program runs, on every call and every backend.

`print(x)` inside a traced function runs once, while tracing, and shows `Tracer<f64[3]>`.
`debug_print` records a hook node instead (the same mechanism as `tg.tap`'s hooks): the program
returns the observed values as extra outputs and, after each run, a host-side callback formats
and prints them. The node is effectful, so it stays in the program although nothing uses it, and
it has no derivative and no effect on any other value: gradients are unchanged.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from .. import ir
from .. import primitives as P
from ..trace import Tracer, traced_call
from ..base.tree import flatten


class _Printer:
    """The hook of one `debug_print` call: formats `fmt` with the constants it was given and the
    values the program observed, in the order the user passed them."""

    def __init__(self, fmt: str, values: tuple, traced: list[int]):
        self.fmt, self.values, self.traced = fmt, values, traced

    def __repr__(self) -> str:
        return f"debug_print({self.fmt!r})"

    def __call__(self, name: str, *observed: Any) -> None:
        values = list(self.values)
        for i, value in zip(self.traced, observed[: len(self.traced)], strict=True):
            values[i] = _host(value)
        print(self.fmt.format(*values), file=sys.stdout, flush=True)


def _host(value: Any) -> Any:
    """A host copy of an observed value (device arrays are copied back); 0-d arrays become NumPy
    scalars, so format specs like {:.3f} apply."""
    if not isinstance(value, np.ndarray):
        if hasattr(value, "copy_to_host"):  # a Numba device array
            value = value.copy_to_host()
        elif hasattr(value, "get"):  # a CuPy array
            value = value.get()
        value = np.asarray(value)
    return value[()] if value.ndim == 0 else value


def _check_no_nested_tracer(value: Any) -> None:
    if isinstance(value, Tracer):
        return
    leaves, treedef = flatten(value)
    if treedef.kind != "leaf" and any(isinstance(v, Tracer) for v in leaves):
        raise TypeError(
            "tg.debug_print: a traced value inside a container (a list, tuple, dict, namedtuple "
            "or dataclass) cannot be printed; pass each traced value as its own argument: "
            "tg.debug_print('{} {}', a, b)"
        )


def debug_print(fmt: str, *values: Any) -> None:
    """Print `fmt.format(*values)` each time the program runs, with the values of that run.

    Inside a traced function (under `tg.grad`, `tg.jit`, `tg.hessian`...) this records a print in
    the compiled program: it prints on every call, on every backend, after the program has run and
    before the call returns. It returns None and changes no value and no derivative. Outside a
    traced function it simply prints. (A plain `print` inside a traced function runs only while
    tracing, once per new argument shape, and shows the tracer, not the values.)

    >>> import numpy as np, tracegrad as tg
    >>> def f(x):
    ...     y = np.sin(x)
    ...     tg.debug_print("y = {}, sum {:.3f}", y, np.sum(y))
    ...     return np.sum(y * y)
    >>> g = tg.grad(f)(np.array([0.0, 1.0]))
    y = [0.         0.84147098], sum 0.841
    """
    if not isinstance(fmt, str):
        raise TypeError(
            f"tg.debug_print expects a format string first, got {type(fmt).__name__}; "
            "write tg.debug_print('x = {}', x)"
        )
    for value in values:
        _check_no_nested_tracer(value)
    traced = [i for i, v in enumerate(values) if isinstance(v, Tracer)]
    if ir.active_builder() is None and not traced:
        print(fmt.format(*values), flush=True)
        return
    # Check the format string now, with placeholders, so a bad one fails at the user's line.
    try:
        fmt.format(*[np.zeros(v.shape, v.dtype) if isinstance(v, Tracer) else v for v in values])
    except (IndexError, KeyError, ValueError) as exc:
        raise ValueError(
            f"tg.debug_print: cannot format {fmt!r} with {len(values)} value(s): {exc}. Use "
            "positional fields, one per value: tg.debug_print('x = {}, y = {}', x, y)"
        ) from None
    constants = tuple(None if i in traced else v for i, v in enumerate(values))
    printer = _Printer(fmt, constants, traced)
    # A print of constants only still observes one value, so that it runs with the program.
    inputs = [values[i] for i in traced] or [np.zeros(())]
    traced_call(lambda *vs: P.emit(P.hook_p, *vs, name="debug_print", hook=printer), *inputs)
