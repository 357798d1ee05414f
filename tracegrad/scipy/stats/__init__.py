"""scipy.stats' distributions on traced values (stage: tracing), as `jax.scipy.stats`:
`import tracegrad.scipy.stats as tstats`, then `tstats.norm.logpdf(x, loc, scale)`.

SciPy's own `scipy.stats` converts its arguments with np.asarray, so it cannot see traced values;
these versions are written in NumPy calls and tracegrad.scipy.special, so they trace (and run on
plain arrays too), with SciPy's argument order, loc and scale, and SciPy's answers off the
support (-inf) and for invalid parameters (nan).

>>> import numpy as np, tracegrad as tg
>>> import tracegrad.scipy.stats as tstats
>>> float(tg.grad(lambda m: tstats.norm.logpdf(1.0, m, 2.0))(0.0))  # (x - m) / scale^2
0.25
"""

from __future__ import annotations

from .continuous import beta, cauchy, chi2, expon, gamma, laplace, logistic, norm, t
from .discrete import bernoulli, poisson
from .multivariate import dirichlet, multivariate_normal

__all__ = [
    "bernoulli",
    "beta",
    "cauchy",
    "chi2",
    "dirichlet",
    "expon",
    "gamma",
    "laplace",
    "logistic",
    "multivariate_normal",
    "norm",
    "poisson",
    "t",
]
