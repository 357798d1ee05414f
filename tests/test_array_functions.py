"""NumPy's array-manipulation functions on traced values (tracegrad/numpy_namespace/): values equal
to NumPy's on every backend, in float64 and float32 (one compiled program for all of them, to
keep compilation cheap), and derivatives against central finite differences."""

import warnings

import numpy as np
import pytest

import tracegrad as tg

M = np.arange(12.0).reshape(3, 4) / 7 - 0.6
V = np.array([0.3, -1.2, 2.0, 0.7, -0.4])


def shapes(m, v):
    """Flipping, rolling, tiling, splitting, diagonals and the like: pure data movement."""
    return (
        np.flip(m),
        np.flip(m, 1),
        np.fliplr(m),
        np.flipud(v),
        np.roll(v, 2),
        np.roll(m, -1, axis=1),
        np.roll(m, (1, 2), axis=(0, 1)),
        np.roll(m, 5),
        np.rot90(m),
        np.rot90(m, 2),
        np.rot90(m, -1),
        np.tile(v, 2),
        np.tile(m, (2, 1, 2)),
        np.repeat(v, 3),
        np.repeat(m, 2, axis=1),
        *np.split(m, 2, axis=1),
        *np.array_split(v, 3),
        *np.hsplit(m, [1, 3]),
        *np.vsplit(m, 3),
        np.append(v, m),
        np.append(m, m, axis=0),
        *np.broadcast_arrays(v[:, None], m[0]),
        *np.meshgrid(v, m[0]),
        *np.meshgrid(v, m[0], indexing="ij", sparse=True),
        np.atleast_2d(v),
        np.atleast_3d(m),
        np.atleast_1d(v[0]),
        np.diagonal(m),
        np.diagonal(m, 1),
        np.diagonal(m, -1),
        np.diag(v),
        np.diag(v, -2),
        np.diag(m, 1),
        np.diagflat(m[:2, :2]),
        np.trace(m),
        np.trace(m, -1),
        np.triu(m),
        np.tril(m, -1),
        np.triu(m, 2),
        np.kron(v[:2], m),
        np.cross(m[:, :3], m[:, 1:]),
        np.cross(v[:3], v[2:]),
        np.tensordot(m, m.T, axes=1),
        np.tensordot(m, m, axes=([0, 1], [0, 1])),
        np.pad(m, (1, 2)),
        np.pad(m, ((0, 1), (2, 0)), constant_values=((0, 0), (7, 0))),
        np.pad(m, 2, mode="edge"),
        np.pad(m, (1, 2), mode="reflect"),
        np.pad(v, (2, 1), mode="symmetric"),
        np.pad(m, (2, 5), mode="wrap"),
    )


def scans(m, v):
    """Differences, scans, reductions, index-of-extremum, selections, linspace, gradient."""
    w = np.where(v > 0.5, np.nan, v)  # NaNs for the nan-functions
    return (
        np.diff(v),
        np.diff(m, 2, axis=0),
        np.diff(v, prepend=0.5, append=v[:1]),
        np.cumsum(v),
        np.cumsum(m, axis=1),
        np.cumprod(v),
        np.cumprod(m, axis=0),
        np.cumsum(m),
        np.ptp(m),
        np.ptp(m, axis=1),
        np.nansum(w),
        np.nanmean(w),
        np.count_nonzero(m > 0),
        np.count_nonzero(m, axis=0),
        np.any(m > 0.5),
        np.all(m > -1, axis=1),
        np.argmax(v),
        np.argmin(m, axis=1),
        np.argmax(m, axis=0, keepdims=True),
        np.argmax(w),
        np.average(m),
        np.average(m, axis=1, weights=v[:4]),
        np.average(v, weights=v**2),
        np.linspace(v[0], v[1], 5),
        np.linspace(v[0], v[2], 4, endpoint=False),
        np.select([v < 0, v > 1], [v**2, -v], 0.5),
        np.gradient(v),
        np.gradient(v, 0.5, edge_order=2),
        *np.gradient(m),
    )


def sorting(m, v):
    """Sorting and the order statistics built on it."""
    return (
        np.sort(v),
        np.sort(m, axis=0),
        np.argsort(m, axis=1, kind="stable"),
        np.sort(m, axis=None),
        np.median(v),
        np.median(m, axis=1),
        np.median(m, axis=0, keepdims=True),
        np.quantile(m, 0.3),
        np.quantile(m, [0.1, 0.9], axis=1),
        np.percentile(m, [25, 50, 75], axis=0),
        np.quantile(m, 0.35, axis=1, method="nearest"),
        np.quantile(v, 0.35, method="midpoint"),
        np.quantile(m, 0.6, method="lower"),
        np.quantile(m, 0.6, method="higher"),
    )


def contractions(m, v):
    """np.einsum in full: '...', diagonals, several operands, the operand/index-list form."""
    s = m[:, :3]
    return (
        np.einsum("ij,jk->ik", m, m.T),
        np.einsum("ij,jk,kl->il", m, m.T, s),
        np.einsum("ii->i", s),
        np.einsum("ii", s),
        np.einsum("ij,jk,ki", s, s, s),
        np.einsum("...j,jk->...k", m[None], m.T),
        np.einsum("i,i", v, v),
        np.einsum("i,j->ij", v, v[:2]),
        np.einsum("...ii->...i", np.stack([s, s.T])),
        np.einsum("ab,bc,cd,de->ae", m, m.T, s, s),
        np.einsum(m, [0, 1], m, [2, 1], [0, 2]),
        np.einsum("ij->", m),
    )


@pytest.fixture(params=[np.float64, np.float32], ids=["f64", "f32"])
def dtype(request):
    return request.param


@pytest.mark.parametrize(
    "fun",
    [shapes, scans, sorting, contractions],
    ids=["shapes", "scans", "sorting", "contractions"],
)
def test_values_equal_numpys(fun, backend, dtype):
    m, v = M.astype(dtype), V.astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = fun(m, v)
    got = tg.jit(fun, backend=backend)(m, v)
    rtol = 1e-13 if dtype == np.float64 else 2e-6
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        e = np.asarray(e)
        assert g.shape == e.shape and g.dtype == e.dtype, (i, g.shape, e.shape, g.dtype, e.dtype)
        np.testing.assert_allclose(
            g,
            e,
            rtol=rtol,
            atol=1e-6 if dtype == np.float32 else 1e-15,
            equal_nan=True,
            err_msg=f"result {i}",
        )


DIFFERENTIABLE = {
    "shapes": lambda x: sum(
        np.sum(np.sin(r) * (i + 1))
        for i, r in enumerate(shapes(x[:12].reshape(3, 4), x[12:]))
        if r.dtype.kind == "f"
    ),
    "cumprod with zeros": lambda x: np.sum(np.cumprod(x * np.array([1, 1, 0, 1, 1] * 3 + [1, 1]))),
    "cumsum and diff": lambda x: np.sum(np.cumsum(x) ** 2) + np.sum(np.diff(x, 2) ** 3),
    "ptp, average, nansum": lambda x: np.ptp(x) + np.average(x, weights=x**2) + np.nansum(x**2),
    "sort, median, quantile": lambda x: (
        np.sum(np.sort(x) * np.arange(17.0))
        + np.median(x) * 3
        + np.sum(np.quantile(x, [0.2, 0.7]) ** 2)
    ),
    "einsum": lambda x: (
        np.einsum("ij,jk,ki", x[:9].reshape(3, 3), x[8:17].reshape(3, 3), x[:9].reshape(3, 3).T)
        + np.sum(np.einsum("ii->i", x[:16].reshape(4, 4)) ** 3)
    ),
    "gradient and linspace": lambda x: (
        np.sum(np.gradient(x) ** 2) + np.sum(np.linspace(x[0], x[1], 4) ** 3)
    ),
}


@pytest.mark.parametrize("name", sorted(DIFFERENTIABLE))
def test_derivatives_match_finite_differences(name):
    f = DIFFERENTIABLE[name]
    x = np.linspace(-1.3, 1.7, 17) + 0.05 * np.sin(np.arange(17.0))
    g = tg.grad(f, backend="numpy")(x)
    eps = 1e-6
    fd = np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(17)])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6)


def test_second_derivatives_of_scans(backend):
    f = lambda x: np.sum(np.cumprod(x) * np.cumsum(x**2))
    x = np.array([0.5, -1.0, 0.0, 2.0])
    h = tg.hessian(f, backend=backend)(x)
    g = tg.grad(f, backend="numpy")
    eps = 1e-6
    fd = np.array([(g(x + eps * e) - g(x - eps * e)) / (2 * eps) for e in np.eye(4)])
    np.testing.assert_allclose(h, fd, rtol=1e-6, atol=1e-6)


def test_errors_match_numpys():
    x = np.ones((3, 4))
    with pytest.raises(ValueError, match="equal division"):
        tg.jit(lambda x: np.split(x, 3, axis=1), backend="numpy")(x)
    with pytest.raises(tg.TracingError, match="repeats must be static"):
        tg.jit(lambda x, r: np.repeat(x, r, axis=0), backend="numpy")(x, np.array([1, 2, 1]))
    with pytest.raises(ValueError, match="empty sequence"):
        tg.jit(lambda x: np.argmax(x[:, :0], axis=1), backend="numpy")(x)
    with pytest.raises(ValueError, match="1- or 2-d"):
        tg.jit(lambda x: np.diag(x[None]), backend="numpy")(x)
    with pytest.raises(tg.TracingError, match="wider than the axis"):
        tg.jit(lambda x: np.pad(x, 5, mode="reflect"), backend="numpy")(x)
    with pytest.raises(tg.TracingError, match="mode 'median'"):
        tg.jit(lambda x: np.pad(x, 1, mode="median"), backend="numpy")(x)


def test_median_of_infinities_and_of_empty_slices_is_numpys(backend):
    # the median was the linear quantile a + (b - a) w: NaN where the middle two are inf
    m = np.array([[1.0, np.inf, np.inf, 2.0], [-np.inf, 0.0, -np.inf, 5.0], [1.0, 2.0, 3.0, 4.0]])

    def f(m):
        return (
            np.median(m[0, :3]),  # inf (odd)
            np.median(m[0, 1:3]),  # inf (two infs)
            np.median(m, axis=1),
            np.median(m[:, :3], axis=1, keepdims=True),
            np.median(m[:, :0], axis=1),  # empty slices: NaN
        )

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = f(m)
    for g, w in zip(tg.jit(f, backend=backend)(m), want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_quantiles_that_pick_an_element_keep_its_dtype(backend):
    # they went through float64: an int64 above 2**53 came back rounded, as a float
    x = np.array([2**53 + 1, 2**60 + 3, 5, 7], np.int64)
    small, flags = np.array([3, 1, 2], np.int8), np.array([True, False, True])
    f32 = np.array([1.5, 2.5, 0.5], np.float32)

    def f(x, small, flags, f32):
        return (
            np.quantile(x, 0.5, method="lower"),
            np.percentile(x, 100, method="higher"),
            np.quantile(x, [0.2, 0.7], method="nearest"),
            np.quantile(small, 0.5, method="higher"),
            np.quantile(flags, 0.5, method="lower"),
            np.quantile(f32, np.array([0.5]), method="lower"),
            np.quantile(f32, np.array([0.25, 0.5])),
        )

    got_all = tg.jit(f, backend=backend)(x, small, flags, f32)
    for got, want in zip(got_all, f(x, small, flags, f32), strict=True):
        want = np.asarray(want)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
