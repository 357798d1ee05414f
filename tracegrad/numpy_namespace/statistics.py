"""Covariance and correlation matrices on traced values (stage: tracing): cov and corrcoef, as
NumPy computes them (the centred rows times their transpose, times 1 / (N - ddof)).

Frequency and analytic weights (fweights=, aweights=) must be NumPy arrays, not traced values:
NumPy checks them (whole, non-negative numbers), which needs their values while tracing.
"""

from __future__ import annotations

import warnings

import numpy as np

from .. import primitives as P
from ..base.errors import TracingError
from ..ir import Var
from ..tracing.dispatch import implements
from ..tracing.source import at_source
from .elementwise import clip
from .operands import as_var, read_while_tracing


def _weights(name: str, w, samples: int) -> np.ndarray | None:
    if w is None:
        return None
    if isinstance(w, Var):
        raise TracingError(
            f"np.cov: {name} must be a NumPy array, not a traced value{at_source()} (NumPy "
            "checks its values)"
        )
    if isinstance(w, np.ndarray):
        read_while_tracing(w)
    w = np.asarray(w, dtype=float)
    if w.ndim > 1:
        raise RuntimeError(f"cannot handle multidimensional {name}{at_source()}")
    if w.shape[0] != samples:
        raise RuntimeError(f"incompatible numbers of samples and {name}{at_source()}")
    if name == "fweights" and not np.all(w == np.around(w)):
        raise TypeError(f"fweights must be integer{at_source()}")
    if np.any(w < 0):
        raise ValueError(f"{name} cannot be negative{at_source()}")
    return w


@implements("cov")
def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *, dtype=None):
    """np.cov: float64 unless `dtype` says otherwise (as NumPy: float32 data too)."""
    if ddof is not None and ddof != int(ddof):
        raise ValueError(f"ddof must be integer{at_source()}")
    mv = as_var(m)
    yv = None if y is None else as_var(y)
    if dtype is None:
        dtype = np.result_type(mv.dtype, *([] if yv is None else [yv.dtype]), np.float64)
    dtype = np.dtype(dtype)
    if mv.ndim > 2:
        raise ValueError(f"m has more than 2 dimensions{at_source()}")
    x = P.convert(mv, dtype)
    x = P.reshape(x, (1,) * (2 - x.ndim) + x.shape) if x.ndim < 2 else x
    if not rowvar and mv.ndim != 1:
        x = P.transpose(x)
    if x.shape[0] == 0:
        return P.const(np.array([]).reshape(0, 0))
    if yv is not None:
        if yv.ndim > 2:
            raise ValueError(f"y has more than 2 dimensions{at_source()}")
        yy = P.convert(yv, dtype)
        yy = P.reshape(yy, (1,) * (2 - yy.ndim) + yy.shape) if yy.ndim < 2 else yy
        if not rowvar and yy.shape[0] != 1:
            yy = P.transpose(yy)
        if yy.shape[1] != x.shape[1]:
            raise ValueError(
                f"all the input array dimensions except for the concatenation axis must match "
                f"exactly: m has {x.shape[1]} observations, y has {yy.shape[1]}{at_source()}"
            )
        x = P.concatenate([x, yy], 0)
    if ddof is None:
        ddof = 0 if bias else 1
    samples = x.shape[1]
    fw = _weights("fweights", fweights, samples)
    aw = _weights("aweights", aweights, samples)
    w = fw if aw is None else (aw if fw is None else fw * aw)
    if w is None:
        avg = P.div(P.reduce_sum(x, 1, True), float(samples))
        fact = samples - ddof
    else:
        w_sum = float(np.sum(w))
        if w_sum == 0:
            raise ZeroDivisionError(f"Weights sum to zero, can't be normalized{at_source()}")
        weights = P.const(w.astype(dtype))
        avg = P.div(P.reduce_sum(P.mul(x, weights), 1, True), w_sum)
        if ddof == 0:
            fact = w_sum
        elif aw is None:
            fact = w_sum - ddof
        else:
            fact = w_sum - ddof * float(np.sum(w * aw)) / w_sum
    if fact <= 0:
        warnings.warn("Degrees of freedom <= 0 for slice", RuntimeWarning, stacklevel=2)
        fact = 0.0
    centred = P.sub(x, avg)
    right = centred if w is None else P.mul(centred, P.const(w.astype(dtype)))
    c = P.matmul(centred, P.transpose(P.conj(right)))  # NumPy: X @ X^H
    scale = np.true_divide(1, fact) if fact else np.inf
    c = P.mul(c, P.const(np.asarray(scale, dtype)))
    return P.reshape(c, tuple(d for d in c.shape if d != 1))


@implements("corrcoef")
def corrcoef(x, y=None, rowvar=True, bias=None, ddof=None, *, dtype=None):
    """np.corrcoef: cov divided by the outer product of the standard deviations, clipped to
    [-1, 1]; `bias` and `ddof` have no effect (NumPy deprecates them)."""
    if bias is not None or ddof is not None:
        warnings.warn(
            "bias and ddof have no effect and are deprecated", DeprecationWarning, stacklevel=2
        )
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return P.div(c, c)
    k = c.shape[0]
    d = P.gather(P.reshape(c, (k * k,)), P.const(np.arange(k, dtype=np.int64) * (k + 1)), 0)
    stddev = P.unary(P.sqrt_p, P.real(d))  # a variance: real (the diagonal of X @ X^H)
    c = P.div(c, P.reshape(stddev, (k, 1)))
    c = P.div(c, P.reshape(stddev, (1, k)))
    if not P.is_complex(c.dtype):
        return clip(c, -1.0, 1.0)
    # NumPy clips the real and the imaginary parts to [-1, 1] separately
    re, im = (P.convert(clip(part, -1.0, 1.0), c.dtype) for part in (P.real(c), P.imag(c)))
    return P.add(re, P.mul(im, 1j))
