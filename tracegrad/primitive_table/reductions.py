"""The reductions and scans of the table (stage: primitives): sum, max, min and product over axes,
and the running sum, each combining values with its `Monoid`.
"""

from __future__ import annotations

import numpy as np

from ..ir import Var
from .facets import MAX, MIN, PROD, SUM, Kind, Monoid, OfItsEntry, Primitive, register
from .ops import (
    expand_reduced,
    infer_reduced,
    compare,
    concatenate,
    const,
    convert,
    ct_mul,
    cumulative,
    div,
    emit,
    mul,
    reduce_sum,
    reshape,
    reverse,
    slice_,
    transpose,
    where,
    zeros_like,
)
from .piecewise import eq_p


def _extremum_rule(ct, out, x, axes):
    hit = compare(eq_p, x, expand_reduced(out, x, axes))
    count = reduce_sum(convert(hit, x.dtype), axes)
    share = div(ct, count)
    return (where(hit, expand_reduced(share, x, axes), 0.0),)


def _prod_rule(ct, out, x, axes):
    """d prod / d x_i is the product of the other elements, exact where some are zero (prod / x_i
    would be 0/0). The reduced elements are multiplied pairwise in a tree (padded with ones to a
    power of two) and the cotangent is passed back down it, each level a `ct_mul` by the other
    half: only products, so every derivative of this rule is exact at zeros too."""
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    kept_shape = tuple(x.shape[i] for i in kept)
    moved = transpose(x, kept + tuple(axes))
    n = int(np.prod([x.shape[i] for i in axes], dtype=np.int64))
    if n == 0:
        return (zeros_like(x),)
    flat = reshape(moved, kept_shape + (n,))
    width = 1 << (n - 1).bit_length()
    if width > n:
        flat = concatenate([flat, const(1, kept_shape + (width - n,), x.dtype)], len(kept))

    def half(v: Var, k: int) -> Var:
        h = v.shape[-1] // 2
        return slice_(v, tuple((0, d, 1) for d in kept_shape) + ((k * h, (k + 1) * h, 1),))

    levels = [flat]
    while levels[-1].shape[-1] > 1:
        levels.append(mul(half(levels[-1], 0), half(levels[-1], 1)))
    c = reshape(ct, kept_shape + (1,))
    for level in reversed(levels[:-1]):
        c = concatenate([ct_mul(c, half(level, 1)), ct_mul(c, half(level, 0))], len(kept))
    if width > n:
        c = slice_(c, tuple((0, d, 1) for d in kept_shape) + ((0, n, 1),))
    c = reshape(c, moved.shape)
    return (transpose(c, tuple(np.argsort(kept + tuple(axes)))),)


def _batch_reduce(prim: Primitive):
    return lambda size, inputs, batched, axes: emit(
        prim, inputs[0], axes=tuple(a + 1 for a in axes)
    )


def _batch_scan(prim: Primitive):
    return lambda size, inputs, batched, axis: emit(prim, inputs[0], axis=axis + 1)


def _reduction(name, monoid: Monoid, adjoint, linear=False, complex_operands=False):
    prim = Primitive(
        name,
        Kind.REDUCE,
        lambda x, axes: monoid.reduce(x, axis=axes),
        infer_reduced,
        adjoint,
        OfItsEntry(_batch_reduce),
        None,
        True,
        linear,
        monoid=monoid,
        complex_operands=complex_operands,
    )
    return register(prim)


reduce_sum_p = _reduction(
    "reduce_sum",
    SUM,
    lambda ct, out, x, axes: (expand_reduced(ct, x, axes),),
    linear=True,
    complex_operands=True,
)
reduce_max_p = _reduction("reduce_max", MAX, _extremum_rule)
reduce_min_p = _reduction("reduce_min", MIN, _extremum_rule)
reduce_prod_p = _reduction("reduce_prod", PROD, _prod_rule, complex_operands=True)


def scan_primitive(name, monoid: Monoid, adjoint, linear=False, complex_operands=False):
    """A running reduction along `axis`: each output element combines the input elements up to
    it (its fused kernels come from the monoid; see fusion's `Scan`)."""
    prim = Primitive(
        name,
        Kind.SCAN,
        lambda x, axis: monoid.accumulate(x, axis=axis),
        lambda shapes, dtypes, p: (shapes[0], dtypes[0]),
        adjoint,
        OfItsEntry(_batch_scan),
        None,
        True,
        linear,
        monoid=monoid,
        complex_operands=complex_operands,
    )
    return register(prim)


# the adjoint of a running sum is the running sum from the other end
cumsum_p = scan_primitive(
    "cumsum",
    SUM,
    lambda ct, out, x, axis: (reverse(cumulative(cumsum_p, reverse(ct, axis), axis), axis),),
    linear=True,
    complex_operands=True,
)
