"""The matrix product of the table (stage: primitives): NumPy's matmul lowered to one batched 2-D
primitive, and its batching rule (one larger product, never one per batch element).
"""

from __future__ import annotations

import numpy as np

from .. import ir
from ..base.errors import ShapeError, at
from ..ir import Var
from .facets import Kind, Primitive, register
from .ops import (
    result_dtype,
    broadcast_shapes,
    broadcast_to,
    convert,
    emit,
    reshape,
    swap_last,
    transpose,
)


def matmul(a: Var, b: Var) -> Var:
    """NumPy's matmul for 1-D and n-D operands, lowered to the batched 2-D primitive."""
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(
            f"matmul: operands must not be scalars (0-d){at(ir.current_source())}; use *"
        )
    dtype = result_dtype([a, b])
    a, b = convert(a, dtype), convert(b, dtype)
    a2 = reshape(a, (1,) + a.shape) if a.ndim == 1 else a
    b2 = reshape(b, b.shape + (1,)) if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ShapeError(
            f"matmul: inner dimensions differ: shapes {a.shape} and {b.shape} "
            f"({a2.shape[-1]} != {b2.shape[-2]}){at(ir.current_source())}"
        )
    batch = broadcast_shapes(a2.shape[:-2], b2.shape[:-2], op="matmul")
    a2 = broadcast_to(a2, batch + a2.shape[-2:])
    b2 = broadcast_to(b2, batch + b2.shape[-2:])
    out = matmul_(a2, b2)
    shape = batch + (a2.shape[-2],) * (a.ndim > 1) + (b2.shape[-1],) * (b.ndim > 1)
    return reshape(out, shape)


def _batch_matmul(size, inputs, batched):
    """One product for the whole batch. With one operand batched, the batch axis is folded into
    its rows (a) or columns (b): one larger matrix product, never `size` copies of the other."""
    (a, b), (ba, bb) = inputs, batched
    if ba and bb:
        return matmul_(a, b)
    if ba:  # a: (B, *lead, m, k) and b: (*lead, k, n)
        lead, (m, k), n = b.shape[:-2], a.shape[-2:], b.shape[-1]
        nl = len(lead)
        rows = reshape(transpose(a, (*range(1, nl + 1), 0, nl + 1, nl + 2)), (*lead, size * m, k))
        out = reshape(matmul_(rows, b), (*lead, size, m, n))
        return transpose(out, (nl, *range(nl), nl + 1, nl + 2))
    # b: (B, *lead, k, n) and a: (*lead, m, k)
    lead, m, (k, n) = a.shape[:-2], a.shape[-2], b.shape[-2:]
    nl = len(lead)
    cols = reshape(transpose(b, (*range(1, nl + 1), nl + 1, 0, nl + 2)), (*lead, k, size * n))
    out = reshape(matmul_(a, cols), (*lead, m, size, n))
    return transpose(out, (nl + 1, *range(nl), nl, nl + 2))


def _matmul_infer(shapes, dtypes, params):
    a, b = shapes
    if a[:-2] != b[:-2] or a[-1] != b[-2] or len(a) < 2:
        raise ir.IRError(f"matmul of {a} and {b}")
    return a[:-1] + b[-1:], dtypes[0]


matmul_p = register(
    Primitive(
        "matmul",
        Kind.MATMUL,
        impl=np.matmul,
        infer=_matmul_infer,
        adjoint=lambda ct, out, a, b: (matmul_(ct, swap_last(b)), matmul_(swap_last(a), ct)),
        batch=_batch_matmul,
        complex_operands=True,
    )
)


def matmul_(a: Var, b: Var) -> Var:
    """The batched 2-D product (a contraction over one element becomes an elementwise product
    in passes.simplify)."""
    return emit(matmul_p, a, b)
