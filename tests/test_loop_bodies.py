"""Loop bodies written out so that their loops run natively (cpu/loop_bodies.py): small
cholesky and solves as arithmetic, strided unslices as concatenations, and tiny products as
fused sums (passes.py). Checked against the reference interpreter and finite differences, on
both cpu compilers, with the native loop driver required where it applies."""

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.cpu import loop_bodies
from tracegrad.transforms import scan as scans

COMPILERS = ["llvm", "numba"]


@pytest.fixture(params=COMPILERS)
def compiler(request, monkeypatch):
    monkeypatch.setenv("TRACEGRAD_CPU_COMPILER", request.param)
    return request.param


def native_loops_only(monkeypatch):
    """Fail a loop that falls back to calling its body program once per step from Python."""

    def refuse(*args, **kwargs):
        raise AssertionError("the loop ran its body from Python, step by step")

    monkeypatch.setattr(scans, "run_scan", refuse)


def spd(rng, n, shift=1.0):
    m = rng.standard_normal((n, n))
    return m @ m.T + shift * np.eye(n)


def fd_grad(f, x, eps=1e-6):
    flat = x.ravel()
    out = np.zeros_like(flat)
    for i in range(flat.size):
        e = np.zeros_like(flat)
        e[i] = eps
        out[i] = (f((flat + e).reshape(x.shape)) - f((flat - e).reshape(x.shape))) / (2 * eps)
    return out.reshape(x.shape)


def filter_loss(n, steps, rhs_shape):
    """A loop whose every step factorises, solves with the factor, and solves generally."""
    rng = np.random.default_rng(n)
    A = rng.standard_normal((n, n)) * 0.3
    ys = rng.standard_normal((steps,) + rhs_shape)

    def loss(m0, Q):
        m, P, total = m0, np.eye(n), 0.0
        for t in range(steps):
            P = A @ P @ A.T + Q
            L = np.linalg.cholesky(P)
            v = ys[t] - (m if len(rhs_shape) == 1 else m[:, None])
            z = np.linalg.solve(L, v)
            g = np.linalg.solve(P + 0.5 * np.eye(n), v)
            total = total + np.sum(z * z) + np.sum(np.log(np.diag(L))) + 0.1 * np.sum(g)
            m = A @ m + 0.1 * np.sum(g) * np.ones(n)
        return total

    return loss


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("rhs", ["vector", "matrix"])
def test_a_filter_loop_runs_natively_and_matches_the_interpreter(n, rhs, compiler, monkeypatch):
    rhs_shape = (n,) if rhs == "vector" else (n, 3)
    loss = filter_loss(n, 12, rhs_shape)
    rng = np.random.default_rng(10 + n)
    m0, Q = rng.standard_normal(n), spd(rng, n, 0.5)
    want_value = tg.jit(loss, backend="numpy")(m0, Q)
    want = tg.grad(loss, argnums=(0, 1), backend="numpy")(m0, Q)
    if compiler == "llvm":
        native_loops_only(monkeypatch)
    got_value = tg.jit(loss, backend="cpu")(m0, Q)
    got = tg.grad(loss, argnums=(0, 1), backend="cpu")(m0, Q)
    np.testing.assert_allclose(got_value, want_value, rtol=1e-11)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(got[0], fd_grad(lambda m: loss(m, Q), m0), rtol=1e-5, atol=1e-6)


def test_both_compilers_give_the_same_bits():
    loss = filter_loss(3, 10, (3, 2))
    rng = np.random.default_rng(5)
    m0, Q = rng.standard_normal(3), spd(rng, 3, 0.5)
    results = []
    with pytest.MonkeyPatch.context() as mp:
        for name in COMPILERS:
            mp.setenv("TRACEGRAD_CPU_COMPILER", name)
            results.append(tg.grad(loss, argnums=(0, 1), backend="cpu")(m0, Q))
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(a, b)


def scan_of(step_fun):
    def run(init, xs):
        carry, ys = tg.scan(step_fun, init, xs)
        return np.sum(carry) + np.sum(ys)

    return run


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_general_solves_pivot_like_lapack(n, compiler, monkeypatch):
    """Matrices whose largest entry in a column is below the diagonal, ties, zeros on the
    diagonal: elimination without pivoting would divide by zero or lose every digit."""
    rng = np.random.default_rng(n)
    base = rng.standard_normal((n, n))
    mats = [np.eye(n)[::-1].copy() + 1e-3 * base, base, np.triu(base, 1) + np.tril(base, -1)]
    mats[-1] += np.eye(n)[::-1] * 2.0
    mats.append(np.ones((n, n)) + np.diag(np.arange(1.0, n + 1)))  # ties in the first column
    xs = np.stack(mats)
    rhs = rng.standard_normal(n)

    def step(x, a):
        y = np.linalg.solve(a, x)
        return x * 0.5 + 0.01 * y, y

    if compiler == "llvm":
        native_loops_only(monkeypatch)
    f = scan_of(step)
    got = tg.jit(f, backend="cpu")(rhs, xs)
    want = f(rhs, xs)
    np.testing.assert_allclose(got, want, rtol=1e-11)
    got_ys = tg.jit(lambda x, a: tg.scan(step, x, a)[1], backend="cpu")(rhs, xs)
    want_ys = np.stack([np.linalg.solve(a, x) for x, a in _walk(step, rhs, xs)])
    np.testing.assert_allclose(got_ys, want_ys, rtol=1e-10, atol=1e-12)


def _walk(step, x, xs):
    for a in xs:
        yield x, a
        x, _ = step(x, a)


def test_a_cholesky_that_fails_in_a_loop_raises_numpys_error(compiler):
    def step(P, q):
        L = np.linalg.cholesky(P - q * np.eye(2))
        return P + 0.1 * L @ L.T, np.sum(L)

    P0 = spd(np.random.default_rng(0), 2, 1.0)
    f = tg.jit(lambda P, qs: tg.scan(step, P, qs)[1], backend="cpu")
    np.testing.assert_allclose(
        f(P0, np.zeros(4)),
        tg.jit(lambda P, qs: tg.scan(step, P, qs)[1], backend="numpy")(P0, np.zeros(4)),
    )
    with pytest.raises(np.linalg.LinAlgError):
        f(P0, np.array([0.0, 0.0, 100.0, 0.0]))  # step 3's matrix is not positive definite


def test_a_singular_solve_in_a_loop_raises_numpys_error(compiler, monkeypatch):
    def step(x, a):
        return np.linalg.solve(a, x), np.sum(x)

    f = tg.jit(lambda x, xs: tg.scan(step, x, xs)[0], backend="cpu")
    good = np.stack([np.eye(3) * 2.0] * 3)
    np.testing.assert_allclose(f(np.ones(3), good), np.ones(3) / 8)
    bad = good.copy()
    bad[1] = np.ones((3, 3))
    with pytest.raises(np.linalg.LinAlgError):
        f(np.ones(3), bad)
    # and on a first call that compiles before it returns (no interpreter answering it)
    monkeypatch.setenv("TRACEGRAD_TIERED", "0")
    first = tg.jit(lambda x, xs: tg.scan(step, x, xs)[0] * 2.0, backend="cpu")
    with pytest.raises(np.linalg.LinAlgError):
        first(np.ones(3), bad)


def test_a_nan_that_is_not_a_failure_is_returned(compiler):
    def step(x, a):
        y = np.linalg.solve(a, x)
        return y, np.log(y[0])  # log of a negative number: NaN, not an error

    f = tg.jit(lambda x, xs: tg.scan(step, x, xs)[1], backend="cpu")
    xs = np.stack([np.eye(2) * 2.0, -np.eye(2)])
    got = f(np.ones(2), xs)
    assert np.isnan(got[1]) and got[0] == np.log(0.5)
    assert np.isnan(f(np.ones(2), xs)[1])  # and again


def test_strided_unslices_are_spread_out(rng):
    """np.diag(M)'s adjoint writes every (n+1)-th element of the flattened matrix."""
    from tracegrad import primitives as P
    from tracegrad.ir import Builder, building

    b = Builder()
    x = b.new_input((3, 2), np.float64)
    with building(b):
        out = P.emit(P.unslice_p, x, shape=(8, 4), index=((1, 8, 3), (3, -1, -2)))
    graph = b.graph([out])
    written, linalg = loop_bodies.unrolled(graph)
    assert not linalg and not any(
        n.prim is P.unslice_p and n.params["index"][0][2] == 3 for n in written.nodes
    )
    from tracegrad import interpreter

    value = rng.standard_normal((3, 2))
    np.testing.assert_array_equal(
        interpreter.evaluate(written, [value])[0], interpreter.evaluate(graph, [value])[0]
    )


def test_tiny_products_are_fused_sums(rng):
    """A 4 x 4 product in a loop is a reduction of a kernel, not a BLAS call per step."""
    a = rng.standard_normal((4, 4)) * 0.3

    def f(x):
        for _ in range(8):
            x = np.tanh(a @ x @ a.T + x)
        return np.sum(x)

    text = tg.make_kernels(tg.grad(f), backend="cpu")(np.eye(4))
    assert "matmul" not in text.split("# ---- kernel")[0]
    x = rng.standard_normal((4, 4))
    np.testing.assert_allclose(
        tg.grad(f, backend="cpu")(x), tg.grad(f, backend="numpy")(x), rtol=1e-12
    )
