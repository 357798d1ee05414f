"""np.linalg.eig and eigvals of general matrices: NumPy's values (complex always), derivatives of
gauge-invariant losses against central differences at orders 1 and 2, complex input (both
directions of the complex plane), batches, and vmap."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg

WEIGHTS = np.arange(16.0).reshape(4, 4) / 10


def loss(a):
    """Independent of each eigenvector's phase (|v|) and of the order LAPACK returns them in."""
    w, v = np.linalg.eig(a)
    return np.sum(np.abs(w) ** 2 + np.real(w) ** 3) + np.sum(np.abs(v) ** 4 * WEIGHTS)


def central(f, a, h=1e-6):
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        e = np.zeros_like(a)
        e[i] = h
        g[i] = (f(a + e) - f(a - e)) / (2 * h)
        if np.iscomplexobj(a):  # dL/dx - i dL/dy
            g[i] -= 1j * (f(a + 1j * e) - f(a - 1j * e)) / (2 * h)
    return g


@pytest.fixture
def a(rng):
    return rng.normal(size=(4, 4))


def test_values_are_numpys_and_complex(a, backend):
    w, v = np.linalg.eig(a)
    tw, tv = tg.jit(np.linalg.eig, backend=backend)(a)
    assert tw.dtype == tv.dtype == np.complex128
    np.testing.assert_allclose(tw, w, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tv, v, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tg.jit(np.linalg.eigvals, backend=backend)(a), w, rtol=1e-12)
    assert tg.jit(np.linalg.eigvals)(a.astype(np.float32)).dtype == np.complex64


def test_first_and_second_derivatives(a, backend):
    g = tg.grad(loss, backend=backend)(a)
    np.testing.assert_allclose(g, central(loss, a), rtol=1e-6, atol=1e-6)
    first = tg.grad(loss)

    def directional(a):
        return np.sum(first(a) * WEIGHTS)

    g2 = tg.grad(directional, backend=backend)(a)
    np.testing.assert_allclose(g2, central(directional, a), rtol=1e-5, atol=1e-5)


def test_complex_matrices_in_both_directions(a, rng, backend):
    z = a + 1j * rng.normal(size=(4, 4))
    g = tg.grad(loss, backend=backend)(z)
    np.testing.assert_allclose(g, central(loss, z), rtol=1e-6, atol=1e-6)


def test_batches_and_vmap(rng, backend):
    b = rng.normal(size=(2, 3, 3))

    def f(b):
        return np.sum(np.abs(np.linalg.eigvals(b)) * np.arange(1.0, 4.0))

    np.testing.assert_allclose(tg.grad(f, backend=backend)(b), central(f, b), rtol=1e-6, atol=1e-7)
    batched = tg.vmap(lambda m: np.abs(np.linalg.eigvals(m)), backend=backend)(b)
    np.testing.assert_allclose(batched, np.abs(np.linalg.eigvals(b)), rtol=1e-12)


def test_non_square_input_is_refused():
    with pytest.raises(np.linalg.LinAlgError):
        tg.jit(np.linalg.eig)(np.ones((2, 3)))
