"""tracegrad.scipy: scipy.stats' distributions and scipy.special's functions on traced values.

Values against SciPy's on the numpy and cpu backends (float64, and float32 for a few),
derivatives of order 1 and 2 in x and in the parameters against central finite differences in
float64 (tg.check_grad), SciPy's answers off the support (-inf) and for invalid parameters (nan),
and the hint scipy.stats' own functions give on a traced value.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

import tracegrad as tg

scipy_stats = pytest.importorskip("scipy.stats")
scipy_special = pytest.importorskip("scipy.special")

import tracegrad.scipy.stats as tstats  # noqa: E402
from tracegrad.base.errors import TracingError  # noqa: E402
from tracegrad.scipy import special  # noqa: E402
from tracegrad.tracing.messages import TRACED_STATS  # noqa: E402

RNG = np.random.default_rng(7)
X = np.array([-3.0, -0.7, 0.0, 0.4, 1.3, 2.5, 6.0])
SCALES = np.array([1.5, 0.7, 2.0, 1.0, 0.3, -1.0, 0.0])  # the last two invalid: nan
QS = np.array([0.0, 1e-6, 0.2, 0.5, 0.9, 1.0, 1.2])
SHAPES = np.array([0.5, 1.0, 2.0, 3.5, 10.0, -1.0, 0.0])


def _scipy(fun, *args):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        return fun(*args)


def _continuous_cases():
    cases = []
    for name in ("norm", "expon", "laplace", "logistic", "cauchy"):
        for method in ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf"):
            cases.append((f"{name}.{method}", name, method, (X, 0.3, SCALES)))
        cases.append((f"{name}.ppf", name, "ppf", (QS, 0.3, 1.5)))
        cases.append((f"{name}.isf", name, "isf", (QS, 0.3, SCALES)))
    cases += [
        ("t.logpdf", "t", "logpdf", (X, SHAPES, 0.2, 1.3)),
        ("t.pdf", "t", "pdf", (X, 3.0, 0.2, SCALES)),
        ("t.cdf", "t", "cdf", (np.append(X, [1e-9, -1e3]), np.append(SHAPES, [3, 2]), 0, 1.3)),
        ("t.sf", "t", "sf", (X, 3.0, 0.0, SCALES)),
        ("t.logcdf", "t", "logcdf", (X, SHAPES, 0.2, 1.3)),
        ("t.logsf", "t", "logsf", (X, SHAPES, 0.2, 1.3)),
        ("gamma.logpdf", "gamma", "logpdf", (X, SHAPES, -0.5, 1.3)),
        ("gamma.pdf", "gamma", "pdf", (X, 2.5, 0.0, SCALES)),
        ("gamma.cdf", "gamma", "cdf", (X, SHAPES, -0.5, 1.3)),
        ("gamma.sf", "gamma", "sf", (X, SHAPES, -0.5, 1.3)),
        ("gamma.logcdf", "gamma", "logcdf", (X, 2.5, 0.0, SCALES)),
        ("gamma.logsf", "gamma", "logsf", (X, SHAPES, -0.5, 1.3)),
        ("chi2.cdf", "chi2", "cdf", (X, SHAPES, -0.5, 1.3)),
        ("chi2.sf", "chi2", "sf", (X, 3.0, 0.0, SCALES)),
        ("chi2.logpdf", "chi2", "logpdf", (X, SHAPES, -0.5, 1.3)),
        ("chi2.pdf", "chi2", "pdf", (X, 3.0, 0.0, SCALES)),
        ("beta.logpdf", "beta", "logpdf", (X / 4 + 0.4, SHAPES, 2.5, -0.2, 1.1)),
        ("beta.pdf", "beta", "pdf", (X / 4 + 0.4, 0.7, SHAPES)),
        ("beta.cdf", "beta", "cdf", (X / 4 + 0.4, SHAPES, 2.5, -0.2, 1.1)),
        ("beta.sf", "beta", "sf", (X / 4 + 0.4, 0.7, SHAPES)),
        ("beta.logcdf", "beta", "logcdf", (X / 4 + 0.4, SHAPES, 2.5)),
        ("beta.logsf", "beta", "logsf", (X / 4 + 0.4, 0.7, 1.5, 0.0, SCALES)),
        ("poisson.logpmf", "poisson", "logpmf", (np.array([0, 1, 2, 5, -1, 2.5, 10]), SHAPES)),
        ("poisson.pmf", "poisson", "pmf", (np.array([0, 1, 2, 5, 3, 2, 1.0]), SHAPES, 1)),
        ("poisson.cdf", "poisson", "cdf", (np.array([0, 1, 2, 5, -1, 2.5, 10]), SHAPES)),
        ("poisson.sf", "poisson", "sf", (np.array([0, 1, 2, 5, -1, 2.5, 10]), SHAPES)),
        ("poisson.logcdf", "poisson", "logcdf", (np.array([0, 1, 2, 5, -1, 2.5, 10]), SHAPES)),
        (
            "bernoulli.logpmf",
            "bernoulli",
            "logpmf",
            (np.array([0, 1, 1, 0, 2, 0.5, 1.0]), np.array([0.1, 0.3, 0, 1, 0.5, -0.5, 1.5])),
        ),
        (
            "bernoulli.cdf",
            "bernoulli",
            "cdf",
            (np.array([-1, 0, 0.5, 1, 2, 0.5, 1.0]), np.array([0.1, 0.3, 0, 1, 0.5, -0.5, 1.5])),
        ),
    ]
    return cases


CASES = _continuous_cases()


@pytest.mark.parametrize(("label", "name", "method", "args"), CASES, ids=[c[0] for c in CASES])
def test_values_match_scipy_stats(label, name, method, args, backend):
    ours = getattr(getattr(tstats, name), method)
    theirs = getattr(getattr(scipy_stats, name), method)
    expected = _scipy(theirs, *args)
    traced = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)]

    def f(*traced_args):
        full = list(args)
        for i, a in zip(traced, traced_args, strict=True):
            full[i] = a
        return ours(*full)

    got = tg.jit(f, backend=backend)(*[args[i] for i in traced])
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-300, equal_nan=True)
    # and on plain arrays, without tracing
    np.testing.assert_allclose(ours(*args), expected, rtol=1e-12, atol=1e-300, equal_nan=True)


def test_edge_cases_follow_scipy(backend):
    # off the support: -inf logpdf, 0 pdf; a scale <= 0 or a shape <= 0: nan
    f = tg.jit(
        lambda x, s: (
            tstats.expon.logpdf(x, 0.0, s),
            tstats.gamma.logpdf(x, 2.0, 0.0, s),
            tstats.beta.pdf(x, 2.0, 3.0, 0.0, s),
            tstats.norm.logpdf(x, 0.0, s),
            tstats.t.logpdf(x, -s, 0.0, 1.0),
        ),
        backend=backend,
    )
    x = np.array([-1.0, -1.0, 0.5, 0.5])
    s = np.array([1.0, -1.0, 0.0, 1.0])
    expon, gamma, beta, norm, t = f(x, s)
    np.testing.assert_array_equal(expon[:3], [-np.inf, np.nan, np.nan])
    np.testing.assert_array_equal(gamma[:3], [-np.inf, np.nan, np.nan])
    np.testing.assert_array_equal(beta[:3], [0.0, np.nan, np.nan])
    assert np.isnan(norm[1]) and np.isnan(norm[2]) and np.isfinite(norm[0])
    assert np.isnan(t[0]) and np.isfinite(t[1])
    k = tg.jit(lambda k, mu: tstats.poisson.logpmf(k, mu), backend=backend)(
        np.array([-1.0, 1.5, 0.0, 2.0]), np.array([1.0, 1.0, 0.0, -1.0])
    )
    np.testing.assert_array_equal(k, [-np.inf, -np.inf, 0.0, np.nan])


@pytest.mark.parametrize("dtype", [np.float32])
def test_float32_stays_float32(dtype, backend):
    x = X.astype(dtype)

    def f(x):
        return (
            tstats.norm.logpdf(x, 0.3, 1.5),
            tstats.norm.cdf(x),
            tstats.logistic.logpdf(x, 0.0, 2.0),
            tstats.gamma.logpdf(np.abs(x) + 0.1, 2.5),
            tstats.t.logpdf(x, 4.0),
        )

    expected = [
        scipy_stats.norm.logpdf(X, 0.3, 1.5),
        scipy_stats.norm.cdf(X),
        scipy_stats.logistic.logpdf(X, 0.0, 2.0),
        scipy_stats.gamma.logpdf(np.abs(X) + 0.1, 2.5),
        scipy_stats.t.logpdf(X, 4.0),
    ]
    for got, want in zip(tg.jit(f, backend=backend)(x), expected, strict=True):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


# derivatives of order 1 and 2 in x and every parameter, inside the support
GRADIENT_CASES = [
    ("norm.logpdf", lambda x, m, s: tstats.norm.logpdf(x, m, s), (X, 0.3, 1.7)),
    ("norm.logcdf", lambda x, m, s: tstats.norm.logcdf(x, m, s), (X, 0.3, 1.7)),
    ("norm.cdf", lambda x, m, s: tstats.norm.cdf(x, m, s), (X, 0.3, 1.7)),
    ("expon.logpdf", lambda x, m, s: tstats.expon.logpdf(x, m, s), (X + 3.5, 0.3, 1.7)),
    ("expon.logcdf", lambda x, m, s: tstats.expon.logcdf(x, m, s), (X + 3.5, 0.3, 1.7)),
    ("laplace.logpdf", lambda x, m, s: tstats.laplace.logpdf(x, m, s), (X + 0.05, 0.3, 1.7)),
    ("logistic.logpdf", lambda x, m, s: tstats.logistic.logpdf(x, m, s), (X, 0.3, 1.7)),
    ("logistic.logcdf", lambda x, m, s: tstats.logistic.logcdf(x, m, s), (X, 0.3, 1.7)),
    ("cauchy.logpdf", lambda x, m, s: tstats.cauchy.logpdf(x, m, s), (X, 0.3, 1.7)),
    ("cauchy.cdf", lambda x, m, s: tstats.cauchy.cdf(x, m, s), (X, 0.3, 1.7)),
    ("t.logpdf", lambda x, df, s: tstats.t.logpdf(x, df, 0.1, s), (X, 3.5, 1.7)),
    ("gamma.logpdf", lambda x, a, s: tstats.gamma.logpdf(x, a, 0.0, s), (X + 3.5, 2.5, 1.7)),
    ("beta.logpdf", lambda x, a, b: tstats.beta.logpdf(x, a, b), (X / 10 + 0.35, 2.5, 1.7)),
    ("chi2.logpdf", lambda x, df: tstats.chi2.logpdf(x, df), (X + 3.5, 2.5)),
    ("gamma.cdf", lambda x, a, s: tstats.gamma.cdf(x, a, 0.0, s), (X + 3.5, 2.5, 1.7)),
    ("t.cdf", lambda x, df, s: tstats.t.cdf(x, df, 0.1, s), (X, 3.5, 1.7)),
    ("beta.cdf", lambda x, a, b: tstats.beta.cdf(x, a, b), (X / 10 + 0.35, 2.5, 1.7)),
    ("poisson.cdf", lambda mu: tstats.poisson.cdf(np.arange(6.0), mu), (np.full(6, 2.5),)),
    ("norm.isf", lambda q, m, s: tstats.norm.isf(q, m, s), (QS[2:5], 0.3, 1.7)),
    ("logistic.ppf", lambda q, m, s: tstats.logistic.ppf(q, m, s), (QS[2:5], 0.3, 1.7)),
    ("poisson.logpmf", lambda mu: tstats.poisson.logpmf(np.arange(6.0), mu), (np.full(6, 2.5),)),
    (
        "bernoulli.logpmf",
        lambda p: tstats.bernoulli.logpmf(np.array([0.0, 1.0, 1.0]), p),
        (np.array([0.2, 0.6, 0.9]),),
    ),
    (
        "dirichlet.logpdf",
        lambda x, a: tstats.dirichlet.logpdf(x, a),
        (np.array([[0.2, 0.5], [0.3, 0.1]]), np.array([0.8, 2.0, 3.0])),
    ),
]


@pytest.mark.parametrize(
    ("label", "fun", "args"), GRADIENT_CASES, ids=[c[0] for c in GRADIENT_CASES]
)
def test_derivatives_of_order_one_and_two(label, fun, args):
    weights = np.linspace(0.5, 1.5, 8)

    def total(*a):
        out = fun(*a)
        return np.sum(out * weights[: out.size].reshape(out.shape))

    args = tuple(np.asarray(a, dtype=np.float64) for a in args)
    assert tg.check_grad(total, *args, order=2, rtol=1e-5, atol=1e-6, backend="numpy")


def test_derivatives_on_the_cpu_backend():
    def total(x, m, s, a):
        return np.sum(tstats.norm.logpdf(x, m, s) + tstats.gamma.logpdf(x + 3.5, a, 0.0, s))

    assert tg.check_grad(total, X, 0.3, 1.7, 2.5, order=2, backend="cpu")


def _spd(d):
    a = RNG.normal(size=(d, d))
    return a @ a.T + d * np.eye(d)


def test_multivariate_normal_matches_scipy(backend):
    cov = _spd(3)
    mean = RNG.normal(size=3)
    x = RNG.normal(size=(4, 3))
    f = tg.jit(
        lambda x, mean, cov: (
            tstats.multivariate_normal.logpdf(x, mean, cov),
            tstats.multivariate_normal.pdf(x[0], mean, cov),
            tstats.multivariate_normal.logpdf(x, mean, np.diagonal(cov)),
            tstats.multivariate_normal.logpdf(x, mean, cov[0, 0]),
            tstats.multivariate_normal.logpdf(x[:, 0], mean[0], cov[0, 0]),
            tstats.multivariate_normal.logpdf(x[:, 0], None, cov[0, 0]),
        ),
        backend=backend,
    )
    expected = (
        scipy_stats.multivariate_normal.logpdf(x, mean, cov),
        scipy_stats.multivariate_normal.pdf(x[0], mean, cov),
        scipy_stats.multivariate_normal.logpdf(x, mean, np.diagonal(cov)),
        scipy_stats.multivariate_normal.logpdf(x, mean, cov[0, 0]),
        scipy_stats.multivariate_normal.logpdf(x[:, 0], mean[0], cov[0, 0]),
        scipy_stats.multivariate_normal.logpdf(x[:, 0], None, cov[0, 0]),
    )
    for got, want in zip(f(x, mean, cov), expected, strict=True):
        assert np.shape(got) == np.shape(want)
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_multivariate_normal_entropy(backend):
    cov = _spd(3)
    f = tg.jit(
        lambda cov: (
            tstats.multivariate_normal.entropy(None, cov),
            tstats.multivariate_normal.entropy(np.zeros(3), np.diagonal(cov)),
        ),
        backend=backend,
    )
    full, diagonal = f(cov)
    np.testing.assert_allclose(full, scipy_stats.multivariate_normal.entropy(None, cov), rtol=1e-13)
    expected = scipy_stats.multivariate_normal.entropy(np.zeros(3), np.diagonal(cov))
    np.testing.assert_allclose(diagonal, expected, rtol=1e-13)
    # d/dC of log det C / 2 = C^-1 / 2
    g = tg.grad(lambda c: tstats.multivariate_normal.entropy(None, c), backend="numpy")(cov)
    np.testing.assert_allclose((g + g.T) / 2, np.linalg.inv(cov) / 2, rtol=1e-10, atol=1e-14)


def test_multivariate_normal_derivatives_in_x_mean_and_cov():
    cov = _spd(3)
    mean = RNG.normal(size=3)
    x = RNG.normal(size=(2, 3))

    def total(x, mean, factor):
        c = factor @ factor.T + np.eye(3)  # symmetric positive definite for any factor
        return np.sum(tstats.multivariate_normal.logpdf(x, mean, c))

    assert tg.check_grad(total, x, mean, np.linalg.cholesky(cov), order=2, backend="numpy")
    # the gradient in cov itself: d/dC = (C^-1 (x - m)(x - m)^T C^-1 - C^-1) / 2 for one point
    g = tg.grad(lambda c: tstats.multivariate_normal.logpdf(x[0], mean, c), backend="numpy")(cov)
    inv = np.linalg.inv(cov)
    d = (x[0] - mean)[:, None]
    expected = 0.5 * (inv @ d @ d.T @ inv - inv)
    np.testing.assert_allclose((g + g.T) / 2, expected, rtol=1e-10, atol=1e-14)


def test_multivariate_normal_allow_singular_matches_scipy(backend):
    a = RNG.normal(size=(3, 2))
    low_rank = a @ a.T  # rank 2
    x = np.vstack([RNG.normal(size=(2, 2)) @ a.T, RNG.normal(size=3)])  # two on the span, one off
    diagonal = np.array([1.0, 2.0, 0.0])
    f = tg.jit(
        lambda x, cov: (
            tstats.multivariate_normal.logpdf(x, np.zeros(3), cov, allow_singular=True),
            tstats.multivariate_normal.logpdf(
                x * [1, 1, 0], np.zeros(3), diagonal, allow_singular=True
            ),
            tstats.multivariate_normal.logpdf(x, np.ones(3), _spd(3), allow_singular=True),
        ),
        backend=backend,
    )
    expected = (
        scipy_stats.multivariate_normal.logpdf(x, np.zeros(3), low_rank, allow_singular=True),
        scipy_stats.multivariate_normal.logpdf(
            x * [1, 1, 0], np.zeros(3), diagonal, allow_singular=True
        ),
    )
    got = f(x, low_rank)
    for g, e in zip(got[:2], expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-10)
    assert np.isneginf(got[0][2]) and np.all(np.isfinite(got[0][:2]))
    # derivatives in x and the mean along the span (autograd's singular-covariance test)
    cov = np.diag([1.0, 1.0, 0.0, 0.0])

    def logpdf(x, mean):
        x = np.concatenate([x[:2], mean[2:]])
        return tstats.multivariate_normal.logpdf(x, mean, cov, allow_singular=True)

    point = np.array([0.3, -0.8, 0.0, 0.0])
    assert tg.check_grad(logpdf, point, point[::-1] * 0.5, order=2, backend="numpy")


def test_dirichlet_matches_scipy_and_is_minus_inf_off_the_simplex(backend):
    alpha = np.array([0.5, 2.0, 3.0])
    x = RNG.dirichlet(alpha, size=4).T
    f = tg.jit(lambda x, alpha: tstats.dirichlet.logpdf(x, alpha), backend=backend)
    np.testing.assert_allclose(f(x, alpha), scipy_stats.dirichlet.logpdf(x, alpha), rtol=1e-12)
    np.testing.assert_allclose(
        f(x[:2], alpha), scipy_stats.dirichlet.logpdf(x[:2], alpha), rtol=1e-12
    )
    off = np.array([[0.5, 0.7], [0.5, 0.4], [0.1, -0.1]])
    np.testing.assert_array_equal(f(off, alpha), [-np.inf, -np.inf])
    with pytest.raises(ValueError, match="alpha must be > 0"):
        tstats.dirichlet.logpdf(x, np.array([1.0, -1.0, 2.0]))


def test_user_arrays_are_not_modified():
    x, cov = X.copy(), _spd(2)
    kept = (x.copy(), cov.copy())
    tg.grad(lambda x: np.sum(tstats.norm.logpdf(x, 0.0, 2.0)), backend="numpy")(x)
    tg.grad(
        lambda c: tstats.multivariate_normal.logpdf(np.ones(2), np.zeros(2), c), backend="numpy"
    )(cov)
    np.testing.assert_array_equal(x, kept[0])
    np.testing.assert_array_equal(cov, kept[1])


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"cov of shape \(3, 3\)"):
        tstats.multivariate_normal.logpdf(np.ones(2), np.zeros(2), np.eye(3))
    with pytest.raises(ValueError, match="first axis has 5"):
        tstats.dirichlet.logpdf(np.ones(5) / 5, np.ones(3))
    with pytest.raises(TracingError, match="static argument"):
        tg.jit(lambda n, x: special.polygamma(n, x))(1, 0.5)
    with pytest.raises(ValueError, match="n must be >= 0"):
        special.polygamma(-1, 0.5)


def test_scipy_stats_on_a_traced_value_says_what_to_use():
    with pytest.raises(TracingError, match=r"Use tracegrad\.scipy\.stats\.norm\.logpdf instead"):
        tg.grad(lambda x: np.sum(scipy_stats.norm.logpdf(x)))(X)
    with pytest.raises(TracingError, match=r"scipy\.stats\.skewnorm\.logpdf converts"):
        tg.grad(lambda x: np.sum(scipy_stats.skewnorm.logpdf(x, 1.0)))(X)
    assert tuple(tstats.__all__) == TRACED_STATS


# ---- tracegrad.scipy.special: the functions new here, against SciPy


def test_new_special_ufuncs_match_scipy(backend):
    x = np.concatenate([RNG.uniform(0.01, 30, 12), RNG.uniform(-5, 0, 6), [0.0, -1.0, 150.0]])
    a, b = RNG.uniform(0.1, 40, 8), RNG.uniform(-3, 40, 8)
    p = np.concatenate([RNG.uniform(-1, 1, 10), 1 - np.logspace(-16, -2, 5), [0, 1, -1, 1.5]])
    q = np.concatenate([RNG.uniform(0, 2, 10), np.logspace(-300, -2, 6), [0, 2, 1, -0.5, 2.5]])

    def f(x, a, b, p, q):  # scipy.special's own ufuncs, dispatched to tracegrad
        return (
            scipy_special.gamma(x),
            scipy_special.betaln(a, np.abs(b) + 0.1),
            scipy_special.beta(a, b),
            scipy_special.erfinv(p),
            scipy_special.erfcinv(q),
            special.ndtri(q / 2),
            scipy_special.gammasgn(np.concatenate([x, [-0.0, np.nan, -np.inf]])),
            scipy_special.rgamma(x),
        )

    got = tg.jit(f, backend=backend)(x, a, b, p, q)
    expected = _scipy(f, x, a, b, p, q)
    for g, e, rtol in zip(
        got, expected, (2e-13, 1e-13, 1e-13, 2e-15, 2e-15, 2e-15, 0, 2e-13), strict=True
    ):
        np.testing.assert_allclose(g, e, rtol=rtol, atol=1e-300, equal_nan=True)


def test_incomplete_gamma_matches_scipy(backend):
    a = np.concatenate([RNG.uniform(0.05, 100, 12), [0, 0, 1, 1, -1, 1, 2, np.inf, 1, 2]])
    x = np.concatenate(
        [RNG.uniform(0, 250, 12), [1, 0, np.inf, 0, 1, -1, np.nan, 1, np.inf, 1e-300]]
    )
    got = tg.jit(
        lambda a, x: (scipy_special.gammainc(a, x), special.gammaincc(a, x)), backend=backend
    )(a, x)
    expected = (scipy_special.gammainc(a, x), scipy_special.gammaincc(a, x))
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-14, equal_nan=True)


def test_incomplete_beta_matches_scipy(backend):
    a = np.concatenate([RNG.uniform(0.05, 100, 12), [1, 1, 1, 1, 0, 1, -1, 2, np.inf, 1]])
    b = np.concatenate([RNG.uniform(0.05, 100, 12), [1, 1, 1, 1, 1, 0, 1, np.nan, 1, np.inf]])
    x = np.concatenate([RNG.uniform(0, 1, 12), [0, 1, -0.1, 1.1, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]])
    got = tg.jit(lambda a, b, x: scipy_special.betainc(a, b, x), backend=backend)(a, b, x)
    expected = scipy_special.betainc(a, b, x)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14, equal_nan=True)
    # and its derivative in x is the beta density
    x = np.array([0.05, 0.3, 0.6, 0.97])
    g = tg.grad(lambda x: np.sum(scipy_special.betainc(2.5, 0.7, x)), backend="numpy")(x)
    np.testing.assert_allclose(g, scipy_stats.beta.pdf(x, 2.5, 0.7), rtol=1e-12)


def test_t_cdf_is_exact_through_zero():
    # near 0 the cdf reads 1 - w = z^2 / (df + z^2) itself; at 0 its slope is the density
    x = np.array([0.0, 1e-9, -1e-12, 1.0])
    f = tg.jit(lambda x: tstats.t.cdf(x, 3.0), backend="numpy")
    np.testing.assert_allclose(f(x), scipy_stats.t.cdf(x, 3.0), rtol=1e-15)  # w rounds: 2e-10
    g = tg.grad(lambda x: np.sum(tstats.t.cdf(x, 3.0)), backend="numpy")(x)
    np.testing.assert_allclose(g, scipy_stats.t.pdf(x, 3.0), rtol=1e-12)


def test_bessel_functions_match_scipy(backend):
    # each region: the series (|x| < 5), Bessel's integral (to 25), the asymptotic expansion
    x = np.concatenate([np.linspace(-40, 40, 33), [0.0, 4.99, 5.01, 24.99, 25.01, 700.0, 1e5]])
    x = np.concatenate([x, [710.0, np.inf, -np.inf, np.nan]])
    got = tg.jit(
        lambda x: (scipy_special.j0(x), special.j1(x), scipy_special.i0(x), special.i1(x)),
        backend=backend,
    )(x)
    for g, f in zip(
        got, (scipy_special.j0, scipy_special.j1, scipy_special.i0, scipy_special.i1), strict=True
    ):
        np.testing.assert_allclose(g, f(x), rtol=1e-13, atol=2e-15, equal_nan=True)


def test_bessel_y_matches_scipy(backend):
    # the series (x < 2), the integral form by Gauss-Legendre (to 25), Hankel's expansion
    x = np.concatenate([np.linspace(0.01, 40, 41), [1e-300, 1.99, 2.01, 24.99, 25.01, 1e5]])
    x = np.concatenate([x, [0.0, -1.0, np.inf, np.nan]])
    got = tg.jit(lambda x: (scipy_special.y0(x), special.y1(x)), backend=backend)(x)
    for g, f in zip(got, (scipy_special.y0, scipy_special.y1), strict=True):
        np.testing.assert_allclose(g, _scipy(f, x), rtol=1e-13, atol=5e-15, equal_nan=True)
    v = np.array([0.3, 1.9, 2.1, 12.0, 24.9, 25.1, 33.0])
    g0 = tg.grad(lambda v: np.sum(scipy_special.y0(v)), backend="numpy")(v)
    np.testing.assert_allclose(g0, -scipy_special.y1(v), rtol=1e-13)
    g1 = tg.grad(lambda v: np.sum(scipy_special.y1(v)), backend="numpy")(v)
    expected = (scipy_special.y0(v) - scipy_special.yn(2, v)) / 2
    np.testing.assert_allclose(g1, expected, rtol=1e-13)


def test_bessel_derivatives_are_their_recurrences():
    x = np.array([0.0, 0.3, 4.9, 5.1, 12.0, 24.9, 25.1, 33.0, -7.0])
    sp = scipy_special

    def grad(f):
        return tg.grad(lambda v: np.sum(f(v)), backend="numpy")(x)

    np.testing.assert_allclose(grad(sp.j0), -sp.j1(x), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(grad(sp.j1), (sp.j0(x) - sp.jv(2, x)) / 2, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(grad(sp.i0), sp.i1(x), rtol=1e-13)
    np.testing.assert_allclose(grad(sp.i1), (sp.i0(x) + sp.iv(2, x)) / 2, rtol=1e-13)
    # at 0 through the series on x itself (not |x|): J0''(0) = -1/2, J1'(0) = 1/2
    assert tg.hessian(lambda v: sp.j0(v), backend="numpy")(0.0) == -0.5
    assert tg.grad(lambda v: sp.j1(v), backend="numpy")(0.0) == 0.5


def test_incomplete_gamma_derivative_in_x_is_the_density():
    a = np.array([0.5, 2.0, 7.5, 30.0])
    x = np.array([0.3, 4.0, 6.0, 45.0])  # both sides of x = a + 1
    g = tg.grad(lambda x: np.sum(scipy_special.gammainc(a, x)), backend="numpy")(x)
    np.testing.assert_allclose(g, scipy_stats.gamma.pdf(x, a), rtol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 3, 6])
def test_polygamma_matches_scipy(n, backend):
    x = np.concatenate([RNG.uniform(0.01, 30, 10), [1e-3, 0.5, 200.0, -0.5, -2.3, 0.0, -1.0]])
    got = tg.jit(lambda x: special.polygamma(n, x), backend=backend)(x)
    expected = scipy_special.polygamma(n, x)
    positive = x > 0
    np.testing.assert_allclose(got[positive], expected[positive], rtol=5e-13)
    # below 0 the reflection's pi x rounds: a few 1e-12
    np.testing.assert_allclose(got[~positive], expected[~positive], rtol=5e-12)


def test_multigammaln_matches_scipy(backend):
    a = np.array([1.6, 2.0, 7.5, 30.0])
    got = tg.jit(lambda a: special.multigammaln(a, 3), backend=backend)(a)
    np.testing.assert_allclose(got, scipy_special.multigammaln(a, 3), rtol=1e-14)


def test_special_functions_on_plain_arrays_call_scipy():
    x = np.array([0.3, 1.2])
    np.testing.assert_array_equal(special.polygamma(2, x), scipy_special.polygamma(2, x))
    np.testing.assert_array_equal(special.gammaln(x), scipy_special.gammaln(x))
    np.testing.assert_array_equal(special.logsumexp(x), scipy_special.logsumexp(x))
    # and on traced values the same names trace
    traced = tg.jit(
        lambda x: (special.logsumexp(x), special.digamma(x), special.xlogy(x, x)), backend="numpy"
    )
    for g, e in zip(
        traced(x),
        (scipy_special.logsumexp(x), scipy_special.digamma(x), scipy_special.xlogy(x, x)),
        strict=True,
    ):
        np.testing.assert_allclose(g, e, rtol=1e-14)


SPECIAL_GRADIENTS = [
    ("polygamma1", lambda x: special.polygamma(1, x), np.array([0.3, 1.5, 4.0, -0.4])),
    ("polygamma3", lambda x: special.polygamma(3, x), np.array([0.7, 2.5, 9.0])),
    ("gamma", scipy_special.gamma, np.array([0.3, 1.5, 4.0, -0.4])),
    ("erfinv", scipy_special.erfinv, np.array([-0.9, -0.2, 0.1, 0.6, 0.99])),
    ("erfcinv", scipy_special.erfcinv, np.array([1e-3, 0.05, 0.7, 1.3, 1.9])),
    ("betaln", lambda x: scipy_special.betaln(x, x[::-1] + 0.5), np.array([0.3, 1.5, 4.0])),
    ("beta", lambda x: scipy_special.beta(x, x[::-1] + 0.5), np.array([0.3, 1.5, 4.0])),
    ("multigammaln", lambda x: special.multigammaln(x, 2), np.array([1.2, 3.0])),
    ("rgamma", scipy_special.rgamma, np.array([0.3, 1.5, 4.0, -0.4])),
    (
        "gammainc_a",
        lambda a: scipy_special.gammainc(a, np.array([0.4, 2.0, 9.0])),
        np.array([1.5, 2.5, 3.0]),
    ),
    ("gammaincc_x", lambda x: scipy_special.gammaincc(2.5, x), np.array([0.4, 2.0, 9.0])),
    (
        "betainc_a",
        lambda a: scipy_special.betainc(a, 2.0, np.array([0.2, 0.5, 0.9])),
        np.array([0.7, 1.5, 3.0]),
    ),
    ("betainc_x", lambda x: scipy_special.betainc(1.5, 2.5, x), np.array([0.1, 0.45, 0.8])),
    ("j1", scipy_special.j1, np.array([0.4, 4.99, 5.01, 17.0, 26.0])),
    ("i0", scipy_special.i0, np.array([-0.4, 3.0, 12.0])),
]


@pytest.mark.parametrize(
    ("label", "fun", "x"), SPECIAL_GRADIENTS, ids=[c[0] for c in SPECIAL_GRADIENTS]
)
def test_new_special_derivatives_of_order_one_and_two(label, fun, x):
    # steps of 1e-6: erfcinv near 0 and polygamma near 0 are steep
    total = lambda v: np.sum(fun(v))
    assert tg.check_grad(total, x, order=2, eps=1e-6, rtol=1e-5, atol=1e-6, backend="numpy")


def test_erfinv_and_erfcinv_derivatives_are_their_formulas():
    # d/dp erfinv(p) = sqrt(pi)/2 exp(erfinv(p)^2), through 0 and far into both tails
    p = np.array([-0.999999, -0.5, 0.0, 1e-9, 0.3, 0.999])
    g = tg.grad(lambda p: np.sum(scipy_special.erfinv(p)), backend="numpy")(p)
    expected = np.sqrt(np.pi) / 2 * np.exp(scipy_special.erfinv(p) ** 2)
    np.testing.assert_allclose(g, expected, rtol=1e-12)
    q = np.array([1e-250, 1e-30, 1e-5, 0.4, 1.0, 1.7])
    g = tg.grad(lambda q: np.sum(scipy_special.erfcinv(q)), backend="numpy")(q)
    expected = -np.sqrt(np.pi) / 2 * np.exp(scipy_special.erfcinv(q) ** 2)
    np.testing.assert_allclose(g, expected, rtol=1e-11)


def test_tracegrad_imports_without_scipy_stats():
    # tracegrad.scipy.stats is imported on request only (and tracegrad itself needs no SciPy)
    code = "import sys, tracegrad; sys.exit('tracegrad.scipy' in sys.modules or 'scipy.stats' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_traced_distributions_need_no_scipy():
    code = (
        "import sys\n"
        "sys.modules['scipy'] = None\n"  # import scipy now fails
        "import numpy as np, tracegrad as tg, tracegrad.scipy.stats as ts\n"
        "f = lambda a: ts.gamma.logpdf(2.0, a) + ts.norm.logcdf(a)\n"
        "g = tg.grad(f, backend='numpy')(1.5)\n"
        "print(repr(float(g)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # d/da [(a - 1) log 2 - 2 - gammaln(a)] + d/da log_ndtr(a)
    expected = (
        np.log(2.0)
        - scipy_special.digamma(1.5)
        + np.exp(scipy_stats.norm.logpdf(1.5) - scipy_stats.norm.logcdf(1.5))
    )
    np.testing.assert_allclose(float(out.stdout), expected, rtol=1e-12)


FLOAT32_SPECIAL = [
    ("gamma", lambda x, a, u: scipy_special.gamma(x / 4 - 2)),
    ("beta", lambda x, a, u: scipy_special.beta(x, a)),
    ("betaln", lambda x, a, u: scipy_special.betaln(x, a)),
    ("rgamma", lambda x, a, u: scipy_special.rgamma(x - 3)),
    ("gammasgn", lambda x, a, u: scipy_special.gammasgn(x - 5.5)),
    ("erfinv", lambda x, a, u: scipy_special.erfinv(2 * u - 1)),
    ("erfcinv", lambda x, a, u: scipy_special.erfcinv(2 * u)),
    ("gammainc", lambda x, a, u: scipy_special.gammainc(a, x)),
    ("gammaincc", lambda x, a, u: scipy_special.gammaincc(a, x)),
    ("betainc", lambda x, a, u: scipy_special.betainc(a, x, u)),
    ("polygamma", lambda x, a, u: special.polygamma(2, x)),
    ("multigammaln", lambda x, a, u: special.multigammaln(x + 2, 3)),
    ("ndtri", lambda x, a, u: special.ndtri(u)),
]


@pytest.mark.parametrize(("label", "fun"), FLOAT32_SPECIAL, ids=[c[0] for c in FLOAT32_SPECIAL])
def test_special_functions_keep_float32(label, fun):
    x = np.linspace(0.3, 19.0, 9)
    a = np.linspace(0.6, 15.0, 9)
    u = np.linspace(0.02, 0.97, 9)
    got = tg.jit(fun, backend="numpy")(*(v.astype(np.float32) for v in (x, a, u)))
    expected = _scipy(fun, x, a, u)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["jv", "yv", "iv", "ive", "kv", "jn", "yn"])
def test_bessel_functions_of_any_order_with_derivatives(kind, backend):
    """scipy.special's Bessel functions of a real order on traced arguments: SciPy's values,
    and derivatives of orders 1 and 2 (the recurrences) against central differences."""
    f = getattr(scipy_special, kind)
    x = np.array([1.3, 2.5, 4.0, 7.5])
    v = 2 if kind in ("jn", "yn") else np.array([0.5, 1.0, 2.0, 3.5])
    np.testing.assert_allclose(tg.jit(lambda x: f(v, x), backend=backend)(x), f(v, x), rtol=1e-15)
    # the first derivative against central differences, relative to the function's scale
    g = tg.grad(lambda x: np.sum(f(v, x)), backend=backend)
    h = 1e-6
    scale = np.maximum(1.0, np.abs(f(v, x)))
    np.testing.assert_allclose(
        g(x) / scale, (f(v, x + h) - f(v, x - h)) / (2 * h) / scale, atol=1e-8
    )
    # the second: the derivative of g's values
    h2 = tg.grad(lambda x: np.sum(g(x) * np.array([1.0, -0.5, 0.25, 2.0])), backend=backend)
    fd = [
        np.sum((g(x + h * e) - g(x - h * e)) / (2 * h) * np.array([1.0, -0.5, 0.25, 2.0]))
        for e in np.eye(4)
    ]
    np.testing.assert_allclose(h2(x) / scale, np.array(fd) / scale, atol=1e-6)


def test_bessel_orders_are_not_differentiated_and_complex_is_refused():
    x = np.array([1.5, 2.5])
    grads = tg.grad(lambda v, x: np.sum(scipy_special.jv(v, x)), argnums=(0, 1))(
        np.array([0.5, 1.0]), x
    )
    np.testing.assert_array_equal(grads[0], 0.0)
    with pytest.raises(TypeError, match="complex values is not supported"):
        tg.jit(lambda x: scipy_special.jv(1.0, x * 1j))(x)
