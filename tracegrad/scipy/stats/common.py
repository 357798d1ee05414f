"""What the distributions share (stage: tracing): arguments in one float dtype, and SciPy's
answers outside a distribution's support or parameters.

Every function here is written with plain NumPy calls, so it runs on plain arrays and, on
traced values, records a graph (NumPy dispatches to the traced values). Python numbers are weak,
as in NumPy: float32 data with the default loc=0, scale=1 stays float32.
"""

from __future__ import annotations

import functools

import numpy as np

from ...trace import Tracer


def is_traced(value) -> bool:
    return isinstance(value, Tracer)


def promote(*args):
    """The arguments in their common float dtype: traced values stay traced (cast when their
    dtype differs), everything else becomes a NumPy array."""
    args = [a if is_traced(a) or isinstance(a, (int, float)) else np.asarray(a) for a in args]
    dtype = np.result_type(*[a.dtype if hasattr(a, "dtype") else a for a in args])
    if not np.issubdtype(dtype, np.floating):
        dtype = np.dtype(np.float64)
    out = []
    for a in args:
        if is_traced(a):
            out.append(a if a.dtype == dtype else a.astype(dtype))
        else:
            out.append(np.asarray(a, dtype=dtype))
    return out


def positive(scale):
    """(scale > 0, scale where positive and 1 elsewhere): the safe value keeps a derivative that
    np.where discards from turning into nan."""
    valid = scale > 0
    return valid, np.where(valid, scale, 1)


def standardize(x, loc, scale):
    """(z = (x - loc) / scale, log(scale), scale > 0), in x's float dtype (or the parameters')."""
    x, loc, scale = promote(x, loc, scale)
    valid, safe = positive(scale)
    return (x - loc) / safe, np.log(safe), valid


def log_of(p, q):
    """log(p) given p and q = 1 - p, each computed on its own: log1p(-q) where p > 1/2 (p = 1 - q
    would round there), log(p) elsewhere."""
    return np.where(p > 0.5, np.log1p(-np.where(p > 0.5, q, 0)), np.log(p))


def valid_or_nan(valid, value):
    return np.where(valid, value, np.nan)


def inside_or(inside, value, outside: float):
    return np.where(inside, value, outside)


def distribution(cls):
    """Class decorator: every function of the distribution computes with NumPy's floating-point
    warnings off, as SciPy's do (log(0) is -inf off the support, not a warning)."""
    for name, value in list(vars(cls).items()):
        if isinstance(value, staticmethod):
            setattr(cls, name, staticmethod(_quiet(value.__func__)))
    return cls


def _quiet(fun):
    @functools.wraps(fun)
    def quiet(*args, **kwargs):
        with np.errstate(all="ignore"):
            return fun(*args, **kwargs)

    return quiet
