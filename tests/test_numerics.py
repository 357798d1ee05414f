"""Numbers as exact as they can be, on every backend: logs and powers of base 2 and 10, integer
powers, the derivatives of a product with zeros in it, of a standard deviation over one element,
and of the numerically stable softplus idioms (which the simplifier rewrites to a smooth primitive).

Accuracy is measured in ulps against mpmath's correctly rounded results (tests/correctly_rounded.py),
the same on every machine, and each backend is held to the bound of the code that computes its
results: tracegrad.vmath's kernels (the cpu backend's default) to the bounds docs/vmath.md
states, libm (the cpu backend's libm mode) to glibc's, a GPU to CUDA's, and the numpy backend
and the cuda simulator (whose kernels call NumPy's ufuncs for these functions, so that float32
stays float32 as on a GPU) to NumPy's.
NumPy's last bits depend on the CPU it dispatches for (SVML on AVX-512, its own or libm's code
elsewhere), so no test holds tracegrad to NumPy's last bit, or NumPy to more than NumPy states."""

from __future__ import annotations

import functools
import itertools
import math
import os
import warnings

import numpy as np
import pytest

import tracegrad as tg
from conftest import CUDA_SIMULATED
from correctly_rounded import reference, rounded, ulp_errors
from tracegrad import vmath

F64, F32 = np.float64, np.float32

# Bounds in ulps, by what computes a backend's results.
# tracegrad.vmath (docs/vmath.md): (float64, float32)
VMATH_ULP = {"log2": (0.7, 0.55), "log10": (0.7, 0.55), "exp2": (0.75, 0.55)}
# glibc's libm: its log10 (and log10f) reaches 1.54 ulp (1.65), its log2 and exp2 stay within 1
LIBM_ULP = {"log2": 1.0, "log10": 2.0, "exp2": 1.0}
# NumPy's SVML functions (its AVX-512 code) are within 4 ulp, the bound NumPy states for them
NUMPY_ULP = 4.0
# CUDA's math library (libdevice): within 2 ulp for these functions and for the float64 pow
CUDA_ULP = 2.0


def _on_gpu(backend: str) -> bool:
    return backend == "cuda" and not CUDA_SIMULATED


def _vmath_kernels(backend: str) -> bool:
    return backend == "cpu" and vmath.math_mode() == "vector"


def function_bound(backend: str, name: str, dtype) -> float:
    """The largest error in ulps of `name` on `backend`, on every CPU."""
    if backend == "numpy" or (backend == "cuda" and CUDA_SIMULATED):
        return NUMPY_ULP  # NumPy's float32 log2 on AVX2 reaches 1.9 ulp (SVML's on AVX-512 less)
    if _vmath_kernels(backend):
        return VMATH_ULP[name][0 if dtype == F64 else 1]
    return max(LIBM_ULP[name], CUDA_ULP if _on_gpu(backend) else 0.0)


def assert_within(got, ref, dtype, bound, what, x=None):
    err = ulp_errors(got, ref, dtype)
    worst = int(np.argmax(err))
    at = "" if x is None else f" at {np.ravel(x)[worst]!r}"
    assert err.ravel()[worst] <= bound, (
        f"{what}{at}: {np.ravel(got)[worst]!r}, {err.ravel()[worst]:.3f} ulp > {bound}"
    )


@pytest.fixture(params=["vector", "libm"])
def math_mode(request):
    """The cpu backend's two math modes (tracegrad.vmath's functions, or libm's)."""
    vmath.set_math_mode(request.param)
    yield request.param
    vmath.set_math_mode(None)


# ----------------------------------------------------------------------------------------------
# log2, log10, exp2


NAMES = ("log2", "log10", "exp2")


@functools.cache
def _exact_powers(dt: str):
    """(k2, 2**k2, k10, the float nearest 10**k10) for every such power in the dtype's range, and
    mpmath's log2, exp2 and log10 at them."""
    dtype = np.dtype(dt).type
    fi = np.finfo(dtype)
    k2 = np.arange(fi.minexp - fi.nmant, fi.maxexp)
    powers2 = np.ldexp(np.ones(k2.size, dtype), k2.astype(np.int32))
    lo, hi = math.ceil(math.log10(float(fi.smallest_normal))), math.floor(math.log10(float(fi.max)))
    k10 = np.arange(lo, hi + 1)
    powers10 = np.array([dtype(f"1e{k}") for k in k10])
    k2, k10 = k2.astype(dtype), k10.astype(dtype)
    refs = {
        "log2": (powers2, reference("log2", powers2), k2),
        "exp2": (k2, reference("exp2", k2), powers2),
        "log10": (powers10, reference("log10", powers10), k10),
    }
    return refs


def _check_exact_powers(backend, dtype):
    """log2 and exp2 at every power of two, log10 at every power of ten: the correctly rounded
    results are k, 2**k and k (mpmath says so); vmath's kernels give exactly those, every other
    backend a result within its bound of them."""
    for name, (x, ref, exact) in _exact_powers(np.dtype(dtype).str).items():
        np.testing.assert_array_equal(rounded(ref, dtype), exact, err_msg=f"mpmath's {name}")
        got = tg.jit(getattr(np, name), backend=backend)(x)
        assert got.dtype == dtype
        if _vmath_kernels(backend):
            np.testing.assert_array_equal(got, exact, err_msg=name)
        assert_within(got, ref, dtype, function_bound(backend, name, dtype), name, x)


@functools.cache
def _samples(name: str, dt: str, n: int = 3000):
    """Samples of `name`'s domain in dtype `dt`, and mpmath's values there."""
    dtype = np.dtype(dt).type
    rng = np.random.default_rng(NAMES.index(name))
    fi = np.finfo(dtype)
    if name == "exp2":
        top = float(fi.maxexp)
        x = np.concatenate(
            [
                rng.uniform(-top - 20, top + 1, n),
                rng.uniform(-1, 1, n),
                [1000.5, -1000.3, 1000.25, -999.75, 0.5, -0.5],
            ]
        )
    else:
        x = np.concatenate(
            [
                np.exp(rng.uniform(np.log(float(fi.smallest_normal)), np.log(float(fi.max)), n)),
                rng.uniform(0.5, 2, n),
                [0.1, 0.3, 7.0, 1e-300 if dtype == F64 else 1e-30],
            ]
        )
    x = x.astype(dtype)
    return x, reference(name, x)


def _check_accuracy(backend, dtype):
    for name in NAMES:
        x, ref = _samples(name, np.dtype(dtype).str)
        got = tg.jit(getattr(np, name), backend=backend)(x)
        assert got.dtype == dtype
        assert_within(got, ref, dtype, function_bound(backend, name, dtype), name, x)


def test_the_reported_values(backend):
    """log10(1000), log2(8) and exp2(3): exactly 3, 3 and 8 from vmath's kernels, within the
    backend's bound of them elsewhere."""
    x = np.array([1000.0, 8.0, 3.0])
    got = tg.jit(lambda v: (np.log10(v[0]), np.log2(v[1]), np.exp2(v[2])), backend=backend)(x)
    if _vmath_kernels(backend):
        assert tuple(got) == (3.0, 3.0, 8.0)
    for name, g, v in zip(("log10", "log2", "exp2"), got, x, strict=True):
        assert_within(g, reference(name, [v]), F64, function_bound(backend, name, F64), name)


@pytest.mark.parametrize("dtype", [F64, F32])
def test_log2_exp2_log10_at_exact_powers(backend, dtype):
    _check_exact_powers(backend, dtype)


@pytest.mark.parametrize("dtype", [F64, F32])
def test_log2_exp2_log10_accuracy(backend, dtype):
    _check_accuracy(backend, dtype)


@pytest.mark.parametrize("dtype", [F64, F32])
def test_log2_exp2_log10_in_both_cpu_math_modes(math_mode, dtype):
    """Exact at exact powers with vmath (the default mode); libm's functions within glibc's
    bounds."""
    _check_exact_powers("cpu", dtype)
    _check_accuracy("cpu", dtype)


def test_the_checks_catch_a_last_bit():
    """A log10 one ulp off at each power of ten fails vmath's bound; a log2 two ulps off the
    correctly rounded result fails libm's."""
    _, ref, exact = _exact_powers(np.dtype(F32).str)["log10"]
    away = np.where(exact < 0, -np.inf, np.inf).astype(F32)  # a whole ulp of the exact value
    err = ulp_errors(np.nextafter(exact, away), ref, F32)
    assert (err > VMATH_ULP["log10"][1]).all(), err.min()
    _, ref = _samples("log2", np.dtype(F64).str)
    want = rounded(ref, F64)
    err = ulp_errors(want + 2 * np.spacing(np.abs(want)), ref, F64)
    assert (err > LIBM_ULP["log2"]).all(), err.min()


def test_numpy_runs_without_the_features_it_is_told_to_switch_off():
    """CI runs these tests again with NumPy's AVX-512 code switched off (.ci/run): NumPy must
    then dispatch without it, or that run would check nothing new."""
    names = os.environ.get("NPY_DISABLE_CPU_FEATURES", "").replace(",", " ").split()
    if not names:
        pytest.skip("NPY_DISABLE_CPU_FEATURES switches nothing off here")
    umath = (getattr(np, "_core", None) or np.core)._multiarray_umath
    assert [n for n in names if umath.__cpu_features__.get(n)] == []


def test_log2_exp2_log10_special_values(backend):
    x = np.array([0.0, -0.0, -1.0, np.inf, -np.inf, np.nan, 1.0])
    with np.errstate(all="ignore"):
        for name in ("log2", "log10", "exp2"):
            got = tg.jit(getattr(np, name), backend=backend)(x)
            np.testing.assert_array_equal(got, getattr(np, name)(x), err_msg=name)


def test_log2_exp2_log10_of_integers_are_float64(backend):
    k = np.array([1, 8, 1000])
    for name in ("log2", "log10", "exp2"):
        got = tg.jit(getattr(np, name), backend=backend)(k)
        assert got.dtype == F64
        assert_within(got, reference(name, k), F64, function_bound(backend, name, F64), name, k)


def nth_derivative(f, n: int, backend: str):
    """The elementwise n-th derivative of an elementwise function, by nested tg.grad."""
    d = f
    for _ in range(n - 1):
        d = tg.grad(lambda v, d=d: np.sum(d(v)))
    return tg.grad(lambda v: np.sum(d(v)), backend=backend)


def test_log2_exp2_log10_derivatives_to_third_order(backend):
    x = np.array([0.7, 3.0, 8.0])
    ln2, ln10 = math.log(2.0), math.log(10.0)
    cases = {
        np.log2: [1 / (x * ln2), -1 / (x**2 * ln2), 2 / (x**3 * ln2)],
        np.log10: [1 / (x * ln10), -1 / (x**2 * ln10), 2 / (x**3 * ln10)],
        np.exp2: [np.exp2(x) * ln2, np.exp2(x) * ln2**2, np.exp2(x) * ln2**3],
    }
    for f, expected in cases.items():
        for n, want in enumerate(expected, start=1):
            got = nth_derivative(f, n, backend)(x)
            np.testing.assert_allclose(got, want, rtol=1e-13, err_msg=f"{f.__name__} order {n}")


# ----------------------------------------------------------------------------------------------
# Integer powers


POWERS = [2, 3, 4, 5, 13, 64, -1, -2, -3, -7]
# x**n of floats on the compiled backends: x*x and 1/x are correctly rounded and x*x*x is two
# roundings (within 1.25 ulp on these samples, on every CPU: IEEE multiplications); every other
# n calls pow() with a float exponent, within 1 ulp whatever n is (glibc's pow is within 0.52,
# CUDA's within 2), float32 powers through the float64 pow, rounded once. (Repeated squaring
# would double the error with every squaring: some 48 ulp at n = 64.)
CORRECTLY_ROUNDED = 0.5 + 1e-9  # and the measurement's own 2**-50
MUL_ULP = {2: CORRECTLY_ROUNDED, 3: 1.25, -1: CORRECTLY_ROUNDED}


def power_bound(backend: str, n: int) -> float:
    """The largest error in ulps of x**n on `backend`, on every CPU."""
    if backend == "numpy" or (backend == "cuda" and CUDA_SIMULATED):
        return NUMPY_ULP  # NumPy's float32 log2 on AVX2 reaches 1.9 ulp (SVML's on AVX-512 less)
    if n in MUL_ULP:
        return MUL_ULP[n]
    return CUDA_ULP if _on_gpu(backend) else 1.0


def _power(n):
    return lambda v: v**n


@functools.cache
def _power_samples(n: int, dt: str):
    """x over every binade where x**n is finite, and near 1; mpmath's x**n there."""
    dtype = np.dtype(dt).type
    rng = np.random.default_rng(POWERS.index(n))
    top = (700.0 if dtype == F64 else 85.0) / abs(n)
    x = np.exp(rng.uniform(-top, top, 2000)) * rng.choice([-1.0, 1.0], 2000)
    x = np.concatenate([x, rng.uniform(0.5, 2.0, 2000)]).astype(dtype)
    return x, reference(_power(n), x)


@pytest.mark.parametrize("dtype", [F64, F32])
def test_integer_powers_accuracy(backend, dtype):
    for n in POWERS:
        x, ref = _power_samples(n, np.dtype(dtype).str)
        got = tg.jit(lambda v, n=n: v**n, backend=backend)(x)
        assert got.dtype == dtype
        assert_within(got, ref, dtype, power_bound(backend, n), f"** {n}", x)


def test_integer_powers_neither_underflow_nor_overflow_on_the_way(backend):
    x = np.array([1e155, 1e-100, 1e-155, 1e20, 2.0**-600])
    p = tg.jit(lambda v: (v**-2, v**-3, v**13, v**4), backend=backend)(x)
    for got, n in zip(p, (-2, -3, 13, 4), strict=True):
        assert_within(got, reference(_power(n), x), F64, power_bound(backend, n), f"** {n}", x)
    assert 0 < p[0][0] < 1.1e-310  # 1e155 ** -2 is 1e-310, a subnormal, not 0


def test_integer_powers_of_integers_stay_exact(backend):
    k = np.arange(-6, 7, dtype=np.int64)
    for n in (0, 2, 3, 4, 5, 13, 21):
        got = tg.jit(lambda v, n=n: v**n, backend=backend)(k)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, k**n, err_msg=f"** {n}")
    k32 = np.arange(-5, 6, dtype=np.int32)
    np.testing.assert_array_equal(tg.jit(lambda v: v**7, backend=backend)(k32), k32**7)


def test_big_and_negative_integer_exponents_of_integers_act_as_numpys(backend):
    k = np.arange(-3, 4)
    for n in (65, 100):  # beyond the small-power path: products by squaring, wrapping as NumPy's
        np.testing.assert_array_equal(tg.jit(lambda v, n=n: v**n, backend=backend)(k), k**n)
    with pytest.raises(ValueError, match="Integers to negative integer powers are not allowed"):
        tg.jit(lambda v: v**-2, backend=backend)(k)
    x = np.array([1.01, -1.01, 3.7, -0.93, 1e-4])
    got = tg.jit(lambda v: v**70, backend=backend)(x)  # floats: pow(), as for smaller n
    assert_within(got, reference(_power(70), x), F64, power_bound(backend, 70), "** 70", x)


def test_integer_power_derivatives(backend):
    x = np.array([0.5, 1.5, -2.0])
    for n in (5, 13, -3):
        for order in (1, 2, 3):
            falling = math.prod(n - i for i in range(order))  # n (n-1) ... (n-order+1)
            want = falling * x ** float(n - order)
            got = nth_derivative(lambda v, n=n: v**n, order, backend)(x)
            np.testing.assert_allclose(got, want, rtol=1e-14, err_msg=f"** {n}, order {order}")


# ----------------------------------------------------------------------------------------------
# The derivatives of a product, exact where elements are zero


def _prod_derivatives(x: np.ndarray, order: int) -> np.ndarray:
    """d^order prod(x) / dx_i dx_j ...: the product of the elements not differentiated, 0 where
    an index repeats (prod is linear in each element)."""
    n = x.size
    out = np.zeros((n,) * order)
    for idx in np.ndindex(out.shape):
        if len(set(idx)) == order:
            out[idx] = np.prod(np.delete(x, list(idx)))
    return out


# one shape, so that each transform compiles once
PROD_POINTS = np.array(
    [
        [2.0, 0.0, 3.0, -1.5],  # one zero
        [0.0, 4.0, 0.0, 5.0],  # two zeros
        [0.0, 0.0, 0.0, 0.0],  # all zero
        [1.5, -2.0, 0.5, 3.0],  # none
    ]
)


def test_prod_gradient_at_a_zero_is_the_product_of_the_others(backend):
    np.testing.assert_array_equal(
        tg.grad(np.prod, backend=backend)(np.array([2.0, 0.0, 3.0])), [0.0, 6.0, 0.0]
    )


def test_prod_derivatives_are_exact_at_zeros_to_third_order(backend):
    grad = tg.grad(np.prod, backend=backend)
    hessian = tg.hessian(np.prod, backend=backend)
    third = tg.jacobian(tg.hessian(np.prod), backend=backend)
    for x in PROD_POINTS:
        np.testing.assert_array_equal(grad(x), _prod_derivatives(x, 1))
        np.testing.assert_array_equal(hessian(x), _prod_derivatives(x, 2))
        t = third(x)
        assert np.all(np.isfinite(t))
        np.testing.assert_array_equal(t, _prod_derivatives(x, 3))


def test_prod_gradient_along_axes_with_keepdims_and_float32(backend):
    x = np.array([[2.0, 0.0, 3.0], [1.5, 4.0, 0.5], [0.0, 0.0, 2.0], [1.0, -1.0, 2.0]])
    w = np.array([[1.0, -2.0, 0.5, 3.0]])
    for dtype in (F64, F32):
        xd = x.astype(dtype)
        # along axis 1, weighted per row: row r's gradient is w_r times its own product-of-others
        g1 = tg.grad(
            lambda v, dt=dtype: np.sum(w.astype(dt) * np.prod(v, axis=1, keepdims=True).T),
            backend=backend,
        )(xd)
        want1 = np.stack([w[0, r] * _prod_derivatives(x[r], 1) for r in range(4)])
        assert g1.dtype == dtype
        np.testing.assert_allclose(g1, want1, rtol=1e-6 if dtype == F32 else 1e-15)
        # along axis 0
        g0 = tg.grad(lambda v: np.sum(np.prod(v, axis=0)), backend=backend)(xd)
        want0 = np.stack([_prod_derivatives(x[:, c], 1) for c in range(3)], axis=1)
        np.testing.assert_allclose(g0, want0, rtol=1e-6 if dtype == F32 else 1e-15)
        # over every axis, with a 3-d input (axes (0, 2): a reduction over non-adjacent axes)
        y = np.arange(24.0).reshape(2, 3, 4).astype(dtype) - 6
        g = tg.grad(lambda v: np.sum(np.prod(v, axis=(0, 2))), backend=backend)(y)
        moved = np.moveaxis(y.astype(F64), 1, 0).reshape(3, 8)
        want = np.stack([_prod_derivatives(moved[c], 1) for c in range(3)])
        want = np.moveaxis(want.reshape(3, 2, 4), 0, 1)
        assert np.all(np.isfinite(g))
        np.testing.assert_allclose(g, want, rtol=1e-6 if dtype == F32 else 1e-15)


def test_prod_hessian_along_an_axis(backend):
    x = np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 2.0]])
    h = tg.hessian(lambda v: np.sum(np.prod(v, axis=1)), backend=backend)(x)
    want = np.zeros((2, 3, 2, 3))
    for r in range(2):
        want[r, :, r, :] = _prod_derivatives(x[r], 2)
    np.testing.assert_array_equal(h, want)


# ----------------------------------------------------------------------------------------------
# The standard deviation where it is constant, or has a kink


def test_std_over_one_element_has_zero_derivatives(backend):
    x = np.array([3.5])
    assert tg.jit(np.std, backend=backend)(x) == 0.0
    np.testing.assert_array_equal(tg.grad(np.std, backend=backend)(x), [0.0])
    np.testing.assert_array_equal(tg.hessian(np.std, backend=backend)(x), [[0.0]])
    np.testing.assert_array_equal(tg.jacobian(tg.hessian(np.std), backend=backend)(x), [[[0.0]]])


def test_std_along_an_axis_of_length_one(backend):
    x = np.array([[1.0], [-2.0], [7.5]])
    f = lambda v: np.sum(np.std(v, axis=1) * np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(tg.grad(f, backend=backend)(x), np.zeros((3, 1)))
    np.testing.assert_array_equal(tg.hessian(f, backend=backend)(x), np.zeros((3, 1, 3, 1)))
    g32 = tg.grad(lambda v: np.sum(np.std(v, axis=1, keepdims=True)), backend=backend)(
        x.astype(F32)
    )
    assert g32.dtype == F32
    np.testing.assert_array_equal(g32, np.zeros((3, 1), F32))


def test_std_with_ddof_and_its_derivative(backend):
    x = np.array([1.0, 2.5, -0.5, 4.0])
    for ddof in (0, 1, 3):
        value, grad = tg.value_and_grad(lambda v, d=ddof: np.std(v, ddof=d), backend=backend)(x)
        s = np.std(x, ddof=ddof)
        np.testing.assert_allclose(value, s, rtol=1e-15)
        np.testing.assert_allclose(grad, (x - x.mean()) / ((x.size - ddof) * s), rtol=1e-14)


def test_std_of_constant_data_has_derivative_zero_at_its_kink(backend):
    """std(c + t v) = |t| std(v): a kink at t = 0, where tracegrad's convention (as for np.abs at
    0) is the derivative 0, at every order; nowhere NaN."""
    x = np.full(4, 2.5)
    assert tg.jit(np.std, backend=backend)(x) == 0.0
    np.testing.assert_array_equal(tg.grad(np.std, backend=backend)(x), np.zeros(4))
    np.testing.assert_array_equal(tg.hessian(np.std, backend=backend)(x), np.zeros((4, 4)))
    # var is smooth there: its derivatives are the ordinary ones
    np.testing.assert_array_equal(tg.grad(np.var, backend=backend)(x), np.zeros(4))
    np.testing.assert_allclose(
        tg.hessian(np.var, backend=backend)(x), (np.eye(4) - 1 / 4) * 2 / 4, rtol=1e-15, atol=1e-17
    )


def test_std_keeps_numpys_values_at_the_edges(backend):
    for x, ddof in (([np.inf, 1.0], 0), ([np.nan, 1.0], 0), ([1.0, 2.0], 2), ([3.0, 3.0], 2)):
        x = np.array(x)
        with np.errstate(all="ignore"):
            got = tg.jit(lambda v, d=ddof: np.std(v, ddof=d), backend=backend)(x)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's "Degrees of freedom <= 0"
            want = np.std(x, ddof=ddof)
        np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------------------------------------
# The stable softplus idioms: rewritten to the smooth primitive before differentiation


def stable_softplus(z):
    return np.maximum(z, 0) + np.log1p(np.exp(-np.abs(z)))


SOFTPLUS_IDIOMS = {
    "max + log1p": stable_softplus,
    "log1p + max, 0 first": lambda z: np.log1p(np.exp(-np.abs(z))) + np.maximum(0.0, z),
    "max + log(1 + ...)": lambda z: np.maximum(z, 0) + np.log(1 + np.exp(-np.abs(z))),
    "log(... + 1) + max, |-z|": lambda z: np.log(np.exp(-np.abs(-z)) + 1.0) + np.maximum(z, 0.0),
    "logaddexp(0, z)": lambda z: np.logaddexp(0, z),
    "logaddexp(z, 0)": lambda z: np.logaddexp(z, 0.0),
}
LOG_SIGMOID_IDIOMS = {
    "min - log1p": lambda z: np.minimum(z, 0) - np.log1p(np.exp(-np.abs(z))),
    "min(0, z) - log(1 + ...)": lambda z: np.minimum(0, z) - np.log(1 + np.exp(-np.abs(z))),
}


def _sigmoid(z):
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-z))


@pytest.mark.parametrize("name", sorted(SOFTPLUS_IDIOMS) + sorted(LOG_SIGMOID_IDIOMS))
def test_softplus_idioms_have_exact_derivatives_at_zero(backend, name):
    f = SOFTPLUS_IDIOMS.get(name) or LOG_SIGMOID_IDIOMS[name]
    sign = 1.0 if name in SOFTPLUS_IDIOMS else -1.0
    z = np.array([-3.0, -0.5, 0.0, 0.5, 3.0])
    zs = sign * z  # log-sigmoid(z) = -softplus(-z)
    s = _sigmoid(zs)
    np.testing.assert_allclose(
        tg.jit(f, backend=backend)(z), sign * np.logaddexp(0, zs), rtol=1e-15
    )
    derivatives = [s, s * (1 - s), s * (1 - s) * (1 - 2 * s)]  # of softplus at zs
    for n, want in enumerate(derivatives, start=1):
        got = nth_derivative(f, n, backend)(z)
        np.testing.assert_allclose(
            got, sign ** (n + 1) * want, rtol=1e-14, atol=1e-16, err_msg=f"order {n}"
        )
    assert tg.hessian(f, backend=backend)(0.0) == sign * 0.25


def test_softplus_idioms_are_rewritten_before_differentiation():
    for f in (*SOFTPLUS_IDIOMS.values(), *LOG_SIGMOID_IDIOMS.values()):
        text = str(tg.make_ir(tg.grad(lambda z, f=f: np.sum(f(z))))(np.zeros(3)))
        assert "softplus" in text or "sigmoid" in text
        assert "maximum" not in text and "minimum" not in text and "abs" not in text, text


def test_near_idioms_are_left_alone(backend):
    """max(z, 0) + log1p(exp(-|y|)) with another y is not softplus: kept as written."""
    f = lambda z, y: np.maximum(z, 0) + np.log1p(np.exp(-np.abs(y)))
    text = str(tg.make_ir(tg.value_and_grad(f))(0.0, 0.0))
    assert "softplus" not in text and "maximum" in text
    np.testing.assert_allclose(
        tg.jit(f, backend=backend)(1.5, -0.5), 1.5 + np.log1p(np.exp(-0.5)), rtol=1e-15
    )
    g = lambda z: np.maximum(z, 1.0) + np.log1p(np.exp(-np.abs(z)))
    assert "softplus" not in str(tg.make_ir(g)(0.0))


def test_softplus_in_float32_and_far_out(backend):
    z = np.array([-800.0, -40.0, -1.0, 0.0, 1.0, 40.0, 800.0])
    for dtype in (F64, F32):
        zd = z.astype(dtype)
        with np.errstate(over="ignore"):
            want = np.logaddexp(dtype(0), zd)
        got = tg.jit(stable_softplus, backend=backend)(zd)
        assert got.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=4 * np.finfo(dtype).eps)
        g = tg.grad(lambda v: np.sum(stable_softplus(v)), backend=backend)(zd)
        assert g.dtype == dtype and np.all(np.isfinite(g))
        np.testing.assert_allclose(g, _sigmoid(z), rtol=4 * np.finfo(dtype).eps, atol=1e-300)


def _logistic_problem():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(60, 3))
    y = (rng.uniform(size=60) < _sigmoid(X @ np.array([1.5, -2.0, 0.5]))).astype(float)
    return X, y, 0.1


def _reference_optimum(X, y, lam):
    """Newton's method with the textbook gradient and Hessian, to convergence."""
    w = np.zeros(X.shape[1])
    for _ in range(50):
        p = _sigmoid(X @ w)
        g = X.T @ (p - y) / len(y) + lam * w
        H = (X.T * (p * (1 - p))) @ X / len(y) + lam * np.eye(X.shape[1])
        w = w - np.linalg.solve(H, g)
    return w


def test_newton_on_stable_logistic_regression_converges_quadratically(backend):
    X, y, lam = _logistic_problem()

    def loss(w):
        z = X @ w
        return np.mean(
            np.maximum(z, 0) + np.log1p(np.exp(-np.abs(z))) - y * z
        ) + 0.5 * lam * np.sum(w * w)

    grad, hessian = tg.grad(loss, backend=backend), tg.hessian(loss, backend=backend)
    w_star = _reference_optimum(X, y, lam)
    w = np.zeros(3)
    # at w = 0 every z is 0: the Hessian is X^T X / (4 n) + lam I, not just lam I
    np.testing.assert_allclose(hessian(w), X.T @ X / (4 * len(y)) + lam * np.eye(3), rtol=1e-14)
    errors = [np.linalg.norm(w - w_star)]
    for _ in range(5):
        w = w - np.linalg.solve(hessian(w), grad(w))
        errors.append(np.linalg.norm(w - w_star))
    for before, after in itertools.pairwise(errors):
        assert after <= 2.0 * before**2 + 1e-14, errors  # quadratic, not merely linear
    assert errors[4] < 1e-9 and errors[5] < 1e-13, errors
