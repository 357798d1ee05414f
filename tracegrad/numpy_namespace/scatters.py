"""Writes into traced values (stage: tracing): x[index] = value in full (`setitem`: basic
indices, boolean masks, integer arrays), y[idx] += v, np.put_along_axis, and the regions written
by several assignments.
"""

from __future__ import annotations

import numpy as np

from .. import primitives as P
from ..ir import Var
from ..base.errors import TracingError
from ..tracing.dispatch import provides
from ..tracing.source import at_source
from .gathers import advanced_getitem, take_along_axis
from .indexing import basic_index, basic_setitem, broadcast_value, is_basic_index, written_value
from .operands import as_var, normalize_axis, read_while_tracing

# ---- x[index] = value


@provides("setitem")
def setitem(x: Var, index, value) -> Var:
    """`x` with `x[index] = value` done, as a new value (NumPy's in-place assignment, made
    functional): static basic indices write a region (`unslice` and a select), a boolean mask
    (static or traced) selects where to write. The value is cast to x's dtype, as NumPy does."""
    v = written_value(value, x.dtype)
    mask = index if not isinstance(index, tuple) or len(index) != 1 else index[0]
    if (
        isinstance(mask, (list, np.ndarray, Var))
        and np.dtype(getattr(mask, "dtype", None) or np.asarray(mask).dtype) == np.bool_
    ):
        m = as_var(mask)
        if m.shape != x.shape[: m.ndim]:
            raise IndexError(
                f"boolean index of shape {m.shape} does not match the indexed array of shape "
                f"{x.shape}{at_source()}"
            )
        tail = x.shape[m.ndim :]
        fits = v.ndim <= len(tail) and np.broadcast_shapes(v.shape, tail) == tail
        if not fits and not isinstance(mask, Var):  # a mask known while tracing: its positions
            if isinstance(mask, np.ndarray):
                read_while_tracing(mask)
            return setitem_advanced(x, tuple(np.nonzero(np.asarray(mask))), v)
        if not fits:
            raise TracingError(
                f"x[mask] = value with a value of shape {v.shape} is not supported{at_source()}: the "
                "number of selected elements depends on the mask. Assign a scalar (or a value "
                f"for each row, shape {tail}), or write np.where(mask, values, x) with values "
                "shaped like x."
            )
        full_mask = P.broadcast_to(P.reshape(m, m.shape + (1,) * len(tail)), x.shape)
        return P.where(full_mask, broadcast_value(v, x.shape, "x[mask] = value"), x)
    if not is_basic_index(index):  # integer arrays: a scatter (setitem_advanced, below)
        return setitem_advanced(x, index, v)
    return basic_setitem(x, index, v)


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


@provides("set_regions")
def set_regions(x: Var, writes: list[tuple[object, object]]) -> Var:
    """`x` after `x[index] = value` for each (static basic index, value) in order.

    Many small writes (a preallocated array filled element by element) become one scatter of
    every written value, the last write of each position winning: O(written + size) work and a
    handful of nodes, where one select per write would be O(writes x size) and a kernel with an
    operand per write. A few writes that cover much of the array keep the fused selects."""
    regions = []
    for index, value in writes:
        ranges, out_shape = basic_index(x, index)
        regions.append((index, value, ranges, tuple(out_shape)))
    written = sum(int(np.prod(shape, dtype=np.int64)) for _, _, _, shape in regions)
    if len(writes) < 3 or (len(writes) < 8 and written > x.size // 2):
        for index, value, _, _ in regions:
            x = setitem(x, index, value)
        return x
    strides = np.cumprod((1,) + x.shape[:0:-1])[::-1]  # C order, in elements
    positions, values = [], []
    for _, value, ranges, shape in regions:
        grid = np.zeros((), np.int64)
        for (start, stop, step), stride in zip(ranges, strides, strict=True):
            grid = np.add.outer(grid, np.arange(start, stop, step, dtype=np.int64) * stride)
        positions.append(grid.reshape(-1))
        v = broadcast_value(written_value(value, x.dtype), shape, "x[index] = value")
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
            raise IndexError(f"{exc}{at_source()}") from None
    shape = tuple(np.shape(sel))
    if value.ndim > len(shape) or np.broadcast_shapes(value.shape, shape) != shape:
        raise ValueError(
            f"shape mismatch: value array of shape {value.shape} could not be broadcast to "
            f"indexing result of shape {shape}{at_source()}"
        )
    return scatter_set(x, sel, value)


@provides("put_along_axis")
def put_along_axis(arr: Var, indices, values, axis) -> Var:
    """The value of `arr` after np.put_along_axis(arr, indices, values, axis)."""
    if axis is None:
        flat = put_along_axis(P.reshape(arr, (arr.size,)), indices, values, 0)
        return P.reshape(flat, arr.shape)
    axis = normalize_axis(axis, arr.ndim)
    positions = P.const(np.arange(arr.size, dtype=np.int64).reshape(arr.shape))
    sel = take_along_axis(positions, indices, axis)
    v = P.convert(as_var(values), arr.dtype)
    if v.ndim > sel.ndim or np.broadcast_shapes(v.shape, sel.shape) != sel.shape:
        raise ValueError(
            f"values of shape {v.shape} do not broadcast to the indices' shape {sel.shape}{at_source()}"
        )
    return scatter_set(arr, sel, v)
