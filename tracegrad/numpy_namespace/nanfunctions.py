"""The NaN-ignoring reductions and scans, on traced values (stage: tracing): nanmax, nanmin,
nanargmax, nanargmin, nanvar, nanstd, nanprod, nancumsum, nancumprod, nanmedian, nanquantile,
nanpercentile (nansum and nanmean are in scans.py).

The reductions and scans replace the NaNs by the identity of their operation (np.where, so their
cotangent is 0) and reduce as the plain function does; the order statistics sort each slice (NaN
last) and read it at positions computed from its count of numbers. All-NaN slices get NumPy's
answer: NaN for nanmax, nanmin, nanvar, nanstd and the order statistics, 1 for nanprod, 0 in
the running sums, and -1 for nanargmax and nanargmin, where NumPy raises a ValueError (a
compiled program cannot raise on its values; test the result). Integer and bool input holds no
NaN and goes to the plain function.
"""

from __future__ import annotations

import numpy as np

from .. import primitives as P
from ..ir import Var
from ..base.errors import TracingError
from ..tracing.dispatch import FUNCTIONS, implements, register
from ..tracing.source import at_source
from .gathers import take_along_axis
from .operands import as_var, normalize_axis
from .reductions import abs_squared, refuse_complex_order, refuse_extra_arguments
from .shapes import ravel
from .sorting import sort


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
        refuse_complex_order(x, name)
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
        refuse_complex_order(x, name)
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
    given = dtype
    dtype = x.dtype if dtype is None else np.dtype(dtype)
    axes = P.normalize_axes(axis, x.ndim)
    nan = _nans(x)
    count = _present(nan, axes, True)
    # NumPy divides a float32 sum by an int64 count in float64 and casts back
    total = P.reduce(P.reduce_sum_p, P.convert(_filled(x, nan, 0), dtype), axes, True)
    avg = P.convert(P.div(total, count), dtype)
    deviation = _filled(P.convert(P.sub(x, avg), x.dtype), nan, 0)
    # complex deviations: |x - mean|^2, real (as NumPy's, unless dtype= says otherwise)
    sum_dtype = P.real_dtype(dtype) if given is None else dtype
    squares = P.reduce(P.reduce_sum_p, P.convert(abs_squared(deviation), sum_dtype), axes, keepdims)
    dof = P.sub(count if keepdims else P.reshape(count, squares.shape), ddof)
    var = P.convert(P.div(squares, dof), sum_dtype)
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


# ---- order statistics of the numbers of each slice: sorted, NaN last, k numbers per slice


def _nan_order_statistics(x: Var, q: np.ndarray, axis, keepdims: bool, method: str) -> Var:
    """NumPy's nanquantile (method 'linear') and nanmedian ('median'): the quantiles of the k
    numbers of each slice, read from the sorted slice (NaN last) at positions that depend on k
    (traced gathers); NaN for an all-NaN slice."""
    shape = x.shape
    if axis is None:
        x, axis = ravel(x), 0
    elif isinstance(axis, (tuple, list)):
        raise TracingError(
            f"np.nanquantile: a tuple of axes is not supported on traced values{at_source()}"
        )
    axis = normalize_axis(axis, x.ndim)
    if x.shape[axis] == 0:
        raise ValueError(f"np.nanquantile of an empty axis is not supported{at_source()}")
    s = sort(x, axis)
    k = _present(_nans(x), (axis,), True)
    n_q = max(q.size, 1)
    lead = (1,) * axis + (n_q,) + (1,) * (x.ndim - axis - 1)
    out_shape = s.shape[:axis] + (n_q,) + s.shape[axis + 1 :]
    count = P.broadcast_to(k, out_shape)
    last = P.maximum(P.sub(count, 1), 0)
    if method == "median":
        lo = P.maximum(P.apply_elementwise(P.floor_divide_p, P.sub(count, 1), 2), 0)
        hi = P.minimum(P.apply_elementwise(P.floor_divide_p, count, 2), last)
        a, b = take_along_axis(s, lo, axis), take_along_axis(s, hi, axis)
        out = P.where(P.compare(P.eq_p, lo, hi), a, P.mul(P.add(a, b), 0.5))
    else:
        qs = P.broadcast_to(P.const(q.reshape(lead).astype(np.float64)), out_shape)
        position = P.mul(P.convert(last, np.float64), qs)
        lo = P.convert(P.unary(P.floor_p, position), np.int64)
        hi = P.minimum(P.add(lo, 1), last)
        gamma = P.convert(P.sub(position, P.convert(lo, np.float64)), s.dtype)
        a, b = take_along_axis(s, lo, axis), take_along_axis(s, hi, axis)
        # NumPy's _lerp: from b where the weight is at least a half (the same rounding)
        diff = P.sub(b, a)
        from_a = P.add(a, P.mul(diff, gamma))
        from_b = P.sub(b, P.mul(diff, P.sub(1.0, gamma)))
        out = P.where(P.compare(P.ge_p, gamma, 0.5), from_b, from_a)
    out = P.where(P.compare(P.eq_p, count, 0), P.const(np.nan, out.shape, out.dtype), out)
    out = P.reshape(out, s.shape[:axis] + q.shape + s.shape[axis + 1 :])
    if q.ndim:  # NumPy puts the q axes first
        m = q.ndim
        out = P.transpose(
            out, list(range(axis, axis + m)) + list(range(axis)) + list(range(axis + m, out.ndim))
        )
    if keepdims:
        kept = (
            (1,) * len(shape)
            if len(shape) != x.ndim
            else (x.shape[:axis] + (1,) + x.shape[axis + 1 :])
        )
        out = P.reshape(out, q.shape + kept)
    return out


@implements("nanquantile")
def nanquantile(
    a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, **kw
):
    """np.nanquantile, method 'linear' (NumPy's default), static q."""
    if out is not None or kw:
        raise TracingError(
            f"np.nanquantile: out= and {sorted(kw)} are not supported on traced values{at_source()}"
        )
    if isinstance(q, Var):
        raise TracingError(
            f"np.nanquantile: q must be static (numbers), not a traced value{at_source()}"
        )
    x = as_var(a)
    if not P.is_float(x.dtype):
        return FUNCTIONS["quantile"](x, q, axis, None, overwrite_input, method, keepdims)
    if method != "linear":
        raise TracingError(
            f"np.nanquantile: method {method!r} is not supported on traced values (only "
            f"'linear'){at_source()}"
        )
    dtype = np.result_type(x.dtype, q if isinstance(q, (int, float)) else np.asarray(q))
    q = np.asarray(q, dtype=np.float64)
    if np.any((q < 0) | (q > 1)):
        raise ValueError(f"Quantiles must be in the range [0, 1]{at_source()}")
    return _nan_order_statistics(P.convert(x, dtype), q, axis, keepdims, "linear")


@implements("nanpercentile")
def nanpercentile(
    a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, **kw
):
    if isinstance(q, Var):
        raise TracingError(
            f"np.nanpercentile: q must be static (numbers), not a traced value{at_source()}"
        )
    q = q / 100 if isinstance(q, (int, float)) else np.asarray(q) / 100
    return nanquantile(a, q, axis, out, overwrite_input, method, keepdims, **kw)


@implements("nanmedian")
def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """np.nanmedian: the median of the numbers of each slice (NaN where there are none)."""
    refuse_extra_arguments("nanmedian", {"out": out})
    x = as_var(a)
    if not P.is_float(x.dtype):
        return FUNCTIONS["median"](x, axis, None, overwrite_input, keepdims)
    return _nan_order_statistics(x, np.asarray(0.5), axis, keepdims, "median")
