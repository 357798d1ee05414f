"""The discrete distributions (stage: tracing): poisson and bernoulli, with SciPy's loc. logpmf is
-inf off the support (k not an integer, or out of range) and nan for a parameter out of range, as
SciPy's. Written in NumPy calls: on traced values they trace (derivatives in the parameters).
"""

from __future__ import annotations

import numpy as np

from .. import special
from .common import distribution, inside_or, log_of, promote, valid_or_nan


def _pmf(logpmf):
    def pmf(*args, **kwargs):
        return np.exp(logpmf(*args, **kwargs))

    pmf.__doc__ = "exp(logpmf): the probability mass."
    return pmf


@distribution
class poisson:
    """The Poisson distribution with mean `mu` (mu >= 0)."""

    @staticmethod
    def logpmf(k, mu, loc=0):
        k, mu, loc = promote(k, mu, loc)
        k = k - loc
        inside = (k >= 0) & (k == np.floor(k))
        ks = np.where(inside, k, 0)
        valid = mu >= 0
        mus = np.where(valid, mu, 1)
        value = special.xlogy(ks, mus) - special.gammaln(ks + 1) - mus
        return valid_or_nan(valid, inside_or(inside, value, -np.inf))

    pmf = staticmethod(_pmf(logpmf))

    @staticmethod
    def cdf(k, mu, loc=0):
        """P(K <= k) = Q(floor(k) + 1, mu), the regularized upper incomplete gamma function."""
        k, mu, loc = promote(k, mu, loc)
        k = np.floor(k - loc)
        inside = k >= 0
        valid = mu >= 0
        value = special.gammaincc(np.where(inside, k, 0) + 1, np.where(valid, mu, 1))
        return valid_or_nan(valid, inside_or(inside, value, 0.0))

    @staticmethod
    def sf(k, mu, loc=0):
        """P(K > k) = P(floor(k) + 1, mu)."""
        k, mu, loc = promote(k, mu, loc)
        k = np.floor(k - loc)
        inside = k >= 0
        valid = mu >= 0
        value = special.gammainc(np.where(inside, k, 0) + 1, np.where(valid, mu, 1))
        return valid_or_nan(valid, inside_or(inside, value, 1.0))

    @staticmethod
    def logcdf(k, mu, loc=0):
        return log_of(poisson.cdf(k, mu, loc), poisson.sf(k, mu, loc))


@distribution
class bernoulli:
    """The Bernoulli distribution: k = 1 with probability p (0 <= p <= 1), k = 0 otherwise."""

    @staticmethod
    def logpmf(k, p, loc=0):
        k, p, loc = promote(k, p, loc)
        k = k - loc
        inside = (k == 0) | (k == 1)
        ks = np.where(inside, k, 0)
        valid = (p >= 0) & (p <= 1)
        ps = np.where(valid, p, 0.5)
        value = special.xlogy(ks, ps) + special.xlog1py(1 - ks, -ps)
        return valid_or_nan(valid, inside_or(inside, value, -np.inf))

    pmf = staticmethod(_pmf(logpmf))

    @staticmethod
    def cdf(k, p, loc=0):
        k, p, loc = promote(k, p, loc)
        k = k - loc
        valid = (p >= 0) & (p <= 1)
        value = np.where(k < 0, 0, np.where(k < 1, 1 - p, 1))
        return valid_or_nan(valid, value)

    @staticmethod
    def logcdf(k, p, loc=0):
        return np.log(bernoulli.cdf(k, p, loc))

    @staticmethod
    def sf(k, p, loc=0):
        return 1 - bernoulli.cdf(k, p, loc)
