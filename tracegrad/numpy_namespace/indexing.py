"""Indexing traced values (stage: tracing): basic indices (ints, slices, None, Ellipsis) read and
written; integer-array indices go to gathers.py and scatters.py.
"""

from __future__ import annotations

import numpy as np

from .. import primitives as P
from ..base.errors import TracingError
from ..ir import Var
from .operands import _src, _v, read_while_tracing


def refuse_boolean_scalar() -> None:
    raise TracingError(
        f"indexing a traced value with a boolean scalar is not supported{_src()}; "
        "x[True] is x[None] and x[False] is x[None][:0]"
    )


def _basic_index(x: Var, index) -> tuple[list[tuple[int, int, int]], list[int]]:
    """A static basic index (ints, slices, None, Ellipsis) of `x`: the normalised range of each
    axis and the shape of the result (ints remove their axis, None adds one)."""
    if not isinstance(index, tuple):
        index = (index,)
    for item in index:
        if isinstance(item, (bool, np.bool_)):
            refuse_boolean_scalar()
        if isinstance(item, (float, np.floating)):
            raise IndexError(
                "only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and "
                f"integer or boolean arrays are valid indices{_src()}"
            )
        if not (item is None or item is Ellipsis or isinstance(item, (int, np.integer, slice))):
            kind = (
                "an array"
                if isinstance(item, (Var, list, np.ndarray))
                else f"a {type(item).__name__}"
            )
            raise TracingError(
                f"indexing a traced value with {kind} is not supported{_src()}; "
                "only static ints, slices, None and ... (no arrays or traced indices)"
            )
        if isinstance(item, slice) and any(
            p is not None and not isinstance(p, (int, np.integer))
            for p in (item.start, item.stop, item.step)
        ):
            raise TracingError(f"slice bounds must be static ints{_src()}")
    used = sum(1 for i in index if i is not None and i is not Ellipsis)
    if index.count(Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if used > x.ndim:
        raise IndexError(f"too many indices for a traced value of {x.ndim} dimensions{_src()}")
    if Ellipsis in index:
        k = index.index(Ellipsis)
        index = index[:k] + (slice(None),) * (x.ndim - used) + index[k + 1 :]
    else:
        index = index + (slice(None),) * (x.ndim - used)
    ranges, out_shape, axis = [], [], 0
    for item in index:
        if item is None:
            out_shape.append(1)
            continue
        n = x.shape[axis]
        if isinstance(item, slice):
            start, stop, step = item.indices(n)
            ranges.append((start, stop, step))
            out_shape.append(len(range(start, stop, step)))
        else:
            i = int(item)
            if not -n <= i < n:
                raise IndexError(
                    f"index {i} is out of bounds for axis {axis} with size {n}{_src()}"
                )
            i %= n
            ranges.append((i, i + 1, 1))
        axis += 1
    return ranges, out_shape


def is_basic_index(index) -> bool:
    """Only static ints, slices, None and Ellipsis (NumPy's basic indexing: the result is a
    view); anything else (arrays, lists, traced values) is advanced indexing (a copy)."""
    items = index if isinstance(index, tuple) else (index,)
    return all(
        i is None
        or i is Ellipsis
        or (isinstance(i, (int, np.integer, slice)) and not isinstance(i, (bool, np.bool_)))
        for i in items
    )


def _getitem(x: Var, index) -> Var:
    """Basic indexing (static ints, slices, None, Ellipsis), and integer-array or static boolean
    indexing (gathers.advanced_getitem)."""
    if not is_basic_index(index):
        from .gathers import advanced_getitem  # gathers imports this module

        return advanced_getitem(x, index)
    ranges, out_shape = _basic_index(x, index)
    return P.reshape(P.slice_(x, tuple(ranges)), tuple(out_shape))


def _broadcast_value(v: Var, shape: tuple[int, ...], what: str) -> Var:
    if v.shape == tuple(shape):
        return v
    try:
        np.broadcast_shapes(v.shape, tuple(shape))
        if len(v.shape) > len(shape) or np.broadcast_shapes(v.shape, tuple(shape)) != tuple(shape):
            raise ValueError
    except ValueError:
        raise ValueError(
            f"could not broadcast input array from shape {v.shape} into shape {tuple(shape)} "
            f"({what}){_src()}"
        ) from None
    lead = len(shape) - v.ndim
    return P.broadcast_to(P.reshape(v, (1,) * lead + v.shape), tuple(shape))


def written_value(value, dtype) -> Var:
    """A value written into an array of `dtype` (`x[...] = value`), cast as NumPy casts it."""
    if isinstance(value, (Var, np.ndarray)) or not isinstance(
        value, (bool, int, float, np.generic)
    ):
        v = _v(value)
    else:  # assigned as NumPy assigns it: 300 into int8 or NaN into int64 raise, not wrap
        cell = np.empty((), dtype)
        try:
            cell[()] = value
        except (OverflowError, ValueError) as exc:
            raise type(exc)(f"{exc}{_src()}") from None
        v = P.const(cell, (), dtype)
    return P.convert(v, dtype)


def _setitem(x: Var, index, value) -> Var:
    """`x` with `x[index] = value` done, as a new value (NumPy's in-place assignment, made
    functional): static basic indices write a region (`unslice` and a select), a boolean mask
    (static or traced) selects where to write. The value is cast to x's dtype, as NumPy does."""
    v = written_value(value, x.dtype)
    mask = index if not isinstance(index, tuple) or len(index) != 1 else index[0]
    if (
        isinstance(mask, (list, np.ndarray, Var))
        and np.dtype(getattr(mask, "dtype", None) or np.asarray(mask).dtype) == np.bool_
    ):
        m = _v(mask)
        if m.shape != x.shape[: m.ndim]:
            raise IndexError(
                f"boolean index of shape {m.shape} does not match the indexed array of shape "
                f"{x.shape}{_src()}"
            )
        tail = x.shape[m.ndim :]
        fits = v.ndim <= len(tail) and np.broadcast_shapes(v.shape, tail) == tail
        if not fits and not isinstance(mask, Var):  # a mask known while tracing: its positions
            from .scatters import setitem_advanced

            if isinstance(mask, np.ndarray):
                read_while_tracing(mask)
            return setitem_advanced(x, tuple(np.nonzero(np.asarray(mask))), v)
        if not fits:
            raise TracingError(
                f"x[mask] = value with a value of shape {v.shape} is not supported{_src()}: the "
                "number of selected elements depends on the mask. Assign a scalar (or a value "
                f"for each row, shape {tail}), or write np.where(mask, values, x) with values "
                "shaped like x."
            )
        full_mask = P.broadcast_to(P.reshape(m, m.shape + (1,) * len(tail)), x.shape)
        return P.where(full_mask, _broadcast_value(v, x.shape, "x[mask] = value"), x)
    if not is_basic_index(index):  # integer arrays: a scatter (scatters.setitem_advanced)
        from .scatters import setitem_advanced

        return setitem_advanced(x, index, v)
    ranges, out_shape = _basic_index(x, index)
    region = tuple(len(range(*r)) for r in ranges)
    v = P.reshape(_broadcast_value(v, tuple(out_shape), "x[index] = value"), region)
    if region == x.shape and all(step > 0 for _, _, step in ranges):  # (not x[::-1] = v)
        return v
    placed = P.emit(P.unslice_p, v, shape=x.shape, index=tuple(ranges))
    selected = np.zeros(x.shape, dtype=bool)
    selected[tuple(slice(a, None if b < 0 else b, c) for a, b, c in ranges)] = True
    return P.where(P.const(selected), placed, x)
