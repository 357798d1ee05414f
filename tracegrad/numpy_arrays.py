"""NumPy's array-manipulation functions on traced values: flipping, rolling, tiling, splitting,
padding, diagonals and triangles, scans and differences, index-of-extremum and NaN-aware
reductions. Each is written with the primitives the table already has (slices, concatenation,
broadcasting, selects, reductions), so each is differentiable at every order and fuses into
the kernels like any other node. Part of the traced NumPy namespace: `numpy_api.FUNCTIONS`
includes `FUNCTIONS` below.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import primitives as P
from .errors import TracingError
from .ir import Var
from .numpy_api import (
    _basic_index,
    _broadcast_value,
    _concatenate,
    _o,
    _ravel,
    _setitem,
    _src,
    _v,
    written_value,
)


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
        raise ValueError(
            f"'shift' and 'axis' should be scalars or 1D sequences of the same length{_src()}"
        )
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
    if isinstance(repeats, (list, tuple, np.ndarray)) and np.ndim(repeats) <= 1:
        counts = np.asarray(repeats)
        if counts.size == 1:
            repeats = counts.reshape(()).item()
        elif counts.dtype.kind not in "iu":
            raise TypeError(f"np.repeat: repeats must be integers, not {counts.dtype}{_src()}")
        else:  # static per-element counts: a gather of each element `count` times
            if axis is None:
                x, axis = _ravel(x), 0
            axis = _axis(axis, x.ndim)
            try:
                positions = np.repeat(np.arange(x.shape[axis], dtype=np.int64), counts)
            except ValueError as e:
                raise ValueError(f"np.repeat: {e}{_src()}") from None
            return P.gather(x, P.const(positions), axis)
    if not isinstance(repeats, (int, np.integer)):
        raise TracingError(
            f"np.repeat: the repeats must be static (an int, or a list or NumPy array of ints), "
            f"not a traced value{_src()}: the result's shape would depend on them"
        )
    if axis is None:
        x, axis = _ravel(x), 0
    axis = _axis(axis, x.ndim)
    r = int(repeats)
    if r < 0:
        raise ValueError(f"np.repeat: negative dimensions are not allowed{_src()}")
    shape = x.shape[: axis + 1] + (1,) + x.shape[axis + 1 :]
    wide = x.shape[: axis + 1] + (r,) + x.shape[axis + 1 :]
    out = P.broadcast_to(P.reshape(x, shape), wide)
    return P.reshape(out, x.shape[:axis] + (x.shape[axis] * r,) + x.shape[axis + 1 :])


def _split_at(x: Var, bounds: Sequence[int], axis: int) -> list[Var]:
    n = x.shape[axis]
    edges = [0, *(min(max(int(b), 0), n) for b in bounds), n]
    return [_take(x, axis, lo, max(lo, hi)) for lo, hi in itertools.pairwise(edges)]


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
    if isinstance(indices_or_sections, (int, np.integer)) and x.shape[_axis(axis, x.ndim)] % int(
        indices_or_sections
    ):
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
    return tuple(
        P.broadcast_to(P.reshape(x, (1,) * (len(shape) - x.ndim) + x.shape), shape) for x in xs
    )


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
        P.unslice_p,
        x,
        shape=(size * size,),
        index=((start, start + (n - 1) * (size + 1) + 1, size + 1),),
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
            x = P.broadcast_to(
                P.reshape(x, (1,) * (2 - x.ndim) + x.shape), (x.size, x.size) if x.ndim else (1, 1)
            )
        rows, cols = x.shape[-2:]
        keep = (
            np.triu(np.ones((rows, cols), bool), k)
            if upper
            else np.tril(np.ones((rows, cols), bool), k)
        )
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
    x = P.transpose(
        x, [i for i in range(x.ndim) if i != _axis(axisa, x.ndim)] + [_axis(axisa, x.ndim)]
    )
    y = P.transpose(
        y, [i for i in range(y.ndim) if i != _axis(axisb, y.ndim)] + [_axis(axisb, y.ndim)]
    )
    if x.shape[-1] not in (2, 3) or y.shape[-1] not in (2, 3):
        raise ValueError(
            f"incompatible dimensions for cross product (dimension must be 2 or 3){_src()}"
        )

    def comp(v: Var, i: int):
        if i >= v.shape[-1]:
            return 0.0
        return P.reshape(_take(v, v.ndim - 1, i, i + 1), v.shape[:-1])

    x0, x1, x2 = (comp(x, i) for i in range(3))
    y0, y1, y2 = (comp(y, i) for i in range(3))
    z = P.sub(P.mul(x0, y1), P.mul(x1, y0))
    if x.shape[-1] == 2 and y.shape[-1] == 2:
        return z
    cx = (
        P.sub(P.mul(x1, y2), P.mul(x2, y1))
        if not (isinstance(x2, float) and isinstance(y2, float))
        else None
    )
    cy = P.sub(P.mul(x2, y0), P.mul(x0, y2))
    parts = [_v(p) for p in (cx, cy, z)]
    shape = np.broadcast_shapes(*(p.shape for p in parts))
    parts = [
        P.broadcast_to(P.reshape(p, (1,) * (len(shape) - p.ndim) + p.shape), shape) for p in parts
    ]
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
    xa = P.reshape(
        P.transpose(x, free_a + ax),
        (-1 if False else int(np.prod([x.shape[i] for i in free_a], dtype=np.int64)), k),
    )
    yb = P.reshape(
        P.transpose(y, bx + free_b), (k, int(np.prod([y.shape[j] for j in free_b], dtype=np.int64)))
    )
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
    """np.cumsum and friends: a scan primitive (`Kind.SCAN`: one fused loop, its adjoint and
    batching rules in the table), or, given the elementwise step instead (cumprod: mul), a
    composition by recursive doubling: log2(n) shifted products, each one elementwise node, so
    the scan fuses and its derivative is ordinary autodiff (exact at zeros: nothing is
    divided)."""

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
        if prim.kind is P.Kind.SCAN:
            return P.cumulative(prim, x, axis)
        n = x.shape[axis]
        identity = 0 if prim is P.add_p else 1
        step = 1
        while step < n:
            shifted = P.concatenate(
                [_zeros_along(x, axis, step, identity), _take(x, axis, 0, n - step)], axis
            )
            x = P._elementwise(prim, x, shifted)
            step *= 2
        return x

    return handler


# ---- reductions that NumPy adds to the basic ones


def _keep(x: Var, axis, keepdims: bool, reduce) -> Var:
    return reduce(x, axis, keepdims)


def _ptp(a, axis=None, out=None, keepdims=False):
    x = _v(a)
    return P.sub(
        P.reduce(P.reduce_max_p, x, axis, keepdims), P.reduce(P.reduce_min_p, x, axis, keepdims)
    )


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


def _average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    x = _v(a)
    x = P.convert(x, P.float_dtype(x.dtype))
    if weights is None:
        total = P.reduce(P.reduce_sum_p, x, axis, keepdims)
        count = x.size // max(total.size, 1)
        avg, scale = P.div(total, float(count)), P.const(float(count), total.shape, x.dtype)
    else:
        w = _v(weights)
        x = P.convert(x, P.float_dtype(np.result_type(x.dtype, w.dtype)))  # NumPy's result type
        w = P.convert(w, x.dtype)
        if w.shape != x.shape:
            if axis is None or w.ndim != 1:
                raise TypeError(
                    f"Axis must be specified when shapes of a and weights differ.{_src()}"
                )
            ax = _axis(axis, x.ndim)
            w = P.broadcast_to(
                P.reshape(w, tuple(w.size if i == ax else 1 for i in range(x.ndim))), x.shape
            )
        scale = P.reduce(P.reduce_sum_p, w, axis, keepdims)
        avg = P.div(P.reduce(P.reduce_sum_p, P.mul(x, w), axis, keepdims), scale)
    return (avg, P.broadcast_to(scale, avg.shape)) if returned else avg


def _linspace(
    start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *, device=None
):
    """Traced bounds, a static number of points: start + arange(num) * step, the last point
    exactly `stop` (as NumPy computes it)."""
    if not isinstance(num, (int, np.integer)) or num < 0:
        raise TracingError(f"np.linspace: num must be a static non-negative int{_src()}")
    a, b = _o(start), _o(stop)
    dt = P.float_dtype(P._result_dtype([a, b]))
    a, b = (P.convert(_v(v), dt) if isinstance(v, Var) else P.const(v, (), dt) for v in (a, b))
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
        axis = _axis(axis, y.ndim)
        perm = list(range(1, y.ndim))
        perm.insert(axis, 0)
        y = P.transpose(y, perm)
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
    if len(spacing) != len(axes) or any(
        not isinstance(h, (int, float, np.number)) for h in spacing
    ):
        raise TracingError(
            f"np.gradient: only scalar spacings (one per axis) are supported{_src()}"
        )
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
            first = P.div(
                P.sub(
                    P.sub(P.mul(_take(x, ax, 1, 2), 4.0), P.mul(_take(x, ax, 0, 1), 3.0)),
                    _take(x, ax, 2, 3),
                ),
                2 * h,
            )
            last = P.div(
                P.add(
                    P.sub(
                        P.mul(_take(x, ax, n - 1, n), 3.0), P.mul(_take(x, ax, n - 2, n - 1), 4.0)
                    ),
                    _take(x, ax, n - 3, n - 2),
                ),
                2 * h,
            )
        out.append(P.concatenate([first, mid, last], ax))
    return out[0] if len(out) == 1 else tuple(out)


def _pad_widths(pad_width, ndim: int) -> list[tuple[int, int]]:
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (ndim, 2))
    if (widths < 0).any():
        raise ValueError(f"index can't contain negative values{_src()}")
    return [(int(a), int(b)) for a, b in widths]


def _pad(array, pad_width, mode="constant", **kwargs):
    """np.pad with mode constant (a static constant_values), edge, reflect, symmetric or wrap:
    each axis in turn gets slices of itself (or constants) concatenated on both sides."""
    x = _v(array)
    if mode not in ("constant", "edge", "reflect", "symmetric", "wrap"):
        raise TracingError(
            f"np.pad: mode {mode!r} is not supported on traced values{_src()}; use constant, edge, "
            "reflect, symmetric or wrap"
        )
    extra = set(kwargs) - ({"constant_values"} if mode == "constant" else set())
    if extra:
        raise TracingError(f"np.pad: argument(s) {sorted(extra)} are not supported here{_src()}")
    values = np.broadcast_to(np.asarray(kwargs.get("constant_values", 0)), (x.ndim, 2))
    for axis, (before, after) in enumerate(_pad_widths(pad_width, x.ndim)):
        n = x.shape[axis]
        if before == after == 0:
            continue
        if n == 0 and mode != "constant":
            raise ValueError(
                f"can't extend empty axis {axis} using modes other than 'constant'{_src()}"
            )
        sides = []
        for side, width in ((0, before), (1, after)):
            if width == 0:
                sides.append(None)
                continue
            if mode == "constant":
                sides.append(_zeros_along(x, axis, width, values[axis][side]))
                continue
            pieces, left = [], width
            while left > 0:  # a pad wider than the axis repeats the rule outwards, as NumPy does
                if mode == "edge":
                    edge = _take(x, axis, 0, 1) if side == 0 else _take(x, axis, n - 1, n)
                    shape = list(x.shape)
                    shape[axis] = left
                    pieces.append(P.broadcast_to(edge, tuple(shape)))
                    break
                if mode == "wrap":
                    k = min(left, n)
                    pieces.append(_take(x, axis, n - k, n) if side == 0 else _take(x, axis, 0, k))
                    left -= k
                    continue
                shift = 1 if mode == "reflect" else 0
                k = min(left, n - shift) if n - shift > 0 else left
                if side == 0:
                    piece = _take(x, axis, shift, shift + k)
                else:
                    piece = _take(x, axis, n - shift - k, n - shift)
                pieces.append(_flip(piece, axis))
                left -= k
                if left > 0:
                    raise TracingError(
                        f"np.pad: a {mode} pad wider than the axis is not supported{_src()}"
                    )
            if side == 0:
                pieces = pieces[::-1]
            sides.append(P.concatenate(pieces, axis) if len(pieces) > 1 else pieces[0])
        parts = [p for p in (sides[0], x, sides[1]) if p is not None]
        x = P.concatenate(parts, axis)
    return x


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
    "cumsum": _scan(P.cumsum_p, "cumsum"),
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
    "pad": _pad,
}


# ---- gathers: integer-array and static boolean indexing, take, take_along_axis, add.at


def _index_array(item) -> bool:
    return isinstance(item, (Var, np.ndarray, list))


def _as_indices(item, n: int, what: str) -> Var:
    """An integer index array as an int64 value (static lists and arrays become constants)."""
    if isinstance(item, list):
        item = np.asarray(item)
    if isinstance(item, np.ndarray):
        if item.dtype.kind not in "iu":
            raise IndexError(
                f"arrays used as indices must be of integer (or boolean) type, got {item.dtype}{_src()}"
            )
        if item.size and (item.max() >= n or item.min() < -n):
            bad = int(item.max() if item.max() >= n else item.min())
            raise IndexError(f"index {bad} is out of bounds for {what} with size {n}{_src()}")
        return P.const(item.astype(np.int64))
    if item.dtype.kind not in "iu":
        raise IndexError(
            f"arrays used as indices must be of integer (or boolean) type, got {item.dtype}{_src()}"
        )
    return P.convert(item, np.int64)


def _from_the_end(idx: Var, n: int) -> Var:
    """Negative indices counted from the end of an axis of length n, as NumPy's."""
    return P.where(P.compare(P.lt_p, idx, 0), P.add(idx, n), idx)


def advanced_getitem(x: Var, index) -> Var:
    """NumPy's advanced indexing, for what research code uses: one integer array (traced or
    not) among basic indices; several integer arrays on the leading axes; a static boolean
    mask. A traced boolean mask would give a result whose shape depends on the values: refused,
    with the np.where form. The gather's adjoint is a scatter-add, so repeated indices
    accumulate their gradients."""
    items = list(index) if isinstance(index, tuple) else [index]
    expanded = []
    for item in items:
        if isinstance(item, (list, np.ndarray)) and np.asarray(item).dtype == np.bool_:
            expanded.extend(np.nonzero(np.asarray(item)))  # static: the selected positions
        elif isinstance(item, Var) and item.dtype == np.bool_:
            raise TracingError(
                f"indexing with a traced boolean mask (x[mask]) gives a result whose shape depends "
                f"on the values{_src()}; write np.where(mask, x, 0) (or another neutral value) "
                "and reduce over it, e.g. np.sum(np.where(mask, x, 0))"
            )
        else:
            expanded.append(item)
    items = expanded
    arrays = [k for k, item in enumerate(items) if _index_array(item)]
    if len(arrays) > 1:
        if any(not (_index_array(i) or isinstance(i, (int, np.integer))) for i in items):
            raise TracingError(
                f"indexing with several integer arrays mixed with slices is not supported{_src()}; "
                "index the leading axes with arrays only (x[i, j]), or one axis at a time"
            )
        return _gather_leading(x, items)
    k = arrays[0]
    used = sum(1 for i in items if i is not None and i is not Ellipsis)
    if used > x.ndim:
        raise IndexError(f"too many indices for a traced value of {x.ndim} dimensions{_src()}")
    ellipsis = [j for j, i in enumerate(items) if i is Ellipsis]
    if ellipsis:
        e = ellipsis[0]
        items = items[:e] + [slice(None)] * (x.ndim - used) + items[e + 1 :]
        k = next(j for j, item in enumerate(items) if _index_array(item))
    basic = items[:k] + [slice(None)] + items[k + 1 :]
    y = _v(_getitem_basic(x, tuple(basic)))
    axis = sum(1 for i in items[:k] if not isinstance(i, (int, np.integer)))
    source_axis = sum(1 for i in items[:k] if i is not None)
    idx = _as_indices(items[k], x.shape[source_axis], f"axis {source_axis}")
    out = P.gather(y, idx, axis)
    # NumPy: ints count as advanced indices next to an array; separated from it by a slice, the
    # array's dimensions go first
    ints = [j for j, i in enumerate(items) if isinstance(i, (int, np.integer))]
    positions = sorted(ints + [k])
    if positions != list(range(positions[0], positions[-1] + 1)) and axis:
        moved = list(range(axis, axis + idx.ndim))
        rest = [d for d in range(out.ndim) if d not in moved]
        out = P.transpose(out, moved + rest)
    return out


def _getitem_basic(x: Var, index):
    from .numpy_api import _getitem

    return _getitem(x, index)


def _gather_leading(x: Var, items) -> Var:
    """x[i0, i1, ...] with integer arrays (or ints) on the leading axes: one gather of the
    flattened leading axes at the broadcast flat index."""
    k = len(items)
    if k > x.ndim:
        raise IndexError(f"too many indices for a traced value of {x.ndim} dimensions{_src()}")
    idx = [
        _as_indices(
            np.asarray(i) if isinstance(i, (int, np.integer)) else i, x.shape[a], f"axis {a}"
        )
        for a, i in enumerate(items)
    ]
    shape = np.broadcast_shapes(*(i.shape for i in idx))
    flat = None
    for a, i in enumerate(idx):
        n = x.shape[a]
        i = _from_the_end(i, n)
        i = P.broadcast_to(P.reshape(i, (1,) * (len(shape) - i.ndim) + i.shape), shape)
        flat = i if flat is None else P.add(P.mul(flat, n), i)
    lead = int(np.prod(x.shape[:k], dtype=np.int64))
    return P.gather(P.reshape(x, (lead,) + x.shape[k:]), flat, 0)


def _np_take(a, indices, axis=None, out=None, mode="raise"):
    if out is not None or mode != "raise":
        raise TracingError(f"np.take: out= and mode= other than 'raise' are not supported{_src()}")
    x = _v(a)
    if axis is None:
        x, axis = _ravel(x), 0
    axis = _axis(axis, x.ndim)
    return P.gather(x, _as_indices(indices, x.shape[axis], f"axis {axis}"), axis)


def _take_along_axis(arr, indices, axis=-1):
    x = _v(arr)
    if axis is None:
        x, axis = _ravel(x), 0
    axis = _axis(axis, x.ndim)
    idx = _as_indices(indices, x.shape[axis], f"axis {axis}")
    if idx.ndim != x.ndim:
        raise ValueError(f"`indices` and `arr` must have the same number of dimensions{_src()}")
    shape = tuple(
        idx.shape[d] if d == axis else max(x.shape[d], idx.shape[d]) for d in range(x.ndim)
    )
    x = P.broadcast_to(x, tuple(x.shape[d] if d == axis else shape[d] for d in range(x.ndim)))
    idx = P.broadcast_to(idx, shape)
    n = x.shape[axis]
    idx = _from_the_end(idx, n)
    # each position's own row: flatten every axis, offsetting the indices by the row's start
    perm = [d for d in range(x.ndim) if d != axis] + [axis]
    xt, it = P.transpose(x, perm), P.transpose(idx, perm)
    rows = int(np.prod(xt.shape[:-1], dtype=np.int64))
    starts = P.const((np.arange(rows, dtype=np.int64) * n).reshape(xt.shape[:-1] + (1,)))
    flat_idx = P.add(it, P.broadcast_to(starts, it.shape))
    out = P.gather(P.reshape(xt, (rows * n,)), flat_idx, 0)
    return P.transpose(out, list(np.argsort(perm)))


def add_at(a: Var, indices, b) -> Var:
    """The value of `a` after np.add.at(a, indices, b): a scatter-add (repeated indices add up)."""
    items = indices if isinstance(indices, tuple) else (indices,)
    v = _v(b) if isinstance(b, (Var, np.ndarray)) else P.const(b, (), a.dtype)
    v = P.convert(v, a.dtype)
    leading = a.ndim > 0 and len(items) == 1 and _index_array(items[0])
    if leading:  # one index array on axis 0
        idx = _as_indices(items[0], a.shape[0], "axis 0")
        idx = _from_the_end(idx, a.shape[0])
        target = idx.shape + a.shape[1:]
    else:
        # any index NumPy accepts (ints, slices, several arrays): the flat positions it selects,
        # from a table of positions indexed like `a`; one scatter-add into the flattened array
        table = np.arange(a.size, dtype=np.int64).reshape(a.shape)
        if all(not isinstance(i, Var) for i in items):
            try:
                idx = P.const(
                    np.asarray(table[indices if isinstance(indices, tuple) else (indices,)])
                )
            except IndexError as e:
                raise IndexError(f"np.add.at: {e}{_src()}") from None
        else:
            idx = _v(_getitem_basic(P.const(table), indices))
        target = idx.shape
    try:
        np.broadcast_shapes(v.shape, target)
        if v.ndim > len(target) or np.broadcast_shapes(v.shape, target) != target:
            raise ValueError
    except ValueError:
        raise ValueError(
            f"np.add.at: values of shape {v.shape} do not broadcast to the {target} elements the "
            f"indices select{_src()}"
        ) from None
    v = P.broadcast_to(P.reshape(v, (1,) * (len(target) - v.ndim) + v.shape), target)
    if leading:
        return P.add(a, P.scatter_add(v, idx, 0, a.shape))
    flat = P.scatter_add(P.reshape(v, (idx.size,)), P.reshape(idx, (idx.size,)), 0, (a.size,))
    return P.add(a, P.reshape(flat, a.shape))


FUNCTIONS["take"] = _np_take
FUNCTIONS["take_along_axis"] = _take_along_axis


# ---- writes through integer-array indices: y[idx] = v, y[idx] += v, np.put_along_axis


def _last_writes(sel: Var) -> Var:
    """Whether each (flat) position of `sel` is the last write to its element: NumPy assigns in
    order, so of repeated indices the last one's value stays. A stable sort puts the writes to
    one element next to each other in order; the last of each run wins (O(m log m) for m writes,
    where comparing every pair would be m^2)."""
    m = sel.shape[0]
    order = P.emit(P.argsort_p, sel, axis=0, kind="stable")
    ranked = P.gather(sel, order, 0)
    following = P.concatenate([P.slice_(ranked, ((1, m, 1),)), P.const(-1, (1,), ranked.dtype)], 0)
    last = P.convert(P.compare(P.ne_p, ranked, following), np.float64)
    # back to write order: `order` is a permutation, so the scatter places each flag once
    return P.compare(P.gt_p, P.scatter_add(last, order, 0, (m,)), 0.5)


def scatter_set(x: Var, sel, value: Var) -> Var:
    """`x` with the elements at flat positions `sel` (static ndarray or traced int64 value) set to
    `value` (broadcast to sel's shape; already in x's dtype). Repeated positions keep the last
    value, as NumPy's assignment does. Written with gather/scatter-add and selects, so the
    gradient reaches the elements not overwritten and the values that were written last."""
    v = P.reshape(
        P.broadcast_to(
            P.reshape(value, (1,) * (len(np.shape(sel)) - value.ndim) + value.shape)
            if value.ndim <= len(np.shape(sel))
            else value,
            tuple(np.shape(sel)),
        ),
        (int(np.prod(np.shape(sel), dtype=np.int64)),),
    )
    flat_x = P.reshape(x, (x.size,))
    m = v.shape[0]
    if isinstance(sel, np.ndarray):
        flat = sel.reshape(-1)
        keep = np.zeros(m, bool)
        keep[m - 1 - np.unique(flat[::-1], return_index=True)[1]] = True  # last of each
        hit = np.zeros(x.size, bool)
        hit[flat] = True
        if keep.all():
            placed = P.scatter_add(v, P.const(flat.astype(np.int64)), 0, (x.size,))
        else:
            placed = P.scatter_add(
                P.gather(v, P.const(np.nonzero(keep)[0]), 0),
                P.const(flat[keep].astype(np.int64)),
                0,
                (x.size,),
            )
        out = P.where(P.const(hit), placed, flat_x)
    else:
        flat = P.reshape(sel, (m,))
        keep = _last_writes(flat)
        placed = P.scatter_add(P.where(keep, v, P.const(0, v.shape, v.dtype)), flat, 0, (x.size,))
        hit = P.scatter_add(P.convert(keep, np.float64), flat, 0, (x.size,))  # sums as floats: fast
        out = P.where(P.compare(P.gt_p, hit, 0.5), placed, flat_x)
    return P.reshape(out, x.shape)


def set_regions(x: Var, writes: list[tuple[object, object]]) -> Var:
    """`x` after `x[index] = value` for each (static basic index, value) in order.

    Many small writes (a preallocated array filled element by element) become one scatter of
    every written value, the last write of each position winning: O(written + size) work and a
    handful of nodes, where one select per write would be O(writes x size) and a kernel with an
    operand per write. A few writes that cover much of the array keep the fused selects."""
    regions = []
    for index, value in writes:
        ranges, out_shape = _basic_index(x, index)
        regions.append((index, value, ranges, tuple(out_shape)))
    written = sum(int(np.prod(shape, dtype=np.int64)) for _, _, _, shape in regions)
    if len(writes) < 3 or (len(writes) < 8 and written > x.size // 2):
        for index, value, _, _ in regions:
            x = _setitem(x, index, value)
        return x
    strides = np.cumprod((1,) + x.shape[:0:-1])[::-1]  # C order, in elements
    positions, values = [], []
    for _, value, ranges, shape in regions:
        grid = np.zeros((), np.int64)
        for (start, stop, step), stride in zip(ranges, strides, strict=True):
            grid = np.add.outer(grid, np.arange(start, stop, step, dtype=np.int64) * stride)
        positions.append(grid.reshape(-1))
        v = _broadcast_value(written_value(value, x.dtype), shape, "x[index] = value")
        values.append(P.reshape(v, (grid.size,)))
    every = P.concatenate(values, 0) if len(values) > 1 else values[0]
    return scatter_set(x, np.concatenate(positions), every)


def setitem_advanced(x: Var, index, value: Var) -> Var:
    """x[index] = value for an index with integer arrays (static or traced), by NumPy's own
    meaning of the index: the index applied to the array of flat positions says which element
    each written value goes to."""
    positions = np.arange(x.size, dtype=np.int64).reshape(x.shape)
    items = index if isinstance(index, tuple) else (index,)
    if any(isinstance(i, Var) for i in items):
        sel = advanced_getitem(P.const(positions), index)
    else:
        try:
            sel = positions[index]
        except IndexError as exc:
            raise IndexError(f"{exc}{_src()}") from None
    shape = tuple(np.shape(sel))
    if value.ndim > len(shape) or np.broadcast_shapes(value.shape, shape) != shape:
        raise ValueError(
            f"shape mismatch: value array of shape {value.shape} could not be broadcast to "
            f"indexing result of shape {shape}{_src()}"
        )
    return scatter_set(x, sel, value)


def put_along_axis(arr: Var, indices, values, axis) -> Var:
    """The value of `arr` after np.put_along_axis(arr, indices, values, axis)."""
    if axis is None:
        flat = put_along_axis(P.reshape(arr, (arr.size,)), indices, values, 0)
        return P.reshape(flat, arr.shape)
    axis = _axis(axis, arr.ndim)
    positions = P.const(np.arange(arr.size, dtype=np.int64).reshape(arr.shape))
    sel = _take_along_axis(positions, indices, axis)
    v = P.convert(_v(values), arr.dtype)
    if v.ndim > sel.ndim or np.broadcast_shapes(v.shape, sel.shape) != sel.shape:
        raise ValueError(
            f"values of shape {v.shape} do not broadcast to the indices' shape {sel.shape}{_src()}"
        )
    return scatter_set(arr, sel, v)


# ---- sorting, and the statistics built on it


def _argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    if order is not None:
        raise TracingError(f"np.argsort: order= is not supported on traced values{_src()}")
    x = _v(a)
    if axis is None:
        x, axis = _ravel(x), 0
    kind = "stable" if stable else (kind or "quicksort")
    return P.emit(P.argsort_p, x, axis=_axis(axis, x.ndim), kind=kind)


def _sort(a, axis=-1, kind=None, order=None, *, stable=None):
    """Values in order: a gather by the sorting permutation, so the derivative of each sorted
    value goes to the element it came from (ties: to one of them)."""
    x = _v(a)
    if axis is None:
        x, axis = _ravel(x), 0
    perm = _argsort(x, axis, kind, order, stable=stable)
    return _take_along_axis(x, perm, axis)


def _partition(a, kth, axis=-1, kind="introselect", order=None):
    """np.partition: NumPy leaves the order inside each part unspecified; a full sort is one valid
    answer (the kth elements are where NumPy puts them), and its derivative goes through the
    permutation. The values equal NumPy's at the kth positions and as sets within each part."""
    return _sort(a, axis, None, order)


def _argpartition(a, kth, axis=-1, kind="introselect", order=None):
    return _argsort(a, axis, "stable", order)


def _rollaxis(a, axis, start=0):
    x = _v(a)
    n = x.ndim
    axis = _axis(axis, n)
    if not -n <= start <= n:
        raise np.exceptions.AxisError(f"start {start} is out of bounds for {n} dimensions{_src()}")
    if start < 0:
        start += n
    if axis < start:
        start -= 1
    perm = [d for d in range(n) if d != axis]
    perm.insert(start, axis)
    return P.transpose(x, perm)


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
    elif method == "midpoint":
        weight = np.where(hi > lo, 0.5, 0.0)
    elif method != "linear":
        raise TracingError(
            f"np.quantile: method {method!r} is not supported on traced values{_src()}"
        )
    a = P.gather(s, P.const(lo.reshape(-1)), axis)
    b = P.gather(s, P.const(hi.reshape(-1)), axis)
    w = P.const(weight.reshape((-1,) + (1,) * (s.ndim - axis - 1)).astype(s.dtype))
    out = P.add(a, P.mul(P.sub(b, a), P.broadcast_to(w, a.shape)))  # (..., len(q), ...)
    # NumPy: a slice holding a NaN has NaN quantiles; the sort puts NaNs last
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


def _quantile(
    a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, **kw
):
    if out is not None or kw:
        raise TracingError(
            f"np.quantile: out= and {sorted(kw)} are not supported on traced values{_src()}"
        )
    if isinstance(q, Var):
        raise TracingError(f"np.quantile: q must be static (numbers), not a traced value{_src()}")
    x = _v(a)
    # NumPy's result dtype: a Python number q is weak (float32 data stays float32), an array is not
    dtype = np.result_type(
        P.float_dtype(x.dtype), q if isinstance(q, (int, float)) else np.asarray(q)
    )
    q = np.asarray(q, dtype=np.float64)
    if np.any((q < 0) | (q > 1)):
        raise ValueError(f"Quantiles must be in the range [0, 1]{_src()}")
    x = P.convert(x, dtype)
    if axis is None:
        shape = x.shape
        x, axis = _ravel(x), 0
        result = _quantile_of_sorted(_sort(x, 0), q, 0, False, method)
        if keepdims:
            result = P.reshape(result, q.shape + (1,) * len(shape))
        return result
    if isinstance(axis, (tuple, list)):
        raise TracingError(
            f"np.quantile: a tuple of axes is not supported on traced values{_src()}"
        )
    axis = _axis(axis, x.ndim)
    return _quantile_of_sorted(_sort(x, axis), q, axis, keepdims, method)


def _percentile(
    a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, **kw
):
    if isinstance(q, Var):
        raise TracingError(f"np.percentile: q must be static (numbers), not a traced value{_src()}")
    q = q / 100 if isinstance(q, (int, float)) else np.asarray(q) / 100
    return _quantile(a, q, axis, out, overwrite_input, method, keepdims, **kw)


def _median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    return _quantile(a, 0.5, axis, out, overwrite_input, "linear", keepdims)


FUNCTIONS["argsort"] = _argsort
FUNCTIONS["sort"] = _sort
FUNCTIONS["quantile"] = _quantile
FUNCTIONS["percentile"] = _percentile
FUNCTIONS["median"] = _median
FUNCTIONS["partition"] = _partition
FUNCTIONS["argpartition"] = _argpartition
FUNCTIONS["rollaxis"] = _rollaxis
