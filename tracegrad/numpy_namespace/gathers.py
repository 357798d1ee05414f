"""Gathers on traced values (stage: tracing): x[index] in full (`getitem`: basic indexing, and
integer-array and static boolean indexing), take, take_along_axis, add.at.
"""

from __future__ import annotations

import numpy as np

from .. import primitives as P
from ..base.errors import TracingError
from ..ir import Var
from ..tracing.dispatch import implements, provides
from ..tracing.source import at_source
from .indexing import basic_getitem, basic_index, is_basic_index, refuse_boolean_scalar
from .operands import as_var, normalize_axis, read_while_tracing
from .shapes import ravel

# ---- gathers: integer-array and static boolean indexing, take, take_along_axis, add.at


def _index_array(item) -> bool:
    return isinstance(item, (Var, np.ndarray, list))


def _as_indices(item, n: int, what: str) -> Var:
    """An integer index array as an int64 value (static lists and arrays become constants)."""
    if isinstance(item, list):
        item = np.asarray(item) if item else np.zeros(0, np.int64)  # x[[]]: NumPy's empty index
    elif isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
        item = np.asarray(item, np.int64)  # np.take(x, 3): a 0-d index
    if isinstance(item, np.ndarray):
        read_while_tracing(item)
        if item.dtype.kind not in "iu":
            raise IndexError(
                f"arrays used as indices must be of integer (or boolean) type, got {item.dtype}{at_source()}"
            )
        if item.size and (item.max() >= n or item.min() < -n):
            bad = int(item.max() if item.max() >= n else item.min())
            raise IndexError(f"index {bad} is out of bounds for {what} with size {n}{at_source()}")
        return P.const(item.astype(np.int64))
    if item.dtype.kind not in "iu":
        raise IndexError(
            f"arrays used as indices must be of integer (or boolean) type, got {item.dtype}{at_source()}"
        )
    return P.convert(item, np.int64)


def _from_the_end(idx: Var, n: int) -> Var:
    """Negative indices counted from the end of an axis of length n, as NumPy's."""
    return P.where(P.compare(P.lt_p, idx, 0), P.add(idx, n), idx)


def _outside(wrapped: Var, n: int) -> Var:
    """Where an index (negatives already counted from the end) is outside its axis of length n."""
    return P.logical(P.or_p, P.compare(P.lt_p, wrapped, 0), P.compare(P.ge_p, wrapped, n))


def _or_past_the_end(flat: Var, outside: Var | None, size: int) -> Var:
    """A flat index into `size` elements, moved past the end where one of the indices it was made
    from is outside its own axis: the gather then raises NumPy's IndexError, where the flat
    position would have read (or written) another row's element."""
    if outside is None:
        return flat
    return P.where(outside, P.const(size, flat.shape, flat.dtype), flat)


def _static_mask(item) -> np.ndarray | None:
    """A boolean mask known while tracing (a NumPy array or a list of bools), else None."""
    if isinstance(item, (list, np.ndarray)):
        mask = np.asarray(item)
        return mask if mask.dtype == np.bool_ else None
    return None


def _consumes(item) -> int:
    """How many axes of the indexed array an index item uses."""
    if item is None or item is Ellipsis:
        return 0
    mask = _static_mask(item)
    return 1 if mask is None else mask.ndim


def _check_static_masks(x: Var, items: list) -> None:
    """A static boolean mask must have the shape of the axes it indexes, as NumPy requires."""
    axis = 0
    for k, item in enumerate(items):
        if item is Ellipsis:
            axis = x.ndim - sum(_consumes(i) for i in items[k + 1 :])
            continue
        mask = _static_mask(item)
        if mask is not None:
            if mask.ndim == 0:
                refuse_boolean_scalar()
            for j, size in enumerate(mask.shape):
                if axis + j >= x.ndim or x.shape[axis + j] != size:
                    have = x.shape[axis + j] if axis + j < x.ndim else 0
                    raise IndexError(
                        f"boolean index did not match indexed array along axis {axis + j}; size "
                        f"of axis is {have} but size of corresponding boolean axis is {size}"
                        f"{at_source()}"
                    )
        axis += _consumes(item)


@provides("getitem")
def getitem(x: Var, index) -> Var:
    """Basic indexing (static ints, slices, None, Ellipsis), and integer-array or static boolean
    indexing (`advanced_getitem`)."""
    if not is_basic_index(index):
        return advanced_getitem(x, index)
    return basic_getitem(x, index)


def advanced_getitem(x: Var, index) -> Var:
    """NumPy's advanced indexing, for what research code uses: one integer array (traced or
    not) among basic indices; several integer arrays on the leading axes; a static boolean
    mask. A traced boolean mask would give a result whose shape depends on the values: refused,
    with the np.where form. The gather's adjoint is a scatter-add, so repeated indices
    accumulate their gradients."""
    items = list(index) if isinstance(index, tuple) else [index]
    # inside an index tuple, a tuple is a sequence of indices, as a list is: x[(0, 1), (3, 2)]
    items = [list(item) if isinstance(item, tuple) else item for item in items]
    _check_static_masks(x, items)
    expanded = []
    for item in items:
        mask = _static_mask(item)
        if mask is not None:
            if isinstance(item, np.ndarray):
                read_while_tracing(item)
            expanded.extend(np.nonzero(mask))  # static: the selected positions
        elif isinstance(item, Var) and item.dtype == np.bool_:
            raise TracingError(
                f"indexing with a traced boolean mask (x[mask]) gives a result whose shape depends "
                f"on the values{at_source()}; write np.where(mask, x, 0) (or another neutral value) "
                "and reduce over it, e.g. np.sum(np.where(mask, x, 0))"
            )
        else:
            expanded.append(item)
    items = expanded
    arrays = [k for k, item in enumerate(items) if _index_array(item)]
    if not arrays:  # no array: a boolean scalar or a float, which basic_index refuses
        basic_index(x, tuple(items))
        raise TracingError(f"unsupported index {index!r}{at_source()}")
    if len(arrays) > 1:
        if any(not (_index_array(i) or isinstance(i, (int, np.integer))) for i in items):
            raise TracingError(
                f"indexing with several integer arrays mixed with slices is not supported{at_source()}; "
                "index the leading axes with arrays only (x[i, j]), or one axis at a time"
            )
        return _gather_leading(x, items)
    k = arrays[0]
    used = sum(1 for i in items if i is not None and i is not Ellipsis)
    if used > x.ndim:
        raise IndexError(f"too many indices for a traced value of {x.ndim} dimensions{at_source()}")
    ellipsis = [j for j, i in enumerate(items) if i is Ellipsis]
    if ellipsis:
        e = ellipsis[0]
        items = items[:e] + [slice(None)] * (x.ndim - used) + items[e + 1 :]
        k = next(j for j, item in enumerate(items) if _index_array(item))
    basic = items[:k] + [slice(None)] + items[k + 1 :]
    y = as_var(getitem(x, tuple(basic)))
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


def _gather_leading(x: Var, items) -> Var:
    """x[i0, i1, ...] with integer arrays (or ints) on the leading axes: one gather of the
    flattened leading axes at the broadcast flat index."""
    k = len(items)
    if k > x.ndim:
        raise IndexError(f"too many indices for a traced value of {x.ndim} dimensions{at_source()}")
    idx = [
        _as_indices(
            np.asarray(i) if isinstance(i, (int, np.integer)) else i, x.shape[a], f"axis {a}"
        )
        for a, i in enumerate(items)
    ]
    shape = np.broadcast_shapes(*(i.shape for i in idx))
    flat = outside = None
    for a, i in enumerate(idx):
        n = x.shape[a]
        i = _from_the_end(i, n)
        i = P.broadcast_to(P.reshape(i, (1,) * (len(shape) - i.ndim) + i.shape), shape)
        bad = _outside(i, n)
        outside = bad if outside is None else P.logical(P.or_p, outside, bad)
        flat = i if flat is None else P.add(P.mul(flat, n), i)
    lead = int(np.prod(x.shape[:k], dtype=np.int64))
    flat = _or_past_the_end(flat, outside if k > 1 else None, lead)
    return P.gather(P.reshape(x, (lead,) + x.shape[k:]), flat, 0)


@implements("take")
def take(a, indices, axis=None, out=None, mode="raise"):
    if out is not None or mode != "raise":
        raise TracingError(
            f"np.take: out= and mode= other than 'raise' are not supported{at_source()}"
        )
    x = as_var(a)
    if axis is None:
        x, axis = ravel(x), 0
    axis = normalize_axis(axis, x.ndim)
    return P.gather(x, _as_indices(indices, x.shape[axis], f"axis {axis}"), axis)


@implements("take_along_axis")
def take_along_axis(arr, indices, axis=-1):
    x = as_var(arr)
    if axis is None:
        x, axis = ravel(x), 0
    axis = normalize_axis(axis, x.ndim)
    idx = _as_indices(indices, x.shape[axis], f"axis {axis}")
    if idx.ndim != x.ndim:
        raise ValueError(
            f"`indices` and `arr` must have the same number of dimensions{at_source()}"
        )
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
    if rows > 1:
        flat_idx = _or_past_the_end(flat_idx, _outside(it, n), rows * n)
    out = P.gather(P.reshape(xt, (rows * n,)), flat_idx, 0)
    return P.transpose(out, list(np.argsort(perm)))


@provides("add_at")
def add_at(a: Var, indices, b) -> Var:
    """The value of `a` after np.add.at(a, indices, b): a scatter-add (repeated indices add up)."""
    items = indices if isinstance(indices, tuple) else (indices,)
    v = as_var(b) if isinstance(b, (Var, np.ndarray)) else P.const(b, (), a.dtype)
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
                raise IndexError(f"np.add.at: {e}{at_source()}") from None
        else:
            idx = as_var(getitem(P.const(table), indices))
        target = idx.shape
    try:
        np.broadcast_shapes(v.shape, target)
        if v.ndim > len(target) or np.broadcast_shapes(v.shape, target) != target:
            raise ValueError
    except ValueError:
        raise ValueError(
            f"np.add.at: values of shape {v.shape} do not broadcast to the {target} elements the "
            f"indices select{at_source()}"
        ) from None
    v = P.broadcast_to(P.reshape(v, (1,) * (len(target) - v.ndim) + v.shape), target)
    if leading:
        return P.add(a, P.scatter_add(v, idx, 0, a.shape))
    flat = P.scatter_add(P.reshape(v, (idx.size,)), P.reshape(idx, (idx.size,)), 0, (a.size,))
    return P.add(a, P.reshape(flat, a.shape))
