"""The univariate continuous distributions (stage: tracing): norm, expon, laplace, logistic,
cauchy, t, gamma and beta, with SciPy's loc and scale (and shape parameters in SciPy's order).
Outside the support logpdf is -inf and pdf 0; a scale <= 0 (or a shape parameter <= 0) gives nan,
as SciPy's. Written in NumPy calls: on traced values they trace, with derivatives of every order.
"""

from __future__ import annotations

import math

import numpy as np

from .. import special
from .common import distribution, inside_or, log_of, positive, promote, standardize, valid_or_nan

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def _pdf(logpdf):
    def pdf(*args, **kwargs):
        return np.exp(logpdf(*args, **kwargs))

    pdf.__doc__ = "exp(logpdf): the density."
    return pdf


_PPF_DOC = "The quantile function (the inverse of cdf); nan outside [0, 1]."
_ISF_DOC = "The inverse survival function (the inverse of sf); nan outside [0, 1]."


def _quantile(standard, doc: str = _PPF_DOC):
    """loc + scale * standard(q): ppf or isf from the standard distribution's."""

    def quantile(q, loc=0, scale=1):
        q, loc, scale = promote(q, loc, scale)
        valid, safe = positive(scale)
        inside = (q >= 0) & (q <= 1)
        z = standard(np.where(inside, q, 0.5))
        return valid_or_nan(valid & inside, loc + safe * z)

    quantile.__doc__ = doc
    return quantile


@distribution
class norm:
    """The normal distribution N(loc, scale^2)."""

    @staticmethod
    def logpdf(x, loc=0, scale=1):
        z, log_scale, valid = standardize(x, loc, scale)
        return valid_or_nan(valid, -0.5 * z * z - log_scale - _LOG_SQRT_2PI)

    pdf = staticmethod(_pdf(logpdf))

    @staticmethod
    def cdf(x, loc=0, scale=1):
        z, _, valid = standardize(x, loc, scale)
        return valid_or_nan(valid, special.ndtr(z))

    @staticmethod
    def logcdf(x, loc=0, scale=1):
        z, _, valid = standardize(x, loc, scale)
        return valid_or_nan(valid, special.log_ndtr(z))

    @staticmethod
    def sf(x, loc=0, scale=1):
        z, _, valid = standardize(x, loc, scale)
        return valid_or_nan(valid, special.ndtr(-z))

    @staticmethod
    def logsf(x, loc=0, scale=1):
        z, _, valid = standardize(x, loc, scale)
        return valid_or_nan(valid, special.log_ndtr(-z))

    ppf = staticmethod(_quantile(special.ndtri))
    isf = staticmethod(_quantile(lambda q: -special.ndtri(q), _ISF_DOC))


@distribution
class expon:
    """The exponential distribution on [loc, inf) with mean loc + scale."""

    @staticmethod
    def logpdf(x, loc=0, scale=1):
        z, log_scale, valid = standardize(x, loc, scale)
        return valid_or_nan(valid, inside_or(z >= 0, -z - log_scale, -np.inf))

    pdf = staticmethod(_pdf(logpdf))

    @staticmethod
    def cdf(x, loc=0, scale=1):
        z, _, valid = standardize(x, loc, scale)
        return valid_or_nan(valid, inside_or(z >= 0, -np.expm1(-np.maximum(z, 0)), 0.0))

    @staticmethod
    def logcdf(x, loc=0, scale=1):
        z, _, valid = standardize(x, loc, scale)
        zs = np.where(z > 0, z, 1)
        # log(1 - exp(-z)): log(-expm1(-z)) for small z, log1p(-exp(-z)) for large
        value = np.where(zs < math.log(2), np.log(-np.expm1(-zs)), np.log1p(-np.exp(-zs)))
        return valid_or_nan(valid, inside_or(z > 0, value, -np.inf))

    @staticmethod
    def sf(x, loc=0, scale=1):
        z, _, valid = standardize(x, loc, scale)
        return valid_or_nan(valid, inside_or(z >= 0, np.exp(-np.maximum(z, 0)), 1.0))

    @staticmethod
    def logsf(x, loc=0, scale=1):
        z, _, valid = standardize(x, loc, scale)
        return valid_or_nan(valid, inside_or(z >= 0, -z, 0.0))

    ppf = staticmethod(_quantile(lambda q: -np.log1p(-q)))
    isf = staticmethod(_quantile(lambda q: -np.log(q), _ISF_DOC))


@distribution
class laplace:
    """The Laplace (double exponential) distribution: density exp(-|x - loc| / scale) / (2 scale)."""

    @staticmethod
    def logpdf(x, loc=0, scale=1):
        z, log_scale, valid = standardize(x, loc, scale)
        return valid_or_nan(valid, -np.abs(z) - log_scale - math.log(2))

    pdf = staticmethod(_pdf(logpdf))

    @staticmethod
    def cdf(x, loc=0, scale=1):
        z, _, valid = standardize(x, loc, scale)
        half = 0.5 * np.exp(-np.abs(z))
        return valid_or_nan(valid, np.where(z <= 0, half, 1 - half))

    @staticmethod
    def logcdf(x, loc=0, scale=1):
        z, _, valid = standardize(x, loc, scale)
        a = -np.abs(z)
        return valid_or_nan(valid, np.where(z <= 0, a - math.log(2), np.log1p(-0.5 * np.exp(a))))

    @staticmethod
    def sf(x, loc=0, scale=1):
        z, _, valid = standardize(x, loc, scale)
        half = 0.5 * np.exp(-np.abs(z))
        return valid_or_nan(valid, np.where(z >= 0, half, 1 - half))

    @staticmethod
    def logsf(x, loc=0, scale=1):
        z, _, valid = standardize(x, loc, scale)
        a = -np.abs(z)
        return valid_or_nan(valid, np.where(z >= 0, a - math.log(2), np.log1p(-0.5 * np.exp(a))))

    ppf = staticmethod(
        _quantile(
            lambda q: np.where(q <= 0.5, np.log(2 * q), -np.log(np.where(q <= 0.5, 1, 2 - 2 * q)))
        )
    )
    isf = staticmethod(
        _quantile(
            lambda q: np.where(q <= 0.5, -np.log(2 * q), np.log(np.where(q <= 0.5, 1, 2 - 2 * q))),
            _ISF_DOC,
        )
    )


@distribution
class logistic:
    """The logistic distribution: cdf expit((x - loc) / scale)."""

    @staticmethod
    def logpdf(x, loc=0, scale=1):
        z, log_scale, valid = standardize(x, loc, scale)
        a = np.abs(z)  # symmetric: -a - 2 log(1 + exp(-a)) never overflows
        return valid_or_nan(valid, -a - 2 * np.log1p(np.exp(-a)) - log_scale)

    pdf = staticmethod(_pdf(logpdf))

    @staticmethod
    def cdf(x, loc=0, scale=1):
        z, _, valid = standardize(x, loc, scale)
        return valid_or_nan(valid, special.expit(z))

    @staticmethod
    def logcdf(x, loc=0, scale=1):
        z, _, valid = standardize(x, loc, scale)
        return valid_or_nan(valid, -np.logaddexp(0, -z))

    @staticmethod
    def sf(x, loc=0, scale=1):
        z, _, valid = standardize(x, loc, scale)
        return valid_or_nan(valid, special.expit(-z))

    @staticmethod
    def logsf(x, loc=0, scale=1):
        z, _, valid = standardize(x, loc, scale)
        return valid_or_nan(valid, -np.logaddexp(0, z))

    ppf = staticmethod(_quantile(special.logit))
    isf = staticmethod(_quantile(lambda q: -special.logit(q), _ISF_DOC))


@distribution
class cauchy:
    """The Cauchy distribution: density 1 / (pi scale (1 + z^2))."""

    @staticmethod
    def logpdf(x, loc=0, scale=1):
        z, log_scale, valid = standardize(x, loc, scale)
        return valid_or_nan(valid, -np.log1p(z * z) - log_scale - math.log(math.pi))

    pdf = staticmethod(_pdf(logpdf))

    @staticmethod
    def cdf(x, loc=0, scale=1):
        z, _, valid = standardize(x, loc, scale)
        return valid_or_nan(valid, 0.5 + np.arctan(z) / math.pi)

    @staticmethod
    def logcdf(x, loc=0, scale=1):
        return np.log(cauchy.cdf(x, loc, scale))

    @staticmethod
    def sf(x, loc=0, scale=1):
        z, _, valid = standardize(x, loc, scale)
        return valid_or_nan(valid, 0.5 - np.arctan(z) / math.pi)

    @staticmethod
    def logsf(x, loc=0, scale=1):
        return np.log(cauchy.sf(x, loc, scale))

    ppf = staticmethod(
        _quantile(
            lambda q: np.where(q < 0.5, -1 / np.tan(math.pi * q), 1 / np.tan(math.pi * (1 - q)))
        )
    )
    isf = staticmethod(
        _quantile(
            lambda q: np.where(q < 0.5, 1 / np.tan(math.pi * q), -1 / np.tan(math.pi * (1 - q))),
            _ISF_DOC,
        )
    )


@distribution
class t:
    """Student's t distribution with `df` degrees of freedom (df <= 0 gives nan)."""

    @staticmethod
    def logpdf(x, df, loc=0, scale=1):
        x, df, loc, scale = promote(x, df, loc, scale)
        z, log_scale, valid = standardize(x, loc, scale)
        valid_df, df = positive(df)
        half = 0.5 * (df + 1)
        value = (
            special.gammaln(half)
            - special.gammaln(0.5 * df)
            - 0.5 * np.log(df * math.pi)
            - log_scale
            - half * np.log1p(z * z / df)
        )
        return valid_or_nan(valid & valid_df, value)

    pdf = staticmethod(_pdf(logpdf))

    @staticmethod
    def cdf(x, df, loc=0, scale=1):
        return t._tails(x, df, loc, scale)[0]

    @staticmethod
    def sf(x, df, loc=0, scale=1):
        return t._tails(x, df, loc, scale)[1]

    @staticmethod
    def logcdf(x, df, loc=0, scale=1):
        return log_of(*t._tails(x, df, loc, scale))

    @staticmethod
    def logsf(x, df, loc=0, scale=1):
        cdf, sf = t._tails(x, df, loc, scale)
        return log_of(sf, cdf)

    @staticmethod
    def _tails(x, df, loc, scale):
        """(cdf, sf): P(T > |z|) = I_w(df / 2, 1 / 2) / 2 with w = df / (df + z^2) in the tails,
        P(|T| < |z|) = I_(1-w)(1 / 2, df / 2) near 0 (where w would round to 1), and at z = 0
        exactly 1/2 + density(0) z (the same value, with its derivative)."""
        x, df, loc, scale = promote(x, df, loc, scale)
        z, _, valid = standardize(x, loc, scale)
        valid_df, df = positive(df)
        at_0 = z == 0
        zs = np.where(at_0, 1, z)
        z2 = zs * zs
        near = z2 < df  # 1 - w < 1/2
        # one betainc: I_(1-w)(1/2, df/2) = P(|T| < |z|) near 0, I_w(df/2, 1/2) = 2 P(T > |z|)
        half = 0.5 * special.betainc(
            np.where(near, 0.5, 0.5 * df),
            np.where(near, 0.5 * df, 0.5),
            np.where(near, z2, df) / (df + z2),
        )
        cdf = np.where(near, 0.5 + np.sign(zs) * half, np.where(zs < 0, half, 1 - half))
        log_density_0 = special.gammaln(0.5 * (df + 1)) - special.gammaln(0.5 * df)
        slope = np.exp(log_density_0 - 0.5 * np.log(df * math.pi)) * z
        cdf = np.where(at_0, 0.5 + slope, cdf)
        sf = np.where(at_0, 0.5 - slope, 1 - cdf)
        sf = np.where(at_0 | near, sf, np.where(zs > 0, half, 1 - half))
        ok = valid & valid_df
        return valid_or_nan(ok, cdf), valid_or_nan(ok, sf)


@distribution
class gamma:
    """The gamma distribution with shape `a` (a <= 0 gives nan) on [loc, inf)."""

    @staticmethod
    def logpdf(x, a, loc=0, scale=1):
        x, a, loc, scale = promote(x, a, loc, scale)
        z, log_scale, valid = standardize(x, loc, scale)
        valid_a, a = positive(a)
        inside = z >= 0
        zs = np.where(inside, z, 1)
        value = special.xlogy(a - 1, zs) - zs - special.gammaln(a) - log_scale
        return valid_or_nan(valid & valid_a, inside_or(inside, value, -np.inf))

    pdf = staticmethod(_pdf(logpdf))

    @staticmethod
    def cdf(x, a, loc=0, scale=1):
        x, a, loc, scale = promote(x, a, loc, scale)
        z, _, valid = standardize(x, loc, scale)
        valid_a, a = positive(a)
        inside = z >= 0
        value = special.gammainc(a, np.where(inside, z, 1))
        return valid_or_nan(valid & valid_a, inside_or(inside, value, 0.0))

    @staticmethod
    def sf(x, a, loc=0, scale=1):
        x, a, loc, scale = promote(x, a, loc, scale)
        z, _, valid = standardize(x, loc, scale)
        valid_a, a = positive(a)
        inside = z >= 0
        value = special.gammaincc(a, np.where(inside, z, 1))
        return valid_or_nan(valid & valid_a, inside_or(inside, value, 1.0))

    @staticmethod
    def logcdf(x, a, loc=0, scale=1):
        return log_of(gamma.cdf(x, a, loc, scale), gamma.sf(x, a, loc, scale))

    @staticmethod
    def logsf(x, a, loc=0, scale=1):
        return log_of(gamma.sf(x, a, loc, scale), gamma.cdf(x, a, loc, scale))


@distribution
class beta:
    """The beta distribution with shapes `a`, `b` (<= 0 gives nan) on [loc, loc + scale]."""

    @staticmethod
    def logpdf(x, a, b, loc=0, scale=1):
        x, a, b, loc, scale = promote(x, a, b, loc, scale)
        z, log_scale, valid = standardize(x, loc, scale)
        valid_a, a = positive(a)
        valid_b, b = positive(b)
        inside = (z >= 0) & (z <= 1)
        zs = np.where(inside, z, 0.5)
        value = (
            special.xlogy(a - 1, zs)
            + special.xlog1py(b - 1, -zs)
            - special.betaln(a, b)
            - log_scale
        )
        return valid_or_nan(valid & valid_a & valid_b, inside_or(inside, value, -np.inf))

    pdf = staticmethod(_pdf(logpdf))

    @staticmethod
    def cdf(x, a, b, loc=0, scale=1):
        return beta._tails(x, a, b, loc, scale)[0]

    @staticmethod
    def sf(x, a, b, loc=0, scale=1):
        return beta._tails(x, a, b, loc, scale)[1]

    @staticmethod
    def logcdf(x, a, b, loc=0, scale=1):
        return log_of(*beta._tails(x, a, b, loc, scale))

    @staticmethod
    def logsf(x, a, b, loc=0, scale=1):
        cdf, sf = beta._tails(x, a, b, loc, scale)
        return log_of(sf, cdf)

    @staticmethod
    def _tails(x, a, b, loc, scale):
        """(cdf, sf) = (I_z(a, b), I_(1-z)(b, a))."""
        x, a, b, loc, scale = promote(x, a, b, loc, scale)
        z, _, valid = standardize(x, loc, scale)
        valid_a, a = positive(a)
        valid_b, b = positive(b)
        zs = np.clip(z, 0, 1)
        ok = valid & valid_a & valid_b
        cdf = valid_or_nan(ok, special.betainc(a, b, zs))
        sf = valid_or_nan(ok, special.betainc(b, a, 1 - zs))
        return cdf, sf


@distribution
class chi2:
    """The chi-squared distribution with `df` degrees of freedom: gamma(df / 2, scale=2)."""

    @staticmethod
    def logpdf(x, df, loc=0, scale=1):
        x, df, loc, scale = promote(x, df, loc, scale)
        return gamma.logpdf(x, 0.5 * df, loc, 2 * scale)

    pdf = staticmethod(_pdf(logpdf))

    @staticmethod
    def cdf(x, df, loc=0, scale=1):
        x, df, loc, scale = promote(x, df, loc, scale)
        return gamma.cdf(x, 0.5 * df, loc, 2 * scale)

    @staticmethod
    def sf(x, df, loc=0, scale=1):
        x, df, loc, scale = promote(x, df, loc, scale)
        return gamma.sf(x, 0.5 * df, loc, 2 * scale)
