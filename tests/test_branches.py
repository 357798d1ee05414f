"""Python control flow on traced values: answered while tracing, guarded on every later call.

The oracle is the plain NumPy function (values) and central differences of it (derivatives):
a guarded program must give what the plain function gives for every input, whichever branch
it was traced for, and trace each outcome once.
"""

import logging
import threading

import numpy as np
import pytest
from conftest import BACKENDS
from helpers import finite_differences

import tracegrad as tg

TWO = ["numpy", "cpu"]


def fd_grad(f, x):
    return finite_differences(lambda a: f(a[0]), [np.array(x, dtype=float)], [0])[0]


def piecewise(x):
    if x.sum() > 0:
        return np.sum(np.sin(x) ** 2)
    return np.sum(x**3)


def newton_sqrt(a):
    y = a
    while np.abs(y * y - a) > 1e-12 * a:
        y = 0.5 * (y + a / y)
    return y


def taylor_sine(x):  # the sinusoid example of HIPS autograd, as it is written there
    currterm = x
    ans = currterm
    for i in range(1000):
        currterm = -currterm * x**2 / ((2 * i + 3) * (2 * i + 2))
        ans = ans + currterm
        if np.abs(currterm) < 0.2:
            break  # (Very generous tolerance!)
    return ans


INPUTS = [[1.0, 2.0], [-1.0, -2.0], [3.0, 1.0], [-3.0, 0.5], [0.5, 0.25]]


@pytest.mark.parametrize("backend", TWO)
def test_a_branch_gives_the_plain_functions_values_and_gradients_as_inputs_flip(backend):
    value_and_grad = tg.value_and_grad(piecewise, backend=backend)
    for x in map(np.array, INPUTS):
        value, g = value_and_grad(x)
        np.testing.assert_allclose(value, piecewise(x), rtol=1e-13)
        np.testing.assert_allclose(g, fd_grad(piecewise, x), rtol=1e-6, atol=1e-8)
    assert value_and_grad.trace_count == 2  # one program per outcome, found again after


@pytest.mark.parametrize("backend", TWO)
def test_a_python_while_on_a_residual_unrolls_per_trip_count(backend):
    jitted = tg.jit(newton_sqrt, backend=backend)
    derivative = tg.grad(newton_sqrt, backend=backend)
    for a in [2.0, 9.0, 2.5, 100.0, 2.0, 9.0]:
        np.testing.assert_allclose(jitted(a), np.sqrt(a), rtol=1e-15)
        np.testing.assert_allclose(derivative(a), 0.5 / np.sqrt(a), rtol=1e-12)
    trips = {2.0, 9.0, 2.5, 100.0}
    assert jitted.trace_count <= len(trips) and derivative.trace_count <= len(trips)


@pytest.mark.parametrize("backend", TWO)
def test_autograds_sinusoid_runs_unchanged(backend):
    """d/dx and d2/dx2 of the Taylor series that stops when its term is small, on a grid: the
    derivative is that of the terms summed (the branch taken), checked against the series'
    own derivative summed to the same trip count."""
    d_fun = tg.grad(taylor_sine, backend=backend)
    dd_fun = tg.grad(d_fun, backend=backend)
    for x in np.linspace(-4, 4, 5 if backend == "cpu" else 9):
        np.testing.assert_allclose(d_fun(x), fd_grad(taylor_sine, x), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(dd_fun(x), fd_grad(lambda v: d_fun(v), x), rtol=1e-5, atol=1e-6)


def test_int_and_range_of_a_traced_value():
    def power(x, n):
        result = np.ones_like(x)
        for _ in range(int(n)):  # the count is a traced float
            result = result * x
        return result.sum()

    g = tg.grad(power, backend="numpy")
    x = np.array([1.5, -2.0])
    for n in [3.0, 2.0, 3.0, 5.0]:
        np.testing.assert_allclose(g(x, n), n * x ** (n - 1), rtol=1e-13)
    assert g.trace_count == 3


def test_a_traced_integer_indexes_a_python_list():
    scales = [np.array(1.0), np.array(10.0), np.array(100.0)]

    def pick(x, k):
        return x * scales[k]  # k.__index__()

    f = tg.jit(pick, backend="numpy")
    for k in [0, 2, 1, 2]:
        assert float(f(np.array(3.0), np.array(k))) == 3.0 * scales[k]


@pytest.mark.parametrize("backend", TWO)
def test_hessians_jvps_and_hvps_through_a_branch(backend):
    for x in map(np.array, INPUTS[:3]):
        h = tg.hessian(piecewise, backend=backend)(x)
        expected = np.diag(2 * np.cos(2 * x)) if x.sum() > 0 else np.diag(6 * x)
        np.testing.assert_allclose(h, expected, rtol=1e-12, atol=1e-14)
        v = np.array([1.0, -0.5])
        _, tangent = tg.jvp(piecewise, (x,), (v,), backend=backend)
        np.testing.assert_allclose(tangent, fd_grad(piecewise, x) @ v, rtol=1e-6)
        np.testing.assert_allclose(tg.hvp(piecewise, backend=backend)(x, v), expected @ v)


def test_a_branch_inside_a_transform_inside_a_trace():
    """grad(f) called inside a jitted function: the inner trace's branch guards the outer
    program."""

    def outer(x):
        return tg.grad(piecewise)(x) * 2.0

    f = tg.jit(outer, backend="numpy")
    for x in map(np.array, INPUTS):
        np.testing.assert_allclose(f(x), 2 * fd_grad(piecewise, x), rtol=1e-6, atol=1e-8)
    assert f.trace_count == 2


def test_a_branch_on_a_closure_value_of_an_enclosing_trace():
    def outer(x, y):
        def inner(z):
            if y > 0:  # y is a value of the enclosing trace
                return np.sum(z * y)
            return np.sum(z**2)

        return tg.grad(inner)(x)

    f = tg.jit(outer, backend="numpy")
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(f(x, 3.0), [3.0, 3.0])
    np.testing.assert_allclose(f(x, -1.0), 2 * x)
    np.testing.assert_allclose(f(x, 2.0), [2.0, 2.0])


def test_an_error_in_the_branch_not_taken_is_not_the_calls():
    """The program traced for x > 0 factors x * A, which fails for x < 0: that call's guard is
    checked, and the other program runs."""
    a = np.array([[2.0, 0.5], [0.5, 1.0]])

    def f(x):
        if x > 0:
            return np.sum(np.linalg.cholesky(x * a))
        return -x

    for backend in TWO:
        g = tg.jit(f, backend=backend)
        assert np.isclose(g(1.0), np.sum(np.linalg.cholesky(a)))
        assert g(-2.0) == 2.0
        assert np.isclose(g(4.0), np.sum(np.linalg.cholesky(4.0 * a)))


def test_hooks_run_once_per_call_even_when_a_guard_fails():
    seen = []

    def f(x):
        h = tg.tap(x * 2.0, "h", hook=lambda name, ct: seen.append(float(ct)))
        if x > 0:
            return h * h
        return 3.0 * h

    g = tg.grad(f, backend="numpy")
    assert g(1.0) == 8.0 and g(-1.0) == 6.0 and g(2.0) == 16.0
    assert seen == [4.0, 3.0, 8.0]


def test_too_many_outcomes_is_an_error_naming_the_line(monkeypatch):
    monkeypatch.setenv("TRACEGRAD_MAX_VARIANTS", "3")

    def steps(x):
        total = x
        for _ in range(int(x)):  # the line whose outcome keeps changing
            total = total * 0.5
        return total

    f = tg.jit(steps, backend="numpy")
    for x in [1.0, 2.0, 3.0]:
        assert f(x) == steps(x)
    with pytest.raises(tg.TracingError) as info:
        f(4.0)
    message = str(info.value)
    assert "test_branches.py" in message and "keeps changing" in message
    assert "tg.while_loop" in message and "TRACEGRAD_MAX_VARIANTS" in message
    assert f(2.0) == steps(2.0)  # the outcomes traced still run


def test_a_warning_when_outcomes_keep_changing(caplog):
    f = tg.jit(lambda x: x * sum(1.0 for _ in range(int(x))), backend="numpy")
    with caplog.at_level(logging.WARNING, logger="tracegrad"):
        for x in range(1, 10):
            assert f(float(x)) == x * x
    warned = [r.getMessage() for r in caplog.records if "programs for one argument" in r.message]
    assert len(warned) == 1 and "tg.while_loop" in warned[0]


def test_the_strict_rule_on_request(monkeypatch):
    def f(x):
        return x if x > 0 else -x

    with pytest.raises(tg.TracingError, match="branch on"):
        tg.jit(f, guards=False, backend="numpy")(1.0)
    assert tg.jit(f, backend="numpy")(-2.0) == 2.0
    monkeypatch.setenv("TRACEGRAD_GUARDS", "0")
    with pytest.raises(tg.TracingError, match=r"np\.where"):
        tg.grad(f, backend="numpy")(3.0)


def test_under_vmap_a_branch_is_refused_with_the_where_form():
    def f(x):
        return x if x > 0 else -x

    with pytest.raises(tg.TracingError) as info:
        tg.vmap(f, backend="numpy")(np.array([1.0, -1.0]))
    message = str(info.value)
    assert "inside vmap" in message and "np.where" in message and "tg.cond" in message


def test_an_array_predicate_is_ambiguous_as_in_numpy():
    with pytest.raises(ValueError, match="ambiguous"):
        tg.jit(lambda x: x if x > 0 else -x, backend="numpy")(np.ones(3))


def test_make_ir_shows_the_guards_with_their_lines():
    text = str(tg.make_ir(piecewise)(np.array([1.0, 2.0])))
    guard = [line for line in text.splitlines() if line.strip().startswith("guard ")]
    assert len(guard) == 1 and "== True" in guard[0] and "test_branches.py" in guard[0]
    text = str(tg.make_ir(piecewise)(np.array([-1.0, -2.0])))
    assert "== False" in text


def test_retrace_log_says_which_guard_failed(caplog):
    f = tg.jit(piecewise, backend="numpy")
    f(np.array([1.0, 1.0]))
    import os

    os.environ["TRACEGRAD_LOG"] = "retrace"
    try:
        with caplog.at_level(logging.INFO, logger="tracegrad"):
            f(np.array([-1.0, -1.0]))
    finally:
        del os.environ["TRACEGRAD_LOG"]
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "Python branch at" in logged and "test_branches.py" in logged
    assert "traced as True, now False" in logged


def test_the_callers_arrays_are_not_modified_and_threads_agree():
    f = tg.value_and_grad(piecewise, backend="cpu")
    xs = [np.array(x) for x in INPUTS] * 4
    copies = [x.copy() for x in xs]
    results = [None] * len(xs)

    def work(i):
        results[i] = f(xs[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x, copy, (value, g) in zip(xs, copies, results, strict=True):
        np.testing.assert_array_equal(x, copy)
        np.testing.assert_allclose(value, piecewise(x), rtol=1e-13)
        np.testing.assert_allclose(g, fd_grad(piecewise, x), rtol=1e-6, atol=1e-8)


@pytest.mark.skipif("cuda" not in BACKENDS, reason="numba-cuda is not installed")
def test_cuda_backend_branches():
    f = tg.grad(piecewise, backend="cuda")
    for x in map(np.array, INPUTS[:2]):
        np.testing.assert_allclose(f(x), fd_grad(piecewise, x), rtol=1e-6, atol=1e-8)


def test_first_calls_on_the_interpreter_check_their_guards_too(monkeypatch):
    monkeypatch.setenv("TRACEGRAD_TIERED", "1")
    f = tg.grad(piecewise, backend="cpu")
    for x in map(np.array, INPUTS):
        np.testing.assert_allclose(f(x), fd_grad(piecewise, x), rtol=1e-6, atol=1e-8)
    tg.wait_compiled()
    for x in map(np.array, INPUTS):
        np.testing.assert_allclose(f(x), fd_grad(piecewise, x), rtol=1e-6, atol=1e-8)


def test_traced_slice_bounds_and_sizes_are_answered():
    """x[:n], x[i:i + 2] and np.zeros(n) with a traced integer n: one program per value."""

    def head(x, n):
        return np.sum(x[:n] ** 2) + np.sum(np.zeros(n) + 1.0)

    g = tg.grad(head, backend="numpy")
    x = np.arange(5.0)
    for n in [3, 2, 3]:
        expected = np.where(np.arange(5) < n, 2 * x, 0.0)
        np.testing.assert_array_equal(g(x, np.int64(n)), expected)
    assert g.trace_count == 2
    window = tg.jit(lambda x, i: x[i : i + 2].sum(), backend="numpy")
    assert window(x, np.int64(1)) == 3.0 and window(x, np.int64(3)) == 7.0
    with pytest.raises(tg.TracingError, match="slice bounds must be static"):
        tg.jit(lambda x, n: x[:n], guards=False, backend="numpy")(x, np.int64(2))


def test_a_traced_flag_and_an_integer_of_another_width():
    def f(x, flag, k):
        lst = [1.0, 2.0, 3.0]
        return x * lst[k] if flag else -x

    for backend in TWO:
        g = tg.jit(f, backend=backend)
        for flag, k in [(True, 2), (False, 0), (True, 1), (True, 2)]:
            assert g(2.0, np.bool_(flag), np.int32(k)) == f(2.0, flag, k)
        assert g.trace_count == 3


def test_int_of_nan_on_a_later_call_raises_as_numpy_does():
    f = tg.jit(lambda x: x * int(x), backend="numpy")
    assert f(2.5) == 5.0
    with pytest.raises(ValueError, match="NaN"):
        f(np.nan)
    assert f(3.5) == 10.5


def test_a_python_int_argument_counts_a_loop():
    """A Python int argument is traced as float64; range(n) takes it while it is whole, and a
    later 2.5 is refused as Python refuses range(2.5)."""

    def power(a, n):
        for _ in range(n):
            a = a * a
        return a

    g = tg.grad(power, backend="numpy")
    assert g(1.5, 2) == 4 * 1.5**3 and g(1.5, 1) == 3.0 and g(1.5, 2) == 4 * 1.5**3
    assert g.trace_count == 2
    with pytest.raises(TypeError, match="whole number"):
        g(1.5, 2.5)
