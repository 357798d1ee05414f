"""autograd.scipy.stats: tracegrad.scipy.stats' distributions, one submodule each, as autograd
has them (`import autograd.scipy.stats.norm`)."""

from . import beta, chi2, dirichlet, gamma, multivariate_normal, norm, poisson, t

__all__ = ["beta", "chi2", "dirichlet", "gamma", "multivariate_normal", "norm", "poisson", "t"]
