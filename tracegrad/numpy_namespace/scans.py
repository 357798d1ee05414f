"""Differences, scans and the reductions NumPy adds to the basic ones, on traced values (stage:
tracing): diff, gradient, cumsum and friends, ptp, the NaN-aware reductions, any/all, argmax/argmin,
average.
"""

from __future__ import annotations

import numpy as np

from .. import primitives as P
from ..base.errors import TracingError
from ..ir import Var
from ..tracing.dispatch import implements, register
from ..tracing.source import at_source
from .operands import as_var, normalize_axis, slice_along, zeros_along
from .reductions import refuse_complex_order
from .shapes import concatenate, ravel

# ---- differences and scans


@implements("diff")
def diff(a, n=1, axis=-1, prepend=None, append=None):
    x = as_var(a)
    if x.ndim == 0:
        raise ValueError(f"diff requires input that is at least one dimensional{at_source()}")
    if int(n) < 0:
        raise ValueError(f"order must be non-negative but got {n!r}{at_source()}")
    axis = normalize_axis(axis, x.ndim)
    parts = []
    for extra in (prepend, None, append):
        if extra is None:
            if not parts or parts[-1] is not x:
                parts.append(x)
            continue
        e = as_var(extra)
        if e.ndim == 0:
            shape = list(x.shape)
            shape[axis] = 1
            e = P.broadcast_to(P.reshape(e, (1,) * x.ndim), tuple(shape))
        parts.append(e)
    if len(parts) > 1:
        x = concatenate(parts, axis)
    for _ in range(n):
        m = x.shape[axis]
        hi, lo = slice_along(x, axis, 1, max(m, 1)), slice_along(x, axis, 0, max(m - 1, 0))
        x = P.logical(P.ne_p, hi, lo) if x.dtype == np.bool_ else P.sub(hi, lo)
    return x


def scan(prim, name: str):
    """np.cumsum and friends: a scan primitive (`Kind.SCAN`: one fused loop, its adjoint and
    batching rules in the table), or, given the elementwise step instead (cumprod: mul), a
    composition by recursive doubling: log2(n) shifted products, each one elementwise node, so
    the scan fuses and its derivative is ordinary autodiff (exact at zeros: nothing is
    divided)."""

    def handler(a, axis=None, dtype=None, out=None):
        if out is not None:
            raise TracingError(
                f"np.{name}(..., out=...) is not supported on traced values{at_source()}"
            )
        x = as_var(a)
        if axis is None:
            x, axis = ravel(x), 0
        axis = normalize_axis(axis, x.ndim)
        if dtype is not None:
            x = P.convert(x, dtype)
        elif x.dtype.kind in "biu" and x.dtype.itemsize < 8:
            x = P.convert(x, np.uint64 if x.dtype.kind == "u" else np.int64)
        if prim.kind is P.Kind.SCAN:
            return P.cumulative(prim, x, axis)
        n = x.shape[axis]
        identity = 0 if prim is P.add_p else 1
        step = 1
        while step < n:
            shifted = P.concatenate(
                [zeros_along(x, axis, step, identity), slice_along(x, axis, 0, n - step)], axis
            )
            x = P.apply_elementwise(prim, x, shifted)
            step *= 2
        return x

    return handler


register("cumsum", scan(P.cumsum_p, "cumsum"))
register("cumprod", scan(P.mul_p, "cumprod"))


# ---- reductions that NumPy adds to the basic ones


def _keep(x: Var, axis, keepdims: bool, reduce) -> Var:
    return reduce(x, axis, keepdims)


@implements("ptp")
def ptp(a, axis=None, out=None, keepdims=False):
    x = as_var(a)
    refuse_complex_order(x, "ptp")
    return P.sub(
        P.reduce(P.reduce_max_p, x, axis, keepdims), P.reduce(P.reduce_min_p, x, axis, keepdims)
    )


def _nanfilled(x: Var, value) -> Var:
    if not P.is_float(x.dtype):
        return x
    return P.where(P.emit(P.isnan_p, x), P.const(value, x.shape, x.dtype), x)


@implements("nansum")
def nansum(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
    total = P.reduce(P.reduce_sum_p, _nanfilled(as_var(a), 0), axis, keepdims)
    return total if dtype is None else P.convert(total, dtype)


@implements("nanmean")
def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
    x = as_var(a)
    x = P.convert(x, P.float_dtype(x.dtype))
    total = P.reduce(P.reduce_sum_p, _nanfilled(x, 0), axis, keepdims)
    present = P.convert(P.logical(P.not_p, P.emit(P.isnan_p, x)), x.dtype)
    count = P.reduce(P.reduce_sum_p, present, axis, keepdims)
    return P.div(total, count)


@implements("count_nonzero")
def count_nonzero(a, axis=None, *, keepdims=False):
    x = as_var(a)
    nonzero = P.convert(P.compare(P.ne_p, x, 0), np.int64)
    return P.reduce(P.reduce_sum_p, nonzero, axis, keepdims)


@implements("any")
def any_nonzero(a, axis=None, out=None, keepdims=False, **kw):
    return P.compare(P.gt_p, count_nonzero(a, axis, keepdims=keepdims), 0)


@implements("all")
def all_nonzero(a, axis=None, out=None, keepdims=False, **kw):
    x = as_var(a)
    zeros = P.convert(P.compare(P.eq_p, x, 0), np.int64)
    return P.compare(P.eq_p, P.reduce(P.reduce_sum_p, zeros, axis, keepdims), 0)


def arg_extremum(prim):
    """The index of the first maximum (minimum), or of the first NaN, as NumPy's argmax."""
    name = "argmax" if prim is P.reduce_max_p else "argmin"

    def handler(a, axis=None, out=None, *, keepdims=False):
        x = as_var(a)
        refuse_complex_order(x, name)
        shape = x.shape
        if axis is None:
            x, axis = ravel(x), 0
        axis = normalize_axis(axis, x.ndim)
        n = x.shape[axis]
        if n == 0:
            raise ValueError(f"attempt to get argmax/argmin of an empty sequence{at_source()}")
        best = P.reduce(prim, x, (axis,), keepdims=True)
        hit = P.compare(P.eq_p, x, P.broadcast_to(best, x.shape))
        if P.is_float(x.dtype):
            hit = P.logical(P.or_p, hit, P.emit(P.isnan_p, x))
        positions = np.arange(n, dtype=np.int64).reshape(
            [n if i == axis else 1 for i in range(x.ndim)]
        )
        index = P.broadcast_to(P.const(positions), x.shape)
        candidates = P.where(hit, index, P.const(n, x.shape, np.int64))
        result = P.reduce(P.reduce_min_p, candidates, (axis,), keepdims=keepdims)
        if keepdims and len(shape) != x.ndim:  # axis=None with keepdims: all ones
            result = P.reshape(result, (1,) * len(shape))
        return result

    return handler


register("argmax", arg_extremum(P.reduce_max_p))
register("argmin", arg_extremum(P.reduce_min_p))


@implements("average")
def average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    x = as_var(a)
    x = P.convert(x, P.float_dtype(x.dtype))
    if weights is None:
        total = P.reduce(P.reduce_sum_p, x, axis, keepdims)
        count = x.size // max(total.size, 1)
        avg, scale = P.div(total, float(count)), P.const(float(count), total.shape, x.dtype)
    else:
        w = as_var(weights)
        x = P.convert(x, P.float_dtype(np.result_type(x.dtype, w.dtype)))  # NumPy's result type
        w = P.convert(w, x.dtype)
        if w.shape != x.shape:
            if axis is None or w.ndim != 1:
                raise TypeError(
                    f"Axis must be specified when shapes of a and weights differ.{at_source()}"
                )
            ax = normalize_axis(axis, x.ndim)
            w = P.broadcast_to(
                P.reshape(w, tuple(w.size if i == ax else 1 for i in range(x.ndim))), x.shape
            )
        scale = P.reduce(P.reduce_sum_p, w, axis, keepdims)
        avg = P.div(P.reduce(P.reduce_sum_p, P.mul(x, w), axis, keepdims), scale)
    return (avg, P.broadcast_to(scale, avg.shape)) if returned else avg


@implements("gradient")
def gradient(f, *varargs, axis=None, edge_order=1):
    """np.gradient with uniform (scalar) spacings: central differences inside, one-sided ones
    of `edge_order` 1 or 2 at the edges."""
    x = as_var(f)
    x = P.convert(x, P.float_dtype(x.dtype))
    axes = list(range(x.ndim)) if axis is None else list(P.normalize_axes(axis, x.ndim))
    spacing = list(varargs) if varargs else [1.0]
    if len(spacing) == 1:
        spacing = spacing * len(axes)
    if len(spacing) != len(axes) or any(
        not isinstance(h, (int, float, np.number)) for h in spacing
    ):
        raise TracingError(
            f"np.gradient: only scalar spacings (one per axis) are supported{at_source()}"
        )
    if edge_order not in (1, 2):
        raise ValueError(f"'edge_order' greater than 2 not supported{at_source()}")
    out = []
    for ax, h in zip(axes, spacing, strict=True):
        n = x.shape[ax]
        if n < edge_order + 1:
            raise ValueError(
                f"Shape of array too small to calculate a numerical gradient, at least "
                f"(edge_order + 1) elements are required.{at_source()}"
            )
        h = float(h)
        mid = P.div(P.sub(slice_along(x, ax, 2, n), slice_along(x, ax, 0, n - 2)), 2 * h)
        if edge_order == 1:
            first = P.div(P.sub(slice_along(x, ax, 1, 2), slice_along(x, ax, 0, 1)), h)
            last = P.div(P.sub(slice_along(x, ax, n - 1, n), slice_along(x, ax, n - 2, n - 1)), h)
        else:
            first = P.div(
                P.sub(
                    P.sub(
                        P.mul(slice_along(x, ax, 1, 2), 4.0), P.mul(slice_along(x, ax, 0, 1), 3.0)
                    ),
                    slice_along(x, ax, 2, 3),
                ),
                2 * h,
            )
            last = P.div(
                P.add(
                    P.sub(
                        P.mul(slice_along(x, ax, n - 1, n), 3.0),
                        P.mul(slice_along(x, ax, n - 2, n - 1), 4.0),
                    ),
                    slice_along(x, ax, n - 3, n - 2),
                ),
                2 * h,
            )
        out.append(P.concatenate([first, mid, last], ax))
    return out[0] if len(out) == 1 else tuple(out)
