"""`check_grad`: tracegrad's derivatives against central finite differences, order by order."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .api import grad, jacobian
from .base.errors import GradientCheckError
from .base.tree import flatten, unflatten


def check_grad(
    fun: Callable,
    *args: Any,
    order: int = 1,
    argnums: int | Sequence[int] | None = None,
    eps: float = 1e-5,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    backend: str | None = None,
) -> bool:
    """Check derivatives of the scalar function `fun` at `args`, up to `order`, in float64.

    Order k compares tracegrad's k-th derivative with central differences of its (k-1)-th
    derivative (the value itself for k = 1). Raises `GradientCheckError` on a mismatch, naming the
    order, the input element and both numbers; returns True otherwise. A complex argument is
    checked as its real and imaginary parts (two real arguments; docs/complex.md).

    >>> import numpy as np, tracegrad as tg
    >>> tg.check_grad(lambda x: np.sum(np.sin(x) * x), np.array([0.5, 1.5]), order=2)
    True
    """
    if order < 1:
        raise ValueError(f"order must be at least 1, got {order}")
    if argnums is None:
        argnums = tuple(i for i, a in enumerate(args) if _is_float_arg(a))
    elif isinstance(argnums, int):
        argnums = (argnums,)
    bad = [i for i in argnums if not isinstance(i, int) or not -len(args) <= i < len(args)]
    if bad:
        raise ValueError(
            f"check_grad: argnums {bad[0]!r} does not name one of the {len(args)} arguments"
        )
    argnums = tuple(i % len(args) for i in argnums)
    if not argnums:
        raise ValueError("check_grad: no float arguments to check; pass argnums")
    leaves, treedef = flatten([args[i] for i in argnums])
    # a complex argument is checked as its two real parts: each part's derivatives are real, and
    # the complex rules are checked through them (docs/complex.md)
    arrays = [np.asarray(leaf) for leaf in leaves]
    complex_ = [a.dtype.kind == "c" for a in arrays]
    parts = [
        p for a, c in zip(arrays, complex_, strict=True) for p in ((a.real, a.imag) if c else (a,))
    ]
    theta0 = (
        np.concatenate([np.asarray(p, np.float64).ravel() for p in parts]) if parts else np.zeros(0)
    )

    phi = _OnOneVector(fun, args, argnums, treedef, [a.shape for a in arrays], complex_)
    derivative = grad(phi, backend=backend)
    lower: Callable = phi
    for k in range(1, order + 1):
        analytic = np.asarray(derivative(theta0), dtype=np.float64)
        numeric = _central_differences(lower, theta0, eps)
        _compare(analytic, numeric, k, rtol, atol)
        lower, derivative = derivative, jacobian(derivative, backend=backend)
    return True


class _OnOneVector:
    """`fun` of one flat vector: the checked arguments' elements, the other arguments fixed.

    An object, not a closure: a function of tracegrad's own module is keyed by its name alone in
    the program store, so every check_grad would share one program. The capture walk follows the
    attributes named in `_capture_children` instead: the program is keyed by the user's function
    and guarded by the other arguments and the layout."""

    _capture_children = ("fun", "args", "argnums", "layout", "shapes", "complex_")

    def __init__(
        self, fun: Callable, args: tuple, argnums: tuple, treedef, shapes: list, complex_: list
    ):
        # the checked arguments come from theta: only the others are kept (and guarded)
        kept = [None if i in argnums else a for i, a in enumerate(args)]
        self.fun, self.args, self.argnums = fun, tuple(kept), tuple(argnums)
        self.treedef, self.shapes = treedef, tuple(tuple(s) for s in shapes)
        self.complex_ = tuple(complex_)  # which arguments are complex: two parts in theta
        self.layout = repr(treedef)
        # messages name the user's function ("grad(loss) needs a function that returns...")
        self.__name__ = getattr(fun, "__name__", type(fun).__name__)
        self.__qualname__ = getattr(fun, "__qualname__", self.__name__)

    def __call__(self, theta):
        parts, start = [], 0
        for shape, complex_ in zip(self.shapes, self.complex_, strict=True):
            n = int(np.prod(shape, dtype=np.int64))
            # a copy, not a view of theta: the function may write into its argument
            part = theta[start : start + n].reshape(shape).copy()
            start += n
            if complex_:
                part = part + 1j * theta[start : start + n].reshape(shape)
                start += n
            parts.append(part)
        full = list(self.args)
        for i, value in zip(self.argnums, unflatten(self.treedef, parts), strict=True):
            full[i] = value
        return self.fun(*full)


def _is_float_arg(a: Any) -> bool:
    leaves, _ = flatten(a)
    return bool(leaves) and all(
        isinstance(x, (float, complex))
        or (hasattr(x, "dtype") and np.issubdtype(np.asarray(x).dtype, np.inexact))
        for x in leaves
    )


def _central_differences(f: Callable, theta: np.ndarray, eps: float) -> np.ndarray:
    """d f / d theta by central differences: shape f(theta).shape + theta.shape."""
    columns = []
    for i in range(theta.size):
        h = eps * max(1.0, abs(theta[i]))
        up, down = theta.copy(), theta.copy()
        up[i] += h
        down[i] -= h
        columns.append((np.asarray(f(up), np.float64) - np.asarray(f(down), np.float64)) / (2 * h))
    if not columns:
        return np.zeros(np.shape(f(theta)) + (0,))
    return np.moveaxis(np.stack(columns), 0, -1)


def _compare(analytic: np.ndarray, numeric: np.ndarray, order: int, rtol: float, atol: float):
    if analytic.shape != numeric.shape:
        raise GradientCheckError(
            f"order {order}: derivative has shape {analytic.shape}, finite differences {numeric.shape}"
        )
    bad = ~np.isclose(analytic, numeric, rtol=rtol, atol=atol)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        err = np.abs(analytic - numeric)
        raise GradientCheckError(
            f"order-{order} derivative disagrees with central finite differences at {index}: "
            f"tracegrad {analytic[index]!r}, finite differences {numeric[index]!r} "
            f"({int(bad.sum())} of {bad.size} elements differ; max abs error {err.max():.3g}, "
            f"rtol={rtol}, atol={atol})"
        )
