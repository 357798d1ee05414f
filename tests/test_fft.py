"""np.fft on traced values: values against NumPy's interpreter on every backend, in both
precisions; derivatives of order 1 and 2 of real losses against central finite differences in
float64, in both directions of the complex plane (the gradient of a real L of z = x + iy is
dL/dx - i dL/dy: docs/complex.md); vjp against jvp; vmap against a loop; and the refusals.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tracegrad as tg

RNG = np.random.default_rng(36)
X = RNG.normal(size=(3, 6))  # real signals, 6 points along the last axis
Z = RNG.normal(size=(3, 4)) + 1j * RNG.normal(size=(3, 4))  # complex ones (irfft: 4 bins)
NORMS = ["backward", "ortho", "forward"]

# name -> (function, input): `n` shorter and longer than the axis, axes given negatively
CASES = {
    "fft": (lambda a: np.fft.fft(a), X),
    "fft complex, n shorter": (lambda a: np.fft.fft(a, n=3, norm="ortho"), Z),
    "fft n longer, axis -2": (lambda a: np.fft.fft(a, n=5, axis=-2), X),
    "ifft": (lambda a: np.fft.ifft(a, norm="forward"), Z),
    "ifft n longer": (lambda a: np.fft.ifft(a, n=7, axis=0), Z),
    "rfft n longer": (lambda a: np.fft.rfft(a, n=9), X),
    "rfft n shorter, axis 0": (lambda a: np.fft.rfft(a, n=2, axis=0, norm="ortho"), X),
    "irfft": (lambda a: np.fft.irfft(a), Z),
    "irfft odd n": (lambda a: np.fft.irfft(a, n=5, norm="ortho"), Z),
    "irfft n longer": (lambda a: np.fft.irfft(a, n=11, axis=-2, norm="forward"), Z),
    "irfft of reals": (lambda a: np.fft.irfft(a, n=4), X),
    "hfft": (lambda a: np.fft.hfft(a, norm="ortho"), Z),
    "ihfft": (lambda a: np.fft.ihfft(a, n=5), X),
    "fft2": (lambda a: np.fft.fft2(a), Z),
    "ifft2 with s": (lambda a: np.fft.ifft2(a, s=(2, 5), norm="ortho"), Z),
    "rfft2": (lambda a: np.fft.rfft2(a, axes=(-1, -2)), X),
    "irfft2 with s": (lambda a: np.fft.irfft2(a, s=(4, 7)), Z),
    "fftn": (lambda a: np.fft.fftn(a, s=(4, 3), axes=(-1, 0), norm="forward"), X),
    "fftn repeated axis": (lambda a: np.fft.fftn(a, s=(4, 6), axes=(1, 1)), X),
    "ifftn": (lambda a: np.fft.ifftn(a), Z),
    "rfftn": (lambda a: np.fft.rfftn(a, norm="ortho"), X[None]),
    "irfftn": (lambda a: np.fft.irfftn(a, s=(2, 3, 5), axes=(0, 2, 1)), Z[None]),
    "fftshift": (lambda a: np.fft.fftshift(a), Z),
    "ifftshift axis": (lambda a: np.fft.ifftshift(a, axes=-1), X),
    "fftfreq, traced spacing": (lambda a: np.fft.fftfreq(5, np.sum(a * a)) * a[0, 0], X),
}


def _single(a):
    return a.astype(np.complex64 if np.iscomplexobj(a) else np.float32)


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_match_numpy_in_both_precisions(name, backend):
    fun, a = CASES[name]
    reference = tg.jit(fun, backend="numpy")(a)  # NumPy's np.fft on the interpreter
    expected = fun(a)
    assert reference.dtype == expected.dtype and reference.shape == expected.shape
    scale = np.max(np.abs(expected)) + 1
    np.testing.assert_allclose(reference, expected, rtol=0, atol=1e-12 * scale)
    got = tg.jit(fun, backend=backend)(a)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, reference, rtol=0, atol=1e-12 * scale)
    # float32 / complex64 stay in single precision (NumPy 2's np.fft does), within 1e-5 of the
    # float64 result relative to its largest value
    small = _single(a)
    got32 = tg.jit(fun, backend=backend)(small)
    expected32 = fun(small)
    assert got32.dtype == expected32.dtype and got32.shape == expected.shape
    np.testing.assert_allclose(got32, expected, rtol=0, atol=1e-5 * scale)


@pytest.mark.parametrize("norm", NORMS)
def test_every_norm_scales_as_numpy_does(norm, backend):
    for fun, a in [
        (lambda v: np.fft.fft(v, n=4, norm=norm), X),
        (lambda v: np.fft.ifft(v, n=6, norm=norm), Z),
        (lambda v: np.fft.rfft(v, norm=norm), X),
        (lambda v: np.fft.irfft(v, n=5, norm=norm), Z),
        (lambda v: np.fft.hfft(v, norm=norm), Z),
        (lambda v: np.fft.ihfft(v, norm=norm), X),
        (lambda v: np.fft.irfftn(v, norm=norm), Z),
    ]:
        np.testing.assert_allclose(tg.jit(fun, backend=backend)(a), fun(a), rtol=1e-12, atol=1e-12)


def test_round_trips_are_the_identity(backend):
    def trips(x, z):
        return (
            np.fft.ifft(np.fft.fft(z)),
            np.fft.irfft(np.fft.rfft(x), n=x.shape[-1]),
            np.fft.irfftn(np.fft.rfftn(x, norm="ortho"), s=x.shape, axes=(0, 1), norm="ortho"),
            np.fft.ifftshift(np.fft.fftshift(x)),
            np.fft.ihfft(np.fft.hfft(z, n=7), n=7),
        )

    x, z = X[:, :5], Z.copy()
    z[:, 0] = z[:, 0].real  # hfft reads the first bin as real
    back = tg.jit(trips, backend=backend)(x, z)
    for got, want in zip(back, [z, x, x, x, z], strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------------------------
# Derivatives, in float64 against central finite differences

W6 = RNG.uniform(0.5, 1.5, size=(3, 6))
W7 = RNG.uniform(0.5, 1.5, size=(3, 7))
C4 = RNG.normal(size=(3, 4)) + 1j * RNG.normal(size=(3, 4))

# name -> (real loss of one array, input): complex inputs are differentiated in x and in y
LOSSES = {
    "power spectrum": (lambda a: np.sum(np.abs(np.fft.fft(a)) ** 2 * W6), X),
    "power spectrum of complex, n longer": (
        lambda a: np.sum(np.abs(np.fft.fft(a, n=6, norm="ortho")) ** 2 * W6),
        Z,
    ),
    "ifft paired with a constant": (lambda a: np.real(np.sum(np.fft.ifft(a) * C4)), Z),
    "ifft squared, forward norm": (
        lambda a: np.sum(np.real(np.fft.ifft(a, norm="forward") ** 2) * C4.real),
        Z,
    ),
    "irfft even n": (lambda a: np.sum(np.fft.irfft(a) * W6), Z),
    "irfft odd n, squared": (lambda a: np.sum(np.fft.irfft(a, n=7, norm="ortho") ** 2 * W7), Z),
    "irfft n shorter, forward norm": (
        lambda a: np.sum(np.sin(np.fft.irfft(a, n=3, norm="forward"))),
        Z,
    ),
    "rfft power, n shorter": (lambda a: np.sum(np.abs(np.fft.rfft(a, n=5)) ** 2 * W6[:, :3]), X),
    "rfft imaginary part, axis 0": (
        lambda a: np.sum(np.imag(np.fft.rfft(a, axis=0, norm="ortho")) ** 3),
        X,
    ),
    "hfft": (lambda a: np.sum(np.fft.hfft(a) ** 2 * W6), Z),
    "ihfft": (lambda a: np.sum(np.abs(np.fft.ihfft(a)) ** 2), X),
    "fft2 and ifft2": (lambda a: np.sum(np.abs(np.fft.ifft2(np.fft.fft2(a) * C4)) ** 2), Z),
    "rfftn then irfftn": (
        lambda a: np.sum(np.fft.irfftn(np.fft.rfftn(a) ** 2, s=(3, 6), axes=(0, 1)) * W6),
        X,
    ),
    "fftshift": (lambda a: np.sum(np.abs(np.fft.fftshift(np.fft.fft(a))) * W6), X),
}


def _fd_gradient(f, a, h=1e-6):
    """dL/dx (and - i dL/dy for complex `a`) by central differences."""
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        e = np.zeros(a.shape)
        e[i] = h
        g[i] = (f(a + e) - f(a - e)) / (2 * h)
        if np.iscomplexobj(a):
            g[i] -= 1j * (f(a + 1j * e) - f(a - 1j * e)) / (2 * h)
    return g


def _as_real(f, a):
    """f as a function of one real vector: a itself, or the real then the imaginary parts."""
    if not np.iscomplexobj(a):
        return (lambda p: f(p.reshape(a.shape))), a.reshape(-1)
    n = a.size
    return (lambda p: f((p[:n] + 1j * p[n:]).reshape(a.shape))), np.concatenate(
        [a.real.reshape(-1), a.imag.reshape(-1)]
    )


def _fd_hessian(f, p, h=1e-4):
    n = p.size
    hess = np.zeros((n, n))
    for i in range(n):
        for j in range(i, n):
            ei, ej = np.eye(n)[i] * h, np.eye(n)[j] * h
            hess[i, j] = hess[j, i] = (
                f(p + ei + ej) - f(p + ei - ej) - f(p - ei + ej) + f(p - ei - ej)
            ) / (4 * h * h)
    return hess


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_gradient_matches_finite_differences_in_both_directions(name, backend):
    loss, a = LOSSES[name]
    got = tg.grad(loss, backend=backend)(a)
    assert got.dtype == a.dtype
    np.testing.assert_allclose(got, _fd_gradient(loss, a), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_second_derivatives_match_finite_differences(name, backend):
    """The hessian in the real and imaginary parts (the rules of the rules: every transform's
    adjoint differentiated again)."""
    loss, a = LOSSES[name]
    f, p = _as_real(loss, a)
    got = tg.hessian(f, backend=backend)(p)
    expected = _fd_hessian(f, p)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=2e-5 * (np.max(np.abs(expected)) + 1))


def test_a_wrong_rule_would_be_caught():
    """The finite-difference check tells apart the irfft rule from one without the Hermitian
    weights (every bin counted once)."""
    loss, a = LOSSES["irfft even n"]
    unweighted = np.conj(np.fft.rfft(W6)) / 6  # ct without the weights 1, 2, 2, 1
    assert np.max(np.abs(unweighted - _fd_gradient(loss, a))) > 0.1
    np.testing.assert_allclose(tg.grad(loss)(a), _fd_gradient(loss, a), rtol=1e-6, atol=1e-6)


def test_holomorphic_derivative_of_fft_is_its_transpose():
    """sum(c * fft(z)) is complex-linear: its derivative is fft(c) (the DFT matrix is symmetric)."""
    z, c = Z[0], C4[0]
    got = tg.grad(lambda v: np.sum(np.fft.fft(v, norm="ortho") * c), holomorphic=True)(z)
    np.testing.assert_allclose(got, np.fft.fft(c, norm="ortho"), rtol=1e-12, atol=1e-12)


# name -> (function, input, output cotangent kind) for vjp against jvp
LINEAR = {
    "fft": (lambda a: np.fft.fft(a, n=5, norm="ortho"), Z),
    "ifftn": (lambda a: np.fft.ifftn(a, s=(2, 6), axes=(0, 1)), Z),
    "rfft": (lambda a: np.fft.rfft(a, n=7), X),
    "irfft": (lambda a: np.fft.irfft(a, n=6, norm="forward"), Z),
    "irfft2": (lambda a: np.fft.irfft2(a, s=(3, 5)), Z),
    "hfft": (lambda a: np.fft.hfft(a, n=5), Z),
}


def _random_like(shape, complex_):
    v = RNG.normal(size=shape)
    return v + 1j * RNG.normal(size=shape) if complex_ else v


@pytest.mark.parametrize("name", sorted(LINEAR))
def test_vjp_is_the_transpose_of_jvp(name):
    """Re(sum(u * J^T v)) == Re(sum(v * J u)) for random u and v (complex where the values are)."""
    fun, a = LINEAR[name]
    out = fun(a)
    u = _random_like(a.shape, np.iscomplexobj(a))
    v = _random_like(out.shape, np.iscomplexobj(out))
    _, ju = tg.jvp(fun, (a,), (u,))
    _, pullback = tg.vjp(fun, a)
    (jtv,) = pullback(v)
    np.testing.assert_allclose(ju, fun(u), rtol=1e-12, atol=1e-12)  # linear: J u = f(u)
    lhs, rhs = np.real(np.sum(u * jtv)), np.real(np.sum(v * ju))
    np.testing.assert_allclose(lhs, rhs, rtol=1e-12)


def test_vmap_matches_a_loop(backend):
    batch = RNG.normal(size=(4, 3, 6))
    funs = [
        lambda a: np.fft.fft(a, n=5, axis=0),
        lambda a: np.fft.rfft2(a, norm="ortho"),
        lambda a: np.fft.irfft(np.fft.rfft(a) * 2, n=7),
        lambda a: np.fft.fftshift(np.fft.ifftn(a, axes=(-1, 0))),
    ]
    for fun in funs:
        got = tg.vmap(fun, backend=backend)(batch)
        np.testing.assert_allclose(got, np.stack([fun(b) for b in batch]), rtol=0, atol=1e-12)
    got = tg.vmap(lambda a: np.fft.fft(a), in_axes=1, backend=backend)(batch)
    np.testing.assert_allclose(got, np.stack([np.fft.fft(batch[:, i]) for i in range(3)]))


def test_jacobian_batches_the_adjoints(backend):
    """jacobian runs the adjoint rules through the batching transform: against grad per row."""

    def f(a):
        return np.abs(np.fft.irfft(np.fft.fft(a, n=4), n=5)) + np.abs(np.fft.rfft(a, n=9)[:5])

    x = X[0]
    jac = tg.jacobian(f, backend=backend)(x)
    rows = [tg.grad(lambda a, i=i: f(a)[i])(x) for i in range(5)]
    np.testing.assert_allclose(jac, np.stack(rows), rtol=1e-12, atol=1e-12)


def test_the_users_arrays_are_not_modified(backend):
    x, z = X.copy(), Z.copy()
    for fun in [
        lambda a, b: np.sum(np.abs(np.fft.fft(a, n=8)) + np.fft.irfft(b, n=3)[0, 0]),
        lambda a, b: (
            np.sum(np.fft.hfft(b)) + np.sum(np.abs(np.fft.rfftn(a, s=(2, 9), axes=(0, 1))))
        ),
    ]:
        tg.jit(fun, backend=backend)(x, z)
        tg.grad(fun, argnums=(0, 1), backend=backend)(x, z)
    np.testing.assert_array_equal(x, X)
    np.testing.assert_array_equal(z, Z)


def test_fftfreq_of_a_traced_spacing_has_a_derivative():
    # sum(fftfreq(8, d) ** 2) = c / d ** 2 with c = sum(k ** 2) / 64 over k = 0..3, -4..-1
    c = np.sum(np.fft.fftfreq(8) ** 2)
    got = tg.grad(lambda d: np.sum(np.fft.fftfreq(8, d) ** 2) + np.sum(np.fft.rfftfreq(8, d)))(0.5)
    expected = -2 * c / 0.5**3 - np.sum(np.fft.rfftfreq(8)) / 0.5**2
    np.testing.assert_allclose(got, expected, rtol=1e-12)


# ----------------------------------------------------------------------------------------------
# Refusals: NumPy's error types, messages that name the problem and the fix


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda a: np.fft.fft(a, axis=2), IndexError, r"axis 2 is out of bounds .* dimension 2"),
        (lambda a: np.fft.rfftn(a, axes=(0, -3)), IndexError, r"axis -3 is out of bounds"),
        (lambda a: np.fft.fft(a, n=0), ValueError, r"number of FFT data points \(0\).*n >= 1"),
        (lambda a: np.fft.irfft(a[:, :1]), ValueError, r"number of FFT data points \(0\)"),
        (lambda a: np.fft.ifft(a, norm="unitary"), ValueError, r"norm value 'unitary'.*ortho"),
        (lambda a: np.fft.fft(a, n=2.5), TypeError, r"number of points must be an int"),
        (lambda a: np.fft.rfft(a * 1j), TypeError, r"rfft takes real values.*np\.fft\.fft"),
        (lambda a: np.fft.fftn(a, s=(2, 3), axes=(0,)), ValueError, r"shape and axes"),
        (lambda a: np.fft.fft(a, out=np.empty((3, 6), complex)), tg.TracingError, r"out="),
    ],
)
def test_bad_input_is_refused_clearly(call, error, message):
    with pytest.raises(error, match=message):
        tg.jit(call)(X)
    if error is not tg.TracingError:
        with pytest.raises(error):  # NumPy's own error type for the same call
            call(X)


def test_s_without_axes_warns_as_numpy_does():
    with pytest.warns(DeprecationWarning, match="`axes` should not be `None`"):
        got = tg.jit(lambda a: np.fft.fftn(a, s=(2, 4)))(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        np.testing.assert_allclose(got, np.fft.fftn(X, s=(2, 4)), rtol=1e-12, atol=1e-12)


def test_each_transform_is_one_node_and_n_a_shape_node():
    """A transform is one node of the table (a step of its own on every backend); padding to `n`
    is an unslice before it, truncation a slice."""
    graph = tg.make_ir(lambda a: np.fft.rfft(np.fft.ifft(a, n=6).real, n=4))(Z)
    names = [node.prim.name for node in graph.nodes]
    assert names.count("fft") == 1 and names.count("rfft") == 1
    assert names.count("unslice") == 1 and names.count("slice") == 1
