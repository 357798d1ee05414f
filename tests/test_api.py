"""The public API contract: transforms, their composition, trees, caching, custom rules."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import tracegrad as tg


def loss(w, x, b):
    return (w * x + b - 5.0) ** 2


# ---- grad and its options


def test_grad_argnums_tuple_returns_tuple(backend):
    g = tg.grad(loss, argnums=(0, 2), backend=backend)(2.0, 3.0, 1.0)
    assert isinstance(g, tuple) and len(g) == 2
    assert (float(g[0]), float(g[1])) == (12.0, 4.0)


def test_argnum_is_autograds_spelling_of_argnums(backend):
    def loss(w, x, b):
        return (w * x + b) ** 2

    args = (2.0, 3.0, 1.0)
    for make in (tg.grad, tg.value_and_grad, tg.jacobian):
        expected = make(loss, argnums=(0, 2), backend=backend)(*args)
        got = make(loss, argnum=(0, 2), backend=backend)(*args)
        np.testing.assert_equal(got, expected)
    assert float(tg.grad(argnum=1, backend=backend)(loss)(*args)) == 2 * 7.0 * 2.0
    h = tg.hessian(lambda w, x: w**2 * x**3, argnum=1, backend=backend)(2.0, 3.0)
    assert float(h) == 4.0 * 6 * 3.0
    with pytest.raises(TypeError, match="argnums=1 and argnum=2: pass one of them"):
        tg.grad(loss, argnums=1, argnum=2)
    with pytest.raises(TypeError, match="argnums=1 and argnum=0"):
        tg.hessian(loss, argnums=1, argnum=0)


def test_decorator_with_arguments(backend):
    @tg.grad(argnums=1, backend=backend)
    def f(w, x, b):
        return loss(w, x, b)

    assert f(2.0, 3.0, 1.0) == 8.0


def test_value_and_grad(backend):
    value, g = tg.value_and_grad(loss, argnums=0, backend=backend)(2.0, 3.0, 1.0)
    assert (float(value), float(g)) == (4.0, 12.0)


def test_has_aux(backend):
    def f(x):
        return np.sum(x**2), {"double": x * 2}

    g, aux = tg.grad(f, has_aux=True, backend=backend)(np.array([1.0, 2.0]))
    np.testing.assert_array_equal(g, [2.0, 4.0])
    np.testing.assert_array_equal(aux["double"], [2.0, 4.0])
    (value, aux2), g2 = tg.value_and_grad(f, has_aux=True, backend=backend)(np.array([1.0, 2.0]))
    assert value == 5.0
    np.testing.assert_array_equal(aux2["double"], [2.0, 4.0])
    np.testing.assert_array_equal(g2, g)


def test_results_are_numpy_arrays_with_numpy_dtypes(backend):
    g = tg.grad(lambda x: np.sum(np.sin(x)), backend=backend)(np.ones(3, np.float32))
    assert isinstance(g, np.ndarray) and g.dtype == np.float32
    s = tg.grad(lambda x: x * x, backend=backend)(3.0)
    assert isinstance(s, np.ndarray) and s.shape == () and s.dtype == np.float64


def test_mixed_precision_follows_numpy_promotion(backend):
    x32 = np.ones(3, np.float32)
    # a Python float is weak: float32 stays float32
    assert tg.jit(lambda x: x * 2.0, backend=backend)(x32).dtype == np.float32
    # a float64 array is not: the result is float64, and so is the value
    y = tg.jit(lambda x, y: x * y, backend=backend)(x32, np.ones(3))
    assert y.dtype == np.float64


def test_grad_over_dict_of_parameters_has_the_same_structure(rng, backend):
    params = {"W": rng.normal(size=(3, 2)), "b": rng.normal(size=2)}
    X = rng.normal(size=(5, 3))

    def mse(p, X):
        return np.mean(np.tanh(X @ p["W"] + p["b"]) ** 2)

    g = tg.grad(mse, backend=backend)(params, X)
    assert list(g) == ["W", "b"]
    assert g["W"].shape == (3, 2) and g["b"].shape == (2,)
    assert tg.check_grad(mse, params, X, argnums=0, backend=backend)


def test_lists_and_nested_tuples(backend):
    f = lambda xs: xs[0] * xs[1][0] + xs[1][1]
    g = tg.grad(f, backend=backend)([2.0, (3.0, 4.0)])
    assert (
        isinstance(g, list)
        and float(g[0]) == 3.0
        and float(g[1][0]) == 2.0
        and float(g[1][1]) == 1.0
    )


# ---- jacobian, hessian, higher order


def test_jacobian_shape_and_values(rng, backend):
    x = rng.normal(size=(2, 3))
    J = tg.jacobian(lambda x: np.sin(x).sum(axis=0), backend=backend)(x)
    assert J.shape == (3, 2, 3)
    expected = np.zeros((3, 2, 3))
    for i in range(2):
        for j in range(3):
            expected[j, i, j] = np.cos(x[i, j])
    np.testing.assert_allclose(J, expected)


def test_hessian_tuple_argnums_is_tuple_of_tuples(backend):
    f = lambda x, y: np.sum(x**2 * y)
    x, y = np.array([1.0, 2.0]), np.array([3.0, 4.0, 5.0])[:2]
    H = tg.hessian(f, argnums=(0, 1), backend=backend)(x, y)
    assert [[h.shape for h in row] for row in H] == [[(2, 2), (2, 2)], [(2, 2), (2, 2)]]
    np.testing.assert_allclose(H[0][0], np.diag(2 * y))
    np.testing.assert_allclose(H[0][1], np.diag(2 * x))
    np.testing.assert_allclose(H[1][1], np.zeros((2, 2)))


def test_jacobian_of_grad_equals_hessian(rng, backend):
    f = lambda x: np.sum(np.sin(x) * x**2)
    x = rng.normal(size=4)
    np.testing.assert_allclose(
        tg.jacobian(tg.grad(f), backend=backend)(x), tg.hessian(f, backend=backend)(x), rtol=1e-12
    )


def test_any_order_by_composition():
    f = np.sin
    derivatives = [f]
    for _ in range(5):
        derivatives.append(tg.grad(derivatives[-1]))
    x = 0.7
    expected = [np.sin(x), np.cos(x), -np.sin(x), -np.cos(x), np.sin(x), np.cos(x)]
    for d, e in zip(derivatives, expected, strict=True):
        np.testing.assert_allclose(d(x), e, rtol=1e-12)


# ---- composition with jit and with other decorated functions


def test_jit_of_grad_and_grad_of_jit(backend):
    f = lambda x: np.sum(x**3)
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(tg.jit(tg.grad(f), backend=backend)(x), 3 * x**2)
    np.testing.assert_allclose(tg.grad(tg.jit(f), backend=backend)(x), 3 * x**2)


def test_hessian_of_function_calling_a_decorated_function(backend):
    inner = tg.jit(lambda x: np.sum(np.exp(x)))
    outer = lambda x: inner(x) * 2.0
    x = np.array([0.0, 1.0])
    np.testing.assert_allclose(tg.hessian(outer, backend=backend)(x), np.diag(2 * np.exp(x)))


def test_grad_inside_traced_function_closing_over_tracer(backend):
    def outer(x):
        inner = tg.grad(lambda y: np.sum(x * y**2))  # d/dy = 2 x y
        return np.sum(inner(x))  # = sum(2 x^2)

    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(tg.grad(outer, backend=backend)(x), 4 * x)


def test_jit_static_argnums(backend):
    f = tg.jit(lambda x, n: x * n if n > 1 else x, static_argnums=1, backend=backend)
    assert f(2.0, 3) == 6.0
    assert f(2.0, 1) == 2.0


# ---- stop_gradient and custom_vjp


def test_stop_gradient(backend):
    g = tg.grad(lambda x: x * tg.stop_gradient(x), backend=backend)(3.0)
    assert g == 3.0
    assert tg.stop_gradient(np.ones(2)).shape == (2,)


@tg.custom_vjp
def softplus(x):
    return np.log1p(np.exp(x))


def _softplus_fwd(x):
    return np.log1p(np.exp(x)), (x,)


def _softplus_bwd(residuals, g):
    (x,) = residuals
    return (g / (1.0 + np.exp(-x)),)


softplus.defvjp(_softplus_fwd, _softplus_bwd)


def test_custom_vjp_rule_is_used_and_differentiable_again(backend):
    x = np.array([-1.0, 0.0, 2.0])
    sig = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(tg.grad(lambda x: np.sum(softplus(x)), backend=backend)(x), sig)
    hess = tg.hessian(lambda x: np.sum(softplus(x)), backend=backend)(x)
    np.testing.assert_allclose(hess, np.diag(sig * (1 - sig)), rtol=1e-12)
    np.testing.assert_allclose(softplus(x), np.log1p(np.exp(x)))  # outside a trace: plain call


def test_custom_vjp_rule_really_replaces_the_derivative(backend):
    @tg.custom_vjp
    def clip_gradient(x):
        return x

    clip_gradient.defvjp(lambda x: (x, ()), lambda res, g: (np.clip(g, -1.0, 1.0),))
    g = tg.grad(lambda x: np.sum(5.0 * clip_gradient(x)), backend=backend)(np.ones(3))
    np.testing.assert_array_equal(g, np.ones(3))  # 5 clipped to 1


def test_custom_vjp_without_rule_is_a_clear_error():
    @tg.custom_vjp
    def f(x):
        return x

    with pytest.raises(TypeError, match="defvjp"):
        tg.grad(f)(1.0)


def test_custom_vjp_wrong_cotangent_shape():
    @tg.custom_vjp
    def f(x):
        return x * 2

    f.defvjp(lambda x: (x * 2, ()), lambda res, g: (np.sum(g),))
    with pytest.raises(ValueError, match="shape"):
        tg.grad(lambda x: np.sum(f(x)))(np.ones(3))


G = np.array([1.0, 2.0, 3.0])


def test_custom_vjp_closing_over_a_traced_value_is_refused():
    # the closed-over w got a zero gradient silently: bwd gives cotangents for arguments only
    def loss(x, w):
        @tg.custom_vjp
        def scale(x):
            return x * w

        scale.defvjp(lambda x: (x * w, None), lambda res, ct: (ct * 2.0,))
        return np.sum(scale(x))

    x = np.array([0.3, -0.7, 1.2])
    with pytest.raises(tg.TracingError, match="Pass it as an argument"):
        tg.grad(loss, argnums=1, backend="numpy")(x, 2.0)

    @tg.custom_vjp
    def times_global(x):  # a constant from a global is fine
        return x * G

    times_global.defvjp(lambda x: (x * G, G * 2.0), lambda g2, ct: (ct * g2,))
    got = tg.grad(lambda x: np.sum(times_global(x)), backend="numpy")(x)
    np.testing.assert_array_equal(got, G * 2.0)


# ---- NaN-safe gradients through np.where


@pytest.mark.parametrize(
    "branch",
    [np.sqrt, np.log, lambda x: 1.0 / x, lambda x: x**0.5, np.arcsin],
    ids=["sqrt", "log", "div", "pow", "arcsin"],
)
def test_where_does_not_leak_nan_from_the_untaken_branch(branch, backend):
    f = lambda x: np.sum(np.where(x > 0.5, branch(x), 0.0))
    x = np.array([0.0, 0.75])
    for order, transform in enumerate(
        [tg.grad(f, backend=backend), tg.hessian(f, backend=backend)]
    ):
        out = transform(x)
        assert np.all(np.isfinite(out)), (order, out)
        assert out.flat[0] == 0.0


def test_where_sqrt_gradient_exact_values(backend):
    g = tg.grad(lambda x: np.sum(np.where(x > 0, np.sqrt(x), 0.0)), backend=backend)(
        np.array([0.0, 4.0])
    )
    np.testing.assert_array_equal(g, [0.0, 0.25])
    third = tg.jacobian(
        tg.hessian(lambda x: np.sum(np.where(x > 0, np.sqrt(x), 0.0))), backend=backend
    )
    assert np.all(np.isfinite(third(np.array([0.0, 4.0]))))


# ---- caching and re-tracing


def test_traced_once_per_signature(backend):
    f = tg.grad(lambda x: np.sum(x**2), backend=backend)
    for _ in range(3):
        f(np.ones(3))
    assert f.trace_count == 1
    f(np.ones(4))
    assert f.trace_count == 2
    f(np.ones(3, np.float32))
    assert f.trace_count == 3
    f(np.ones(3))
    assert f.trace_count == 3


def test_hessian_built_inline_in_a_loop_does_not_retrace(backend):
    def f(x):
        return np.sum(x**4)

    x = np.ones(3)
    tg.hessian(f, backend=backend)(x)
    before = tg.hessian(f, backend=backend).trace_count
    for _ in range(3):
        tg.hessian(f, backend=backend)(x)
    assert tg.hessian(f, backend=backend).trace_count == before == 1


def test_retrace_log_names_the_change(monkeypatch, caplog):
    monkeypatch.setenv("TRACEGRAD_LOG", "retrace")
    f = tg.grad(lambda x, y: np.sum(x * y))
    with caplog.at_level(logging.INFO, logger="tracegrad"):
        f(np.ones(3), np.ones(3))
        f(np.ones(4), np.ones(4))
    messages = [r.getMessage() for r in caplog.records]
    assert any("argument 0 changed shape (3,) -> (4,)" in m for m in messages), messages


def test_inputs_are_never_modified_and_results_never_alias(backend):
    x = np.arange(4.0)
    saved = x.copy()
    y = tg.jit(lambda x: x, backend=backend)(x)
    y[0] = 100.0
    np.testing.assert_array_equal(x, saved)
    tg.grad(lambda x: np.sum(x**2), backend=backend)(x)
    np.testing.assert_array_equal(x, saved)


def test_non_contiguous_read_only_empty_and_0d_inputs(backend):
    base = np.arange(12.0).reshape(3, 4)
    view = base[:, ::2].T  # non-contiguous
    view.flags.writeable = False
    g = tg.grad(lambda x: np.sum(x**2), backend=backend)(view)
    np.testing.assert_array_equal(g, 2 * view)
    assert tg.grad(lambda x: np.sum(x**2), backend=backend)(np.zeros(0)).shape == (0,)
    assert tg.grad(lambda x: x**2, backend=backend)(np.array(3.0)) == 6.0


def test_integer_arrays_may_be_passed_but_not_differentiated(backend):
    g = tg.grad(lambda x, idx: np.sum(x * idx), backend=backend)(np.ones(3), np.arange(3))
    np.testing.assert_array_equal(g, [0, 1, 2])


# ---- make_ir


def test_make_ir_prints_one_node_per_line_with_types_and_sources():
    def f(x):
        return np.sin(x) * 2.0

    text = str(tg.make_ir(f)(np.ones(3)))
    assert text.splitlines()[0] == "graph(%0:f64[3]) {"
    assert "= sin %0" in text and "test_api.py:" in text
    grad_text = str(tg.make_ir(tg.grad(lambda x: np.sum(f(x))))(np.ones(3)))
    assert "cos" in grad_text and "grad test_api.py:" in grad_text


def test_make_ir_graphs_are_comparable_and_hashable():
    f = lambda x: np.exp(x) + 1.0
    g1, g2 = tg.make_ir(f)(np.ones(2)), tg.make_ir(f)(np.ones(2))
    assert g1 == g2 and hash(g1) == hash(g2)
    assert g1 != tg.make_ir(f)(np.ones(3))


def test_grad_of_grad_graph_does_not_grow_needlessly():
    f = lambda x: np.sum(np.sin(x))
    sizes = []
    g = f
    for _ in range(4):
        g = tg.grad(g) if g is f else tg.grad(lambda x, g=g: np.sum(g(x)))
        sizes.append(len(tg.make_ir(g)(np.ones(3)).nodes))
    # sin -> cos -> -sin -> -cos: each order stays a handful of nodes
    assert max(sizes) <= 5, sizes


def test_tracegrad_numpy_namespace():
    import tracegrad.numpy as tnp

    assert tg.grad(lambda x: tnp.sum(tnp.sin(x)))(np.zeros(2)).tolist() == [1.0, 1.0]
    with pytest.raises(AttributeError):
        tnp.fft  # noqa: B018


def test_unknown_backend_is_a_clear_error(monkeypatch):
    with pytest.raises(tg.BackendError, match="unknown backend 'tpu'"):
        tg.grad(lambda x: x, backend="tpu")
    monkeypatch.setenv("TRACEGRAD_BACKEND", "quantum")
    with pytest.raises(tg.BackendError, match="quantum"):
        tg.grad(lambda x: x * x)(1.0)


def test_custom_vjp_function_may_call_itself_in_its_forward_rule(backend):
    @tg.custom_vjp
    def square(x):
        return x**2

    square.defvjp(lambda x: (square(x), x), lambda x, ct: (2 * x * ct,))
    assert tg.grad(square, backend=backend)(3.0) == 6.0
    assert tg.grad(tg.grad(square), backend=backend)(3.0) == 2.0


def test_x_to_the_zero_folds_to_one():
    graph = tg.make_ir(lambda x: np.sum(x**0 + x))(np.ones(2))
    assert "integer_pow" not in str(graph)


def test_check_grad_of_a_function_that_writes_into_its_argument():
    # check_grad passed views of its flat vector: the write was refused as one into a view
    def f(x):
        x[0] = 2.0
        return np.sum(x**2)

    assert tg.check_grad(f, np.array([0.5, 1.5]), backend="numpy")
    with pytest.raises(
        TypeError, match=r"^grad\(\S*<lambda>\) needs a function that returns one number"
    ):
        tg.check_grad(lambda x: x, np.ones(2), backend="numpy")


def test_grad_takes_an_output_of_one_element_of_any_shape(backend):
    """As PyTorch's backward() and autograd's grad: an output of shape (1,) or (1, 1) is one
    number; value_and_grad keeps the value's shape."""
    f = lambda x: np.sum(x**2, keepdims=True)
    x = np.arange(3.0)
    np.testing.assert_array_equal(tg.grad(f, backend=backend)(x), 2 * x)
    value, g = tg.value_and_grad(f, backend=backend)(x)
    assert value.shape == (1,)
    np.testing.assert_array_equal(g, 2 * x)
    np.testing.assert_array_equal(
        tg.hessian(lambda x: np.sum(x**3).reshape(1, 1), backend=backend)(x), np.diag(6 * x)
    )
    with pytest.raises(
        TypeError, match=r"one number \(0-d, or of size 1\), but it returned \(3,\)"
    ):
        tg.grad(lambda x: x * 2.0, backend=backend)(x)
