"""vmap, jvp, linearize, vjp, jacfwd/jacrev, hvp, checkpoint and custom_jvp: values against
finite differences and against the equivalent composition of reverse-mode transforms, on every
backend, in float64 and float32; how they compose; the errors they give."""

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import passes
from tracegrad.trace import trace
from tracegrad.transforms import forward, partial_eval
from tracegrad.base.tree import flatten

TOL = {np.float64: 1e-9, np.float32: 2e-4}
FD_TOL = {np.float64: 1e-6, np.float32: 1e-6}  # finite differences run in float64


def f_vec(x, w):
    """R^n x R^m -> R^k with a matrix product, a reduction and transcendental functions."""
    h = np.tanh(x[:, None] * w[None, :])
    return np.sin(h.sum(axis=1)) * np.exp(-x) + (x**2).sum()


def f_scalar(x):
    return np.sum(np.sin(x) ** 2 * np.exp(0.3 * x)) + np.prod(np.cos(x[:2]))


def _fd_jvp(f, primals, tangents, eps=1e-6):
    plus = [
        np.asarray(p, np.float64) + eps * np.asarray(t, np.float64)
        for p, t in zip(primals, tangents, strict=True)
    ]
    minus = [
        np.asarray(p, np.float64) - eps * np.asarray(t, np.float64)
        for p, t in zip(primals, tangents, strict=True)
    ]
    return (np.asarray(f(*plus)) - np.asarray(f(*minus))) / (2 * eps)


@pytest.fixture(params=[np.float64, np.float32], ids=["f64", "f32"])
def dtype(request):
    return request.param


@pytest.fixture
def data(rng, dtype):
    return (
        rng.normal(size=4).astype(dtype),
        rng.normal(size=3).astype(dtype),
        rng.normal(size=4).astype(dtype),
        rng.normal(size=3).astype(dtype),
    )


# ---------------------------------------------------------------------------------------------
# jvp


def test_jvp_matches_finite_differences_and_the_jacobian(backend, data, dtype):
    x, w, tx, tw = data
    y, t = tg.jvp(f_vec, (x, w), (tx, tw), backend=backend)
    assert y.dtype == dtype and t.dtype == dtype and t.shape == y.shape
    np.testing.assert_allclose(y, f_vec(x, w), rtol=TOL[dtype], atol=TOL[dtype])
    fd = _fd_jvp(f_vec, (x, w), (tx, tw))
    np.testing.assert_allclose(
        t, fd, rtol=FD_TOL[dtype] * 100, atol=1e-5 if dtype == np.float32 else 1e-7
    )
    jx, jw = tg.jacobian(f_vec, argnums=(0, 1), backend="numpy")(x, w)  # the oracle
    np.testing.assert_allclose(t, jx @ tx + jw @ tw, rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10)


def test_jvp_of_pytrees_ints_and_aux(backend):
    params = {"a": np.array([0.5, -1.0]), "b": np.array(2.0)}
    tangents = {"a": np.array([1.0, 0.0]), "b": np.array(-1.0)}

    def f(p, n):
        y = p["a"] * p["b"] ** 2 + n
        return {"y": y, "s": np.sum(y)}, n * 2

    (out, tan, aux) = tg.jvp(
        f, (params, np.int64(3)), (tangents, np.int64(0)), has_aux=True, backend=backend
    )
    assert set(out) == {"y", "s"} and set(tan) == {"y", "s"}
    expected = tangents["a"] * 4.0 + params["a"] * 2 * 2.0 * -1.0
    np.testing.assert_allclose(tan["y"], expected)
    np.testing.assert_allclose(tan["s"], expected.sum())
    assert int(aux) == 6


def test_jvp_errors():
    x = np.ones(3)
    with pytest.raises(TypeError, match="tuple or list"):
        tg.jvp(np.sin, x, (x,))
    with pytest.raises(ValueError, match="one tangent per primal"):
        tg.jvp(lambda a, b: a * b, (x, x), (x,))
    with pytest.raises(ValueError, match="shape"):
        tg.jvp(np.sin, (x,), (np.ones(2),))
    with pytest.raises(TypeError, match="dtype"):
        tg.jvp(np.sin, (x,), (np.ones(3, np.float32),))
    with pytest.raises(TypeError, match="structure"):
        tg.jvp(lambda p: p["a"], ({"a": x},), ({"b": x},))


def test_jvp_inside_grad_and_jit(backend, rng):
    x, v = rng.normal(size=3), rng.normal(size=3)

    def directional(x):
        return tg.jvp(f_scalar, (x,), (v,))[1]

    g = tg.grad(directional, backend=backend)(x)
    np.testing.assert_allclose(
        g, tg.hessian(f_scalar, backend="numpy")(x) @ v, rtol=1e-10, atol=1e-12
    )
    np.testing.assert_allclose(
        tg.jit(directional, backend=backend)(x), tg.grad(f_scalar)(x) @ v, rtol=1e-12
    )


def test_forward_mode_needs_no_matrix_of_the_jacobian(rng):
    """The jvp graph of an elementwise function holds nothing bigger than its inputs."""
    x = rng.normal(size=50)
    graph = tg.make_ir(lambda x, t: tg.jvp(lambda x: np.tanh(np.sin(x) * x), (x,), (t,)))(x, x)
    assert max(n.out.size for n in graph.nodes) <= 50


# ---------------------------------------------------------------------------------------------
# linearize and vjp


def test_linearize_reuses_the_primal(backend, data, dtype):
    x, w, tx, tw = data
    y, f_jvp = tg.linearize(f_vec, x, w, backend=backend)
    np.testing.assert_allclose(y, f_vec(x, w), rtol=TOL[dtype], atol=TOL[dtype])
    for scale in (1.0, -2.0):
        _, expected = tg.jvp(f_vec, (x, w), (scale * tx, scale * tw), backend="numpy")
        np.testing.assert_allclose(
            f_jvp(scale * tx, scale * tw), expected, rtol=TOL[dtype], atol=TOL[dtype]
        )
    with pytest.raises(TypeError, match="2 tangents"):
        f_jvp(tx)


def test_the_linearised_part_computes_no_primal_function():
    """partial evaluation keeps sin/exp in the known part: the tangent part is linear."""
    x = np.linspace(0.1, 1, 5)
    graph, _, _ = trace(lambda x: np.sin(x) * np.exp(x), [(x.shape, x.dtype)], flatten((x,))[1])
    jvp_graph = passes.optimize(forward.jvp(graph, [0]), lower=False)
    split = partial_eval.split(jvp_graph, 1, 1)
    assert {n.prim.name for n in split.unknown.nodes} <= {"mul", "ct_mul", "add", "neg"}
    assert {"sin", "exp"} <= {n.prim.name for n in split.known.nodes}


def test_vjp_matches_the_jacobian(backend, data, dtype):
    x, w, _, _ = data
    y, f_vjp = tg.vjp(f_vec, x, w, backend=backend)
    ct = np.linspace(-1, 1, y.size).astype(dtype)
    cx, cw = f_vjp(ct)
    assert cx.dtype == dtype and cw.shape == w.shape
    jx, jw = tg.jacobian(f_vec, argnums=(0, 1), backend="numpy")(x, w)
    np.testing.assert_allclose(cx, ct @ jx, rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10)
    np.testing.assert_allclose(cw, ct @ jw, rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10)


def test_vjp_of_pytrees_with_aux(backend):
    params = {"w": np.array([1.0, 2.0]), "b": np.array(0.5)}

    def f(p, x):
        y = p["w"] * x + p["b"]
        return (y, np.sum(y)), np.max(y)

    _, f_vjp, aux = tg.vjp(f, params, np.array([3.0, 4.0]), has_aux=True, backend=backend)
    assert float(aux) == pytest.approx(8.5)
    cp, cx = f_vjp((np.ones(2), np.array(2.0)))
    np.testing.assert_allclose(cp["w"], 3.0 * np.array([3.0, 4.0]))
    np.testing.assert_allclose(cp["b"], 6.0)
    np.testing.assert_allclose(cx, 3.0 * params["w"])
    with pytest.raises(ValueError, match="shape"):
        f_vjp((np.ones(3), np.array(2.0)))
    with pytest.raises(TypeError, match="structure"):
        f_vjp(np.ones(2))


# ---------------------------------------------------------------------------------------------
# jacfwd, jacrev, hessian, hvp


def test_jacfwd_equals_jacrev(backend, data, dtype):
    x, w, _, _ = data
    fwd = tg.jacfwd(f_vec, argnums=(0, 1), backend=backend)(x, w)
    rev = tg.jacrev(f_vec, argnums=(0, 1), backend="numpy")(x, w)
    for a, b in zip(fwd, rev, strict=True):
        assert a.shape == b.shape and a.dtype == dtype
        np.testing.assert_allclose(a, b, rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10)


def test_jacfwd_of_jacrev_is_the_hessian(backend, rng):
    x = rng.normal(size=4)
    h = tg.hessian(f_scalar, backend="numpy")(x)
    np.testing.assert_allclose(
        tg.jacfwd(tg.jacrev(f_scalar), backend=backend)(x), h, rtol=1e-10, atol=1e-12
    )
    np.testing.assert_allclose(
        tg.jacrev(tg.jacfwd(f_scalar), backend=backend)(x), h, rtol=1e-10, atol=1e-12
    )
    v = rng.normal(size=4)
    np.testing.assert_allclose(
        tg.hvp(f_scalar, backend=backend)(x, v), h @ v, rtol=1e-10, atol=1e-12
    )


def test_jacfwd_with_aux_and_matrix_input(rng):
    x = rng.normal(size=(2, 3))
    jac, aux = tg.jacfwd(lambda x: (np.tanh(x).sum(0), x.shape[0]), has_aux=True)(x)
    assert jac.shape == (3, 2, 3) and int(aux) == 2
    np.testing.assert_allclose(jac, tg.jacobian(lambda x: np.tanh(x).sum(0))(x), rtol=1e-12)


def test_tall_jacobian_by_forward_mode_has_no_bigger_intermediate():
    """R^3 -> R^2000: no intermediate larger than the jacobian itself (3 x 2000)."""
    t = np.linspace(0, 1, 2000)

    def curve(p):
        return np.sin(p[0] * t) * np.exp(-p[1] * t) + p[2] * t**2

    p = np.array([3.0, 0.5, -1.0])
    graph = tg.make_ir(tg.jacfwd(curve))(p)
    assert max(n.out.size for n in graph.nodes) <= 3 * 2000
    jac = tg.jacfwd(curve)(p)
    np.testing.assert_allclose(jac, tg.jacobian(curve)(p), rtol=1e-12, atol=1e-12)
    eps = 1e-6
    fd = np.stack(
        [(curve(p + eps * e) - curve(p - eps * e)) / (2 * eps) for e in np.eye(3)], axis=1
    )
    np.testing.assert_allclose(jac, fd, rtol=1e-6, atol=1e-6)


def test_hvp_graph_is_linear_in_size(rng):
    """hvp never forms the n x n Hessian: every intermediate has at most n elements."""
    n = 1000
    x, v = rng.normal(size=n), rng.normal(size=n)
    graph = tg.make_ir(lambda x, v: tg.hvp(f_scalar)(x, v))(x, v)
    assert max(node.out.size for node in graph.nodes) <= n


# ---------------------------------------------------------------------------------------------
# vmap


def test_per_example_gradients_equal_a_loop(backend, rng, dtype):
    w1 = rng.normal(size=(3, 5)).astype(dtype)
    w2 = rng.normal(size=5).astype(dtype)
    xs = rng.normal(size=(6, 3)).astype(dtype)
    ys = rng.normal(size=6).astype(dtype)

    def loss(params, x, y):
        h = np.tanh(x @ params["w1"])
        return (h @ params["w2"] - y) ** 2

    params = {"w1": w1, "w2": w2}
    per_example = tg.vmap(tg.grad(loss), in_axes=(None, 0, 0), backend=backend)(params, xs, ys)
    grad = tg.grad(loss, backend="numpy")
    for i in range(len(xs)):
        g = grad(params, xs[i], ys[i])
        for k in params:
            np.testing.assert_allclose(
                per_example[k][i], g[k], rtol=TOL[dtype] * 10, atol=TOL[dtype] * 10
            )


def test_vmap_axes_dicts_and_out_axes(backend, rng):
    a = rng.normal(size=(3, 4))  # mapped along axis 1
    b = rng.normal(size=(4, 2))  # mapped along axis 0
    c = rng.normal(size=2)  # not mapped

    def f(pair, c):
        return pair["a"].sum() * pair["b"] + c, c * 2

    out, twice = tg.vmap(f, in_axes=({"a": 1, "b": 0}, None), out_axes=(1, None), backend=backend)(
        {"a": a, "b": b}, c
    )
    expected = np.stack([a[:, i].sum() * b[i] + c for i in range(4)], axis=1)
    np.testing.assert_allclose(out, expected, rtol=1e-12)
    np.testing.assert_allclose(twice, 2 * c)
    neg = tg.vmap(lambda x: np.sin(x).sum(), in_axes=-1, backend=backend)(a)
    np.testing.assert_allclose(neg, np.sin(a).sum(0), rtol=1e-12)


def test_vmap_of_hessian_jvp_and_nested_vmap(backend, rng):
    xs = rng.normal(size=(3, 4))
    hs = tg.vmap(tg.hessian(f_scalar), backend=backend)(xs)
    for i in range(3):
        np.testing.assert_allclose(
            hs[i], tg.hessian(f_scalar, backend="numpy")(xs[i]), rtol=1e-10, atol=1e-12
        )
    ts = tg.vmap(lambda x, v: tg.jvp(f_scalar, (x,), (v,))[1], backend=backend)(xs, xs)
    np.testing.assert_allclose(
        ts, np.einsum("ij,ij->i", tg.vmap(tg.grad(f_scalar))(xs), xs), rtol=1e-10
    )
    outer = tg.vmap(
        tg.vmap(lambda a, b: a * b, in_axes=(None, 0)), in_axes=(0, None), backend=backend
    )
    np.testing.assert_allclose(outer(xs[0], xs[1]), np.outer(xs[0], xs[1]))


def test_a_batched_matmul_is_one_product():
    w = np.ones((3, 4))
    graph = tg.make_ir(tg.vmap(lambda x: np.tanh(x @ w)))(np.ones((7, 3)))
    matmuls = [n for n in graph.nodes if n.prim.name == "matmul"]
    assert len(matmuls) == 1 and matmuls[0].inputs[1].shape == (3, 4)  # w is not copied per example
    graph = tg.make_ir(tg.vmap(lambda x: w.T @ x))(np.ones((7, 3)))
    assert [n.inputs[0].shape for n in graph.nodes if n.prim.name == "matmul"] == [(4, 3)]


def test_vmap_errors():
    x = np.ones((3, 2))
    with pytest.raises(ValueError, match="different sizes"):
        tg.vmap(lambda a, b: a + b)(x, np.ones((4, 2)))
    with pytest.raises(ValueError, match="out of range"):
        tg.vmap(np.sin, in_axes=2)(x)
    with pytest.raises(ValueError, match="scalar has no axis"):
        tg.vmap(lambda a, b: a * b)(x, 2.0)
    with pytest.raises(ValueError, match="maps no argument"):
        tg.vmap(np.sin, in_axes=None)(x)
    with pytest.raises(ValueError, match="one entry per argument"):
        tg.vmap(lambda a, b: a * b, in_axes=(0,))(x, x)
    with pytest.raises(ValueError, match="out_axes is None"):
        tg.vmap(np.sin, out_axes=None)(x)
    with pytest.raises(TypeError, match="in_axes must be"):
        tg.vmap(np.sin, in_axes="0")
    with pytest.raises(ValueError, match="does not match the structure"):
        tg.vmap(lambda p: p["a"], in_axes=({"b": 0},))({"a": x})


# ---------------------------------------------------------------------------------------------
# checkpoint


def _block(x, w):
    return np.tanh(np.sin(x * w) * 2.0 + x**2)


def test_checkpoint_changes_no_derivative(backend, rng, dtype):
    x, w = rng.normal(size=5).astype(dtype), rng.normal(size=5).astype(dtype)
    plain = lambda x, w: np.sum(_block(_block(x, w), w) ** 2)
    saved = lambda x, w: np.sum(tg.checkpoint(_block)(tg.checkpoint(_block)(x, w), w) ** 2)
    tol = TOL[dtype] * 10
    for a, b in zip(
        tg.grad(saved, argnums=(0, 1), backend=backend)(x, w),
        tg.grad(plain, argnums=(0, 1), backend="numpy")(x, w),
        strict=True,
    ):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    np.testing.assert_allclose(
        tg.hessian(saved, backend=backend)(x, w),
        tg.hessian(plain, backend="numpy")(x, w),
        rtol=tol * 10,
        atol=tol * 10,
    )
    np.testing.assert_allclose(
        tg.jvp(saved, (x, w), (w, x), backend=backend)[1],
        tg.jvp(plain, (x, w), (w, x), backend="numpy")[1],
        rtol=tol,
        atol=tol,
    )
    batch = np.stack([x, w])
    np.testing.assert_allclose(
        tg.vmap(tg.grad(saved), in_axes=(0, None), backend=backend)(batch, w)[1],
        tg.grad(plain, backend="numpy")(w, w),
        rtol=tol,
        atol=tol,
    )


def test_checkpoint_recomputes_in_the_backward_pass():
    x = np.linspace(0, 1, 8)
    inner = tg.checkpoint(lambda x: np.sin(np.sin(x)))
    graph = passes.optimize(tg.make_ir(tg.grad(lambda x: np.sum(inner(x) * x)))(x))
    names = [n.prim.name for n in graph.nodes]
    # sin(sin(x)) forward, and the inner sin again in the backward pass (cos(sin(x)) needs it)
    assert "remat_barrier" in names and names.count("sin") == 3


def test_checkpoint_outside_a_trace_static_args_and_taps():
    x = np.linspace(0, 1, 4)
    np.testing.assert_allclose(tg.checkpoint(np.sin)(x), np.sin(x))
    scaled = tg.checkpoint(
        lambda x, how: np.sin(x) if how == "sin" else np.cos(x), static_argnums=(1,)
    )
    np.testing.assert_allclose(tg.grad(lambda x: scaled(x, "cos").sum())(x), -np.sin(x))
    with pytest.raises(tg.TracingError, match="tap"):
        tg.grad(lambda x: tg.checkpoint(lambda y: tg.tap(y * 2, "y"))(x).sum())(x)


# ---------------------------------------------------------------------------------------------
# custom_jvp


@tg.custom_jvp
def softplus(x):
    return np.log1p(np.exp(x))


@softplus.defjvp
def _softplus_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    return softplus(x), dx / (1 + np.exp(-x))


@tg.custom_jvp
def clipped(x, lo):
    return np.maximum(x, lo)


@clipped.defjvp
def _clipped_jvp(primals, tangents):  # a "straight-through" rule: tangent 1 everywhere
    (x, lo), (dx, _) = primals, tangents
    return clipped(x, lo), dx


def test_custom_jvp_in_every_mode(backend, rng, dtype):
    x = rng.normal(size=4).astype(dtype)
    mine = lambda x: np.sum(softplus(x) * x)
    ref = lambda x: np.sum(np.log1p(np.exp(x)) * x)
    tol = TOL[dtype] * 10
    np.testing.assert_allclose(
        tg.grad(mine, backend=backend)(x), tg.grad(ref, backend="numpy")(x), rtol=tol, atol=tol
    )
    np.testing.assert_allclose(
        tg.hessian(mine, backend=backend)(x),
        tg.hessian(ref, backend="numpy")(x),
        rtol=tol,
        atol=tol,
    )
    np.testing.assert_allclose(
        tg.jvp(mine, (x,), (x,), backend=backend)[1],
        tg.jvp(ref, (x,), (x,), backend="numpy")[1],
        rtol=tol,
        atol=tol,
    )
    np.testing.assert_allclose(
        tg.vmap(tg.grad(mine), backend=backend)(np.stack([x, -x]))[1],
        tg.grad(ref, backend="numpy")(-x),
        rtol=tol,
        atol=tol,
    )


def test_custom_jvp_rule_is_what_gets_differentiated(backend):
    x = np.array([-1.0, 0.5, 2.0])
    g = tg.grad(lambda x: clipped(x, 0.0).sum(), backend=backend)(x)
    np.testing.assert_allclose(g, np.ones(3))  # not the 0/1 mask of np.maximum
    np.testing.assert_allclose(
        tg.jvp(lambda x: clipped(x, 0.0), (x,), (2 * x,), backend=backend)[1], 2 * x
    )
    np.testing.assert_allclose(clipped(x, 0.0), np.maximum(x, 0.0))  # outside a trace: the function


def test_custom_jvp_errors():
    @tg.custom_jvp
    def norule(x):
        return x * 2

    with pytest.raises(TypeError, match="no rule"):
        tg.grad(lambda x: norule(x).sum())(np.ones(2))

    @tg.custom_jvp
    def bad(x):
        return x * 2

    @bad.defjvp
    def _bad(primals, tangents):
        return primals[0] * 2

    with pytest.raises(TypeError, match="primal_out, tangent_out"):
        tg.grad(lambda x: bad(x).sum())(np.ones(2))


def test_jvp_of_a_custom_vjp_function(backend):
    @tg.custom_vjp
    def cube(x):
        return x**3

    cube.defvjp(lambda x: (x**3, x), lambda x, ct: (ct * 3 * x**2,))
    x, t = np.array([1.0, -2.0]), np.array([0.5, 1.0])
    np.testing.assert_allclose(tg.jvp(cube, (x,), (t,), backend=backend)[1], 3 * x**2 * t)
    np.testing.assert_allclose(
        tg.vmap(tg.grad(lambda x: cube(x).sum()), backend=backend)(np.stack([x, t])),
        3 * np.stack([x, t]) ** 2,
    )


# ---------------------------------------------------------------------------------------------
# Adversarial: captured values, closures over traced values, odd sizes, the caller's arrays

SCALE = np.array([1.0, 2.0, 3.0])


def test_captured_arrays_are_read_at_call_time(backend):
    global SCALE
    mapped = tg.vmap(lambda x: np.sin(x * SCALE), backend=backend)
    xs = np.ones((2, 3))
    np.testing.assert_allclose(mapped(xs), np.sin(xs * SCALE))
    _, f_jvp = tg.linearize(lambda x: np.sum(np.exp(x * SCALE)), np.zeros(3), backend=backend)
    old = SCALE
    try:
        SCALE = np.array([-1.0, 0.5, 4.0])
        np.testing.assert_allclose(mapped(xs), np.sin(xs * SCALE))
        # a linearisation made earlier keeps its point (its residuals), like JAX's
        np.testing.assert_allclose(f_jvp(np.ones(3)), old.sum())
        t = tg.jvp(
            lambda x: np.sum(np.exp(x * SCALE)), (np.zeros(3),), (np.ones(3),), backend=backend
        )[1]
        np.testing.assert_allclose(t, SCALE.sum())
    finally:
        SCALE = old


def test_transforms_closing_over_traced_values(backend, rng):
    x, v, w = rng.normal(size=3), rng.normal(size=3), 0.7

    def outer(w):
        inner = tg.jvp(lambda x: np.sin(x * w), (x,), (v,))[1]  # d/dx sin(xw) v = w cos(xw) v
        batched = tg.vmap(lambda row: np.sum(np.tanh(row * w)))(np.stack([x, v]))
        return np.sum(inner) + np.sum(batched)

    def reference(w):
        return np.sum(w * np.cos(x * w) * v) + np.sum(np.tanh(x * w)) + np.sum(np.tanh(v * w))

    g = tg.grad(outer, backend=backend)(w)
    eps = 1e-6
    np.testing.assert_allclose(g, (reference(w + eps) - reference(w - eps)) / (2 * eps), rtol=1e-6)


def test_the_callers_arrays_are_not_modified(backend):
    x = np.array([0.5, 1.5])
    keep = x.copy()
    tg.vmap(lambda a: a * 2, backend=backend)(x)
    tg.jvp(np.sin, (x,), (x,), backend=backend)
    _, f_vjp = tg.vjp(lambda a: a * 3, x, backend=backend)
    out = f_vjp(x)[0]
    out[:] = 0  # results are the caller's to change
    np.testing.assert_array_equal(x, keep)
    np.testing.assert_allclose(f_vjp(x)[0], 3 * x)


def test_vmap_of_a_batch_of_one_and_of_constants(backend):
    np.testing.assert_allclose(
        tg.vmap(lambda a: np.cos(a), backend=backend)(np.zeros((1, 2))), np.ones((1, 2))
    )
    out = tg.vmap(lambda a: (a.sum(), 3.0), backend=backend)(np.ones((4, 2)))
    np.testing.assert_allclose(out[0], 2 * np.ones(4))
    np.testing.assert_allclose(out[1], 3 * np.ones(4))


def test_grad_of_a_checkpointed_function_and_jacfwd_with_static_args(backend):
    f = lambda x: np.sum(np.sin(x) ** 3)
    x = np.linspace(0.1, 1, 3)
    np.testing.assert_allclose(
        tg.grad(tg.checkpoint(f), backend=backend)(x), tg.grad(f)(x), rtol=1e-12
    )
    jac = tg.jacfwd(lambda x, n: x**n, static_argnums=(1,), backend=backend)(x, 3)
    np.testing.assert_allclose(jac, np.diag(3 * x**2), rtol=1e-12)


def test_forward_mode_edge_cases(backend):
    x, t = np.array([0.3, -1.2, 2.0]), np.array([1.0, 2.0, -1.0])
    np.testing.assert_array_equal(tg.jvp(lambda x: x, (x,), (t,), backend=backend)[1], t)
    np.testing.assert_array_equal(
        tg.jvp(lambda x: np.ones(2), (x,), (t,), backend=backend)[1], np.zeros(2)
    )
    np.testing.assert_allclose(
        tg.jvp(lambda x: np.where(x > 0, x**2, -x), (x,), (t,), backend=backend)[1],
        np.where(x > 0, 2 * x * t, -t),
    )
    np.testing.assert_allclose(
        tg.jvp(lambda n, x: x * n, (np.int64(3), x), (np.int64(0), t), backend=backend)[1], 3 * t
    )
    (ct,) = tg.vjp(lambda x: x, x, backend=backend)[1](t)
    np.testing.assert_array_equal(ct, t)
    moved = tg.vmap(lambda a: a, in_axes=0, out_axes=1, backend=backend)(
        np.arange(6.0).reshape(2, 3)
    )
    np.testing.assert_array_equal(moved, np.arange(6.0).reshape(2, 3).T)
    # a linear map from linearize, differentiated again
    _, f_jvp = tg.linearize(lambda x: np.sin(x) * 2, x, backend=backend)
    np.testing.assert_allclose(
        tg.grad(lambda s: np.sum(f_jvp(s * t)), backend=backend)(1.0),
        np.sum(2 * np.cos(x) * t),
        rtol=1e-12,
    )


@pytest.mark.parametrize(
    "tangent",
    [
        lambda p, t: t**2,
        lambda p, t: np.ones(3),
        lambda p, t: t + 1.0,
        lambda p, t: np.sin(t),
        lambda p, t: t * t[::-1],
    ],
)
def test_a_jvp_rule_not_linear_in_the_tangents_is_refused(tangent):
    @tg.custom_jvp
    def f(v):
        return v * 2.0

    @f.defjvp
    def _(p, t):
        return p[0] * 2.0, tangent(p[0], t[0])

    x = np.ones(3)
    with pytest.raises(tg.TracingError, match="linear in the tangents"):
        tg.jvp(f, (x,), (x,))
    with pytest.raises(tg.TracingError, match="linear in the tangents"):
        tg.grad(lambda v: np.sum(f(v)))(x)


def test_jvp_rules_linear_in_the_tangents_are_accepted():
    x = np.array([0.5, 1.0, 2.0])
    rules = [
        (lambda p, t: np.cos(p) * t, np.cos(x)),
        (lambda p, t: np.zeros_like(p), 0.0 * x),
        (lambda p, t: np.where(p > 0.7, t, 0.0), (x > 0.7) * 1.0),
        (lambda p, t: t / (p + 1.0) + 0.0 * t, 1.0 / (x + 1.0)),
        (lambda p, t: -t @ np.eye(3), -np.ones(3)),
    ]
    for rule, want in rules:

        @tg.custom_jvp
        def f(v):
            return v * 2.0

        @f.defjvp
        def _(p, t, rule=rule):
            return p[0] * 2.0, rule(p[0], t[0])

        np.testing.assert_allclose(tg.grad(lambda v: np.sum(f(v)))(x), want)


def test_custom_rules_reading_a_global_array_say_how_to_pass_it():
    scale = np.full(3, 2.0)

    @tg.custom_vjp
    def f(v):
        return v * 2.0

    f.defvjp(lambda v: (v * 2.0, None), lambda _, ct: (ct * scale,))
    with pytest.raises(tg.TracingError, match="residuals fwd returns"):
        tg.grad(lambda v: np.sum(f(v)))(np.ones(3))

    @tg.custom_vjp
    def g(v):
        return v * 2.0

    g.defvjp(lambda v: (v * 2.0, scale), lambda s, ct: (ct * s,))  # the documented way
    np.testing.assert_array_equal(tg.grad(lambda v: np.sum(g(v)))(np.ones(3)), scale)


def test_a_fwd_output_of_the_wrong_shape_is_named_in_the_error():
    @tg.custom_vjp
    def f(v):
        return v * 2.0

    # fwd's output has 4 elements where f's has 3: bwd's ct * v cannot broadcast
    f.defvjp(lambda v: (np.concatenate([v, v[:1]]), v), lambda v, ct: (ct * v,))
    with pytest.raises(tg.ShapeError, match="outputs fwd returns"):
        tg.grad(lambda v: np.sum(f(v)))(np.ones(3))


def test_vmap_of_gathers_with_negative_and_out_of_range_batched_indices(backend):
    x = np.arange(12.0).reshape(3, 4)
    idx = np.array([-1, -2, 0])
    want = np.array([x[k, idx[k]] for k in range(3)])
    np.testing.assert_array_equal(tg.vmap(lambda x, i: x[i], backend=backend)(x, idx), want)
    np.testing.assert_array_equal(
        tg.vmap(lambda x, i: np.take(x, i), backend=backend)(x, idx), want
    )
    g = tg.vmap(tg.grad(lambda x, i: 2.0 * x[i]), backend=backend)(x, idx)
    expected = np.zeros_like(x)
    expected[np.arange(3), idx] = 2.0
    np.testing.assert_array_equal(g, expected)
    for bad in ([4, 0, 0], [0, 0, 5], [0, -5, 0]):  # never another example's element
        with pytest.raises(IndexError):
            tg.vmap(lambda x, i: x[i], backend=backend)(x, np.array(bad))


def test_power_with_a_zero_exponent_array_has_slope_zero_at_zero(backend):
    c = np.array([1.0, 2.0, 3.0, 4.0])

    def poly(x):
        return np.sum(c * x ** np.arange(4))

    assert tg.grad(poly, backend=backend)(0.0) == 2.0
    assert tg.jvp(poly, (0.0,), (1.0,), backend=backend)[1] == 2.0
    assert tg.hessian(poly, backend=backend)(0.0) == 6.0
    assert tg.grad(lambda x: x ** np.int64(0), backend=backend)(0.0) == 0.0
