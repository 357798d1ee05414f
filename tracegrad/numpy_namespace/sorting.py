"""Sorting on traced values, and the statistics built on it (stage: tracing): sort, argsort,
partition, quantile, percentile, median (and rollaxis).
"""

from __future__ import annotations

import numpy as np

from .. import primitives as P
from ..base.errors import TracingError
from ..ir import Var
from .gathers import take_along_axis
from ..tracing.dispatch import implements
from ..tracing.source import at_source
from .operands import as_var, normalize_axis
from .reductions import refuse_complex_order
from .shapes import ravel

# ---- sorting, and the statistics built on it


@implements("argsort")
def argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    if order is not None:
        raise TracingError(f"np.argsort: order= is not supported on traced values{at_source()}")
    x = as_var(a)
    refuse_complex_order(x, "sort")  # np.sort too, and what sorts: median, quantile, partition
    if axis is None:
        x, axis = ravel(x), 0
    kind = "stable" if stable else (kind or "quicksort")
    return P.emit(P.argsort_p, x, axis=normalize_axis(axis, x.ndim), kind=kind)


@implements("sort")
def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    """Values in order: a gather by the sorting permutation, so the derivative of each sorted
    value goes to the element it came from (ties: to one of them)."""
    x = as_var(a)
    if axis is None:
        x, axis = ravel(x), 0
    perm = argsort(x, axis, kind, order, stable=stable)
    return take_along_axis(x, perm, axis)


@implements("partition")
def partition(a, kth, axis=-1, kind="introselect", order=None):
    """np.partition: NumPy leaves the order inside each part unspecified; a full sort is one valid
    answer (the kth elements are where NumPy puts them), and its derivative goes through the
    permutation. The values equal NumPy's at the kth positions and as sets within each part."""
    return sort(a, axis, None, order)


@implements("argpartition")
def argpartition(a, kth, axis=-1, kind="introselect", order=None):
    return argsort(a, axis, "stable", order)


@implements("rollaxis")
def rollaxis(a, axis, start=0):
    x = as_var(a)
    n = x.ndim
    axis = normalize_axis(axis, n)
    if not -n <= start <= n:
        raise np.exceptions.AxisError(
            f"start {start} is out of bounds for {n} dimensions{at_source()}"
        )
    if start < 0:
        start += n
    if axis < start:
        start -= 1
    perm = [d for d in range(n) if d != axis]
    perm.insert(start, axis)
    return P.transpose(x, perm)


# quantile methods that pick an element of the data (it keeps its own dtype, exactly)
_PICKS = ("lower", "higher", "nearest")


def _quantile_of_sorted(s: Var, q: np.ndarray, axis: int, keepdims: bool, method: str) -> Var:
    """NumPy's 'linear' quantile (its default): interpolate between the order statistics at
    floor and ceil of q (n - 1); the other methods pick one of them."""
    n = s.shape[axis]
    position = q * (n - 1)
    lo = np.floor(position).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    weight = position - lo
    if method == "lower":
        hi, weight = lo, np.zeros_like(weight)
    elif method == "higher":
        lo, weight = np.ceil(position).astype(np.int64), np.zeros_like(weight)
    elif method == "nearest":
        lo, weight = np.around(position).astype(np.int64), np.zeros_like(weight)
    elif method == "midpoint":  # NumPy: the k-th value where q (n - 1) is a whole number k
        weight = np.where(position == lo, 0.0, 0.5)
    elif method == "median":  # np.median: the mean of the middle two, inf when both are inf
        lo, hi = np.full_like(lo, (n - 1) // 2), np.full_like(hi, n // 2)
    elif method != "linear":
        raise TracingError(
            f"np.quantile: method {method!r} is not supported on traced values{at_source()}"
        )
    a = P.gather(s, P.const(lo.reshape(-1)), axis)
    b = P.gather(s, P.const(hi.reshape(-1)), axis)
    w = P.const(weight.reshape((-1,) + (1,) * (s.ndim - axis - 1)).astype(s.dtype))
    if method == "median":
        out = a if n % 2 else P.mul(P.add(a, b), 0.5)
    elif method in _PICKS:
        out = a  # an element, in its own dtype
    else:
        # NumPy's _lerp: from b where the weight is at least a half (the same rounding)
        wb, diff = P.broadcast_to(w, a.shape), P.sub(b, a)
        from_a = P.add(a, P.mul(diff, wb))
        from_b = P.sub(b, P.mul(diff, P.sub(1.0, wb)))
        out = P.where(P.compare(P.ge_p, wb, 0.5), from_b, from_a)  # (..., len(q), ...)
    # NumPy: a slice holding a NaN has NaN quantiles; the sort puts NaNs last
    if P.is_float(s.dtype):
        last = P.broadcast_to(P.gather(s, P.const(np.array([n - 1], np.int64)), axis), out.shape)
        out = P.where(P.emit(P.isnan_p, last), last, out)
    out = P.reshape(out, s.shape[:axis] + q.shape + s.shape[axis + 1 :])
    if q.ndim:  # NumPy puts the q axes first
        k = q.ndim
        out = P.transpose(
            out, list(range(axis, axis + k)) + list(range(axis)) + list(range(axis + k, out.ndim))
        )
    if keepdims:
        out = P.reshape(out, q.shape + s.shape[:axis] + (1,) + s.shape[axis + 1 :])
    return out


@implements("quantile")
def quantile(
    a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, **kw
):
    if out is not None or kw:
        raise TracingError(
            f"np.quantile: out= and {sorted(kw)} are not supported on traced values{at_source()}"
        )
    if isinstance(q, Var):
        raise TracingError(
            f"np.quantile: q must be static (numbers), not a traced value{at_source()}"
        )
    x = as_var(a)
    # NumPy's result dtype: a Python number q is weak (float32 data stays float32), an array is not;
    # the methods that pick an element return it as it is (an int64 stays int64, exact)
    dtype = np.result_type(
        P.float_dtype(x.dtype), q if isinstance(q, (int, float)) else np.asarray(q)
    )
    if method in _PICKS:
        dtype = x.dtype
    q = np.asarray(q, dtype=np.float64)
    if np.any((q < 0) | (q > 1)):
        raise ValueError(f"Quantiles must be in the range [0, 1]{at_source()}")
    x = P.convert(x, dtype)
    if axis is None:
        shape = x.shape
        x, axis = ravel(x), 0
        result = _quantile_of_sorted(sort(x, 0), q, 0, False, method)
        if keepdims:
            result = P.reshape(result, q.shape + (1,) * len(shape))
        return result
    if isinstance(axis, (tuple, list)):
        raise TracingError(
            f"np.quantile: a tuple of axes is not supported on traced values{at_source()}"
        )
    axis = normalize_axis(axis, x.ndim)
    return _quantile_of_sorted(sort(x, axis), q, axis, keepdims, method)


@implements("percentile")
def percentile(
    a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, **kw
):
    if isinstance(q, Var):
        raise TracingError(
            f"np.percentile: q must be static (numbers), not a traced value{at_source()}"
        )
    q = q / 100 if isinstance(q, (int, float)) else np.asarray(q) / 100
    return quantile(a, q, axis, out, overwrite_input, method, keepdims, **kw)


@implements("median")
def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    x = as_var(a)
    if x.size == 0:  # NumPy: NaN (with a RuntimeWarning) where an empty slice is reduced
        kept = np.sum(np.zeros(x.shape), axis=axis, keepdims=keepdims)  # the result's shape
        return P.const(np.full(np.shape(kept), np.nan, P.float_dtype(x.dtype)))
    return quantile(x, 0.5, axis, out, overwrite_input, "median", keepdims)
