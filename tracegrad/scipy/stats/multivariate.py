"""The multivariate distributions (stage: tracing): multivariate_normal (mean and cov traced, cov
through its Cholesky factor) and dirichlet, in SciPy's argument conventions. Written in NumPy
calls: on traced values they trace, with derivatives of every order.
"""

from __future__ import annotations

import math

import numpy as np

from .. import special
from .common import distribution, is_traced, promote


@distribution
class multivariate_normal:
    """The normal distribution of dimension d, N(mean, cov): `cov` a number (times the identity),
    a vector (the diagonal) or a d x d symmetric positive definite matrix (semidefinite with
    allow_singular=True, as SciPy: the pseudo-inverse and pseudo-determinant of its eigenvalues
    above 1e6 eps times the largest, -inf off the subspace it spans)."""

    @staticmethod
    def logpdf(x, mean=None, cov=1, allow_singular=False):
        cov_ndim = np.ndim(cov)
        if mean is None:
            mean = np.zeros(np.shape(cov)[0] if cov_ndim else 1)  # SciPy's dimension
        x, mean, cov = promote(x, mean, cov)
        if mean.ndim != 1:
            mean = np.reshape(mean, (-1,))
        d = mean.shape[0]
        if cov_ndim > 2 or (cov_ndim and cov.shape != (d,) * cov_ndim):
            raise ValueError(
                f"tracegrad.scipy.stats.multivariate_normal: cov of shape {np.shape(cov)} does "
                f"not fit a mean of dimension {d} (give a number, ({d},) or ({d}, {d}))"
            )
        # SciPy's quantiles: the last axis is the dimension; for d = 1 every number is a point
        if x.ndim == 0 or (d == 1 and x.shape[-1] != 1):
            x = x[..., None]
        if x.shape[-1] != d:
            raise ValueError(
                f"tracegrad.scipy.stats.multivariate_normal: x's last axis has {x.shape[-1]} "
                f"entries, the mean {d}"
            )
        diff = x - mean
        if allow_singular:
            return _singular_logpdf(diff, cov if cov_ndim == 2 else np.diag(cov * np.ones(d)))
        if cov_ndim < 2:
            variances = cov * np.ones(d, dtype=cov.dtype) if cov_ndim == 0 else cov
            maha = np.sum(diff * diff / variances, axis=-1)
            log_det = np.sum(np.log(variances))
        else:
            factor = np.linalg.cholesky(cov)
            points = np.reshape(diff, (-1, d))
            white = np.linalg.solve(factor, points.T)  # L^-1 (x - mean), one column a point
            maha = np.reshape(np.sum(white * white, axis=0), diff.shape[:-1])
            log_det = 2 * np.sum(np.log(np.diagonal(factor)))
        out = -0.5 * (maha + log_det) - d * 0.5 * math.log(2 * math.pi)
        return np.squeeze(out) if out.ndim else out

    @staticmethod
    def pdf(x, mean=None, cov=1, allow_singular=False):
        return np.exp(multivariate_normal.logpdf(x, mean, cov, allow_singular))

    @staticmethod
    def entropy(mean=None, cov=1):
        """(d log(2 pi e) + log det cov) / 2 (the mean does not enter)."""
        (cov,) = promote(cov)
        d = cov.shape[0] if cov.ndim else np.shape(mean)[0] if mean is not None else 1
        if cov.ndim == 2:
            log_det = 2 * np.sum(np.log(np.diagonal(np.linalg.cholesky(cov))))
        else:
            log_det = np.sum(np.log(cov * np.ones(d, dtype=cov.dtype)))
        return 0.5 * (d * (1 + math.log(2 * math.pi)) + log_det)


def _singular_logpdf(diff, cov):
    """SciPy's allow_singular=True: eigenvalues at or below 1e6 (float32: 1e3) eps times the
    largest count as zero; the density lives on the span of the others."""
    s, u = np.linalg.eigh(cov)
    d = cov.shape[0]
    factor = 1e6 if cov.dtype == np.float64 else 1e3
    eps = factor * float(np.finfo(cov.dtype).eps) * np.max(np.abs(s))
    keep = s > eps
    s_kept = np.where(keep, s, 1)
    whiten = u * np.where(keep, 1 / np.sqrt(s_kept), 0)  # columns: u_i / sqrt(s_i), kept only
    points = np.reshape(diff, (-1, d))
    maha = np.reshape(np.sum((points @ whiten) ** 2, axis=-1), diff.shape[:-1])
    rank = np.sum(np.where(keep, 1.0, 0.0))
    log_pdet = np.sum(np.where(keep, np.log(s_kept), 0))
    out = -0.5 * (rank * math.log(2 * math.pi) + log_pdet + maha)
    # off the span: a residual along the dropped eigenvectors beyond 1e3 eps
    null = u * np.where(keep, 0.0, 1.0)
    residual = np.reshape(np.sqrt(np.sum((points @ null) ** 2, axis=-1)), diff.shape[:-1])
    out = np.where(residual < 1e3 * eps, out, -np.inf)
    out = np.where(np.min(s) < -eps, np.nan, out)  # not semidefinite (SciPy raises)
    return np.squeeze(out) if out.ndim else out


@distribution
class dirichlet:
    """The Dirichlet distribution with concentrations `alpha` (shape (K,)). As in SciPy, x's
    first axis holds the K components (or K - 1, the last then being 1 - their sum); a point off
    the simplex has logpdf -inf (SciPy raises), an alpha <= 0 gives nan (SciPy raises; so does
    this function when alpha is a plain array)."""

    @staticmethod
    def logpdf(x, alpha):
        x, alpha = promote(x, alpha)
        if alpha.ndim != 1:
            raise ValueError(
                f"tracegrad.scipy.stats.dirichlet: alpha must be a vector (K,), got shape "
                f"{alpha.shape}"
            )
        if not is_traced(alpha) and np.any(alpha <= 0):
            raise ValueError("tracegrad.scipy.stats.dirichlet: all of alpha must be > 0")
        k = alpha.shape[0]
        if x.shape[0] == k - 1:
            x = np.concatenate([x, (1 - np.sum(x, axis=0))[None]], axis=0)
        if x.shape[0] != k:
            raise ValueError(
                f"tracegrad.scipy.stats.dirichlet: x's first axis has {x.shape[0]} entries; "
                f"alpha has {k} (give K or K - 1 components)"
            )
        inside = np.all((x >= 0) & (x <= 1), axis=0) & (np.abs(np.sum(x, axis=0) - 1) <= 1e-9)
        xs = np.where(inside, x, 1 / k)
        alpha_t = np.reshape(alpha, (k,) + (1,) * (x.ndim - 1))
        log_b = np.sum(special.gammaln(alpha)) - special.gammaln(np.sum(alpha))
        value = np.sum(special.xlogy(alpha_t - 1, xs), axis=0) - log_b
        out = np.where(inside, value, -np.inf)
        return np.where(np.all(alpha > 0), out, np.nan)

    @staticmethod
    def pdf(x, alpha):
        return np.exp(dirichlet.logpdf(x, alpha))
