"""The rest of NumPy's breadth on traced values: svd, qr, lstsq, pinv, matrix_rank, cond,
multi_dot and the singular-value norms;
writes through integer-array indices and np.put_along_axis; partition and rollaxis; np.array,
np.asarray, np.full, np.r_ and np.c_ of traced values; scipy.special's gammaln, digamma,
logsumexp, softmax and log_softmax. Values equal NumPy's (SciPy's) on every backend in float64
and float32 (one compiled program per backend and dtype), first and second derivatives equal
central finite differences."""

import subprocess
import sys
import warnings

import numpy as np
import pytest

import tracegrad as tg

sp = pytest.importorskip("scipy.special")

RNG = np.random.default_rng(7)
A = RNG.normal(size=(4, 3))  # distinct singular values, full rank
V = np.array([0.3, -1.2, 2.0, 0.7, -0.4])


def linalg(a, v):
    u, s, vt = np.linalg.svd(a, full_matrices=False)
    q, r = np.linalg.qr(a)
    x, res, rank, sv = np.linalg.lstsq(a, v[:4], rcond=None)
    return (
        u,
        s,
        vt,
        np.linalg.svd(a.T, compute_uv=False),
        np.linalg.svd(a[:3] @ a.T[:, :3])[1],
        q,
        r,
        np.linalg.qr(a.T)[1],
        np.linalg.qr(a, mode="r"),
        x,
        res,
        rank,
        sv,
        np.linalg.lstsq(a.T, v[:3], rcond=None)[0],
        np.linalg.norm(a, 2),
        np.linalg.norm(a, -2),
        np.linalg.norm(a, "nuc"),
        np.linalg.norm(np.stack([a, a * 2]), 2, axis=(2, 1)),
        np.linalg.norm(a, "nuc", keepdims=True),
        np.linalg.svd(np.stack([a, -a]), full_matrices=False)[1],
        np.linalg.pinv(a),
        np.linalg.pinv(np.stack([a.T, 2 * a.T])),
        np.linalg.matrix_rank(a),
        np.linalg.matrix_rank(a @ a.T),
        np.linalg.cond(a[:3]),
        np.linalg.cond(a[1:], 1),
        np.linalg.cond(a[:3], -2),
        np.linalg.multi_dot([a, a.T, a]),
        np.linalg.multi_dot([v[:4], a, a.T[:, 0]]),
    )


def constructors(a, v):
    """Arrays built from traced values, writes through integer arrays, partition, rollaxis."""
    y = v * 1
    y[[0, 3, 0]] = v[1:4] * 2  # repeated index: the last write stays
    z = v * 1
    z[np.array([4, 4, 1])] += v[:3]  # x[i] += v reads once, writes once per element
    w = a * 1
    w[[1, 2], 0] = v[:2]
    p = a * 1
    np.put_along_axis(p, np.array([[0], [2], [1], [0]]), v[:4, None], axis=1)
    return (
        np.array([v[0], v[1] * 2, 3.0]),
        np.array([[v[0], 1.0], [v[2], v[3]]], dtype=v.dtype),
        np.asarray([v[0], v[4]]),
        np.asarray(v),
        np.array(v, ndmin=2),
        np.full((2, 3), v[1]),
        np.full(3, v[2], dtype=np.float64),
        np.r_[v, v[:2], 0.5],
        np.c_[v, v * 2],
        np.r_[v[:2], 1:3],
        y,
        z,
        w,
        p,
        np.partition(v, 2)[2],
        np.sort(np.partition(v, 3)[:3]),
        np.partition(a, 1, axis=0)[1],
        np.rollaxis(np.stack([a, a]), 2),
        np.rollaxis(a, 0, 2),
    )


def special(a, v):
    x = np.abs(a) + 0.3
    return (
        sp.gammaln(x),
        sp.digamma(x),
        sp.gammaln(v),
        sp.digamma(v),
        sp.logsumexp(v),
        sp.logsumexp(a, axis=1),
        sp.logsumexp(a, axis=0, keepdims=True),
        sp.logsumexp(a, b=x),
        *sp.logsumexp(a, axis=1, b=a, return_sign=True),
        sp.softmax(a, axis=1),
        sp.softmax(v),
        sp.log_softmax(a, axis=0),
        sp.log_softmax(v),
    )


@pytest.fixture(params=[np.float64, np.float32], ids=["f64", "f32"])
def dtype(request):
    return request.param


@pytest.mark.parametrize(
    "fun", [linalg, constructors, special], ids=["linalg", "constructors", "special"]
)
def test_values_equal_numpys(fun, backend, dtype):
    a, v = A.astype(dtype), V.astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = fun(a.copy(), v.copy())
    got = tg.jit(fun, backend=backend)(a, v)
    assert len(got) == len(expected)
    f32 = dtype == np.float32
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        e = np.asarray(e)
        assert g.shape == e.shape and g.dtype == e.dtype, (i, g.shape, e.shape, g.dtype, e.dtype)
        np.testing.assert_allclose(
            g,
            e,
            rtol=2e-5 if f32 else 1e-12,
            atol=2e-6 if f32 else 1e-13,
            equal_nan=True,
            err_msg=f"result {i}",
        )


def _sign_fixed(u):
    """Singular vectors with their sign fixed by the first row (each is defined up to a sign)."""
    return u * np.sign(u[..., :1, :])


SCALARS = {
    "svd": lambda a: (
        np.sum(np.sin(_sign_fixed(np.linalg.svd(a, full_matrices=False)[0])))
        + np.sum(np.linalg.svd(a, compute_uv=False) ** 3)
        + np.sum(np.cos(_sign_fixed(np.linalg.svd(a.T, full_matrices=False)[2].T)))
    ),
    "qr": lambda a: (
        np.sum(np.sin(np.linalg.qr(a)[0]))
        + np.sum(np.linalg.qr(a)[1] ** 2)
        + np.sum(np.sin(np.linalg.qr(a.T)[0] + 2 * np.linalg.qr(a.T)[1][:, :1]))
    ),
    "lstsq and norms": lambda a: (
        np.sum(np.linalg.lstsq(a, np.arange(4.0), rcond=None)[0] ** 2)
        + np.linalg.lstsq(a, np.arange(4.0), rcond=None)[1][0]
        + np.sum(np.linalg.lstsq(a.T, a[0], rcond=None)[0])
        + np.linalg.norm(a, 2) ** 2
        + np.linalg.norm(a, -2)
        + np.linalg.norm(a, "nuc")
        + np.sum(np.sin(np.linalg.pinv(a)))
        + np.linalg.cond(a[:3])
        + np.sum(np.linalg.multi_dot([a.T, a, a.T]) ** 2) / 100
    ),
    "writes": lambda a: _writes(a),
    "constructors": lambda a: (
        np.sum(np.sin(np.array([a[0, 0], a[1, 1] * a[0, 1], 2.0])))
        + np.sum(np.full((2, 2), a[2, 2]) * a[:2, :2])
        + np.sum(np.r_[a[0], a[1] ** 2] ** 2)
        + np.sum(np.c_[a[:, 0], a[:, 1]] ** 3)
        + np.sum(np.sort(np.partition(a[:, 0], 1)) * np.arange(4.0))
    ),
    "special": lambda a: (
        np.sum(sp.gammaln(a * a + 0.5))
        + np.sum(sp.digamma(a * a + 0.5))
        + sp.logsumexp(a)
        + np.sum(sp.logsumexp(a, axis=0, b=a * a + 0.1))
        + np.sum(sp.softmax(a, axis=1) ** 2)
        + np.sum(sp.log_softmax(a, axis=0) * a)
    ),
}


def _writes(a):
    y = a * 1
    y[[0, 2, 0], 1] = a[1:, 2] ** 2  # row 0's first write is overwritten
    y[np.array([3, 3])] += a[:2]
    np.put_along_axis(y, np.array([[2], [0], [1], [2]]), a[:, :1] * 3, axis=1)
    return np.sum(np.sin(y) * np.arange(12.0).reshape(4, 3))


def _fd(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = eps
        g[idx] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


@pytest.mark.parametrize("name", sorted(SCALARS))
def test_gradients_and_hessians_match_finite_differences(name):
    f = SCALARS[name]
    grad = tg.grad(f, backend="numpy")
    g = grad(A)
    np.testing.assert_allclose(g, _fd(f, A), rtol=1e-6, atol=1e-6)
    h = tg.hessian(f, backend="numpy")(A).reshape(A.size, A.size)
    fd2 = np.stack(
        [_fd(lambda x, k=k: grad(x).reshape(-1)[k], A).reshape(-1) for k in range(A.size)]
    )
    np.testing.assert_allclose(h, fd2, rtol=1e-5, atol=1e-5)


def test_second_derivatives_on_every_backend(backend, dtype):
    """One Hessian program through svd, qr, the writes, the constructors and scipy's functions,
    on each backend and dtype, against the interpreter's float64 Hessian."""
    f = lambda a: SCALARS["svd"](a) + SCALARS["qr"](a) + _writes(a) + SCALARS["special"](a)
    expected = tg.hessian(f, backend="numpy")(A)
    got = tg.hessian(f, backend=backend)(A.astype(dtype))
    assert got.dtype == dtype
    tol = 2e-3 if dtype == np.float32 else 1e-9
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)


def test_traced_integer_indices_write_like_numpy(backend):
    def f(x, i):
        y = x * 1
        y[i] = x[:4] ** 2  # repeated traced indices: the last write stays
        z = x * 1
        z[i] += 1.0
        return y, z

    x, i = np.array([0.5, 1.5, -2.0, 3.0, 0.25]), np.array([0, 3, 0, -1])
    got = tg.jit(f, backend=backend)(x, i)
    for g, e in zip(got, f(x.copy(), i), strict=True):
        np.testing.assert_array_equal(g, e)
    s = lambda x: np.sum(np.sin(f(x, i)[0]) * np.arange(5.0))
    np.testing.assert_allclose(tg.grad(s, backend=backend)(x), _fd(s, x), rtol=1e-6, atol=1e-7)


def test_redirections_last_only_while_tracing():
    """np.array and scipy's functions are NumPy's and SciPy's own outside a trace, and the
    caller's arrays are not modified by writes into traced copies."""
    array, full, code = np.array, np.full, sp.logsumexp.__code__
    x = A.copy()
    tg.jit(
        lambda a: np.array([a[0, 0], 1.0]) + sp.logsumexp(a) + np.full(2, a[1, 1]), backend="numpy"
    )(x)
    assert np.array is array and np.full is full and sp.logsumexp.__code__ is code
    np.testing.assert_array_equal(x, A)
    assert sp.logsumexp(np.zeros(2)) == np.log(2.0)  # SciPy's own result


def test_solve_and_lstsq_with_an_integer_right_hand_side_compute_in_float64(backend):
    # a float32 matrix with an integer b gave float32: NumPy counts an integer b as float64
    a, b = np.array([[3.0, 1.0], [1.0, 2.0]], np.float32), np.array([1, 2])

    def f(a, b):
        return (
            np.linalg.solve(a, b),
            np.linalg.lstsq(a, b, rcond=None)[0],
            np.linalg.solve(a, b > 1),
        )

    for got, want in zip(tg.jit(f, backend=backend)(a, b), f(a, b), strict=True):
        assert got.dtype == want.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_lstsq_where_the_svd_fails_is_nan_not_zeros(backend):
    # NumPy raises "SVD did not converge" for an inf in a; the cutoff used to drop the NaN
    # singular values as if they were zero and return a solution of zeros.
    a = A.copy()
    a[1, 2] = np.inf
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.lstsq(a, V[:4], rcond=None)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        x, res, *_ = tg.jit(lambda a, v: np.linalg.lstsq(a, v, rcond=None), backend=backend)(
            a, V[:4]
        )
    assert np.isnan(x).all() and np.isnan(res).all()


def test_refusals_name_the_fix():
    with pytest.raises(tg.TracingError, match="full_matrices=False"):
        tg.jit(lambda a: np.linalg.svd(a)[0], backend="numpy")(A)
    with pytest.raises(tg.TracingError, match="mode='reduced'"):
        tg.jit(lambda a: np.linalg.qr(a, mode="complete")[0], backend="numpy")(A)
    with pytest.raises(ValueError, match="shape mismatch"):
        tg.jit(lambda a: a.__setitem__([0, 1], a[:3]), backend="numpy")(A)
    with pytest.raises(IndexError, match="out of bounds"):
        tg.jit(lambda a: a.__setitem__([0, 9], 1.0), backend="numpy")(A)


def test_tracegrad_imports_and_runs_without_scipy():
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'scipy' or name.startswith('scipy.'):\n"
        "            raise ImportError('blocked')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import numpy as np, tracegrad as tg\n"
        "from tracegrad import primitives as P\n"
        "print(tg.jit(lambda v: np.array([v[0], 2.0]) * np.linalg.norm(v), backend='numpy')(np.ones(2)))\n"
        "print(P.gammaln_p.impl(np.array([0.5, 3.0])))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = out.stdout.strip().splitlines()
    np.testing.assert_allclose(
        np.fromstring(lines[0].strip("[]"), sep=" "), [np.sqrt(2), 2 * np.sqrt(2)]
    )
    import math

    np.testing.assert_allclose(
        np.fromstring(lines[1].strip("[]"), sep=" "), [math.lgamma(0.5), math.lgamma(3.0)]
    )


def test_other_threads_get_numpys_results_during_a_trace():
    """While a function is traced (and the constructors are redirected), code in another thread
    that passes no traced value gets NumPy's and SciPy's own results."""
    import threading

    seen = {}

    def other():
        seen["array"] = np.array([[1, 2], [3, 4]], dtype=np.float32)
        seen["full"] = np.full(3, 2.5)
        seen["asarray"] = np.asarray([1.0, 2.0])
        seen["logsumexp"] = sp.logsumexp(np.zeros(4))
        seen["r_"] = np.r_[np.ones(2), 3.0]

    def f(x):
        t = threading.Thread(target=other)
        t.start()
        t.join()
        return np.array([x[0], 2.0])

    tg.jit(f, backend="numpy")(np.ones(2))
    assert type(seen["array"]) is np.ndarray and seen["array"].dtype == np.float32
    np.testing.assert_array_equal(seen["array"], [[1, 2], [3, 4]])
    np.testing.assert_array_equal(seen["full"], [2.5, 2.5, 2.5])
    assert type(seen["asarray"]) is np.ndarray
    assert seen["logsumexp"] == pytest.approx(np.log(4.0), rel=1e-15)
    np.testing.assert_array_equal(seen["r_"], [1.0, 1.0, 3.0])


def test_logit_near_one_half_is_accurate(backend):
    # log(p) - log1p(-p) cancelled near 1/2: 6,000 ulp at 0.5 + 1e-6
    p = np.array([0.5 + 1e-6, 0.5000004031094563, 0.5 - 3e-9, 0.3, 0.74, 0.9, 1e-10, 0.999])
    got, want = tg.jit(sp.logit, backend=backend)(p), sp.logit(p)
    assert np.all(np.abs(got - want) <= 2 * np.spacing(np.abs(want)))
    d = tg.grad(lambda p: np.sum(sp.logit(p)), backend=backend)(p)
    np.testing.assert_allclose(d, 1 / (p * (1 - p)), rtol=1e-13)
