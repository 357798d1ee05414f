"""tracegrad.scipy.integrate.odeint: SciPy's values on traced inputs, reverse-mode derivatives in
y0, t and the leaves of args by the adjoint method (against central differences of SciPy's own
solutions), and the refusals: forward mode and higher orders, a func that closes over a traced
value, full_output."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.integrate

import tracegrad as tg
from tracegrad.base.errors import TracingError
from tracegrad.runtime import program_cache
from tracegrad.scipy.integrate import odeint

BACKENDS = ("numpy", "cpu")
TIGHT = {"rtol": 1e-10, "atol": 1e-10}  # so that the adjoint's cotangents are accurate
T = np.linspace(0.0, 1.0, 4)
Y0 = np.array([1.0, 0.5])
A = np.array([[-0.3, 1.0], [-1.0, -0.2]])
B = np.array([0.1, -0.2])


def damped(y, t, a, b):
    return np.tanh(y @ a) + b * t


def net(y, t, params):
    for w, b in params:
        out = np.dot(y, w) + b
        y = np.tanh(out)
    return out


def _params():
    rng = np.random.default_rng(0)
    return [
        (rng.normal(size=(2, 3)) * 0.5, rng.normal(size=3) * 0.1),
        (rng.normal(size=(3, 2)) * 0.5, rng.normal(size=2) * 0.1),
    ]


def _loss(solve, y0, t, a, b):
    return np.sum(np.sin(solve(damped, y0, t, (a, b), **TIGHT)) * np.arange(1, 3))


def _scipy_odeint(func, y0, t, args=(), **kwargs):
    return scipy.integrate.odeint(func, y0, t, args=args, **kwargs)


def central_differences(f, args, k, eps=1e-5):
    """d f / d args[k], shaped f's value + args[k]'s."""
    columns = []
    for index in np.ndindex(args[k].shape):
        up, down = [a.copy() for a in args], [a.copy() for a in args]
        up[k][index] += eps
        down[k][index] -= eps
        columns.append((f(*up) - f(*down)) / (2 * eps))
    stacked = np.stack(columns, axis=-1)
    return stacked.reshape(stacked.shape[:-1] + args[k].shape)


@pytest.mark.parametrize("backend", BACKENDS)
def test_values_are_scipys_bit_for_bit(backend):
    want = scipy.integrate.odeint(damped, Y0, T, args=(A, B), rtol=0.01)
    got = tg.jit(lambda y0, a: odeint(damped, y0, T, (a, B), rtol=0.01), backend=backend)(Y0, A)
    np.testing.assert_array_equal(got, want)
    params = _params()
    want = scipy.integrate.odeint(net, Y0, T, args=(params,))
    got = tg.jit(lambda p: odeint(net, Y0, T, tuple((p,))), backend=backend)(params)
    np.testing.assert_array_equal(got, want)


def test_plain_arrays_call_scipy():
    want = scipy.integrate.odeint(damped, Y0, T, args=(A, B), full_output=True)
    got = odeint(damped, Y0, T, (A, B), full_output=True)
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_in_y0_t_and_args_match_central_differences(backend):
    args = [Y0, T, A, B]
    grads = tg.grad(lambda *a: _loss(odeint, *a), argnums=(0, 1, 2, 3), backend=backend)(*args)
    for k, got in enumerate(grads):
        want = central_differences(lambda *a: _loss(_scipy_odeint, *a), args, k)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradients_in_a_list_of_tuples(backend):
    params = _params()

    def loss(params, y0):
        return np.mean(np.abs(odeint(net, y0, T, tuple((params,)), **TIGHT) - 0.3))

    value, (g_params, g_y0) = tg.value_and_grad(loss, argnums=(0, 1), backend=backend)(params, Y0)
    assert [(gw.shape, gb.shape) for gw, gb in g_params] == [((2, 3), (3,)), ((3, 2), (2,))]
    flat = [Y0] + [x for layer in params for x in layer]

    def plain(y0, w1, b1, w2, b2):
        out = scipy.integrate.odeint(net, y0, T, args=([(w1, b1), (w2, b2)],), **TIGHT)
        return np.mean(np.abs(out - 0.3))

    np.testing.assert_allclose(value, plain(*flat), rtol=1e-14)  # the mean: the backend's sum
    got = [g_y0] + [x for layer in g_params for x in layer]
    for k in range(len(flat)):
        want = central_differences(plain, flat, k)
        np.testing.assert_allclose(got[k], want, rtol=1e-6, atol=1e-8)


def test_scalar_y0_tfirst_and_integer_times():
    def final(k):
        return odeint(lambda t, y, k: -k * y, 1.0, np.arange(3), (k,), tfirst=True, **TIGHT)[-1, 0]

    np.testing.assert_allclose(tg.grad(final)(0.5), -2 * np.exp(-1.0), rtol=1e-8)
    g = tg.grad(lambda y0: np.sum(odeint(lambda y, t: -y, y0, np.arange(3), **TIGHT)))(1.0)
    np.testing.assert_allclose(g, 1 + np.exp(-1) + np.exp(-2), rtol=1e-8)


def test_jacobian_and_vmap_solve_each_example():
    params = _params()

    def solve(y0):
        return odeint(net, y0, T, (params,), **TIGHT)

    jac = tg.jacobian(solve)(Y0)
    want = central_differences(
        lambda y: scipy.integrate.odeint(net, y, T, args=(params,), **TIGHT), [Y0], 0
    )
    np.testing.assert_allclose(jac, want, rtol=1e-6, atol=1e-8)
    starts = np.array([[1.0, 0.0], [0.5, 0.2], [0.0, 1.0]])
    want = np.stack([scipy.integrate.odeint(net, y, T, args=(params,), **TIGHT) for y in starts])
    np.testing.assert_array_equal(tg.vmap(solve)(starts), want)


@pytest.mark.parametrize(
    "transform",
    [
        lambda f: tg.hessian(f)(Y0),
        lambda f: tg.jvp(f, (Y0,), (np.ones(2),)),
        lambda f: tg.grad(lambda y: np.sum(tg.grad(f)(y)))(Y0),
    ],
    ids=["hessian", "jvp", "grad of grad"],
)
def test_forward_mode_and_second_derivatives_are_refused(transform):
    def f(y0):
        return _loss(odeint, y0, T, A, B)

    with pytest.raises(TracingError, match=r"forward mode .* second or higher derivatives"):
        transform(f)


def test_a_func_closing_over_a_traced_value_is_refused():
    def through_closure(y0, k):
        return np.sum(odeint(lambda y, t: -k * y, y0, T))

    with pytest.raises(TracingError, match="reads a traced value from outside its arguments"):
        tg.grad(through_closure)(Y0, 0.5)
    with pytest.raises(TracingError, match=r"Pass it through odeint's args"):
        tg.grad(lambda k: np.sum(odeint(lambda y, t: -k * y, Y0, T)))(0.5)
    # a global array read by func is fine: func reads it itself at run time
    g = tg.grad(lambda y0: np.sum(odeint(lambda y, t: y @ A, y0, T, **TIGHT)))(Y0)
    want = central_differences(
        lambda y: np.sum(scipy.integrate.odeint(lambda y, t: y @ A, y, T, **TIGHT)), [Y0], 0
    )
    np.testing.assert_allclose(g, want, rtol=1e-6)


def test_full_output_is_refused_on_traced_values():
    with pytest.raises(TracingError, match="full_output is not supported on traced values"):
        tg.jit(lambda y0: odeint(damped, y0, T, (A, B), full_output=True))(Y0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'rtl'"):
        odeint(damped, Y0, T, (A, B), rtl=0.1)


def test_a_program_with_odeint_is_not_persisted(monkeypatch, tmp_path):
    monkeypatch.setenv("TRACEGRAD_PROGRAM_CACHE", "1")
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", str(tmp_path / "cache"))
    saved = []  # (whether the graph runs odeint, whether it was written)
    save = program_cache.save

    def recording(fun, static, key, graph, *rest):
        written = save(fun, static, key, graph, *rest)
        saved.append((any(n.prim.name.startswith("odeint") for n in graph.nodes), written))
        return written

    monkeypatch.setattr(program_cache, "save", recording)
    tg.clear_programs()
    try:
        g = tg.grad(lambda y0: _loss(odeint, y0, T, A, B), backend="numpy")
        assert np.all(np.isfinite(g(Y0)))
        # the program holding odeint is kept in memory only; func's own vjp may be written
        assert (True, False) in saved and (True, True) not in saved
    finally:
        tg.clear_programs()


def test_the_ir_names_the_system():
    text = str(tg.make_ir(lambda y0: odeint(damped, y0, T, (A, B), rtol=0.01))(Y0))
    assert "odeint[batch=0, system=odeint(damped@" in text and "rtol=0.01" in text


def test_import_tracegrad_does_not_import_scipy():
    code = "import sys, tracegrad; print('scipy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
