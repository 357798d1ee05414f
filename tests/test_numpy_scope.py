"""The scope of "the NumPy that research code is written in", item by item: every function the
scope names, traced inside tg.grad, with values equal to NumPy's, first and second derivatives
equal to central finite differences in float64 (on the interpreter, one entry at a time), and the
same gradients on every backend (one compiled program per backend for the whole table) and the
same Hessians for a representative subset.

The other files test each family in depth (test_indexing, test_inplace, test_fillable,
test_linalg, test_numpy_breadth, test_elementwise_breadth, test_array_functions); this one is
the checklist: an entry per named function (every np.linalg.norm order included), so that a
function the scope names cannot lose a derivative order or a backend unnoticed."""

import warnings

import numpy as np
import pytest

import tracegrad as tg

try:
    import scipy.special as sp
except ImportError:  # SciPy is optional: its entries are left out
    sp = None

RNG = np.random.default_rng(0)
V = np.array([0.45, 1.5, -0.3, 0.8, 2.0, 0.1])
M = np.arange(12.0).reshape(3, 4) / 7 - 0.6 + 0.03 * np.sin(np.arange(12.0)).reshape(3, 4)
S = RNG.normal(size=(2, 3, 3)) + 3 * np.eye(3)  # a stack of well-conditioned square matrices
MASK = np.array([True, False, True, False, True, True])


def _spd(a):
    return a @ np.swapaxes(a, -1, -2) + 3 * np.eye(a.shape[-1])


def _written(x):
    y = np.zeros(6)
    y[0] = x[0]
    y[1:] = x[1:] * 2
    y[np.array([0, 2, 2])] += x[:3]
    y[MASK] = 0
    y += 1
    y[3] *= x[4]
    return y


def _put_along(x):
    y = x * 1
    np.put_along_axis(y, np.array([[1], [1], [0]]), x[:, :1] ** 2, axis=1)
    return y


def _add_at(x):
    y = np.zeros(4)
    np.add.at(y, [0, 0, 2], x[:3] ** 2)
    return y


def _add_at_pairs(x):
    y = x * 1
    np.add.at(y, ([0, 0, 2], [1, 1, 3]), x[0, :3] ** 2)  # (row, column) pairs, one repeated
    np.add.at(y, (slice(None), [2, 2]), x[:, :1])
    return y


def _sorted_in_place(x):
    y = x * 1
    y.sort(axis=0)
    return y


def _methods(x):
    return (
        x.cumsum(axis=1) + x.cumprod(axis=0) + x.round(1) + x.trace() + x.take([2, 2, 0, 1], axis=1)
    )


# name -> (function of one array, the array). Each is differentiable where NumPy's function is
# (floor and the like: a zero derivative, exercised through `* x`).
SMOOTH = {
    # indexing and updates
    "fancy index, repeated": (lambda x: x[[0, 2, 0]] * x[np.array([[1, 1], [5, 0]])].sum(), V),
    "fancy index, middle axis": (lambda x: x.reshape(1, 3, 4)[:, [2, 0, 2], 1], M),
    "np.take": (lambda x: np.take(x, [[1, 1], [0, 2]], axis=1) + np.take(x, [5, 5, 0])[0], M),
    "np.take_along_axis": (
        lambda x: np.take_along_axis(x, np.array([[3, 3], [0, 1], [2, 0]]), axis=1),
        M,
    ),
    "np.put_along_axis": (_put_along, M),
    "np.add.at": (_add_at, V),
    "np.add.at, several index arrays": (_add_at_pairs, M),
    "np.ix_": (lambda x: x.reshape(2, 3)[np.ix_([1, 0, 1], [2, 0])], V),
    "static boolean mask": (lambda x: x[MASK] * x[~MASK].sum(), V),
    "in-place writes": (_written, V),
    "np.array of traced scalars": (lambda x: np.array([x[0], x[1] * x[2], 2.0]), V),
    "np.stack": (lambda x: np.stack([x, x**2], axis=1), V),
    "np.full of a traced scalar": (lambda x: np.full((2, 2), x[1]), V),
    "np.asarray": (lambda x: np.asarray([x[0] ** 2, x[3]]) + np.asarray(x)[:2], V),
    # linear algebra
    "solve": (lambda a: np.linalg.solve(a, a[..., :1] + 1), S),
    "inv": (np.linalg.inv, S),
    "det": (np.linalg.det, S),
    "slogdet": (lambda a: np.linalg.slogdet(a)[1] * np.linalg.slogdet(a)[0], S),
    "cholesky": (lambda a: np.linalg.cholesky(_spd(a)), S),
    "eigh": (lambda a: np.linalg.eigh(_spd(a))[0] + np.abs(np.linalg.eigh(_spd(a))[1])[..., 0], S),
    "svd": (
        lambda a: (
            np.linalg.svd(a, compute_uv=False)
            + np.abs(np.linalg.svd(a, full_matrices=False)[0])[:, 0]
        ),
        M,
    ),
    "qr": (lambda a: np.linalg.qr(a)[1] + np.linalg.qr(a)[0][:3], M.T),
    "lstsq": (lambda a: np.linalg.lstsq(a, np.arange(4.0), rcond=None)[0], M.T),
    "matrix_power": (
        lambda a: np.linalg.matrix_power(a, 3) + np.linalg.matrix_power(a, -2),
        S,
    ),
    "np.trace": (lambda x: np.trace(x, 1) + np.trace(S * x[0, 0], axis1=1, axis2=2).sum(), M),
    "np.diag, np.diagonal": (lambda x: np.diag(x, 1) * np.diagonal(x, -1)[0], M),
    "np.triu, np.tril": (lambda x: np.triu(x, -1) + np.tril(x, 1), M),
    "np.kron": (lambda x: np.kron(x[:2, :2], x), M),
    "np.cross": (lambda x: np.cross(x[:, :3], x[:, 1:]), M),
    "np.tensordot": (
        lambda x: np.tensordot(x, x, axes=([1], [1])) + np.tensordot(x, x[0], axes=0)[0, :3, :3],
        M,
    ),
    "np.inner": (lambda x: np.inner(x, x[::-1]), M),
    "einsum, ellipsis": (lambda x: np.einsum("...ij,...jk->...ik", x, x), S),
    "einsum, diagonal": (lambda x: np.einsum("bii->b", x) + np.einsum("i...i->...", x[0]), S),
    "einsum, four operands": (lambda x: np.einsum("ij,jk,kl,lm->im", x[0], x[1], x[0], x[1]), S),
    "einsum, index lists": (
        lambda x: np.einsum(x, [..., 0, 1], x, [..., 1, 2], [..., 0, 2]),
        S,
    ),
    "einsum, broadcasting": (lambda x: np.einsum("...ij,j->...i", x, x[0, 0]), S),
    "einsum, implicit output": (lambda x: np.einsum("ij,jk", x, x.T), M),
    # reductions, scans, sorting
    "np.cumsum": (lambda x: np.cumsum(x, axis=0) + np.cumsum(x)[:4], M),
    "np.cumprod at zeros": (lambda x: np.cumprod(x * np.array([1, 0, 1, 1, 0, 1.0])), V),
    "np.diff": (lambda x: np.diff(x, 2, axis=1), M),
    "argmax, argmin as indices": (lambda x: x[np.argmax(x)] * x[np.argmin(x, axis=0)], V),
    "np.sort": (lambda x: np.sort(x, axis=0) + np.sort(x, axis=None)[:4], M),
    "x.sort() in place": (_sorted_in_place, M),
    "np.argsort as an index": (lambda x: np.take_along_axis(x, np.argsort(x, axis=1), axis=1), M),
    "np.partition": (lambda x: np.partition(x, 2)[2] * x, V),
    "np.median": (lambda x: np.median(x, axis=0) + np.median(x), M),
    "np.quantile, np.percentile": (
        lambda x: np.quantile(x, [0.2, 0.55], axis=1) + np.percentile(x, 37.0),
        M,
    ),
    "max, min": (lambda x: np.max(x, axis=1) + np.min(x) + np.amax(x, axis=0)[:3], M),
    "np.ptp": (lambda x: np.ptp(x, axis=0), M),
    "np.average with weights": (
        lambda x: (
            np.average(x, axis=0, weights=np.array([1.0, 2.0, 3.0])) + np.average(x, weights=x**2)
        ),
        M,
    ),
    "np.nansum, np.nanmean": (
        lambda x: (
            np.nansum(np.where(x > 0.7, np.nan, x))
            + np.nanmean(np.where(x > 0.7, np.nan, x), axis=1)
        ),
        M,
    ),
    # elementwise
    "arcsinh, arccosh, arctanh": (
        lambda x: np.arcsinh(x) + np.arccosh(x**2 + 1.1) + np.arctanh(x / 3),
        V,
    ),
    "np.arctan2": (lambda x: np.arctan2(x, x[::-1]), V),
    "np.hypot": (lambda x: np.hypot(x, x[::-1]), V),
    "np.cbrt": (np.cbrt, V),
    "np.logaddexp": (lambda x: np.logaddexp(x, x[::-1] * 2), V),
    "np.logaddexp2": (lambda x: np.logaddexp2(x, x[::-1] * 2), V),
    "np.sinc": (np.sinc, V),
    "floor, ceil, round, trunc, rint": (
        lambda x: (
            (
                np.floor(3.1 * x + 0.05)
                + np.ceil(3.1 * x + 0.05)
                + np.round(3.1 * x + 0.05)
                + np.trunc(3.1 * x + 0.05)
                + np.rint(3.1 * x + 0.05)
                + np.around(x + 0.02, 1)
            )
            * x
        ),
        V,
    ),
    "mod, fmod, remainder": (
        lambda x: np.mod(x, 0.7) + np.fmod(2.0, x + 3) + np.remainder(x, x[::-1] + 3),
        V,
    ),
    "divmod": (lambda x: np.stack(np.divmod(x, 0.7)), V),
    "np.copysign": (lambda x: np.copysign(x, x[::-1]) + np.copysign(2.0, x), V),
    "np.heaviside": (lambda x: np.heaviside(x, 0.5) * x, V),
    "isfinite, isnan, isinf": (
        lambda x: (
            (np.isfinite(np.log(x)) + np.isnan(np.sqrt(x)) + np.isinf(1 / (x * (x > 0.5)))) * x
        ),
        V,
    ),
    "np.nan_to_num": (
        lambda x: np.nan_to_num(np.log(x - 0.3), nan=0.5, posinf=9.0, neginf=-9.0),
        V,
    ),
    "deg2rad, rad2deg, degrees, radians": (
        lambda x: np.deg2rad(x) + np.rad2deg(x) * np.degrees(x) + np.radians(x),
        V,
    ),
    "np.select": (lambda x: np.select([x < 0, x > 1], [x**2, np.sin(x)], default=x), V),
    "np.gradient": (
        lambda x: np.stack(np.gradient(x, 0.5)) + np.gradient(x, edge_order=2, axis=1),
        M,
    ),
    "np.signbit": (lambda x: np.signbit(x) * x, V),
    "np.float_power": (lambda x: np.float_power(np.abs(x) + 0.2, x) + np.float_power(x**2, 1.7), V),
    "np.square, np.reciprocal": (lambda x: np.square(x) + np.reciprocal(x), V),
    # shape and construction
    "split, array_split": (
        lambda x: (
            np.concatenate(np.split(x, [1, 3], axis=1)[::-1], axis=1)
            + np.array_split(x, 3, axis=1)[0][:, :1]
        ),
        M,
    ),
    "hsplit, vsplit, dsplit": (
        lambda x: (
            np.hsplit(x, 2)[1] * np.vsplit(x, [1])[1][0, :2]
            + np.dsplit(x.reshape(1, 3, 4), 2)[1][0]
        ),
        M,
    ),
    "np.append, np.column_stack": (
        lambda x: np.append(x, x[:2] ** 2)[:6, None] * np.column_stack([x, x**2, np.ones(6)]),
        V,
    ),
    "np.r_, np.c_": (lambda x: np.r_[x, 2.0, x[:2]][:6, None] * np.c_[x, x**2], V),
    "rollaxis, swapaxes": (lambda x: np.rollaxis(x, 2, 0) + np.swapaxes(x, 0, 2).swapaxes(1, 2), S),
    "tile, repeat": (
        lambda x: np.tile(x, (2, 1)) + np.repeat(x, [1, 2, 0, 1], axis=1).repeat(2, axis=0)[:, :4],
        M,
    ),
    "roll, flip, fliplr, flipud, rot90": (
        lambda x: (
            np.roll(x, -1, axis=0) * np.flip(x, (0, 1))
            + np.fliplr(x) * np.flipud(x)
            + np.rot90(x, 2)
        ),
        M,
    ),
    "np.pad": (
        lambda x: (
            np.pad(x, ((1, 0), (0, 2)), constant_values=1.5)
            + np.pad(x, ((1, 0), (2, 0)), mode="edge")
            + np.pad(x, ((0, 1), (1, 1)), mode="reflect")
            + np.pad(x, ((1, 0), (1, 1)), mode="wrap")
        ),
        M,
    ),
    "broadcast_arrays, meshgrid": (
        lambda x: (
            sum(np.broadcast_arrays(x[:, None], x[:3] ** 2))
            + np.meshgrid(x[:3], x**2)[0] * np.meshgrid(x, x[:3], indexing="ij")[1]
        ),
        V,
    ),
    "atleast_1d, 2d, 3d": (
        lambda x: np.atleast_3d(x)[0] * np.atleast_2d(x[0]) + np.atleast_1d(x[1]),
        V,
    ),
    "np.diagflat": (lambda x: np.diagflat(x[:2, :2], 1), M),
    "np.linspace along an axis": (lambda x: np.linspace(x[:2], x[2:4] ** 2, 3, axis=-1), V),
    "eye, identity, arange, linspace": (
        lambda x: (
            np.eye(3) * x[0]
            + np.identity(3) * x[1]
            + np.arange(3.0) * x[2]
            + np.linspace(x[0], x[4], 3)
            + x[5] * np.arange(3)[:, None]
        ),
        V,
    ),
}
# np.linalg.norm: every order NumPy accepts, for vectors and (stacks of) matrices
for _o in (None, 2, 1, np.inf, -np.inf, 0, -1, -2, 3, 0.5):
    SMOOTH[f"norm, vector, ord={_o}"] = (lambda x, o=_o: np.linalg.norm(x, o), V + 0.05)
for _o in (None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf):
    SMOOTH[f"norm, matrix, ord={_o}"] = (
        lambda x, o=_o: np.linalg.norm(x, o, axis=(1, 2)) + np.linalg.norm(x[0], o),
        S,
    )
SMOOTH["norm, axis and keepdims"] = (
    lambda x: (
        np.linalg.norm(x, axis=1)
        + np.linalg.norm(x, 1, axis=0, keepdims=True)[0, :3]
        + np.linalg.norm(x, 3, axis=-1)
    ),
    M,
)
if sp is not None:
    SMOOTH.update(
        {
            "scipy expit, logit, erf, erfc": (
                lambda x: sp.expit(x) + sp.logit(sp.expit(x) * 0.9) + sp.erf(x) + sp.erfc(x),
                V,
            ),
            "scipy ndtr, log_ndtr": (lambda x: sp.ndtr(x) + sp.log_ndtr(x), V),
            "scipy gammaln, digamma": (
                lambda x: sp.gammaln(np.abs(x) + 0.3) + sp.digamma(x**2 + 0.3),
                V,
            ),
            "scipy xlogy, xlog1py": (
                lambda x: sp.xlogy(x, np.abs(x) + 0.1) + sp.xlog1py(x, x**2),
                V,
            ),
            "scipy logsumexp, softmax, log_softmax": (
                lambda x: (
                    sp.logsumexp(x, axis=0)[:3]
                    + sp.softmax(x, axis=1)[0, :3]
                    + sp.log_softmax(x)[1, :3]
                ),
                M,
            ),
        }
    )

# compiled programs cost seconds per entry: the compiled backends run a representative subset,
# chosen from the families the other files check on the interpreter only (orders 1 and 2) or
# for their values only (the rest of the table runs on the interpreter, order 1 and 2, above)
GRADIENT_SUBSET = [
    "np.add.at, several index arrays",
    "x.sort() in place",
    "tile, repeat",
    "np.inner",
    "norm, vector, ord=1",
    "norm, vector, ord=3",
    "norm, vector, ord=inf",
    "norm, vector, ord=-1",
    "norm, matrix, ord=1",
    "norm, matrix, ord=inf",
    "norm, matrix, ord=fro",
    "np.median",
    "np.quantile, np.percentile",
    "np.float_power",
    "np.logaddexp",
    "mod, fmod, remainder",
    "np.select",
    "np.pad",
    "einsum, index lists",
    "arcsinh, arccosh, arctanh",
    "np.arctan2",
    "np.hypot",
    "np.cbrt",
    "isfinite, isnan, isinf",
    "floor, ceil, round, trunc, rint",
]
HESSIAN_SUBSET = [
    "in-place writes",
    "np.add.at, several index arrays",
    "norm, matrix, ord=nuc",
    "np.logaddexp",
    "np.median",
]


def _weights(shape):
    return np.cos(np.arange(int(np.prod(shape))) + 0.3).reshape(shape)


def _scalar(name):
    """sum(f(x) * w): one number that depends on every element of f(x)."""
    f, x = SMOOTH[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        w = _weights(np.shape(f(x)))
    return lambda x: np.sum(f(x) * w)


def _fd(f, x, eps=1e-6):
    out = None
    for k in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[k] = eps
        v = (np.asarray(f(x + d), dtype=float) - np.asarray(f(x - d), dtype=float)) / (2 * eps)
        if out is None:
            out = np.zeros(x.shape + v.shape)
        out[k] = v
    return out


@pytest.mark.parametrize("name", list(SMOOTH))
def test_first_and_second_derivatives_match_finite_differences(name):
    f, x = SMOOTH[name]
    s = _scalar(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # log of a negative: NumPy's warning
        expected = f(x.copy())
        value, grad = tg.value_and_grad(s, backend="numpy")(x)
        np.testing.assert_allclose(tg.jit(f, backend="numpy")(x), expected, rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(value, s(x), rtol=1e-13)
        np.testing.assert_allclose(grad, _fd(s, x), rtol=1e-5, atol=1e-6)
        g = tg.grad(s, backend="numpy")
        h = tg.hessian(s, backend="numpy")(x)
        np.testing.assert_allclose(h, _fd(g, x, 1e-5), rtol=1e-4, atol=1e-5)


def _packed(names):
    """The inputs of the entries `names` packed into one vector, and the sum of their scalars as
    a function of it: one program for all of them on each backend."""
    shapes = [SMOOTH[name][1].shape for name in names]
    offsets = np.cumsum([0] + [int(np.prod(shape)) for shape in shapes])
    theta = np.concatenate([SMOOTH[name][1].ravel() for name in names])

    def unpack(theta):
        return [theta[offsets[k] : offsets[k + 1]].reshape(shape) for k, shape in enumerate(shapes)]

    def total(theta):
        return sum(_scalar(name)(x) for name, x in zip(names, unpack(theta), strict=True))

    return theta, total, unpack


def test_gradients_on_every_backend(backend):
    """The subset's gradient, compiled, against the interpreter's (checked entry by entry
    against finite differences above)."""
    names = GRADIENT_SUBSET
    theta, total, unpack = _packed(names)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = tg.grad(total, backend="numpy")(theta)
        value, got = tg.value_and_grad(total, backend=backend)(theta)
        np.testing.assert_allclose(value, total(theta), rtol=1e-12)
    for name, g, e in zip(names, unpack(got), unpack(expected), strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-10, err_msg=name)


def test_hessians_on_every_backend(backend):
    theta, total, _ = _packed(HESSIAN_SUBSET)
    expected = tg.hessian(total, backend="numpy")(theta)
    got = tg.hessian(total, backend=backend)(theta)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got, got.T, rtol=1e-9, atol=1e-9)


def edge_cases(x, k):
    """What the table's smooth inputs do not reach: NaNs, dtypes, integer results, methods."""
    w = np.where(x > 1.0, np.nan, x)
    y = x * 1
    y.fill(2.0)
    z = x[:4] * 1
    z.partition(1)
    b = x > 0.5
    return (
        (b + b) * x,  # True + True is True
        np.add(b, True),
        b * b,
        np.maximum(b, ~b),
        np.sum(b),
        np.cumsum(b),
        np.mean(b),
        np.median(w),
        np.quantile(w, [0.2, 0.5]),
        np.percentile(np.stack([w, x]), 50, axis=1),
        np.sort(w),
        np.argsort(w),
        np.max(w),
        np.argmax(w),
        np.average(x, weights=np.arange(6)),
        np.heaviside(x, 0.5),
        np.round(k * 5, -1),
        np.around(k * 50, -2),
        (k * 7).round(-1),
        np.einsum("i,i", k, k),
        np.einsum("ij->j", k.reshape(2, 3)),
        np.repeat(k, [0, 1, 2, 0, 1, 1]),
        x.argmax(),
        x.argmin(),
        x.argsort(),
        x.all(),
        x.any(),
        x.nbytes,
        x.itemsize,
        np.real(x),
        np.imag(x),
        np.conj(x),
        y,
        z[1],
        x.reshape(2, 3).diagonal(),
        np.linspace(x[:2], x[2:4], 3, axis=1),
        np.linspace(x[:3].reshape(3, 1), x[3:].reshape(1, 3), 4, axis=-1),
        np.linspace(x[0], x[:2], 5, axis=1, endpoint=False),
        np.count_nonzero(x > 0.5),
        np.any(x > 1.5),
        np.all(x > -1),
    )


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
def test_edge_values_equal_numpys(backend, dtype):
    x, k = V.astype(dtype), np.array([3, -2, 0, 7, 1, 1], np.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = edge_cases(x.copy(), k)
    got = tg.jit(edge_cases, backend=backend)(x, k)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        g, e = np.asarray(g), np.asarray(e)
        assert g.shape == e.shape and g.dtype == e.dtype, (i, g.shape, e.shape, g.dtype, e.dtype)
        np.testing.assert_allclose(
            g, e, rtol=1e-6 if dtype == np.float32 else 1e-14, equal_nan=True, err_msg=f"result {i}"
        )


def test_what_is_refused_names_the_fix():
    with pytest.raises(tg.TracingError, match=r"np.where\(condition, a, b\)"):
        tg.jit(lambda x: np.nonzero(x > 0), backend="numpy")(V)
    with pytest.raises(tg.TracingError, match=r"np.where\(condition, a, b\)"):
        tg.jit(lambda x: x.nonzero(), backend="numpy")(V)
    with pytest.raises(tg.TracingError, match="repeats must be static"):
        tg.jit(lambda x, r: np.repeat(x, r), backend="numpy")(V, np.ones(6, int))
    with pytest.raises(ValueError, match=r"np\.repeat: operands could not be broadcast"):
        tg.jit(lambda x: np.repeat(x, [1, 2]), backend="numpy")(V)
    with pytest.raises(ValueError, match=r"do not broadcast to the \(2,\) elements"):
        tg.jit(lambda x: np.add.at(x * 1, ([0, 1], [1, 1]), x[:, :3]), backend="numpy")(M)
    with pytest.raises(IndexError, match="out of bounds"):
        tg.jit(lambda x: np.add.at(x * 1, ([0, 5], [1, 1]), 1.0), backend="numpy")(M)
    with pytest.raises(tg.TracingError, match=r"np\.arange"):  # the shape would depend on x
        tg.jit(lambda x: np.arange(x[0], x[0] + 3), backend="numpy")(V)
