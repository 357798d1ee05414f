"""The remaining NumPy functions on traced values (tracegrad/numpy_namespace/: interpolation.py,
nanfunctions.py, statistics.py, signals.py, and logspace/geomspace in elementwise.py): values
against NumPy's on the backends, in float64 and float32 (one compiled program per group, to keep
compilation cheap), first and second derivatives against central finite differences in float64,
the edge cases (NaN positions and all-NaN slices, knots and ties, x outside xp), and the errors
for what is not supported."""

import warnings

import numpy as np
import pytest

import tracegrad as tg

RNG = np.random.default_rng(7)
M = np.round(RNG.standard_normal((3, 5)), 3)
V = np.array([0.3, -1.2, 2.0, 0.7, -0.4])
A = np.array([0.5, -1.5, 2.25, 1.0])
XP = np.array([-1.0, 0.0, 0.0, 1.5, 2.0, 2.0, 3.0])  # repeated knots at 0 and 2
FP = np.array([2.0, 1.0, -1.0, 0.5, 3.0, 4.0, -2.0])
# queries: outside on both sides, at every knot (ties), between knots, NaN
XQ = np.array([-3.0, -1.0, -0.5, 0.0, 0.7, 1.5, 2.0, 2.5, 3.0, 4.5, np.nan])
NAN_M = np.array(
    [[1.0, np.nan, 3.0, -2.0], [np.nan] * 4, [0.5, 2.0, np.nan, 2.0], [-1.0, -np.inf, np.nan, 4.0]]
)


def interpolation(x, xp, fp, v):
    return (
        np.interp(x, XP, FP),
        np.interp(x, xp, fp),
        np.interp(x, xp, fp, left=-7.0, right=v[0]),
        np.interp(x, xp[:1], fp[:1]),  # one point: fp[0] at it (and for NaN), left/right beside
        np.interp(x, xp, fp, period=2.5),
        np.interp(v, XP[::-1] * -1, FP),
        np.searchsorted(XP, x),
        np.searchsorted(xp, x, side="right"),
        np.searchsorted(np.sort(v), v * 1.5),
        np.searchsorted(v, XQ, sorter=np.argsort(V)),
        np.searchsorted(np.array([1.0, 2.0, np.nan]), x),  # NaN sorts last, in a and in v
    )


def nan_reductions(m):
    return (
        np.nanmax(m),
        np.nanmax(m, axis=1),
        np.nanmin(m, axis=0, keepdims=True),
        np.nanmin(m[1]),  # all NaN: NaN
        np.nanargmax(m[0]),
        np.nanargmin(m[3]),
        np.nanargmax(m[2:], axis=1),
        np.nanargmin(m[2:].T, axis=0),
        np.nanvar(m),
        np.nanvar(m, axis=1),
        np.nanvar(m, axis=1, keepdims=True, ddof=2),
        np.nanstd(m, axis=0, ddof=1),
        np.nanstd(m[2]),
        np.nanstd(m, axis=1, correction=1),
        np.nanprod(m, axis=1),
        np.nanprod(m),
        np.nancumsum(m, axis=1),
        np.nancumsum(m),
        np.nancumprod(m, axis=0),
        np.nanmedian(m),
        np.nanmedian(m, axis=1),  # 3, 0 (NaN), 3 and 3 numbers
        np.nanmedian(m, axis=0, keepdims=True),
        np.nanquantile(m, 0.3),
        np.nanquantile(m, [0.1, 0.5, 0.9], axis=1),
        np.nanpercentile(m, [25, 75], axis=0, keepdims=True),
        np.nanquantile(m, 0.75, axis=1, keepdims=True),
    )


def statistics(m, v):
    fw, aw = np.array([1, 2, 1, 3, 1]), np.array([0.5, 1.0, 2.0, 0.3, 1.0])
    return (
        np.cov(m),
        np.cov(m, rowvar=False),
        np.cov(v),
        np.cov(m, v),
        np.cov(m.T, v, rowvar=False),
        np.cov(m, bias=True),
        np.cov(m, ddof=2),
        np.cov(m, fweights=fw),
        np.cov(m, aweights=aw),
        np.cov(m, fweights=fw, aweights=aw, ddof=1),
        np.cov(m, dtype=np.float32),
        np.corrcoef(m),
        np.corrcoef(v),
        np.corrcoef(m, v),
        np.corrcoef(m.T, rowvar=False),
    )


def signals(a, v, m, w):
    return (
        np.convolve(a, v),
        np.convolve(a, v, "same"),
        np.convolve(v, a, "same"),
        np.convolve(v, a, "valid"),
        np.convolve(a, v, "valid"),
        np.convolve(a, a[:2], "same"),
        np.correlate(a, v),
        np.correlate(a, v, "full"),
        np.correlate(a, v, "same"),
        np.correlate(v, a, "same"),
        np.correlate(v, a),
        np.correlate(a[:3], a, "same"),
        # both longer than 16 points: the blocked Toeplitz product
        np.convolve(w, w[:33], "same"),
        np.correlate(w[:34], w, "full"),
        np.correlate(w, w[3:], "valid"),
        # longer than a block of 128 outputs: several blocks, kernel longer than the block
        np.correlate(np.tile(w, 4), np.tile(w, 4)[:131], "full"),
        np.convolve(np.tile(w, 4)[:140], np.tile(w, 4)[5:], "same"),
        np.unwrap(np.cumsum(v) * 3),
        np.unwrap(m * 4, axis=0),
        np.unwrap(m * 5, period=3.0),
        np.unwrap(m * 7, discont=4.0),
        np.unwrap(np.array([0.0, np.pi, 0.0, -np.pi, 0.0]) + v[0]),  # jumps of half a period
    )


def spacing(a, b, v):
    return (
        np.logspace(a, b, 5),
        np.logspace(a, b, 4, endpoint=False, base=2.0),
        np.logspace(v, b, 3, axis=1),
        np.logspace(a, b, 3, base=v),
        np.logspace(a, b, 3, base=v, axis=-1),
        np.logspace(0.5, a, 3, dtype=np.float32),
        np.geomspace(a, b, 5),
        np.geomspace(-b, -a, 4, endpoint=False),
        np.geomspace(v, b, 3, axis=1),
        np.geomspace(1.0, b, 1),
        np.geomspace(a, 3.0, 0),
    )


GROUPS = {
    "interpolation": (interpolation, lambda: (XQ, XP, FP, V)),
    "nan_reductions": (nan_reductions, lambda: (NAN_M,)),
    "statistics": (statistics, lambda: (M, V)),
    "signals": (signals, lambda: (A, V, M, np.sin(np.arange(37.0)))),
    "spacing": (spacing, lambda: (np.array(0.3), np.array(2.0), np.array([0.5, 1.5]))),
}


@pytest.fixture(params=[np.float64, np.float32], ids=["f64", "f32"])
def dtype(request):
    return request.param


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_values_equal_numpys(group, backend, dtype):
    fun, make = GROUPS[group]
    args = [np.asarray(a, dtype) for a in make()]
    before = [a.copy() for a in args]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = fun(*args)
        got = tg.jit(fun, backend=backend)(*args)
    for a, b in zip(args, before, strict=True):  # the user's arrays are never modified
        np.testing.assert_array_equal(a, b)
    rtol = 1e-12 if dtype == np.float64 else 3e-6
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        e = np.asarray(e)
        assert g.shape == e.shape and g.dtype == e.dtype, (i, g.shape, e.shape, g.dtype, e.dtype)
        atol = 1e-14 if e.dtype == np.float64 else 2e-6
        np.testing.assert_allclose(
            g, e, rtol=rtol, atol=atol, equal_nan=True, err_msg=f"{group} result {i}"
        )


# ----------------------------------------------------------------------------------------------
# Derivatives: float64, central differences, away from the kinks (knots, ties, the clip)

X = np.linspace(-1.3, 1.7, 9) + 0.05 * np.sin(np.arange(9.0))
NAN_AT = np.array([False, True, False, False, True, False, False, False, False])

DIFFERENTIABLE = {
    # x as the queries, then as fp (and xp) with fixed queries
    "interp in x": lambda x: np.sum(np.interp(x * 1.7, XP, FP) ** 2 * np.cos(x)),
    "interp left/right": lambda x: np.sum(np.interp(x * 3, XP, FP, left=x[0] ** 2, right=x[1])),
    "interp in xp, fp": lambda x: np.sum(
        np.interp(np.array([-1.1, -0.6, -0.3, 0.0]), np.sort(x[:5]), x[4:] ** 2) ** 2
    ),
    "interp periodic": lambda x: np.sum(np.sin(np.interp(x, XP, FP, period=2.5))),
    "searchsorted as an index": lambda x: np.sum(
        x[np.minimum(np.searchsorted(np.sort(x), x[:3] + 0.01), 8)] ** 3
    ),
    "nanmax, nanmin": lambda x: (
        np.nanmax(np.where(NAN_AT, np.nan, x)) ** 2
        + np.sum(np.nanmin(np.where(NAN_AT, np.nan, x).reshape(3, 3), axis=0) ** 3)
    ),
    "nanvar, nanstd": lambda x: (
        np.nanvar(np.where(NAN_AT, np.nan, x)) ** 2
        + np.sum(np.nanstd(np.where(NAN_AT, np.nan, x).reshape(3, 3), axis=1, ddof=1))
    ),
    "nanprod, nancumsum, nancumprod": lambda x: (
        np.nanprod(np.where(NAN_AT, np.nan, x))
        + np.sum(np.nancumsum(np.where(NAN_AT, np.nan, x)) ** 2)
        + np.sum(np.nancumprod(np.where(NAN_AT, np.nan, x).reshape(3, 3), axis=1))
    ),
    "nanmedian, nanquantile": lambda x: (
        np.nanmedian(np.where(NAN_AT, np.nan, x)) ** 2
        + np.sum(np.nanquantile(np.where(NAN_AT, np.nan, x).reshape(3, 3), [0.3, 0.8], axis=1) ** 3)
        + np.sum(np.nanmedian(np.where(NAN_AT, np.nan, x).reshape(3, 3), axis=0) ** 2)
    ),
    "cov": lambda x: (
        np.sum(np.cov(x.reshape(3, 3)) ** 2)
        + np.sum(np.cov(x[:6].reshape(2, 3), aweights=np.array([1.0, 2.0, 0.5])) * 3)
    ),
    "corrcoef": lambda x: (
        np.sum(np.corrcoef(x[:8].reshape(2, 4)) ** 2)
        + np.sum(np.corrcoef(x[:6], x[3:]) * np.array([[1.0, 2.0], [3.0, 4.0]]))
    ),
    "convolve, correlate": lambda x: (
        np.sum(np.convolve(x[:5], x[5:]) ** 2)
        + np.sum(np.correlate(np.tile(x, 4), np.tile(x[::-1], 4), "same") ** 2) / 100
        + np.sum(np.convolve(np.tile(x, 15), np.tile(x[::-1], 15)[:130], "valid") ** 2) / 1e4
        + np.sum(np.correlate(x, x[2:5], "same") ** 2)
        + np.sum(np.sin(np.convolve(x[:3], x, "valid")))
    ),
    "unwrap": lambda x: np.sum(np.unwrap(np.cumsum(x) * 4) ** 2),
    "logspace, geomspace": lambda x: (
        np.sum(np.logspace(x[0], x[1], 4, base=x[2] ** 2 + 1))
        + np.sum(np.geomspace(x[3] ** 2 + 0.5, x[4] ** 2 + 1, 5) ** 2)
    ),
}


def central(f, x, eps=1e-6):
    return np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(x.size)])


@pytest.mark.parametrize("name", sorted(DIFFERENTIABLE))
def test_first_derivatives_match_finite_differences(name):
    f = DIFFERENTIABLE[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        g = tg.grad(f, backend="numpy")(X)
        fd = central(f, X)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", sorted(DIFFERENTIABLE))
def test_second_derivatives_match_finite_differences(name):
    f = DIFFERENTIABLE[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        h = tg.hessian(f, backend="numpy")(X)
        fd = central(tg.grad(f, backend="numpy"), X)
    np.testing.assert_allclose(h, fd, rtol=1e-5, atol=1e-6)


def test_compiled_derivatives_equal_the_interpreters():
    names = ["interp in xp, fp", "nanvar, nanstd", "corrcoef", "convolve, correlate"]
    fs = [DIFFERENTIABLE[n] for n in names]

    def total(x):
        return sum(f(x) for f in fs)

    for transform in (tg.grad, tg.hessian):
        want = transform(total, backend="numpy")(X)
        got = transform(total, backend="cpu")(X)
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)


# ----------------------------------------------------------------------------------------------
# Edge cases


def test_interp_at_knots_takes_the_slope_to_the_right():
    # a knot belongs to the segment on its right (xp[-1] to the last segment): the value is
    # fp at the knot (the last of repeated knots), the derivative that segment's slope
    xp, fp = np.array([0.0, 1.0, 1.0, 3.0]), np.array([0.0, 2.0, 5.0, 1.0])
    knots = np.array([0.0, 1.0, 3.0])
    value = tg.jit(lambda x: np.interp(x, xp, fp), backend="cpu")(knots)
    np.testing.assert_array_equal(value, np.interp(knots, xp, fp))
    np.testing.assert_array_equal(value, [0.0, 5.0, 1.0])
    slope = tg.grad(lambda x: np.sum(np.interp(x, xp, fp)), backend="cpu")(knots)
    np.testing.assert_allclose(slope, [2.0, -2.0, -2.0], rtol=1e-15)
    # outside xp: left/right, whose derivative in x is 0 and goes to left= and right=
    outside = np.array([-1.0, 4.0])
    g = tg.grad(lambda x: np.sum(np.interp(x, xp, fp)), backend="numpy")(outside)
    np.testing.assert_array_equal(g, [0.0, 0.0])
    d = tg.grad(lambda lr: np.sum(np.interp(outside, xp, fp, left=lr[0], right=lr[1]) * [2, 3]))
    np.testing.assert_array_equal(d(np.array([7.0, 8.0])), [2.0, 3.0])


def test_nan_functions_answer_all_nan_slices_as_numpy():
    nan3 = np.full((2, 3), np.nan)
    nan3[0, 1] = 2.0

    def f(m):
        return (
            np.nanmax(m, axis=1),
            np.nanmin(m, axis=1),
            np.nanvar(m, axis=1),
            np.nanstd(m, axis=1),
            np.nanprod(m, axis=1),
            np.nancumsum(m, axis=1),
            np.nanargmax(m, axis=1),
            np.nanargmin(m, axis=1),
            np.nanmedian(m, axis=1),
            np.nanquantile(m, 0.3, axis=1),
        )

    for backend in ("numpy", "cpu"):
        got = tg.jit(f, backend=backend)(nan3)
        np.testing.assert_array_equal(got[0], [2.0, np.nan])
        np.testing.assert_array_equal(got[1], [2.0, np.nan])
        np.testing.assert_array_equal(got[2], [0.0, np.nan])
        np.testing.assert_array_equal(got[3], [0.0, np.nan])
        np.testing.assert_array_equal(got[4], [2.0, 1.0])
        np.testing.assert_array_equal(got[5], [[0.0, 2.0, 2.0], [0.0, 0.0, 0.0]])
        # NumPy raises "All-NaN slice encountered" for the second row; the program answers -1
        np.testing.assert_array_equal(got[6], [1, -1])
        np.testing.assert_array_equal(got[7], [1, -1])
        np.testing.assert_array_equal(got[8], [2.0, np.nan])
        np.testing.assert_array_equal(got[9], [2.0, np.nan])
        with pytest.raises(ValueError, match="All-NaN slice"):
            np.nanargmax(nan3, axis=1)
    # the derivative goes to the numbers only, and is 0 (not NaN) around the all-NaN slice
    g = tg.grad(lambda m: np.sum(np.nanmax(m, axis=1)) + np.sum(np.nanstd(m, axis=1)))(nan3)
    np.testing.assert_array_equal(g, [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])


def test_integer_input_goes_to_the_plain_functions():
    k = np.array([[3, 1, 4], [1, 5, 9]])

    def f(k):
        return (
            np.nanmax(k, axis=1),
            np.nanargmin(k, axis=1),
            np.nanvar(k),
            np.nanstd(k, axis=0),
            np.nanprod(k, axis=0),
            np.nancumsum(k),
            np.nanmedian(k, axis=1),
            np.nanquantile(k, 0.3),
            np.convolve(k[0], k[1]),
            np.searchsorted(k[1], k[0]),
            np.cov(k),
        )

    for g, e in zip(tg.jit(f, backend="cpu")(k), f(k), strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-14)


def test_searchsorted_is_exact_at_ties_and_has_no_derivative():
    a = np.array([0.0, 1.0, 1.0, 1.0, 2.0, np.inf])
    v = np.array([-np.inf, 0.0, 1.0, 1.5, 2.0, np.inf, np.nan])
    for side in ("left", "right"):
        got = tg.jit(lambda a, v, s=side: np.searchsorted(a, v, side=s), backend="cpu")(a, v)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, np.searchsorted(a, v, side=side))
    # the counts are integers: their product with a[0] has the derivative counts.sum() in a[0]
    g = tg.grad(lambda a: np.sum(np.searchsorted(a, v[:5]) * a[0]), backend="cpu")(a[:5])
    np.testing.assert_array_equal(g, [np.sum(np.searchsorted(a[:5], v[:5])), 0, 0, 0, 0])


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_the_searchsorted_method_of_a_traced_array(backend):
    a, v = np.array([1.0, 2.0, 2.0, 5.0]), np.array([0.5, 2.0, 4.0, 9.0])
    for side in ("left", "right"):
        got = tg.jit(lambda a, v, s=side: a.searchsorted(v, side=s), backend=backend)(a, v)
        np.testing.assert_array_equal(got, a.searchsorted(v, side=side))


# ----------------------------------------------------------------------------------------------
# Errors


def test_unsupported_arguments_are_refused_clearly():
    x = np.linspace(0.1, 1.0, 6)
    jit = lambda f: tg.jit(f, backend="numpy")
    with pytest.raises(ValueError, match="mode must be 'full', 'same' or 'valid'"):
        jit(lambda x: np.convolve(x, x, "middle"))(x)
    with pytest.raises(ValueError, match="cannot be empty"):
        jit(lambda x: np.correlate(x, x[:0]))(x)
    with pytest.raises(ValueError, match=r"must be 1-D .*\(2, 3\)"):
        jit(lambda x: np.convolve(x.reshape(2, 3), x))(x)
    with pytest.raises(ValueError, match="not of the same length"):
        jit(lambda x: np.interp(x, x, x[:3]))(x)
    with pytest.raises(ValueError, match="sample points is empty"):
        jit(lambda x: np.interp(x, x[:0], x[:0]))(x)
    with pytest.raises(ValueError, match="xp must be 1-D"):
        jit(lambda x: np.interp(x, x.reshape(2, 3), x))(x)
    with pytest.raises(ValueError, match="period must be a non-zero"):
        jit(lambda x: np.interp(x, x, x, period=0))(x)
    with pytest.raises(tg.TracingError, match="period must be a static number"):
        jit(lambda x: np.interp(x, x, x, period=x[0]))(x)
    with pytest.raises(ValueError, match="side must be 'left' or 'right'"):
        jit(lambda x: np.searchsorted(x, x, side="middle"))(x)
    with pytest.raises(ValueError, match="sorter must be integers"):
        jit(lambda x: np.searchsorted(x, x, sorter=x))(x)
    with pytest.raises(ValueError, match="more than 2 dimensions"):
        jit(lambda x: np.cov(x.reshape(1, 2, 3)))(x)
    with pytest.raises(tg.TracingError, match="aweights must be a NumPy array"):
        jit(lambda x: np.cov(x.reshape(2, 3), aweights=x[:3]))(x)
    with pytest.raises(ValueError, match="fweights cannot be negative"):
        jit(lambda x: np.cov(x.reshape(2, 3), fweights=np.array([1, -1, 2])))(x)
    with pytest.raises(tg.TracingError, match=r"np.nanmax: argument\(s\) \['initial'\]"):
        jit(lambda x: np.nanmax(x, initial=0.0))(x)
    with pytest.raises(tg.TracingError, match=r"np.nanvar: argument\(s\) \['where'\]"):
        jit(lambda x: np.nanvar(x, where=x > 0))(x)
    with pytest.raises(tg.TracingError, match="method 'nearest' is not supported"):
        jit(lambda x: np.nanquantile(x, 0.5, method="nearest"))(x)
    with pytest.raises(tg.TracingError, match="q must be static"):
        jit(lambda x: np.nanpercentile(x, x[0]))(x)
    with pytest.raises(ValueError, match=r"Quantiles must be in the range \[0, 1\]"):
        jit(lambda x: np.nanquantile(x, 1.5))(x)
    with pytest.raises(ValueError, match="empty sequence"):
        jit(lambda x: np.nanargmax(x[:0]))(x)
    with pytest.raises(ValueError, match="cannot include zero"):
        jit(lambda x: np.geomspace(0.0, x[0], 3))(x)
    with pytest.raises(tg.TracingError, match="num must be a static"):
        jit(lambda x: np.logspace(0.0, x[0], x[1]))(x)
    with pytest.raises(tg.TracingError, match="period and discont must be static"):
        jit(lambda x: np.unwrap(x, period=x[0]))(x)
