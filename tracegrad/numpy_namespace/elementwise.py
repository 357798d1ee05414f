"""NumPy's elementwise functions that are not ufuncs, on traced values (stage: tracing): round,
nan_to_num, sinc, where, clip, copy, full_like and friends, linspace, logspace, geomspace, select.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import primitives as P
from ..base.errors import TracingError
from ..ir import Var
from .indexing import broadcast_value
from ..tracing.dispatch import implements, register
from ..tracing.source import at_source
from .operands import as_operand, as_var, normalize_axis
from .reductions import refuse_extra_arguments
from .ufuncs import is_python_int


@implements("round", "around")
def round_decimals(a, decimals=0, out=None):
    """np.round / np.around: half to even, at `decimals` places (rint(x * 10**d) / 10**d, as
    NumPy computes it); integers are returned unchanged for decimals >= 0."""
    if out is not None:
        raise TracingError(f"np.round(..., out=...) is not supported on traced values{at_source()}")
    x = as_var(a)
    if x.dtype == np.bool_:
        raise TypeError(
            f"np.round of booleans is not supported{at_source()}; convert with .astype(float)"
        )
    if P.is_complex(x.dtype):  # NumPy rounds the two parts
        return P.make_complex(*(round_decimals(part, decimals) for part in (P.real(x), P.imag(x))))
    if not P.is_float(x.dtype):
        if decimals >= 0:
            return x
        # NumPy rounds integers to tens, hundreds, ... through float64, half to even
        scale = 10.0**-decimals
        y = P.mul(P.unary(P.rint_p, P.div(P.convert(x, np.float64), scale)), scale)
        return P.convert(y, x.dtype)
    if decimals == 0:
        return P.unary(P.rint_p, x)
    scale = 10.0**decimals
    if decimals > 0:
        return P.div(P.unary(P.rint_p, P.mul(x, scale)), scale)
    scale = 10.0**-decimals
    return P.mul(P.unary(P.rint_p, P.div(x, scale)), scale)


@implements("nan_to_num")
def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    x = as_var(x)
    if not P.is_float(x.dtype):
        return x
    if P.is_complex(x.dtype):  # NumPy replaces in each part
        parts = (nan_to_num(part, copy, nan, posinf, neginf) for part in (P.real(x), P.imag(x)))
        return P.make_complex(*parts)
    info = np.finfo(x.dtype)
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    out = P.where(P.emit(P.isnan_p, x), nan, x)
    out = P.where(P.compare(P.eq_p, x, np.inf), posinf, out)
    return P.where(P.compare(P.eq_p, x, -np.inf), neginf, out)


@implements("sinc")
def sinc(x):
    """sin(pi x) / (pi x), 1 at 0. Near 0 a Taylor polynomial (exact to rounding for |pi x| <
    1e-3), so that every derivative at 0 is the true one (sinc''(0) = -pi^2 / 3), not 0."""
    x = as_var(x)
    x = P.convert(x, P.float_dtype(x.dtype))
    t = P.mul(x, np.pi)
    small = P.compare(P.lt_p, P.emit(P.abs_p, t), 1e-3)
    safe = P.where(small, 1.0, t)  # the far branch never divides by 0, so its gradient is finite
    far = P.div(P.unary(P.sin_p, safe), safe)
    t2 = P.mul(t, t)
    near = P.add(P.sub(1.0, P.div(t2, 6.0)), P.div(P.mul(t2, t2), 120.0))
    return P.where(small, near, far)


# ----------------------------------------------------------------------------------------------
# Selection and clipping


@implements("where")
def where(condition, x=None, y=None):
    if x is None or y is None:
        raise TracingError(
            f"np.where(condition) with one argument returns data-dependent indices and cannot be "
            f"traced{at_source()}; use np.where(condition, a, b)"
        )
    x, y = as_operand(x), as_operand(y)
    dtype = P.result_dtype([x, y])
    if dtype.kind in "iu":  # NumPy casts an out-of-range Python int into the integer dtype
        x, y = (_wrapped(v, dtype) for v in (x, y))
    return P.where(as_operand(condition), x, y)


def _wrapped(v, dtype: np.dtype):
    """A Python int as NumPy's C cast puts it into `dtype` (300 -> 44 in int8); others as they are."""
    if not is_python_int(v) or np.iinfo(dtype).min <= v <= np.iinfo(dtype).max:
        return v
    if not -(2**63) <= v < 2**64:
        raise OverflowError(f"Python int too large to convert to C long{at_source()}")
    return int(np.array(v).astype(dtype))


@implements("clip")
def clip(a, a_min=None, a_max=None, out=None, *, min=None, max=None, **kwargs):
    refuse_extra_arguments("clip", {**kwargs, "out": out})
    lo = a_min if a_min is not None else min
    hi = a_max if a_max is not None else max
    x = as_var(a)
    if x.dtype.kind in "iu":  # a Python int bound beyond the dtype's range clips nothing
        info = np.iinfo(x.dtype)
        lo = None if is_python_int(lo) and lo < info.min else lo
        hi = None if is_python_int(hi) and hi > info.max else hi
    for bound, outside in ((lo, P.lt_p), (hi, P.gt_p)):
        if bound is None:
            continue
        bound = as_operand(bound)
        x = P.where(P.compare(outside, x, bound), bound, x)
        if isinstance(bound, Var) and P.is_float(bound.dtype):  # a NaN bound gives NaN, as NumPy
            x = P.where(P.emit(P.isnan_p, bound), bound, x)
        elif isinstance(bound, float) and bound != bound:
            x = P.where(True, bound, x)
    return x


def filled(value):
    def handler(a, dtype=None, order="K", subok=True, shape=None, **kw):
        ref = as_var(a)
        if shape is None:
            shape = ref.shape
        elif isinstance(shape, (int, np.integer)):
            shape = (int(shape),)
        return P.const(value, tuple(shape), dtype or ref.dtype)

    return handler


register("zeros_like", filled(0))
register("empty_like", filled(0))  # its contents are unspecified: zeros are as good as any
register("ones_like", filled(1))
register("copy", lambda a, **kw: as_var(a))


@implements("full_like")
def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, **kw):
    if isinstance(fill_value, Var):  # a traced fill value: broadcast it
        ref = as_var(a)
        shape = (
            ref.shape
            if shape is None
            else ((int(shape),) if isinstance(shape, (int, np.integer)) else tuple(shape))
        )
        if fill_value.ndim:
            raise TracingError(
                f"np.full_like: the fill value must be a scalar, got shape {fill_value.shape}{at_source()}"
            )
        return broadcast_value(P.convert(fill_value, dtype or ref.dtype), shape, "np.full_like")
    if not isinstance(fill_value, (int, float, bool, np.generic)):
        raise TracingError(f"np.full_like: the fill value must be a number{at_source()}")
    return filled(fill_value)(a, dtype, order, subok, shape)


@implements("linspace")
def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *, device=None):
    """Traced bounds, a static number of points: start + arange(num) * step, the last point
    exactly `stop` (as NumPy computes it)."""
    if not isinstance(num, (int, np.integer)) or num < 0:
        raise TracingError(f"np.linspace: num must be a static non-negative int{at_source()}")
    a, b = as_operand(start), as_operand(stop)
    dt = P.float_dtype(P.result_dtype([a, b]))
    a, b = (P.convert(as_var(v), dt) if isinstance(v, Var) else P.const(v, (), dt) for v in (a, b))
    shape = np.broadcast_shapes(a.shape, b.shape)
    div = (num - 1) if endpoint else num
    step = P.div(P.sub(b, a), float(div)) if div > 0 else P.sub(b, a)
    k = P.const(np.arange(num, dtype=dt).reshape((num,) + (1,) * len(shape)))
    lead = (num,) + shape
    grow = P.broadcast_to(
        P.reshape(step, (1,) + (1,) * (len(shape) - step.ndim) + step.shape), lead
    )
    base = P.broadcast_to(P.reshape(a, (1,) + (1,) * (len(shape) - a.ndim) + a.shape), lead)
    y = P.add(P.mul(P.broadcast_to(k, lead), grow), base)
    if endpoint and num > 1:
        last = np.zeros(lead, bool)
        last[-1] = True
        end = P.broadcast_to(P.reshape(b, (1,) + (1,) * (len(shape) - b.ndim) + b.shape), lead)
        y = P.where(P.const(last), end, y)
    if axis != 0:  # the samples' axis moves to `axis` of the result, as NumPy's moveaxis does
        axis = normalize_axis(axis, y.ndim)
        perm = list(range(1, y.ndim))
        perm.insert(axis, 0)
        y = P.transpose(y, perm)
    if dtype is not None:
        y = P.convert(y, dtype)
    return (y, step) if retstep else y


def _with_ndim(v, ndim: int) -> Var:
    v = as_var(v)
    return P.reshape(v, (1,) * (ndim - v.ndim) + v.shape)


@implements("logspace")
def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    """base ** np.linspace(start, stop, num): traced start, stop and base, a static num."""
    b = as_operand(base)
    if not isinstance(b, (int, float)) and b.ndim:
        # NumPy: a base with axes is broadcast with the bounds and gets the samples' axis
        ndmax = len(np.broadcast_shapes(*(np.shape(as_operand(v)) for v in (start, stop, b))))
        start, stop, b = (_with_ndim(v, ndmax) for v in (start, stop, b))
        b = P.reshape(
            b,
            b.shape[: normalize_axis(axis, ndmax + 1)]
            + (1,)
            + b.shape[normalize_axis(axis, ndmax + 1) :],
        )
    y = P.power(b, linspace(start, stop, num, endpoint, axis=axis))
    return y if dtype is None else P.convert(y, dtype)


@implements("geomspace")
def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    """Numbers spaced evenly on a log scale from start to stop, the ends exactly start and
    stop, as NumPy computes them (float64 unless `dtype` says otherwise). A zero bound is an
    error when it is a number; a traced zero gives NaN (its value is not known while tracing)."""
    for bound in (start, stop):
        if not isinstance(bound, Var) and np.any(np.asarray(bound) == 0):
            raise ValueError(f"Geometric sequence cannot include zero{at_source()}")
    a, b = as_var(start), as_var(stop)
    dt = np.result_type(a.dtype, b.dtype, float(num), np.zeros((), dtype))
    a, b = P.convert(a, dt), P.convert(b, dt)
    sign = P.emit(P.sign_p, a)
    a, b = P.div(a, sign), P.div(b, sign)
    y = logspace(P.unary(P.log10_p, a), P.unary(P.log10_p, b), num, endpoint, 10.0, dt)
    if num > 0:  # the ends exactly: 10 ** log10(x) need not be x
        shape = np.broadcast_shapes(a.shape, b.shape)
        ends = np.zeros((num,) + shape, np.int8)
        ends[0] = 1
        if num > 1 and endpoint:
            ends[-1] = 2
        code = P.const(ends)
        y = P.where(P.compare(P.eq_p, code, 1), P.broadcast_to(a, y.shape), y)
        y = P.where(P.compare(P.eq_p, code, 2), P.broadcast_to(b, y.shape), y)
    y = P.mul(y, sign)
    if axis != 0:
        axis = normalize_axis(axis, y.ndim)
        perm = list(range(1, y.ndim))
        perm.insert(axis, 0)
        y = P.transpose(y, perm)
    return y if dtype is None else P.convert(y, dtype)


@implements("select")
def select(condlist, choicelist, default=0):
    if len(condlist) != len(choicelist):
        raise ValueError(f"list of cases must be same length as list of conditions{at_source()}")
    out: Any = default
    for cond, choice in reversed(list(zip(condlist, choicelist, strict=True))):
        out = P.where(as_var(cond), as_operand(choice), as_operand(out))
    return as_var(out)
