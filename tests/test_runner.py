"""A program as one compiled function on all threads (tracegrad/cpu/runner.py) and what it runs
on (tracegrad/cpu/native.py): atomic counters, waits, OpenBLAS's gemm called by address."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from numba import njit

import tracegrad as tg
from tracegrad.runtime import backends
from tracegrad import passes
from tracegrad.cpu import native, runner
from tracegrad.cpu import program as cpu_program
from tracegrad.base import blas_threads


@pytest.fixture(autouse=True)
def _numba(numba_compiler):
    """These are tests of the Numba compiler's machinery (see conftest.numba_compiler)."""


pytestmark = pytest.mark.skipif(
    native.gemm_addresses() is None or not blas_threads.openblas_known(),
    reason="NumPy without its bundled OpenBLAS: programs run on the Python driver",
)


def _compile(fun, *args):
    graph = passes.optimize(tg.make_ir(fun, optimize=False)(*args))
    return backends.get_backend("cpu").compile(graph)


def _net(w1, b1, w2, b2, w3, x, y):
    h = np.tanh(x @ w1 + b1)
    h = np.tanh(h @ w2 + b2)
    return np.mean((h @ w3 - y) ** 2)


def _net_args(rng, n, dtype=np.float64):
    shapes = [(10, 64), (64,), (64, 64), (64,), (64, 1), (n, 10), (n, 1)]
    return [(rng.standard_normal(s) / 4).astype(dtype) for s in shapes]


GRAD = tg.value_and_grad(_net, argnums=(0, 1, 2, 3, 4))


@pytest.fixture(scope="module", params=[np.float64, np.float32])
def net(request):
    """The network's value_and_grad compiled once per dtype, on two threads."""
    real = cpu_program._threads
    cpu_program._threads = lambda: 2
    numba = pytest.MonkeyPatch()  # (module-scoped: before the tests' own fixtures)
    numba.setenv("TRACEGRAD_CPU_COMPILER", "numba")
    try:
        args = _net_args(np.random.default_rng(5), 1024, request.param)
        program = _compile(GRAD, *args)
    finally:
        cpu_program._threads = real
        numba.undo()
    return program, args


def _check(got, args):
    wide = [a.astype(np.float64) for a in args]
    want = tg.value_and_grad(_net, argnums=(0, 1, 2, 3, 4), backend="numpy")(*wide)
    want = [want[0], *want[1]]
    tol = 1e-10 if args[0].dtype == np.float64 else 2e-4
    for g, w in zip(got, want, strict=True):
        assert g.dtype == args[0].dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


# ---- native.py


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    "m, k, n", [(5, 3, 4), (1, 3, 4), (5, 1, 4), (5, 3, 1), (1, 1, 1), (37, 300, 19), (0, 3, 4)]
)
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_gemm_equals_numpys_product_in_every_layout(rng, dtype, m, k, n, ta, tb):
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    a, b = (a.T if ta else a), (b.T if tb else b)
    address = native.gemm_addresses()[dtype == np.float32]
    out = np.full((m, n), np.nan, dtype)  # beta = 0: what was there is not read
    want = a.astype(np.float64) @ b.astype(np.float64)
    tol = 1e-12 if dtype == np.float64 else 1e-4
    native.gemm(address, a, b, out, False)
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol * np.sqrt(k))
    native.gemm(address, a, b, out, True)
    np.testing.assert_allclose(out, 2 * want, rtol=tol, atol=tol * np.sqrt(k))


def test_gemm_with_an_empty_inner_dimension_and_strided_arrays(rng):
    address = native.gemm_addresses()[0]
    out = np.full((3, 4), np.nan)
    native.gemm(address, np.empty((3, 0)), np.empty((0, 4)), out, False)
    np.testing.assert_array_equal(out, np.zeros((3, 4)))
    a = rng.standard_normal((10, 12))[::2, ::3]  # neither rows nor columns contiguous: copied
    b = rng.standard_normal((4, 5))
    wide = np.zeros((5, 10))
    native.gemm(address, a, b, wide[:, ::2], False)  # a result cblas cannot write in place
    np.testing.assert_allclose(wide[:, ::2], a @ b, rtol=1e-12)
    np.testing.assert_array_equal(wide[:, 1::2], 0.0)


@pytest.mark.parametrize(
    ("array", "flag"),
    [
        (np.empty((4, 6)), 111),
        (np.empty((6, 4)).T, 112),
        (np.empty((4, 12))[:, :6], 111),  # rows of a wider array
        (np.empty((8, 6))[::2], 111),
        (np.empty((4, 12))[:, ::2], 0),
        (np.empty((1, 6))[:, ::2], 112),  # one row: a strided column of a transpose
        (np.empty((4, 1)), 111),
        (np.empty((1, 1)), 111),
    ],
)
def test_layout_says_how_cblas_reads_an_array(array, flag):
    assert native.layout(*array.shape, *array.strides, array.itemsize)[0] == flag


@njit(nogil=True)
def _count(cells, times, threads):
    for _ in range(times):
        native.fetch_add(cells, 0, 1)
    native.fetch_add(cells, 1, 1)
    native.wait_for(cells, 1, threads)  # every thread done before any returns
    return native.load_acquire(cells, 0)


def test_counters_are_atomic_and_waits_see_every_thread():
    cells = np.zeros(2, np.int64)
    _count(cells.copy(), 0, 1)  # compiled before the threads start
    seen = []
    threads = [
        threading.Thread(target=lambda: seen.append(_count(cells, 50_000, 4))) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert cells[0] == 200_000 and cells[1] == 4
    assert seen == [200_000] * 4


# ---- the compiled run of a program


def test_a_program_of_small_products_runs_as_one_compiled_function(net, rng):
    program, args = net
    assert program.pooled and program.runner is not None
    text = program.source()
    assert "# ---- run: the program as one function on 2 threads" in text
    assert "gemm(" in text and "wait_for(" in text and "fetch_add(" in text
    # all its products and loops in one pipeline of 8 chunks of 128 rows (pipelines.py)
    run = text.split("def run(", 1)[1]
    assert run.count("while True:") == 1 and "if c >= 8:" in run
    assert run.count("gemm(") == 5 and "_pparts[c]" in run
    get = blas_threads._openblas()[0]
    before = get()
    first = program(args)
    _check(first, args)
    for _ in range(3):  # fixed chunks: the same numbers on every call
        for a, b in zip(program(args), first, strict=True):
            np.testing.assert_array_equal(a, b)
    assert get() == before  # OpenBLAS's threads as they were
    fresh = [a.copy() for a in _net_args(rng, 1024, args[0].dtype)]
    kept = [a.copy() for a in fresh]
    _check(program(fresh), fresh)
    for a, b in zip(fresh, kept, strict=True):
        np.testing.assert_array_equal(a, b)  # the inputs are never written


def test_threads_calling_one_program_at_once(net):
    program, args = net
    want = program(args)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: program(args), range(16)))
    for got in results:
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)


def test_inputs_in_any_layout_and_read_only(net):
    """The first layout of the inputs and plain C arrays get a compiled run each; any other
    layout (which would compile it again, for seconds) runs on the Python driver."""
    program, args = net
    want = program(args)
    x = args[5]
    frozen = [a.copy() for a in args]
    for a in frozen:
        a.flags.writeable = False
    for odd in (
        [*args[:5], np.asfortranarray(x), args[6]],  # cblas could read it (as a transpose)
        [*args[:5], np.repeat(x, 2, axis=1)[:, ::2], args[6]],  # cblas cannot
        frozen,
    ):
        tol = 1e-12 if x.dtype == np.float64 else 1e-5
        for a, b in zip(program(odd), want, strict=True):
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
        temps = {b.name: np.empty(b.shape, b.dtype) for b in program._temps}
        assert program.runner(odd, temps) is None  # declined: the driver ran it
    assert len(program.runner.fn.signatures) == 1
    for a, b in zip(program(args), want, strict=True):
        np.testing.assert_array_equal(a, b)  # the compiled run again


def test_a_first_call_with_read_only_inputs(monkeypatch, rng):
    monkeypatch.setattr(cpu_program, "_threads", lambda: 2)
    args = _net_args(rng, 1024)
    program = _compile(GRAD, *args)
    frozen = [a.copy() for a in args]
    for a in frozen:
        a.flags.writeable = False
    temps = {b.name: np.empty(b.shape, b.dtype) for b in program._temps}
    with blas_threads.one_thread():
        first = program.runner(frozen, temps)  # compiled for read-only inputs
        second = program.runner(args, temps)  # and once more for plain ones
        assert program.runner([*args[:5], np.asfortranarray(args[5]), args[6]], temps) is None
    assert first is not None and second is not None
    assert len(program.runner.fn.signatures) == 2
    _check(first, args)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_view_that_copies_on_every_call_gives_the_program_to_the_driver(monkeypatch, rng):
    """A hessian's plan reshapes a transposed constant: NumPy copies it on every call, so the
    compiled run (which takes views only) declines for good after the first call."""
    monkeypatch.setattr(cpu_program, "_threads", lambda: 2)
    monkeypatch.setattr(runner, "MIN_WORK", 0)

    def f(w, x):
        return np.sum(np.tanh(x @ w) ** 2)

    w, x = rng.standard_normal((6, 5)) / 2, rng.standard_normal((200, 6))
    program = _compile(tg.hessian(f), w, x)
    assert program.runner is not None and not program.runner.declined
    want = tg.hessian(f, backend="numpy")(w, x)
    for _ in range(2):
        np.testing.assert_allclose(program([w, x])[0], want, rtol=1e-10, atol=1e-12)
        assert program.runner.declined


@pytest.mark.parametrize("n", [1, 64])
def test_a_small_program_keeps_the_driver(monkeypatch, rng, n):
    monkeypatch.setattr(cpu_program, "_threads", lambda: 2)
    args = _net_args(rng, n)
    program = _compile(GRAD, *args)
    assert program.pooled and program.runner is None
    assert runner.work(program) < runner.MIN_WORK
    _check(program(args), args)


def test_programs_without_a_compiled_run(monkeypatch, rng):
    monkeypatch.setattr(cpu_program, "_threads", lambda: 2)

    def batched(a, b):
        return np.sum(np.tanh(a @ b))

    a, b = rng.standard_normal((3, 256, 64)), rng.standard_normal((64, 64))
    assert _compile(tg.grad(batched), a, b).runner is None  # a batched product

    def integers(a, b):
        return np.sum(a @ b) * 1.0

    i = rng.integers(0, 5, (256, 64))
    assert _compile(integers, i, i.T.copy()).runner is None
    monkeypatch.setattr(cpu_program, "RUNNER", False)
    assert _compile(GRAD, *_net_args(rng, 1024)).runner is None
    monkeypatch.undo()
    monkeypatch.setattr(cpu_program, "_threads", lambda: 1)
    assert _compile(GRAD, *_net_args(rng, 1024)).runner is None  # one thread: nothing to share


def test_a_fresh_process_loads_the_compiled_run_from_the_disk_cache(tmp_path):
    """Its machine code is cached like a kernel's, and the cached code links and runs (a
    recursive helper once left an unresolved symbol in it)."""
    script = textwrap.dedent(
        f"""
        import numpy as np, tracegrad as tg
        from tracegrad.cpu import program
        program._threads = lambda: 2
        import {__name__.split(".")[-1]} as t
        args = t._net_args(np.random.default_rng(1), 512)
        value, grads = tg.value_and_grad(t._net, argnums=(0, 2), backend="cpu")(*args)
        print(repr(float(value)), repr(float(grads[1].sum())))
        """
    )
    env = dict(
        os.environ,
        TRACEGRAD_CACHE_DIR=str(tmp_path),
        TRACEGRAD_TIERED="0",
        PYTHONPATH=os.pathsep.join([os.path.dirname(__file__), *sys.path]),
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
        )
        for _ in range(2)
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    assert runs[0].stdout == runs[1].stdout
    modules = list((tmp_path / "kernels").glob("k_*.py"))
    assert any("A tracegrad program run" in m.read_text() for m in modules)


def test_a_captured_matrix_laid_out_as_cblas_cannot_read(monkeypatch, rng):
    """A matrix the function reads from outside (not an argument) with strided columns: the
    call still computes NumPy's numbers, through the driver or a copy made before the run."""
    monkeypatch.setattr(cpu_program, "_threads", lambda: 2)
    monkeypatch.setattr(runner, "MIN_WORK", 0)
    w = rng.standard_normal((64, 130))[:, ::2]

    def loss(x):
        return np.sum(np.tanh(x @ w) ** 2)

    x = rng.standard_normal((512, 64))
    tg.clear_programs()
    got = tg.value_and_grad(loss, backend="cpu")(x)
    want = tg.value_and_grad(loss, backend="numpy")(x)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-10, atol=1e-12)


def test_a_parallel_loop_of_one_chunk(monkeypatch, rng):
    """A batch of one row: the loops over (1, width) are parallel loops of a single chunk, which
    the compiled run once wrote with the chunk index of an earlier step (or none)."""
    monkeypatch.setattr(cpu_program, "_threads", lambda: 2)
    monkeypatch.setattr(runner, "MIN_WORK", 0)

    def loss(w1, w2, x):
        h = np.tanh(x @ w1)
        return np.mean((np.tanh(h @ w2) - x) ** 2)

    d = 16384
    args = (
        rng.standard_normal((d, 32)) / 128,
        rng.standard_normal((32, d)) / 8,
        rng.standard_normal((1, d)),
    )
    grad = tg.value_and_grad(loss, argnums=(0, 1))
    program = _compile(grad, *args)
    assert program.runner is not None
    assert any(c.parallel and c.loop.shape[0] == 1 for c in program.calls.values())
    got = program(list(args))
    want = tg.value_and_grad(loss, argnums=(0, 1), backend="numpy")(*args)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    for g, w in zip(got[1:], want[1], strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-14)
