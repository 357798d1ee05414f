"""The indexing entries of the table (stage: primitives): gathers and scatter-adds along one axis
with traced integer indices, and argsort.
"""

from __future__ import annotations

import numpy as np

from .. import ir
from ..ir import Var
from .batching import with_batch_axis
from .facets import OWN_STEP, Kind, Primitive, register, registered
from .ops import add, broadcast_to, compare, const, emit, reshape, transpose, where

# ---- Gathers and scatter-adds along one axis, with integer indices that may be traced values.
# They run as steps of their own (no kernel template: the planner gives them an evaluation step
# on every backend); an index out of range raises NumPy's IndexError when the program runs.


def _gather_impl(x, idx, axis):
    return np.take(x, idx, axis=axis)


def _gather_infer(shapes, dtypes, p):
    x, idx, axis = shapes[0], shapes[1], p["axis"]
    if np.dtype(dtypes[1]).kind not in "iu":
        raise ir.IRError(f"gather indices must be integers, got {dtypes[1]}")
    return x[:axis] + idx + x[axis + 1 :], dtypes[0]


def _fast_scatter(v, idx, n) -> bool:
    """Whether a scatter-add may take a summing fast path: float values, indices in range (out
    of range, np.add.at raises NumPy's IndexError)."""
    return v.dtype.kind == "f" and idx.size > 0 and idx.min() >= -n and idx.max() < n


def _scatter_add_compiled(node, compile):
    """The compiled backends' scatter-add: a Numba loop (tracegrad.base.host_kernels)."""
    from ..base import host_kernels

    axis, shape = node.params["axis"], tuple(node.params["shape"])

    def run(v, idx):
        idx = np.asarray(idx)
        if _fast_scatter(v, idx, shape[axis]):
            return host_kernels.scatter_add(v, idx, axis, shape)
        return scatter_add_impl(v, idx, axis, shape)

    return run


def scatter_add_impl(v, idx, axis, shape):
    n = shape[axis]
    idx = np.asarray(idx)
    if _fast_scatter(v, idx, n):
        # one np.bincount over flat output positions: several times faster than np.add.at
        # (unbuffered, one element at a time); sums in float64, so float32 gets one rounding
        pre = int(np.prod(shape[:axis], dtype=np.int64))
        post = int(np.prod(shape[axis + 1 :], dtype=np.int64))
        rows = np.where(idx < 0, idx + n, idx).astype(np.int64).reshape(1, -1, 1)
        flat = (np.arange(pre).reshape(-1, 1, 1) * n + rows) * post + np.arange(post).reshape(
            1, 1, -1
        )
        sums = np.bincount(flat.ravel(), weights=v.reshape(-1), minlength=pre * n * post)
        return sums.astype(v.dtype, copy=False).reshape(shape)
    out = np.zeros(shape, dtype=v.dtype)
    np.add.at(out, (slice(None),) * axis + (idx,), v)  # raises NumPy's IndexError out of range
    return out


def _scatter_add_infer(shapes, dtypes, p):
    shape, axis, idx = tuple(p["shape"]), p["axis"], shapes[1]
    if shapes[0] != shape[:axis] + idx + shape[axis + 1 :]:
        raise ir.IRError(f"scatter_add of {shapes[0]} with indices {idx} into {shape} along {axis}")
    return shape, dtypes[0]


def gather(x: Var, idx: Var, axis: int) -> Var:
    return emit(gather_p, x, idx, axis=axis)


def scatter_add(v: Var, idx: Var, axis: int, shape: tuple[int, ...]) -> Var:
    return emit(scatter_add_p, v, idx, axis=axis, shape=tuple(shape))


def _batch_offsets(size: int, n: int, idx: Var) -> Var:
    """Batched indices offset into each example's block of a flattened (batch, axis) pair.
    Negative indices count from the end of their own example's axis; an index outside it
    becomes one past the flattened axis, so that the step raises NumPy's IndexError instead of
    reading another example's block."""
    wrapped = where(compare(registered("lt"), idx, 0), add(idx, n), idx)
    offsets = const((np.arange(size, dtype=idx.dtype) * n).reshape((size,) + (1,) * (idx.ndim - 1)))
    shifted = add(wrapped, broadcast_to(offsets, idx.shape))
    outside = const(size * n, idx.shape, idx.dtype)
    inside = where(compare(registered("lt"), wrapped, n), shifted, outside)
    return where(compare(registered("ge"), wrapped, 0), inside, outside)


def _batch_gather(size, inputs, batched, axis):
    """Batched data, shared indices: the same gather one axis further. Batched indices: the
    gather puts their batch axis where the gathered axis was (moved to the front); with batched
    data too, the batch and gathered axes are flattened into one and each example's indices are
    offset into its own block."""
    x, idx = inputs
    bx, bi = batched
    if not bi:
        return gather(x, idx, axis + 1)
    if bx:
        n = x.shape[axis + 1]
        perm = (*range(1, axis + 1), 0, *range(axis + 1, x.ndim))
        x = reshape(transpose(x, perm), x.shape[1 : axis + 1] + (size * n,) + x.shape[axis + 2 :])
        idx = _batch_offsets(size, n, idx)
    out = gather(x, idx, axis)
    return transpose(out, (axis, *range(axis), *range(axis + 1, out.ndim)))


def _batch_scatter_add(size, inputs, batched, axis, shape):
    v, idx = inputs
    bv, bi = batched
    if not bi:
        return scatter_add(v, idx, axis + 1, (size,) + tuple(shape))
    v = with_batch_axis(v, bv, size)  # (B,) + shape[:axis] + idx.shape[1:] + rest
    n = shape[axis]
    shifted = _batch_offsets(size, n, idx)
    # v with its batch axis moved to where the indices' batch axis goes
    moved = transpose(v, (*range(1, axis + 1), 0, *range(axis + 1, v.ndim)))
    flat_shape = tuple(shape[:axis]) + (size * n,) + tuple(shape[axis + 1 :])
    out = scatter_add(moved, shifted, axis, flat_shape)
    out = reshape(out, tuple(shape[:axis]) + (size, n) + tuple(shape[axis + 1 :]))
    return transpose(out, (axis, *range(axis), *range(axis + 1, out.ndim)))


def _element_numbers(shape) -> np.ndarray:
    return np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)


def _gather_sparsity(node, consts):
    """Element k of the result reads the element of x that np.take picks (constant indices)."""
    x = node.inputs[0]
    if consts[1] is None:
        return [None, None]
    read = np.take(_element_numbers(x.shape), consts[1], axis=node.params["axis"]).reshape(-1)
    return [(np.arange(read.size), read), None]


def _scatter_add_sparsity(node, consts):
    """Element k of the values is added into the element of the result that a gather with the
    same (constant) indices would read back."""
    if consts[1] is None:
        return [None, None]
    shape, axis = tuple(node.params["shape"]), node.params["axis"]
    written = np.take(_element_numbers(shape), consts[1], axis=axis).reshape(-1)
    return [(written, np.arange(written.size)), None]


gather_p = register(
    Primitive(
        "gather",
        Kind.SHAPE,
        _gather_impl,
        _gather_infer,
        lambda ct, out, x, idx, axis: (scatter_add(ct, idx, axis, x.shape), None),
        _batch_gather,
        linear=True,
        index_map=OWN_STEP,
        sparsity=_gather_sparsity,
        fresh_result=True,  # np.take copies
        complex_operands=True,
    )
)
scatter_add_p = register(
    Primitive(
        "scatter_add",
        Kind.SHAPE,
        scatter_add_impl,
        _scatter_add_infer,
        lambda ct, out, v, idx, axis, shape: (gather(ct, idx, axis), None),
        _batch_scatter_add,
        linear=True,
        run_compiled=_scatter_add_compiled,
        index_map=OWN_STEP,
        sparsity=_scatter_add_sparsity,
        fresh_result=True,  # a sum into new zeros (bincount or the host loop)
        complex_operands=True,
    )
)


# argsort: the permutation that sorts along an axis (no derivative: an index). np.sort is a
# gather by it, so the sort's derivative routes each cotangent back through the permutation.
argsort_p = register(
    Primitive(
        "argsort",
        Kind.SHAPE,
        lambda x, axis, kind: np.argsort(x, axis=axis, kind=kind),
        lambda shapes, dtypes, p: (shapes[0], np.dtype(np.int64)),
        lambda ct, out, x, axis, kind: (None,),
        lambda size, inputs, batched, axis, kind: emit(
            argsort_p, inputs[0], axis=axis + 1, kind=kind
        ),
        differentiable=False,
        index_map=OWN_STEP,
    )
)
