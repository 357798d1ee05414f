"""Diagonals, triangles and products of shapes on traced values (stage: tracing): diagonal, diag,
trace, tril/triu, kron, cross, tensordot.
"""

from __future__ import annotations

import numpy as np

from .. import primitives as P
from ..base.errors import TracingError
from ..ir import Var
from ..tracing.dispatch import implements, register
from ..tracing.source import at_source
from .operands import as_var, normalize_axis, slice_along
from .shapes import ravel

# ---- diagonals, triangles, products of shapes


@implements("diagonal")
def diagonal(a, offset=0, axis1=0, axis2=1):
    x = as_var(a)
    if x.ndim < 2:
        raise ValueError(f"diag requires an array of at least two dimensions{at_source()}")
    a1, a2 = normalize_axis(axis1, x.ndim), normalize_axis(axis2, x.ndim)
    if a1 == a2:
        raise ValueError(f"axis1 and axis2 cannot be the same{at_source()}")
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


@implements("diag")
def diag(v, k=0):
    x = as_var(v)
    if x.ndim == 2:
        return diagonal(x, k)
    if x.ndim != 1:
        raise ValueError(f"Input must be 1- or 2-d.{at_source()}")
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


@implements("diagflat")
def diagflat(v, k=0):
    return diag(ravel(as_var(v)), k)


@implements("trace")
def matrix_trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    if out is not None:
        raise TracingError(f"np.trace(..., out=...) is not supported on traced values{at_source()}")
    total = P.reduce(P.reduce_sum_p, diagonal(a, offset, axis1, axis2), -1)
    return total if dtype is None else P.convert(total, dtype)


def triangle(upper: bool):
    def handler(m, k=0):
        x = as_var(m)
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


register("triu", triangle(upper=True))
register("tril", triangle(upper=False))


@implements("kron")
def kron(a, b):
    x, y = as_var(a), as_var(b)
    d = max(x.ndim, y.ndim)
    x = P.reshape(x, (1,) * (d - x.ndim) + x.shape)
    y = P.reshape(y, (1,) * (d - y.ndim) + y.shape)
    xs = tuple(v for s in x.shape for v in (s, 1))
    ys = tuple(v for s in y.shape for v in (1, s))
    prod = P.mul(P.reshape(x, xs), P.reshape(y, ys))
    return P.reshape(prod, tuple(s * t for s, t in zip(x.shape, y.shape, strict=True)))


@implements("cross")
def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    if axis is not None:
        axisa = axisb = axisc = axis
    x, y = as_var(a), as_var(b)
    x = P.transpose(
        x,
        [i for i in range(x.ndim) if i != normalize_axis(axisa, x.ndim)]
        + [normalize_axis(axisa, x.ndim)],
    )
    y = P.transpose(
        y,
        [i for i in range(y.ndim) if i != normalize_axis(axisb, y.ndim)]
        + [normalize_axis(axisb, y.ndim)],
    )
    if x.shape[-1] not in (2, 3) or y.shape[-1] not in (2, 3):
        raise ValueError(
            f"incompatible dimensions for cross product (dimension must be 2 or 3){at_source()}"
        )

    def comp(v: Var, i: int):
        if i >= v.shape[-1]:
            return 0.0
        return P.reshape(slice_along(v, v.ndim - 1, i, i + 1), v.shape[:-1])

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
    parts = [as_var(p) for p in (cx, cy, z)]
    shape = np.broadcast_shapes(*(p.shape for p in parts))
    parts = [
        P.broadcast_to(P.reshape(p, (1,) * (len(shape) - p.ndim) + p.shape), shape) for p in parts
    ]
    out = P.concatenate([P.reshape(p, shape + (1,)) for p in parts], len(shape))
    c = normalize_axis(axisc, out.ndim)
    return P.transpose(out, list(range(c)) + [out.ndim - 1] + list(range(c, out.ndim - 1)))


@implements("tensordot")
def tensordot(a, b, axes=2):
    x, y = as_var(a), as_var(b)
    if isinstance(axes, (int, np.integer)):
        n = int(axes)
        ax, bx = list(range(x.ndim - n, x.ndim)), list(range(n))
    else:
        ax, bx = axes
        ax = [ax] if isinstance(ax, (int, np.integer)) else list(ax)
        bx = [bx] if isinstance(bx, (int, np.integer)) else list(bx)
        ax = [normalize_axis(i, x.ndim) for i in ax]
        bx = [normalize_axis(i, y.ndim) for i in bx]
    if len(ax) != len(bx) or any(x.shape[i] != y.shape[j] for i, j in zip(ax, bx, strict=True)):
        raise ValueError(f"shape-mismatch for sum{at_source()}")
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
    dtype = P.result_dtype([x, y])
    out = P.matmul(P.convert(xa, dtype), P.convert(yb, dtype))
    return P.reshape(out, tuple(x.shape[i] for i in free_a) + tuple(y.shape[j] for j in free_b))
