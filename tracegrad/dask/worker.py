"""The worker side of tracegrad.dask: what runs in the worker processes (and in this one, on
Dask's threaded scheduler). It imports nothing of Dask's (but `distributed.get_worker`, to name
the worker in an error).

A group task gets the job (sent to each worker once, not per call), the parameters (in the task
when they are small, else sent once per call) and the rows of each data argument for each of its
chunks, which live on that worker; it runs the job's `tg.Transformed`, which each process keeps
under the job's key, so that it traces and compiles once per chunk signature, and adds its
chunks' results. Sum tasks add the groups' results in a fixed order; only the root's result
leaves the workers.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import tracegrad as tg
from tracegrad.base.tree import TreeDef, flatten, unflatten


class ChunkError(RuntimeError):
    """A chunk's task raised on a worker: the message names the chunk, its rows and the worker,
    then the worker's error. Attributes: `index`, `rows` (start, stop), `worker`, `error_type`."""

    def __init__(
        self,
        message: str,
        index: int = -1,
        rows: tuple[int, int] = (0, 0),
        worker: str = "",
        error_type: str = "",
    ):
        super().__init__(message)
        self.index, self.rows, self.worker, self.error_type = index, rows, worker, error_type

    def __reduce__(self):  # the exception travels from the worker to the client
        return (ChunkError, (self.args[0], self.index, self.rows, self.worker, self.error_type))


class Job:
    """The transform to run on each chunk, and how. `key` is the same for the same function in
    every call and every process: it is what a process files its `tg.Transformed` under, so that
    every call reuses one program.

    The function travels as cloudpickle's bytes (by value when it is defined in a script or a
    notebook, or in a module registered with `cloudpickle.register_pickle_by_value`). On a cluster
    the job is sent to the workers once, not per call (the client keeps it there as a future), and
    a worker unpickles the function only the first time it meets the key."""

    def __init__(
        self,
        fun: Callable,
        kind: str,
        argnums,
        backend: str | None,
        name: str,
        data_argnums: tuple[int, ...] = (),
        deterministic: bool = False,
        task_threads: int = 1,
    ):
        import cloudpickle  # a dependency of dask

        self.fun: Callable | None = fun
        self.kind, self.argnums, self.backend, self.name = kind, argnums, backend, name
        self.data_argnums, self.deterministic = data_argnums, deterministic
        self.task_threads = task_threads
        try:
            self.blob: bytes | None = cloudpickle.dumps(fun)
        except Exception:  # not picklable: fine on threads; a cluster says why when it sends it
            self.blob = None
            self.key = uuid.uuid4().hex
        else:
            # the thread count is a program's (it is compiled for it): part of the key
            self.key = hashlib.sha256(
                self.blob + repr((kind, argnums, backend, task_threads)).encode()
            ).hexdigest()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        if self.blob is not None:
            state["fun"] = None
        return state

    def make(self) -> tg.Transformed:
        import cloudpickle

        fun = self.fun if self.fun is not None else cloudpickle.loads(self.blob)
        make = {"value_and_grad": tg.value_and_grad, "grad": tg.grad, "hessian": tg.hessian}[
            self.kind
        ]
        transformed = make(fun, argnums=self.argnums, backend=self.backend)
        # A Python branch would be answered per chunk (on the chunk's rows), where the function
        # of all the rows might go the other way: refused, as np.where and tg.cond are not.
        transformed.guards = False
        return transformed

    def arguments(self, params: dict[int, Any], n_args: int, chunks: Sequence[np.ndarray]):
        """The call's arguments: the parameters (aligned already where deterministic) and this
        chunk's rows of each data argument."""
        if self.deterministic:
            chunks = [_aligned(c) for c in chunks]
        args: list[Any] = [None] * n_args
        for i, value in params.items():
            args[i] = value
        for i, chunk in zip(self.data_argnums, chunks, strict=True):
            args[i] = chunk
        return tuple(args)


ALIGNMENT = 64  # bytes: a cache line, and the widest SIMD vector


def _aligned(a: Any) -> Any:
    """`a` in C order at an address that is a multiple of ALIGNMENT (a copy unless it is).

    NumPy's and BLAS's vectorised loops split a sum differently for data at different addresses,
    and arrays that arrive from another process can sit at any address, even an odd one: the same
    chunk then gives results that differ in the last bits from worker to worker."""
    if not isinstance(a, np.ndarray):
        return a
    if a.flags.c_contiguous and a.ctypes.data % ALIGNMENT == 0:
        return a
    buffer = np.empty(a.nbytes + ALIGNMENT, np.uint8)
    start = -buffer.ctypes.data % ALIGNMENT
    out = buffer[start : start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def _aligned_tree(tree: Any) -> Any:
    leaves, treedef = flatten(tree)
    return unflatten(treedef, [_aligned(x) for x in leaves])


MAX_TRANSFORMS = 64
_lock = threading.Lock()  # guards _transforms and _compiled; held while a new signature compiles
_transforms: OrderedDict[str, tuple[tg.Transformed, str]] = OrderedDict()
_compiled: set[tuple] = set()  # (job key, argument signature) already run in this process


def _transform_for(job: Job) -> tg.Transformed:
    with _lock:
        entry = _transforms.get(job.key)
        if entry is None:
            entry = _transforms[job.key] = (job.make(), job.name)
            if len(_transforms) > MAX_TRANSFORMS:
                old, _ = _transforms.popitem(last=False)
                _compiled.difference_update([k for k in _compiled if k[0] == old])
        else:
            _transforms.move_to_end(job.key)
    return entry[0]


def job_signature(args: tuple) -> tuple:
    leaves, treedef = flatten(args)
    return treedef, tuple((np.shape(x), np.asarray(x).dtype.str) for x in leaves)


def _run(job: Job, args: tuple):
    """The transform on one chunk. The first call with a new signature holds the lock, so that
    threads of one process never trace and compile the same program twice."""
    fn = _transform_for(job)
    key = (job.key, job_signature(args))
    if key in _compiled:
        return fn(*args)
    with _lock:
        out = fn(*args)
        _compiled.add(key)
    return out


def _where() -> str:
    try:
        from distributed import get_worker

        return f"worker {get_worker().address}"
    except (ImportError, ValueError):
        return "this process (no cluster)"


def _task_threads(count: int) -> None:
    """tracegrad's own threads for the programs this Dask thread compiles and runs: Dask runs one
    task per worker thread (and its nanny gives BLAS one thread per task), so a task that took
    all the cores would fight the worker's other tasks and the other workers for them. Numba's
    setting is per thread; without Numba (the numpy backend) there is nothing to set."""
    try:
        import numba
    except ImportError:
        return
    if numba.get_num_threads() != count:
        numba.set_num_threads(min(count, numba.config.NUMBA_NUM_THREADS))


def group_task(job: Job, params: dict[int, Any], n_args: int, spec: tuple, *chunks: np.ndarray):
    """The transform on each chunk of a group, one after the other, where the chunks live.

    `spec` holds (index, start, stop) per chunk, and `chunks` each chunk's rows of every data
    argument in turn. The result is the chunks' sum (one partial), or with `deterministic` each
    chunk's own result, for the root to add in the fixed order of the chunk indices."""
    if job.backend != "numpy":
        _task_threads(job.task_threads)
    if job.deterministic:
        params = {i: _aligned_tree(v) for i, v in params.items()}
    per_chunk = len(job.data_argnums)
    results = []
    for k, (index, start, stop) in enumerate(spec[1]):
        rows = chunks[k * per_chunk : (k + 1) * per_chunk]
        try:
            out = _run(job, job.arguments(params, n_args, rows))
        except Exception as exc:
            where = _where()
            raise ChunkError(
                f"chunk {index} of {spec[0]} (rows {start}:{stop}) failed on {where}: "
                f"{type(exc).__name__}: {exc}",
                index,
                (start, stop),
                where,
                type(exc).__name__,
            ) from exc
        results.append((index, _as_partial(out)))
    if job.deterministic:
        return results
    return _add([part for _, part in results])


@dataclass
class _Partial:
    """A partial sum: float leaves in float64 (float32 results are added in float64, like
    tracegrad's own reductions), and what the final result is cast back to."""

    treedef: TreeDef
    leaves: list[np.ndarray]
    dtypes: list[np.dtype]


def _as_partial(part: Any) -> _Partial:
    if isinstance(part, _Partial):
        return part
    leaves, treedef = flatten(part)
    arrays = [np.asarray(x) for x in leaves]
    dtypes = [a.dtype for a in arrays]
    wide = [
        a.astype(np.float64) if a.dtype.kind == "f" and a.dtype.itemsize < 8 else a for a in arrays
    ]
    return _Partial(treedef, wide, dtypes)


def _add(parts: Sequence[_Partial]) -> _Partial:
    """The sum of partials, added in the order given."""
    first, *rest = parts
    total = [np.array(x, copy=True) for x in first.leaves]
    for part in rest:
        for t, x in zip(total, part.leaves, strict=True):
            t += x
    return _Partial(first.treedef, total, first.dtypes)


def _finish(total: _Partial) -> Any:
    """The root's result: each leaf cast back to the chunks' dtype, in the loss's tree."""
    return unflatten(
        total.treedef,
        [np.asarray(t, dtype=d) for t, d in zip(total.leaves, total.dtypes, strict=True)],
    )


def tree_sum(parts: list[_Partial], split_every: int) -> _Partial:
    """A fixed tree of sums: `split_every` neighbours at a time, level by level. It depends only
    on how many parts there are, never on who made them or when."""
    while len(parts) > 1:
        parts = [_add(parts[i : i + split_every]) for i in range(0, len(parts), split_every)]
    return parts[0]


def sum_task(final: bool, *parts: _Partial):
    """Add the groups' partial sums in the order given (the tree's order); the root casts back
    and rebuilds the loss's tree."""
    total = _add(parts)
    return _finish(total) if final else total


def deterministic_root(split_every: int, *groups: list):
    """Every chunk's own result, from all the groups, added by the fixed tree over the chunk
    indices: the same bits whichever group (and worker) computed which chunk."""
    results = sorted((pair for group in groups for pair in group), key=lambda pair: pair[0])
    return _finish(tree_sum([part for _, part in results], split_every))


def trace_counts() -> dict[str, int]:
    """In this process: each distributed transform that has run here -> how many times it was
    traced to a new program (`tg.Transformed.trace_count`). On a cluster, read every worker's
    with `client.run(tracegrad.dask.trace_counts)`."""
    with _lock:
        return {f"{name} [{key[:8]}]": fn.trace_count for key, (fn, name) in _transforms.items()}


def trace_count_of(key: str) -> int:
    with _lock:
        entry = _transforms.get(key)
    return entry[0].trace_count if entry is not None else 0
