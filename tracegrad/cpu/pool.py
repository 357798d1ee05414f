"""tracegrad's own threads: one set of workers, and chunks of work shared out one by one.

A fused loop with enough work, and a small matrix product (products.py), has its chunks computed
by the calling thread and `threads - 1` workers. Chunks are handed out one at a time, so a thread
that another process slows down does fewer of them, and nobody waits long for it. Idle workers
block on a lock: unlike OpenBLAS's or OpenMP's threads they never spin. Each worker is woken by
releasing its own lock and says it is done by releasing another: a hand-off took 21 us against 37
us with a `ThreadPoolExecutor` (2 threads, 8 empty chunks), and a thin network's step makes ten.

One caller at a time uses the workers; a call that finds them busy (another thread's program is
running its parallel steps) computes all its chunks on its own thread.
"""

from __future__ import annotations

import _thread
import itertools
import os
import threading
from collections.abc import Callable

_workers_lock = threading.Lock()
_workers: dict[int, _Workers] = {}


def _after_fork_in_child() -> None:
    """A forked child has none of its parent's threads, and a lock another parent thread held
    at the fork stays held: both start afresh."""
    global _workers_lock
    _workers_lock = threading.Lock()
    _workers.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def threads() -> int:
    """How many threads a parallel loop or product uses: Numba's setting (NUMBA_NUM_THREADS,
    or `numba.set_num_threads`). Without Numba imported (a warm first call of native kernels
    does not import it), the same number Numba would start with: NUMBA_NUM_THREADS, else the
    CPUs this process may run on."""
    import sys

    numba = sys.modules.get("numba")
    if numba is not None:
        return numba.get_num_threads()
    chosen = os.environ.get("NUMBA_NUM_THREADS", "").strip()
    if chosen.isdigit() and int(chosen) > 0:
        return int(chosen)
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


class _Workers:
    """`count` daemon threads that each run the job they are given, then report back."""

    def __init__(self, count: int):
        self.busy = threading.Lock()  # held by the caller whose job the workers run
        self.broken = False
        self._job: Callable[[], None] = lambda: None
        self._errors: list[BaseException] = []
        self._go = [_thread.allocate_lock() for _ in range(count)]
        self._done = [_thread.allocate_lock() for _ in range(count)]
        for lock in self._go + self._done:
            lock.acquire()
        for k in range(count):
            name = f"tracegrad-{k}"
            threading.Thread(target=self._serve, args=(k,), name=name, daemon=True).start()

    def _serve(self, k: int) -> None:
        go, done = self._go[k], self._done[k]
        while True:
            go.acquire()
            try:
                self._job()
            except BaseException as exc:  # raised again in the caller's thread
                self._errors.append(exc)
            finally:
                done.release()

    def run(self, job: Callable[[], None], helpers: int) -> None:
        """job() on this thread and on `helpers` workers at once; the caller holds `busy`."""
        self._job, self._errors = job, []
        for go in self._go[:helpers]:
            go.release()
        try:
            job()
        finally:
            try:
                for done in self._done[:helpers]:
                    done.acquire()
            except BaseException:
                # interrupted (Ctrl-C) before every worker reported: a report still to come
                # would end a later call's wait early. These workers are never used again.
                self.broken = True
                raise
        if self._errors:
            raise self._errors[0]


def _workers_for(count: int) -> _Workers:
    with _workers_lock:
        if count not in _workers or _workers[count].broken:
            _workers[count] = _Workers(count)
        return _workers[count]


def run_chunks(task: Callable[[int], object], nch: int, threads: int) -> None:
    """task(0), ..., task(nch - 1) on up to `threads` threads: this one and the workers."""
    next_chunk = itertools.count().__next__

    def work():
        while True:
            c = next_chunk()
            if c >= nch:
                return
            task(c)

    helpers = min(threads, nch) - 1
    if helpers < 1:
        return work()
    workers = _workers_for(threads - 1)
    if not workers.busy.acquire(False):
        return work()  # another call is using them: this one computes its own chunks
    try:
        workers.run(work, helpers)
    finally:
        workers.busy.release()


def in_parallel(kernel, args: tuple, nch: int, threads: int) -> None:
    """Run a fused loop's `nch` chunks on `threads` threads, then its call that combines the
    chunks' partial reductions (see kernels.py: `first, last, finish`)."""
    run_chunks(lambda c: kernel(*args, c, c + 1, 0), nch, threads)
    kernel(*args, nch, nch, 1)
