"""np.linalg on traced values: solve, inv, det, slogdet, cholesky, eigh/eigvalsh, matrix_power.
Values equal to NumPy's on every backend (float64 and float32, stacks of matrices), first and
second derivatives against finite differences, the Hessian of a Gaussian-process likelihood in
its hyper-parameters, batching, and NumPy's errors."""

import numpy as np
import pytest

import tracegrad as tg

RNG = np.random.default_rng(7)
A = RNG.normal(size=(2, 4, 4)) + 4 * np.eye(4)  # a stack of two well-conditioned matrices
B = RNG.normal(size=(2, 4, 3))
W = np.arange(16.0).reshape(4, 4) / 10 - 0.7


def spd(a):
    return a @ np.swapaxes(a, -1, -2) + 4 * np.eye(a.shape[-1])


def everything(a, b):
    s = spd(a)
    sign, logdet = np.linalg.slogdet(a)
    w, v = np.linalg.eigh(s)
    return (
        np.linalg.solve(a, b),
        np.linalg.solve(a[0], b[0, :, 0]),
        np.linalg.inv(a),
        np.linalg.det(a),
        sign,
        logdet,
        np.linalg.cholesky(s),
        w,
        np.abs(v),
        np.linalg.eigvalsh(s),
        np.linalg.matrix_power(a, 3),
        np.linalg.matrix_power(a[0], -2),
        np.linalg.matrix_power(a, 0),
    )


@pytest.fixture(params=[np.float64, np.float32], ids=["f64", "f32"])
def dtype(request):
    return request.param


def test_values_equal_numpys(backend, dtype):
    a, b = A.astype(dtype), B.astype(dtype)
    got = tg.jit(everything, backend=backend)(a, b)
    rtol = 1e-10 if dtype == np.float64 else 1e-4
    for k, (g, e) in enumerate(zip(got, everything(a, b), strict=True)):
        assert g.shape == e.shape and g.dtype == e.dtype, (k, g.shape, e.shape, g.dtype, e.dtype)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol, err_msg=f"result {k}")


SCALARS = {
    "solve": lambda a: np.sum(np.linalg.solve(a, B[0]) * W[:, :3]),
    "inv": lambda a: np.sum(np.linalg.inv(a) * W),
    "det": lambda a: np.linalg.det(a),
    "slogdet": lambda a: np.linalg.slogdet(a)[1],
    "cholesky": lambda a: np.sum(np.linalg.cholesky(spd(a)) * W),
    "eigvalsh": lambda a: np.sum(np.linalg.eigvalsh(a + a.T) ** 3),
    "eigh vectors": lambda a: np.sum(np.linalg.eigh(a + a.T)[1][:, 1:3] ** 4),
    "matrix_power": lambda a: (
        np.sum(np.linalg.matrix_power(a, 3) * W) + np.sum(np.linalg.matrix_power(a, -2))
    ),
}


def _fd(f, x, eps=1e-6):
    out = np.zeros(np.shape(f(x)) + x.shape)
    for k in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[k] = eps
        out[(...,) + k] = (f(x + d) - f(x - d)) / (2 * eps)
    return out


@pytest.mark.parametrize("name", sorted(SCALARS))
def test_first_and_second_derivatives(name):
    f = SCALARS[name]
    a = A[0]
    g = tg.grad(f, backend="numpy")
    np.testing.assert_allclose(g(a), _fd(f, a), rtol=1e-6, atol=1e-7)
    h = tg.hessian(f, backend="numpy")(a)
    np.testing.assert_allclose(h, _fd(g, a), rtol=1e-5, atol=1e-6)


def test_gradients_on_the_compiled_backends(backend):
    a = A[0]
    total = lambda a: sum(f(a) for f in SCALARS.values())
    np.testing.assert_allclose(
        tg.grad(total, backend=backend)(a),
        tg.grad(total, backend="numpy")(a),
        rtol=1e-10,
        atol=1e-10,
    )


X = np.linspace(0, 3, 8)
Y = np.sin(X)


def gp_nll(theta):
    """The negative log marginal likelihood of a Gaussian process, in its log hyper-parameters."""
    ell, var, noise = np.exp(theta)
    K = var * np.exp(-0.5 * (X[:, None] - X[None, :]) ** 2 / ell**2) + noise * np.eye(len(X))
    L = np.linalg.cholesky(K)
    alpha = np.linalg.solve(L.T, np.linalg.solve(L, Y))
    return 0.5 * Y @ alpha + np.sum(np.log(np.diag(L))) + 0.5 * len(X) * np.log(2 * np.pi)


def test_gaussian_process_hessian(backend):
    theta = np.array([0.1, -0.2, -1.0])
    h = tg.hessian(gp_nll, backend=backend)(theta)
    np.testing.assert_allclose(
        h, _fd(tg.grad(gp_nll, backend="numpy"), theta, 1e-5), rtol=1e-6, atol=1e-7
    )
    np.testing.assert_allclose(h, h.T, atol=1e-12)


def test_batched_over_matrices(backend):
    per = tg.vmap(tg.grad(lambda a: np.linalg.slogdet(a)[1]), backend=backend)(A)
    np.testing.assert_allclose(per, np.swapaxes(np.linalg.inv(A), -1, -2), rtol=1e-10)


def test_numpys_errors():
    with pytest.raises(np.linalg.LinAlgError, match="square"):
        tg.jit(np.linalg.inv, backend="numpy")(np.ones((2, 3)))
    with pytest.raises(np.linalg.LinAlgError):  # not positive definite: NumPy's error when it runs
        tg.jit(np.linalg.cholesky, backend="cpu")(-np.eye(3))


def gp_nll_slogdet(theta):
    """gp_nll with the log-determinant from slogdet of the matrix the program also factors."""
    ell, var, noise = np.exp(theta)
    K = var * np.exp(-0.5 * (X[:, None] - X[None, :]) ** 2 / ell**2) + noise * np.eye(len(X))
    L = np.linalg.cholesky(K)
    alpha = np.linalg.solve(L.T, np.linalg.solve(L, Y))
    return 0.5 * Y @ alpha + 0.5 * np.linalg.slogdet(K)[1]


def test_solves_with_a_cholesky_factor_are_triangular(backend):
    theta = np.array([0.1, -0.2, -1.0])
    ir_text = str(tg.make_ir(tg.value_and_grad(gp_nll_slogdet))(theta))
    assert "solve[structure='lower']" in ir_text and "solve[structure='upper']" in ir_text
    assert "solve %" not in ir_text  # no general (LU) solve left, in the value or the gradient
    # log|det K| from the factor: no LU determinant, and no inverse in the gradient
    assert "logabsdet" not in ir_text and "inv " not in ir_text
    value, grad = tg.value_and_grad(gp_nll_slogdet, backend=backend)(theta)
    np.testing.assert_allclose(value, gp_nll_slogdet(theta), rtol=1e-12)
    np.testing.assert_allclose(grad, _fd(gp_nll_slogdet, theta, 1e-6), rtol=1e-6, atol=1e-8)
    h = tg.hessian(gp_nll_slogdet, backend="numpy")(theta)
    np.testing.assert_allclose(
        h, _fd(tg.grad(gp_nll_slogdet, backend="numpy"), theta, 1e-5), rtol=1e-6, atol=1e-7
    )


def test_triangular_solves_batched_and_without_scipy(monkeypatch):
    s = spd(A)

    def f(s, b):
        lower = np.linalg.cholesky(s)
        return np.linalg.solve(lower, b), np.linalg.solve(np.swapaxes(lower, -1, -2), b)

    want = f(s, B)
    got = tg.jit(f, backend="numpy")(s, B)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
    monkeypatch.setitem(__import__("sys").modules, "scipy.linalg", None)  # SciPy absent: LU
    got = tg.jit(lambda s, b: f(s, b), backend="numpy")(s, B)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


def test_small_factorisations_run_on_one_blas_thread():
    import threading

    from tracegrad.base import blas_threads

    libraries = [lib for lib in (blas_threads._openblas(), blas_threads._scipy_openblas()) if lib]
    before = [get() for get, _ in libraries]
    seen = []
    spy = blas_threads.small_on_one_thread(
        lambda a: seen.append([get() for get, _ in libraries]) or np.linalg.cholesky(a),
        lambda a: a.size * a.shape[-1],
    )
    s = spd(A[0])
    np.testing.assert_array_equal(spy(s), np.linalg.cholesky(s))
    assert all(count == 1 for count in seen[0])  # inside: one thread
    assert [get() for get, _ in libraries] == before  # restored after
    # concurrent callers: the count is restored only when the last one leaves
    barrier = threading.Barrier(4)

    def work():
        barrier.wait()
        for _ in range(20):
            with blas_threads.one_thread():
                assert all(get() == 1 for get, _ in libraries)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [get() for get, _ in libraries] == before
    # the table's factorisations go through it (the interpreter's and the compiled backends')
    from tracegrad import linalg

    assert linalg.cholesky_p.impl.__wrapped__ is np.linalg.cholesky


def test_slogdet_next_to_cholesky_of_a_matrix_not_known_to_be_symmetric(backend):
    """Cholesky reads only the lower triangle: its factor gives slogdet only for a matrix the
    program makes symmetric. For any other, slogdet is NumPy's, value and gradient."""
    k = np.array([[2.0, 0.0], [1.0, 2.0]])

    def f(k):
        return np.linalg.slogdet(k)[1] + np.sum(np.linalg.cholesky(k))

    def via_factor(k):  # the factor first: the shortcut's order
        lower = np.linalg.cholesky(k)
        return np.linalg.slogdet(k)[1] + np.sum(lower)

    for fun in (f, via_factor):
        value, grad = tg.value_and_grad(fun, backend=backend)(k)
        assert value == pytest.approx(f(k))
        np.testing.assert_allclose(grad, _fd(f, k), rtol=1e-6, atol=1e-8)


def test_slogdet_uses_the_factor_of_matrices_symmetric_by_construction():
    from tracegrad.examples.gaussian_process import data, negative_log_likelihood

    x, y = data(5)
    assert "logabsdet" not in str(tg.make_ir(negative_log_likelihood)(np.zeros(3), x, y))

    def gram(a, form):
        k = form(a)
        lower = np.linalg.cholesky(k)
        return np.linalg.slogdet(k)[1], lower

    a = np.ones((3, 3))
    symmetric = [lambda a: a @ a.T + np.eye(3), lambda a: 2.0 * (a.T @ a) + 1.0]
    for form in symmetric:
        assert "logabsdet" not in str(tg.make_ir(lambda a: gram(a, form))(a))  # noqa: B023
    for form in (lambda a: a + np.eye(3), lambda a: a @ a + np.eye(3)):
        assert "logabsdet" in str(tg.make_ir(lambda a: gram(a, form))(a))  # noqa: B023


_COND_MATRICES = [
    np.zeros((2, 2)),
    np.array([[1.0, 0.0], [0.0, 0.0]]),
    np.array([[2.0, 1.0], [1.0, 3.0]]),
    np.stack([np.eye(2), np.zeros((2, 2))]),
]


@pytest.mark.parametrize("p", [None, 2, -2, 1, -1, np.inf, -np.inf, "fro", "nuc"])
def test_cond_of_singular_matrices_is_inf_as_numpy_says(backend, p):
    f = tg.jit(lambda a: np.linalg.cond(a, p), backend=backend)
    with np.errstate(all="ignore"):
        for m in _COND_MATRICES:
            try:
                want = np.linalg.cond(m, p)
            except np.linalg.LinAlgError:  # "nuc" of a singular matrix: the SVD of NaNs
                with pytest.raises(np.linalg.LinAlgError):
                    f(m)
                continue
            np.testing.assert_array_equal(f(m), want)


def test_cond_and_norm_of_empty_matrices(backend):
    with pytest.raises(np.linalg.LinAlgError, match="empty"):
        tg.jit(np.linalg.cond, backend=backend)(np.zeros((0, 0)))
    empty = np.zeros((0, 3))
    assert tg.jit(lambda a: np.linalg.norm(a, 2), backend=backend)(empty) == 0.0
    assert tg.jit(lambda a: np.linalg.norm(a, "nuc"), backend=backend)(empty) == 0.0
    with pytest.raises(ValueError, match="zero-size"):
        tg.jit(lambda a: np.linalg.norm(a, -2), backend=backend)(empty)


def test_gradient_of_cond_through_the_inverse(backend):
    a = np.array([[2.0, 1.0], [0.5, 3.0]])
    for p in (1, np.inf, "fro"):
        g = tg.grad(lambda a: np.linalg.cond(a, p), backend=backend)(a)  # noqa: B023
        np.testing.assert_allclose(g, _fd(lambda a: np.linalg.cond(a, p), a), rtol=1e-5)  # noqa: B023


def test_slices_outside_an_array_are_refused_while_tracing():
    from tracegrad import ir
    from tracegrad import primitives as P

    with ir.building(ir.Builder()) as b:
        x = b.new_input((3,), np.float64)
        with pytest.raises(ir.IRError, match="out of bounds"):
            P.slice_(x, ((0, 5, 1),))
        assert P.slice_(x, ((2, -1, -1),)).shape == (3,)


def test_named_results_as_numpy_returns_them(backend):
    a = np.array([[2.0, 1.0], [1.0, 3.0]])
    named = {
        "logabsdet": lambda a: np.linalg.slogdet(a).logabsdet,
        "eigenvalues": lambda a: np.linalg.eigh(a).eigenvalues,
        "S": lambda a: np.linalg.svd(a).S,
        "R": lambda a: np.abs(np.linalg.qr(a).R),
    }
    for fun in named.values():
        np.testing.assert_allclose(tg.jit(fun, backend=backend)(a), fun(a), atol=1e-12)
    out = tg.jit(np.linalg.eigh, backend=backend)(a)
    assert type(out) is type(np.linalg.eigh(a))
    g = tg.grad(named["logabsdet"], backend=backend)(a)
    np.testing.assert_allclose(g, np.linalg.inv(a).T)


def test_eigh_and_eigvalsh_read_the_upper_triangle_with_uplo_u(backend):
    a = np.array([[2.0, 5.0], [1.0, 3.0]])  # only the upper triangle counts: [[2, 5], [5, 3]]
    got = tg.jit(lambda a: np.linalg.eigvalsh(a, UPLO="U"), backend=backend)(a)
    np.testing.assert_allclose(got, np.linalg.eigvalsh(a, UPLO="U"))
    vectors = tg.jit(lambda a: np.linalg.eigh(a, UPLO="U")[1], backend=backend)(a)
    np.testing.assert_allclose(vectors, np.linalg.eigh(a, UPLO="U")[1])  # signs too
    g = tg.grad(lambda a: np.sum(np.linalg.eigvalsh(a, UPLO="U") ** 2), backend=backend)(a)
    np.testing.assert_allclose(g, [[4.0, 20.0], [0.0, 6.0]])  # |S|_F^2: the upper entry twice
    with pytest.raises(ValueError, match="UPLO"):
        tg.jit(lambda a: np.linalg.eigvalsh(a, UPLO="X"), backend=backend)(a)


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_of_a_non_symmetric_matrix_is_differentiated_as_numpy_reads_it(uplo, backend):
    # NumPy reads one triangle: the eigenvectors, signs included, and their derivatives (forward
    # and reverse) are those of the symmetric matrix that triangle stands for
    rng = np.random.default_rng(3)
    x, dx = rng.normal(size=(2, 4, 4)), rng.normal(size=(2, 4, 4))
    w_ct, v_ct = rng.normal(size=(2, 4)), rng.normal(size=(2, 4, 4))

    def f(a):
        return np.linalg.eigh(a, UPLO=uplo)

    w, v = tg.jit(f, backend=backend)(x)
    np.testing.assert_allclose(w, f(x)[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(v, f(x)[1], rtol=1e-10, atol=1e-10)
    h = 1e-6
    up, down = f(x + h * dx), f(x - h * dx)
    fd_w, fd_v = (up[0] - down[0]) / (2 * h), (up[1] - down[1]) / (2 * h)
    _, (t_w, t_v) = tg.jvp(f, (x,), (dx,), backend=backend)
    np.testing.assert_allclose(t_w, fd_w, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(t_v, fd_v, rtol=1e-6, atol=1e-7)
    out, pullback = tg.vjp(f, x, backend=backend)
    (x_ct,) = pullback(type(out)(w_ct, v_ct))
    want = np.sum(w_ct * fd_w) + np.sum(v_ct * fd_v)
    np.testing.assert_allclose(np.sum(x_ct * dx), want, rtol=1e-6)
    # the triangle NumPy does not read gets no cotangent
    unread = np.triu(np.ones((4, 4)), 1) if uplo == "L" else np.tril(np.ones((4, 4)), -1)
    assert np.all(x_ct * unread == 0)


@pytest.mark.parametrize(
    "matrix",
    [
        np.array([[1.0, 2.0], [2.0, 4.0]]),  # rank 1
        np.zeros((3, 3)),
        np.outer([1.0, 2.0, 3.0], [1.0, 0.0, -1.0]),
        np.stack([np.eye(3) * 2.0, np.outer([1.0, 2.0, 3.0], [1.0, 0.0, -1.0])]),
    ],
)
def test_gradient_of_det_at_singular_matrices_is_the_cofactor_matrix(backend, matrix):
    g = tg.grad(lambda a: np.sum(np.linalg.det(a)), backend=backend)(matrix)
    np.testing.assert_allclose(g, _fd(lambda a: np.sum(np.linalg.det(a)), matrix), atol=1e-6)


def test_hessian_of_det_through_its_cofactor_matrix(backend):
    a = np.array([[2.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 4.0]])
    h = tg.hessian(np.linalg.det, backend=backend)(a)
    grad = tg.grad(np.linalg.det, backend="numpy")
    want = np.stack([_fd(lambda a: grad(a)[i], a) for i in np.ndindex(a.shape)])  # noqa: B023
    np.testing.assert_allclose(h.reshape(9, 3, 3), want, atol=1e-5)
