"""The shape entries of the table (stage: primitives): broadcast, reshape, transpose, slices and
concatenation, which move data without arithmetic; their index maps and simplifications.
"""

from __future__ import annotations

import numpy as np

from ..ir import Var
from .batching import with_batch_axis
from .facets import NO_ALGEBRA, Algebra, IndexMap, Kind, Piece, Primitive, Window, register
from .ops import slice_len, sum_to, broadcast_to, concatenate, emit, reshape, slice_, transpose


def _broadcast_rule(ct, out, x, shape):
    return (sum_to(ct, x.shape),)


def _slice_rule(ct, out, x, index):
    return (emit(unslice_p, ct, shape=x.shape, index=index),)


def _unslice_rule(ct, out, x, shape, index):
    return (slice_(ct, index),)


def _concatenate_rule(ct, out, *xs, axis):
    cts, start = [], 0
    for x in xs:
        index = tuple(
            (start, start + x.shape[axis], 1) if i == axis else (0, d, 1)
            for i, d in enumerate(out.shape)
        )
        cts.append(slice_(ct, index))
        start += x.shape[axis]
    return tuple(cts)


def _batch_broadcast(size, inputs, batched, shape):
    (x,) = inputs
    lead = len(shape) - (x.ndim - 1)
    x = reshape(x, (size,) + (1,) * lead + x.shape[1:])
    return broadcast_to(x, (size,) + tuple(shape))


def _batch_concatenate(size, inputs, batched, axis):
    xs = [with_batch_axis(x, b, size) for x, b in zip(inputs, batched, strict=True)]
    return emit(concatenate_p, *xs, axis=axis + 1)


def _shape_prim(
    name, impl, infer, adjoint, batch, index_map, algebra=NO_ALGEBRA, complex_operands=False
):
    return register(
        Primitive(
            name,
            Kind.SHAPE,
            impl,
            infer,
            adjoint,
            batch,
            linear=True,
            index_map=index_map,
            algebra=algebra,
            complex_operands=complex_operands,
        )
    )


# ---- Index maps: the input index an output index reads (see `IndexMap`)


def _broadcast_through(node, index, constant):
    x = node.inputs[0]
    lead = len(node.out.shape) - x.ndim
    return tuple(constant(0) if x.shape[j] == 1 else index[lead + j] for j in range(x.ndim))


def _broadcast_strides(params, shape, strides, out_shape):
    lead = len(out_shape) - len(shape)
    return (0,) * lead + tuple(
        0 if d == 1 and out_shape[lead + i] != 1 else s
        for i, (d, s) in enumerate(zip(shape, strides, strict=True))
    ), 0


def _transpose_through(node, index, constant):
    out = [None] * node.inputs[0].ndim
    for k, j in enumerate(node.params["perm"]):
        out[j] = index[k]
    return tuple(out)


def _slice_through(node, index, constant):
    return tuple(
        constant(0) if n == 1 else ix.shifted(step, start)
        for ix, (start, _, step), n in zip(
            index, node.params["index"], node.inputs[0].shape, strict=True
        )
    )


def _slice_strides(params, shape, strides, out_shape):
    offset, new = 0, []
    for (start, _stop, step), s, n in zip(params["index"], strides, out_shape, strict=True):
        if n:
            offset += start * s
        new.append(s * step)
    return tuple(new), offset


def _reshape_through(node, index, constant):
    """Only unit axes come and go (`_unit_axes_only`)."""
    kept = iter([ix for ix, d in zip(index, node.out.shape, strict=True) if d != 1])
    return tuple(constant(0) if d == 1 else next(kept) for d in node.inputs[0].shape)


def _unit_axes_only(node) -> bool:
    a, b = node.inputs[0].shape, node.out.shape
    return [d for d in a if d != 1] == [d for d in b if d != 1]


def _unslice_pieces(node, index):
    """One piece: the input, read at (index - start) * step on the axes it does not cover."""
    x = node.inputs[0]
    if x.size == 0:
        return []
    axes = []
    for ix, (start, _, step), n_in, n_out in zip(
        index, node.params["index"], x.shape, node.out.shape, strict=True
    ):
        if (start, step) == (0, 1) and n_in == n_out:
            axes.append(ix)
        else:  # step is +-1 (`_unslice_steps_ok`)
            axes.append(Window(ix.shifted(1, -start).shifted(step, 0), n_in))
    return [Piece(0, tuple(axes))]


def _unslice_steps_ok(node) -> bool:
    return all(step in (1, -1) for _, _, step in node.params["index"])


def _concatenate_pieces(node, index):
    """Each non-empty input over its range of the axis; the last takes what the others do not."""
    axis = node.params["axis"]
    pieces, start = [], 0
    for k, x in enumerate(node.inputs):
        length = x.shape[axis]
        if length:
            pieces.append((k, start, length))
        start += length
    out = []
    for n, (k, off, length) in enumerate(pieces):
        window = Window(index[axis].shifted(1, -off), length, guard=n < len(pieces) - 1)
        out.append(Piece(k, index[:axis] + (window,) + index[axis + 1 :]))
    return out


def _transpose_twice(node, fills, producers):
    """A transpose undone (forward mode makes these)."""
    inner = producers[0]
    if inner is None or inner.prim is not node.prim:
        return None
    combined = tuple(inner.params["perm"][p] for p in node.params["perm"])
    return inner.inputs[0] if combined == tuple(range(len(combined))) else None


def _reshape_twice(node, fills, producers):
    inner = producers[0]
    if inner is None or inner.prim is not node.prim:
        return None
    return inner.inputs[0] if inner.inputs[0].shape == node.out.shape else None


_MOVES_FILL = Algebra(moves_fill=True)


broadcast_to_p = _shape_prim(
    "broadcast_to",
    lambda x, shape: np.broadcast_to(x, shape),
    lambda shapes, dtypes, p: (tuple(p["shape"]), dtypes[0]),
    _broadcast_rule,
    _batch_broadcast,
    IndexMap(through=_broadcast_through, strides=_broadcast_strides, view=True),
    _MOVES_FILL,
    complex_operands=True,
)
reshape_p = _shape_prim(
    "reshape",
    lambda x, shape: np.reshape(x, shape),
    lambda shapes, dtypes, p: (tuple(p["shape"]), dtypes[0]),
    lambda ct, out, x, shape: (reshape(ct, x.shape),),
    lambda size, inputs, batched, shape: reshape(inputs[0], (size,) + tuple(shape)),
    # strides None: a reshape views contiguous memory only
    IndexMap(through=_reshape_through, inline=_unit_axes_only, view=True, general_view=True),
    Algebra(moves_fill=True, rewrite=_reshape_twice),
    complex_operands=True,
)
transpose_p = _shape_prim(
    "transpose",
    lambda x, perm: np.transpose(x, perm),
    lambda shapes, dtypes, p: (tuple(shapes[0][i] for i in p["perm"]), dtypes[0]),
    lambda ct, out, x, perm: (transpose(ct, tuple(np.argsort(perm))),),
    lambda size, inputs, batched, perm: transpose(inputs[0], (0,) + tuple(p + 1 for p in perm)),
    IndexMap(
        through=_transpose_through,
        strides=lambda params, shape, strides, out_shape: (
            tuple(strides[p] for p in params["perm"]),
            0,
        ),
        view=True,
    ),
    Algebra(moves_fill=True, rewrite=_transpose_twice),
    complex_operands=True,
)


def _forward_windows(index) -> bool:
    return all(step == 1 and 0 <= start <= stop for start, stop, step in index)


def _slice_of_pieces(node, fills, producers):
    """A slice of a slice is one slice. A slice that reads inside one piece of an unslice or a
    concatenate is a slice of that piece (the piece itself where it reads all of it), and one
    that reads only an unslice's padding is zeros: what a loop's adjoint reads of its packed
    cotangent, which the cotangents of the results that are read make (see
    autodiff.sum_of_slices)."""
    made, window = producers[0], node.params["index"]
    if made is None or not _forward_windows(window):
        return None
    if made.prim in (slice_p, unslice_p) and _forward_windows(made.params["index"]):
        pairs = list(zip(window, made.params["index"], strict=True))
        if made.prim is slice_p:  # a window of a window
            return slice_(
                made.inputs[0], tuple((a + c, b + c, 1) for (a, b, _), (c, _, _) in pairs)
            )
        if node.out.size and any(b <= c or d <= a for (a, b, _), (c, d, _) in pairs):
            return np.zeros((), node.out.dtype)
        if not all(c <= a and b <= d for (a, b, _), (c, d, _) in pairs):
            return None
        part, sub = made.inputs[0], tuple((a - c, b - c, 1) for (a, b, _), (c, _, _) in pairs)
    elif made.prim is concatenate_p:
        axis = made.params["axis"]
        a, b, _ = window[axis]
        offset = 0
        for part in made.inputs:
            if offset <= a and b <= offset + part.shape[axis]:
                break
            offset += part.shape[axis]
        else:
            return None
        sub = window[:axis] + ((a - offset, b - offset, 1),) + window[axis + 1 :]
    else:
        return None
    if all((a, b) == (0, n) for (a, b, _), n in zip(sub, part.shape, strict=True)):
        return part
    return slice_(part, sub)


slice_p = _shape_prim(
    "slice",
    lambda x, index: x[tuple(slice(a, (None if b < 0 else b), c) for a, b, c in index)],
    lambda shapes, dtypes, p: (tuple(slice_len(*ix) for ix in p["index"]), dtypes[0]),
    _slice_rule,
    lambda size, inputs, batched, index: slice_(inputs[0], ((0, size, 1),) + tuple(index)),
    IndexMap(through=_slice_through, strides=_slice_strides, view=True),
    # (unslice and concatenate are defined below; the rule reads them when it runs)
    Algebra(moves_fill=True, rewrite=_slice_of_pieces),
    complex_operands=True,
)


def _unslice_impl(x, shape, index):
    out = np.zeros(shape, dtype=x.dtype)
    out[tuple(slice(a, (None if b < 0 else b), c) for a, b, c in index)] = x
    return out


unslice_p = _shape_prim(
    "unslice",
    _unslice_impl,
    lambda shapes, dtypes, p: (tuple(p["shape"]), dtypes[0]),
    _unslice_rule,
    lambda size, inputs, batched, shape, index: emit(
        unslice_p, inputs[0], shape=(size,) + tuple(shape), index=((0, size, 1),) + tuple(index)
    ),
    # zeros, and the input where a slice of the result would read
    IndexMap(pieces=_unslice_pieces, inline=_unslice_steps_ok, zero_outside=True, inverse="slice"),
    complex_operands=True,
)


def _concatenate_infer(shapes, dtypes, params):
    axis = params["axis"]
    total = sum(s[axis] for s in shapes)
    return shapes[0][:axis] + (total,) + shapes[0][axis + 1 :], dtypes[0]


# A loop computes a concatenation in place (a branch per operand) up to this many operands; more
# (a vector assembled from many scalars, as an unrolled loop's `y[i] = ...` writes do) make a
# kernel whose compile time grows faster than its size, so the operands are stored and joined
# by NumPy's concatenate, a step of its own.
MAX_INLINE_PIECES = 16


def _merge_adjacent_slices(node, fills, producers):
    """Neighbouring operands that are neighbouring windows of one value (the rows of a rolled
    loop's stacked results, written back one by one) become one window of it."""
    axis = node.params["axis"]
    merged: list[tuple[Var, Var | None, tuple | None]] = []  # (operand, sliced value, window)
    for v, made in zip(node.inputs, producers, strict=True):
        if made is None or made.prim is not slice_p:
            merged.append((v, None, None))
            continue
        source, window = made.inputs[0], made.params["index"]
        if merged and merged[-1][1] is source:
            last = merged[-1][2]
            a, b, c = last[axis]
            start, stop, step = window[axis]
            if (
                c == step == 1
                and b == start
                and b >= 0
                and stop >= 0
                and all(
                    w == u for k, (w, u) in enumerate(zip(window, last, strict=True)) if k != axis
                )
            ):
                joined = last[:axis] + ((a, stop, 1),) + last[axis + 1 :]
                merged[-1] = (None, source, joined)
                continue
        merged.append((v, source, window))
    if len(merged) == len(node.inputs):
        return None
    operands = [v if v is not None else slice_(source, window) for v, source, window in merged]
    return concatenate(operands, axis)


concatenate_p = _shape_prim(
    "concatenate",
    lambda *xs, axis: np.concatenate(xs, axis=axis),
    _concatenate_infer,
    _concatenate_rule,
    _batch_concatenate,
    IndexMap(pieces=_concatenate_pieces, inline=lambda node: len(node.inputs) <= MAX_INLINE_PIECES),
    Algebra(rewrite=_merge_adjacent_slices),
    complex_operands=True,
)
