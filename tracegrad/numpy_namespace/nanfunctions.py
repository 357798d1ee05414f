"""The NaN-ignoring reductions and scans, on traced values (stage: tracing): nanmax, nanmin,
nanargmax, nanargmin, nanvar, nanstd, nanprod, nancumsum, nancumprod (nansum and nanmean are in
scans.py).

Each replaces the NaNs by the identity of its operation (np.where, so their cotangent is 0) and
reduces as the plain function does; all-NaN slices get NumPy's answer: NaN for nanmax, nanmin,
nanvar and nanstd, 1 for nanprod, 0 in the running sum, and -1 for nanargmax and nanargmin, where
NumPy raises a ValueError (a compiled program cannot raise on its values; test the result).
Integer and bool input holds no NaN and goes to the plain function.
"""

from __future__ import annotations

import numpy as np

from .. import primitives as P
from ..ir import Var
from ..tracing.dispatch import FUNCTIONS, register
from ..tracing.source import at_source
from .operands import as_var, normalize_axis
from .reductions import refuse_extra_arguments
from .shapes import ravel


def _nans(x: Var) -> Var:
    return P.emit(P.isnan_p, x)


def _filled(x: Var, nan: Var, value) -> Var:
    return P.where(nan, P.const(value, x.shape, x.dtype), x)


def _present(nan: Var, axis, keepdims: bool) -> Var:
    """How many elements of each slice are not NaN (int64)."""
    return P.reduce(P.reduce_sum_p, P.convert(P.logical(P.not_p, nan), np.int64), axis, keepdims)


def nan_extremum(prim, name: str, fill: float):
    def handler(a, axis=None, out=None, keepdims=False, initial=None, where=None):
        refuse_extra_arguments(name, {"out": out, "initial": initial, "where": where})
        x = as_var(a)
        if not P.is_float(x.dtype):
            return P.reduce(prim, x, axis, keepdims)
        nan = _nans(x)
        best = P.reduce(prim, _filled(x, nan, fill), axis, keepdims)
        all_nan = P.compare(P.eq_p, _present(nan, axis, keepdims), 0)
        return P.where(all_nan, P.const(np.nan, best.shape, best.dtype), best)

    return handler


register("nanmax", nan_extremum(P.reduce_max_p, "nanmax", -np.inf))
register("nanmin", nan_extremum(P.reduce_min_p, "nanmin", np.inf))


def nan_arg_extremum(prim, name: str, fill: float):
    """The index of the first maximum (minimum) among the numbers; -1 for an all-NaN slice."""

    def handler(a, axis=None, out=None, *, keepdims=False):
        refuse_extra_arguments(name, {"out": out})
        x = as_var(a)
        if not P.is_float(x.dtype):
            return FUNCTIONS[name.removeprefix("nan")](x, axis, keepdims=keepdims)
        shape = x.shape
        if axis is None:
            x, axis = ravel(x), 0
        axis = normalize_axis(axis, x.ndim)
        n = x.shape[axis]
        if n == 0:
            raise ValueError(f"attempt to get {name} of an empty sequence{at_source()}")
        best = P.reduce(prim, _filled(x, _nans(x), fill), (axis,), keepdims=True)
        hit = P.compare(P.eq_p, x, P.broadcast_to(best, x.shape))  # NaN equals nothing
        positions = np.arange(n, dtype=np.int64).reshape(
            [n if i == axis else 1 for i in range(x.ndim)]
        )
        index = P.broadcast_to(P.const(positions), x.shape)
        candidates = P.where(hit, index, P.const(n, x.shape, np.int64))
        first = P.reduce(P.reduce_min_p, candidates, (axis,), keepdims=keepdims)
        result = P.where(P.compare(P.eq_p, first, n), P.const(-1, first.shape, np.int64), first)
        if keepdims and len(shape) != x.ndim:  # axis=None with keepdims: all ones
            result = P.reshape(result, (1,) * len(shape))
        return result

    return handler


register("nanargmax", nan_arg_extremum(P.reduce_max_p, "nanargmax", -np.inf))
register("nanargmin", nan_arg_extremum(P.reduce_min_p, "nanargmin", np.inf))


def nanvar(
    a,
    axis=None,
    dtype=None,
    out=None,
    ddof=0,
    keepdims=False,
    *,
    where=None,
    mean=None,
    correction=None,
):
    """NumPy's nanvar: the mean of the numbers of each slice, the sum of their squared
    deviations over (count - ddof), NaN where that is not positive (an all-NaN slice too)."""
    refuse_extra_arguments("nanvar", {"out": out, "where": where, "mean": mean})
    if correction is not None:
        if ddof != 0:
            raise ValueError(f"ddof and correction can't be provided simultaneously.{at_source()}")
        ddof = correction
    x = as_var(a)
    if not P.is_float(x.dtype):
        return FUNCTIONS["var"](x, axis, dtype, None, ddof, keepdims)
    dtype = x.dtype if dtype is None else np.dtype(dtype)
    axes = P.normalize_axes(axis, x.ndim)
    nan = _nans(x)
    count = _present(nan, axes, True)
    # NumPy divides a float32 sum by an int64 count in float64 and casts back
    total = P.reduce(P.reduce_sum_p, P.convert(_filled(x, nan, 0), dtype), axes, True)
    avg = P.convert(P.div(total, count), dtype)
    deviation = _filled(P.convert(P.sub(x, avg), x.dtype), nan, 0)
    squares = P.reduce(
        P.reduce_sum_p, P.convert(P.mul(deviation, deviation), dtype), axes, keepdims
    )
    dof = P.sub(count if keepdims else P.reshape(count, squares.shape), ddof)
    var = P.convert(P.div(squares, dof), dtype)
    bad = P.compare(P.le_p, dof, 0)
    return P.where(bad, P.const(np.nan, var.shape, var.dtype), var)


def nanstd(
    a,
    axis=None,
    dtype=None,
    out=None,
    ddof=0,
    keepdims=False,
    *,
    where=None,
    mean=None,
    correction=None,
):
    """The square root of nanvar; where that is 0 the derivative is 0 (a kink, like |t|)."""
    x = as_var(a)
    if not P.is_float(x.dtype):
        refuse_extra_arguments("nanstd", {"out": out, "where": where, "mean": mean})
        ddof = ddof if correction is None else correction
        return FUNCTIONS["std"](x, axis, dtype, None, ddof, keepdims)
    var = nanvar(x, axis, dtype, out, ddof, keepdims, where=where, mean=mean, correction=correction)
    return P.where(P.compare(P.eq_p, var, 0.0), 0.0, P.unary(P.sqrt_p, var))


register("nanvar", nanvar)
register("nanstd", nanstd)


def nanprod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    refuse_extra_arguments("nanprod", {"out": out, "initial": initial, "where": where})
    x = as_var(a)
    if P.is_float(x.dtype):
        x = _filled(x, _nans(x), 1)
    return FUNCTIONS["prod"](x, axis, dtype, None, keepdims)


register("nanprod", nanprod)


def nan_scan(name: str, identity: float):
    def handler(a, axis=None, dtype=None, out=None):
        refuse_extra_arguments(f"nan{name}", {"out": out})
        x = as_var(a)
        if P.is_float(x.dtype):
            x = _filled(x, _nans(x), identity)
        return FUNCTIONS[name](x, axis, dtype)

    return handler


register("nancumsum", nan_scan("cumsum", 0))
register("nancumprod", nan_scan("cumprod", 1))
