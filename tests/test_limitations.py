"""tests/test_limitations.py keeps docs/limitations.md honest: every claim in the prose of that
page that its own ```python blocks (run by tests/test_docs.py) do not already exercise is tried
here, section by section, in the page's order. A claim that something works is compared with
plain NumPy, and a derivative with central differences in float64; a claim that something is
refused checks the error's type and the phrase of its message a user relies on.

Claims about speed and memory (compile times, per-step overhead, O(steps) storage) and about
OpenBLAS threading are not tested here."""

import functools
import math
import types
import weakref

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.transforms import scan

NUMPY_CPU = pytest.mark.parametrize("backend", ["numpy", "cpu"])


def central(f, x, eps=1e-6):
    """Central differences of the scalar f at x (a float or an array), in float64."""
    x = np.asarray(x, dtype=np.float64)
    g = np.zeros(x.shape)
    for idx in np.ndindex(x.shape):
        h = eps * max(1.0, abs(float(x[idx])))
        up, down = x.copy(), x.copy()
        up[idx] += h
        down[idx] -= h
        g[idx] = (float(f(up)) - float(f(down))) / (2 * h)
    return g


def check_grad(f, x, backend="numpy", rtol=1e-6, atol=1e-8):
    np.testing.assert_allclose(tg.grad(f, backend=backend)(x), central(f, x), rtol=rtol, atol=atol)


def scans(fun, *args):
    return [n for n in tg.make_ir(fun)(*args).nodes if n.prim is scan.scan_p]


# ----------------------------------------------------------------------------------------------
# Python control flow on traced values: answered while tracing, guarded on every call
# (tests/test_branches.py tests the guards themselves)


def _while_on_value(x):
    while x > 0:
        x = x - 1.0
    return x


@pytest.mark.parametrize(
    ("fun", "plain"),
    [
        (_while_on_value, _while_on_value),
        (lambda x: (x > 0) and x * x, lambda x: (x > 0) and x * x),
        (lambda x: (x > 5) or x * x, lambda x: (x > 5) or x * x),
        (lambda x: x * int(x), lambda x: x * int(x)),
    ],
    ids=["while", "and", "or", "int"],
)
def test_python_control_flow_on_a_traced_value_follows_the_branch_taken(fun, plain):
    for x in (2.5, 0.5, 3.5):
        np.testing.assert_allclose(tg.jit(fun, backend="numpy")(x), plain(x))


@pytest.mark.parametrize(
    "fun",
    [_while_on_value, lambda x: (x > 0) and x, lambda x: x * int(x)],
    ids=["while", "and", "int"],
)
def test_the_strict_rule_refuses_python_control_flow(fun):
    with pytest.raises(tg.TracingError):
        tg.jit(fun, backend="numpy", guards=False)(2.0)


@pytest.mark.parametrize("fun", [lambda x: x * float(x), lambda x: x * x.item()])
def test_float_of_a_traced_value_stays_refused(fun):
    with pytest.raises(tg.TracingError, match="derivative"):
        tg.grad(fun, backend="numpy")(2.0)


def test_the_derivative_at_a_boundary_is_the_branch_python_takes():
    g = tg.grad(lambda x: x if x > 0 else 0.0 * x, backend="numpy")
    assert g(0.0) == 0.0 and g(1e-300) == 1.0


def test_fixed_range_loops_and_ifs_on_shapes_or_static_arguments_are_fine():
    def f(x, flag):
        total = 0.0
        for k in range(3):
            total = total + x[k] ** 2
        if x.shape[0] > 2:
            total = total * 2.0
        if flag:
            total = total + np.sum(x)
        return total

    x = np.array([1.0, 2.0, 3.0, 4.0])
    for flag in (True, False):
        g = tg.grad(f, static_argnums=1, backend="numpy")(x, flag)
        np.testing.assert_allclose(g, central(lambda x, flag=flag: f(x, flag), x), rtol=1e-6)


@NUMPY_CPU
def test_while_loop_and_cond_are_differentiable(backend):
    def newton_sqrt(a):
        def body(c):
            y, k = c
            return 0.5 * (y + a / y), k + 1.0

        y, _ = tg.while_loop(lambda c: c[1] < 6.0, body, (a, 0.0))
        return tg.cond(a > 1.0, lambda y: y * y, lambda y: np.sin(y), y) + y

    for a in (2.5, 0.7):
        g = tg.grad(newton_sqrt, backend=backend)(a)
        np.testing.assert_allclose(g, central(newton_sqrt, a), rtol=1e-6)


def test_a_static_argument_traces_again_for_each_new_value():
    def poly(x, degree):
        return sum(x**k for k in range(degree + 1))

    g = tg.grad(poly, static_argnums=1, backend="numpy")
    assert g(2.0, 2) == pytest.approx(1 + 2 * 2.0)
    assert g(2.0, 3) == pytest.approx(1 + 2 * 2.0 + 3 * 4.0)
    assert g(2.0, 3) == pytest.approx(17.0)
    assert g.trace_count == 2


# ----------------------------------------------------------------------------------------------
# Loops: what rolls and what derivatives cost


def _repeating(x):
    for _ in range(20):
        x = np.sin(x) * 1.01 + 0.1 * np.cos(x) + x**2 * 0.01
    return np.sum(x**2)


def _periodic_boundary(x):
    n = x.shape[0]
    out = []
    for t in range(n):
        out.append(np.sin(x[t]) * x[(t + 1) % n] + np.cos(x[t - 1]) * 0.5 + x[t] ** 3 * 0.1)
    return np.sum(np.stack(out) ** 2)


def _differs_by_iteration(x):
    for t in range(12):
        if t % 2:
            x = np.sin(x) * 1.01 + 0.1
        else:
            x = np.cos(x) * 0.99 - 0.1
    return np.sum(x**2)


def _lagged(lag):
    def f(x):
        xs = [x * (0.1 * j + 0.5) for j in range(lag)]
        for t in range(lag, lag + 16):
            prev, back = xs[t - 1], xs[t - lag]
            xs.append(np.sin(prev) + 0.5 * np.cos(back) + 0.1 * prev * back + 0.01 * np.tanh(prev))
        return np.sum(xs[-1] ** 2)

    return f


def _two_variables(x):
    a, b = x, x * 0.5
    for _ in range(12):
        a, b = b, np.sin(b) + 0.5 * np.cos(a) + 0.1 * b * a
    return np.sum(b**2)


def test_a_loop_whose_iterations_repeat_rolls_into_one_scan():
    x = np.linspace(0.1, 0.9, 6)
    assert len(scans(_repeating, x)) == 1
    check_grad(_repeating, x)


def test_a_loop_with_a_different_first_or_last_iteration_still_rolls():
    x = np.linspace(0.1, 0.9, 24)
    assert len(scans(_periodic_boundary, x)) == 1
    check_grad(_periodic_boundary, x[:8])


@pytest.mark.parametrize(
    "fun", [_two_variables, _lagged(2), _lagged(4)], ids=["two-variables", "lag-2", "lag-4"]
)
def test_a_loop_reading_up_to_four_iterations_back_rolls(fun):
    x = np.linspace(0.1, 0.9, 5)
    assert len(scans(fun, x)) == 1
    check_grad(fun, x)


@pytest.mark.parametrize("fun", [_differs_by_iteration, _lagged(5)], ids=["if-on-t", "lag-5"])
def test_loops_that_do_not_repeat_stay_unrolled_with_right_derivatives(fun):
    x = np.linspace(0.1, 0.9, 5)
    assert not scans(fun, x)
    check_grad(fun, x)


def test_a_short_loop_stays_unrolled():
    def three(x):
        for _ in range(3):
            x = np.sin(x) * 1.01 + 0.1
        return np.sum(x)

    assert not scans(three, np.ones(3))


def test_fori_loop_and_scan_trace_the_body_once_a_python_loop_once_per_iteration():
    calls = {"fori": 0, "scan": 0, "python": 0}

    def body(i, x):
        calls["fori"] += 1
        return np.sin(x) + 0.1

    def step(c, x):
        calls["scan"] += 1
        return c * x + 1.0, c

    def python(x):
        for _ in range(7):
            calls["python"] += 1
            x = np.sin(x) + 0.1
        return x

    x = np.linspace(0, 1, 4)
    tg.jit(lambda x: tg.fori_loop(0, 7, body, x), backend="numpy")(x)
    tg.jit(lambda x: tg.scan(step, 1.0, x), backend="numpy")(x)
    tg.jit(python, backend="numpy")(x)
    assert calls["fori"] == 1
    assert calls["scan"] == 1
    assert calls["python"] == 7


@NUMPY_CPU
def test_scan_and_fori_loop_reverse_passes_give_right_derivatives(backend):
    def f(x):
        y = tg.fori_loop(0, 5, lambda i, c: np.sin(c) * 1.1 + 0.2, x)
        c, ys = tg.scan(lambda c, x: (c * np.cos(x) + x, c * x), 1.0, y)
        return c + np.sum(ys**2)

    check_grad(f, np.linspace(0.1, 0.8, 4), backend=backend)


def test_batching_the_derivative_of_a_while_loop_is_not_supported():
    def f(a):
        y, _ = tg.while_loop(lambda c: c[1] < 3.0, lambda c: (c[0] * a, c[1] + 1.0), (a, 0.0))
        return y

    with pytest.raises(NotImplementedError, match=r"derivative of tg\.while_loop over a batched"):
        tg.vmap(tg.grad(f, backend="numpy"))(np.array([1.0, 2.0]))


@pytest.mark.parametrize(
    "loop",
    [
        lambda x: tg.fori_loop(0, 3, lambda i, c: tg.tap(c, "c") * 2.0, x),
        lambda x: tg.fori_loop(0, 3, lambda i, c: _debug(c) * 2.0, x),
        lambda x: tg.while_loop(lambda c: np.sum(c) < 10.0, lambda c: tg.tap(c, "c") * 2.0, x),
        lambda x: tg.scan(lambda c, v: (tg.tap(c, "c") + v, c), 0.0, x)[0],
        lambda x: tg.cond(np.sum(x) > 0, lambda v: tg.tap(v, "v"), lambda v: v * 2.0, x),
    ],
    ids=["tap-fori", "debug_print-fori", "tap-while", "tap-scan", "tap-cond"],
)
def test_taps_and_debug_print_inside_loop_and_cond_bodies_are_refused(loop):
    with pytest.raises(tg.TracingError, match="it would never run"):
        tg.jit(lambda x: np.sum(loop(x)), backend="numpy")(np.array([1.0, 2.0]))


def _debug(c):
    tg.debug_print("c = {}", c)
    return c


def test_taps_and_debug_print_work_in_a_python_loop(capsys):
    seen = []

    def f(x):
        for k in range(2):
            x = tg.tap(x, f"x{k}", lambda name, ct: seen.append(name)) * 2.0
            tg.debug_print("x = {}", x)
        return np.sum(x)

    grads, taps = tg.grad(f, taps=True, backend="numpy")(np.array([1.0, 2.0]))
    assert grads.tolist() == [4.0, 4.0]
    assert taps["x0"].tolist() == [4.0, 4.0] and taps["x1"].tolist() == [2.0, 2.0]
    assert sorted(seen) == ["x0", "x1"]
    assert capsys.readouterr().out.count("x = ") == 2


@NUMPY_CPU
def test_integers_carried_beside_floats_are_exact_below_2_53_and_rounded_above(backend):
    def f(x, n):
        return tg.fori_loop(0, 2, lambda i, c: (c[0] + 1, c[1] * 2.0), (n, x))

    n, y = tg.jit(f, backend=backend)(1.0, np.int64(2**40 + 1))
    assert n.dtype == np.int64 and int(n) == 2**40 + 3 and float(y) == 4.0
    n, _ = tg.jit(f, backend=backend)(1.0, np.int64(2**53 + 1))
    assert int(n) != 2**53 + 3 and abs(int(n) - (2**53 + 3)) <= 2


def test_fori_loop_index_is_int64_and_a_float32_carry_adding_it_is_refused():
    with pytest.raises(TypeError, match=r"i\.astype\(np\.float32\)"):
        tg.jit(lambda x: tg.fori_loop(0, 3, lambda i, c: c + i, x), backend="numpy")(
            np.float32(1.0)
        )
    fixed = tg.jit(
        lambda x: tg.fori_loop(0, 3, lambda i, c: c + i.astype(np.float32), x), backend="numpy"
    )(np.float32(1.0))
    assert fixed.dtype == np.float32 and float(fixed) == 4.0


# ----------------------------------------------------------------------------------------------
# Values read from outside the function are never stale

X_DATA = np.arange(6.0).reshape(3, 2)
Y_DATA = np.arange(6.0).reshape(3, 2)
Y_COLUMN, Y_T = Y_DATA[:, 0], Y_DATA.T
Z_DATA = np.arange(6.0).reshape(3, 2)
MASK, INDEX = np.array([True, False, True]), np.array([0, 0, 2])
W_DATA = np.arange(1.0, 4.0)
RATE = 0.5


def test_arrays_read_from_outside_are_read_afresh_on_every_call():
    global X_DATA
    X_DATA = np.arange(6.0).reshape(3, 2)
    f = tg.jit(lambda w: np.sum(w * X_DATA), backend="numpy")
    assert float(f(1.0)) == 15.0
    X_DATA[:] = 1.0
    assert float(f(1.0)) == 6.0
    X_DATA = np.full((3, 2), 2.0)
    assert float(f(1.0)) == 12.0 and f.trace_count == 1
    X_DATA = np.full((4, 2), 2.0)  # a new shape traces again
    assert float(f(1.0)) == 16.0 and f.trace_count == 2


def test_a_view_of_an_outside_array_sees_in_place_changes_and_rebinding():
    global Y_COLUMN
    Y_DATA[:] = np.arange(6.0).reshape(3, 2)
    Y_COLUMN = Y_DATA[:, 0]
    f = tg.jit(lambda w: (np.sum(w * Y_COLUMN), np.sum(w * Y_T[1])), backend="numpy")
    assert [float(v) for v in f(1.0)] == [6.0, 9.0]
    Y_DATA[:] = 1.0
    assert [float(v) for v in f(1.0)] == [3.0, 3.0] and f.trace_count == 1
    # a rebound array of the same shape is read afresh, as an array the function uses is
    Y_COLUMN = Y_DATA[:, 1] * 3.0
    assert [float(v) for v in f(1.0)] == [9.0, 3.0] and f.trace_count == 1


def test_an_array_numpy_reads_while_tracing_is_compared_and_traces_again():
    Z_DATA[:] = np.arange(6.0).reshape(3, 2)
    f = tg.jit(lambda w: w * Z_DATA.mean(0), backend="numpy")
    np.testing.assert_array_equal(f(1.0), [2.0, 3.0])
    Z_DATA[:] = 1.0
    np.testing.assert_array_equal(f(1.0), [1.0, 1.0])
    assert f.trace_count == 2


def test_a_static_index_or_mask_from_outside_is_compared_also_as_an_operand():
    MASK[:], INDEX[:] = [True, False, True], [0, 0, 2]
    f = tg.jit(lambda x: (x[MASK], x[INDEX], np.where(MASK, x, 0.0)), backend="numpy")
    x = np.arange(1.0, 4.0)

    def expected():
        return (x[MASK], x[INDEX], np.where(MASK, x, 0.0))

    for got, want in zip(f(x), expected(), strict=True):
        np.testing.assert_array_equal(got, want)
    MASK[:], INDEX[:] = [False, True, True], [1, 1, 1]
    for got, want in zip(f(x), expected(), strict=True):
        np.testing.assert_array_equal(got, want)
    assert f.trace_count == 2


def test_an_array_used_traced_and_read_by_numpy_while_tracing_is_not_seen():
    W_DATA[:] = [1.0, 2.0, 3.0]
    f = tg.jit(lambda w: np.sum(w * W_DATA) / W_DATA.sum(), backend="numpy")
    assert float(f(1.0)) == 1.0
    W_DATA[:] = [2.0, 2.0, 5.0]
    assert float(f(1.0)) == pytest.approx(9.0 / 6.0)  # the documented stale case
    assert float(tg.jit(lambda w, W: np.sum(w * W) / W.sum(), backend="numpy")(1.0, W_DATA)) == 1.0


def test_changed_numbers_trace_again_and_the_retrace_log_names_them(monkeypatch, caplog):
    monkeypatch.setenv("TRACEGRAD_LOG", "retrace")

    def make():
        rate = 0.5

        def loss(w):
            return w * rate

        def set_rate(v):
            nonlocal rate
            rate = v

        return loss, set_rate

    loss, set_rate = make()
    g = tg.grad(loss, backend="numpy")
    assert float(g(1.0)) == 0.5
    set_rate(0.25)
    with caplog.at_level("INFO", logger="tracegrad"):
        assert float(g(1.0)) == 0.25
    assert "closure variable 'rate' of loss changed (0.5 -> 0.25)" in caplog.text
    assert g.trace_count == 2


def test_eight_traces_caused_by_a_changing_value_warn_naming_it(caplog):
    global RATE
    f = tg.jit(lambda w: w * RATE, backend="numpy")
    with caplog.at_level("WARNING", logger="tracegrad"):
        for k in range(9):
            RATE = float(k)
            assert float(f(1.0)) == k
    assert "traced 8 times" in caplog.text and "global 'RATE'" in caplog.text


def test_values_are_reached_through_containers_modules_and_objects():
    params = {"W": 2.0}
    config = types.SimpleNamespace(rate=3.0)

    class Model:
        def __init__(self):
            self.c = 4.0

        def __call__(self, w):
            return w * self.c + w * params["W"] + w * config.rate

    model = Model()
    f = tg.jit(model, backend="numpy")
    assert float(f(1.0)) == 9.0
    params["W"], config.rate, model.c = 10.0, 0.0, 5.0
    assert float(f(1.0)) == 15.0


def test_values_read_by_computed_names_are_seen():
    config = types.SimpleNamespace(rate=1.0)
    f = tg.jit(lambda w: w * getattr(config, "ra" + "te"), backend="numpy")
    assert float(f(1.0)) == 1.0
    config.rate = 2.0
    assert float(f(1.0)) == 2.0


def test_an_empty_list_or_dict_is_read_only_as_it_was_when_traced():
    log, table = [], {}

    def appends(w):
        log.append(1)
        return w * len(log)

    def stores(w):
        table[len(table)] = 1
        return w * len(table)

    for f in (appends, stores):
        j = tg.jit(f, backend="numpy")
        assert float(j(1.0)) == 1.0 and float(j(1.0)) == 1.0 and j.trace_count == 1


def test_a_value_reached_through_a_library_module_is_read_only_as_traced(monkeypatch):
    import sys

    module = types.ModuleType("tracegrad_limitations_config")
    module.rate = 1.0
    monkeypatch.setitem(sys.modules, module.__name__, module)
    f = tg.jit(lambda w: w * sys.modules["tracegrad_limitations_config"].rate, backend="numpy")
    assert float(f(1.0)) == 1.0
    module.rate = 2.0
    assert float(f(1.0)) == 1.0  # the documented stale case


def test_a_fresh_lambda_in_a_loop_is_traced_once_and_the_cache_holds_no_function():
    batch = np.ones(3)

    def loss(w, batch):
        return np.sum(w * batch)

    for _ in range(3):
        g = tg.grad(lambda w: loss(w, batch), backend="numpy")
        assert float(g(1.0)) == 3.0 and g.trace_count == 1

    def make():
        def f(w):
            return w * 2.0

        return f

    f = make()
    alive = weakref.ref(f)
    tg.grad(f, backend="numpy")(1.0)
    del f
    import gc

    gc.collect()
    assert alive() is None


# ----------------------------------------------------------------------------------------------
# Shapes are static


def test_each_new_shape_is_a_new_trace(monkeypatch, caplog):
    monkeypatch.setenv("TRACEGRAD_LOG", "retrace")
    f = tg.jit(lambda x: np.sum(x**2), backend="numpy")
    f(np.ones(4))
    f(np.ones(4))
    with caplog.at_level("INFO", logger="tracegrad"):
        f(np.ones(3))
    assert f.trace_count == 2 and "re-tracing" in caplog.text


# ----------------------------------------------------------------------------------------------
# Indexing: shapes must be known while tracing

_X34 = np.arange(12.0).reshape(3, 4)


@pytest.mark.parametrize(
    "index",
    [
        (1,),
        (slice(1, 3),),
        (None, slice(None), 2),
        (Ellipsis, 1),
        (np.array([2, 0, 2]),),
        (slice(None), np.array([3, 1])),
        (np.array([True, False, True]),),
    ],
    ids=["int", "slice", "None", "ellipsis", "int-array", "slice-int-array", "static-mask"],
)
def test_indexing_takes_static_indices_with_numpy_semantics(index):
    got = tg.jit(lambda x: x[index] * 1.0, backend="numpy")(_X34)
    np.testing.assert_array_equal(got, _X34[index])


def test_a_traced_integer_index_array_gathers():
    got = tg.jit(lambda x, i: x[i], backend="numpy")(_X34, np.array([2, 0]))
    np.testing.assert_array_equal(got, _X34[[2, 0]])


@NUMPY_CPU
def test_writes_work_on_traced_values_and_on_arrays_made_inside(backend):
    def f(x, v):
        y = x * 1.0
        y[np.array([0, 2])] = v
        y[1:3] += v
        z = np.zeros(4)
        z[1] = v[0]
        z[2:] += v
        return np.sum(y**2) + np.sum(z * y)

    def plain(x, v):
        y = x * 1.0
        y[[0, 2]] = v
        y[1:3] += v
        z = np.zeros(4)
        z[1] = v[0]
        z[2:] += v
        return np.sum(y**2) + np.sum(z * y)

    x, v = np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.5, -1.5])
    assert float(tg.jit(f, backend=backend)(x, v)) == pytest.approx(plain(x, v))
    gx, gv = tg.grad(f, argnums=(0, 1), backend=backend)(x, v)
    np.testing.assert_allclose(gx, central(lambda x: plain(x, v), x), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gv, central(lambda v: plain(x, v), v), rtol=1e-6, atol=1e-8)


def test_a_traced_boolean_mask_is_refused_with_the_where_form():
    with pytest.raises(tg.TracingError, match=r"np\.where"):
        tg.jit(lambda x: x[x > 2.0], backend="numpy")(np.arange(6.0))


def test_a_boolean_scalar_index_is_refused_with_the_none_form():
    with pytest.raises(tg.TracingError, match=r"x\[None\]"):
        tg.jit(lambda x: x[True], backend="numpy")(np.arange(6.0))


# ----------------------------------------------------------------------------------------------
# Supported NumPy functions


def jit(f):
    return tg.jit(f, backend="numpy")


def grad(f, **kw):
    return tg.grad(f, backend="numpy", **kw)


def test_an_unsupported_function_says_so_and_names_a_traced_equivalent():
    with pytest.raises(tg.TracingError, match=r"np\.unique is not supported on traced values yet"):
        jit(lambda x: np.unique(x))(np.ones(3))
    with pytest.raises(tg.TracingError, match=r"Use np\.where\(condition, a, b\)"):
        jit(lambda x: np.nonzero(x))(np.ones(3))


def test_a_math_function_on_a_traced_value_names_its_numpy_twin():
    with pytest.raises(tg.TracingError, match=r"NumPy twin np\.exp"):
        jit(lambda x: math.exp(x))(1.0)


@pytest.mark.parametrize("fun", [np.floor, np.ceil, np.trunc, np.rint, np.round, np.fix])
def test_rounding_has_a_zero_derivative(fun):
    assert grad(lambda x: np.sum(fun(x * 3.0)))(np.array([0.3, 1.7])).tolist() == [0.0, 0.0]


def test_mod_fmod_floordiv_and_copysign_slopes():
    a, b = 7.3, -2.0
    for fun in (np.mod, np.fmod, lambda a, b: a - (a // b) * b):
        ga, gb = grad(fun, argnums=(0, 1))(a, b)
        assert float(ga) == pytest.approx(1.0)
        assert float(gb) == pytest.approx(central(lambda b, fun=fun: fun(a, b), b), rel=1e-6)
    assert float(grad(lambda a, b: a // b)(a, b)) == 0.0
    assert float(grad(lambda a, b: np.mod(a, b), argnums=1)(a, b)) == pytest.approx(-(a // b))
    for a, b in ((1.5, -2.0), (-1.5, -2.0), (-1.5, 3.0)):
        assert float(grad(np.copysign)(a, b)) == np.sign(a) * np.sign(b)


def test_sinc_is_smooth_at_zero_at_every_order():
    d1 = grad(np.sinc)
    d2 = grad(d1)
    d3 = grad(d2)
    assert float(np.sinc(0.0)) == float(jit(np.sinc)(0.0)) == 1.0
    assert float(d1(0.0)) == 0.0
    assert float(d2(0.0)) == pytest.approx(-(np.pi**2) / 3)
    assert float(d3(0.0)) == pytest.approx(0.0, abs=1e-9)
    assert float(d2(1e-3)) == pytest.approx(float(central(d1, 1e-3)), rel=1e-6)


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric", "wrap"])
def test_pad_modes_match_numpy_with_derivatives(mode):
    x = np.array([1.0, 2.0, 4.0])
    w = np.arange(1.0, 8.0)
    np.testing.assert_array_equal(
        jit(lambda x: np.pad(x, 2, mode=mode))(x), np.pad(x, 2, mode=mode)
    )
    check_grad(lambda x: np.sum(w * np.pad(x, 2, mode=mode) ** 2), x)


def test_a_reflect_pad_wider_than_its_axis_is_refused():
    with pytest.raises(tg.TracingError, match="reflect pad wider than the axis"):
        jit(lambda x: np.pad(x, 5, mode="reflect"))(np.ones(3))
    with pytest.raises(tg.TracingError, match="use constant, edge, reflect, symmetric or wrap"):
        jit(lambda x: np.pad(x, 1, mode="linear_ramp"))(np.ones(3))


def test_cumsum_and_cumprod_match_numpy_to_rounding_and_cumprod_is_exact_at_zeros():
    x = np.random.default_rng(0).normal(size=37)
    np.testing.assert_allclose(jit(np.cumsum)(x), np.cumsum(x), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(jit(np.cumprod)(x), np.cumprod(x), rtol=1e-12)
    z = np.array([2.0, 0.0, 3.0, 0.5, 0.0, 1.5])
    w = np.arange(1.0, 7.0)
    check_grad(lambda z: np.sum(w * np.cumprod(z)), z)


def test_argmax_and_argmin_return_the_first_extremum_or_first_nan():
    for x in (np.array([1.0, 3.0, 3.0, 0.0, 0.0]), np.array([1.0, np.nan, 5.0, np.nan])):
        assert int(jit(np.argmax)(x)) == np.argmax(x)
        assert int(jit(np.argmin)(x)) == np.argmin(x)


_X46 = np.arange(24.0).reshape(4, 6) / 7.0


@pytest.mark.parametrize(
    "index",
    [
        lambda i, j: (i,),
        lambda i, j: (slice(None), i),
        lambda i, j: (slice(1, 3), np.array([0, 5])),
        lambda i, j: (i, j),
    ],
    ids=["x[i]", "x[:, i]", "x[1:3, [0, 5]]", "x[i, j]"],
)
@pytest.mark.parametrize("traced", [False, True], ids=["static", "traced"])
def test_integer_array_gathers_follow_numpy_with_scatter_add_derivatives(index, traced):
    i, j = np.array([3, 0, 3]), np.array([5, 1, 5])
    w = np.arange(1.0, 1.0 + _X46[index(i, j)].size).reshape(_X46[index(i, j)].shape)

    def plain(x, i=i, j=j):
        return np.sum(x[index(i, j)] ** 2 * w)

    if traced:
        got = grad(plain)(_X46, i, j)
    else:
        got = grad(lambda x: plain(x))(_X46)
    np.testing.assert_allclose(got, central(plain, _X46), rtol=1e-6, atol=1e-8)


def test_take_take_along_axis_and_add_at_follow_numpy():
    x = np.arange(12.0).reshape(3, 4)
    i = np.array([[2, 0, 0, 1]])
    np.testing.assert_array_equal(
        jit(lambda x: np.take(x, [2, 2], axis=1))(x), np.take(x, [2, 2], 1)
    )
    np.testing.assert_array_equal(
        jit(lambda x: np.take_along_axis(x, i, axis=0))(x), np.take_along_axis(x, i, axis=0)
    )
    for index in (
        np.array([0, 2, 0]),
        (np.array([0, 2, 0]), np.array([1, 1, 1])),
        (slice(None), np.array([3, 3])),
    ):
        v = np.ones_like(x[index]) * 2.5

        def added(x, v, index=index):
            y = x * 1.0
            np.add.at(y, index, v)
            return y

        expected = x.copy()
        np.add.at(expected, index, v)
        np.testing.assert_array_equal(jit(added)(x, v), expected)


@NUMPY_CPU
def test_writes_through_integer_arrays_keep_the_last_write_and_read_once(backend):
    i = np.array([2, 0, 2])

    def plain(x, v, i):
        y = x * 1.0
        y[i] = v
        y[i, 0] = v * 3.0
        z = x * 2.0
        z[i] += v[:, None]
        return y, z

    x, v = np.arange(12.0).reshape(4, 3), np.array([10.0, 20.0, 30.0])
    for got, want in zip(tg.jit(plain, backend=backend)(x, v, i), plain(x, v, i), strict=True):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(
        tg.jit(lambda x, v: plain(x, v, i), backend=backend)(x, v), plain(x, v, i), strict=True
    ):
        np.testing.assert_array_equal(got, want)


def test_put_along_axis_and_the_gradient_of_writes_reach_the_kept_values():
    x = np.arange(1.0, 13.0).reshape(3, 4) / 5.0
    v = np.array([[0.5, -1.0, 2.0, 0.25]])
    i = np.array([[2, 0, 2, 1]])
    w = np.arange(1.0, 13.0).reshape(3, 4)

    def plain(x, v):
        y = x * 1.0
        np.put_along_axis(y, i, v, axis=0)
        z = x * 1.0
        z[np.array([1, 0, 1])] = v[0, :3, None] * z[2, :]
        return np.sum(w * y**2) + np.sum(w * z**2)

    expected = x.copy()
    np.put_along_axis(expected, i, v, axis=0)
    got = jit(lambda x: (lambda y: (np.put_along_axis(y, i, v, axis=0), y)[1])(x * 1.0))(x)
    np.testing.assert_array_equal(got, expected)
    gx, gv = grad(plain, argnums=(0, 1))(x, v)
    np.testing.assert_allclose(gx, central(lambda x: plain(x, v), x), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gv, central(lambda v: plain(x, v), v), rtol=1e-6, atol=1e-8)


@NUMPY_CPU
def test_an_index_out_of_range_raises_index_error_when_the_program_runs(backend):
    f = tg.jit(lambda x, i: x[i], backend=backend)
    f(np.ones(3), np.array([0, 2]))
    with pytest.raises(IndexError):
        f(np.ones(3), np.array([0, 3]))


def test_a_numpy_array_indexed_by_a_traced_value_works_and_so_does_np_take():
    table = np.arange(6.0) * 1.5  # a closure variable: stood in for (tracing/indexed_arrays.py)
    np.testing.assert_array_equal(jit(lambda i: table[i])(np.array([1, 4])), table[[1, 4]])
    tables = (table,)  # a tuple item cannot be replaced: the error says what to write
    with pytest.raises(tg.TracingError, match="cannot convert a traced value to a NumPy array"):
        jit(lambda i: tables[0][i])(np.array([1, 4]))
    np.testing.assert_array_equal(jit(lambda i: np.take(table, i))(np.array([1, 4])), table[[1, 4]])
    np.testing.assert_array_equal(jit(lambda t, i: t[i])(table, np.array([1, 4])), table[[1, 4]])


def _spd(n, seed=0, batch=()):
    a = np.random.default_rng(seed).normal(size=(*batch, n, n))
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


@pytest.mark.parametrize(
    "fun",
    [
        lambda a: np.linalg.solve(a, np.ones(a.shape[:-1])[..., None])[..., 0],
        np.linalg.inv,
        np.linalg.det,
        lambda a: np.linalg.slogdet(a)[1],
        np.linalg.cholesky,
        lambda a: np.linalg.eigh(a)[0],
        lambda a: np.abs(np.linalg.eigh(a)[1]),
        np.linalg.eigvalsh,
        lambda a: np.linalg.matrix_power(a, 3),
    ],
    ids=["solve", "inv", "det", "slogdet", "cholesky", "eigh", "eigh-vectors", "eigvalsh", "power"],
)
def test_factorisations_are_batched_like_numpy_with_derivatives(fun):
    a = _spd(3, batch=(2,))
    np.testing.assert_allclose(jit(fun)(a), fun(a), rtol=1e-10, atol=1e-12)
    w = np.random.default_rng(1).normal(size=np.shape(fun(a)))
    check_grad(lambda a: np.sum(w * fun(a)), a, rtol=1e-5, atol=1e-7)


def test_the_hessian_of_a_gaussian_process_likelihood():
    t = np.linspace(0.0, 1.0, 5)
    y = np.sin(3.0 * t)

    def nll(theta):
        k = np.exp(theta[0]) * np.exp(-((t[:, None] - t[None, :]) ** 2) / np.exp(theta[1]))
        k = k + 0.1 * np.eye(5)
        return 0.5 * y @ np.linalg.solve(k, y) + 0.5 * np.linalg.slogdet(k)[1]

    theta = np.array([0.2, -1.0])
    g = grad(nll)
    np.testing.assert_allclose(
        tg.hessian(nll, backend="numpy")(theta),
        np.stack([central(lambda th, k=k: g(th)[k], theta) for k in range(2)]),
        rtol=1e-5,
    )


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_cholesky_and_eigh_read_one_triangle_and_give_numpys_eigenvectors(uplo):
    a = _spd(3)
    other = np.triu(np.ones((3, 3)), 1) if uplo == "L" else np.tril(np.ones((3, 3)), -1)
    w = np.random.default_rng(2).normal(size=(3, 3))
    for fun in (
        lambda a: np.linalg.eigh(a, UPLO=uplo)[1],
        lambda a: np.linalg.eigh(a, UPLO=uplo)[0],
    ):
        np.testing.assert_array_equal(jit(fun)(a), fun(a))
        g = grad(lambda a, fun=fun: np.sum(w[: fun(a).shape[0]] * fun(a)))(a)
        assert np.all(g[other == 1] == 0.0)
    chol = jit(np.linalg.cholesky)
    np.testing.assert_allclose(chol(a), np.linalg.cholesky(a), rtol=1e-12)
    g = grad(lambda a: np.sum(w * np.linalg.cholesky(a)))(a)
    if uplo == "L":
        assert np.all(g[other == 1] == 0.0)
        sym = central(lambda s: np.sum(w * np.linalg.cholesky(np.tril(s) + np.tril(s, -1).T)), a)
        np.testing.assert_allclose(g, sym, rtol=1e-5, atol=1e-7)


def test_det_derivative_is_the_cofactor_matrix_also_when_singular():
    a = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])
    cof = np.array(
        [
            [np.linalg.det(np.delete(np.delete(a, i, 0), j, 1)) * (-1) ** (i + j) for j in range(3)]
            for i in range(3)
        ]
    )
    np.testing.assert_allclose(grad(np.linalg.det)(a), cof, atol=1e-10)


def test_a_solve_with_a_cholesky_factor_and_slogdet_of_a_kernel_matrix():
    b = np.array([1.0, -2.0, 0.5])

    def f(x):
        k = x @ x.T + 0.5 * np.eye(3)
        lower = np.linalg.cholesky(k)
        z = np.linalg.solve(lower, b)
        zt = np.linalg.solve(lower.T, z)
        sign, logdet = np.linalg.slogdet(k)
        return np.sum(z**2) + np.sum(zt) + sign * logdet

    x = np.random.default_rng(3).normal(size=(3, 2))
    assert float(jit(f)(x)) == pytest.approx(f(x), rel=1e-12)
    check_grad(f, x, rtol=1e-5)


@pytest.mark.parametrize(
    "fun",
    [
        lambda a: np.linalg.svd(a, full_matrices=False)[1],
        lambda a: np.abs(np.linalg.svd(a, full_matrices=False)[0]),
        np.linalg.svdvals,
        lambda a: np.abs(np.linalg.qr(a)[1]),
        lambda a: np.linalg.lstsq(a, np.arange(4.0), rcond=None)[0],
        lambda a: np.linalg.norm(a, 2),
        lambda a: np.linalg.norm(a, -2),
        lambda a: np.linalg.norm(a, "nuc"),
        np.linalg.pinv,
        np.linalg.cond,
        lambda a: np.linalg.multi_dot([a, a.T, a]),
    ],
    ids=[
        "svd",
        "svd-u",
        "svdvals",
        "qr",
        "lstsq",
        "norm2",
        "norm-2",
        "nuc",
        "pinv",
        "cond",
        "multi_dot",
    ],
)
def test_svd_qr_lstsq_and_what_is_built_on_them_match_numpy_with_derivatives(fun):
    a = np.array([[2.0, 0.3, -0.5], [0.1, 1.5, 0.2], [0.4, -0.3, 0.8], [1.0, 0.2, 0.1]])
    np.testing.assert_allclose(jit(fun)(a), fun(a), rtol=1e-10, atol=1e-12)
    w = np.random.default_rng(4).normal(size=np.shape(fun(a)))
    check_grad(lambda a: np.sum(w * fun(a)), a, rtol=1e-5, atol=1e-7)


def test_matrix_rank_is_an_integer_and_lstsq_rank_is_traced():
    a = np.array([[1.0, 2.0], [2.0, 4.0], [0.0, 0.0]])
    assert int(jit(np.linalg.matrix_rank)(a)) == 1
    x, res, rank, s = jit(lambda a: np.linalg.lstsq(a, np.arange(3.0), rcond=None))(a)
    ex, _, erank, es = np.linalg.lstsq(a, np.arange(3.0), rcond=None)
    np.testing.assert_allclose(x, ex, atol=1e-12)
    np.testing.assert_allclose(s, es, atol=1e-12)
    assert int(rank) == erank == 1 and np.shape(res) == (1,)  # NumPy's is empty here


def test_svd_full_matrices_and_qr_complete_of_a_non_square_matrix_are_refused():
    a = np.ones((3, 2)) + np.eye(3, 2)
    with pytest.raises(tg.TracingError, match="pass full_matrices=False"):
        jit(lambda a: np.linalg.svd(a)[0])(a)
    with pytest.raises(tg.TracingError, match="use mode='reduced'"):
        jit(lambda a: np.linalg.qr(a, mode="complete")[0])(a)


def test_partition_and_argpartition_put_numpys_kth_elements():
    x = np.array([5.0, 1.0, 4.0, 2.0, 3.0, 0.5])
    got = jit(lambda x: np.partition(x, 2))(x)
    assert got[2] == np.partition(x, 2)[2]
    assert sorted(got[:2]) == sorted(np.partition(x, 2)[:2])
    assert x[jit(lambda x: np.argpartition(x, 3))(x)][3] == np.partition(x, 3)[3]


def test_np_array_asarray_full_r_and_c_of_traced_values_are_traced():
    def f(a, b):
        return (
            np.sum(np.array([a, b * 2.0]) ** 2)
            + np.sum(np.asarray([a, 1.0]))
            + np.sum(np.asanyarray([b, b]))
            + np.sum(np.full(3, a) * b)
            + np.sum(np.r_[a, b, 3.0] ** 2)
            + np.sum(np.c_[np.stack([a, b]), np.stack([b, b])] * 2.0)
        )

    ga, gb = grad(f, argnums=(0, 1))(1.5, -0.5)
    assert float(ga) == pytest.approx(central(lambda a: f(a, -0.5), 1.5))
    assert float(gb) == pytest.approx(central(lambda b: f(1.5, b), -0.5))


def test_a_numpy_function_saved_under_another_name_refuses_traced_values():
    from numpy import array

    with pytest.raises(tg.TracingError, match="cannot convert a traced value to a NumPy array"):
        jit(lambda a: array([a, a]))(1.0)


def test_a_list_of_traced_values_reads_as_np_array_reads_it():
    from numpy import sum as np_sum

    def f(a, b, v):
        return (
            np.sum([a, b * b])
            + np.linalg.norm([a, b])
            + np.dot([a, b], v)
            + np_sum([a, 2.0 * b])
            + np.mean([[a, b], [b, b]])
        )

    args = (1.5, -0.5, np.array([2.0, 3.0]))
    assert float(jit(f)(*args)) == pytest.approx(f(*args))
    g = grad(f, argnums=(0, 1))(*args)
    assert float(g[0]) == pytest.approx(central(lambda a: f(a, -0.5, args[2]), 1.5))


def test_a_ufunc_or_c_function_given_only_a_list_of_traced_values_is_refused():
    with pytest.raises(tg.TracingError, match=r"np\.exp\(np\.stack\(\[a, b, \.\.\.\]\)\)"):
        jit(lambda a, b: np.exp([a, b]))(1.0, 2.0)
    with pytest.raises(tg.TracingError, match=r"np\.stack\(\[a, b, \.\.\.\]\)"):
        jit(lambda a, b: np.dot([a, b], [1.0, 2.0]))(1.0, 2.0)


@pytest.mark.parametrize(
    "name",
    [
        "expit",
        "logit",
        "erf",
        "erfc",
        "ndtr",
        "log_ndtr",
        "xlogy",
        "xlog1py",
        "gammaln",
        "digamma",
        "psi",
    ],
)
def test_scipy_special_functions_work_on_traced_values(name):
    special = pytest.importorskip("scipy.special")
    fun = getattr(special, name)
    x = np.array([0.2, 0.45, 0.7])
    call = (lambda x: fun(x, x + 1.0)) if name.startswith("xlog") else fun
    np.testing.assert_allclose(jit(call)(x), call(x), rtol=1e-13, atol=1e-300)
    check_grad(lambda x: np.sum(call(x)), x, rtol=1e-5)


def test_scipy_log_ndtr_is_accurate_far_in_the_lower_tail():
    special = pytest.importorskip("scipy.special")
    x = np.array([-40.0, -20.0])
    np.testing.assert_allclose(jit(special.log_ndtr)(x), special.log_ndtr(x), rtol=1e-12)


def test_scipy_logsumexp_softmax_and_log_softmax_are_redirected_also_when_imported():
    special = pytest.importorskip("scipy.special")
    from scipy.special import logsumexp

    x = np.array([[0.5, -1.0, 2.0], [3.0, 0.1, -0.2]])
    b = np.array([1.0, 2.0, 0.5])
    cases = [
        lambda x: logsumexp(x, axis=1, b=b, keepdims=True),
        lambda x: special.logsumexp(x - 1.0, return_sign=True)[0],
        lambda x: special.softmax(x, axis=0),
        lambda x: special.log_softmax(x, axis=1),
    ]
    for fun in cases:
        np.testing.assert_allclose(jit(fun)(x), fun(x), rtol=1e-13)
        w = np.random.default_rng(5).normal(size=np.shape(fun(x)))
        check_grad(lambda x, w=w, fun=fun: np.sum(w * fun(x)), x)
    second = grad(lambda x: np.sum(grad(lambda x: logsumexp(x))(x) ** 2))(x[0])
    np.testing.assert_allclose(
        second, central(lambda x: np.sum(special.softmax(x) ** 2), x[0]), rtol=1e-6, atol=1e-9
    )


def test_sort_sends_each_derivative_to_the_element_it_came_from():
    x = np.array([3.0, -1.0, 2.0, 0.5])
    w = np.arange(1.0, 5.0)
    np.testing.assert_array_equal(jit(np.sort)(x), np.sort(x))
    np.testing.assert_array_equal(
        grad(lambda x: np.sum(w * np.sort(x)))(x), w[np.argsort(np.argsort(x))]
    )


@pytest.mark.parametrize("method", ["linear", "lower", "higher", "nearest", "midpoint"])
def test_median_quantile_and_percentile_follow_numpy(method):
    x = np.array([[3.0, -1.0, 2.0, 0.5, 7.0], [1.0, 2.0, np.nan, 0.0, 1.0]])
    cases = [
        lambda x: np.quantile(x, 0.3, axis=1, method=method),
        lambda x: np.percentile(x, [10.0, 70.0], axis=1, method=method),
        lambda x: np.median(x, axis=1),
    ]
    for fun in cases:
        got, want = jit(fun)(x), fun(x)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    check_grad(lambda r: np.sum(np.quantile(r, 0.3, method=method) ** 2), x[0])


def test_midpoint_at_a_whole_virtual_index_is_numpys():
    # where q (n - 1) is a whole number k, NumPy returns the k-th value, not a mean with the next
    x = np.array([-1.0, 0.5, 2.0, 3.0, 7.0])
    got = jit(lambda x: np.quantile(x, 0.75, method="midpoint"))(x)
    assert float(got) == np.quantile(x, 0.75, method="midpoint") == 3.0
    q = np.array([0.0, 0.1, 0.25, 0.5, 0.6, 0.75, 1.0])
    for backend in ("numpy", "cpu"):
        fun = tg.jit(lambda x: np.quantile(x, q, method="midpoint"), backend=backend)
        np.testing.assert_array_equal(fun(x), np.quantile(x, q, method="midpoint"))
    check_grad(lambda r: np.sum(np.quantile(r, q, method="midpoint") ** 2), x)


def test_ufunc_out_and_where_arguments_are_missing():
    with pytest.raises(tg.TracingError, match=r"out=\.\.\.\) is not supported"):
        jit(lambda x: np.exp(x, out=np.empty(2)))(np.ones(2))
    with pytest.raises(tg.TracingError, match=r"where=\.\.\.\) is not supported"):
        jit(lambda x: np.exp(x, where=x > 0))(np.ones(2))


def test_einsum_forms_match_numpy_with_derivatives():
    rng = np.random.default_rng(6)
    a, b, c = rng.normal(size=(2, 3, 3)), rng.normal(size=(3, 4)), rng.normal(size=(4,))
    cases = [
        lambda a: np.einsum("bij,jk,k->bi", a, b, c),
        lambda a: np.einsum(a, [0, 1, 2], b, [2, 3], [0, 1, 3]),
        lambda a: np.einsum("...ii->...i", a),
        lambda a: np.einsum("bii", a),
    ]
    for fun in cases:
        np.testing.assert_allclose(jit(fun)(a), fun(a), rtol=1e-12)
        w = rng.normal(size=np.shape(fun(a)))
        check_grad(lambda a, w=w, fun=fun: np.sum(w * fun(a)), a)


def test_dtypes_follow_numpy():
    ints = np.array([1, 2, 4])
    got = jit(np.reciprocal)(ints)
    assert got.dtype == np.reciprocal(ints).dtype and got.tolist() == np.reciprocal(ints).tolist()
    x, y = np.array([1.0, np.nan, 3.0]), np.array([np.nan, 2.0, 1.0])
    np.testing.assert_array_equal(jit(np.fmax)(x, y), np.fmax(x, y))
    small = np.array([1, -5, 127], dtype=np.int8)
    assert jit(lambda s: s < 300)(small).tolist() == [True, True, True]
    assert jit(lambda s: s == 300)(small).tolist() == [False, False, False]
    with pytest.raises(ValueError):
        jit(lambda x: x @ 2.0)(np.ones((2, 2)))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.bool_])
def test_a_float_function_of_small_integers_gives_float64(dtype):
    got = jit(np.sqrt)(np.array([1, 0, 1], dtype=dtype))
    assert got.dtype == np.float64 and np.sqrt(np.array([1, 0, 1], dtype=dtype)).dtype != np.float64


def test_layout_orders_are_refused_for_two_long_axes_only():
    x = np.arange(6.0).reshape(2, 3)
    for fun in (
        lambda x: x.reshape(3, 2, order="A"),
        lambda x: np.ravel(x, order="K"),
        lambda x: x.flatten(order="A"),
    ):
        with pytest.raises(tg.TracingError, match="write order='C'"):
            jit(fun)(x)
    np.testing.assert_array_equal(jit(lambda x: x[:1].reshape(3, order="A"))(x), x[0])
    np.testing.assert_array_equal(jit(lambda x: x.ravel(order="F"))(x), x.ravel(order="F"))


# ----------------------------------------------------------------------------------------------
# The derivatives of prod, at zeros too


def test_the_third_derivative_of_prod_is_exact_at_zeros():
    x = np.array([2.0, 0.0, 3.0, 0.0])
    h = grad(lambda x: tg.hessian(np.prod, backend="numpy")(x)[0, 2])(x)
    np.testing.assert_array_equal(h, [0.0, 0.0, 0.0, 0.0])
    h = grad(lambda x: tg.hessian(np.prod, backend="numpy")(x)[0, 1])(x)
    np.testing.assert_array_equal(h, [0.0, 0.0, 0.0, 3.0])


# ----------------------------------------------------------------------------------------------
# maximum, minimum and ties


def test_min_ties_split_and_max_plus_min_is_exact():
    assert grad(np.min)(np.array([1.0, 3.0, 1.0])).tolist() == [0.5, 0.0, 0.5]
    ga, gb = grad(lambda a, b: np.maximum(a, b) + np.minimum(a, b), argnums=(0, 1))(2.0, 2.0)
    assert float(ga) == float(gb) == 1.0


def test_abs_has_derivative_zero_at_zero_and_where_relu_too():
    assert float(grad(np.abs)(0.0)) == 0.0
    assert float(grad(lambda x: np.where(x > 0, x, 0.0))(0.0)) == 0.0


def test_std_of_one_element_has_zero_derivatives_at_every_order_and_var_stays_smooth():
    h = tg.hessian(np.std, backend="numpy")
    assert h(np.array([3.5])).tolist() == [[0.0]]
    assert np.all(h(np.array([2.0, 2.0])) == 0.0)
    x = np.array([2.0, 2.0, 2.0])
    np.testing.assert_allclose(tg.hessian(np.var, backend="numpy")(x), 2 * (np.eye(3) - 1 / 3) / 3)
    check_grad(np.var, np.array([1.0, 2.5, 4.0]))


def test_norm_at_zero_has_zero_derivatives():
    assert grad(np.linalg.norm)(np.zeros(3)).tolist() == [0.0, 0.0, 0.0]
    assert np.all(tg.hessian(np.linalg.norm, backend="numpy")(np.zeros((2, 2))) == 0.0)


# ----------------------------------------------------------------------------------------------
# softplus and log-sigmoid, written the stable way


@pytest.mark.parametrize(
    "fun,second",
    [
        (lambda z: np.maximum(z, 0) + np.log(1 + np.exp(-np.abs(z))), 0.25),
        (lambda z: np.log1p(np.exp(-np.abs(-z))) + np.maximum(0, z), 0.25),
        (lambda z: np.minimum(z, 0) - np.log1p(np.exp(-np.abs(z))), -0.25),
        (lambda z: np.minimum(0, z) - np.log(1 + np.exp(-np.abs(-z))), -0.25),
        (lambda z: np.logaddexp(z, 0.0), 0.25),
    ],
    ids=["softplus-log", "softplus-swapped", "log-sigmoid", "log-sigmoid-log", "logaddexp"],
)
def test_stable_softplus_spellings_have_the_smooth_second_derivative(fun, second):
    assert float(tg.hessian(fun, backend="numpy")(0.0)) == pytest.approx(second)
    for z in (-2.0, 0.7):
        assert float(grad(fun)(z)) == pytest.approx(central(fun, z), rel=1e-7)


def test_logaddexp_is_smooth_in_general():
    f = lambda a: np.logaddexp(a, 2.0 * a - 1.0)
    a = 1.0  # the two terms are equal here
    expected = central(grad(f), a)
    assert float(grad(grad(f))(a)) == pytest.approx(float(expected), rel=1e-6)


# ----------------------------------------------------------------------------------------------
# Other limits


def test_keyword_arguments_are_traced_not_static_and_not_differentiated():
    def scaled(x, scale=1.0):
        return x * x * scale

    assert float(grad(scaled)(2.0, scale=3.0)) == 12.0

    def steered(x, mode="square"):
        return x * x if mode == "square" else x

    with pytest.raises(TypeError, match=r"functools\.partial"):
        grad(steered)(2.0, mode="linear")
    assert float(grad(functools.partial(steered, mode="linear"))(2.0)) == 1.0
    assert float(grad(steered, static_argnums=1)(2.0, "linear")) == 1.0


@pytest.mark.parametrize(
    "value",
    [np.int64(3), np.array([3, 4]), True, np.array([True, False])],
    ids=["int64", "int-array", "bool", "bool-array"],
)
def test_integer_and_boolean_arguments_cannot_be_in_argnums(value):
    with pytest.raises(TypeError, match="only float arrays have derivatives"):
        grad(lambda x, n: np.sum(x * n), argnums=1)(2.0, value)


def test_integer_and_boolean_arguments_are_fine_as_data_and_a_python_int_is_a_float():
    f = lambda x, n, m: np.sum(np.where(m & (n > 1), x * n, 0.0))
    g = grad(f)(np.ones(3), np.array([1, 2, 3]), np.array([True, True, False]))
    assert g.tolist() == [0.0, 2.0, 0.0]
    assert float(grad(lambda x, n: x * n, argnums=1)(2.0, 3)) == 2.0


def test_side_effects_happen_once_at_trace_time_and_see_tracers():
    seen = []

    def f(x):
        seen.append(x)
        return x * 2.0

    j = jit(f)
    j(1.0)
    j(2.0)
    assert len(seen) == 1 and not isinstance(seen[0], (float, np.ndarray))


_RNG = np.random.default_rng(0)


@NUMPY_CPU
def test_random_numbers_drawn_inside_are_numpys_on_every_call(backend):
    def draw(x):
        return x + np.random.normal(size=2) * _RNG.normal(size=2)

    global _RNG
    state = np.random.get_state()
    try:
        np.random.seed(3)
        _RNG = np.random.default_rng(3)
        f = tg.jit(draw, backend=backend)
        got = [f(np.ones(2)) for _ in range(3)]
        np.random.seed(3)
        _RNG = np.random.default_rng(3)
        want = [draw(np.ones(2)) for _ in range(3)]
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
        # an unused draw still draws: the generator is where NumPy leaves it
        before = _RNG.bit_generator.state  # a new dict: a snapshot
        tg.jit(lambda x: (_RNG.normal(size=2), x)[1], backend=backend)(np.ones(2))
        plain = np.random.default_rng()
        plain.bit_generator.state = before
        plain.normal(size=2)
        assert repr(_RNG.bit_generator.state) == repr(plain.bit_generator.state)
    finally:
        np.random.set_state(state)


def test_a_draw_is_a_constant_for_derivatives():
    rng = np.random.default_rng(4)

    def loss(theta):
        return np.sum((theta[:2] + np.exp(theta[2:]) * rng.normal(size=2)) ** 2)

    theta = np.array([0.5, -1.0, 0.2, -0.3])
    got = tg.grad(loss, backend="cpu")(theta)

    def fixed(t):
        nonlocal rng
        rng = np.random.default_rng(4)
        return loss(t)

    np.testing.assert_allclose(got, central(fixed, theta), rtol=1e-6, atol=1e-8)


def test_normal_with_traced_parameters_and_the_refusals():
    rng = np.random.default_rng(5)
    mu = np.array([0.0, 2.0])
    got = tg.jit(lambda m: rng.normal(m, 3.0), backend="numpy")(mu)
    np.testing.assert_allclose(got, np.random.default_rng(5).normal(mu, 3.0), rtol=1e-15)
    with pytest.raises(tg.TracingError, match=r"vmap.*size=\(batch"):
        tg.vmap(lambda x: x + rng.normal(size=2), backend="numpy")(np.ones((3, 2)))
    with pytest.raises(tg.TracingError, match="checkpoint"):
        tg.grad(lambda x: np.sum(tg.checkpoint(lambda y: y * rng.normal(size=2))(x)))(mu)
    with pytest.raises(tg.TracingError, match=r"np.where"):
        tg.jit(lambda x: x + rng.normal(size=2) if x.sum() > 0 else x, backend="numpy")(mu)
    with pytest.raises(tg.TracingError, match=r"traced parameter"):
        tg.jit(lambda x: rng.gamma(x), backend="numpy")(mu)
    with pytest.raises(tg.TracingError, match=r"in place.*permutation"):
        tg.jit(lambda x: rng.shuffle(x), backend="numpy")(mu)
    with pytest.raises(tg.TracingError, match=r"does not record"):
        tg.jit(lambda x: x + rng.bit_generator.random_raw(2), backend="numpy")(mu)
    a = rng.normal(size=2)
    held = (rng,)
    with pytest.raises(tg.TracingError, match=r"does not record"):
        tg.jit(lambda x: x + held[0].normal(size=2), backend="numpy")(mu)
    assert np.all(a != 0)


def test_a_program_that_draws_is_not_persisted(monkeypatch, tmp_path):
    monkeypatch.setenv("TRACEGRAD_PROGRAM_CACHE", "1")
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", str(tmp_path))
    tg.clear_programs()
    try:
        rng = np.random.default_rng(6)
        tg.jit(lambda x: x + rng.normal(size=2), backend="numpy")(np.ones(2))
        assert not list(tmp_path.rglob("*.tgp"))
    finally:
        tg.clear_programs()


def test_a_generator_seeded_by_a_static_argument_is_fine():
    f = tg.jit(
        lambda x, seed: x + np.random.default_rng(seed).normal(size=2),
        static_argnums=1,
        backend="numpy",
    )
    x = np.zeros(2)
    np.testing.assert_array_equal(f(x, 1), np.random.default_rng(1).normal(size=2))
    np.testing.assert_array_equal(f(x, 2), np.random.default_rng(2).normal(size=2))


def test_an_unseeded_generator_inside_the_function_draws_new_numbers_on_every_call():
    f = jit(lambda x: x + np.random.default_rng().normal(size=2))
    x = np.zeros(2)
    assert not np.array_equal(f(x), f(x))
    assert (
        np.ndim(tg.jit(lambda x: x + np.random.default_rng().normal(), backend="numpy")(1.0)) == 0
    )


@NUMPY_CPU
def test_in_place_updates_work_as_in_numpy(backend):
    def f(x, a, b):
        y = x * 1.0
        alias = y
        y[0] = a
        y[1:, ::2] += b
        y *= 2.0
        y[np.array([True, False, True])] = 0.5
        y[y[:, 0] > 1.0] = a * 3.0
        y[np.abs(y) > 3.0] *= 3.0
        return alias

    x = np.arange(1.0, 10.0).reshape(3, 3) / 4.0
    a, b = np.array([0.5, -1.0, 2.0]), np.array([1.5, 0.25])
    want = f(x.copy(), a, b)
    np.testing.assert_array_equal(tg.jit(f, backend=backend)(x, a, b), want)
    gx = tg.grad(lambda x: np.sum(f(x, a, b) ** 2), backend=backend)(x)
    np.testing.assert_allclose(gx, central(lambda x: np.sum(f(x, a, b) ** 2), x), atol=1e-8)


def test_views_see_later_writes_and_copies_do_not():
    def f(x):
        y = x * 1.0
        s, r, t, c, fl = y[1:], y.reshape(6), y.T, y.copy(), y.flatten()
        y[1, 1] = 100.0
        y[2:][0, 0] += 7.0  # a write into a slice of y writes into y
        return s, r, t, c, fl, y

    x = np.arange(6.0).reshape(3, 2)
    for got, want in zip(jit(f)(x), f(x.copy()), strict=True):
        np.testing.assert_array_equal(got, want)


def test_the_callers_arrays_are_never_modified():
    x = np.arange(3.0)

    def f(x):
        x[0] = 10.0
        x *= 2.0
        return x

    np.testing.assert_array_equal(jit(f)(x), [20.0, 2.0, 4.0])
    np.testing.assert_array_equal(x, [0.0, 1.0, 2.0])


@NUMPY_CPU
def test_writes_through_integer_arrays_and_static_masks_with_arrays_of_values_work(backend):
    def f(x, v):
        y = x * 1.0
        y[[0, 2]] = v
        y[np.array([False, True, False, True, False])] = v * 2.0
        return y

    x, v = np.arange(1.0, 6.0), np.array([10.0, 20.0])
    np.testing.assert_array_equal(tg.jit(f, backend=backend)(x, v), f(x.copy(), v))
    loss = lambda x, v: np.sum(f(x, v) ** 2)
    gx, gv = tg.grad(loss, argnums=(0, 1), backend=backend)(x, v)
    np.testing.assert_allclose(gx, central(lambda x: loss(x, v), x), atol=1e-8)
    np.testing.assert_allclose(gv, central(lambda v: loss(x, v), v))


def test_a_traced_mask_takes_a_scalar_or_a_value_per_row_and_not_an_array_of_values():
    def per_row(x):
        y = x * 1.0
        y[y[:, 0] > 2.0] = np.array([7.0, 8.0])
        return y

    x = np.arange(1.0, 7.0).reshape(3, 2)
    np.testing.assert_array_equal(jit(per_row)(x), per_row(x.copy()))

    def values(x):
        y = x * 1.0
        y[y > 2.0] = x[:3] * 0.0 + 7.0
        return y

    with pytest.raises(
        tg.TracingError, match="the number of selected elements depends on the mask"
    ):
        jit(values)(np.arange(6.0))

    def scaled(x):
        y = x * 1.0
        y[y[:, 0] > 2.0] *= np.array([2.0, 3.0])
        return y

    with pytest.raises(tg.TracingError, match="needs one number as the value"):
        jit(scaled)(x)


@pytest.mark.parametrize(
    "view",
    [
        lambda y: y.reshape(3, 2),
        lambda y: y.T,
        lambda y: np.flip(y),
        lambda y: np.rot90(y),
        lambda y: np.split(y, 2)[0],
        lambda y: np.swapaxes(y, 0, 1)[::-1],
        lambda y: np.ravel(y),
        lambda y: np.moveaxis(y[None], 0, 2),
    ],
    ids=["reshape", "transpose", "flip", "rot90", "split", "swapaxes slice", "ravel", "moveaxis"],
)
def test_writing_into_a_reshaped_transposed_flipped_or_split_view_writes_through(view, backend):
    """As in NumPy: the write lands on the elements of the array the view shows, and every name
    bound to the array sees it; derivatives flow through the write."""

    def f(x):
        y = x.copy()  # C order: its reshape is a view in NumPy too
        v = view(y)
        v[(0,) * v.ndim] = 9.0
        v *= 2.0
        return y, v

    x = np.arange(6.0).reshape(2, 3)
    for got, want in zip(tg.jit(f, backend=backend)(x), f(x), strict=True):
        np.testing.assert_array_equal(got, want)
    g = tg.grad(lambda x: np.sum(f(x)[0] * np.arange(6.0).reshape(2, 3)), backend=backend)(x)
    h = 1e-6
    fd = [
        (
            np.sum(f(x + h * e)[0] * np.arange(6.0).reshape(2, 3))
            - np.sum(f(x - h * e)[0] * np.arange(6.0).reshape(2, 3))
        )
        / (2 * h)
        for e in np.eye(6).reshape(6, 2, 3)
    ]
    np.testing.assert_allclose(g, np.reshape(fd, (2, 3)), rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize(
    "view",
    [
        lambda y: np.broadcast_to(y, (2, 2, 3)),
        lambda y: np.diagonal(y),
        lambda y: np.reshape(y.T, (6,)),
        lambda y: np.real(y + 0j),
        lambda y: (y * 2.0).reshape(6),
    ],
    ids=["broadcast", "diagonal", "reshape of a view", "real part", "reshape of a result"],
)
def test_writing_into_a_view_numpy_makes_read_only_or_may_copy_is_refused(view):
    """broadcast_to and diagonal are read-only in NumPy; a reshape of a transposed array is a
    copy in NumPy (its strides allow no view), and so is one of an elementwise result of a
    transposed argument (NumPy keeps the layout): tracing cannot tell which."""

    def f(x):
        y = x * 1.0
        v = view(y)
        v[...] = 9.0
        return y

    with pytest.raises(tg.TracingError, match="writing into this view of a traced array"):
        jit(f)(np.arange(6.0).reshape(2, 3))


def test_a_reshape_of_a_fresh_vector_is_written_through():
    """A vector computed inside the function is contiguous in NumPy, so its reshape is a view
    (as in autograd's fluidsim example: a reshaped result of advect written with -=)."""

    def f(x):
        flat = x.ravel() * 2.0
        v = np.reshape(flat, (2, 3))
        v -= 1.0
        return v, flat

    x = np.arange(6.0).reshape(2, 3)
    for got, want in zip(jit(f)(x), f(x.copy()), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_reshaped_or_flipped_view_sees_later_writes():
    def f(x):
        y = x * 1.0
        r, fl, parts = y.reshape(3, 2), np.flip(y), np.split(y, 2)
        y[0, 0] = 50.0
        return r, fl, parts[0]

    x = np.arange(6.0).reshape(2, 3)
    for got, want in zip(jit(f)(x), f(x.copy()), strict=True):
        np.testing.assert_array_equal(got, want)


def test_writing_into_an_enclosing_functions_array_from_a_transformed_function_is_refused():
    def f(x):
        y = x * 1.0

        def inner(z):
            y[0] = z
            return np.sum(y)

        return tg.grad(inner)(x[1]) * y

    with pytest.raises(tg.TracingError, match="belongs to an enclosing traced function"):
        jit(f)(np.arange(3.0))


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.zeros(4),
        lambda: np.ones(4),
        lambda: np.empty(4),
        lambda: np.full(4, 2.0),
        lambda: np.zeros_like(np.ones(4)),
        lambda: np.ones_like(np.ones(4)),
        lambda: np.empty_like(np.ones(4)),
        lambda: np.full_like(np.ones(4), 2.0),
        lambda: np.eye(4),
        lambda: np.identity(4),
        lambda: np.arange(4.0),
        lambda: np.linspace(0.0, 1.0, 4),
        lambda: np.copy(np.ones(4)),
        lambda: np.zeros(4) + 1.0,
    ],
    ids=[
        "zeros",
        "ones",
        "empty",
        "full",
        "zeros_like",
        "ones_like",
        "empty_like",
        "full_like",
        "eye",
        "identity",
        "arange",
        "linspace",
        "copy",
        "computed",
    ],
)
def test_an_array_made_inside_the_function_can_hold_a_traced_value(make):
    def f(a, b, v):
        y = make()
        y[0] = a
        y[1:] = b * 2.0
        y[np.array([1, 3])] += v
        y[np.array([False, True, False, False])] = 0.0
        y += 1.0
        return np.sum(y**2)

    a, b, v = 0.5, np.array([1.0, -2.0, 3.0]), np.array([0.25, 4.0])
    if make().ndim == 2:
        b, v = np.ones((3, 4)) * 1.5, v[:, None]
    assert float(jit(f)(a, b, v)) == pytest.approx(f(a, b, v))
    assert float(grad(f)(a, b, v)) == pytest.approx(float(central(lambda a: f(a, b, v), a)))


def test_an_array_made_inside_is_an_ordinary_array_until_a_traced_value_is_written():
    def f(a):
        y = np.zeros(3)
        if y[0] == 0.0:
            y[1] = 2.0
        k = int(y[1])
        m = y > 0.5
        y[0] = a
        return y * k, np.where(m, a, 0.0)

    for got, want in zip(jit(f)(3.0), f(3.0), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_view_taken_before_the_write_is_refused():
    def stale(a):
        y = np.zeros(4)
        row = y[1:]
        y[0] = a
        return row * 1.0

    with pytest.raises(tg.TracingError, match="Take the view after the write"):
        jit(stale)(3.0)

    def written(a):
        y = np.zeros(4)
        r = np.reshape(y, (2, 2))
        r[0, 0] = a
        return y

    with pytest.raises(tg.TracingError, match="Write into the array itself"):
        jit(written)(3.0)


_OUTSIDE = np.zeros(3)


def test_an_array_made_outside_cannot_hold_a_traced_value():
    def f(a):
        _OUTSIDE[0] = a
        return _OUTSIDE * 1.0

    with pytest.raises(tg.TracingError, match=r"Make the array inside the function.*np\.copy\(a\)"):
        jit(f)(3.0)


def test_an_array_numpy_computes_from_an_outside_one_cannot_hold_a_traced_value():
    def scalar(v):
        y = _OUTSIDE * 1.0
        y[0] = v[0]
        return y

    def values(v):
        y = _OUTSIDE * 1.0
        y[1:3] = v
        return y

    def listed(v):
        y = _OUTSIDE * 1.0
        y[[0, 2]] = v
        return y

    def into_the_global(v):
        _OUTSIDE[1:3] = v
        return v

    lines = {scalar: "y[0] = v[0]", values: "y[1:3] = v", listed: "y[[0, 2]] = v"}
    lines[into_the_global] = "_OUTSIDE[1:3] = v"
    for f, line in lines.items():  # every form: the same message, at the user's line
        with pytest.raises(tg.TracingError, match=r"(?s)computed by NumPy.*np\.copy\(a\)") as e:
            jit(f)(np.ones(2))
        assert line in str(e.value)
    np.testing.assert_array_equal(_OUTSIDE, np.zeros(3))  # never written


def test_a_traced_integer_that_sets_a_shape_is_answered_per_value():
    f = tg.jit(lambda x, n: np.sum(x[:n]) + np.zeros(n).size, backend="numpy")
    x = np.arange(6.0)
    assert f(x, np.int64(3)) == 6.0 and f(x, np.int64(4)) == 10.0 and f.trace_count == 2
