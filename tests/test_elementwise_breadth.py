"""NumPy's elementwise functions added to the traced namespace: values equal to NumPy's (dtype,
NaN and infinity behaviour included) on every backend in float64 and float32, and derivatives
(first and second order) against central finite differences. The primitives among them are also
exercised through the table by tests/test_primitives.py."""

import warnings

import numpy as np
import pytest

import tracegrad as tg

UNARY = [
    "arcsinh",
    "arctanh",
    "cbrt",
    "floor",
    "ceil",
    "trunc",
    "rint",
    "fix",
    "round",
    "isfinite",
    "isnan",
    "isinf",
    "signbit",
    "deg2rad",
    "rad2deg",
    "radians",
    "degrees",
    "sinc",
    "nan_to_num",
]
BINARY = [
    "arctan2",
    "hypot",
    "copysign",
    "floor_divide",
    "mod",
    "remainder",
    "fmod",
    "logaddexp2",
    "heaviside",
]

A = np.concatenate(
    [np.linspace(-3, 3, 13), [0.0, -0.0, 2.5, -2.5, 0.5, -1.5, np.nan, np.inf, -np.inf]]
)
B = np.concatenate([np.linspace(2.5, -2.0, 13), [1.0, -1.0, 2.0, -2.0, 0.0, 1.5, 1.0, 2.0, np.inf]])


def _all_unary(x):
    return tuple(getattr(np, name)(x) for name in UNARY) + (np.arccosh(np.abs(x) + 1.0),)


def _all_binary(a, b):
    return tuple(getattr(np, name)(a, b) for name in BINARY) + divmod(a, b) + (a // b, a % b)


@pytest.fixture(params=[np.float64, np.float32], ids=["f64", "f32"])
def dtype(request):
    return request.param


@pytest.mark.parametrize("fun", [_all_unary, _all_binary], ids=["unary", "binary"])
def test_values_equal_numpys(fun, backend, dtype):
    args = (A.astype(dtype),) if fun is _all_unary else (A.astype(dtype), B.astype(dtype))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = fun(*args)
    got = tg.jit(fun, backend=backend)(*args)
    rtol = 1e-14 if dtype == np.float64 else 1e-6
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=rtol, atol=0, equal_nan=True)


def test_integer_operands_keep_numpys_dtypes(backend):
    # the last pair overflows: NumPy wraps the smallest int64 divided by -1 to itself
    small = np.iinfo(np.int64).min
    a, b = np.array([7, -7, 5, 0, -3, -9, small]), np.array([3, 3, -2, 5, -3, -1, -1])

    def f(a, b):
        return (
            np.fmod(a, b),
            a % b,
            a // b,
            np.floor(a),
            np.trunc(a),
            np.rint(a),
            np.isnan(a),
            np.round(a),
        )

    with np.errstate(over="ignore"):
        expected = f(a, b)
    for g, e in zip(tg.jit(f, backend=backend)(a, b), expected, strict=True):
        assert g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)


SMOOTH = {
    "arcsinh": (np.arcsinh, (-2.0, 2.0)),
    "arccosh": (np.arccosh, (1.2, 3.0)),
    "arctanh": (np.arctanh, (-0.9, 0.9)),
    "cbrt": (np.cbrt, (0.2, 3.0)),
    "deg2rad": (np.deg2rad, (-2.0, 2.0)),
    "sinc": (np.sinc, (-2.0, 2.0)),
    "logaddexp2": (lambda x: np.logaddexp2(x, 0.3 * x + 0.5), (-2.0, 2.0)),
    "arctan2": (lambda x: np.arctan2(x, 1.0 + x**2), (-2.0, 2.0)),
    "hypot": (lambda x: np.hypot(x, 0.5 + x), (0.2, 2.0)),
    "mod": (lambda x: np.mod(3.0 * x, 0.7 + x), (0.3, 0.45)),
    "fmod": (lambda x: np.fmod(-3.0 * x, 0.7 + x), (0.3, 0.45)),
    "copysign": (lambda x: np.copysign(x**2 + x, -1.0 + 0 * x), (0.3, 2.0)),
    "nan_to_num": (lambda x: np.nan_to_num(np.sin(x)), (-2.0, 2.0)),
    "heaviside": (lambda x: np.heaviside(np.zeros_like(x), x**2), (-2.0, 2.0)),
    "round": (lambda x: np.round(x, 2) + x, (-2.0, 2.0)),
}


@pytest.mark.parametrize("name", sorted(SMOOTH))
def test_first_and_second_derivatives(name, rng):
    f, (lo, hi) = SMOOTH[name]
    x = rng.uniform(lo, hi, size=5)

    def total(x):
        return np.sum(f(x) * np.linspace(0.5, 1.5, 5))

    g = tg.grad(total, backend="numpy")
    eps = 1e-6
    fd = np.array([(total(x + eps * e) - total(x - eps * e)) / (2 * eps) for e in np.eye(5)])
    np.testing.assert_allclose(g(x), fd, rtol=1e-6, atol=1e-7)
    h = tg.hessian(total, backend="numpy")(x)
    fd2 = np.array([(g(x + eps * e) - g(x - eps * e)) / (2 * eps) for e in np.eye(5)])
    np.testing.assert_allclose(h, fd2, rtol=1e-5, atol=1e-6)


def test_sinc_is_smooth_at_zero():
    d1 = tg.grad(lambda x: np.sinc(x), backend="numpy")
    d2 = tg.grad(d1, backend="numpy")
    assert float(d1(0.0)) == 0.0
    np.testing.assert_allclose(d2(0.0), -(np.pi**2) / 3, rtol=1e-12)
    np.testing.assert_allclose(
        tg.jit(np.sinc, backend="numpy")(np.array([0.0, 1e-4, 0.5])),
        np.sinc(np.array([0.0, 1e-4, 0.5])),
        rtol=1e-15,
    )


def test_rounding_has_zero_gradient_and_operators_work(backend):
    x = np.array([0.3, 1.7, -2.2])
    g = tg.grad(
        lambda x: np.sum(np.floor(x) + np.ceil(x) + np.rint(x) + np.trunc(x) + x), backend=backend
    )
    np.testing.assert_array_equal(g(x), np.ones(3))

    def ops(x):
        y = x + 0.0
        y %= 1.0
        return x // 0.5, x % 0.5, divmod(x, 0.7), y

    for got, expected in zip(tg.jit(ops, backend=backend)(x), ops(x), strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-15)


def test_scipy_special_ufuncs(backend, dtype):
    special = pytest.importorskip("scipy.special")  # a test dependency (pyproject.toml)
    x = np.array([-40.0, -25.0, -21.0, -19.0, -5.0, -1.0, 0.0, 0.5, 3.0, 8.0, 30.0]).astype(dtype)
    p = np.array([0.01, 0.3, 0.5, 0.9], dtype=dtype)

    def f(x, p):
        return (
            special.expit(x),
            special.logit(p),
            special.erf(x),
            special.erfc(x),
            special.ndtr(x),
            special.log_ndtr(x),
            special.xlogy(p, x[-4:] + 1),
            special.xlog1py(p, p),
        )

    rtol = 1e-12 if dtype == np.float64 else 2e-6
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = f(x, p)
    for g, e in zip(tg.jit(f, backend=backend)(x, p), expected, strict=True):
        assert g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=rtol, atol=0 if dtype == np.float64 else 1e-30)


def test_scipy_special_derivatives():
    special = pytest.importorskip("scipy.special")
    x = np.array([-30.0, -21.0, -19.0, -3.0, 0.0, 2.0, 9.0])
    g = tg.grad(lambda x: np.sum(special.log_ndtr(x)), backend="numpy")(x)
    np.testing.assert_allclose(
        g, np.exp(-(x**2) / 2) / np.sqrt(2 * np.pi) / special.ndtr(x), rtol=1e-9
    )
    for f in (special.erf, special.erfc, special.expit, lambda v: special.xlogy(v, v + 2.0)):
        total = lambda v, f=f: np.sum(f(v) * np.linspace(0.5, 1.5, v.size))
        v = np.array([-1.2, -0.1, 0.4, 1.3])
        eps = 1e-6
        fd = np.array([(total(v + eps * e) - total(v - eps * e)) / (2 * eps) for e in np.eye(4)])
        np.testing.assert_allclose(tg.grad(total, backend="numpy")(v), fd, rtol=1e-6, atol=1e-9)
        h = tg.hessian(total, backend="numpy")(v)
        gf = tg.grad(total, backend="numpy")
        fd2 = np.array([(gf(v + eps * e) - gf(v - eps * e)) / (2 * eps) for e in np.eye(4)])
        np.testing.assert_allclose(h, fd2, rtol=1e-5, atol=1e-7)


def test_derivatives_stay_finite_where_their_formula_would_overflow_or_cancel(backend):
    # x*x + y*y, x*x + 1 and out + 1 under- or overflowed, 1 - x*x cancelled near 1
    def grad(f, x):
        return tg.grad(lambda v: np.sum(f(v)), backend=backend)(x)

    tiny_big = np.array([1e-200, 1e-170, 1e200, 0.5, -2.0])
    d_atan2 = tg.grad(lambda y, x: np.sum(np.arctan2(y, x)), backend=backend)(tiny_big, tiny_big)
    np.testing.assert_allclose(d_atan2, 0.5 / tiny_big, rtol=1e-14)
    big = np.array([1e150, 1e200, 0.5])
    np.testing.assert_allclose(grad(np.arcsinh, big), 1 / np.hypot(big, 1.0), rtol=1e-14)
    np.testing.assert_allclose(grad(np.arccosh, np.array([1e200, 2.0])), [1e-200, 3**-0.5])
    negative = np.array([-20.0, -40.0, -100.0, 1.0])
    np.testing.assert_allclose(grad(np.expm1, negative), np.exp(negative), rtol=1e-14)
    near_one = np.array([1 - 6.5e-9])
    np.testing.assert_allclose(grad(np.arcsin, near_one), 8770.580218993497, rtol=1e-12)
    np.testing.assert_allclose(grad(np.arctanh, near_one), 76923077.37779, rtol=1e-12)
    np.testing.assert_allclose(grad(np.arccosh, 2 - near_one), 8770.580115586803, rtol=1e-12)


@pytest.mark.parametrize(
    "fun, x, signs",
    [
        # the signs of the one-sided limits of the derivatives of orders 1, 2 and 3 at x
        (np.arcsin, 1.0, (1, 1, 1)),
        (np.arcsin, -1.0, (1, -1, 1)),
        (np.arccos, 1.0, (-1, -1, -1)),
        (np.arccos, -1.0, (-1, 1, -1)),
        (np.arctanh, 1.0, (1, 1, 1)),
        (np.arctanh, -1.0, (1, -1, 1)),
    ],
)
def test_derivatives_at_the_ends_of_the_domain_are_the_one_sided_limits(fun, x, signs, backend):
    # 1 - x^2 is computed as (1 - x)(1 + x); differentiating that product at x = +-1 multiplied
    # the infinite cotangent by the zero factor (nan)
    f = fun
    for order, sign in enumerate(signs, start=1):
        f = tg.grad(f, backend=backend)
        assert f(x) == sign * np.inf, f"{fun.__name__}, order {order} at {x}"


def test_second_derivatives_near_the_ends_of_the_domain(backend):
    # arcsin'' = x / (1 - x^2)^1.5 and arctanh'' = 2x / (1 - x^2)^2, 1 - x^2 without cancelling
    x = np.array([1 - 2.0**-30, -1 + 2.0**-40, 0.5])
    one_minus_square = (1 - x) * (1 + x)  # exact here: 1 - x and 1 + x are exact
    second = tg.grad(lambda v: np.sum(tg.grad(lambda u: np.sum(np.arcsin(u)))(v)), backend=backend)
    np.testing.assert_allclose(second(x), x / one_minus_square**1.5, rtol=1e-14)
    second = tg.grad(lambda v: np.sum(tg.grad(lambda u: np.sum(np.arctanh(u)))(v)), backend=backend)
    np.testing.assert_allclose(second(x), 2 * x / one_minus_square**2, rtol=1e-14)
