"""Small matrix products shared out over tracegrad's threads, OpenBLAS on one thread in each.

A thin network's products (2,048-16,384 rows by 10-64 columns) are too small for OpenBLAS's own
threads to pay: they synchronise at the end of every product, and afterwards they spin, waiting
for the next one, on the cores the fused loops between the products need. Measured on 2 cores
(the 10-64-64-1 network's value_and_grad, 16,384 rows, float64), the five products took 12.4 ms
on OpenBLAS's two threads, 21.0 ms on one, and 12.0 ms split in two halves on tracegrad's pool
with OpenBLAS on one thread; the loops after them ran on one core because of the spinning.

So a cpu program whose products are all small (`blas_threads.SMALL_PRODUCT`) calls OpenBLAS on
one thread for its whole run and splits each product here: by rows of the result when there are
enough of them, else along the inner dimension (a weight gradient: 64 x 16,384 by 16,384 x 64),
each chunk's partial product written to its own slot and the slots summed in order. The chunks
are fixed by the shapes and the thread count, never by timing, so a program's results are the
same on every call. Its loops then run on all threads too (program.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..runtime import blas_threads
from . import pool

# Each chunk has at least this many multiply-adds (60-120 us on one core): waking a worker takes
# 30-50 us on this kind of machine, and a product too small for two chunks runs in one call.
CHUNK_WORK = 1 << 21
CHUNKS_PER_THREAD = 4
MIN_ROWS = 64  # rows of the result per chunk, at least
MIN_INNER = 256  # inner-dimension length per chunk, at least


@dataclass(frozen=True)
class Split:
    """How one product is shared out: "whole" (one call), "rows" or "inner", in `chunks`."""

    kind: str
    chunks: int = 1
    threads: int = 1
    partials: tuple[int, ...] | None = None  # the shape of the per-chunk partial products

    def describe(self) -> str:
        if self.kind == "whole":
            return "one call"
        what = "rows" if self.kind == "rows" else "inner dimension"
        return f"{self.chunks} chunks of its {what} on {self.threads} threads"


def plan(a_shape: tuple, b_shape: tuple, dtype, threads: int) -> Split:
    """The split of a 2-D product a @ b; batched products, integer ones and small ones run
    whole."""
    if len(a_shape) != 2 or len(b_shape) != 2 or np.dtype(dtype).kind not in "fc":
        return Split("whole")
    (m, k), n = a_shape, b_shape[1]
    most = min(threads * CHUNKS_PER_THREAD, m * k * n // CHUNK_WORK)
    if threads < 2 or most < 2:
        return Split("whole")
    if m >= 2 * MIN_ROWS:
        return Split("rows", min(most, m // MIN_ROWS), threads)
    if k >= 2 * MIN_INNER:
        chunks = min(most, k // MIN_INNER)
        return Split("inner", chunks, threads, (chunks, m, n))
    return Split("whole")


def _operand(x: np.ndarray) -> tuple[int, int] | None:
    """(cblas transpose flag, leading dimension) of a 2-D operand that cblas reads in place: rows
    contiguous (no transpose) or columns contiguous (a transposed view); None for other layouts."""
    rows, cols = x.shape
    s0, s1 = x.strides
    size = x.itemsize
    if s1 == size and s0 % size == 0 and s0 // size >= max(1, cols):
        return _NO_TRANS, s0 // size
    if s0 == size and s1 % size == 0 and s1 // size >= max(1, rows):
        return _TRANS, s1 // size
    return None


_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


def matmul(split: Split, a: np.ndarray, b: np.ndarray, out=None, partials=None) -> np.ndarray:
    """a @ b as `split` says, into `out` (or a new array); `partials` is the scratch of an
    "inner" split. The caller has OpenBLAS on one thread (blas_threads.one_thread).

    The chunks call OpenBLAS's cblas gemm through ctypes, which releases the GIL (NumPy's matmul
    of small 2-D operands holds it: the chunks would run one after another). Operands cblas
    cannot read in place, or of another dtype, are multiplied by NumPy in one call."""
    dtype = np.dtype(np.result_type(a, b))
    gemm = blas_threads.gemm(dtype) if split.kind != "whole" else None
    if out is None:
        out = np.empty((a.shape[0], b.shape[1]), dtype)
    la, lb = _operand(a), _operand(b)
    if (
        gemm is None
        or la is None
        or lb is None
        or a.dtype != dtype
        or b.dtype != dtype
        or out.dtype != dtype
        or not out.flags.c_contiguous
    ):
        return np.matmul(a, b, out=out)
    (ta, lda), (tb, ldb) = la, lb
    m, k = a.shape
    n = b.shape[1]
    pa, pb, pc = a.ctypes.data, b.ctypes.data, out.ctypes.data
    (a0, a1), b0, c0 = a.strides, b.strides[0], out.strides[0]
    nch = split.chunks
    if split.kind == "rows":

        def rows(c):
            lo, hi = c * m // nch, (c + 1) * m // nch
            gemm(
                _ROW_MAJOR, ta, tb, hi - lo, n, k, 1, pa + lo * a0, lda, pb, ldb, 0, pc + lo * c0, n
            )

        pool.run_chunks(rows, nch, split.threads)
        return out
    pp, p0 = partials.ctypes.data, partials.strides[0]

    def inner(c):
        lo, hi = c * k // nch, (c + 1) * k // nch
        gemm(
            _ROW_MAJOR,
            ta,
            tb,
            m,
            n,
            hi - lo,
            1,
            pa + lo * a1,
            lda,
            pb + lo * b0,
            ldb,
            0,
            pp + c * p0,
            n,
        )

    pool.run_chunks(inner, nch, split.threads)
    np.sum(partials, axis=0, out=out)
    return out
