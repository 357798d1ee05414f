"""The worked numbers of the classic autograd tutorials, exact, on every backend."""

import numpy as np
import pytest

import tracegrad as tg


def test_w_times_x_squared(backend):
    # L = w * x**2 at w=2, x=3: dL/dw = x**2 = 9
    assert tg.grad(lambda w, x: w * x**2, backend=backend)(2.0, 3.0) == 9.0


def test_linear_function_gradients(backend):
    # y = w*x + b at x=2, w=3, b=1: (dy/dx, dy/dw, dy/db) = (3, 2, 1)
    grads = tg.grad(lambda x, w, b: w * x + b, argnums=(0, 1, 2), backend=backend)(2.0, 3.0, 1.0)
    assert tuple(float(g) for g in grads) == (3.0, 2.0, 1.0)


def test_squared_error_loss(backend):
    @tg.grad(argnums=(0, 1, 2), backend=backend)
    def loss(w, x, b):
        return (w * x + b - 5.0) ** 2

    assert tuple(float(g) for g in loss(2.0, 3.0, 1.0)) == (12.0, 8.0, 4.0)


def test_readme_decorator_form(backend):
    @tg.grad
    def loss(w, x, b):
        return (w * x + b - 5.0) ** 2

    assert loss(2.0, 3.0, 1.0) == 12.0


def test_second_derivative_of_cube():
    assert tg.grad(tg.grad(lambda x: x**3))(1.0) == 6.0


def test_relu(backend):
    relu_grad = tg.grad(lambda x, w: np.maximum(x * w, 0.0), argnums=1, backend=backend)
    assert relu_grad(2.0, 3.0) == 2.0


def test_gpu_classic_example_at_the_minimum(backend):
    assert tg.grad(lambda x: (x**2 - 4) ** 2, backend=backend)(2.0) == 0.0


def test_sum_of_cubes_gradient_and_hessian(backend):
    f = lambda x: np.sum(x**3)
    x = np.array([2.0, -1.0])
    np.testing.assert_array_equal(tg.grad(f, backend=backend)(x), [12.0, 3.0])
    np.testing.assert_array_equal(tg.hessian(f, backend=backend)(x), np.diag([12.0, -6.0]))


def test_tanh_layer_matches_finite_differences(rng, backend):
    X = rng.normal(size=(4, 3))
    W = rng.normal(size=(3, 5))
    b = rng.normal(size=5)

    def loss(W, b):
        a = np.tanh(X @ W + b)
        return np.sum(a**3)

    assert tg.check_grad(loss, W, b, backend=backend)


@pytest.mark.parametrize("n", [200])
def test_hessian_of_chain_function_n200(n, rng, backend):
    """The core issue's acceptance test: the hessian of sum(x**3) + sum(x[:-1]*x[1:])."""
    x = rng.normal(size=n)
    H = tg.hessian(lambda x: np.sum(x**3) + np.sum(x[:-1] * x[1:]), backend=backend)(x)
    expected = np.diag(6 * x) + np.diag(np.ones(n - 1), 1) + np.diag(np.ones(n - 1), -1)
    assert H.shape == (n, n)
    np.testing.assert_allclose(H, expected, rtol=1e-12, atol=1e-12)
