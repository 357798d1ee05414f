"""Correctly rounded references from mpmath, and errors in ulps measured against them.

A reference value is kept as the float64 hi nearest the exact value r, the binary exponent of r,
and what remains, r - hi, as a float64 in units of r's float64 ulp: about 106 significant bits
in all, subnormal results included. The difference between a float32 or float64 result and hi
is exact (the two are within a factor of two of each other), so an error is measured to within
about 2**-50 of an ulp, and the same on every machine: mpmath computes in integer arithmetic and
does not depend on the CPU, its vector units or its math library.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

import mpmath
import numpy as np

# bits of the working precision: far more than any float64 result needs to be rounded correctly
PREC = 160


def _cbrt(v):
    return -mpmath.cbrt(-v) if v < 0 else mpmath.cbrt(v)


#: NumPy name -> the mpmath function
MP: dict[str, Callable] = {
    "exp": mpmath.exp,
    "expm1": mpmath.expm1,
    "log": mpmath.log,
    "log1p": mpmath.log1p,
    "exp2": lambda v: mpmath.power(2, v),
    "log2": lambda v: mpmath.log(v, 2),
    "log10": mpmath.log10,
    "sin": mpmath.sin,
    "cos": mpmath.cos,
    "tan": mpmath.tan,
    "tanh": mpmath.tanh,
    "arctan": mpmath.atan,
    "sinh": mpmath.sinh,
    "cosh": mpmath.cosh,
    "arcsin": mpmath.asin,
    "arccos": mpmath.acos,
    "cbrt": _cbrt,
    "arctan2": mpmath.atan2,
    "hypot": mpmath.hypot,
}


class Reference(NamedTuple):
    """Exact values r as hi + rest * 2**(max(exp, -1022) - 52), exp = floor(log2 |r|)."""

    hi: np.ndarray  # float64 nearest r; +-inf beyond the float64 range, nan where r is undefined
    exp: np.ndarray  # int64 floor(log2 |r|); -1075 for r = 0 and where hi is not finite
    rest: np.ndarray  # float64 (r - hi) in units of r's float64 ulp, in [-1/2, 1/2]


_NO_EXP = -1075


def _split(r) -> tuple[float, int, float]:
    """(hi, exp, rest) of an mpmath value; nan for a complex or undefined one."""
    if not isinstance(r, mpmath.mpf) or mpmath.isnan(r):
        return np.nan, _NO_EXP, 0.0
    hi = float(r)  # rounded to nearest; +-inf beyond the float64 range
    if not np.isfinite(hi) or r == 0:
        return hi, _NO_EXP, 0.0
    exp = int(mpmath.frexp(r)[1]) - 1  # |r| = m 2**(exp + 1), m in [1/2, 1)
    ulp = mpmath.ldexp(1, max(exp, -1022) - 52)
    return hi, exp, float((r - mpmath.mpf(hi)) / ulp)


def reference(func: Callable | str, *args: Iterable[float]) -> Reference:
    """The exact value of ``func`` (an mpmath function or a name in ``MP``) at every element of
    the argument arrays, each element read exactly."""
    f = MP[func] if isinstance(func, str) else func
    cols = [np.asarray(a, dtype=np.float64).ravel() for a in args]
    hi = np.empty(cols[0].size)
    exp = np.empty(cols[0].size, np.int64)
    rest = np.empty(cols[0].size)
    with mpmath.workprec(PREC):
        for i, vals in enumerate(zip(*cols, strict=True)):
            try:
                r = f(*(mpmath.mpf(float(v)) for v in vals))
            except (ValueError, ZeroDivisionError):
                r = None
            hi[i], exp[i], rest[i] = _split(r)
    shape = np.shape(args[0])
    return Reference(hi.reshape(shape), exp.reshape(shape), rest.reshape(shape))


def rounded(ref: Reference, dtype) -> np.ndarray:
    """The reference rounded to ``dtype``: the correctly rounded result (but for a float32 whose
    exact value lies within 2**-29 ulp of a tie, which no test sample comes near)."""
    with np.errstate(over="ignore", under="ignore"):
        return ref.hi.astype(dtype)


def ulp_errors(got, ref: Reference, dtype) -> np.ndarray:
    """|got - exact| in units of the last place of the exact value in ``dtype`` (the subnormal
    spacing at the bottom of the range). 0 where got and the correctly rounded result are the same
    infinity or both nan; inf where only one of them is nan or infinite."""
    fi = np.finfo(dtype)
    g = np.asarray(got).astype(np.float64)
    want = rounded(ref, dtype).astype(np.float64)
    finite = np.isfinite(g) & np.isfinite(ref.hi)
    e_d = np.maximum(ref.exp, fi.minexp) - fi.nmant  # log2 of the ulp in dtype
    e_64 = np.maximum(ref.exp, -1022) - 52  # log2 of the ulp the rest is counted in
    with np.errstate(all="ignore"):
        diff = np.ldexp(g - ref.hi, -e_d)  # exact: g and hi agree in sign and binade (or g is bad)
        err = np.abs(diff - np.ldexp(ref.rest, e_64 - e_d))
    err = np.where(finite, err, np.inf)
    err = np.where(np.isinf(want) & (g == want), 0.0, err)
    return np.where(np.isnan(ref.hi) & np.isnan(g), 0.0, err)
