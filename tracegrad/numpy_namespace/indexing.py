"""Basic indexing of traced values (stage: tracing): basic indices (ints, slices, None, Ellipsis)
checked, read and written, and the values a write casts and broadcasts. `x[index]` and
`x[index] = value` in full (integer arrays, boolean masks) are gathers.getitem and
scatters.setitem, built on these.
"""

from __future__ import annotations

import numpy as np

from .. import primitives as P
from ..base.errors import TracingError
from ..ir import Var
from ..tracing.dispatch import provides
from ..tracing.source import at_source
from .operands import as_var


def refuse_boolean_scalar() -> None:
    raise TracingError(
        f"indexing a traced value with a boolean scalar is not supported{at_source()}; "
        "x[True] is x[None] and x[False] is x[None][:0]"
    )


@provides("basic_index")
def basic_index(x: Var, index) -> tuple[list[tuple[int, int, int]], list[int]]:
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
                f"integer or boolean arrays are valid indices{at_source()}"
            )
        if not (item is None or item is Ellipsis or isinstance(item, (int, np.integer, slice))):
            kind = (
                "an array"
                if isinstance(item, (Var, list, np.ndarray))
                else f"a {type(item).__name__}"
            )
            raise TracingError(
                f"indexing a traced value with {kind} is not supported{at_source()}; "
                "only static ints, slices, None and ... (no arrays or traced indices)"
            )
        if isinstance(item, slice) and any(
            p is not None and not isinstance(p, (int, np.integer))
            for p in (item.start, item.stop, item.step)
        ):
            raise TracingError(f"slice bounds must be static ints{at_source()}")
    used = sum(1 for i in index if i is not None and i is not Ellipsis)
    if index.count(Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if used > x.ndim:
        raise IndexError(f"too many indices for a traced value of {x.ndim} dimensions{at_source()}")
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
                    f"index {i} is out of bounds for axis {axis} with size {n}{at_source()}"
                )
            i %= n
            ranges.append((i, i + 1, 1))
        axis += 1
    return ranges, out_shape


@provides("is_basic_index")
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


def basic_getitem(x: Var, index) -> Var:
    """x[index] for a basic index (static ints, slices, None, Ellipsis): a slice, reshaped."""
    ranges, out_shape = basic_index(x, index)
    return P.reshape(P.slice_(x, tuple(ranges)), tuple(out_shape))


def broadcast_value(v: Var, shape: tuple[int, ...], what: str) -> Var:
    if v.shape == tuple(shape):
        return v
    try:
        np.broadcast_shapes(v.shape, tuple(shape))
        if len(v.shape) > len(shape) or np.broadcast_shapes(v.shape, tuple(shape)) != tuple(shape):
            raise ValueError
    except ValueError:
        raise ValueError(
            f"could not broadcast input array from shape {v.shape} into shape {tuple(shape)} "
            f"({what}){at_source()}"
        ) from None
    lead = len(shape) - v.ndim
    return P.broadcast_to(P.reshape(v, (1,) * lead + v.shape), tuple(shape))


def written_value(value, dtype) -> Var:
    """A value written into an array of `dtype` (`x[...] = value`), cast as NumPy casts it."""
    if isinstance(value, (Var, np.ndarray)) or not isinstance(
        value, (bool, int, float, np.generic)
    ):
        v = as_var(value)
    else:  # assigned as NumPy assigns it: 300 into int8 or NaN into int64 raise, not wrap
        cell = np.empty((), dtype)
        try:
            cell[()] = value
        except (OverflowError, ValueError) as exc:
            raise type(exc)(f"{exc}{at_source()}") from None
        v = P.const(cell, (), dtype)
    return P.convert(v, dtype)


def basic_setitem(x: Var, index, v: Var) -> Var:
    """`x` with `x[index] = v` done for a basic index and a value `v` in x's dtype: the region
    written (`unslice`) and a select."""
    ranges, out_shape = basic_index(x, index)
    region = tuple(len(range(*r)) for r in ranges)
    v = P.reshape(broadcast_value(v, tuple(out_shape), "x[index] = value"), region)
    if region == x.shape and all(step > 0 for _, _, step in ranges):  # (not x[::-1] = v)
        return v
    placed = P.emit(P.unslice_p, v, shape=x.shape, index=tuple(ranges))
    selected = np.zeros(x.shape, dtype=bool)
    selected[tuple(slice(a, None if b < 0 else b, c) for a, b, c in ranges)] = True
    return P.where(P.const(selected), placed, x)
