"""tg.debug_print: values printed at run time, on every call, on every backend."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg

W = np.array([0.5, -0.25])
X = np.arange(6.0).reshape(3, 2) / 6


def loss(w, x):
    h = np.tanh(x @ w)
    tg.debug_print("h = {}, mean {:.4f}, step {}", h, np.mean(h), 7)
    return np.sum(h**2)


def plain_loss(w, x):
    h = np.tanh(x @ w)
    return np.sum(h**2)


def expected_line(w=W, x=X) -> str:
    h = np.tanh(x @ w)
    return f"h = {h}, mean {np.mean(h):.4f}, step 7"


def test_prints_values_on_every_call(backend, capfd):
    fun = tg.grad(loss, backend=backend)
    capfd.readouterr()
    for _ in range(3):
        fun(W, X)
    assert fun._fast_calls, "the calls after the first should take the cached fast path"
    assert capfd.readouterr().out.splitlines() == [expected_line()] * 3


def test_prints_the_values_of_each_call(backend, capfd):
    fun = tg.jit(loss, backend=backend)
    capfd.readouterr()
    fun(W, X)
    fun(2 * W, X)
    assert capfd.readouterr().out.splitlines() == [expected_line(), expected_line(2 * W)]


def test_derivatives_are_unchanged(backend, capfd):
    np.testing.assert_array_equal(
        tg.grad(loss, backend=backend)(W, X), tg.grad(plain_loss, backend=backend)(W, X)
    )
    np.testing.assert_array_equal(
        tg.hessian(loss, backend=backend)(W, X), tg.hessian(plain_loss, backend=backend)(W, X)
    )
    h = np.tanh(X @ W)
    np.testing.assert_allclose(tg.grad(loss, backend=backend)(W, X), (2 * h * (1 - h**2)) @ X)


def test_order_relative_to_other_prints(backend, capfd):
    def f(x):
        tg.debug_print("first {}", x)
        y = np.sin(x)
        tg.debug_print("second {}", y)
        return np.sum(y)

    fun = tg.grad(f, backend=backend)
    fun(np.ones(2))  # compiled outside the captured part
    capfd.readouterr()
    for i in range(2):
        print(f"before {i}", flush=True)
        fun(np.full(2, float(i)))
        print(f"after {i}", flush=True)
    lines = capfd.readouterr().out.splitlines()
    expected = []
    for i in range(2):
        x = np.full(2, float(i))
        expected += [f"before {i}", f"first {x}", f"second {np.sin(x)}", f"after {i}"]
    assert lines == expected


def test_inside_an_inlined_jit_and_a_hessian_prints_once_per_call(backend, capfd):
    inner = tg.jit(lambda x: (tg.debug_print("inner {}", x), np.sum(x**3))[1])
    hess = tg.hessian(lambda x: inner(x) * 2.0, backend=backend)
    x = np.array([1.0, 2.0])
    capfd.readouterr()
    result = hess(x)
    hess(x)
    np.testing.assert_allclose(result, np.diag(12.0 * x))
    assert capfd.readouterr().out.splitlines() == [f"inner {x}"] * 2


def test_print_trace_time_versus_debug_print_run_time(backend, capfd):
    def f(x):
        print("traced:", x)
        tg.debug_print("value: {}", x)
        return np.sum(x)

    fun = tg.jit(f, backend=backend)
    capfd.readouterr()
    fun(np.zeros(2))
    fun(np.ones(2))
    lines = capfd.readouterr().out.splitlines()
    assert lines == ["traced: Tracer<f64[2]>", f"value: {np.zeros(2)}", f"value: {np.ones(2)}"]


def test_device_arrays_are_printed_from_the_host(capfd):
    pytest.importorskip("numba.cuda")
    if "cuda" not in tg.available_backends() or tg.available_backends()["cuda"]:
        pytest.skip("the cuda backend is not usable here")
    from numba import cuda

    out = tg.grad(loss, backend="cuda")(cuda.to_device(W), cuda.to_device(X))
    np.testing.assert_allclose(out.copy_to_host(), tg.grad(plain_loss, backend="numpy")(W, X))
    assert capfd.readouterr().out.splitlines() == [expected_line()]


def test_outside_a_trace_it_prints_at_once(capsys):
    assert tg.debug_print("x = {}, n = {}", np.arange(3), 4) is None
    assert capsys.readouterr().out == f"x = {np.arange(3)}, n = 4\n"


def test_tap_hooks_run_on_every_call_on_the_fast_path(backend):
    seen = []

    def f(x):
        y = tg.tap(x * 3.0, "y", hook=lambda name, ct: seen.append(float(ct.sum())))
        return np.sum(y * y)

    fun = tg.grad(f, backend=backend)
    for _ in range(3):
        fun(np.ones(2))
    assert fun._fast_calls
    assert seen == [12.0, 12.0, 12.0]


def test_bad_format_fails_while_tracing():
    def f(x):
        tg.debug_print("{} and {}", x)
        return np.sum(x)

    with pytest.raises(ValueError, match="cannot format"):
        tg.jit(f)(np.ones(2))


def test_format_must_be_a_string():
    with pytest.raises(TypeError, match="format string"):
        tg.debug_print(np.ones(2))


def test_traced_values_inside_containers_are_refused():
    def f(x):
        tg.debug_print("{}", (x, x))
        return np.sum(x)

    with pytest.raises(TypeError, match="its own argument"):
        tg.jit(f)(np.ones(2))
