"""Data-parallel gradients and Hessians of a loss that is a sum over rows, on Dask.

    import tracegrad.dask as tgd

    def nll(w, X, y):                      # plain NumPy: this chunk's partial SUM
        z = X @ w
        return np.sum(np.log1p(np.exp(z)) - y * z)

    vg = tgd.value_and_grad(nll, argnums=0, data_argnums=(1, 2))
    value, g = vg(w, X, y)                 # X, y: dask arrays chunked along axis 0

A call runs one small Dask graph: a task per worker thread runs tracegrad's own transform
(`tg.value_and_grad`, `tg.grad` or `tg.hessian`) on each of the row chunks that live on that
worker and adds their results there, and a fixed tree of sum tasks adds the tasks' results, so that
only one result comes back. On a `dask.distributed` cluster:

- the data's chunks are persisted on the workers on the first call and stay there;
- the graph's structure (which chunks each task computes, on which worker, and the tree) is built
  once per data set and reused: a call makes only its tasks, with new keys and its parameters;
- the job (the pickled function and the transform) goes to every worker once, not per call;
- parameters of up to `INLINE_BYTES` travel inside the tasks; larger ones are scattered to every
  worker once per call and the tasks refer to them by key.

Each process keeps one `tg.Transformed` per (function, transform, argnums, backend), so it traces
and compiles once per chunk signature and reuses the program afterwards. Without a client, the
graph (a task per chunk) runs on Dask's default (threaded) scheduler in this process.

The tasks themselves are in `tracegrad.dask.worker`; docs/distributed.md says what it costs and
what it does not do.
"""

from __future__ import annotations

try:
    import dask
    import dask.array as da
    import dask.threaded
except ImportError as exc:  # the optional extra is not installed
    raise ImportError(
        "tracegrad.dask needs Dask, an optional dependency that is not installed: "
        'pip install -e ".[dask]"   (or: python3 -m pip install "dask[array]" distributed)'
    ) from exc

import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
from dask._task_spec import TaskRef

import tracegrad as tg
from tracegrad.runtime import backends
from tracegrad.base.tree import flatten

from .plan import Plan
from .worker import ChunkError, Job, job_signature, trace_count_of, trace_counts

__all__ = ["ChunkError", "DataParallel", "grad", "hessian", "trace_counts", "value_and_grad"]

KINDS = ("value_and_grad", "grad", "hessian")
# How many results one sum task adds. The tree is fixed by the number of chunks and this: the
# order of the additions never depends on which worker ran what, or when.
SPLIT_EVERY = 8
# Parameters of at most this many bytes travel inside the tasks (one per worker thread); larger
# ones are scattered to every worker once per call and the tasks refer to them by key.
INLINE_BYTES = 64 * 1024
# The data sets whose graph structure (and, on a cluster, persisted chunks) a transform keeps.
MAX_DATA_SETS = 2


def _name_of(fun: Callable) -> str:
    return getattr(fun, "__qualname__", getattr(fun, "__name__", type(fun).__name__))


def _int_tuple(value: Any, name: str) -> tuple[int, ...]:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        raise TypeError(f"{name} must be a non-negative int or a tuple of them, got {value!r}")
    return tuple(int(v) for v in value)


def _current_client(client):
    if client is not None:
        return client
    try:
        from distributed import default_client
    except ImportError:
        return None
    try:
        return default_client()
    except ValueError:  # no client: Dask's default scheduler
        return None


class DataParallel:
    """A transform of a loss that is a sum over the rows of its data arguments, run chunk by
    chunk on Dask. Made by `value_and_grad`, `grad` and `hessian` of this module."""

    def __init__(
        self,
        fun: Callable,
        kind: str,
        argnums=0,
        data_argnums=None,
        client=None,
        backend: str | None = None,
        split_every: int = SPLIT_EVERY,
        deterministic: bool = False,
        persist: bool = True,
        task_threads: int = 1,
    ):
        if not callable(fun):
            raise TypeError(f"tracegrad.dask.{kind} expects a function, got {type(fun).__name__}")
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; one of {', '.join(KINDS)}")
        if data_argnums is None:
            raise TypeError(
                f"tracegrad.dask.{kind} needs data_argnums: the positions of the dask-array "
                "arguments that the loss sums over, e.g. data_argnums=(1, 2) for nll(w, X, y)"
            )
        wrt = _int_tuple(argnums, "argnums")
        self.data_argnums = _int_tuple(data_argnums, "data_argnums")
        if not wrt or not self.data_argnums:
            raise ValueError("argnums and data_argnums must each name at least one argument")
        if len(set(self.data_argnums)) != len(self.data_argnums):
            raise ValueError(f"data_argnums repeats an argument: {data_argnums!r}")
        both = sorted(set(wrt) & set(self.data_argnums))
        if both:
            raise ValueError(
                f"argument(s) {both} are in both argnums and data_argnums; the data is not "
                "differentiated: take them out of argnums"
            )
        if backend is not None and backend not in backends.NAMES:
            raise tg.BackendError(
                f"unknown backend {backend!r}; choose one of {', '.join(map(repr, backends.NAMES))}"
                " (None: each worker's default)"
            )
        if not isinstance(split_every, int) or isinstance(split_every, bool) or split_every < 2:
            raise ValueError(f"split_every must be an integer of at least 2, got {split_every!r}")
        if not isinstance(task_threads, int) or isinstance(task_threads, bool) or task_threads < 1:
            raise ValueError(f"task_threads must be a positive integer, got {task_threads!r}")
        self.fun, self.kind, self.argnums = fun, kind, argnums
        self.client, self.backend, self.split_every = client, backend, split_every
        self.deterministic, self.persist = bool(deterministic), bool(persist)
        name = f"{kind}({_name_of(fun)})"
        self._job = Job(
            fun, kind, argnums, backend, name, self.data_argnums, self.deterministic, task_threads
        )
        self._checked: set[tuple] = set()
        self._lock = threading.Lock()
        # (client, data) -> the graph's structure for that data; (client) -> the job's future
        self._plans: OrderedDict[tuple, Plan] = OrderedDict()
        self._jobs: dict[int, Any] = {}
        #: How many times a call built a graph's structure (a new data set, chunking or client);
        #: calls on the same data reuse it, and change only the parameters in the tasks.
        self.graph_builds = 0

    def __repr__(self) -> str:
        return f"<tracegrad.dask {self._job.name} over arguments {self.data_argnums}>"

    # ---- checks, before any work is sent
    def _data(self, args: tuple) -> list:
        last = max((*self.data_argnums, *_int_tuple(self.argnums, "argnums")))
        if last >= len(args):
            raise ValueError(
                f"{self._job.name} was called with {len(args)} argument(s), but argnums / "
                f"data_argnums name argument {last} (counted from 0)"
            )
        is_dask = {i: isinstance(args[i], da.Array) for i in self.data_argnums}
        if not all(is_dask.values()):
            plain = [i for i, d in is_dask.items() if not d]
            kinds = ", ".join(
                f"argument {i} is a {type(args[i]).__module__}.{type(args[i]).__name__}"
                for i in plain
            )
            if any(is_dask.values()):
                first = next(i for i, d in is_dask.items() if d)
                raise TypeError(
                    f"{self._job.name}: data arguments must all be dask arrays, but {kinds} while "
                    f"argument {first} is a dask array. Wrap it with the same row chunks: "
                    f"dask.array.from_array(a, chunks=(X.chunks[0], ...)) where X is argument {first}"
                )
            raise TypeError(
                f"{self._job.name}: data arguments must be dask arrays chunked along axis 0, but "
                f"{kinds}. Wrap them with dask.array.from_array(a, chunks=(rows, ...)), or use "
                "tracegrad's own transforms for data in memory"
            )
        for i, arg in enumerate(args):
            if i in self.data_argnums:
                continue
            if any(isinstance(leaf, da.Array) for leaf in flatten(arg)[0]):
                raise TypeError(
                    f"{self._job.name}: argument {i} holds a dask array but is not in data_argnums "
                    f"{self.data_argnums}; parameters are sent to the workers in memory. Add it to "
                    "data_argnums if it is chunked data, or .compute() it"
                )
        data = [args[i] for i in self.data_argnums]
        rows = None
        for i, x in zip(self.data_argnums, data, strict=True):
            if x.ndim == 0:
                raise ValueError(
                    f"{self._job.name}: data argument {i} is 0-d; data needs a row axis (axis 0)"
                )
            if any(np.isnan(c) for c in x.chunks[0]):
                raise ValueError(
                    f"{self._job.name}: data argument {i} has unknown chunk sizes along axis 0; "
                    "call .compute_chunk_sizes() on it first"
                )
            if rows is None:
                rows, first = x.chunks[0], i
            elif x.chunks[0] != rows:
                raise ValueError(
                    f"{self._job.name}: the row chunks of data arguments {first} and {i} differ "
                    f"(axis 0: {_describe_chunks(rows)} against {_describe_chunks(x.chunks[0])}); "
                    f"each chunk task needs the same rows of every data argument. Rechunk one "
                    f"like the other: a{i}.rechunk({{0: a{first}.chunks[0]}})"
                )
        return data

    def _check_loss(self, args: tuple, data: list) -> None:
        """Trace the loss once per signature on stand-ins for a chunk (zero-strided arrays, no
        memory): it must return one float scalar, and argnums must be float."""
        params = {i: a for i, a in enumerate(args) if i not in self.data_argnums}
        shapes = sorted({int(c) for c in data[0].chunks[0] if c}, reverse=True)
        key = (
            job_signature(tuple(params.values())),
            tuple(params),
            tuple((x.shape[1:], x.dtype.str) for x in data),
            tuple(shapes),
        )
        if key in self._checked:
            return
        for i in _int_tuple(self.argnums, "argnums"):
            for leaf in flatten(args[i])[0]:
                dtype = np.asarray(leaf).dtype
                if dtype.kind != "f":
                    raise TypeError(
                        f"{self._job.name}: argument {i} has dtype {dtype}; only float arrays have "
                        "derivatives. Convert it with .astype(np.float64), or leave it out of argnums"
                    )
        for n in shapes:
            stand_ins = [np.broadcast_to(np.zeros((), x.dtype), (n, *x.shape[1:])) for x in data]
            full = list(args)
            for i, s in zip(self.data_argnums, stand_ins, strict=True):
                full[i] = s
            # traced as the chunks trace it: a Python branch on a value is refused (worker.py)
            graph = tg.make_ir(tg.jit(self.fun, guards=False))(*full)
            outs = graph.outputs
            if (
                len(outs) != 1
                or outs[0].shape != ()
                or not np.issubdtype(outs[0].dtype, np.floating)
            ):
                got = (
                    f"{len(outs)} values"
                    if len(outs) != 1
                    else f"shape {outs[0].shape}"
                    if outs[0].shape != ()
                    else f"dtype {outs[0].dtype}"
                )
                raise TypeError(
                    f"{self._job.name}: the loss must return one float scalar per chunk (the "
                    f"chunk's partial sum), but for a chunk of {n} rows it returned {got}. Sum "
                    "over the rows (np.sum(...)), not a mean: the chunks' results are added"
                )
        self._checked.add(key)

    # ---- the call
    def __call__(self, *args, **kwargs):
        if kwargs:
            raise TypeError(
                f"{self._job.name}: keyword arguments are not supported ({', '.join(kwargs)}); "
                "pass them positionally"
            )
        data = self._data(args)
        # other axes as one chunk each, so that a task holds whole rows
        data = [
            x
            if all(len(c) == 1 for c in x.chunks[1:])
            else x.rechunk({a: -1 for a in range(1, x.ndim)})
            for x in data
        ]
        self._check_loss(args, data)
        if not any(int(c) for c in data[0].chunks[0]):
            raise ValueError(f"{self._job.name}: the data has no rows")
        client = _current_client(self.client)
        params = {i: a for i, a in enumerate(args) if i not in self.data_argnums}
        plan = self._plan(client, data)
        token = uuid.uuid4().hex[:12]
        if client is None:
            graph, root = plan.graph(self._job, params, len(args), token)
            return dask.threaded.get(graph, root)
        job = self._job_on(client)
        scattered = None
        try:
            if _nbytes(params) > INLINE_BYTES:
                # once per call, to every worker: a worker that dies takes no only copy with it
                [scattered] = client.scatter([params], broadcast=True, hash=False)
                params = TaskRef(scattered.key)
            graph, root = plan.graph(TaskRef(job.key), params, len(args), token)
            return client.get(graph, root)
        finally:
            if scattered is not None:
                scattered.release()

    def _job_on(self, client):
        """The job's future on this client's workers: sent once (to every worker), kept while
        this transform lives, sent again only if the cluster lost it."""
        with self._lock:
            entry = self._jobs.get(id(client))
            if entry is not None and entry[0] is client and entry[1].status == "finished":
                return entry[1]
        [future] = client.scatter([self._job], broadcast=True, hash=False)
        with self._lock:
            self._jobs = {id(client): (client, future)}  # one client at a time
        return future

    def _plan(self, client, data: list) -> Plan:
        """The graph's structure for this data (on this client), built on the first call and
        kept: which chunks each task computes, on which worker, and the tree that adds them."""
        key = (
            id(client),
            tuple(x.name for x in data),
            tuple(int(c) for c in data[0].chunks[0]),
        )
        with self._lock:
            plan = self._plans.get(key)
            if plan is not None and plan.client is client:
                self._plans.move_to_end(key)
                return plan
        plan = Plan.build(client, data, self.split_every, self.deterministic, self.persist)
        with self._lock:
            self._plans[key] = plan
            self.graph_builds += 1
            while len(self._plans) > MAX_DATA_SETS:
                self._plans.popitem(last=False)
        return plan

    def release(self) -> None:
        """Let go of what this transform keeps between calls: the chunks it persisted on the
        workers, the graph structures and the job's copy on the workers."""
        with self._lock:
            jobs, self._jobs = self._jobs, {}
            self._plans.clear()
        for _, future in jobs.values():
            future.release()

    def worker_trace_counts(self, client=None) -> dict[str, int]:
        """Each worker's address -> how many programs it traced for this transform so far
        (`tg.Transformed.trace_count` there); {"local": n} without a cluster."""
        client = _current_client(client or self.client)
        if client is None:
            return {"local": trace_count_of(self._job.key)}
        return client.run(trace_count_of, self._job.key)


def _nbytes(params: dict) -> int:
    return sum(int(getattr(leaf, "nbytes", 64)) for leaf in flatten(params)[0])


def _describe_chunks(chunks: tuple) -> str:
    text = ", ".join(str(int(c)) for c in chunks[:6])
    return f"({text}{', ...' if len(chunks) > 6 else ''}) in {len(chunks)} chunks"


def _transform(kind: str):
    def make(
        fun=None,
        argnums=0,
        data_argnums=None,
        client=None,
        backend=None,
        split_every=SPLIT_EVERY,
        deterministic=False,
        persist=True,
        task_threads=1,
    ):
        options = (
            kind,
            argnums,
            data_argnums,
            client,
            backend,
            split_every,
            deterministic,
            persist,
            task_threads,
        )
        if fun is None:  # as a decorator: @tgd.grad(argnums=0, data_argnums=(1, 2))
            return lambda f: DataParallel(f, *options)
        return DataParallel(fun, *options)

    make.__name__ = kind
    return make


def value_and_grad(
    fun=None,
    argnums=0,
    data_argnums=None,
    client=None,
    backend=None,
    split_every=SPLIT_EVERY,
    deterministic=False,
    persist=True,
    task_threads=1,
) -> DataParallel:
    """`(loss, gradient)` of a loss that is a sum over the rows of `data_argnums` (dask arrays
    chunked along axis 0, the same row chunks for each): the sums over chunks of
    `tg.value_and_grad(fun, argnums)` on each chunk.

    - `client`: a dask.distributed Client; None: the current one, else Dask's default
      scheduler (threads) in this process.
    - `backend`: the tracegrad backend the chunks run on (None: each worker's default).
    - `split_every`: how many results one task of the (fixed) tree of sums adds.
    - `deterministic=True`: bit-for-bit the same result on every call with the same chunks,
      whichever worker runs which chunk (each chunk is copied to aligned memory first; see
      docs/distributed.md). Otherwise results agree to rounding (about 1e-15 relative in float64).
    - `persist=True`: on a cluster, the data's chunks are computed on the first call and stay in
      the workers' memory for the next calls (`release()` lets them go); `False` computes them
      in every call (data larger than the cluster's memory).
    - `task_threads=1`: tracegrad's own threads per task (Dask runs one task per worker thread).
    """
    return _transform("value_and_grad")(
        fun,
        argnums,
        data_argnums,
        client,
        backend,
        split_every,
        deterministic,
        persist,
        task_threads,
    )


def grad(
    fun=None,
    argnums=0,
    data_argnums=None,
    client=None,
    backend=None,
    split_every=SPLIT_EVERY,
    deterministic=False,
    persist=True,
    task_threads=1,
) -> DataParallel:
    """The gradient of a loss that is a sum over rows: as `value_and_grad`, without the value."""
    return _transform("grad")(
        fun,
        argnums,
        data_argnums,
        client,
        backend,
        split_every,
        deterministic,
        persist,
        task_threads,
    )


def hessian(
    fun=None,
    argnums=0,
    data_argnums=None,
    client=None,
    backend=None,
    split_every=SPLIT_EVERY,
    deterministic=False,
    persist=True,
    task_threads=1,
) -> DataParallel:
    """The Hessian of a loss that is a sum over rows: the sum of `tg.hessian(fun, argnums)`
    over the chunks, shape `w.shape + w.shape` (nested dicts for a dict of parameters); options
    as for `value_and_grad`."""
    return _transform("hessian")(
        fun,
        argnums,
        data_argnums,
        client,
        backend,
        split_every,
        deterministic,
        persist,
        task_threads,
    )
