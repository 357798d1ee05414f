"""tracegrad.dask: data-parallel value, gradient and Hessian on a real LocalCluster of two worker
processes (one cluster for the whole module), and on Dask's threaded scheduler without one.

Every result is compared with tracegrad's own transform applied to the whole data in this
process. Most tests run the workers on the numpy backend (compiling would dominate at these
sizes); the logistic-regression test runs on every backend."""

from __future__ import annotations

import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cloudpickle
import numpy as np
import pytest

import tracegrad as tg
from tracegrad.base.tree import flatten

da = pytest.importorskip(
    "dask.array", reason='the dask extra is not installed: pip install -e ".[dask]"'
)
distributed = pytest.importorskip("distributed")
import dask  # noqa: E402
import tracegrad.dask as tgd  # noqa: E402
from distributed.diagnostics.plugin import SchedulerPlugin  # noqa: E402

# The workers get this module's functions by value, as they would a script's or a notebook's
# (by reference they would import this test module, and pytest with it, in each worker).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

ROOT = Path(__file__).resolve().parent.parent
ROWS, CHUNK, FEATURES = 240, 60, 5  # four equal chunks: one program per worker and transform


@pytest.fixture(scope="module")
def cluster():
    # Workers without Dask's statistical profiler: it walks every thread's stack every 10 ms, and
    # the CUDA simulator runs each simulated GPU thread as a Python thread with a 0.1 ms switch
    # interval; together they once slowed one simulated kernel in a worker to over ten minutes.
    with dask.config.set({"distributed.worker.profile.enabled": False}):
        cluster = distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",
            silence_logs=logging.ERROR,
        )
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def client(cluster):
    # not the default client: the tests without `client=` must find none and use threads
    client = distributed.Client(cluster, set_as_default=False)
    try:
        client.wait_for_workers(2, timeout=120)
        yield client
    finally:
        client.close()


# ----------------------------------------------------------------------------------------------
# The losses (module-level, so the workers import them by reference)


def nll(w, X, y):
    """Logistic regression's negative log-likelihood, summed over this chunk's rows."""
    z = X @ w
    return np.sum(np.maximum(z, 0.0) + np.log1p(np.exp(-np.abs(z))) - y * z)


def mlp_loss(params, X, y):
    h = np.tanh(X @ params["W1"] + params["b1"])
    out = h @ params["W2"] + params["b2"]
    return np.sum((out - y) ** 2)


def squared_error(w, X, y):
    return np.sum((X @ w - y) ** 2)


def slow_rows(block):
    """A data chunk that takes a while to make, so that a call is still running when a worker
    is killed."""
    time.sleep(0.3)
    return block


def drop_a_column_of_chunk_2(block, block_info=None):
    return block[:, :-1] if block_info[0]["chunk-location"][0] == 2 else block


def logistic_data(dtype=np.float64, rows=ROWS, features=FEATURES, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((rows, features)).astype(dtype)
    y = (rng.random(rows) < 0.5).astype(dtype)
    w = (0.5 * rng.standard_normal(features)).astype(dtype)
    return w, X, y


def mlp_params(rng):
    return {
        "W1": 0.5 * rng.standard_normal((FEATURES, 4)),
        "b1": 0.1 * rng.standard_normal(4),
        "W2": 0.5 * rng.standard_normal(4),
        "b2": np.array(0.3),
    }


def chunked(*arrays, chunk=CHUNK):
    return [da.from_array(a, chunks=(chunk, *a.shape[1:])) for a in arrays]


def persisted(client, arrays):
    """The arrays persisted on the workers, once their chunks are there."""
    arrays = client.persist(arrays)
    with client.as_current():
        distributed.wait(arrays)
    return arrays


def assert_trees_close(got, expected, rtol):
    got_leaves, got_tree = flatten(got)
    expected_leaves, expected_tree = flatten(expected)
    assert got_tree == expected_tree
    for g, e in zip(got_leaves, expected_leaves, strict=True):
        assert isinstance(g, np.ndarray) and g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol * float(np.abs(e).max() + 1))


TRANSFORMS = [
    ("value_and_grad", tgd.value_and_grad, tg.value_and_grad),
    ("grad", tgd.grad, tg.grad),
    ("hessian", tgd.hessian, tg.hessian),
]


# ----------------------------------------------------------------------------------------------
# Equal to one machine


def test_logistic_regression_equals_one_machine(client, backend):
    w, X, y = logistic_data()
    Xd, yd = client.persist(chunked(X, y))
    got = tgd.value_and_grad(nll, argnums=0, data_argnums=(1, 2), client=client, backend=backend)(
        w, Xd, yd
    )
    assert_trees_close(got, tg.value_and_grad(nll, backend=backend)(w, X, y), rtol=1e-10)


def test_logistic_regression_grad_and_hessian_equal_one_machine(client):
    w, X, y = logistic_data()
    Xd, yd = client.persist(chunked(X, y))
    for _, distributed_transform, local_transform in TRANSFORMS[1:]:
        got = distributed_transform(
            nll, argnums=0, data_argnums=(1, 2), client=client, backend="numpy"
        )(w, Xd, yd)
        expected = local_transform(nll, backend="numpy")(w, X, y)
        assert_trees_close(got, expected, rtol=1e-10)


def test_mlp_with_dict_parameters_equals_one_machine(client, rng):
    _, X, _ = logistic_data()
    y = rng.standard_normal(ROWS)
    params = mlp_params(rng)
    Xd, yd = chunked(X, y)
    for _, distributed_transform, local_transform in TRANSFORMS:
        got = distributed_transform(
            mlp_loss, argnums=0, data_argnums=(1, 2), client=client, backend="numpy"
        )(params, Xd, yd)
        expected = local_transform(mlp_loss, backend="numpy")(params, X, y)
        assert_trees_close(got, expected, rtol=1e-10)
    hessian = tgd.hessian(mlp_loss, argnums=0, data_argnums=(1, 2), client=client, backend="numpy")(
        params, Xd, yd
    )
    assert list(hessian) == list(params) and list(hessian["W1"]) == list(params)
    assert hessian["W1"]["b1"].shape == (FEATURES, 4, 4)


def test_float32_stays_float32_and_is_summed_in_float64(client):
    w, X, y = logistic_data(np.float32)
    value, g = tgd.value_and_grad(
        nll, argnums=0, data_argnums=(1, 2), client=client, backend="numpy"
    )(w, *chunked(X, y))
    assert value.dtype == g.dtype == np.float32
    exact_value, exact_g = tg.value_and_grad(nll, backend="numpy")(
        *(a.astype(np.float64) for a in (w, X, y))
    )
    np.testing.assert_allclose(value, exact_value, rtol=1e-5)
    np.testing.assert_allclose(g, exact_g, rtol=1e-4, atol=1e-4 * np.abs(exact_g).max())


def test_uneven_chunks_and_two_parameter_arguments(client):
    w, X, y = logistic_data()
    b = np.array(0.25)

    def with_bias(w, X, b, y):
        return nll(w, X, y) + np.sum(X[:, 0] * b)

    Xd, yd = [
        da.from_array(a, chunks=((100, 100, 40), *[(n,) for n in a.shape[1:]])) for a in (X, y)
    ]
    got = tgd.grad(with_bias, argnums=(0, 2), data_argnums=(1, 3), client=client, backend="numpy")(
        w, Xd, b, yd
    )
    expected = tg.grad(with_bias, argnums=(0, 2), backend="numpy")(w, X, b, y)
    assert_trees_close(got, expected, rtol=1e-10)


def test_data_chunked_along_other_axes_is_joined_into_whole_rows(client):
    w, X, y = logistic_data()
    Xd = da.from_array(X, chunks=(CHUNK, 2))
    got = tgd.grad(nll, argnums=0, data_argnums=(1, 2), client=client, backend="numpy")(
        w, Xd, da.from_array(y, chunks=CHUNK)
    )
    np.testing.assert_allclose(got, tg.grad(nll, backend="numpy")(w, X, y), rtol=1e-10)


def test_deterministic_gives_the_same_bits_on_every_call(client):
    w, X, y = logistic_data(rows=600)
    Xd, yd = client.persist(chunked(X, y, chunk=50))  # 12 chunks: three levels of sums by 3
    options = dict(argnums=0, data_argnums=(1, 2), client=client, backend="numpy", split_every=3)
    exact = tgd.value_and_grad(nll, deterministic=True, **options)
    first = exact(w, Xd, yd)
    for _ in range(3):  # chunks move between workers and land at other addresses
        again = exact(w, Xd, yd)
        assert again[0].tobytes() == first[0].tobytes() and again[1].tobytes() == first[1].tobytes()
    # without it, a chunk's last bits depend on where its data sits in memory: rounding only
    value, g = tgd.value_and_grad(nll, **options)(w, Xd, yd)
    np.testing.assert_allclose(g, first[1], rtol=1e-13, atol=1e-13 * np.abs(g).max())
    np.testing.assert_allclose(value, first[0], rtol=1e-14)


def test_the_current_client_is_used_when_none_is_given(client):
    w, X, y = logistic_data()
    g = tgd.grad(squared_error, argnums=0, data_argnums=(1, 2), backend="numpy")
    with client.as_current():
        got = g(w, *chunked(X, y))
        counts = g.worker_trace_counts()
    np.testing.assert_allclose(got, tg.grad(squared_error, backend="numpy")(w, X, y), rtol=1e-10)
    assert set(counts) == set(client.scheduler_info()["workers"]) and sum(counts.values()) >= 1


def test_without_a_client_it_runs_on_dask_threads_here():
    w, X, y = logistic_data()
    with pytest.raises(ValueError):
        distributed.default_client()  # no client anywhere: Dask's default scheduler
    threads = set()

    def note_thread(block):
        threads.add(threading.get_ident())
        return block

    Xd, yd = chunked(X, y)
    hessian = tgd.hessian(nll, argnums=0, data_argnums=(1, 2), backend="numpy")
    noted = Xd.map_blocks(note_thread, dtype=X.dtype)
    for step in (0.0, 0.5):
        got = hessian(w + step, noted, yd)
        expected = tg.hessian(nll, backend="numpy")(w + step, X, y)
        np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert hessian.graph_builds == 1  # the second call reused the graph's structure
    assert threads  # the chunks were made here, in this process: no cluster was involved
    assert list(hessian.worker_trace_counts()) == ["local"]
    assert any(name.startswith("hessian(nll)") for name in tgd.trace_counts())


def test_a_python_branch_on_chunk_values_is_refused():
    """Answered per chunk, the branch could go another way than on all the rows: refused."""
    w, X, y = logistic_data()

    def branchy(w, X, y):
        z = X @ w
        if np.mean(z) > 0:
            return np.sum(z**2)
        return np.sum(z)

    Xd, yd = chunked(X, y)
    with pytest.raises(Exception, match="branch on"):
        tgd.grad(branchy, argnums=0, data_argnums=(1, 2), backend="numpy")(w, Xd, yd)


# ----------------------------------------------------------------------------------------------
# Parameters travel once per call; each worker compiles once


class RecordGroupTasks(SchedulerPlugin):
    """On the scheduler: each group task's dependencies, the size of its pickled spec, its
    worker and which of its dependencies that worker did not hold yet (they had to move)."""

    name = "tracegrad-test-group-tasks"

    def __init__(self, scheduler):
        self.scheduler = scheduler
        self.tasks: dict[str, dict] = {}
        self.keys: list[str] = []  # every task that was made to run, in the order they arrive

    def transition(self, key, start, finish, *args, **kwargs):
        if start == "released" and finish == "waiting":
            self.keys.append(str(key))
        if finish == "processing" and str(key).startswith("tracegrad-group-"):
            ts = self.scheduler.tasks[key]
            worker = ts.processing_on
            self.tasks[str(key)] = {
                "dependencies": sorted(str(d.key) for d in ts.dependencies),
                "spec_bytes": len(pickle.dumps(ts.run_spec)),
                "worker": worker.address,
                "moved": [str(d.key) for d in ts.dependencies if worker not in d.who_has],
            }


@pytest.fixture
def recorder(cluster):
    plugin = RecordGroupTasks(cluster.scheduler)
    cluster.scheduler.add_plugin(plugin)
    try:
        yield plugin
    finally:
        cluster.scheduler.remove_plugin(name=plugin.name)


@pytest.fixture
def scatters(client, monkeypatch):
    """The keys of each client.scatter call, in order."""
    calls = []
    scatter = client.scatter

    def counting_scatter(data, *args, **kwargs):
        futures = scatter(data, *args, **kwargs)
        calls.append([str(f.key) for f in futures])
        return futures

    monkeypatch.setattr(client, "scatter", counting_scatter)
    return calls


def test_small_parameters_travel_in_the_tasks_and_the_job_is_sent_once(client, recorder, scatters):
    w, X, y = logistic_data()
    Xd, yd = client.persist(chunked(X, y))  # four chunks, two on each worker (or so)
    grad = tgd.grad(nll, argnums=0, data_argnums=(1, 2), client=client, backend="numpy")
    local = tg.grad(nll, backend="numpy")
    for call in range(3):
        recorder.tasks.clear()
        step = w + 0.25 * call  # new parameters on every call: never a stale answer
        np.testing.assert_allclose(grad(step, Xd, yd), local(step, X, y), rtol=1e-12)
        # the job went to the workers once, with the first call; the parameters never did
        assert len(scatters) == 1 and len(scatters[0]) == 1
        job = scatters[0][0]
        # one task per worker thread, each on the worker that holds its chunks of X; a chunk of
        # y that sat elsewhere moves on the first call, and stays there for the next ones
        assert len(recorder.tasks) == 2
        assert len({task["worker"] for task in recorder.tasks.values()}) == 2
        for task in recorder.tasks.values():
            assert job in task["dependencies"]
            assert call == 0 or task["moved"] == []
            assert len(task["dependencies"]) == 1 + 2 * 2  # the job, X and y of two chunks
            assert w.nbytes < task["spec_bytes"] < 4096
    assert grad.graph_builds == 1


def test_large_parameters_are_scattered_once_per_call_not_embedded_in_tasks(
    client, recorder, scatters
):
    w, X, y = logistic_data(rows=120, features=9000)  # 72 kB of parameters, two chunks
    Xd, yd = client.persist(chunked(X, y))
    assert w.nbytes > tgd.INLINE_BYTES
    grad = tgd.grad(squared_error, argnums=0, data_argnums=(1, 2), client=client, backend="numpy")
    local = tg.grad(squared_error, backend="numpy")
    for call in range(2):
        recorder.tasks.clear()
        step = w * (1 + call)
        np.testing.assert_allclose(
            grad(step, Xd, yd), local(step, X, y), rtol=1e-12, atol=1e-9 * np.abs(X).sum()
        )
        assert len(scatters) == call + 2  # the job once, then the parameters once a call
        params = scatters[-1][0]
        assert len(recorder.tasks) >= 1
        for task in recorder.tasks.values():
            # the group task refers to the scattered parameters and holds no copy of them
            assert params in task["dependencies"] and task["spec_bytes"] < w.nbytes / 4
    assert scatters[1] != scatters[2] and grad.graph_builds == 1


def test_the_graph_structure_is_built_once_per_data_and_again_for_new_shapes(client, recorder):
    w, X, y = logistic_data()
    Xd, yd = persisted(client, chunked(X, y))
    value_and_grad = tgd.value_and_grad(
        nll, argnums=0, data_argnums=(1, 2), client=client, backend="numpy"
    )
    local = tg.value_and_grad(nll, backend="numpy")
    recorder.keys.clear()
    for call in range(3):
        assert_trees_close(value_and_grad(w - call, Xd, yd), local(w - call, X, y), rtol=1e-12)
    assert value_and_grad.graph_builds == 1
    # each call: new keys, the same structure (a task per worker, one sum), and no data tasks
    assert len(recorder.keys) == 3 * 3 and len(set(recorder.keys)) == 9
    assert all(key.startswith("tracegrad-") for key in recorder.keys)
    # other row chunks: a new structure; more rows (new shapes): another one
    Xe, ye = client.persist(chunked(X, y, chunk=80))
    assert_trees_close(value_and_grad(w, Xe, ye), local(w, X, y), rtol=1e-12)
    assert value_and_grad.graph_builds == 2
    w2, X2, y2 = logistic_data(rows=300, seed=1)
    X2d, y2d = chunked(X2, y2)
    assert_trees_close(value_and_grad(w2, X2d, y2d), local(w2, X2, y2), rtol=1e-12)
    assert value_and_grad.graph_builds == 3
    assert_trees_close(value_and_grad(w, X2d, y2d), local(w, X2, y2), rtol=1e-12)
    assert value_and_grad.graph_builds == 3  # new parameters, the same shapes: reused
    # the first data's structure was let go (two data sets are kept): built again
    assert_trees_close(value_and_grad(w, Xd, yd), local(w, X, y), rtol=1e-12)
    assert value_and_grad.graph_builds == 4
    value_and_grad.release()  # lets go of everything: the next call builds again
    assert_trees_close(value_and_grad(w, Xd, yd), local(w, X, y), rtol=1e-12)
    assert value_and_grad.graph_builds == 5


def test_calls_from_two_threads_at_once_get_their_own_answers(client):
    w, X, y = logistic_data()
    Xd, yd = persisted(client, chunked(X, y))
    grad = tgd.grad(nll, argnums=0, data_argnums=(1, 2), client=client, backend="numpy")
    steps = [w + 0.1 * k for k in range(6)]
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda step: grad(step, Xd, yd), steps))
    local = tg.grad(nll, backend="numpy")
    for step, g in zip(steps, got, strict=True):
        np.testing.assert_allclose(g, local(step, X, y), rtol=1e-12)


def test_first_calls_from_threads_at_once_leave_dask_config_as_it_was(client):
    """Several threads each building the structure of new data at once (each first call waits
    for its persisted chunks): Dask's configuration names no scheduler afterwards, so dask
    arrays computed later without a client still run on threads. (Waiting inside
    `client.as_current()` once left `scheduler="dask.distributed"` set when two calls
    overlapped: dask.config.set is not thread-safe.)"""
    w, X, y = logistic_data()
    before = dask.config.get("scheduler", None)

    def first_call(k):
        grad = tgd.grad(nll, argnums=0, data_argnums=(1, 2), client=client, backend="numpy")
        return grad(w + k, *chunked(X + k, y))

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(first_call, range(8)))
    local = tg.grad(nll, backend="numpy")
    for k, g in enumerate(got):
        np.testing.assert_allclose(g, local(w + k, X + k, y), rtol=1e-12)
    assert dask.config.get("scheduler", None) == before
    assert float(da.ones(4, chunks=2).sum().compute()) == 4.0  # no client: threads


def add_zero(block):
    return block + 0.0


def test_data_not_persisted_by_the_caller_stays_on_the_workers_between_calls(client, recorder):
    w, X, y = logistic_data()
    Xd, yd = chunked(X, y)
    made = Xd.map_blocks(add_zero, dtype=X.dtype)  # a graph, not chunks in memory
    local = tg.grad(nll, backend="numpy")
    grad = tgd.grad(nll, argnums=0, data_argnums=(1, 2), client=client, backend="numpy")
    for call in range(3):
        recorder.keys.clear()
        np.testing.assert_allclose(grad(w + call, made, yd), local(w + call, X, y), rtol=1e-12)
        data_tasks = [key for key in recorder.keys if not key.startswith("tracegrad-")]
        # the first call computes the chunks (and keeps them); the next ones only use them
        assert bool(data_tasks) == (call == 0)
    assert grad.graph_builds == 1
    grad.release()  # the chunks it kept go
    # persist=False: the chunks are made in every call (and let go after it), the same answer
    fresh = tgd.grad(
        nll, argnums=0, data_argnums=(1, 2), client=client, backend="numpy", persist=False
    )
    for call in range(2):
        recorder.keys.clear()
        np.testing.assert_allclose(fresh(w + call, made, yd), local(w + call, X, y), rtol=1e-12)
        assert any(not key.startswith("tracegrad-") for key in recorder.keys)
    assert fresh.graph_builds == 1


def test_each_worker_compiles_once_for_many_calls(client):
    w, X, y = logistic_data()
    Xd, yd = client.persist(chunked(X, y))  # four chunks of one shape: one program per worker
    value_and_grad = tgd.value_and_grad(
        squared_error, argnums=0, data_argnums=(1, 2), client=client, backend="cpu"
    )
    value_and_grad(w, Xd, yd)
    after_one = value_and_grad.worker_trace_counts()
    assert sum(after_one.values()) >= 1 and max(after_one.values()) == 1
    for step in range(5):
        value_and_grad(w + 0.1 * step, Xd, yd)
    # a new tgd transform of the same function finds the workers' programs too
    tgd.value_and_grad(squared_error, argnums=0, data_argnums=(1, 2), client=client, backend="cpu")(
        w, Xd, yd
    )
    after_seven = value_and_grad.worker_trace_counts()
    # never a second trace on a worker (one that had no chunk yet may have traced its first)
    assert set(after_seven) == set(after_one) and max(after_seven.values()) == 1
    assert all(after_seven[worker] >= count for worker, count in after_one.items())
    per_worker = client.run(tgd.trace_counts)
    assert all(
        count <= 1
        for counts in per_worker.values()
        for name, count in counts.items()
        if name.startswith("value_and_grad(squared_error)")
    )


def test_chunks_go_where_they_are_unless_a_worker_would_get_more_than_its_share():
    from tracegrad.dask.plan import place_chunks, split_runs

    rows = [10] * 8
    # where the chunks are, two workers of one thread: each keeps its own
    holders = [("a",), ("b",)] * 4
    assert place_chunks(list(range(8)), rows, holders, {"a": 1, "b": 1}) == {
        "a": [0, 2, 4, 6],
        "b": [1, 3, 5, 7],
    }
    # all on one worker: half of them move to the other, once
    placed = place_chunks(list(range(8)), rows, [("a",)] * 8, {"a": 1, "b": 1})
    assert sorted(placed["a"] + placed["b"]) == list(range(8)) and len(placed["b"]) == 4
    # shares follow the threads; a chunk held by a worker that left goes to the least loaded
    placed = place_chunks(list(range(6)), [10] * 6, [("gone",)] * 6, {"a": 2, "b": 1})
    assert (len(placed["a"]), len(placed["b"])) == (4, 2)
    # runs of neighbours for a worker's threads, as even as the counts allow
    assert split_runs([0, 2, 4, 6, 8], 2) == [[0, 2], [4, 6, 8]]
    assert split_runs([3], 4) == [[3]]


def tracegrad_threads():
    """The names of tracegrad's own worker threads in this process (cpu/pool.py)."""
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("tracegrad-"))


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: a program never uses more")
def test_each_task_runs_its_program_on_task_threads_threads(client):
    def logistic(w, X, y):  # its own function: programs of its own on the workers
        return nll(w, X, y)

    w, X, y = logistic_data(rows=80_000, features=4)  # chunks large enough for parallel loops
    Xd, yd = persisted(client, chunked(X, y, chunk=40_000))
    expected = tg.grad(logistic, backend="numpy")(w, X, y)
    found = {}
    for threads in (1, 2):
        grad = tgd.grad(
            logistic,
            argnums=0,
            data_argnums=(1, 2),
            client=client,
            backend="cpu",
            task_threads=threads,
        )
        np.testing.assert_allclose(grad(w, Xd, yd), expected, rtol=1e-12)
        per_worker = client.run(tracegrad_threads)
        found[threads] = {name for names in per_worker.values() for name in names}
    # one thread: no helper threads anywhere; two: the same work starts them
    assert found[1] == set() and found[2] != set()


# ----------------------------------------------------------------------------------------------
# Errors: on a worker, and bad input before any work


def test_a_failing_chunk_names_its_index_rows_and_worker(client):
    w, X, y = logistic_data()
    Xd, yd = chunked(X, y)
    spoiled = Xd.map_blocks(drop_a_column_of_chunk_2, dtype=X.dtype)
    grad = tgd.grad(nll, argnums=0, data_argnums=(1, 2), client=client, backend="numpy")
    with pytest.raises(
        tgd.ChunkError, match=r"chunk 2 of 4 \(rows 120:180\) failed on worker tcp://"
    ) as info:
        grad(w, spoiled, yd)
    assert "ShapeError" in str(info.value) and info.value.error_type == "ShapeError"
    assert (info.value.index, info.value.rows) == (2, (120, 180))
    # the same on threads, without a cluster
    with pytest.raises(
        tgd.ChunkError, match=r"chunk 2 of 4 \(rows 120:180\) failed on this process"
    ):
        tgd.grad(nll, argnums=0, data_argnums=(1, 2), backend="numpy")(w, spoiled, yd)


def fail_on_chunk_1(block, block_info=None):
    if block_info[0]["chunk-location"][0] == 1:
        raise OSError("chunk 1 of the data could not be read")
    return block


def test_data_that_fails_to_load_raises_its_own_error_on_every_call(client):
    w, X, y = logistic_data()
    Xd, yd = chunked(X, y)
    unreadable = Xd.map_blocks(fail_on_chunk_1, dtype=X.dtype)
    grad = tgd.grad(nll, argnums=0, data_argnums=(1, 2), client=client, backend="numpy")
    for _ in range(2):  # no structure is kept for data that failed: the next call tries again
        with pytest.raises(OSError, match="chunk 1 of the data could not be read"):
            grad(w, unreadable, yd)
    assert grad.graph_builds == 0
    np.testing.assert_allclose(grad(w, Xd, yd), tg.grad(nll, backend="numpy")(w, X, y), rtol=1e-12)


@pytest.fixture
def no_work(client, monkeypatch):
    """The client, which fails the test if anything is sent to the cluster."""

    def refuse(*args, **kwargs):
        raise AssertionError("work was sent before the bad input was found")

    for name in ("scatter", "compute", "get", "persist", "submit"):
        monkeypatch.setattr(client, name, refuse)
    return client


def test_misaligned_row_chunks_are_refused(no_work):
    w, X, y = logistic_data()
    grad = tgd.grad(nll, argnums=0, data_argnums=(1, 2), client=no_work)
    with pytest.raises(ValueError, match=r"row chunks of data arguments 1 and 2 differ .*rechunk"):
        grad(w, da.from_array(X, chunks=(60, 5)), da.from_array(y, chunks=80))


def test_dask_and_plain_data_cannot_be_mixed(no_work):
    w, X, y = logistic_data()
    grad = tgd.grad(nll, argnums=0, data_argnums=(1, 2), client=no_work)
    with pytest.raises(
        TypeError, match=r"must all be dask arrays, but argument 2 is a numpy.ndarray"
    ):
        grad(w, da.from_array(X, chunks=(60, 5)), y)
    with pytest.raises(TypeError, match=r"must be dask arrays chunked along axis 0.*from_array"):
        grad(w, X, y)
    with pytest.raises(
        TypeError, match=r"argument 0 holds a dask array but is not in data_argnums"
    ):
        grad(da.from_array(w), *chunked(X, y))


def test_a_loss_that_is_not_one_scalar_per_chunk_is_refused(no_work):
    w, X, y = logistic_data()
    per_row = tgd.grad(
        lambda w, X, y: (X @ w - y) ** 2, argnums=0, data_argnums=(1, 2), client=no_work
    )
    with pytest.raises(
        TypeError, match=r"one float scalar per chunk .* of 60 rows it returned shape \(60,\)"
    ):
        per_row(w, *chunked(X, y))
    pair = tgd.value_and_grad(
        lambda w, X, y: (np.sum(X @ w), np.sum(y)), argnums=0, data_argnums=(1, 2), client=no_work
    )
    with pytest.raises(TypeError, match="it returned 2 values"):
        pair(w, *chunked(X, y))


def test_other_bad_input_is_refused_before_any_work(no_work):
    w, X, y = logistic_data()
    Xd, yd = chunked(X, y)
    with pytest.raises(TypeError, match=r"needs data_argnums.*data_argnums=\(1, 2\)"):
        tgd.grad(nll, argnums=0)
    with pytest.raises(ValueError, match=r"in both argnums and data_argnums"):
        tgd.grad(nll, argnums=(0, 1), data_argnums=(1, 2))
    with pytest.raises(ValueError, match=r"task_threads must be a positive integer, got 0"):
        tgd.grad(nll, argnums=0, data_argnums=(1, 2), task_threads=0)
    with pytest.raises(tg.BackendError, match="unknown backend 'tpu'"):
        tgd.grad(nll, argnums=0, data_argnums=(1, 2), backend="tpu")
    grad = tgd.grad(nll, argnums=0, data_argnums=(1, 2), client=no_work)
    with pytest.raises(ValueError, match=r"called with 2 argument\(s\), but .* name argument 2"):
        grad(w, Xd)
    with pytest.raises(TypeError, match=r"argument 0 has dtype int64; only float arrays"):
        grad(np.arange(FEATURES), Xd, yd)
    with pytest.raises(ValueError, match=r"unknown chunk sizes.*compute_chunk_sizes"):
        grad(w, Xd[Xd[:, 0] > 0], yd[Xd[:, 0] > 0])


def test_bad_input_on_threads_touches_no_data():
    made = []

    def note(block):
        made.append(len(block))
        return block

    w, X, y = logistic_data()
    Xd = da.from_array(X, chunks=(60, 5)).map_blocks(note, meta=np.empty((0, FEATURES)))
    with pytest.raises(ValueError, match="row chunks"):
        tgd.grad(nll, argnums=0, data_argnums=(1, 2))(w, Xd, da.from_array(y, chunks=80))
    with pytest.raises(TypeError, match="one float scalar per chunk"):
        tgd.grad(lambda w, X, y: X @ w, argnums=0, data_argnums=(1, 2))(
            w, Xd, da.from_array(y, chunks=60)
        )
    assert made == []


# ----------------------------------------------------------------------------------------------
# The optional extra


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_import_tracegrad_does_not_import_dask():
    done = run_python(
        "import sys, tracegrad, tracegrad.cli, tracegrad.examples.distributed_logreg\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_dask_the_import_says_how_to_install_it():
    done = run_python(
        "import sys\nsys.modules['dask'] = None\nimport tracegrad\n"
        "try:\n    import tracegrad.dask\nexcept ImportError as e:\n    print(e)\n"
    )
    assert done.returncode == 0, done.stderr
    assert 'pip install -e ".[dask]"' in done.stdout


# ----------------------------------------------------------------------------------------------
# The example


def test_the_example_converges_to_the_one_machine_newton_solution(client):
    from tracegrad.examples import distributed_logreg as example

    result = example.run(backend="numpy", rows=4000, workers=2, client=client, quiet=True)
    assert result["converged"] and result["iterations"] <= 10
    X, y = (a.compute() for a in example.make_data(4000, result["chunk_rows"]))
    vg, hessian = (
        tg.value_and_grad(example.nll, backend="numpy"),
        tg.hessian(example.nll, backend="numpy"),
    )
    w = np.zeros(example.FEATURES)
    value, g = vg(w, X, y)
    assert result["losses"][0] == pytest.approx(float(value) / 4000, rel=1e-12)
    for _ in range(result["iterations"]):
        w = w - np.linalg.solve(hessian(w, X, y), g)
        value, g = vg(w, X, y)
    np.testing.assert_allclose(result["w"], w, rtol=1e-9)
    assert result["losses"][-1] == pytest.approx(float(value) / 4000, rel=1e-12)
    assert sum(result["trace_counts"].values()) >= 1 and max(result["trace_counts"].values()) == 1


def test_the_example_from_the_command_line_without_a_cluster(capsys):
    from tracegrad import cli

    status = cli.main(
        ["run", "distributed-logreg", "--workers", "0", "--rows", "2000", "--backend", "numpy"]
    )
    out, err = capsys.readouterr()
    assert status == 0, out + err
    assert "no cluster: Dask's threaded scheduler in this process" in out
    iterations = [line for line in out.splitlines() if line.startswith("  iteration ")]
    assert len(iterations) >= 3 and iterations[-1].endswith("converged")
    assert "distributed-logreg: converged in" in out
    assert cli.main(["run", "newton", "--workers", "2"]) == 2  # a usage mistake
    assert "the newton example takes no --workers" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------
# A worker dies during a call (last: the cluster comes back with a new worker process)


def test_a_worker_killed_during_a_call_still_gives_the_answer(client):
    w, X, y = logistic_data(rows=480)
    Xd, yd = chunked(X, y)
    slow = Xd.map_blocks(slow_rows, dtype=X.dtype)  # 8 chunks of 0.3 s each: ~1.2 s a worker
    expected = tg.value_and_grad(nll, backend="numpy")(w, X, y)
    pids = client.run(os.getpid)
    value_and_grad = tgd.value_and_grad(
        nll, argnums=0, data_argnums=(1, 2), client=client, backend="numpy"
    )
    with ThreadPoolExecutor(1) as pool:
        call = pool.submit(value_and_grad, w, slow, yd)
        victim = None
        deadline = time.monotonic() + 60
        while victim is None and time.monotonic() < deadline and not call.done():
            busy = [addr for addr, keys in client.processing().items() if keys and addr in pids]
            victim = busy[0] if busy else None
            time.sleep(0.02)
        assert victim is not None, "no worker was ever busy"
        os.kill(pids[victim], signal.SIGKILL)
        got = call.result(timeout=120)
    assert_trees_close(got, expected, rtol=1e-10)
    client.wait_for_workers(2, timeout=120)  # the nanny starts a new worker process
    assert pids[victim] not in client.run(os.getpid).values()
