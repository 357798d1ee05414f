"""tg.tap: gradients of intermediate values, and hooks that observe them."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import BACKENDS
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from test_properties import BINARY, UNARY, step

import tracegrad as tg
from tracegrad import passes


def tutorial_loss(w, x, b):
    y = tg.tap(w * x + b, "y")
    return (y - 5.0) ** 2


def test_tutorial_gradient_at_y(backend):
    grads, taps = tg.grad(tutorial_loss, argnums=(0, 1, 2), taps=True, backend=backend)(
        2.0, 3.0, 1.0
    )
    assert tuple(float(g) for g in grads) == (12.0, 8.0, 4.0)
    assert list(taps) == ["y"] and taps["y"] == 4.0 and taps["y"].shape == ()


def test_value_and_grad_with_taps(backend):
    (value, g), taps = tg.value_and_grad(tutorial_loss, taps=True, backend=backend)(2.0, 3.0, 1.0)
    assert (float(value), float(g), float(taps["y"])) == (4.0, 12.0, 4.0)


def test_tap_outside_a_trace_is_the_value():
    x = np.ones(3)
    assert tg.tap(x, "x") is x


def test_tapped_value_keeps_shape_and_dtype(backend):
    def f(x):
        h = tg.tap(np.tanh(x), "h")
        return np.sum(h * h)

    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    _, taps = tg.grad(f, taps=True, backend=backend)(x)
    assert taps["h"].shape == (2, 3) and taps["h"].dtype == np.float32
    np.testing.assert_allclose(taps["h"], 2 * np.tanh(x), rtol=1e-6)


def test_unused_tap_has_zero_gradient(backend):
    def f(x):
        tg.tap(x * 3.0, "unused")
        return np.sum(x)

    _, taps = tg.grad(f, taps=True, backend=backend)(np.ones(2))
    np.testing.assert_array_equal(taps["unused"], [0.0, 0.0])


def test_hooks_run_once_per_call_with_names_shapes_and_values(backend):
    seen = []

    def f(w, x):
        h1 = tg.tap(np.tanh(x @ w), "layer1", hook=lambda name, ct: seen.append((name, ct.copy())))
        return np.sum(h1**2)

    w, x = np.full((3, 2), 0.1), np.ones((4, 3))
    g = tg.grad(f, backend=backend)
    for call in range(3):
        g(w, x)
        assert len(seen) == call + 1
    name, ct = seen[-1]
    assert name == "layer1" and ct.shape == (4, 2)
    np.testing.assert_allclose(ct, 2 * np.tanh(x @ w))
    assert g.trace_count == 1


def test_a_raising_hook_propagates_and_leaves_the_cache_intact(backend):
    calls = []

    def hook(name, ct):
        calls.append(name)
        if len(calls) == 1:
            raise RuntimeError("boom")

    def f(x):
        return np.sum(tg.tap(x * 2.0, "h", hook=hook) ** 2)

    g = tg.grad(f, backend=backend)
    with pytest.raises(RuntimeError, match="boom"):
        g(np.ones(2))
    np.testing.assert_array_equal(g(np.ones(2)), [8.0, 8.0])
    assert calls == ["h", "h"] and g.trace_count == 1


def test_a_hook_returning_a_value_points_to_custom_vjp():
    def f(x):
        return np.sum(tg.tap(x, "h", hook=lambda name, ct: ct * 2))

    with pytest.raises(TypeError, match="custom_vjp"):
        tg.grad(f)(np.ones(2))


def test_same_name_twice_is_an_error_and_loops_need_distinct_names():
    def f(x):
        for _ in range(2):
            x = tg.tap(np.sin(x), "h")
        return np.sum(x)

    with pytest.raises(ValueError, match="used twice"):
        tg.grad(f)(np.ones(2))

    def g(x):
        for i in range(3):
            x = tg.tap(np.sin(x), f"h{i}")
        return np.sum(x)

    _, taps = tg.grad(g, taps=True)(np.ones(2))
    assert list(taps) == ["h0", "h1", "h2"]


def test_bad_tap_arguments():
    with pytest.raises(TypeError, match="non-empty"):
        tg.grad(lambda x: tg.tap(x, ""))(1.0)
    with pytest.raises(TypeError, match="callable"):
        tg.grad(lambda x: tg.tap(x, "h", hook=3))(1.0)
    with pytest.raises(ValueError, match="taps=True"):
        tg.Transformed(lambda x: x, "jacobian", taps=True)


def test_taps_with_jit_and_inside_higher_order(backend):
    seen = []

    def f(x):
        h = tg.tap(x**3, "cube", hook=lambda name, ct: seen.append(float(ct)))
        return 2.0 * h

    # grad of a jitted function: the grad owns the tap
    _, taps = tg.grad(tg.jit(f), taps=True, backend=backend)(1.5)
    assert taps["cube"] == 2.0
    # jit of grad with taps
    _, taps = tg.jit(tg.grad(f, taps=True), backend=backend)(1.5)
    assert taps["cube"] == 2.0
    # inside hessian = jacobian(grad(f)): the innermost differentiation (grad) owns the tap,
    # so the hook sees the first-order cotangent, once per call
    seen.clear()
    np.testing.assert_allclose(tg.hessian(f, backend=backend)(1.5), 12 * 1.5)
    assert seen == [2.0]
    seen.clear()
    tg.grad(tg.grad(f), backend=backend)(1.5)
    assert seen == [2.0]


def test_taps_show_in_the_ir_by_name():
    text = str(tg.make_ir(tutorial_loss)(2.0, 3.0, 1.0))
    assert "tap[" in text and "name='y'" in text


def _optimized(transformed, *args):
    static, positions, leaves, treedef = transformed.split_arguments(args)
    avals = [(np.shape(a), np.asarray(a).dtype) for a in leaves]
    graph, _, _ = transformed.build(avals, treedef, static, positions)
    return passes.optimize(graph)


def _untapped(x):
    return np.sum(np.sin(x) ** 2)


def _tapped(x):
    return np.sum(tg.tap(np.sin(x), "s") ** 2)


def test_untapped_programs_are_unchanged_by_taps():
    x = np.ones(4)
    for kind in (tg.jit, tg.grad, tg.value_and_grad):
        assert _optimized(kind(_untapped), x) == _optimized(kind(_tapped), x), kind


@pytest.mark.parametrize("backend", BACKENDS)
# derandomized: the same 20 programs on every run, so their compiled kernels come from the disk
# cache after the first run (random programs compiled afresh took 36 s of every suite run)
@settings(max_examples=20, deadline=None, derandomize=True)
@given(
    steps=st.lists(step, min_size=2, max_size=6),
    where=st.integers(0, 5),
    seed=st.integers(0, 2**16),
)
def test_tapped_gradient_equals_finite_differences_of_a_perturbation(backend, steps, where, seed):
    """d out / d tap = d out(perturbation added at the tap) / d perturbation, at 0."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, size=(2, 3))
    y = rng.uniform(-1, 1, size=(3,))
    at = where % len(steps)

    def program(x, y, delta=None):
        pool = [x, y]
        for i, s in enumerate(steps):
            if s[0] == "u":
                v = UNARY[s[1]][1](pool[s[2] % len(pool)])
            else:
                v = BINARY[s[1]][1](pool[s[2] % len(pool)], pool[s[3] % len(pool)])
            if i == at:
                v = tg.tap(v if delta is None else v + delta, "t")
            pool.append(v)
        return sum(np.sum(np.sin(v)) for v in pool[2:])

    try:
        with np.errstate(all="raise"):
            value = program(x, y)
    except (ValueError, FloatingPointError):
        assume(False)
    assume(np.isfinite(value))
    assume(all(UNARY[s[1]][0] not in ("max_first", "abs_shift") for s in steps if s[0] == "u"))
    assume(all(BINARY[s[1]][0] != "where" for s in steps if s[0] == "b"))

    _, taps = tg.grad(program, taps=True, backend=backend)(x, y)
    tapped = taps["t"]
    delta0 = np.zeros(tapped.shape)
    numeric = np.zeros(tapped.shape)
    for idx in np.ndindex(tapped.shape):
        up, down = delta0.copy(), delta0.copy()
        up[idx] += 1e-6
        down[idx] -= 1e-6
        numeric[idx] = (program(x, y, up) - program(x, y, down)) / 2e-6
    np.testing.assert_allclose(tapped, numeric, rtol=1e-5, atol=1e-6)


def test_tapped_cotangents_are_named_in_the_ir_and_in_the_kernels():
    def f(x):
        return np.sum(tg.tap(np.tanh(x), "hidden") ** 2)

    grad_ir = str(tg.make_ir(tg.grad(f, taps=True))(np.ones(4)))
    assert "named[name='hidden']" in grad_ir
    kernels = tg.make_kernels(tg.grad(f, taps=True), backend="cpu")(np.ones(4))
    assert "named[name='hidden']" in kernels
    # the named value is a result of the program (it is what the user receives)
    assert any("result" in line and "named" not in line for line in kernels.splitlines())


def test_untapped_kernels_are_unchanged_by_taps():
    x = np.ones(4)
    for kind in (tg.jit, tg.grad, tg.value_and_grad):
        a = tg.make_kernels(kind(_untapped), backend="cpu")(x)
        b = tg.make_kernels(kind(_tapped), backend="cpu")(x)
        strip = lambda text: "\n".join(line.split("#")[0] for line in text.splitlines())
        assert strip(a) == strip(b), kind
