"""The worker side of tracegrad.dask: what runs in the worker processes (and in this one, on
Dask's threaded scheduler). It imports nothing of Dask's (but `distributed.get_worker`, to name
the worker in an error).

A chunk task gets the payload scattered once per call (the job and the parameters) and its rows
of each data argument; it runs the job's `tg.Transformed`, which each process keeps under the
job's key, so that it traces and compiles once per chunk signature. Sum tasks add the results in
a fixed order.
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
    """The transform to run on each chunk. `key` is the same for the same function in every call
    and every process: it is what a process files its `tg.Transformed` under, so that every
    call reuses one program.

    The function travels as cloudpickle's bytes (by value when it is defined in a script or a
    notebook, or in a module registered with `cloudpickle.register_pickle_by_value`), and a
    worker unpickles it only the first time it meets the key."""

    def __init__(self, fun: Callable, kind: str, argnums, backend: str | None, name: str):
        import cloudpickle  # a dependency of dask

        self.fun: Callable | None = fun
        self.kind, self.argnums, self.backend, self.name = kind, argnums, backend, name
        try:
            self.blob: bytes | None = cloudpickle.dumps(fun)
        except Exception:  # not picklable: fine on threads; a cluster says why when it sends it
            self.blob = None
            self.key = uuid.uuid4().hex
        else:
            self.key = hashlib.sha256(
                self.blob + repr((kind, argnums, backend)).encode()
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


class Payload:
    """What is scattered once per call: the job and the parameters (every non-data argument)."""

    def __init__(
        self,
        job: Job,
        params: dict[int, Any],
        data_argnums: tuple[int, ...],
        n_args: int,
        n_chunks: int,
        deterministic: bool,
    ):
        self.job, self.params, self.data_argnums = job, params, data_argnums
        self.n_args, self.n_chunks, self.deterministic = n_args, n_chunks, deterministic
        self._aligned: dict[int, Any] | None = None

    def arguments(self, chunks: Sequence[np.ndarray]) -> tuple:
        params = self.params
        if self.deterministic:
            if self._aligned is None:  # once per process: the tasks there share this payload
                self._aligned = {i: _aligned_tree(v) for i, v in params.items()}
            params, chunks = self._aligned, [_aligned(c) for c in chunks]
        args: list[Any] = [None] * self.n_args
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


def chunk_task(payload: Payload, index: int, start: int, *chunks: np.ndarray):
    """One chunk's value/gradient/Hessian: the task that runs where the chunk lives."""
    stop = start + (len(chunks[0]) if chunks else 0)
    try:
        return _run(payload.job, payload.arguments(chunks))
    except Exception as exc:
        where = _where()
        raise ChunkError(
            f"chunk {index} of {payload.n_chunks} (rows {start}:{stop}) failed on {where}: "
            f"{type(exc).__name__}: {exc}",
            index,
            (start, stop),
            where,
            type(exc).__name__,
        ) from exc


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


def sum_task(*parts: Any, final: bool = False):
    """Add results in the order given (the tree's order); the root casts back and rebuilds."""
    first, *rest = [_as_partial(p) for p in parts]
    total = [np.array(x, copy=True) for x in first.leaves]
    for part in rest:
        for t, x in zip(total, part.leaves, strict=True):
            t += x
    if not final:
        return _Partial(first.treedef, total, first.dtypes)
    return unflatten(
        first.treedef, [np.asarray(t, dtype=d) for t, d in zip(total, first.dtypes, strict=True)]
    )


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
