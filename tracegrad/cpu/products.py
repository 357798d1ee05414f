"""Small matrix products shared out over tracegrad's threads, OpenBLAS on one thread in each.

A thin network's products (2,048-16,384 rows by 10-64 columns) are too small for OpenBLAS's own
threads to pay: they synchronise at the end of every product, and afterwards they spin, waiting
for the next one, on the cores the fused loops between the products need. Measured on 2 cores
(the 10-64-64-1 network's value_and_grad, 16,384 rows, float64), the five products took 12.4 ms
on OpenBLAS's two threads, 21.0 ms on one, and 12.0 ms split in two halves on two threads
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
        """How a split product is shared out, for the driver's comment."""
        what = "rows" if self.kind == "rows" else "inner dimension"
        return f"{self.chunks} chunks of its {what} on {self.threads} threads"


def plan(
    a_shape: tuple,
    b_shape: tuple,
    dtype,
    threads: int,
    chunk_work: int | None = None,
    min_rows: int | None = None,
    min_inner: int | None = None,
) -> Split:
    """The split of a 2-D product a @ b; batched products, integer ones and small ones run
    whole. The bounds default to this module's (chunks handed out through Python); the
    compiled run of runner.py, which hands out a chunk for far less, passes its own."""
    chunk_work = CHUNK_WORK if chunk_work is None else chunk_work
    min_rows = MIN_ROWS if min_rows is None else min_rows
    min_inner = MIN_INNER if min_inner is None else min_inner
    if len(a_shape) != 2 or len(b_shape) != 2 or np.dtype(dtype).kind not in "fc":
        return Split("whole")
    (m, k), n = a_shape, b_shape[1]
    most = min(threads * CHUNKS_PER_THREAD, m * k * n // chunk_work)
    if threads < 2 or most < 2:
        return Split("whole")
    if m >= 2 * min_rows:
        return Split("rows", min(most, m // min_rows), threads)
    if k >= 2 * min_inner:
        chunks = min(most, k // min_inner)
        return Split("inner", chunks, threads, (chunks, m, n))
    return Split("whole")


def multiply_adds(a_shape: tuple, b_shape: tuple) -> int:
    """The multiply-adds of a (batched) matrix product: batch x m x k x n."""
    return int(np.prod(a_shape, dtype=np.int64)) * int(b_shape[-1])


def matmul(split: Split, a: np.ndarray, b: np.ndarray, out=None, partials=None) -> np.ndarray:
    """a @ b as `split` says, into `out` (or a new array); `partials` is the scratch of an
    "inner" split. The caller has OpenBLAS on one thread (blas_threads.one_thread); NumPy's
    matmul releases the GIL, so the chunks run side by side."""
    if split.kind == "whole" or (
        out is not None and (np.may_share_memory(out, a) or np.may_share_memory(out, b))
    ):  # a chunk's rows written over operands other chunks still read: NumPy copies first
        return np.matmul(a, b) if out is None else np.matmul(a, b, out=out)
    if out is None:
        out = np.empty((a.shape[0], b.shape[1]), np.result_type(a, b))
    nch = split.chunks
    if split.kind == "rows":
        m = a.shape[0]

        def rows(c):
            lo, hi = c * m // nch, (c + 1) * m // nch
            np.matmul(a[lo:hi], b, out=out[lo:hi])

        pool.run_chunks(rows, nch, split.threads)
        return out
    k = a.shape[1]

    def inner(c):
        lo, hi = c * k // nch, (c + 1) * k // nch
        np.matmul(a[:, lo:hi], b[lo:hi], out=partials[c])

    pool.run_chunks(inner, nch, split.threads)
    np.sum(partials, axis=0, out=out)
    return out
