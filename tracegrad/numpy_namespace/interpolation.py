"""Searching sorted arrays and interpolating between their points, on traced values (stage:
tracing): searchsorted and interp.

Both find, for each query value, how many points of a sorted 1-D array come before it, by a
binary search written with gathers: log2(len) steps, each one gather of the sorted array at the
current candidate and one elementwise update, so the sorted array may be traced as well as the
queries. The counts are integers and carry no derivative; interp's values get theirs from the
points it gathers (in x, xp and fp: ordinary autodiff through the gathers).
"""

from __future__ import annotations

import numpy as np

from .. import primitives as P
from ..base.errors import TracingError
from ..ir import Var
from ..tracing.dispatch import implements
from ..tracing.source import at_source
from .operands import as_operand, as_var, slice_along
from .sorting import argsort


def _before(a: P.Operand, b: P.Operand, strict: bool) -> Var:
    """NumPy's sort order, where NaN comes after every number: a < b (strict) or a <= b."""
    if strict:  # a < b, or b is NaN and a is not
        nan_b, nan_a = P.emit(P.isnan_p, b), P.emit(P.isnan_p, a)
        after_nan = P.logical(P.and_p, nan_b, P.logical(P.not_p, nan_a))
        return P.logical(P.or_p, P.compare(P.lt_p, a, b), after_nan)
    return P.logical(P.not_p, _before(b, a, True))


def _is_float(v: Var) -> bool:
    return P.is_float(v.dtype)


def count_before(points: Var, values: Var, strict: bool) -> Var:
    """For each element of `values`, how many elements of the sorted 1-D `points` come before
    it (points[i] < value if `strict`, else points[i] <= value), as int64 of the values' shape: a
    binary search by descending powers of two, one gather per step."""
    m = points.shape[0]
    count = P.const(0, values.shape, np.int64)
    step = 1 << (m.bit_length() - 1) if m else 0
    floats = _is_float(points) or _is_float(values)
    while step:
        candidate = P.add(count, step)
        inside = P.compare(P.le_p, candidate, m)
        probe = P.gather(points, P.sub(P.minimum(candidate, m), 1), 0)
        if floats:
            ok = _before(probe, values, strict)
        else:
            ok = P.compare(P.lt_p if strict else P.le_p, probe, values)
        count = P.where(P.logical(P.and_p, inside, ok), candidate, count)
        step //= 2
    return count


def _one_dimensional(name: str, what: str, v: Var) -> None:
    if v.ndim != 1:
        raise ValueError(f"np.{name}: {what} must be 1-D, got shape {v.shape}{at_source()}")


@implements("searchsorted")
def searchsorted(a, v, side="left", sorter=None):
    """Indices where `v` would be inserted into the sorted 1-D `a` (either may be traced):
    int64, NumPy's order (NaN last); no derivative."""
    if side not in ("left", "right"):
        raise ValueError(
            f"np.searchsorted: side must be 'left' or 'right', got {side!r}{at_source()}"
        )
    points, values = as_var(a), as_var(v)
    _one_dimensional("searchsorted", "a", points)
    if sorter is not None:
        order = as_var(sorter)
        if order.shape != points.shape or order.dtype.kind not in "iu":
            raise ValueError(
                f"np.searchsorted: sorter must be integers of a's shape {points.shape}, got "
                f"{order.dtype} of shape {order.shape}{at_source()}"
            )
        points = P.gather(points, order, 0)
    if points.dtype.kind in "biu" and values.dtype.kind in "biu":
        dtype = np.result_type(points.dtype, values.dtype)
        points, values = P.convert(points, dtype), P.convert(values, dtype)
    return count_before(points, values, side == "left")


@implements("interp")
def interp(x, xp, fp, left=None, right=None, period=None):
    """np.interp: traced x, constant or traced xp and fp, NumPy's values (float64, as NumPy
    computes in C doubles). Each segment holds its left knot, the last one both: at a knot the
    derivative in x is the slope of the segment to its right (of the last segment at xp[-1]);
    outside [xp[0], xp[-1]] the value is `left` / `right` (default fp[0] / fp[-1])."""
    if isinstance(period, Var):
        raise TracingError(
            f"np.interp: period must be a static number, not a traced value{at_source()}"
        )
    for name, v in (("x", x), ("xp", xp)):
        if P.is_complex(as_var(v).dtype):
            raise TypeError(
                f"np.interp: {name} must be real, not complex{at_source()} (as in NumPy); pass "
                f"np.real({name})"
            )
    if any(P.is_complex(as_var(v).dtype) for v in (fp, left, right) if v is not None):
        # complex values: the real and the imaginary parts interpolated apart, as NumPy does
        re, im = (
            interp(
                x, xp, *(None if v is None else part(as_var(v)) for v in (fp, left, right)), period
            )
            for part in (P.real, P.imag)
        )
        return P.add(P.convert(re, np.complex128), P.mul(P.convert(im, np.complex128), 1j))
    xq, xs, fs = (P.convert(as_var(v), np.float64) for v in (x, xp, fp))
    _one_dimensional("interp", "xp", xs)
    _one_dimensional("interp", "fp", fs)
    if xs.shape != fs.shape:
        raise ValueError(f"fp and xp are not of the same length.{at_source()}")
    if xs.shape[0] == 0:
        raise ValueError(f"array of sample points is empty{at_source()}")
    if period is not None:
        if period == 0:
            raise ValueError(f"period must be a non-zero value{at_source()}")
        xq, xs, fs = _periodic(xq, xs, fs, abs(float(period)))
        left = right = None
    m = xs.shape[0]
    first, last = slice_along(xs, 0, 0, 1), slice_along(xs, 0, m - 1, m)
    f_first, f_last = slice_along(fs, 0, 0, 1), slice_along(fs, 0, m - 1, m)
    low = P.reshape(f_first, ()) if left is None else _scalar(left)
    high = P.reshape(f_last, ()) if right is None else _scalar(right)
    first, last = P.reshape(first, ()), P.reshape(last, ())
    if m == 1:
        r = P.broadcast_to(P.reshape(f_first, ()), xq.shape)
    else:
        j = P.sub(count_before(xs, xq, False), 1)  # xp[j] <= x < xp[j + 1]
        jc = P.minimum(P.maximum(j, 0), m - 2)
        x0, x1 = P.gather(xs, jc, 0), P.gather(xs, P.add(jc, 1), 0)
        f0, f1 = P.gather(fs, jc, 0), P.gather(fs, P.add(jc, 1), 0)
        slope = P.div(P.sub(f1, f0), P.sub(x1, x0))
        from_left = P.add(P.mul(slope, P.sub(xq, x0)), f0)
        from_right = P.add(P.mul(slope, P.sub(xq, x1)), f1)
        # NumPy: fp[j] at a knot (here from_left, which is fp[j] there unless the slope is not
        # finite, and carries the slope as derivative); else from the left, else from the right
        # when that is NaN, else fp[j] when both are NaN and fp[j] == fp[j + 1]
        knot = P.compare(P.eq_p, xq, x0)
        left_nan = P.emit(P.isnan_p, from_left)
        r = P.where(left_nan, from_right, from_left)
        both_nan = P.logical(P.and_p, P.emit(P.isnan_p, r), P.compare(P.eq_p, f0, f1))
        r = P.where(both_nan, f0, r)
        r = P.where(P.logical(P.and_p, knot, left_nan), f0, r)
        # at xp[-1] itself: fp[-1] (from the right end of the last segment, with its slope)
        at_end = P.compare(P.eq_p, j, m - 1)
        end = P.where(P.emit(P.isnan_p, from_right), f1, from_right)
        r = P.where(at_end, end, r)
    r = P.where(P.compare(P.lt_p, xq, first), low, r)
    r = P.where(P.compare(P.gt_p, xq, last), high, r)
    if m == 1:  # NumPy: fp[0] unless x < xp[0] or x > xp[0], so also for a NaN x
        return r
    return P.where(P.emit(P.isnan_p, xq), xq, r)


def _scalar(v) -> Var:
    out = P.convert(as_var(as_operand(v)), np.float64)
    if out.ndim:
        raise ValueError(f"np.interp: left and right must be scalars, got shape {out.shape}")
    return out


def _periodic(x: Var, xp: Var, fp: Var, period: float) -> tuple[Var, Var, Var]:
    """NumPy's periodic interp: x and xp modulo the period, xp sorted, one point added at each
    end from the other end, shifted by a period."""
    x, xp = P.apply_elementwise(P.mod_p, x, period), P.apply_elementwise(P.mod_p, xp, period)
    order = argsort(xp, 0)
    xp, fp = P.gather(xp, order, 0), P.gather(fp, order, 0)
    m = xp.shape[0]
    xp = P.concatenate(
        [
            P.sub(slice_along(xp, 0, m - 1, m), period),
            xp,
            P.add(slice_along(xp, 0, 0, 1), period),
        ],
        0,
    )
    fp = P.concatenate([slice_along(fp, 0, m - 1, m), fp, slice_along(fp, 0, 0, 1)], 0)
    return x, xp, fp
