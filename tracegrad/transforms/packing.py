"""Several results packed into one value: the output of a control-flow node (see loops.py).

A node has one output value in the IR, and a loop has several results. They are flattened,
converted to one common dtype (NumPy's `result_type`, which holds each exactly) and concatenated
into a 1-D array; `unpack` emits the slices, reshapes and conversions that take them apart, and
the `*_arrays`/`packed_views` helpers do the same on NumPy arrays for the runners.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import ir
from .. import primitives as P
from ..ir import Var

Aval = tuple[tuple[int, ...], np.dtype]


def avals(vars_: Sequence[Var]) -> list[Aval]:
    return [(v.shape, v.dtype) for v in vars_]


def pack_dtype(layout: Sequence[Aval]) -> np.dtype:
    return np.result_type(*[d for _, d in layout]) if layout else np.dtype(np.float64)


def pack_size(layout: Sequence[Aval]) -> int:
    return int(sum(int(np.prod(s, dtype=np.int64)) for s, _ in layout))


def unpack(packed: Var, layout: Sequence[Aval]) -> list[Var]:
    """The results packed into `packed`, as values of their own shapes and dtypes."""
    out, offset = [], 0
    for shape, dtype in layout:
        n = int(np.prod(shape, dtype=np.int64))
        piece = P.slice_(packed, ((offset, offset + n, 1),))
        out.append(P.convert(P.reshape(piece, shape), dtype))
        offset += n
    return out


def pack(values: Sequence[Var], dtype: np.dtype) -> Var:
    """The inverse of `unpack` (used by batching rules to lay results out per example)."""
    flat = [P.convert(P.reshape(v, (v.size,)), dtype) for v in values]
    if not flat:
        return P.const(0, (0,), dtype)
    return P.concatenate(flat, 0)


def packed_views(packed: np.ndarray, layout: Sequence[Aval]) -> list[np.ndarray]:
    """Views of a packed array, one per result (writable when `packed` is): not converted."""
    views, offset = [], 0
    for shape, _ in layout:
        n = int(np.prod(shape, dtype=np.int64))
        views.append(packed[offset : offset + n].reshape(shape))
        offset += n
    return views


def pack_into(values: Sequence, layout: Sequence[Aval], packed: np.ndarray | None = None):
    """`values` (host arrays of `layout`) written into `packed` (a new array if None)."""
    if packed is None:
        packed = np.empty(pack_size(layout), pack_dtype(layout))
    for view, v in zip(packed_views(packed, layout), values, strict=True):
        view[...] = v
    return packed


def unpack_arrays(packed: np.ndarray, layout: Sequence[Aval]) -> list[np.ndarray]:
    return [
        np.asarray(view, dtype=dtype)
        for view, (_, dtype) in zip(packed_views(packed, layout), layout, strict=True)
    ]


def check_avals(what: str, got: Sequence[Aval], want: Sequence[Aval]) -> None:
    if len(got) != len(want) or any(
        tuple(gs) != tuple(ws) or np.dtype(gd) != np.dtype(wd)
        for (gs, gd), (ws, wd) in zip(got, want, strict=False)
    ):
        shown = lambda avs: ", ".join(ir.type_str(s, d) for s, d in avs)
        raise ir.IRError(f"{what}: expected ({shown(want)}), got ({shown(got)})")
