"""Sparse Jacobians and Hessians (transforms/sparsity.py): the pattern found from the graph, the
row colouring, and results equal to the dense path's, the interpreter's and finite differences,
on functions where a pattern that missed an entry would give a wrong number."""

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import interpreter
from tracegrad.transforms import sparsity

IDX = np.array([3, 0, 7, 7, 2, 5])


def banded(x):  # tridiagonal Hessian (W3)
    return np.sum(x**3) + np.sum(x[:-1] * x[1:])


def pentadiagonal(x):
    return np.sum(np.sin(x[:-2]) * x[2:] ** 2) + np.sum(np.exp(x) * 0.5)


def blocks(x):  # 4x4 blocks on the diagonal, through reshape and a reduction along an axis
    b = x.reshape(-1, 4)
    return np.sum(np.sum(b, axis=1) ** 3) + np.sum(np.cos(b))


def rolled(x):  # a cyclic band: the corners are nonzero
    return np.sum(x * np.roll(x, 1) ** 2) + np.sum(x**4)


def gathered(x):  # a random-sparse pattern through indexing with constant indices
    return np.sum(x[IDX] * x[IDX[::-1]]) + np.sum(np.tanh(x))


def scanned(x):  # a running sum: every entry below the diagonal band too (dense path)
    return np.sum(np.cumsum(x) ** 2)


def products(x):  # batched 2x2 matrix products: block-diagonal
    m = x.reshape(-1, 2, 2)
    return np.sum((m @ m) ** 2)


def broadcast(x):  # an outer product inside blocks: x[:, :, None] * x[:, None, :]
    b = x.reshape(-1, 3)
    return np.sum(np.sin(b[:, :, None] * b[:, None, :]))


def arrow(x):  # the first row and column are full: as many colours as rows (dense path)
    return x[0] * np.sum(x**2) + np.sum(x**3)


def dense(x):
    return np.sum(x) ** 3


SPARSE = [banded, pentadiagonal, blocks, rolled, gathered, products, broadcast]
DENSE = [arrow, dense, scanned]


def _dense_reference(fun, x):
    """The Hessian by one seed per row (the dense path), run by the interpreter."""
    sparsity.ENABLED = False
    try:
        graph = tg.make_ir(tg.hessian(fun))(x)
    finally:
        sparsity.ENABLED = True
    return interpreter.evaluate(graph, [x])[0]


def _finite_differences(fun, x, eps=1e-6):
    g = tg.grad(fun, backend="numpy")
    h = np.empty((x.size, x.size))
    for k in range(x.size):
        e = np.zeros_like(x)
        e[k] = eps
        h[:, k] = (g(x + e) - g(x - e)) / (2 * eps)
    return h


@pytest.mark.parametrize("fun", SPARSE + DENSE, ids=lambda f: f.__name__)
@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_hessian_equals_the_dense_path(fun, backend):
    x = np.random.default_rng(3).standard_normal(12)
    before = x.copy()
    got = tg.hessian(fun, backend=backend)(x)
    np.testing.assert_array_equal(x, before)  # the argument is not modified
    want = _dense_reference(fun, x)
    assert got.shape == want.shape == (12, 12)
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(got, _finite_differences(fun, x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("fun", SPARSE, ids=lambda f: f.__name__)
def test_sparse_functions_take_fewer_seeds(fun):
    x = np.random.default_rng(4).standard_normal(24)
    text = str(tg.make_ir(tg.hessian(fun))(x))
    assert "sparse jacobian:" in text
    h = _dense_reference(fun, x)
    graph = tg.make_ir(tg.grad(fun))(x)
    c = sparsity.colouring(graph, 0, [0])
    found = c.pattern.dense()
    assert not np.any((h != 0) & ~found)  # the pattern holds every nonzero entry
    assert c.n_colours < 12
    for colour in range(c.n_colours):  # rows of one colour share no column
        rows = found[c.colour == colour]
        assert np.all(rows.sum(axis=0) <= 1)


@pytest.mark.parametrize("fun", DENSE, ids=lambda f: f.__name__)
def test_dense_functions_keep_the_dense_path(fun):
    x = np.random.default_rng(5).standard_normal(10)
    assert "sparse jacobian:" not in str(tg.make_ir(tg.hessian(fun))(x))


def test_make_ir_shows_the_colouring_of_a_band():
    text = str(tg.make_ir(tg.hessian(banded))(np.ones(50)))
    assert "sparse jacobian: 3 colours for 50 rows, 148 of 2500 entries" in text
    graph = tg.make_ir(tg.grad(banded))(np.ones(50))
    c = sparsity.colouring(graph, 0, [0])
    i = np.arange(50)
    tri = np.abs(i[:, None] - i[None, :]) <= 1
    np.testing.assert_array_equal(c.pattern.dense(), tri)  # exactly the band
    np.testing.assert_array_equal(c.colour, i % 3)


def test_w3_at_size_1000_matches_the_closed_form():
    """At this size the band is 2998 of 10^6 entries: the fill scatters them into new zeros
    (no loop over the whole result), and the result is handed over without a copy."""
    from tracegrad import fusion
    from tracegrad.cpu import program as cpu_program

    x = np.random.default_rng(2).standard_normal(1000)
    graph = tg.make_ir(tg.hessian(banded))(x)
    plan = fusion.plan(graph)
    assert not [s for s in plan.loops if s.shape == (1000, 1000)]
    assert cpu_program.build(graph).fresh_outputs == (True,)
    small = fusion.plan(tg.make_ir(tg.hessian(banded))(x[:100]))
    assert [s.shape for s in small.loops] == [(3, 100), (100, 100)]  # small: one fused fill
    h = tg.hessian(banded, backend="cpu")(x)
    want = np.diag(6 * x)
    i = np.arange(999)
    want[i, i + 1] = want[i + 1, i] = 1.0
    np.testing.assert_array_equal(h, want)


def _two_inputs(x, y):  # a Jacobian of a vector function with respect to two arguments
    return np.concatenate([x[1:] * y[:-1], np.sin(x) + y**2])


def test_jacobian_of_two_arguments_equals_the_dense_path():
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal(16), rng.standard_normal(16)
    jac = tg.jacobian(_two_inputs, argnums=(0, 1), backend="cpu")
    text = str(tg.make_ir(tg.jacobian(_two_inputs, argnums=(0, 1)))(x, y))
    assert "sparse jacobian:" in text
    jx, jy = jac(x, y)
    sparsity.ENABLED = False
    try:
        graph = tg.make_ir(tg.jacobian(_two_inputs, argnums=(0, 1)))(x, y)
    finally:
        sparsity.ENABLED = True
    wx, wy = interpreter.evaluate(graph, [x, y])
    np.testing.assert_allclose(jx, wx, rtol=1e-15, atol=0)
    np.testing.assert_allclose(jy, wy, rtol=1e-15, atol=0)
    eps = 1e-6
    for k in (0, 7, 15):
        e = np.zeros(16)
        e[k] = eps
        fd = (_two_inputs(x + e, y) - _two_inputs(x - e, y)) / (2 * eps)
        np.testing.assert_allclose(jx[:, k], fd, rtol=1e-6, atol=1e-8)


def test_float32_hessian():
    x = np.random.default_rng(7).standard_normal(20).astype(np.float32)
    h = tg.hessian(banded, backend="cpu")(x)
    assert h.dtype == np.float32
    np.testing.assert_allclose(h, _dense_reference(banded, x), rtol=1e-6)
