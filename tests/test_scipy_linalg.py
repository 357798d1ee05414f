"""tracegrad.scipy.linalg: scipy.linalg's solvers on traced values, against SciPy's values and
central differences (orders 1 and 2, every argument), on every backend."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.scipy import linalg

scipy_linalg = pytest.importorskip("scipy.linalg")


def central(f, x, h=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


@pytest.mark.parametrize("bands", [(1, 1), (0, 2), (2, 0)])
def test_solve_banded(bands, rng, backend):
    lower, upper = bands
    ab = rng.normal(size=(lower + upper + 1, 5))
    ab[upper] += 4.0  # the diagonal: well conditioned
    b = rng.normal(size=(5, 2))
    f = tg.jit(lambda ab, b: linalg.solve_banded(bands, ab, b), backend=backend)
    np.testing.assert_allclose(f(ab, b), scipy_linalg.solve_banded(bands, ab, b), rtol=1e-12)
    w = rng.normal(size=(5, 2))

    def loss(ab):
        return np.sum(linalg.solve_banded(bands, ab, b) ** 2 * w)

    g = tg.grad(loss, backend=backend)(ab)
    np.testing.assert_allclose(g, central(loss, ab), rtol=1e-6, atol=1e-8)
    # ab's corners outside the bands are not read: no derivative there
    for k in range(upper):
        assert np.all(g[k, : upper - k] == 0)


def test_solve_sylvester_to_second_order(rng, backend):
    a, b, q = rng.normal(size=(3, 3)), rng.normal(size=(2, 2)), rng.normal(size=(3, 2))
    a += 3 * np.eye(3)
    got = tg.jit(linalg.solve_sylvester, backend=backend)(a, b, q)
    np.testing.assert_allclose(got, scipy_linalg.solve_sylvester(a, b, q), rtol=1e-12)

    def loss(a, b, q):
        return np.sum(linalg.solve_sylvester(a, b, q) ** 2)

    grads = tg.grad(loss, argnums=(0, 1, 2), backend=backend)(a, b, q)
    for k, fixed in enumerate(
        (lambda x: loss(x, b, q), lambda x: loss(a, x, q), lambda x: loss(a, b, x))
    ):
        np.testing.assert_allclose(grads[k], central(fixed, (a, b, q)[k]), rtol=1e-6, atol=1e-8)
    first = tg.grad(lambda a: loss(a, b, q))

    def directional(a):
        return np.sum(first(a) * np.arange(9.0).reshape(3, 3))

    np.testing.assert_allclose(
        tg.grad(directional, backend=backend)(a), central(directional, a), rtol=1e-5, atol=1e-7
    )


def test_plain_arrays_call_scipy_and_bad_bands_are_named():
    ab = np.array([[0.0, 1.0, 1.0], [4.0, 4.0, 4.0], [1.0, 1.0, 0.0]])
    np.testing.assert_array_equal(
        linalg.solve_banded((1, 1), ab, np.ones(3)),
        scipy_linalg.solve_banded((1, 1), ab, np.ones(3)),
    )
    with pytest.raises(ValueError, match=r"l \+ u \+ 1 = 4"):
        tg.jit(lambda ab: linalg.solve_banded((2, 1), ab, np.ones(3)))(ab)
