"""NumPy's array-manipulation functions on traced values: flipping, rolling, tiling, splitting,
padding, diagonals and triangles, scans and differences, index-of-extremum and NaN-aware
reductions. Each is written with the primitives the table already has (slices, concatenation,
broadcasting, selects, reductions), so each is differentiable at every order and fuses into
the kernels like any other node. Part of the traced NumPy namespace: `numpy_api.FUNCTIONS`
includes `FUNCTIONS` below.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import primitives as P
from .errors import TracingError
from .ir import Var
from .numpy_api import _concatenate, _o, _ravel, _reshape, _src, _transpose, _v


def _axis(axis: int, ndim: int) -> int:
    if not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an int, got {axis!r}{_src()}")
    if not -ndim <= axis < max(ndim, 1):
        raise np.exceptions.AxisError(f"axis {axis} is out of bounds for array of dimension {ndim}")
    return int(axis) % max(ndim, 1)


def _full_ranges(x: Var) -> list[tuple[int, int, int]]:
    return [(0, d, 1) for d in x.shape]


def _take(x: Var, axis: int, start: int, stop: int, step: int = 1) -> Var:
    ranges = _full_ranges(x)
    ranges[axis] = (start, stop, step)
    return P.slice_(x, tuple(ranges))


def _zeros_along(x: Var, axis: int, n: int, value: float = 0) -> Var:
    shape = list(x.shape)
    shape[axis] = n
    return P.const(value, tuple(shape), x.dtype)


# ---- flipping, rolling, rotating


def _flip(m, axis=None):
    x = _v(m)
    axes = range(x.ndim) if axis is None else P.normalize_axes(axis, x.ndim)
    ranges = _full_ranges(x)
    for a in axes:
        n = x.shape[a]
        ranges[a] = (n - 1, -1, -1)
    return P.slice_(x, tuple(ranges)) if x.size else x


def _fliplr(m):
    x = _v(m)
    if x.ndim < 2:
        raise ValueError(f"Input must be >= 2-d.{_src()}")
    return _flip(x, 1)


def _flipud(m):
    x = _v(m)
    if x.ndim < 1:
        raise ValueError(f"Input must be >= 1-d.{_src()}")
    return _flip(x, 0)


def _roll(a, shift, axis=None):
    x = _v(a)
    if axis is None:
        return P.reshape(_roll(_ravel(x), shift, 0), x.shape)
    shifts = shift if isinstance(shift, (tuple, list)) else (shift,)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    if len(shifts) == 1:
        shifts = tuple(shifts) * len(axes)
    if len(axes) == 1:
        axes = tuple(axes) * len(shifts)
    if len(shifts) != len(axes):
        raise ValueError(f"'shift' and 'axis' should be scalars or 1D sequences of the same length{_src()}")
    total: dict[int, int] = {}
    for s, ax in zip(shifts, axes, strict=True):
        if not isinstance(s, (int, np.integer)):
            raise TracingError(f"np.roll: the shift must be a static int{_src()}")
        a_ = _axis(ax, x.ndim)
        total[a_] = total.get(a_, 0) + int(s)
    for a_, s in total.items():
        n = x.shape[a_]
        s = s % n if n else 0
        if s:
            x = P.concatenate([_take(x, a_, n - s, n), _take(x, a_, 0, n - s)], a_)
    return x


def _rot90(m, k=1, axes=(0, 1)):
    x = _v(m)
    if len(axes) != 2 or x.ndim < 2:
        raise ValueError(f"len(axes) must be 2 and the array at least 2-d{_src()}")
    a0, a1 = _axis(axes[0], x.ndim), _axis(axes[1], x.ndim)
    if a0 == a1:
        raise ValueError(f"Axes must be different.{_src()}")
    k %= 4
    if k == 0:
        return x
    if k == 2:
        return _flip(_flip(x, a0), a1)
    perm = list(range(x.ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return P.transpose(_flip(x, a1), perm)
    return _flip(P.transpose(x, perm), a1)


# ---- tiling, repeating, splitting, appending


def _tile(A, reps):
    x = _v(A)
    reps = tuple(int(r) for r in (reps if isinstance(reps, (tuple, list)) else (reps,)))
    d = max(len(reps), x.ndim)
    reps = (1,) * (d - len(reps)) + reps
    x = P.reshape(x, (1,) * (d - x.ndim) + x.shape)
    spread = tuple(v for s in x.shape for v in (1, s))
    full = tuple(v for r, s in zip(reps, x.shape, strict=True) for v in (r, s))
    out = P.broadcast_to(P.reshape(x, spread), full)
    return P.reshape(out, tuple(r * s for r, s in zip(reps, x.shape, strict=True)))


def _repeat(a, repeats, axis=None):
    x = _v(a)
    if not isinstance(repeats, (int, np.integer)):
        raise TracingError(f"np.repeat: only a static int number of repeats is supported{_src()}")
    if axis is None:
        x, axis = _ravel(x), 0
    axis = _axis(axis, x.ndim)
    r = int(repeats)
    shape = x.shape[: axis + 1] + (1,) + x.shape[axis + 1 :]
    wide = x.shape[: axis + 1] + (r,) + x.shape[axis + 1 :]
    out = P.broadcast_to(P.reshape(x, shape), wide)
    return P.reshape(out, x.shape[:axis] + (x.shape[axis] * r,) + x.shape[axis + 1 :])


def _split_at(x: Var, bounds: Sequence[int], axis: int) -> list[Var]:
    n = x.shape[axis]
    edges = [0, *(min(max(int(b), 0), n) for b in bounds), n]
    return [_take(x, axis, lo, max(lo, hi)) for lo, hi in zip(edges[:-1], edges[1:], strict=True)]


def _array_split(ary, indices_or_sections, axis=0):
    x = _v(ary)
    axis = _axis(axis, x.ndim)
    if isinstance(indices_or_sections, (int, np.integer)):
        k = int(indices_or_sections)
        if k <= 0:
            raise ValueError(f"number sections must be larger than 0.{_src()}")
        n = x.shape[axis]
        each, extra = divmod(n, k)
        sizes = [each + 1] * extra + [each] * (k - extra)
        return _split_at(x, np.cumsum(sizes)[:-1].tolist(), axis)
    return _split_at(x, list(indices_or_sections), axis)


def _split(ary, indices_or_sections, axis=0):
    x = _v(ary)
    if isinstance(indices_or_sections, (int, np.integer)):
        if x.shape[_axis(axis, x.ndim)] % int(indices_or_sections):
            raise ValueError(f"array split does not result in an equal division{_src()}")
    return _array_split(x, indices_or_sections, axis)


def _hsplit(ary, indices_or_sections):
    x = _v(ary)
    return _split(x, indices_or_sections, 1 if x.ndim > 1 else 0)


def _vsplit(ary, indices_or_sections):
    x = _v(ary)
    if x.ndim < 2:
        raise ValueError(f"vsplit only works on arrays of 2 or more dimensions{_src()}")
    return _split(x, indices_or_sections, 0)


def _dsplit(ary, indices_or_sections):
    x = _v(ary)
    if x.ndim < 3:
        raise ValueError(f"dsplit only works on arrays of 3 or more dimensions{_src()}")
    return _split(x, indices_or_sections, 2)


def _append(arr, values, axis=None):
    if axis is None:
        return _concatenate([_ravel(_v(arr)), _ravel(_v(values))], 0)
    return _concatenate([arr, values], axis)


# ---- shapes of several arrays


def _broadcast_arrays(*args, subok=False):
    xs = [_v(a) for a in args]
    shape = np.broadcast_shapes(*(x.shape for x in xs))
    return tuple(P.broadcast_to(P.reshape(x, (1,) * (len(shape) - x.ndim) + x.shape), shape) for x in xs)


def _meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    if indexing not in ("xy", "ij"):
        raise ValueError(f"Valid values for `indexing` are 'xy' and 'ij'.{_src()}")
    xs = [_ravel(_v(x)) for x in xi]
    ndim = len(xs)
    out = []
    for i, x in enumerate(xs):
        shape = [1] * ndim
        shape[i] = x.size
        if indexing == "xy" and ndim > 1 and i < 2:
            shape[0], shape[1] = shape[1], shape[0]
        out.append(P.reshape(x, tuple(shape)))
    if not sparse:
        full = np.broadcast_shapes(*(o.shape for o in out))
        out = [P.broadcast_to(o, full) for o in out]
    return tuple(out)


def _atleast(ndim: int):
    def one(x: Var) -> Var:
        if x.ndim >= ndim:
            return x
        if ndim == 1 or x.ndim == 0:
            return P.reshape(x, (1,) * ndim if x.ndim == 0 else x.shape)
        if ndim == 2:
            return P.reshape(x, (1,) + x.shape)
        return P.reshape(x, (1,) + x.shape + (1,) if x.ndim == 1 else x.shape + (1,))

    def handler(*arys):
        out = [one(_v(a)) for a in arys]
        return out[0] if len(out) == 1 else tuple(out)

    return handler


# ---- diagonals, triangles, products of shapes


def _diagonal(a, offset=0, axis1=0, axis2=1):
    x = _v(a)
    if x.ndim < 2:
        raise ValueError(f"diag requires an array of at least two dimensions{_src()}")
    a1, a2 = _axis(axis1, x.ndim), _axis(axis2, x.ndim)
    if a1 == a2:
        raise ValueError(f"axis1 and axis2 cannot be the same{_src()}")
    rest = [i for i in range(x.ndim) if i not in (a1, a2)]
    x = P.transpose(x, rest + [a1, a2])
    n, m = x.shape[-2:]
    lead = x.shape[:-2]
    length = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
    flat = P.reshape(x, lead + (n * m,))
    if length == 0:
        return P.const(0, lead + (0,), x.dtype)
    start = offset if offset >= 0 else -offset * m
    ranges = [(0, d, 1) for d in lead] + [(start, start + (length - 1) * (m + 1) + 1, m + 1)]
    return P.slice_(flat, tuple(ranges))


def _diag(v, k=0):
    x = _v(v)
    if x.ndim == 2:
        return _diagonal(x, k)
    if x.ndim != 1:
        raise ValueError(f"Input must be 1- or 2-d.{_src()}")
    n = x.shape[0]
    size = n + abs(k)
    start = k if k >= 0 else -k * size
    if n == 0:
        return P.const(0, (size, size), x.dtype)
    flat = P.emit(
        P.unslice_p, x, shape=(size * size,), index=((start, start + (n - 1) * (size + 1) + 1, size + 1),)
    )
    return P.reshape(flat, (size, size))


def _diagflat(v, k=0):
    return _diag(_ravel(_v(v)), k)


def _trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    if out is not None:
        raise TracingError(f"np.trace(..., out=...) is not supported on traced values{_src()}")
    total = P.reduce(P.reduce_sum_p, _diagonal(a, offset, axis1, axis2), -1)
    return total if dtype is None else P.convert(total, dtype)


def _triangle(upper: bool):
    def handler(m, k=0):
        x = _v(m)
        if x.ndim < 2:
            x = P.broadcast_to(P.reshape(x, (1,) * (2 - x.ndim) + x.shape), (x.size, x.size) if x.ndim else (1, 1))
        rows, cols = x.shape[-2:]
        keep = np.triu(np.ones((rows, cols), bool), k) if upper else np.tril(np.ones((rows, cols), bool), k)
        return P.where(P.broadcast_to(P.const(keep), x.shape), x, P.const(0, x.shape, x.dtype))

    return handler


def _kron(a, b):
    x, y = _v(a), _v(b)
    d = max(x.ndim, y.ndim)
    x = P.reshape(x, (1,) * (d - x.ndim) + x.shape)
    y = P.reshape(y, (1,) * (d - y.ndim) + y.shape)
    xs = tuple(v for s in x.shape for v in (s, 1))
    ys = tuple(v for s in y.shape for v in (1, s))
    prod = P.mul(P.reshape(x, xs), P.reshape(y, ys))
    return P.reshape(prod, tuple(s * t for s, t in zip(x.shape, y.shape, strict=True)))


def _cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    if axis is not None:
        axisa = axisb = axisc = axis
    x, y = _v(a), _v(b)
    x = P.transpose(x, [i for i in range(x.ndim) if i != _axis(axisa, x.ndim)] + [_axis(axisa, x.ndim)])
    y = P.transpose(y, [i for i in range(y.ndim) if i != _axis(axisb, y.ndim)] + [_axis(axisb, y.ndim)])
    if x.shape[-1] not in (2, 3) or y.shape[-1] not in (2, 3):
        raise ValueError(f"incompatible dimensions for cross product (dimension must be 2 or 3){_src()}")

    def comp(v: Var, i: int):
        if i >= v.shape[-1]:
            return 0.0
        return P.reshape(_take(v, v.ndim - 1, i, i + 1), v.shape[:-1])

    x0, x1, x2 = (comp(x, i) for i in range(3))
    y0, y1, y2 = (comp(y, i) for i in range(3))
    z = P.sub(P.mul(x0, y1), P.mul(x1, y0))
    if x.shape[-1] == 2 and y.shape[-1] == 2:
        return z
    cx = P.sub(P.mul(x1, y2), P.mul(x2, y1)) if not (isinstance(x2, float) and isinstance(y2, float)) else None
    cy = P.sub(P.mul(x2, y0), P.mul(x0, y2))
    parts = [_v(p) for p in (cx, cy, z)]
    shape = np.broadcast_shapes(*(p.shape for p in parts))
    parts = [P.broadcast_to(P.reshape(p, (1,) * (len(shape) - p.ndim) + p.shape), shape) for p in parts]
    out = P.concatenate([P.reshape(p, shape + (1,)) for p in parts], len(shape))
    c = _axis(axisc, out.ndim)
    return P.transpose(out, list(range(c)) + [out.ndim - 1] + list(range(c, out.ndim - 1)))


def _tensordot(a, b, axes=2):
    x, y = _v(a), _v(b)
    if isinstance(axes, (int, np.integer)):
        n = int(axes)
        ax, bx = list(range(x.ndim - n, x.ndim)), list(range(n))
    else:
        ax, bx = axes
        ax = [ax] if isinstance(ax, (int, np.integer)) else list(ax)
        bx = [bx] if isinstance(bx, (int, np.integer)) else list(bx)
        ax = [_axis(i, x.ndim) for i in ax]
        bx = [_axis(i, y.ndim) for i in bx]
    if len(ax) != len(bx) or any(x.shape[i] != y.shape[j] for i, j in zip(ax, bx, strict=True)):
        raise ValueError(f"shape-mismatch for sum{_src()}")
    free_a = [i for i in range(x.ndim) if i not in ax]
    free_b = [j for j in range(y.ndim) if j not in bx]
    k = int(np.prod([x.shape[i] for i in ax], dtype=np.int64))
    xa = P.reshape(P.transpose(x, free_a + ax), (-1 if False else int(np.prod([x.shape[i] for i in free_a], dtype=np.int64)), k))
    yb = P.reshape(P.transpose(y, bx + free_b), (k, int(np.prod([y.shape[j] for j in free_b], dtype=np.int64))))
    dtype = P._result_dtype([x, y])
    out = P.matmul(P.convert(xa, dtype), P.convert(yb, dtype))
    return P.reshape(out, tuple(x.shape[i] for i in free_a) + tuple(y.shape[j] for j in free_b))


# ---- differences and scans


def _diff(a, n=1, axis=-1, prepend=None, append=None):
    x = _v(a)
    if x.ndim == 0:
        raise ValueError(f"diff requires input that is at least one dimensional{_src()}")
    axis = _axis(axis, x.ndim)
    parts = []
    for extra in (prepend, None, append):
        if extra is None:
            if not parts or parts[-1] is not x:
                parts.append(x)
            continue
        e = _v(extra)
        if e.ndim == 0:
            shape = list(x.shape)
            shape[axis] = 1
            e = P.broadcast_to(P.reshape(e, (1,) * x.ndim), tuple(shape))
        parts.append(e)
    if len(parts) > 1:
        x = _concatenate(parts, axis)
    for _ in range(n):
        m = x.shape[axis]
        hi, lo = _take(x, axis, 1, max(m, 1)), _take(x, axis, 0, max(m - 1, 0))
        x = P.logical(P.ne_p, hi, lo) if x.dtype == np.bool_ else P.sub(hi, lo)
    return x


def _scan(prim, name: str):
    """cumsum / cumprod by recursive doubling: log2(n) shifted sums (products), each one
    elementwise node, so the scan fuses and its derivative is ordinary autodiff (exact at zeros
    for the product: nothing is divided)."""

    def handler(a, axis=None, dtype=None, out=None):
        if out is not None:
            raise TracingError(f"np.{name}(..., out=...) is not supported on traced values{_src()}")
        x = _v(a)
        if axis is None:
            x, axis = _ravel(x), 0
        axis = _axis(axis, x.ndim)
        if dtype is not None:
            x = P.convert(x, dtype)
        elif x.dtype.kind in "biu" and x.dtype.itemsize < 8:
            x = P.convert(x, np.uint64 if x.dtype.kind == "u" else np.int64)
        n = x.shape[axis]
        identity = 0 if prim is P.add_p else 1
        step = 1
        while step < n:
            shifted = P.concatenate([_zeros_along(x, axis, step, identity), _take(x, axis, 0, n - step)], axis)
            x = P._elementwise(prim, x, shifted)
            step *= 2
        return x

    return handler


# ---- reductions that NumPy adds to the basic ones


def _keep(x: Var, axis, keepdims: bool, reduce) -> Var:
    return reduce(x, axis, keepdims)


def _ptp(a, axis=None, out=None, keepdims=False):
    x = _v(a)
    return P.sub(P.reduce(P.reduce_max_p, x, axis, keepdims), P.reduce(P.reduce_min_p, x, axis, keepdims))


def _nanfilled(x: Var, value) -> Var:
    if not P.is_float(x.dtype):
        return x
    return P.where(P.emit(P.isnan_p, x), P.const(value, x.shape, x.dtype), x)


def _nansum(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
    total = P.reduce(P.reduce_sum_p, _nanfilled(_v(a), 0), axis, keepdims)
    return total if dtype is None else P.convert(total, dtype)


def _nanmean(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
    x = _v(a)
    x = P.convert(x, P.float_dtype(x.dtype))
    total = P.reduce(P.reduce_sum_p, _nanfilled(x, 0), axis, keepdims)
    present = P.convert(P.logical(P.not_p, P.emit(P.isnan_p, x)), x.dtype)
    count = P.reduce(P.reduce_sum_p, present, axis, keepdims)
    return P.div(total, count)


def _count_nonzero(a, axis=None, *, keepdims=False):
    x = _v(a)
    nonzero = P.convert(P.compare(P.ne_p, x, 0), np.int64)
    return P.reduce(P.reduce_sum_p, nonzero, axis, keepdims)


def _any(a, axis=None, out=None, keepdims=False, **kw):
    return P.compare(P.gt_p, _count_nonzero(a, axis, keepdims=keepdims), 0)


def _all(a, axis=None, out=None, keepdims=False, **kw):
    x = _v(a)
    zeros = P.convert(P.compare(P.eq_p, x, 0), np.int64)
    return P.compare(P.eq_p, P.reduce(P.reduce_sum_p, zeros, axis, keepdims), 0)


def _arg_extremum(prim):
    """The index of the first maximum (minimum), or of the first NaN, as NumPy's argmax."""

    def handler(a, axis=None, out=None, *, keepdims=False):
        x = _v(a)
        shape = x.shape
        if axis is None:
            x, axis = _ravel(x), 0
        axis = _axis(axis, x.ndim)
        n = x.shape[axis]
        if n == 0:
            raise ValueError(f"attempt to get argmax/argmin of an empty sequence{_src()}")
        best = P.reduce(prim, x, (axis,), keepdims=True)
        hit = P.compare(P.eq_p, x, P.broadcast_to(best, x.shape))
        if P.is_float(x.dtype):
            hit = P.logical(P.or_p, hit, P.emit(P.isnan_p, x))
        positions = np.arange(n, dtype=np.int64).reshape([n if i == axis else 1 for i in range(x.ndim)])
        index = P.broadcast_to(P.const(positions), x.shape)
        candidates = P.where(hit, index, P.const(n, x.shape, np.int64))
        result = P.reduce(P.reduce_min_p, candidates, (axis,), keepdims=keepdims)
        if keepdims and len(shape) != x.ndim:  # axis=None with keepdims: all ones
            result = P.reshape(result, (1,) * len(shape))
        return result

    return handler


def _average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    x = _v(a)
    x = P.convert(x, P.float_dtype(x.dtype))
    if weights is None:
        total = P.reduce(P.reduce_sum_p, x, axis, keepdims)
        count = x.size // max(total.size, 1)
        avg, scale = P.div(total, float(count)), P.const(float(count), total.shape, x.dtype)
    else:
        w = P.convert(_v(weights), x.dtype)
        if w.shape != x.shape:
            if axis is None or w.ndim != 1:
                raise TypeError(f"Axis must be specified when shapes of a and weights differ.{_src()}")
            ax = _axis(axis, x.ndim)
            w = P.broadcast_to(P.reshape(w, tuple(w.size if i == ax else 1 for i in range(x.ndim))), x.shape)
        scale = P.reduce(P.reduce_sum_p, w, axis, keepdims)
        avg = P.div(P.reduce(P.reduce_sum_p, P.mul(x, w), axis, keepdims), scale)
    return (avg, P.broadcast_to(scale, avg.shape)) if returned else avg


def _linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *, device=None):
    """Traced bounds, a static number of points: start + arange(num) * step, the last point
    exactly `stop` (as NumPy computes it)."""
    if not isinstance(num, (int, np.integer)) or num < 0:
        raise TracingError(f"np.linspace: num must be a static non-negative int{_src()}")
    if axis != 0:
        raise TracingError(f"np.linspace: only axis=0 is supported on traced bounds{_src()}")
    a, b = _o(start), _o(stop)
    dt = P.float_dtype(P._result_dtype([a, b]))
    a, b = (P.convert(_v(v), dt) if isinstance(v, Var) else P.const(v, (), dt) for v in (a, b))
    shape = np.broadcast_shapes(a.shape, b.shape)
    div = (num - 1) if endpoint else num
    step = P.div(P.sub(b, a), float(div)) if div > 0 else P.sub(b, a)
    k = P.const(np.arange(num, dtype=dt).reshape((num,) + (1,) * len(shape)))
    lead = (num,) + shape
    grow = P.broadcast_to(P.reshape(step, (1,) + (1,) * (len(shape) - step.ndim) + step.shape), lead)
    base = P.broadcast_to(P.reshape(a, (1,) + (1,) * (len(shape) - a.ndim) + a.shape), lead)
    y = P.add(P.mul(P.broadcast_to(k, lead), grow), base)
    if endpoint and num > 1:
        last = np.zeros(lead, bool)
        last[-1] = True
        end = P.broadcast_to(P.reshape(b, (1,) + (1,) * (len(shape) - b.ndim) + b.shape), lead)
        y = P.where(P.const(last), end, y)
    if dtype is not None:
        y = P.convert(y, dtype)
    return (y, step) if retstep else y


def _select(condlist, choicelist, default=0):
    if len(condlist) != len(choicelist):
        raise ValueError(f"list of cases must be same length as list of conditions{_src()}")
    out: Any = default
    for cond, choice in reversed(list(zip(condlist, choicelist, strict=True))):
        out = P.where(_v(cond), _o(choice), _o(out))
    return _v(out)


def _gradient(f, *varargs, axis=None, edge_order=1):
    """np.gradient with uniform (scalar) spacings: central differences inside, one-sided ones
    of `edge_order` 1 or 2 at the edges."""
    x = _v(f)
    x = P.convert(x, P.float_dtype(x.dtype))
    axes = list(range(x.ndim)) if axis is None else list(P.normalize_axes(axis, x.ndim))
    spacing = list(varargs) if varargs else [1.0]
    if len(spacing) == 1:
        spacing = spacing * len(axes)
    if len(spacing) != len(axes) or any(not isinstance(h, (int, float, np.number)) for h in spacing):
        raise TracingError(f"np.gradient: only scalar spacings (one per axis) are supported{_src()}")
    if edge_order not in (1, 2):
        raise ValueError(f"'edge_order' greater than 2 not supported{_src()}")
    out = []
    for ax, h in zip(axes, spacing, strict=True):
        n = x.shape[ax]
        if n < edge_order + 1:
            raise ValueError(
                f"Shape of array too small to calculate a numerical gradient, at least "
                f"(edge_order + 1) elements are required.{_src()}"
            )
        h = float(h)
        mid = P.div(P.sub(_take(x, ax, 2, n), _take(x, ax, 0, n - 2)), 2 * h)
        if edge_order == 1:
            first = P.div(P.sub(_take(x, ax, 1, 2), _take(x, ax, 0, 1)), h)
            last = P.div(P.sub(_take(x, ax, n - 1, n), _take(x, ax, n - 2, n - 1)), h)
        else:
            first = P.div(P.sub(P.sub(P.mul(_take(x, ax, 1, 2), 4.0), P.mul(_take(x, ax, 0, 1), 3.0)),
                                _take(x, ax, 2, 3)), 2 * h)
            last = P.div(P.add(P.sub(P.mul(_take(x, ax, n - 1, n), 3.0), P.mul(_take(x, ax, n - 2, n - 1), 4.0)),
                               _take(x, ax, n - 3, n - 2)), 2 * h)
        out.append(P.concatenate([first, mid, last], ax))
    return out[0] if len(out) == 1 else tuple(out)


FUNCTIONS = {
    "flip": _flip,
    "fliplr": _fliplr,
    "flipud": _flipud,
    "roll": _roll,
    "rot90": _rot90,
    "tile": _tile,
    "repeat": _repeat,
    "split": _split,
    "array_split": _array_split,
    "hsplit": _hsplit,
    "vsplit": _vsplit,
    "dsplit": _dsplit,
    "append": _append,
    "broadcast_arrays": _broadcast_arrays,
    "meshgrid": _meshgrid,
    "atleast_1d": _atleast(1),
    "atleast_2d": _atleast(2),
    "atleast_3d": _atleast(3),
    "diagonal": _diagonal,
    "diag": _diag,
    "diagflat": _diagflat,
    "trace": _trace,
    "triu": _triangle(upper=True),
    "tril": _triangle(upper=False),
    "kron": _kron,
    "cross": _cross,
    "tensordot": _tensordot,
    "diff": _diff,
    "cumsum": _scan(P.add_p, "cumsum"),
    "cumprod": _scan(P.mul_p, "cumprod"),
    "ptp": _ptp,
    "nansum": _nansum,
    "nanmean": _nanmean,
    "count_nonzero": _count_nonzero,
    "any": _any,
    "all": _all,
    "argmax": _arg_extremum(P.reduce_max_p),
    "argmin": _arg_extremum(P.reduce_min_p),
    "average": _average,
    "linspace": _linspace,
    "select": _select,
    "gradient": _gradient,
}
