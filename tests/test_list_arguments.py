"""NumPy functions given a list (or tuple, nested) of traced values, as autograd-style code writes
them: `np.sum([a, b * b])` reads the list as `np.array` would (stacked), whether NumPy dispatches
the call to tracegrad or converts the list in its Python implementation (constructors.py
redirects those while tracing). Values equal NumPy's on the same numbers, gradients equal central
finite differences, on the numpy and cpu backends. Ufuncs and NumPy's C functions given only
lists are refused, with a message that names what works instead."""

import numpy as np
import pytest
from numpy import mean as imported_mean  # a reference taken before any trace

import tracegrad as tg

X = np.array([0.3, 0.7, 1.1])
W = np.array([0.5, -1.0, 2.0])

# f(x) -> scalar; each takes a list somewhere NumPy would read an array
CASES = {
    "sum of arrays": lambda x: np.sum([x, x * x]),
    "sum of scalars and numbers": lambda x: np.sum([x[0], x[1] * x[2], 3.0]),
    "sum of a tuple": lambda x: np.sum((x[0], x[1] ** 2)),
    "sum over an axis, nested": lambda x: (
        np.sum([[x[0], 1.0], [2.0, x[1] * x[2]]], axis=0) @ np.array([1.0, 3.0])
    ),
    "sum with NumPy arrays in the list": lambda x: np.sum([x, np.ones(3), 2 * x], axis=0) @ W,
    "mean over an axis": lambda x: np.mean([x, np.sin(x)], axis=0) @ W,
    "mean imported from numpy": lambda x: imported_mean([x[0], 2 * x[1], x[2] ** 2]),
    "prod": lambda x: np.prod([x[0], x[1], 2.0, x[2]]),
    "max": lambda x: np.max([x[0], 3 * x[1], x[2]]),
    "min": lambda x: np.min([x[0], 3 * x[1], x[2]]),
    "var": lambda x: np.var([x[0], 3 * x[1], x[2]]),
    "std": lambda x: np.std([x[0], 3 * x[1], x[2]]),
    "linalg.norm": lambda x: np.linalg.norm([x[0], x[1], 1.0]),
    "linalg.norm of a nested list": lambda x: np.linalg.norm([[x[0], x[1]], [x[2], 1.0]]),
    "linalg.det": lambda x: np.linalg.det([[x[0], 1.0], [2.0, x[1]]]),
    "linalg.solve": lambda x: (
        np.linalg.solve([[x[0] + 2, 0.1], [0.2, x[1] + 2]], [1.0, x[2]]) @ W[:2]
    ),
    "dot beside a traced argument": lambda x: np.dot([x[0], x[1], x[2]], x),
    "dot with the list second": lambda x: np.dot(x, [x[2], 2.0, 3.0]),
    "ufunc beside a traced argument": lambda x: np.sum(np.multiply(x, [x[1], x[2], 1.0])),
    "operator with a list": lambda x: np.sum(x * [x[0], 2.0, 3.0]) + x @ [1.0, x[1], 0.5],
    "cumsum": lambda x: np.cumsum([x[0], x[1], x[2]]) @ W,
    "diff": lambda x: np.sum(np.diff([x[0], x[1] ** 2, x[2]]) ** 2),
    "concatenate of lists": lambda x: np.concatenate([[x[0], x[1]], x]) @ np.arange(5.0),
    "reshape": lambda x: np.sum(np.reshape([x[0], x[1], x[2], 1.0], (2, 2)) @ W[:2]),
    "where": lambda x: np.where(x > 0.5, [x[1], x[2], x[0]], 0.0) @ W,
}


def _finite_differences(f, x, h=1e-6):
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
@pytest.mark.parametrize("name", list(CASES))
def test_values_and_gradients(name, backend):
    f = CASES[name]
    value, grad = tg.value_and_grad(f, backend=backend)(X)
    np.testing.assert_allclose(value, f(X), rtol=1e-12)  # NumPy reads the lists of numbers
    np.testing.assert_allclose(grad, _finite_differences(f, X), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_analytic_gradients(backend):
    np.testing.assert_allclose(tg.grad(lambda x: np.sum([x, x * x]), backend=backend)(X), 1 + 2 * X)
    a, b = 3.0, 4.0
    np.testing.assert_allclose(
        tg.grad(lambda a, b: np.linalg.norm([a, b]), argnums=(0, 1), backend=backend)(a, b),
        (a / 5, b / 5),
    )
    np.testing.assert_allclose(
        tg.grad(lambda a, b: np.prod((a, b, a)), argnums=(0, 1), backend=backend)(a, b),
        (2 * a * b, a * a),
    )


def test_second_derivatives():
    f = lambda x: np.sum([x[0] ** 2 * x[1], x[1] ** 3])
    np.testing.assert_allclose(
        tg.hessian(f, backend="numpy")(X[:2]), [[2 * X[1], 2 * X[0]], [2 * X[0], 6 * X[1]]]
    )


def test_dtype_as_np_array_reads_it():
    x = X.astype(np.float32)
    out = tg.jit(lambda x: np.sum([x[0], x[1]]), backend="numpy")(x)
    assert out.dtype == np.float32
    out = tg.jit(lambda x: np.sum([x[0], 2.0]), backend="numpy")(x)
    assert out.dtype == np.sum(np.array([x[0], 2.0])).dtype == np.float64


def test_unequal_shapes_are_refused():
    with pytest.raises(tg.ShapeError, match="same shape"):
        tg.jit(lambda x: np.sum([x, x[0]]), backend="numpy")(X)


def test_numbers_only_stay_numpy():
    """Inside a trace, a list of plain numbers gets NumPy's own answer, and NumPy's functions are
    themselves again after it."""
    seen = []

    def f(x):
        seen.append(np.sum([1, 2, 3]))
        return np.sum([x[0], x[1]])

    tg.jit(f, backend="numpy")(X)
    assert isinstance(seen[0], np.integer) and seen[0] == 6
    code = np.sum._implementation.__code__
    assert code.co_name == "sum" and "numpy" in code.co_filename


def test_ufunc_given_a_list_says_what_works():
    def f(x):
        y = np.exp([x[0], x[1]])
        return np.sum(y)

    with pytest.raises(tg.TracingError) as info:
        tg.jit(f, backend="numpy")(X)
    message = str(info.value)
    assert "y = np.exp([x[0], x[1]])" in message
    assert "np.exp does not pass the traced values in a list (or tuple) to tracegrad" in message
    assert "np.exp(np.stack([a, b, ...]))" in message
    assert "np.array([a, b, ...]) works too" in message
    assert "Call np.* functions on it directly" not in message  # it already does
    assert "cannot be indexed" not in message  # the line's x[0] is no NumPy array indexed

    def fixed(x):
        return np.sum(np.exp(np.stack([x[0], x[1]]))) + np.sum(np.exp(np.array([x[0], x[1]])))

    np.testing.assert_allclose(
        tg.grad(fixed, backend="numpy")(X), [2 * np.exp(X[0]), 2 * np.exp(X[1]), 0.0]
    )


def test_c_function_given_only_lists_says_what_works():
    def f(x):
        return np.dot([x[0], x[1]], [x[1], 1.0])

    with pytest.raises(tg.TracingError, match=r"np\.dot does not pass .*np\.dot\(np\.stack\("):
        tg.jit(f, backend="numpy")(X)


def test_unsupported_function_given_a_list_says_so():
    def f(x):
        return np.sum(np.unique([x[0], x[1]]))

    with pytest.raises(tg.TracingError, match=r"np\.unique itself is not supported"):
        tg.jit(f, backend="numpy")(X)
