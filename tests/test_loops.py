"""tg.scan, tg.fori_loop, tg.while_loop and tg.cond: values against plain Python loops,
derivatives (first to third order) against finite differences, on every backend, in float64 and
float32, with pytree carries; composition with vmap, jvp and linearize; the errors they give."""

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.transforms import scan

TOL = {np.float64: 1e-9, np.float32: 2e-4}


@pytest.fixture(params=[np.float64, np.float32], ids=["f64", "f32"])
def dtype(request):
    return request.param


def fd_grad(f, x, eps=1e-6):
    """Central differences of a scalar function of one float64 array."""
    x = np.asarray(x, np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        g[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


def close(a, b, tol):
    np.testing.assert_allclose(
        np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=tol, atol=tol
    )


# ----------------------------------------------------------------------------------------------
# scan with a pytree carry and stacked outputs


def scan_model(x, w):
    """A small RNN: dict carry, xs rows, stacked ys."""

    def step(carry, xt):
        h = np.tanh(carry["h"] * w + xt)
        s = carry["s"] + (h**2).sum()
        return {"h": h, "s": s}, np.sin(h)

    init = {"h": x, "s": np.zeros((), x.dtype)}
    xs = np.linspace(-0.5, 0.5, 12).reshape(4, 3).astype(x.dtype)
    carry, ys = tg.scan(step, init, xs)
    return carry["s"] + (carry["h"] * ys.sum(axis=0)).sum()


def scan_model_python(x, w):
    h, s, ys = x, 0.0, []
    for xt in np.linspace(-0.5, 0.5, 12).reshape(4, 3):
        h = np.tanh(h * w + xt)
        s = s + (h**2).sum()
        ys.append(np.sin(h))
    return s + (h * np.sum(ys, axis=0)).sum()


def test_scan_value_gradient_hessian(backend, dtype):
    x = np.array([0.3, -0.2, 0.5], dtype)
    w = dtype(0.8)
    value = tg.jit(scan_model, backend=backend)(x, w)
    assert value.dtype == dtype
    close(value, scan_model_python(x.astype(np.float64), 0.8), TOL[dtype])
    gx, gw = tg.grad(scan_model, argnums=(0, 1), backend=backend)(x, w)
    assert gx.dtype == dtype
    x64 = x.astype(np.float64)
    close(
        gx, fd_grad(lambda z: scan_model_python(z, 0.8), x64), 1e-6 if dtype == np.float64 else 2e-4
    )
    close(
        gw,
        fd_grad(lambda v: scan_model_python(x64, v), np.float64(0.8)),
        1e-6 if dtype == np.float64 else 2e-4,
    )
    if dtype == np.float64:
        h = tg.hessian(scan_model, backend=backend)(x, w)
        g = tg.grad(scan_model, backend="numpy")
        ref = np.stack([fd_grad(lambda z, i=i: g(z, w)[i], x) for i in range(3)])
        close(h, ref, 1e-5)


def test_scan_third_derivative(backend):
    def f(a):
        def step(c, _):
            return np.sin(c * a) + 0.5 * c, None

        c, _ = tg.scan(step, a, None, length=5)
        return c

    d3 = tg.grad(tg.grad(tg.grad(f)), backend=backend)(0.7)
    d2 = tg.grad(tg.grad(f), backend="numpy")
    close(d3, fd_grad(lambda a: d2(float(a)), np.float64(0.7), eps=1e-5), 1e-5)


def test_scan_reverse_and_ys_order(backend):
    def f(xs):
        return tg.scan(lambda c, x: (c * 0.5 + x, c + x), 0.0, xs, reverse=True)

    xs = np.array([1.0, 2.0, 3.0])
    carry, ys = tg.jit(f, backend=backend)(xs)
    c, expected = 0.0, [None] * 3
    for t in (2, 1, 0):
        expected[t] = c + xs[t]
        c = c * 0.5 + xs[t]
    close(carry, c, 1e-12)
    close(ys, expected, 1e-12)
    g = tg.grad(lambda xs: f(xs)[1].sum() * f(xs)[0], backend=backend)(xs)
    close(g, fd_grad(lambda z: _python_reverse(z)[1].sum() * _python_reverse(z)[0], xs), 1e-6)


def _python_reverse(xs):
    c, ys = 0.0, [None] * len(xs)
    for t in reversed(range(len(xs))):
        ys[t] = c + xs[t]
        c = c * 0.5 + xs[t]
    return c, np.array(ys)


def test_scan_outside_a_trace_is_a_python_loop():
    carry, ys = tg.scan(lambda c, x: (c + x, c * x), 1.0, np.arange(4.0))
    assert carry == 7.0
    np.testing.assert_array_equal(ys, [0.0, 1.0, 4.0, 12.0])  # c: 1, 1, 2, 4
    assert tg.fori_loop(0, 4, lambda i, v: v + i, 0) == 6
    assert tg.while_loop(lambda v: v < 10, lambda v: v * 2, 1) == 16
    assert tg.cond(True, lambda a: a + 1, lambda a: a - 1, 5) == 6


# ----------------------------------------------------------------------------------------------
# fori_loop


def leapfrog(q, p, k, steps, dt=0.05):
    def force(q):
        return -k * q - 0.1 * q**3

    def step(i, state):
        q, p = state
        p = p + 0.5 * dt * force(q)
        q = q + dt * p
        p = p + 0.5 * dt * force(q)
        return q, p

    q, p = tg.fori_loop(0, steps, step, (q, p))
    return (0.5 * p**2 + 0.5 * k * q**2).sum()


def test_fori_loop_leapfrog_gradient(backend, dtype):
    q = np.array([0.5, -0.3], dtype)
    p = np.array([0.1, 0.2], dtype)
    k = dtype(1.5)
    gq, gk = tg.grad(leapfrog, argnums=(0, 2), backend=backend)(q, p, k, 30)
    assert gq.dtype == dtype
    tol = 1e-6 if dtype == np.float64 else 5e-3
    close(
        gq, fd_grad(lambda z: leapfrog(z, p.astype(np.float64), 1.5, 30), q.astype(np.float64)), tol
    )
    close(
        gk,
        fd_grad(
            lambda v: leapfrog(q.astype(np.float64), p.astype(np.float64), v, 30), np.float64(1.5)
        ),
        tol,
    )


def test_fori_loop_uses_the_index(backend):
    def f(x):
        return tg.fori_loop(2, 6, lambda i, c: c * 0.9 + np.sin(c) * i, x).sum()

    def python(x):
        for i in range(2, 6):
            x = x * 0.9 + np.sin(x) * i
        return x.sum()

    x = np.array([0.1, 0.4])
    close(tg.jit(f, backend=backend)(x), python(x), 1e-12)
    close(tg.grad(f, backend=backend)(x), fd_grad(python, x), 1e-6)


def test_fori_loop_compiles_once_whatever_the_trip_count():
    short = tg.make_kernels(lambda q, p: leapfrog(q, p, 1.5, 10))(np.ones(3), np.ones(3))
    long = tg.make_kernels(lambda q, p: leapfrog(q, p, 1.5, 10_000))(np.ones(3), np.ones(3))
    assert len(long) == len(short)


# ----------------------------------------------------------------------------------------------
# while_loop


def newton_sqrt(a):
    """sqrt(a) by Newton's iteration until converged: a data-dependent trip count."""

    def cond(state):
        x, prev = state
        return np.abs(x - prev) > 1e-12

    def body(state):
        x, _ = state
        return 0.5 * (x + a / x), x

    x, _ = tg.while_loop(cond, body, (a, a + 1.0))
    return x


def test_while_loop_value_gradient_hessian(backend):
    a = 2.7
    close(tg.jit(newton_sqrt, backend=backend)(a), np.sqrt(a), 1e-12)
    close(tg.grad(newton_sqrt, backend=backend)(a), 0.5 / np.sqrt(a), 1e-9)
    close(tg.hessian(newton_sqrt, backend=backend)(a), -0.25 * a**-1.5, 1e-8)


def test_while_loop_third_derivative_and_arrays(backend):
    def f(x):
        y = tg.while_loop(lambda c: c.sum() < 20.0, lambda c: c * 1.3 + np.sin(c), x)
        return (y**2).sum()

    def python(x):
        while x.sum() < 20.0:
            x = x * 1.3 + np.sin(x)
        return (x**2).sum()

    x = np.array([0.5, 1.0, 1.5])
    close(tg.jit(f, backend=backend)(x), python(x), 1e-12)
    close(tg.grad(f, backend=backend)(x), fd_grad(python, x), 1e-5)
    d3 = tg.grad(lambda s: tg.grad(tg.grad(lambda t: f(x * t)))(s))
    d2 = tg.grad(tg.grad(lambda t: f(x * t)), backend="numpy")
    close(d3(1.0), fd_grad(lambda t: d2(float(t)), np.float64(1.0), eps=1e-5), 1e-4)


def test_fori_loop_with_traced_bounds_is_a_while_loop(backend):
    def f(x, n):
        return tg.fori_loop(0, n, lambda i, c: c * x, 1.0)

    close(tg.jit(f, backend=backend)(1.5, 3), 1.5**3, 1e-12)
    close(tg.grad(f, backend=backend)(1.5, 3), 3 * 1.5**2, 1e-9)


# ----------------------------------------------------------------------------------------------
# cond


def piecewise(x):
    return tg.cond(x.sum() > 0, lambda a: np.sin(a).sum() * 2.0, lambda a: (a**3).sum(), x)


def test_cond_differentiates_the_branch_taken(backend, dtype):
    x = np.array([0.3, 0.5], dtype)
    close(tg.jit(piecewise, backend=backend)(x), 2 * np.sin(x.astype(np.float64)).sum(), TOL[dtype])
    close(tg.grad(piecewise, backend=backend)(x), 2 * np.cos(x.astype(np.float64)), TOL[dtype])
    close(tg.grad(piecewise, backend=backend)(-x), 3 * x.astype(np.float64) ** 2, TOL[dtype])
    if dtype == np.float64:
        close(tg.hessian(piecewise, backend=backend)(-x), np.diag(-6 * x), 1e-9)
        d3 = tg.grad(
            tg.grad(tg.grad(lambda t: piecewise(np.array([1.0, 0.25]) * t))), backend=backend
        )
        close(d3(0.4), -2 * (np.cos(0.4) + 0.25**3 * np.cos(0.1)), 1e-9)


def test_cond_with_captured_values_and_pytrees(backend):
    def f(x, w):
        out = tg.cond(
            w > 1.0, lambda a: {"u": a * w, "v": a.sum()}, lambda a: {"u": a - w, "v": w * 1.0}, x
        )
        return (out["u"] ** 2).sum() + out["v"]

    x = np.array([1.0, 2.0])
    for w in (0.5, 2.0):
        python = lambda z, w=w: (
            ((z * w) ** 2).sum() + z.sum() if w > 1 else ((z - w) ** 2).sum() + w
        )
        close(tg.grad(f, backend=backend)(x, w), fd_grad(python, x), 1e-6)


def test_cond_under_vmap_selects_per_example(backend):
    xs = np.array([[0.3, 0.5], [-0.4, -0.2], [0.1, -0.5]])
    out = tg.vmap(piecewise, backend=backend)(xs)
    expected = [2 * np.sin(x).sum() if x.sum() > 0 else (x**3).sum() for x in xs]
    close(out, expected, 1e-12)


# ----------------------------------------------------------------------------------------------
# composition with the other transforms


def test_vmap_of_scan_and_of_its_gradient(backend):
    xs = np.array([[0.3, -0.2, 0.5], [0.1, 0.0, -0.4]])
    batched = tg.vmap(lambda x: scan_model(x, 0.8), backend=backend)(xs)
    close(batched, [scan_model_python(x, 0.8) for x in xs], 1e-12)
    grads = tg.vmap(tg.grad(lambda x: scan_model(x, 0.8)), backend=backend)(xs)
    close(grads, [fd_grad(lambda z: scan_model_python(z, 0.8), x) for x in xs], 1e-6)


def test_vmap_of_while_loop_runs_each_example_to_its_own_end(backend):
    a = np.array([2.0, 9.0, 0.25])
    close(tg.vmap(newton_sqrt, backend=backend)(a), np.sqrt(a), 1e-12)


def test_jvp_and_linearize_of_scan(backend):
    x = np.array([0.3, -0.2, 0.5])
    t = np.array([1.0, 0.5, -0.25])
    value, tangent = tg.jvp(lambda z: scan_model(z, 0.8), (x,), (t,), backend=backend)
    close(value, scan_model_python(x, 0.8), 1e-12)
    close(tangent, fd_grad(lambda z: scan_model_python(z, 0.8), x) @ t, 1e-6)
    value, f_lin = tg.linearize(lambda z: scan_model(z, 0.8), x, backend=backend)
    close(f_lin(t), tangent, 1e-9)


def test_forward_and_reverse_scan_share_one_forward_pass():
    graph = tg.make_ir(tg.grad(lambda x: scan_model(x, 0.8)))(np.ones(3))
    scans = [n for n in graph.nodes if n.prim is scan.scan_p]
    assert len(scans) == 2  # the saving forward scan (the primal is a slice of it), the reverse
    assert sorted(n.params["reverse"] for n in scans) == [False, True]


# ----------------------------------------------------------------------------------------------
# errors


def test_a_carry_that_changes_dtype_is_refused_with_the_fix():
    def f(x):
        return tg.scan(lambda c, _: (c.astype(np.float32), None), x, None, length=3)[0]

    with pytest.raises(
        TypeError, match=r"carry.*starts as f64\[2\] but one step makes it f32\[2\]"
    ):
        tg.jit(f)(np.ones(2))

    def index_in_float32(x):  # named as the user wrote it, and the index's dtype explained
        return tg.fori_loop(0, 3, lambda i, c: c + i * np.float32(0.1), x)

    with pytest.raises(TypeError, match=r"^fori_loop: .*i\.astype\(np\.float32\)"):
        tg.jit(index_in_float32, backend="numpy")(np.ones(2, np.float32))


def test_scan_body_must_return_a_pair():
    with pytest.raises(TypeError, match="must return a pair"):
        tg.jit(lambda x: tg.scan(lambda c, _: c, x, None, length=2))(np.ones(2))


def test_scan_xs_lengths_must_agree():
    with pytest.raises(ValueError, match="disagree on the number of steps"):
        tg.jit(lambda x: tg.scan(lambda c, a: (c, a), x, (np.ones(3), np.ones(4))))(1.0)


def test_cond_predicate_must_be_a_scalar():
    with pytest.raises(TypeError, match=r"np\.where"):
        tg.jit(lambda x: tg.cond(x > 0, lambda a: a, lambda a: -a, x))(np.ones(2))


def test_cond_branches_must_agree_on_shapes():
    with pytest.raises(TypeError, match="same shapes"):
        tg.jit(lambda x: tg.cond(x.sum() > 0, lambda a: a, lambda a: a[:1], x))(np.ones(2))


def test_branching_on_a_traced_value_names_the_control_flow_functions():
    """With guards off (JAX's rule) the error names tg.while_loop; with guards (the default) the
    Python loop unrolls for the traced trip count."""

    def f(x):
        while x.sum() < 10:
            x = x * 2
        return x

    with pytest.raises(tg.TracingError, match=r"tg\.while_loop"):
        tg.jit(f, guards=False)(np.ones(2))
    np.testing.assert_array_equal(tg.jit(f)(np.ones(2)), [8.0, 8.0])
    np.testing.assert_array_equal(tg.jit(f)(np.full(2, 3.0)), [6.0, 6.0])


def test_a_compiled_loop_called_from_several_threads_at_once():
    """Each call has its own scratch: concurrent calls of one program give each its own answer
    (the cpu backend's loop runs in one compiled function, cpu/scan_loop.py)."""
    import concurrent.futures

    def f(x):
        def step(c, _):
            s = np.sum(np.sin(c))  # a reduction: scratch inside the loop
            return c * 0.9 + s * 0.01, s

        return tg.scan(step, x, None, length=50)

    fn = tg.jit(f, backend="cpu")
    inputs = [np.full(64, v) for v in np.linspace(-1, 1, 8)]
    expected = [fn(x) for x in inputs]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            results = list(pool.map(fn, inputs))
            for (c, ys), (ce, yse) in zip(results, expected, strict=True):
                np.testing.assert_array_equal(c, ce)
                np.testing.assert_array_equal(ys, yse)


def test_debug_print_and_tap_inside_a_loop_or_cond_body_are_refused():
    x = np.arange(3.0)
    bodies = [
        lambda x: tg.fori_loop(0, 2, lambda i, v: (tg.debug_print("v={}", v), v * 2)[1], x),
        lambda x: tg.cond(x[0] < 1, lambda v: (tg.debug_print("c {}", v), v)[1], lambda v: v, x),
        lambda x: np.sum(tg.fori_loop(0, 3, lambda i, v: tg.tap(v, "t") * 2, x)),
        lambda x: tg.scan(lambda c, a: (c + tg.tap(a, "s"), c), 0.0, x)[0],
    ]
    for fun in bodies:
        with pytest.raises(tg.TracingError, match="not supported yet: it would never run"):
            tg.jit(fun)(x)


def test_a_scan_of_length_zero_outside_a_trace_returns_empty_ys():
    x = np.arange(6.0).reshape(3, 2)

    def f(x):
        return tg.scan(lambda c, a: (c * a, (c + a, {"s": np.sum(a)})), x[0], x[:0])

    for carry, ys in (f(x), tg.jit(f)(x)):
        np.testing.assert_array_equal(carry, x[0])
        assert ys[0].shape == (0, 2) and ys[1]["s"].shape == (0,)
    _, ys = tg.scan(lambda c, a: (c * 2.0, c), x[0], None, length=0)
    assert ys.shape == (0, 2)
