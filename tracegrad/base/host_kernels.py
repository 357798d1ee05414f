"""Compiled host loops for steps that have no fused kernel but would be slow in NumPy: run by
the compiled backends through a primitive's `run_compiled` facet (the NumPy interpreter keeps the
reference implementation and never imports this module, so it never imports Numba).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _scatter_add(v, idx, out):
    # out[p, idx[i, j], q] += v[p, i, j, q] in the order of (i, j): the order NumPy's bincount
    # adds in, so both give the same float64 sums. v may be strided (a broadcast cotangent).
    for p in range(v.shape[0]):
        for i in range(idx.shape[0]):
            for j in range(idx.shape[1]):
                row = idx[i, j]
                for q in range(v.shape[3]):
                    out[p, row, q] += v[p, i, j, q]


def scatter_add(v: np.ndarray, idx: np.ndarray, axis: int, shape: tuple[int, ...]) -> np.ndarray:
    """`v` added into zeros of `shape` at `idx` along `axis`, for in-range indices of a float
    `v` (the caller checks): sums in float64, rounded once to v's dtype."""
    n = shape[axis]
    pre = int(np.prod(shape[:axis], dtype=np.int64))
    post = int(np.prod(shape[axis + 1 :], dtype=np.int64))
    rows = idx.astype(np.int64).reshape(-1, idx.shape[-1] if idx.ndim else 1)
    rows = np.where(rows < 0, rows + n, rows)
    out = np.zeros((pre, n, post))
    # a view whenever v's leading and trailing axes merge (no copy of a broadcast cotangent)
    _scatter_add(v.reshape(pre, rows.shape[0], rows.shape[1], post), rows, out)
    return out.astype(v.dtype, copy=False).reshape(shape)


def add_at(v: np.ndarray, positions: np.ndarray, out: np.ndarray) -> None:
    """`out[positions[i]] += v[i]` in order of i, into a 1-d `out` (positions in range): the
    scatter-add's own loop, so its sums are the scatter-add's."""
    m, n = positions.shape[0], out.shape[0]
    _scatter_add(v.reshape(1, m, 1, 1), positions.reshape(m, 1), out.reshape(1, n, 1))
