"""The structure of a call's graph on one data set, built on the first call and reused by every
call on that data: which chunks each task computes, on which worker, and the tree of sums that
adds the tasks' results. A call only makes its tasks from it (new keys, its parameters)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from dask._task_spec import Task, TaskRef
from dask.core import flatten as flatten_keys
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from .worker import deterministic_root, group_task, sum_task


@dataclass(frozen=True)
class Group:
    """One task: the chunks it computes, one after the other, on its worker (None: anywhere)."""

    worker: str | None
    spec: tuple  # (chunks in all, ((index, start, stop), ...))
    refs: tuple  # each chunk's key of every data argument in turn, as TaskRefs


@dataclass
class Plan:
    """The structure of a call's graph for one data set, built once and reused by every call on
    that data: a call only makes the tasks (new keys, its parameters) from it."""

    client: Any
    data: list  # the arrays; persisted ones keep their chunks in the workers' memory
    groups: list[Group]
    split_every: int
    deterministic: bool
    data_graph: Any  # the data's own graph, sent with each call; None: the data is persisted

    @staticmethod
    def build(client, data: list, split_every: int, deterministic: bool, persist: bool):
        rows = [int(c) for c in data[0].chunks[0]]
        starts = np.concatenate([[0], np.cumsum(rows)]).astype(int).tolist()
        present = [i for i, n in enumerate(rows) if n]  # an empty chunk adds nothing to a sum
        data_graph = None
        if client is None:  # Dask's threads here: a task per chunk, the data's graph with it
            data_graph = {}
            for x in data:
                data_graph.update(dict(x.__dask_graph__()))
            groups_of = {None: [[i] for i in present]}
        elif persist:
            from distributed import futures_of

            data = client.persist(data)
            futures = [f for x in data for f in futures_of(x)]
            # each future waited on through its own client: not `client.as_current()` with
            # `distributed.wait`, whose dask.config.set(scheduler=...) is not thread-safe (two
            # calls building at once could leave the config naming a scheduler for good)
            for future in futures:
                future.exception()
            for future in futures:
                if future.status == "error":  # the data itself failed: its error, no plan kept
                    future.result()
            nthreads = client.nthreads()
            # where the widest data argument's chunks are: each task goes where its rows are
            widest = max(range(len(data)), key=lambda a: data[a].dtype.itemsize * row_size(data[a]))
            keys = list(flatten_keys(data[widest].__dask_keys__()))
            holders = client.who_has(futures_of(data[widest]))
            workers = place_chunks(present, rows, [holders.get(k, ()) for k in keys], nthreads)
            groups_of = {w: split_runs(chunks, nthreads[w]) for w, chunks in workers.items()}
        else:  # computed with each call: no place is known, a task per worker thread
            data_graph = HighLevelGraph.merge(*[x.__dask_graph__() for x in data])
            count = max(1, sum(client.nthreads().values()))
            groups_of = {None: split_runs(present, count)}
        keys_of = [list(flatten_keys(x.__dask_keys__())) for x in data]
        groups = [
            Group(
                worker,
                (len(rows), tuple((i, starts[i], starts[i + 1]) for i in chunks)),
                tuple(TaskRef(keys[i]) for i in chunks for keys in keys_of),
            )
            for worker, lists in groups_of.items()
            for chunks in lists
            if chunks
        ]
        return Plan(client, data, groups, split_every, deterministic, data_graph)

    def graph(self, job, params, n_args: int, token: str):
        """This call's graph and the key of its root: one task per group, then the sums."""
        by_worker: dict[str | None, dict] = {}
        refs = []
        for g, group in enumerate(self.groups):
            key = f"tracegrad-group-{token}-{g}"
            by_worker.setdefault(group.worker, {})[key] = Task(
                key, group_task, job, params, n_args, group.spec, *group.refs
            )
            refs.append(TaskRef(key))
        sums = {}
        if self.deterministic:  # every chunk's result, added in the fixed order of the chunks
            root = f"tracegrad-sum-{token}"
            sums[root] = Task(root, deterministic_root, self.split_every, *refs)
        else:  # a fixed tree over the groups
            level = 0
            while level == 0 or len(refs) > 1:
                parts = [
                    refs[i : i + self.split_every] for i in range(0, len(refs), self.split_every)
                ]
                final, refs = len(parts) == 1, []
                for j, part in enumerate(parts):
                    root = f"tracegrad-sum-{token}-{level}-{j}"
                    sums[root] = Task(root, sum_task, final, *part)
                    refs.append(TaskRef(root))
                level += 1
        if self.client is None:
            graph = dict(self.data_graph)
            for tasks in by_worker.values():
                graph.update(tasks)
            graph.update(sums)
            return graph, root
        layers, dependencies = {}, {}
        for n, (worker, tasks) in enumerate(by_worker.items()):
            # on the worker that holds the rows; elsewhere only if it is gone
            where = {"workers": [worker], "allow_other_workers": True} if worker else None
            layers[f"tracegrad-group-{token}-{n}"] = MaterializedLayer(tasks, annotations=where)
            dependencies[f"tracegrad-group-{token}-{n}"] = set()
        layers[f"tracegrad-sum-{token}"] = MaterializedLayer(sums)
        dependencies[f"tracegrad-sum-{token}"] = set(layers) - {f"tracegrad-sum-{token}"}
        graph = HighLevelGraph(layers, dependencies)
        if self.data_graph is not None:
            graph = HighLevelGraph.merge(self.data_graph, graph)
        return graph, root


def row_size(x) -> int:
    return int(np.prod(x.shape[1:], dtype=np.int64))


def place_chunks(present: list[int], rows: list[int], holders: list, nthreads: dict) -> dict:
    """Each chunk's worker: one that holds it, unless that would give it more than its share
    of the rows (by its threads), then the least loaded worker (the chunk moves there once, on
    the first call, and stays)."""
    names = sorted(nthreads)
    total = sum(nthreads.values())
    share = {w: sum(rows) * nthreads[w] / total for w in names}
    load = dict.fromkeys(names, 0)
    chunks: dict[str, list[int]] = {w: [] for w in names}
    for i in present:
        own = [w for w in holders[i] if w in load]
        fits = [w for w in own if load[w] + rows[i] <= share[w] + rows[i] / 2]
        worker = min(fits or names, key=lambda w: (load[w] / nthreads[w], w))
        load[worker] += rows[i]
        chunks[worker].append(i)
    return chunks


def split_runs(chunks: list[int], parts: int) -> list[list[int]]:
    """`chunks` in `parts` runs of neighbours, as even as counts allow."""
    parts = max(1, min(parts, len(chunks)))
    bounds = [round(k * len(chunks) / parts) for k in range(parts + 1)]
    return [chunks[bounds[k] : bounds[k + 1]] for k in range(parts)]
