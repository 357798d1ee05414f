"""Complex numbers through NumPy's products, reductions, statistics and np.linalg (issue 36): values
equal to NumPy's in complex128 and complex64 (the complex64 ones against the complex128 result),
first and second derivatives of real losses against central finite differences in float64 in
both directions of the complex plane (the gradient of a real L at z = x + iy is dL/dx - i dL/dy,
docs/complex.md), holomorphic functions also through grad/jacobian(holomorphic=True) against
complex finite differences, and the refusals of what is not right for complex input yet.

The cuda backend's complex kernels are tested in tests/test_complex.py; here numpy and cpu.
"""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from conftest import BACKENDS

RNG = np.random.default_rng(36)
C128, C64 = np.dtype(np.complex128), np.dtype(np.complex64)


@pytest.fixture(params=[b for b in BACKENDS if b != "cuda"])
def backend(request):
    return request.param


def cplx(*shape) -> np.ndarray:
    return RNG.normal(size=shape) + 1j * RNG.normal(size=shape)


def well_conditioned(n: int, *lead) -> np.ndarray:
    return cplx(*lead, n, n) + 3 * np.eye(n)


def fd_grad(f, z: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """dL/dx - i dL/dy of a real L = f(z) at complex z, by central differences in float64."""
    z = np.asarray(z, C128)
    g = np.zeros(z.shape, C128)
    for idx in np.ndindex(z.shape):
        for step, weight in ((1.0, 1.0), (1j, -1j)):  # x, then y
            e = np.zeros(z.shape, C128)
            e[idx] = step * eps
            g[idx] += weight * (f(z + e) - f(z - e)) / (2 * eps)
    return g


def fd_holomorphic(f, z: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """The complex derivative dF_i/dz_j of a holomorphic F, by central differences along x (shape:
    F's shape + z's shape)."""
    z = np.asarray(z, C128)
    out = None
    for idx in np.ndindex(z.shape):
        e = np.zeros(z.shape, C128)
        e[idx] = eps
        d = (np.asarray(f(z + e)) - np.asarray(f(z - e))) / (2 * eps)
        if out is None:
            out = np.zeros(d.shape + z.shape, C128)
        out[(...,) + idx] = d
    return out


# name -> (f, arguments, holomorphic in its first argument)
A3, B32, V3, W3 = well_conditioned(3), cplx(3, 2), cplx(3), cplx(3)
S234 = cplx(2, 3, 4)
SINGULAR = np.outer(cplx(3), cplx(3)) + np.outer(cplx(3), cplx(3))  # rank 2 (in exact numbers)
_B = cplx(3, 3)
# Hermitian positive definite in its lower triangle, which is all cholesky reads (not the upper)
HPD = _B @ _B.conj().T + 3 * np.eye(3) + np.triu(cplx(3, 3), 1)
EXACTLY_SINGULAR = np.array([[1 + 1j, 2, 3j], [1 + 1j, 2, 3j], [0.5, 1 - 1j, 2]])
CASES = {
    # products
    "dot": (np.dot, (A3, B32), True),
    "dot_3d": (np.dot, (cplx(2, 3), cplx(2, 3, 2)), True),
    "matmul": (lambda a, b: a @ b, (cplx(2, 2, 3), B32), True),
    "matmul_real_right": (lambda a, b: a @ b, (A3, B32.real.copy()), True),
    "vdot": (np.vdot, (cplx(2, 3), cplx(3, 2)), False),  # conjugates its first argument
    "vdot_second": (lambda a, b: np.vdot(b, a), (V3, W3), True),
    "inner": (np.inner, (cplx(2, 3), cplx(4, 3)), True),
    "outer": (np.outer, (V3, cplx(2)), True),
    "einsum_matmul": (lambda a, b: np.einsum("ij,jk->ik", a, b), (A3, B32), True),
    "einsum_trace": (lambda a: np.einsum("ii", a), (A3,), True),
    "einsum_diagonal": (lambda a: np.einsum("ii->i", a), (A3,), True),
    "einsum_batch": (
        lambda a, b: np.einsum("...ij,...jk->...ik", a, b),
        (cplx(2, 3, 3), cplx(2, 3, 2)),
        True,
    ),
    "einsum_three": (
        lambda a, b, c: np.einsum("ij,jk,k->i", a, b, c),
        (A3, B32, cplx(2)),
        True,
    ),
    "einsum_sublists": (lambda a, b: np.einsum(a, [0, 1], b, [1], [0]), (A3, V3), True),
    "tensordot": (lambda a, b: np.tensordot(a, b, axes=([1, 2], [0, 1])), (S234, cplx(3, 4)), True),
    "kron": (np.kron, (cplx(2, 2), B32), True),
    "trace": (lambda a: np.trace(a, offset=1), (cplx(3, 4),), True),
    "multi_dot": (lambda a, b: np.linalg.multi_dot([a, a, b]), (A3, B32), True),
    "cross": (np.cross, (V3, W3), True),
    # sequences: np.correlate conjugates its second argument
    "correlate": (lambda a, v: np.correlate(a, v, "full"), (cplx(5), cplx(3)), False),
    "correlate_longer_v": (lambda a, v: np.correlate(a, v, "same"), (cplx(3), cplx(5)), False),
    "correlate_valid": (np.correlate, (cplx(5), cplx(3)), True),  # holomorphic in a
    "convolve": (lambda a, v: np.convolve(a, v, "same"), (cplx(5), cplx(3)), True),
    "interp": (
        lambda f: np.interp(np.array([0.5, 1.5, -1.0, 3.5, 3.0]), np.arange(4.0), f),
        (cplx(4),),
        True,
    ),
    "interp_left_right": (
        lambda f: np.interp(np.array([-1.0, 1.25, 4.0]), np.arange(4.0), f, 1 + 2j, -3.0),
        (cplx(4),),
        True,
    ),
    # reductions and scans
    "sum": (lambda a: np.sum(a, axis=1), (S234,), True),
    "prod": (lambda a: np.prod(a, axis=(0, 2)), (S234,), True),
    "mean": (lambda a: np.mean(a, axis=-1, keepdims=True), (S234,), True),
    "cumsum": (lambda a: np.cumsum(a, axis=1), (S234,), True),
    "cumprod": (lambda a: np.cumprod(a, axis=2), (S234,), True),
    "diff": (lambda a: np.diff(a, n=2, axis=2), (S234,), True),
    "average": (lambda a: np.average(a, axis=1, weights=np.arange(1.0, 4.0)), (S234,), True),
    "average_complex_weights": (
        lambda a, w: np.average(a, axis=1, weights=w),
        (S234, cplx(3) + 2),
        True,
    ),
    # statistics: real results, mean(|x - mean|^2)
    "var": (lambda a: np.var(a, axis=1), (S234,), False),
    "var_ddof": (lambda a: np.var(a, ddof=1), (cplx(5),), False),
    "std": (lambda a: np.std(a, axis=(0, 2)), (S234,), False),
    "nansum": (lambda a: np.nansum(a, axis=1), (S234,), True),
    "nanmean": (lambda a: np.nanmean(a, axis=1), (S234,), True),
    "nanprod": (lambda a: np.nanprod(a, axis=1), (S234,), True),
    "nanvar": (lambda a: np.nanvar(a, axis=2), (S234,), False),
    "nanstd": (lambda a: np.nanstd(a, axis=1, ddof=1), (S234,), False),
    "nancumsum": (lambda a: np.nancumsum(a, axis=1), (S234,), True),
    "cov": (np.cov, (cplx(2, 5),), False),
    "cov_y_columns": (
        lambda a, b: np.cov(a, b, rowvar=False, ddof=0),
        (cplx(5, 2), cplx(5, 1)),
        False,
    ),
    "corrcoef": (np.corrcoef, (cplx(3, 5),), False),
    # norms: real results from |x|
    "norm": (np.linalg.norm, (S234,), False),
    "norm_vector": (lambda a: np.linalg.norm(a, axis=1), (S234,), False),
    "norm_1": (lambda a: np.linalg.norm(a, 1), (cplx(4),), False),
    "norm_3": (lambda a: np.linalg.norm(a, 3, axis=0), (cplx(4, 2),), False),
    "norm_-1": (lambda a: np.linalg.norm(a, -1), (cplx(4),), False),
    "norm_inf": (lambda a: np.linalg.norm(a, np.inf), (cplx(4),), False),
    "norm_-inf": (lambda a: np.linalg.norm(a, -np.inf), (cplx(4),), False),
    "norm_fro": (lambda a: np.linalg.norm(a, "fro", keepdims=True), (A3,), False),
    "norm_matrix_1": (lambda a: np.linalg.norm(a, 1, axis=(1, 2)), (S234,), False),
    "norm_matrix_inf": (lambda a: np.linalg.norm(a, np.inf), (A3,), False),
    "norm_matrix_-1": (lambda a: np.linalg.norm(a, -1), (A3,), False),
    # linear algebra
    "solve": (np.linalg.solve, (well_conditioned(3, 2), cplx(2, 3, 2)), True),
    "solve_vector": (np.linalg.solve, (A3, V3), True),
    "inv": (np.linalg.inv, (well_conditioned(3, 2),), True),
    "det": (np.linalg.det, (well_conditioned(3, 2),), True),
    "det_singular": (np.linalg.det, (SINGULAR,), True),
    "slogdet_sign": (lambda a: np.linalg.slogdet(a)[0], (well_conditioned(3, 2),), False),
    "slogdet_logabsdet": (lambda a: np.linalg.slogdet(a)[1], (well_conditioned(3, 2),), False),
    "matrix_power": (lambda a: np.linalg.matrix_power(a, 3), (A3,), True),
    "matrix_power_negative": (lambda a: np.linalg.matrix_power(a, -2), (A3,), True),
    "cond_1": (lambda a: np.linalg.cond(a, 1), (A3,), False),
    # Hermitian eigenvalues (of the Hermitian matrix read from the lower or upper triangle)
    "eigvalsh": (np.linalg.eigvalsh, (cplx(2, 3, 3),), False),
    "eigvalsh_upper": (lambda a: np.linalg.eigvalsh(a, "U"), (cplx(3, 3),), False),
    "eigh_values": (lambda a: np.linalg.eigh(a @ a.conj().T + a)[0], (cplx(3, 3),), False),
    # Cholesky factors of Hermitian matrices, and triangular solves with them
    "cholesky": (np.linalg.cholesky, (HPD,), False),
    "cholesky_upper": (lambda a: np.linalg.cholesky(a, upper=True), (HPD,), False),
    "cholesky_solve": (
        lambda a, b: np.linalg.solve(np.linalg.cholesky(a).T, b),
        (HPD, B32),
        False,
    ),
    # QR (R's diagonal real, as LAPACK's: a unique factorisation, derivatives of every order)
    "qr_q": (lambda a: np.linalg.qr(a)[0], (cplx(2, 3, 3),), False),
    "qr_r": (lambda a: np.linalg.qr(a)[1], (cplx(3, 3),), False),
    "qr_tall": (lambda a: np.linalg.qr(a)[0] + np.linalg.qr(a)[1][0], (cplx(4, 2),), False),
    "qr_wide": (lambda a: np.linalg.qr(a)[1] * np.linalg.qr(a)[0][0, 0], (cplx(2, 4),), False),
    # singular values (real)
    "svdvals": (np.linalg.svdvals, (cplx(2, 3, 3),), False),
    "svdvals_wide": (np.linalg.svdvals, (cplx(2, 4),), False),
    "svd_values": (lambda a: np.linalg.svd(a, full_matrices=False)[1], (cplx(4, 2),), False),
    "norm_2": (lambda a: np.linalg.norm(a, 2), (A3,), False),
    "norm_-2": (lambda a: np.linalg.norm(a, -2), (A3,), False),
    "norm_nuc": (lambda a: np.linalg.norm(a, "nuc", axis=(1, 2)), (S234,), False),
    "cond": (np.linalg.cond, (A3,), False),
    # pseudo-inverses and least squares: values; derivatives in b (holomorphic), not in a
    "pinv_value": (np.linalg.pinv, (cplx(2, 3, 4),), False),
    "lstsq_solution": (lambda b, a: np.linalg.lstsq(a, b)[0], (cplx(4, 2), cplx(4, 3)), True),
    "lstsq_residuals": (lambda b, a: np.linalg.lstsq(a, b)[1], (cplx(4), cplx(4, 3)), False),
    "lstsq_real_matrix": (
        lambda b, a: np.linalg.lstsq(a, b)[0],
        (cplx(3), RNG.normal(size=(3, 4))),
        True,
    ),
    "cond_fro": (lambda a: np.linalg.cond(a, "fro"), (A3,), False),
}
# det's second derivatives go through inv (as for real matrices): not at a singular matrix
FIRST_ORDER_ONLY = {"det_singular", "cond"}
# Derivatives are checked on the interpreter for every case, and compiled for the cpu backend
# for these (a backend runs the same derivative graphs; compiling every one takes minutes):
# each rule that branches on complex dtypes, and a few of the products
SECOND_ORDER_CPU = {"matmul", "vdot", "einsum_three", "cumprod", "var", "norm", "cov", "solve"}
SECOND_ORDER_CPU |= {"inv", "det", "slogdet_sign", "slogdet_logabsdet", "cholesky", "qr_wide"}
FIRST_ORDER_CPU = SECOND_ORDER_CPU | {"correlate", "interp_left_right", "std", "nanvar", "norm_1"}
FIRST_ORDER_CPU |= {"corrcoef", "det_singular", "eigvalsh_upper", "svdvals_wide", "qr_tall"}
FIRST_ORDER_CPU |= {"norm_nuc", "cond", "cholesky_upper", "cond_1", "norm_matrix_inf"}
HOLOMORPHIC_CPU = {"matmul", "einsum_three", "det", "solve", "inv", "matrix_power_negative"}
HOLOMORPHIC_CPU |= {"cumprod", "interp", "convolve"}
DERIVATIVE_BACKENDS = [b for b in BACKENDS if b != "cuda"]


def _derivative_cases(names, on_cpu):
    return [(n, b) for b in DERIVATIVE_BACKENDS for n in sorted(names) if b != "cpu" or n in on_cpu]


HOLOMORPHIC = sorted(n for n, (_, _, h) in CASES.items() if h)
# derivatives through complex singular vectors are refused (test_pinv_and_lstsq_...)
VALUES_ONLY = {"pinv_value"}
FIRST_ARGUMENT_ONLY = {"lstsq_solution", "lstsq_residuals", "lstsq_real_matrix"}


def _as(args, dtype):
    return tuple(a.astype(dtype) if np.iscomplexobj(a) else a for a in args)


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_equal_numpys(name, backend):
    f, args, _ = CASES[name]
    before = [a.copy() for a in args]
    want = f(*args)
    got = tg.jit(f, backend=backend)(*args)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, want.dtype)
    scale = max(float(np.max(np.abs(want), initial=0.0)), 1.0)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12 * scale)
    for a, b in zip(args, before, strict=True):
        np.testing.assert_array_equal(a, b)  # the user's arrays are not modified
    # complex64: NumPy's result dtype, values within float32 rounding of the complex128 ones
    if backend == "cpu" and name not in FIRST_ORDER_CPU | HOLOMORPHIC_CPU:
        return  # (compiled for a subset: a program each)
    small = _as(args, C64)
    got32 = tg.jit(f, backend=backend)(*small)
    assert got32.dtype == f(*small).dtype
    np.testing.assert_allclose(got32, want, rtol=2e-4, atol=2e-5 * scale)


def _loss(f, args, k: int):
    """A real loss of f's output, as a function of its argument k: sum(|y|^2 w) + Re(sum(y c))
    with fixed real w and complex c, for a complex y; sum(y w) for a real one."""
    out = np.asarray(f(*args))
    rng = np.random.default_rng(len(out.shape) + out.size)
    w = rng.uniform(0.5, 1.5, out.shape)
    c = rng.normal(size=out.shape) + 1j * rng.normal(size=out.shape)
    complex_out = np.iscomplexobj(out)

    def loss(z):
        y = f(*args[:k], z, *args[k + 1 :])
        if complex_out:
            return np.sum(np.abs(y) ** 2 * w) + np.real(np.sum(y * c))
        return np.sum(y * w)

    return loss


def _complex_arguments(args):
    return [k for k, a in enumerate(args) if np.iscomplexobj(a)]


@pytest.mark.parametrize(("name", "backend"), _derivative_cases(CASES, FIRST_ORDER_CPU))
def test_gradients_of_real_losses(name, backend):
    """Order 1 against finite differences of NumPy's function; order 2 (the gradient of <v, g>
    for a complex direction v) against finite differences of the order-1 gradient."""
    f, args, _ = CASES[name]
    second_order = name not in FIRST_ORDER_ONLY and (backend == "numpy" or name in SECOND_ORDER_CPU)
    if name in VALUES_ONLY:
        return
    for k in _complex_arguments(args)[: 1 if name in FIRST_ARGUMENT_ONLY else None]:
        _check_gradients(_loss(f, args, k), args[k], backend, second_order, seed=k)


def _check_gradients(loss, z, backend, second_order: bool, seed: int) -> None:
    grad = tg.grad(loss, backend=backend)
    g = grad(z)
    assert g.dtype == C128 and g.shape == z.shape
    want = fd_grad(lambda t: float(loss(t)), z)
    np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-6 * max(1.0, np.abs(want).max()))
    if not second_order:
        return
    v = np.random.default_rng(seed).normal(size=z.shape) * (1 - 2j)
    directional = lambda t: np.sum(np.real(tg.grad(loss)(t) * v))
    g2 = tg.grad(directional, backend=backend)(z)
    want2 = fd_grad(lambda t: float(np.sum(np.real(grad(t) * v))), z)
    np.testing.assert_allclose(g2, want2, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(want2).max()))


@pytest.mark.parametrize(("name", "backend"), _derivative_cases(HOLOMORPHIC, HOLOMORPHIC_CPU))
def test_holomorphic_derivatives(name, backend):
    """jacobian(holomorphic=True) is the complex derivative dF/dz; grad(holomorphic=True) of the
    complex scalar sum(F c) is its contraction with c."""
    f, args, _ = CASES[name]
    z, rest = args[0], args[1:]
    fun = lambda t: f(t, *rest)
    jac = tg.jacobian(fun, holomorphic=True, backend=backend)(z)
    want = fd_holomorphic(fun, z)
    assert jac.dtype == C128 and jac.shape == want.shape
    np.testing.assert_allclose(jac, want, rtol=1e-6, atol=1e-6 * max(1.0, np.abs(want).max()))
    c = cplx(*np.shape(fun(z)))
    g = tg.grad(lambda t: np.sum(fun(t) * c), holomorphic=True, backend=backend)(z)
    np.testing.assert_allclose(g, np.tensordot(c, want, c.ndim), rtol=1e-6, atol=1e-6)


def test_vdot_conjugates_its_first_argument(backend):
    a, b = cplx(4), cplx(4)
    got = tg.jit(np.vdot, backend=backend)(a, b)
    np.testing.assert_allclose(got, np.sum(np.conj(a) * b), rtol=1e-12)
    assert not np.allclose(got, np.sum(a * b))


def test_statistics_of_complex_values_are_real(backend):
    """var, std, nanvar, nanstd and norm: |x - mean|^2 and |x| (not (x - mean)^2 or x^2, which
    are complex), in the parts' dtype."""
    x = cplx(6).astype(C64)
    x[2] = np.nan
    clean = x[[0, 1, 3, 4, 5]]
    for f, arg in [
        (np.var, clean),
        (np.std, clean),
        (np.nanvar, x),
        (np.nanstd, x),
        (np.linalg.norm, clean),
        (lambda a: np.linalg.norm(a, 0), clean),
    ]:
        got = tg.jit(f, backend=backend)(arg)
        want = f(arg.astype(C128))
        assert got.dtype == np.float32 and np.isrealobj(want)
        np.testing.assert_allclose(got, want, rtol=1e-5)
    mean = np.mean(clean.astype(C128))
    np.testing.assert_allclose(
        tg.jit(np.var, backend=backend)(clean), np.mean(np.abs(clean - mean) ** 2), rtol=1e-5
    )


def test_slogdet_of_singular_complex_matrix(backend):
    assert np.linalg.slogdet(EXACTLY_SINGULAR)[0] == 0  # NumPy's answer
    sign, logabsdet = tg.jit(np.linalg.slogdet, backend=backend)(EXACTLY_SINGULAR)
    assert sign == 0 and sign.dtype == C128
    assert logabsdet == -np.inf and logabsdet.dtype == np.float64


def test_slogdet_sign_has_unit_modulus_and_derivative(backend):
    a = well_conditioned(3)
    sign, logabsdet = tg.jit(np.linalg.slogdet, backend=backend)(a)
    np.testing.assert_allclose(sign * np.exp(logabsdet), np.linalg.det(a), rtol=1e-12)
    # the phase of det moves with a: its derivative is not zero (as for real matrices)
    g = tg.grad(lambda t: np.imag(np.linalg.slogdet(t)[0]), backend=backend)(a)
    assert np.abs(g).max() > 1e-3


ORDERED = {  # np.max and np.min order complex values as NumPy does: tests/test_complex.py
    "argmax": np.argmax,
    "argmin": np.argmin,
    "ptp": np.ptp,
    "sort": np.sort,
    "argsort": np.argsort,
    "median": np.median,
    "percentile": lambda a: np.percentile(a, 30),
    "nanmax": np.nanmax,
    "nanargmin": np.nanargmin,
}


@pytest.mark.parametrize("name", sorted(ORDERED))
def test_ordering_functions_refuse_complex(name):
    with pytest.raises(TypeError, match=r"lexicographically.*np\.abs"):
        tg.jit(ORDERED[name], backend="numpy")(cplx(4))


@pytest.mark.parametrize(
    "f",
    [
        lambda a: np.clip(a, 0, 1),
        lambda a: np.maximum(a, a.conj()),
        lambda a: np.minimum(a, 0),
    ],
    ids=["clip", "maximum", "minimum"],
)
def test_elementwise_orderings_refuse_complex(f):
    with pytest.raises(TypeError, match="of complex values is not supported"):
        tg.jit(f, backend="numpy")(cplx(4))


@pytest.mark.parametrize(
    "f",
    [np.linalg.pinv, lambda a: np.linalg.lstsq(a, a[:, 0] + 1)[0]],
    ids=["pinv", "lstsq"],
)
def test_pinv_and_lstsq_derivatives_in_a_complex_matrix(f):
    """Through the singular vectors (pinv = V S^-1 U^H does not see their phases)."""
    loss = lambda a: np.sum(np.abs(f(a)) ** 2)
    np.testing.assert_allclose(
        tg.grad(loss, backend="numpy")(A3), fd_grad(loss, A3), rtol=1e-6, atol=1e-6
    )


def test_complex_eigenvectors_have_numpys_values_and_phase_free_derivatives(backend):
    a = cplx(2, 3, 3)
    for uplo in "LU":
        w, v = tg.jit(np.linalg.eigh, static_argnums=1, backend=backend)(a, uplo)
        want_w, want_v = np.linalg.eigh(a, uplo)
        assert w.dtype == np.float64 and v.dtype == C128
        np.testing.assert_allclose(w, want_w, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(v, want_v, rtol=1e-12, atol=1e-12)

        # a function of |v| does not see the eigenvectors' phases: exact derivatives
        def loss(t, uplo=uplo):
            w, v = np.linalg.eigh(t, uplo)
            return np.sum(np.abs(v) ** 2 * np.arange(9.0).reshape(3, 3)) + np.sum(w**2)

        g = tg.grad(loss, backend=backend)(a[0])
        np.testing.assert_allclose(g, fd_grad(loss, a[0]), rtol=1e-6, atol=1e-7)
    # one that sees them (Re v) has no derivative: NaN, not a number in some phase convention
    g = tg.grad(lambda t: np.sum(np.real(np.linalg.eigh(t)[1])), backend=backend)(a[0])
    assert np.isnan(g[np.tril_indices(3)]).all()
    # second derivatives of the eigenvalues go through the eigenvectors' rule
    first = tg.grad(lambda u: np.sum(np.linalg.eigvalsh(u) ** 3))

    def directional(t):
        return np.real(np.sum(first(t) * np.arange(9.0).reshape(3, 3)))

    np.testing.assert_allclose(
        tg.grad(directional, backend=backend)(a[0]), fd_grad(directional, a[0]), atol=1e-5
    )


def test_complex_singular_vectors_have_numpys_values_and_phase_free_derivatives(backend):
    a = cplx(2, 4, 3)
    u, s, vt = tg.jit(lambda t: np.linalg.svd(t, full_matrices=False), backend=backend)(a)
    want = np.linalg.svd(a, full_matrices=False)
    assert s.dtype == np.float64 and u.dtype == vt.dtype == C128
    for got, expected in zip((u, s, vt), want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    rank = tg.jit(np.linalg.matrix_rank, backend=backend)(SINGULAR)
    assert rank == np.linalg.matrix_rank(SINGULAR) == 2
    weights = np.arange(12.0).reshape(4, 3) / 5
    c = cplx(3, 3)

    def separately(t):  # |u| and |v^H|: each vector's phase unseen
        u, s, vt = np.linalg.svd(t, full_matrices=False)
        return np.sum(np.abs(u) ** 2 * weights) + np.sum(s**3) + np.sum(np.abs(vt) ** 3)

    def jointly(t):  # u_k v_k^H: the pair's common phase unseen
        u, _, vt = np.linalg.svd(t, full_matrices=False)
        return np.real(np.sum(c * (u[:3] @ vt)))

    for loss in (separately, jointly):
        g = tg.grad(loss, backend=backend)(a[0])
        np.testing.assert_allclose(g, fd_grad(loss, a[0]), rtol=1e-6, atol=1e-6)
    # the singular values' second derivatives go through the vectors' rules
    first = tg.grad(lambda m: np.linalg.norm(m, "nuc"))

    def directional(t):
        return np.real(np.sum(first(t) * (1 + 0.5j)))

    np.testing.assert_allclose(
        tg.grad(directional, backend=backend)(a[0]), fd_grad(directional, a[0]), atol=1e-5
    )


def test_interp_refuses_complex_coordinates():
    with pytest.raises(TypeError, match=r"np.interp: xp must be real.*np\.real\(xp\)"):
        tg.jit(lambda xp: np.interp(np.array([0.5]), xp, np.arange(3.0)), backend="numpy")(cplx(3))


def test_real_input_is_unchanged_by_the_complex_paths(backend):
    """The real paths give NumPy's values still (var, norm, cov, corrcoef, slogdet, vdot)."""
    x, a = RNG.normal(size=(3, 5)), RNG.normal(size=(3, 3)) + 3 * np.eye(3)
    for f, arg in [
        (lambda t: np.var(t, axis=1), x),
        (np.linalg.norm, x),
        (np.cov, x),
        (np.corrcoef, x),
        (lambda t: np.vdot(t, t), x),
        (lambda t: np.correlate(t[0], t[1, :3], "full"), x),
        (lambda t: np.interp(np.array([0.5, 2.5]), np.arange(5.0), t[0]), x),
        (lambda t: np.linalg.slogdet(t)[0], a),
        (lambda t: np.linalg.slogdet(t)[1], a),
    ]:
        got, want = tg.jit(f, backend=backend)(arg), f(arg)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("dtype", [np.float64, C128])
def test_cholesky_upper_reads_the_upper_triangle(backend, dtype):
    """NumPy's cholesky(upper=True) factors the matrix held in the upper triangle (the lower one
    is not read), for real matrices too."""
    b = RNG.normal(size=(3, 3)) + (1j * RNG.normal(size=(3, 3)) if dtype == C128 else 0)
    a = (b.conj().T @ b + 3 * np.eye(3) + np.tril(RNG.normal(size=(3, 3)), -1)).astype(dtype)
    f = lambda t: np.linalg.cholesky(t, upper=True)
    np.testing.assert_allclose(tg.jit(f, backend=backend)(a), f(a), rtol=1e-12, atol=1e-12)
    loss = lambda t: np.sum(np.abs(f(t)) ** 2 * np.arange(9.0).reshape(3, 3))
    g = tg.grad(loss, backend=backend)(a)
    want = fd_grad(lambda t: float(loss(t if dtype == C128 else t.real)), a)
    np.testing.assert_allclose(g, want if dtype == C128 else want.real, rtol=1e-6, atol=1e-6)


def test_the_cpu_subsets_name_cases():
    assert FIRST_ORDER_CPU.issubset(CASES) and HOLOMORPHIC_CPU.issubset(HOLOMORPHIC)
    assert SECOND_ORDER_CPU.issubset(FIRST_ORDER_CPU)
    assert not SECOND_ORDER_CPU & FIRST_ORDER_ONLY


@pytest.mark.parametrize("name", ["vecdot", "matvec", "vecmat"])
def test_numpys_vector_gufuncs_conjugate_as_numpy_does(name, backend):
    """np.vecdot and np.vecmat conjugate their vector, np.matvec does not; values, dtypes and
    gradients of real losses against NumPy and central differences; mismatched core
    dimensions are NumPy's ValueError."""
    f = getattr(np, name)
    m, v = cplx(2, 4, 3), cplx(3)
    args = {"vecdot": (cplx(2, 3), v), "matvec": (m, v), "vecmat": (cplx(4), m)}[name]
    got = tg.jit(f, backend=backend)(*args)
    np.testing.assert_allclose(got, f(*args), rtol=1e-12)
    assert got.dtype == f(*args).dtype

    def loss(z):
        return np.sum(np.abs(f(z, *args[1:])) ** 2)

    np.testing.assert_allclose(
        tg.grad(loss, backend=backend)(args[0]), fd_grad(loss, args[0]), rtol=1e-6, atol=1e-6
    )
    with pytest.raises(ValueError, match="core dimensions do not match"):
        tg.jit(f, backend=backend)(
            np.ones((2, 5)), np.ones((5, 2, 3)) if name == "vecmat" else np.ones(2)
        )
