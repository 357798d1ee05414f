"""Small matrix products shared out over tracegrad's threads (tracegrad/cpu/products.py), and the
programs that use them: OpenBLAS on one thread for the whole call, loops on all threads."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.runtime import backends
from tracegrad import passes
from tracegrad.cpu import program as cpu_program
from tracegrad.cpu import products
from tracegrad.base import blas_threads


def _compile(fun, *args):
    graph = passes.optimize(tg.make_ir(fun, optimize=False)(*args))
    return backends.get_backend("cpu").compile(graph)


def _net(w1, w2, x):
    return np.sum(np.tanh(np.tanh(x @ w1) @ w2) ** 2)


def _net_args(rng, n, dtype=np.float64):
    shapes = [(10, 64), (64, 64), (n, 10)]
    return [(rng.standard_normal(s) / 4).astype(dtype) for s in shapes]


@pytest.mark.parametrize(
    ("a", "b", "threads", "kind"),
    [
        ((4096, 64), (64, 64), 2, "rows"),
        ((64, 4096), (4096, 64), 2, "inner"),  # a weight gradient: the rows are few
        ((8, 8), (8, 8), 2, "whole"),  # too small to pay for the hand-off
        ((4096, 64), (64, 64), 1, "whole"),  # one thread
        ((3, 512, 64), (64, 64), 2, "whole"),  # batched
        ((100, 100), (100, 100), 2, "whole"),  # few rows, short inner dimension
    ],
)
def test_a_product_is_split_by_rows_or_inner_dimension(a, b, threads, kind):
    split = products.plan(a, b, np.float64, threads)
    assert split.kind == kind
    if kind != "whole":
        assert 2 <= split.chunks <= threads * products.CHUNKS_PER_THREAD
    assert products.plan(a, b, np.int64, threads).kind == "whole"  # not BLAS's business


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shapes", [((1001, 37), (37, 19)), ((19, 2999), (2999, 23))])
@pytest.mark.parametrize("layout", ["rows", "columns", "strided"])
def test_split_products_equal_numpys(monkeypatch, rng, dtype, shapes, layout):
    """Row-major, transposed and strided operands: NumPy's product, chunk by chunk."""
    monkeypatch.setattr(products, "CHUNK_WORK", 1 << 12)  # several chunks of a small product
    (m, k), (_, n) = shapes
    base = rng.standard_normal((k, m) if layout == "columns" else (m, 2 * k)).astype(dtype)
    a = {"rows": base[:, :k], "columns": base.T, "strided": base[:, ::2]}[layout]
    b = rng.standard_normal((k, n)).astype(dtype)
    a_before, b_before = a.copy(), b.copy()
    split = products.plan(a.shape, b.shape, dtype, 3)
    assert split.kind in ("rows", "inner") and split.chunks > 2  # chunks do not divide evenly
    partials = np.empty(split.partials, dtype) if split.partials else None
    want = a.astype(np.float64) @ b.astype(np.float64)
    tol = 1e-12 if dtype == np.float64 else 1e-4
    with blas_threads.one_thread():
        fresh = products.matmul(split, a, b, None, partials)
        out = np.full((m, n), np.nan, dtype)
        products.matmul(split, a, b, out, partials)
    for got in (fresh, out):
        assert got.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.sqrt(k))
    np.testing.assert_array_equal(fresh, out)  # fixed chunks: the same sums every call
    np.testing.assert_array_equal(a, a_before)
    np.testing.assert_array_equal(b, b_before)


@pytest.mark.parametrize("into", ["a", "b"])
def test_a_product_written_over_an_operand_is_numpys(monkeypatch, rng, into):
    monkeypatch.setattr(products, "CHUNK_WORK", 1 << 12)
    a, b = rng.standard_normal((300, 300)), rng.standard_normal((300, 300))
    want = a @ b
    split = products.plan(a.shape, b.shape, np.float64, 2)
    assert split.kind == "rows"
    out = a if into == "a" else b
    products.matmul(split, a, b, out)
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)


def test_a_program_of_small_products_shares_them_out_and_runs_its_loops_in_parallel(
    monkeypatch, rng
):
    if not blas_threads.openblas_known():
        pytest.skip("NumPy without its bundled OpenBLAS: products run as NumPy runs them")
    monkeypatch.setattr(cpu_program, "_threads", lambda: 2)
    monkeypatch.setattr(
        cpu_program, "RUNNER", False
    )  # the Python driver (test_runner.py: the other)
    args = _net_args(rng, 2048)
    program = _compile(tg.value_and_grad(_net, argnums=(0, 1)), *args)
    assert program.pooled and program.blas is None
    assert any(call.parallel for call in program.calls.values())  # not held back for BLAS
    kinds = {split.kind for split in program.splits.values()}
    assert {"rows", "inner"} <= kinds
    text = program.source()
    assert "chunks of its rows on 2 threads" in text
    assert "chunks of its inner dimension on 2 threads" in text
    get = blas_threads._openblas()[0]
    before = get()
    seen = []
    real = products.matmul

    def spy(split, a, b, out=None, partials=None):
        seen.append(get())
        return real(split, a, b, out, partials)

    monkeypatch.setattr(products, "matmul", spy)
    program = _compile(tg.value_and_grad(_net, argnums=(0, 1)), *args)  # binds the spy
    want = tg.value_and_grad(_net, argnums=(0, 1), backend="numpy")(*args)
    for _ in range(2):
        value, grads = program(args)[0], program(args)[1:3]
        np.testing.assert_allclose(value, want[0], rtol=1e-12)
        for got, expected in zip(grads, want[1], strict=True):
            np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    assert seen and set(seen) == {1}  # OpenBLAS on one thread during the call...
    assert get() == before  # ...and as it was afterwards


def test_programs_that_keep_openblas_threads(monkeypatch, rng):
    """A large product, a step that runs NumPy code, or the setting off: products go to
    OpenBLAS, and the program's loops run on one thread beside them."""
    monkeypatch.setattr(cpu_program, "_threads", lambda: 2)
    args = _net_args(rng, 2048)
    grad = tg.value_and_grad(_net, argnums=(0, 1))
    monkeypatch.setattr(blas_threads, "SMALL_PRODUCT", 1 << 10)  # every product counts as large
    large = _compile(grad, *args)
    monkeypatch.undo()
    monkeypatch.setattr(cpu_program, "POOLED_PRODUCTS", False)
    off = _compile(grad, *args)
    monkeypatch.undo()

    def solving(w, x):
        return np.sum(np.linalg.solve(w.T @ w + np.eye(10), x.T @ np.tanh(x @ w)))

    w, x = rng.standard_normal((10, 10)), rng.standard_normal((2048, 10))
    with_eval = _compile(tg.grad(solving), w, x)
    for program in (large, off, with_eval):
        assert not program.pooled
        assert all(split.kind == "whole" for split in program.splits.values())
        assert not any(call.parallel for call in program.calls.values())
    np.testing.assert_allclose(
        tg.grad(solving, backend="cpu")(w, x), tg.grad(solving, backend="numpy")(w, x), rtol=1e-9
    )


def test_a_pooled_program_called_from_threads_at_once(monkeypatch, rng):
    monkeypatch.setenv("TRACEGRAD_TIERED", "0")
    args = _net_args(rng, 1024)
    g = tg.value_and_grad(_net, argnums=(0, 1), backend="cpu")
    want = tg.value_and_grad(_net, argnums=(0, 1), backend="numpy")(*args)
    blas = blas_threads._openblas()
    before = blas[0]() if blas is not None else None
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: g(*args), range(24)))
    for value, grads in results:
        np.testing.assert_allclose(value, want[0], rtol=1e-12)
        for got, expected in zip(grads, want[1], strict=True):
            np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    if blas is not None:
        assert blas[0]() == before


def test_chunks_run_once_each_on_several_threads():
    import threading
    import time

    from tracegrad.cpu import pool

    seen: dict[int, int] = {}
    lock = threading.Lock()

    def task(c):
        time.sleep(0.002)  # long enough that the worker takes some chunks
        with lock:
            seen[c] = threading.get_ident()

    pool.run_chunks(task, 12, 3)
    assert sorted(seen) == list(range(12))
    assert len(set(seen.values())) > 1


def test_a_chunks_error_is_raised_in_the_caller_and_the_workers_go_on(rng):
    from tracegrad.cpu import pool

    def task(c):
        if c == 5:
            raise FloatingPointError(f"chunk {c}")

    for _ in range(3):  # whichever thread took chunk 5
        with pytest.raises(FloatingPointError, match="chunk 5"):
            pool.run_chunks(task, 8, 2)
    done: list = []
    pool.run_chunks(done.append, 8, 2)
    assert sorted(done) == list(range(8))


def test_callers_at_once_each_get_all_their_chunks():
    import threading

    from tracegrad.cpu import pool

    results: dict[int, list] = {}

    def caller(k):
        for _ in range(50):
            got: list = []
            pool.run_chunks(got.append, 9, 2)  # busy workers: the caller does its own chunks
            assert sorted(got) == list(range(9))
        results[k] = got

    callers = [threading.Thread(target=caller, args=(k,)) for k in range(4)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert sorted(results) == [0, 1, 2, 3]


def test_workers_interrupted_while_waited_for_are_never_used_again(monkeypatch):
    """Ctrl-C while the caller waits: a worker's report still to come must not end a later
    call's wait early (that call would read chunks not computed yet)."""
    from tracegrad.cpu import pool

    workers = pool._workers_for(1)

    class Interrupted:
        def __init__(self, lock):
            self.lock = lock

        def acquire(self):
            self.lock.acquire()  # the worker has finished: nothing is left running
            raise KeyboardInterrupt

    monkeypatch.setattr(workers, "_done", [Interrupted(workers._done[0])])
    with pytest.raises(KeyboardInterrupt):
        pool.run_chunks(lambda c: None, 4, 2)
    assert workers.broken
    assert pool._workers_for(1) is not workers
    done: list = []
    pool.run_chunks(done.append, 6, 2)
    assert sorted(done) == list(range(6))


def test_a_pooled_program_takes_inputs_of_any_layout(monkeypatch, rng):
    monkeypatch.setenv("TRACEGRAD_TIERED", "0")
    w1, w2, x = _net_args(rng, 1024)  # products of 2 chunks (CHUNK_WORK)
    g = tg.value_and_grad(_net, argnums=(0, 1), backend="cpu")
    want = tg.value_and_grad(_net, argnums=(0, 1), backend="numpy")(w1, w2, x)
    wide = np.repeat(x, 2, axis=1)
    layouts = [
        (w1, w2, wide[:, ::2]),  # strided columns
        (np.asfortranarray(w1), w2.T.copy().T, np.asfortranarray(x)),  # column-major
        (w1, w2, x[::-1][::-1]),
    ]
    for args in layouts:
        value, grads = g(*args)
        np.testing.assert_allclose(value, want[0], rtol=1e-12)
        for got, expected in zip(grads, want[1], strict=True):
            np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


def _net_grads_in_child(args):
    return tg.grad(_net, argnums=(0, 1), backend="cpu")(*args)


def test_a_pooled_program_works_in_a_forked_child(rng):
    import multiprocessing

    args = _net_args(rng, 1024)
    want = tg.grad(_net, argnums=(0, 1), backend="cpu")(*args)  # the parent's workers exist now
    with multiprocessing.get_context("fork").Pool(1) as processes:
        got = processes.apply(_net_grads_in_child, (args,))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12)


@pytest.mark.parametrize("m", [0, 1, 130])
@pytest.mark.parametrize("k", [1, 64])
@pytest.mark.parametrize("n", [1, 33])
def test_split_products_in_programs_of_edge_shapes(monkeypatch, rng, m, k, n):
    """Every product split as finely as it can be, in gradients with empty, single and uneven
    dimensions: the interpreter's numbers."""
    monkeypatch.setenv("TRACEGRAD_TIERED", "0")
    monkeypatch.setattr(products, "CHUNK_WORK", 64)

    def f(w, v, x):
        return np.sum(np.sin(np.tanh(x @ w) @ v) ** 2) + np.sum(x.T @ (x @ w))

    x, w, v = (rng.standard_normal(s) for s in ((m, k), (k, n), (n, 3)))
    got = tg.grad(f, argnums=(0, 1), backend="cpu")(w, v, x)
    want = tg.grad(f, argnums=(0, 1), backend="numpy")(w, v, x)
    for g, e in zip(got, want, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-10)
