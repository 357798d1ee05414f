"""Elementwise entries of the table (stage: primitives): inverse hyperbolic functions, arctan2,
hypot, cbrt, copysign, the error function, log-gamma and digamma.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import Var
from .elementwise import (
    elementwise_primitive,
    exp_p,
    log_p,
    one_minus_square,
    sqrt_p,
    tan_p,
)
from .facets import registered
from .ops import (
    unary_rule,
    add,
    compare,
    const,
    convert,
    ct_mul,
    div,
    emit,
    float_dtype,
    mul,
    neg,
    ones_like,
    reciprocal,
    sub,
    unary,
    where,
)

# ---- Inverse hyperbolic functions, arctan2, hypot, cbrt, copysign (one block; NumPy's names)
arcsinh_p = elementwise_primitive(
    "arcsinh",
    np.arcsinh,
    # 1 / hypot(x, 1): x * x + 1 overflows for |x| above 1e154 (1e19 in float32); complex:
    # 1 / sqrt(1 + x^2), holomorphic (hypot is not defined on complex values)
    unary_rule(
        lambda x, out: reciprocal(
            unary(sqrt_p, add(mul(x, x), 1.0))
            if x.dtype.kind == "c"
            else emit(hypot_p, x, ones_like(x))
        )
    ),
    "np.arcsinh({0})",
    complex_operands=True,
    complex_scalar="M.asinh({0})",  # its complex form (fusion/render.py), not NumPy's
)
arccosh_p = elementwise_primitive(
    "arccosh",
    np.arccosh,
    # 1 / (sqrt(x - 1) sqrt(x + 1)): x * x - 1 cancels near 1 and overflows for large x
    unary_rule(
        lambda x, out: reciprocal(mul(unary(sqrt_p, sub(x, 1.0)), unary(sqrt_p, add(x, 1.0))))
    ),
    "np.arccosh({0})",
    domain=(1.2, 3.0),
    complex_operands=True,
    # CPython's c_acosh (cmath.acosh as Numba compiles it): np.arccosh of a complex value in a
    # kernel is NumPy's condensed log(z + sqrt(z+1) sqrt(z-1)), which overflowed to inf+0j at
    # 1e308+1e308j (NumPy 710.24+0.785j)
    complex_scalar="M.acosh({0})",
)
arctanh_p = elementwise_primitive(
    "arctanh",
    np.arctanh,
    unary_rule(lambda x, out: reciprocal(one_minus_square(x))),  # no cancelling near 1
    "np.arctanh({0})",
    domain=(-0.9, 0.9),
    complex_operands=True,
    complex_scalar="M.atanh({0})",  # fusion/render.py's complex form, NumPy's NaN cases
)
# cbrt' = 1 / (3 cbrt(x)^2): infinite at 0, like the function's slope
cbrt_p = elementwise_primitive(
    "cbrt",
    np.cbrt,
    unary_rule(lambda x, out: div(1.0 / 3.0, mul(out, out))),
    "M.cbrt({0})",
    domain=(0.2, 3.0),
)


def _arctan2_rule(ct, out, y, x):
    # x / (x^2 + y^2) as x / h / h, h = hypot(y, x): the sum of squares under- or overflows
    # (float32 below 1e-19 or above 1e19) where the derivative is an ordinary number
    h = emit(hypot_p, y, x)
    return ct_mul(ct, div(div(x, h), h)), ct_mul(ct, neg(div(div(y, h), h)))


def _hypot_rule(ct, out, a, b):
    # at (0, 0) hypot has a kink, like a norm: its derivative there is 0 (not 0/0)
    safe = where(compare(registered("eq"), out, 0.0), 1.0, out)
    return ct_mul(ct, div(a, safe)), ct_mul(ct, div(b, safe))


arctan2_p = elementwise_primitive(
    "arctan2", np.arctan2, _arctan2_rule, "M.atan2({0}, {1})", domain=(0.5, 2.0)
)
hypot_p = elementwise_primitive(
    "hypot",
    np.hypot,
    _hypot_rule,
    "M.hypot({0}, {1})",
    domain=(0.5, 2.0),
)
# copysign(a, b) = |a| sign(b): slope sign(a) sign(b) in a (as |a|'s, 0 at a = 0), none in b
copysign_p = elementwise_primitive(
    "copysign",
    np.copysign,
    lambda ct, out, a, b: (
        ct_mul(ct, mul(emit(registered("sign"), a), emit(copysign_p, ones_like(b), b))),
        None,
    ),
    "np.copysign({0}, {1})",
)
# ---- The error function (scipy.special.erf / erfc, and the normal distribution built on them)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
erf_p = elementwise_primitive(
    "erf",
    lambda x: _special("erf")(x),
    unary_rule(lambda x, out: mul(unary(exp_p, neg(mul(x, x))), _TWO_OVER_SQRT_PI)),
    "M.erf({0})",
    complex_operands=True,  # holomorphic; complex values run SciPy's erf on the host
)
erfc_p = elementwise_primitive(
    "erfc",
    lambda x: _special("erfc")(x),
    unary_rule(lambda x, out: mul(unary(exp_p, neg(mul(x, x))), -_TWO_OVER_SQRT_PI)),
    "M.erfc({0})",
    complex_operands=True,
)


def _special(name: str, math_name: str | None = None):
    """scipy.special's ufunc, or math's function vectorised when SciPy is not installed (the
    reference implementation must not need an optional dependency)."""
    try:
        import scipy.special

        return getattr(scipy.special, name)
    except ImportError:
        scalar = getattr(math, math_name or name)
        return lambda x: np.vectorize(scalar, otypes=[x.dtype])(x) if x.size else x.copy()


# ---- log|Gamma| and its derivatives (scipy.special.gammaln, digamma). gammaln is a primitive whose
# kernels call libm's lgamma; digamma (its derivative) is a composition of primitives: the
# recurrence psi(x) = psi(x + 8) - sum_k 1 / (x + k) and the asymptotic series at x + 8 >= 8.5
# (truncation error below 1e-14), reflected below 1/2 (psi(x) = psi(1 - x) - pi / tan(pi x)). Being
# primitives all the way down, its derivatives (the polygamma functions) exist at every order and
# the whole function fuses into the loop that uses it.
_DIGAMMA_SHIFT = 8
# the asymptotic series' coefficients of y**-2k: B_2k / (2k)
_DIGAMMA_SERIES = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760)


def digamma(x: Var) -> Var:
    """psi(x) = d/dx log|Gamma(x)|, as one fusable chain of elementwise primitives."""
    x = convert(x, float_dtype(x.dtype))
    reflect = compare(registered("lt"), x, 0.5)
    z = where(reflect, sub(1.0, x), x)
    shift = None
    for k in range(_DIGAMMA_SHIFT):
        term = div(1.0, add(z, float(k)) if k else z)
        shift = term if shift is None else add(shift, term)
    y = add(z, float(_DIGAMMA_SHIFT))
    inv2 = div(1.0, mul(y, y))
    series = None
    for c in reversed(_DIGAMMA_SERIES):  # Horner in y**-2
        series = const(c, inv2.shape, inv2.dtype) if series is None else add(series, c)
        series = mul(series, inv2)
    psi = sub(sub(sub(unary(log_p, y), div(0.5, y)), series), shift)
    # pi / tan(pi x) only where reflected (elsewhere tan is evaluated at a harmless 1/4)
    t = unary(tan_p, mul(where(reflect, x, 0.25), math.pi))
    return where(reflect, sub(psi, div(math.pi, t)), psi)


gammaln_p = elementwise_primitive(
    "gammaln",
    lambda x: _special("gammaln", "lgamma")(x),
    unary_rule(lambda x, out: digamma(x)),
    "M.lgamma({0})",
    domain=(0.5, 4.0),
)
