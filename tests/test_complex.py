"""Complex numbers end to end: values against NumPy on every backend, derivatives in JAX's
convention (docs/complex.md) against central finite differences in both directions of the complex
plane, holomorphic derivatives to order 3, and the refusals.

The convention: a cotangent pairs with a tangent through Re(sum(ct * t)); the gradient of a real
function L of z = x + iy is dL/dx - i dL/dy; `holomorphic=True` gives f'(z).
"""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg

C128, C64 = np.dtype(np.complex128), np.dtype(np.complex64)


def wirtinger_fd(f, z, h=1e-6):
    """dL/dx - i dL/dy of the real function `f` at complex `z`, by central differences."""
    z = np.asarray(z, np.complex128)
    g = np.zeros_like(z)
    for i in np.ndindex(z.shape):
        e = np.zeros_like(z)
        e[i] = h
        dx = (f(z + e) - f(z - e)) / (2 * h)
        dy = (f(z + 1j * e) - f(z - 1j * e)) / (2 * h)
        g[i] = dx - 1j * dy
    return g


def complex_fd(f, z, h=1e-6):
    """f'(z) of a holomorphic scalar function, by central differences along the real axis."""
    return (f(z + h) - f(z - h)) / (2 * h)


@pytest.fixture
def z(rng):
    return rng.uniform(-1, 1, 5) + 1j * rng.uniform(0.2, 1, 5)


# ----------------------------------------------------------------------------------------------
# Values

ELEMENTWISE = {
    "add": lambda z: z + (0.5 - 2j),
    "sub": lambda z: 1.5j - z,
    "mul": lambda z: z * z * (2 - 1j),
    "div": lambda z: (1 + 1j) / (z + 2),
    "power": lambda z: z**2.5,
    "integer powers": lambda z: z**3 + z**-2 + z**7,
    "complex power": lambda z: (z + 2) ** (0.5 + 1j),
    "exp": np.exp,
    "expm1": np.expm1,
    "exp2": np.exp2,
    "log": np.log,
    "log1p": np.log1p,
    "log2": np.log2,
    "log10": np.log10,
    "sqrt": np.sqrt,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "arcsin": np.arcsin,
    "arccos": np.arccos,
    "arctan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "arcsinh": np.arcsinh,
    "arccosh": np.arccosh,
    "arctanh": np.arctanh,
    "reciprocal": np.reciprocal,
    "square": np.square,
    "negative": np.negative,
    "conj": np.conj,
    "conjugate method": lambda z: z.conjugate() * z.conj(),
    "real": np.real,
    "imag": np.imag,
    "attributes": lambda z: z.real * 2 + z.imag,
    "abs": np.abs,
    "angle": np.angle,
    "angle in degrees": lambda z: np.angle(z, deg=True),
    "sign": np.sign,
    "isfinite": lambda z: np.isfinite(z / (z.real - z.real)),
    "isnan": lambda z: np.isnan(z * np.inf),
    "where": lambda z: np.where(z.real > 0, z, 1j * z),
    "equal": lambda z: z == z.conj(),
    "sum and prod": lambda z: np.sum(z) * np.prod(z),
    "mean": lambda z: np.mean(z * z),
    "cumsum": np.cumsum,
    "matmul": lambda z: np.outer(z, z) @ z,
    "from reals": lambda z: np.real(z) + 1j * np.imag(z) * 2.0,
    "round": lambda z: np.round(z * 10, 1) + np.round(z),
    "nan_to_num": lambda z: np.nan_to_num(np.log(z - z.real) * z, nan=1.5, neginf=-2.0),
    "iscomplex": lambda z: np.iscomplex(z * (z.real > 0)),
    "isreal": lambda z: np.isreal(z * (z.real > 0)),
    "iscomplexobj": lambda z: z * (2.0 if np.iscomplexobj(z) and not np.isrealobj(z) else 3.0),
    "astype": lambda z: z.real.astype(np.complex128) * 1j,
}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_values_match_numpy_in_complex128(name, z, backend):
    f = ELEMENTWISE[name]
    with np.errstate(all="ignore"):
        expected = f(z)
        got = tg.jit(f, backend=backend)(z)
    assert np.asarray(got).dtype == np.asarray(expected).dtype
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-14)


def _complex(re, im) -> np.ndarray:
    out = np.empty(np.shape(re), np.complex128)
    out.real, out.imag = re, im  # not re + 1j * im: inf * 1j is nan + inf j
    return out


def assert_parts_match(got, want) -> None:
    """Each part: NaN where NumPy's is, infinities equal, finite values within 2 ulps of the
    complex result's size (or the part's, beside a NaN part), zeros of NumPy's sign."""
    for part in ("real", "imag"):
        g, w = getattr(got, part), getattr(want, part)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=part)
        infinite = np.isinf(w)
        np.testing.assert_array_equal(g[infinite], w[infinite], err_msg=part)
        finite = np.isfinite(w)
        scale = np.abs(want[finite])
        scale = np.where(np.isfinite(scale), scale, np.abs(w[finite]))
        assert np.all(np.abs(g[finite] - w[finite]) <= 4.5e-16 * scale), (part, g, w)
        np.testing.assert_array_equal(np.signbit(g[w == 0]), np.signbit(w[w == 0]), err_msg=part)


SQRT_EDGES = _complex(
    [1e308, 1e308, -1e308, 0.0, 0.0, -0.0, 3e-320, 1e-310, -1e-310, 4.0, -4.0, 0.0, -0.0]
    + [np.inf, -np.inf, np.inf, np.nan, 1.0, 1.0, 1.0, -2.5, 1e-300, 1e154, 1.7e308, -1e308],
    [1e308, -3e307, 1e308, 1.7e308, 5e-324, 5e-324, 1e-315, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    + [1.0, 1.0, np.nan, 1.0, np.inf, -np.inf, np.nan, 1e-300, 1e-300, 1e154, 1.7e308, 1e300],
)


@pytest.mark.parametrize(
    "backend, compiler", [("numpy", "llvm"), ("cpu", "llvm"), ("cpu", "numba"), ("cuda", "llvm")]
)
@pytest.mark.parametrize("name", ["arcsin", "arcsinh"])
def test_arcsin_and_arcsinh_of_tiny_complex_values_are_the_values(
    name, backend, compiler, monkeypatch
):
    # cmath's formulas halved a subnormal part and rounded it to 0: asinh(5e-324+5e-324j) = 5e-324j
    monkeypatch.setenv("TRACEGRAD_CPU_COMPILER", compiler)
    z = _complex(
        [5e-324, 0.0, -0.0, 3e-320, 1e-310, -2e-200],
        [5e-324, 5e-324, 5e-324, 1e-315, 3e-310, 1e-160],
    )
    got = tg.jit(getattr(np, name), backend=backend)(z)
    np.testing.assert_array_equal(got, getattr(np, name)(z))
    np.testing.assert_array_equal(np.signbit(got.real), np.signbit(z.real))


@pytest.mark.parametrize(
    "backend, compiler", [("numpy", "llvm"), ("cpu", "llvm"), ("cpu", "numba"), ("cuda", "llvm")]
)
@pytest.mark.parametrize("name", ["sqrt", "log", "log2", "log10", "arccosh", "arcsinh"])
def test_huge_tiny_and_special_complex_values_are_numpys(name, backend, compiler, monkeypatch):
    # cmath.sqrt as Numba compiles it halved the imaginary part of parts above 7.4e307, lost
    # digits on subnormal parts and raised ZeroDivisionError at 5e-324j; cmath.log overflowed
    # at 1.7e308+1.7e308j; NumPy's condensed arccosh overflowed at 1e308+1e308j
    monkeypatch.setenv("TRACEGRAD_CPU_COMPILER", compiler)
    f = getattr(np, name)
    got = tg.jit(f, backend=backend)(SQRT_EDGES)
    with np.errstate(all="ignore"):
        want = f(SQRT_EDGES)
    assert_parts_match(got, want)


@pytest.mark.parametrize(
    "backend, compiler", [("numpy", "llvm"), ("cpu", "llvm"), ("cpu", "numba"), ("cuda", "llvm")]
)
@pytest.mark.parametrize("name", ["arcsin", "arccos", "arctan", "arctanh", "arcsinh", "arccosh"])
def test_inverse_functions_at_huge_tiny_and_special_values_are_numpys(
    name, backend, compiler, monkeypatch
):
    """The same edge values for the inverse functions, and on the compiled cpu backend every
    pair of 0, -0, 1, -2, 1e-300, +-inf and nan (NaN parts: C99 Annex G). The kernels' cmath
    forms gave arctan(1+nan j) = pi/2 + nan j (NumPy: nan + nan j), arctanh(nan+1j) = nan + pi/2 j,
    arcsin(+-0 + nan j) = nan + nan j (NumPy: +-0 + nan j) and, on the cuda backend, the other
    sign of the infinite part at inf + nan j. (The simulator's cmath raises at atan(+-1j), so
    the cuda backend gets the edge values only.)"""
    monkeypatch.setenv("TRACEGRAD_CPU_COMPILER", compiler)
    f = getattr(np, name)
    z = SQRT_EDGES
    if backend == "cpu":
        special = [0.0, -0.0, 1.0, -2.0, 1e-300, np.inf, -np.inf, np.nan]
        grid = _complex(np.repeat(special, len(special)), np.tile(special, len(special)))
        z = np.concatenate([z, grid])
    got = tg.jit(f, backend=backend)(z)
    with np.errstate(all="ignore"):
        want = f(z)
    assert_parts_match(got, want)


@pytest.mark.parametrize(
    "name", ["mul", "div", "exp", "log", "sqrt", "sin", "tanh", "abs", "angle", "sum and prod"]
)
def test_complex64_stays_complex64_within_its_precision(name, z, backend):
    """complex64 values keep NumPy's dtypes; they agree with the complex128 result to float32
    precision (the kernels may evaluate the math functions in complex128)."""
    f = ELEMENTWISE[name]
    z64 = z.astype(C64)
    want_dtype = np.asarray(f(z64)).dtype
    got = np.asarray(tg.jit(f, backend=backend)(z64))
    assert got.dtype == want_dtype
    np.testing.assert_allclose(got, f(z), rtol=1e-5, atol=1e-6)


def test_python_complex_scalars_and_complex_results(backend):
    f = tg.jit(lambda z, w: z * w + 1j, backend=backend)
    out = f(1 + 2j, np.array([0.5, -1.0]))
    np.testing.assert_allclose(out, (1 + 2j) * np.array([0.5, -1.0]) + 1j)
    assert out.dtype == C128


def test_arrays_are_not_modified(z, backend):
    before = z.copy()
    tg.grad(lambda z: np.sum(np.abs(np.exp(z)) ** 2), backend=backend)(z)
    np.testing.assert_array_equal(z, before)


# ----------------------------------------------------------------------------------------------
# Gradients of real functions of complex arguments: dL/dx - i dL/dy

REAL_LOSSES = {
    "abs squared": lambda z: np.sum(np.abs(z) ** 2),
    "real of exp": lambda z: np.sum(np.real(np.exp(1j * z) * z)),
    "imag of log": lambda z: np.sum(np.imag(np.log(z)) + np.abs(np.sin(z))),
    "angle": lambda z: np.sum(np.angle(z)),
    "conj": lambda z: np.real(np.sum(z * np.conj(z) * z.conj() * 1j * z)),
    "sqrt tanh": lambda z: np.sum(np.abs(np.sqrt(z) * np.tanh(z) / (1 + z**2))),
    "matmul": lambda z: np.real(np.sum(np.outer(z, z) @ z)),
    "inverse trig": lambda z: np.sum(np.abs(np.arcsin(z / 2) + np.arctanh(z / 3) + np.arcsinh(z))),
    "sign": lambda z: np.sum(np.real(np.sign(z) * z * z)),
    "power": lambda z: np.sum(np.abs((z + 2) ** (0.5 + 1j)) + np.real(z**-3)),
    "log1p expm1": lambda z: np.sum(np.abs(np.log1p(z) * np.expm1(z) + np.log2(z) * np.exp2(z))),
    "real parts": lambda z: np.sum(z.real**2 * z.imag + np.cos(z.imag)),
}


@pytest.mark.parametrize("name", sorted(REAL_LOSSES))
def test_gradients_of_real_functions_are_dx_minus_i_dy(name, z, backend):
    f = REAL_LOSSES[name]
    got = tg.grad(f, backend=backend)(z)
    assert got.dtype == C128
    np.testing.assert_allclose(got, wirtinger_fd(f, z), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["abs squared", "imag of log", "conj", "angle", "sqrt tanh"])
def test_second_and_third_orders_of_real_functions(name, z, backend):
    """Order 2: the gradient of a real function of the gradient (its squared size); order 3:
    once more. Each against central differences of the order below."""
    f = REAL_LOSSES[name]
    g1 = tg.grad(f, backend=backend)

    def f2(z):
        return np.sum(np.abs(g1(z)) ** 2)

    g2 = tg.grad(f2, backend=backend)
    np.testing.assert_allclose(g2(z), wirtinger_fd(f2, z), rtol=1e-5, atol=1e-6)

    def f3(z):
        return np.sum(np.real(g2(z) * (0.3 - 0.7j)))

    g3 = tg.grad(f3, backend=backend)
    np.testing.assert_allclose(g3(z), wirtinger_fd(f3, z, 1e-5), rtol=1e-4, atol=1e-5)


def test_real_functions_through_complex_values_have_real_gradients(rng, backend):
    """A real argument reaches complex intermediates (exp(1j x)); its gradient is real."""
    x = rng.uniform(-2, 2, 4)

    def f(x):
        e = np.exp(1j * x)
        return np.sum(np.real(e) * x + np.abs(e * (1 + x)) + np.imag(e**2))

    got = tg.grad(f, backend=backend)(x)
    assert got.dtype == np.float64
    h = 1e-6
    fd = [(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(4)]
    np.testing.assert_allclose(got, fd, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(
        tg.hessian(f, backend=backend)(x),
        [(tg.grad(f)(x + h * e) - tg.grad(f)(x - h * e)) / (2 * h) for e in np.eye(4)],
        rtol=1e-6,
        atol=1e-7,
    )


def test_vjp_and_jvp_pair_through_the_real_part(z, rng, backend):
    """Re(sum(u * J^T v)) == Re(sum(v * J u)) for complex u, v: the two modes are transposes
    under the pairing the convention names; and J u agrees with central differences."""

    def f(z):
        return np.exp(z) * np.conj(z) + np.abs(z) * 1j

    u = rng.normal(size=5) + 1j * rng.normal(size=5)
    v = rng.normal(size=5) + 1j * rng.normal(size=5)
    out, pullback = tg.vjp(f, z, backend=backend)
    (jt_v,) = pullback(v)
    _, j_u = tg.jvp(f, (z,), (u,), backend=backend)
    np.testing.assert_allclose(np.real(np.sum(u * jt_v)), np.real(np.sum(v * j_u)), rtol=1e-12)
    h = 1e-6
    np.testing.assert_allclose(j_u, (f(z + h * u) - f(z - h * u)) / (2 * h), rtol=1e-6)
    np.testing.assert_allclose(out, f(z), rtol=1e-14)


# ----------------------------------------------------------------------------------------------
# Holomorphic derivatives


HOLOMORPHIC = {
    "polynomial": lambda z: z**3 - 2j * z + 1,
    "exp sin": lambda z: np.exp(z) * np.sin(z),
    "log sqrt": lambda z: np.log(z) * np.sqrt(z),
    "tanh": lambda z: np.tanh(z) / (1 + z * z),
}


@pytest.mark.parametrize("name", sorted(HOLOMORPHIC))
def test_holomorphic_derivatives_to_order_three(name, backend):
    f = HOLOMORPHIC[name]
    z0 = 0.7 + 0.4j
    d1 = tg.grad(f, holomorphic=True, backend=backend)
    d2 = tg.grad(d1, holomorphic=True, backend=backend)
    d3 = tg.grad(d2, holomorphic=True, backend=backend)
    np.testing.assert_allclose(d1(z0), complex_fd(f, z0), rtol=1e-7)
    np.testing.assert_allclose(d2(z0), complex_fd(d1, z0), rtol=1e-7)
    np.testing.assert_allclose(d3(z0), complex_fd(d2, z0), rtol=1e-6)
    # a holomorphic function's derivative is the same in every direction
    h = 1e-6
    along_i = (f(z0 + 1j * h) - f(z0 - 1j * h)) / (2j * h)
    np.testing.assert_allclose(d1(z0), along_i, rtol=1e-7)


def test_holomorphic_jacobian_and_hessian(z, backend):
    def f(z):
        return np.exp(z) * z[::-1]

    jac = tg.jacobian(f, holomorphic=True, backend=backend)(z)
    h = 1e-6
    cols = [(f(z + h * e) - f(z - h * e)) / (2 * h) for e in np.eye(5)]
    np.testing.assert_allclose(jac, np.stack(cols, axis=1), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(
        tg.jacfwd(f, holomorphic=True, backend=backend)(z), jac, rtol=1e-12, atol=1e-14
    )

    def g(z):
        return np.sum(z**3 * z[0])

    hess = tg.hessian(g, holomorphic=True, backend=backend)(z)
    d1 = tg.grad(g, holomorphic=True)
    cols = [(d1(z + h * e) - d1(z - h * e)) / (2 * h) for e in np.eye(5)]
    np.testing.assert_allclose(hess, np.stack(cols, axis=1), rtol=1e-6, atol=1e-8)


# ----------------------------------------------------------------------------------------------
# Transforms and loops carry complex values


def test_vmap_scan_and_python_loops_carry_complex_values(z, backend):
    def step(carry, x):
        carry = carry * np.exp(1j * x) + x
        return carry, np.abs(carry)

    def f(z):
        carry, ys = tg.scan(step, 1 + 0j, z)
        return np.real(carry) + np.sum(ys)

    def plain(z):
        carry, total = 1 + 0j, 0.0
        for x in z:
            carry = carry * np.exp(1j * x) + x
            total = total + np.abs(carry)
        return np.real(carry) + total

    np.testing.assert_allclose(tg.jit(f, backend=backend)(z), plain(z), rtol=1e-12)
    np.testing.assert_allclose(
        tg.grad(f, backend=backend)(z), wirtinger_fd(plain, z), rtol=1e-6, atol=1e-7
    )
    np.testing.assert_allclose(
        tg.grad(plain, backend=backend)(z), wirtinger_fd(plain, z), rtol=1e-6, atol=1e-7
    )
    batched = tg.vmap(lambda w: np.abs(np.exp(w) * w), backend=backend)(np.stack([z, 2 * z]))
    np.testing.assert_allclose(batched, np.abs(np.exp(np.stack([z, 2 * z])) * np.stack([z, 2 * z])))


def test_writes_into_complex_arrays(z, backend):
    def f(z):
        y = np.zeros(5, dtype=np.complex128)
        y[1:] = z[:-1] * 1j
        y[0] += z[-1]
        return np.sum(np.abs(y) ** 2 * np.arange(1.0, 6.0))

    np.testing.assert_allclose(tg.jit(f, backend=backend)(z), f(z), rtol=1e-13)
    np.testing.assert_allclose(tg.grad(f, backend=backend)(z), wirtinger_fd(f, z), rtol=1e-6)


@pytest.mark.parametrize(
    "f",
    [np.max, np.min, lambda z: np.amax(z, axis=0), lambda z: np.min(z, axis=1, keepdims=True)],
)
def test_max_and_min_order_complex_values_as_numpy_does(f, backend):
    """By the real part, then the imaginary part; the derivative goes to the element picked
    (not to every element that shares its real part)."""
    z = np.array([[1 + 2j, 3 - 1j, 3 + 5j], [0.5 + 0j, -2 + 9j, 0.5 + 0.1j]])
    np.testing.assert_array_equal(tg.jit(f, backend=backend)(z), f(z))

    def loss(z):
        return np.sum(np.abs(f(z)) ** 2 * 1.5 + np.real(f(z)))

    # a tie in the real part (3 - 1j, 3 + 5j): the whole derivative is the picked element's
    g = tg.grad(lambda z: np.abs(np.max(z)) ** 2, backend=backend)(z)
    assert g[0, 1] == 0 and g[0, 2] == 2 * np.conj(z[0, 2])
    # away from ties the order is smooth: central differences agree
    w = z + np.array([[0.0, 0.25, 0.0], [0.0, 0.0, 0.3]])
    np.testing.assert_allclose(tg.grad(loss, backend=backend)(w), wirtinger_fd(loss, w), atol=1e-6)


# ----------------------------------------------------------------------------------------------
# Refusals


def test_grad_of_a_complex_output_needs_holomorphic(z):
    with pytest.raises(TypeError, match=r"the output is complex .* holomorphic=True"):
        tg.grad(lambda z: np.sum(z * z))(z)
    with pytest.raises(TypeError, match="holomorphic=True"):
        tg.jacobian(lambda z: z * z)(z)
    with pytest.raises(TypeError, match="jacfwd of a function of complex arguments"):
        tg.jacfwd(lambda z: np.abs(z))(z)


def test_holomorphic_needs_complex_arguments_and_outputs(z):
    with pytest.raises(TypeError, match="needs complex arguments"):
        tg.grad(lambda x: x * 1j, holomorphic=True)(1.0)
    with pytest.raises(TypeError, match="needs a complex output"):
        tg.grad(lambda z: np.abs(z), holomorphic=True)(1 + 1j)
    with pytest.raises(ValueError, match="holomorphic=True is for"):
        tg.api.Transformed(lambda z: z, "jit", holomorphic=True)


@pytest.mark.parametrize(
    "fun",
    [np.floor, np.sort, np.argmax, lambda z: np.maximum(z, 1), lambda z: z > 0],
)
def test_orderings_and_roundings_of_complex_values_are_refused(fun, z, backend):
    with pytest.raises(TypeError, match="of complex values is not supported"):
        tg.jit(fun, backend=backend)(z)


def test_real_if_close_of_a_complex_traced_value_is_refused_with_a_fix(z):
    with pytest.raises(tg.TracingError, match=r"np\.real_if_close .* np\.real\(z\)"):
        tg.jit(np.real_if_close)(z)
    np.testing.assert_array_equal(tg.jit(np.real_if_close)(z.real), z.real)


def test_complex_from_parts_keeps_infinities_and_has_both_cotangents(backend):
    """make_complex(x, y) is x + iy without inf * 0 (1j * inf would give nan + inf j)."""
    from tracegrad import primitives as P

    def f(x, y):
        return np.round(x + 0j, 0) * 0 + np.nan_to_num(x + 1j * y, posinf=7.0)

    x, y = np.array([np.inf, 1.5]), np.array([2.0, -np.inf])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(tg.jit(f, backend=backend)(x, y), f(x, y))
    assert P.make_complex is not None
    g = tg.grad(lambda x, y: np.sum(np.abs(np.round(x + 1j * y, 3) * 0 + x + 1j * y) ** 2))
    np.testing.assert_allclose(g(np.array([1.0, 2.0]), np.array([0.5, -1.0])), [2.0, 4.0])


def test_complex256_is_refused_with_a_fix():
    if not hasattr(np, "complex256"):
        pytest.skip("this platform has no complex256")
    with pytest.raises(TypeError, match="complex64 and complex128"):
        tg.jit(lambda z: z)(np.ones(2, np.complex256))


def test_check_grad_checks_complex_arguments_through_their_parts(z):
    assert tg.check_grad(lambda z: np.sum(np.abs(np.exp(z) * z)), z, order=2)

    def wrong(z):  # a derivative rule that drops the imaginary direction would pass a 1-D check
        return np.sum(np.abs(z) ** 2 + np.imag(z) ** 3)

    assert tg.check_grad(wrong, z, order=3)
    # the check sees both directions: a rule that drops d/dy passes along the real axis only
    size = tg.custom_vjp(lambda z: np.sum(np.abs(z) ** 2))
    size.defvjp(lambda z: (np.sum(np.abs(z) ** 2), z), lambda z, ct: (ct * 2 * np.real(z) + 0j,))
    with pytest.raises(tg.GradientCheckError):
        tg.check_grad(size, z)


def test_scipy_erf_of_complex_values_runs_scipys_on_the_host(z, backend):
    """No kernel computes erf of a complex value: it is a host step (SciPy's), with the
    holomorphic rule erf'(z) = 2 exp(-z^2) / sqrt(pi)."""
    special = pytest.importorskip("scipy.special")
    np.testing.assert_allclose(tg.jit(special.erf, backend=backend)(z), special.erf(z), rtol=1e-14)

    def loss(z):
        return np.sum(np.abs(special.erfc(z)) ** 2 + np.real(special.erf(z) * z))

    np.testing.assert_allclose(tg.grad(loss, backend=backend)(z), wirtinger_fd(loss, z), rtol=1e-6)
