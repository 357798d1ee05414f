"""NumPy's shape functions on traced values (stage: tracing): reshape, ravel, transpose, axes
moved, added or removed, broadcast_to, concatenation and stacking, shape/ndim/size.
"""

from __future__ import annotations

import numpy as np

from .. import primitives as P
from ..base.errors import ShapeError, TracingError
from ..ir import Var
from ..tracing.dispatch import implements
from ..tracing.source import at_source
from .indexing import basic_getitem
from .operands import as_var

# ----------------------------------------------------------------------------------------------
# Shapes


def _order(order, what: str, x: Var, allowed: str = "CFAK") -> str:
    """NumPy's memory order argument, as 'C' or 'F'. None means 'C'; case is ignored, as NumPy
    does. 'A' and 'K' follow the memory layout of the array, which a traced value does not have:
    they are refused where the layout would matter (two or more axes longer than 1)."""
    if order is None:
        return "C"
    if not isinstance(order, str):
        raise TypeError(f"order must be str, not {type(order).__name__}")
    key = order.upper()
    if key not in allowed:
        if key == "K":
            raise ValueError(f"order 'K' is not permitted for {what}{at_source()}")
        raise ValueError(f"order must be one of 'C', 'F', 'A', or 'K' (got {order!r}){at_source()}")
    if key in "AK" and sum(d > 1 for d in x.shape) > 1:
        raise TracingError(
            f"{what} with order={order!r} follows the memory layout of the array, which "
            f"tracegrad does not trace{at_source()}; write order='C' (row by row) or order='F' "
            "(column by column)"
        )
    return "F" if key == "F" else "C"


def _reshape_in_order(x: Var, shape: tuple[int, ...], order: str) -> Var:
    """Reshape reading and writing elements in C (last index fastest) or F (first index fastest)
    order: F order is C order on the transposed value, transposed back."""
    if order == "C":
        return P.reshape(x, shape)
    return P.transpose(P.reshape(P.transpose(x), tuple(reversed(shape))))


@implements("ravel")
def ravel(a, order="C"):
    x = as_var(a)
    return _reshape_in_order(x, (x.size,), _order(order, "ravel", x))


@implements("reshape")
def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    x = as_var(a)
    order = _order(order, "reshaping", x, "CFA")
    shape = newshape if shape is None else shape
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
    if shape.count(-1) > 1:
        raise ValueError(f"reshape: can only specify one unknown dimension{at_source()}")
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        if known == 0 or x.size % known:
            raise ShapeError(f"cannot reshape {x.shape} into {shape}{at_source()}")
        shape = tuple(x.size // known if d == -1 else d for d in shape)
    if int(np.prod(shape, dtype=np.int64)) != x.size:
        raise ShapeError(
            f"cannot reshape a value of shape {x.shape} (size {x.size}) into {shape}{at_source()}"
        )
    return _reshape_in_order(x, shape, order)


@implements("transpose")
def transpose(a, axes=None):
    return P.transpose(as_var(a), axes)


@implements("swapaxes")
def swapaxes(a, axis1, axis2):
    x = as_var(a)
    perm = list(range(x.ndim))
    i, j = P.normalize_axes(axis1, x.ndim)[0], P.normalize_axes(axis2, x.ndim)[0]
    perm[i], perm[j] = perm[j], perm[i]
    return P.transpose(x, perm)


@implements("moveaxis")
def moveaxis(a, source, destination):
    x = as_var(a)
    src = [P.normalize_axes(s, x.ndim)[0] for s in np.atleast_1d(source)]
    dst = [P.normalize_axes(d, x.ndim)[0] for d in np.atleast_1d(destination)]
    if len(src) != len(dst):
        raise ValueError(
            f"`source` and `destination` arguments must have the same number of elements{at_source()}"
        )
    order = [i for i in range(x.ndim) if i not in src]
    for d, s in sorted(zip(dst, src, strict=True)):
        order.insert(d, s)
    return P.transpose(x, order)


@implements("expand_dims")
def expand_dims(a, axis):
    x = as_var(a)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    ndim = x.ndim + len(axes)
    axes = P.normalize_axes(axes, ndim)
    dims = iter(x.shape)
    return P.reshape(x, tuple(1 if i in axes else next(dims) for i in range(ndim)))


@implements("squeeze")
def squeeze(a, axis=None):
    x = as_var(a)
    if axis is None:
        axes = tuple(i for i, d in enumerate(x.shape) if d == 1)
    else:
        axes = P.normalize_axes(axis, x.ndim)
        for i in axes:
            if x.shape[i] != 1:
                raise ValueError(
                    f"cannot select an axis to squeeze out which has size not equal to one{at_source()}"
                )
    return P.reshape(x, tuple(d for i, d in enumerate(x.shape) if i not in axes))


@implements("broadcast_to")
def broadcast_to(a, shape, subok=False):
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    return P.broadcast_to(as_var(a), shape)


def _arrays(arrays) -> list[Var]:
    """The values of a sequence of arrays; one traced array is a sequence along its first axis,
    as NumPy iterates it."""
    if isinstance(arrays, Var):
        if arrays.ndim == 0:
            raise TypeError(f"iteration over a 0-d array{at_source()}")
        return [basic_getitem(arrays, i) for i in range(arrays.shape[0])]
    return [as_var(x) for x in arrays]


def _at_least(x: Var, ndim: int) -> Var:
    """np.atleast_1d / 2d / 3d: (N,) -> (1, N) -> (1, N, 1); (M, N) -> (M, N, 1)."""
    if x.ndim >= ndim:
        return x
    if ndim == 3 and x.ndim == 2:
        return P.reshape(x, x.shape + (1,))
    if ndim == 3:
        return P.reshape(x, (1, x.size, 1))
    return P.reshape(x, (1,) * (ndim - x.ndim) + x.shape)


@implements("concatenate")
def concatenate(arrays, axis=0, out=None, dtype=None, **kw):
    xs = _arrays(arrays)
    if not xs:
        raise ValueError("need at least one array to concatenate")
    if axis is None:
        xs, axis = [P.reshape(x, (x.size,)) for x in xs], 0
    ndim = xs[0].ndim
    if ndim == 0:
        raise ValueError(f"zero-dimensional arrays cannot be concatenated{at_source()}")
    axis = P.normalize_axes(axis, ndim)[0]
    for x in xs:
        if x.ndim != ndim or any(
            d != e for i, (d, e) in enumerate(zip(x.shape, xs[0].shape, strict=True)) if i != axis
        ):
            raise ShapeError(
                f"concatenate: shapes {[v.shape for v in xs]} differ outside axis {axis}{at_source()}"
            )
    if dtype is not None:
        xs = [P.convert(x, dtype) for x in xs]
    return P.concatenate(xs, axis)


@implements("stack")
def stack(arrays, axis=0, out=None, **kw):
    xs = _arrays(arrays)
    if not xs:
        raise ValueError("need at least one array to stack")
    if len({x.shape for x in xs}) != 1:
        raise ShapeError(
            f"stack: all input arrays must have the same shape, got {[x.shape for x in xs]}{at_source()}"
        )
    axis = P.normalize_axes(axis, xs[0].ndim + 1)[0]
    return concatenate([expand_dims(x, axis) for x in xs], axis, **kw)


@implements("hstack")
def hstack(arrays, **kw):
    xs = [_at_least(x, 1) for x in _arrays(arrays)]
    return concatenate(xs, axis=0 if xs and xs[0].ndim == 1 else 1, **kw)


@implements("vstack", "row_stack")
def vstack(arrays, **kw):
    return concatenate([_at_least(x, 2) for x in _arrays(arrays)], axis=0, **kw)


@implements("dstack")
def dstack(arrays, **kw):
    return concatenate([_at_least(x, 3) for x in _arrays(arrays)], axis=2, **kw)


@implements("column_stack")
def column_stack(arrays):
    xs = [P.reshape(x, (x.size, 1)) if x.ndim < 2 else x for x in _arrays(arrays)]
    return concatenate(xs, axis=1)


@implements("shape")
def shape_of(a):
    return as_var(a).shape


@implements("ndim")
def ndim_of(a):
    return as_var(a).ndim


@implements("size")
def size_of(a, axis=None):
    x = as_var(a)
    return x.size if axis is None else x.shape[axis]
