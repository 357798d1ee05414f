"""tracegrad's own threads: a pool per worker count, and chunks of work shared out one by one.

A fused loop with enough work, and a small matrix product (products.py), has its chunks computed
by this thread and `threads - 1` pool threads. Chunks are handed out one at a time, so a thread
that another process slows down does fewer of them, and nobody waits long for it. Idle pool
threads block on a queue: unlike OpenBLAS's or OpenMP's threads they never spin.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable

_pool_lock = threading.Lock()
_pools: dict[int, object] = {}
if hasattr(os, "register_at_fork"):  # a forked child has none of its parent's pool threads
    os.register_at_fork(after_in_child=_pools.clear)


def threads() -> int:
    """How many threads a parallel loop or product uses: Numba's setting (NUMBA_NUM_THREADS)."""
    import numba

    return numba.get_num_threads()


def thread_pool(workers: int):
    from concurrent.futures import ThreadPoolExecutor

    with _pool_lock:
        if workers not in _pools:
            _pools[workers] = ThreadPoolExecutor(workers, thread_name_prefix="tracegrad")
        return _pools[workers]


def run_chunks(task: Callable[[int], object], nch: int, threads: int) -> None:
    """task(0), ..., task(nch - 1) on `threads` threads: this one and `threads - 1` of a pool."""
    next_chunk = itertools.count().__next__

    def work():
        while True:
            c = next_chunk()
            if c >= nch:
                return
            task(c)

    pool = thread_pool(threads - 1)
    futures = [pool.submit(work) for _ in range(min(threads, nch) - 1)]
    try:
        work()
    finally:
        for future in futures:
            future.result()


def in_parallel(kernel, args: tuple, nch: int, threads: int) -> None:
    """Run a fused loop's `nch` chunks on `threads` threads, then its call that combines the
    chunks' partial reductions (see kernels.py: `first, last, finish`)."""
    run_chunks(lambda c: kernel(*args, c, c + 1, 0), nch, threads)
    kernel(*args, nch, nch, 1)
