"""scipy.special's ufuncs on traced values (stage: tracing): logit, the normal distribution's
functions and xlogy, written with primitives (NumPy dispatches them to tracers like its own).
"""

from __future__ import annotations

import numpy as np

from .. import primitives as P
from ..ir import Var
from ..tracing.dispatch import implements_ufunc, register_ufunc
from .operands import as_operand, as_var

# ---- scipy.special's ufuncs (NumPy dispatches them to tracers like its own)

_SQRT_HALF = float(np.sqrt(0.5))


def _float(x) -> Var:
    x = as_var(x)
    return P.convert(x, P.float_dtype(x.dtype))


@implements_ufunc("logit")
def logit(p):
    """log(p / (1 - p)). Near 1/2, log(p) - log1p(-p) cancels (5e5 ulp at 0.5 + 4e-7); there
    it is 2 arctanh(2p - 1), where 2p - 1 is exact (for 1/4 <= p <= 3/4, by Sterbenz)."""
    p = _float(p)
    ends = P.sub(P.unary(P.log_p, p), P.unary(P.log1p_p, P.neg(p)))
    middle = P.mul(P.unary(P.arctanh_p, P.sub(P.mul(p, 2.0), 1.0)), 2.0)
    inside = P.logical(P.and_p, P.compare(P.ge_p, p, 0.25), P.compare(P.le_p, p, 0.75))
    return P.where(inside, middle, ends)


@implements_ufunc("ndtr")
def ndtr(x):
    """The standard normal CDF: erfc(-x / sqrt 2) / 2 (accurate in both tails' shapes)."""
    return P.mul(P.unary(P.erfc_p, P.mul(P.neg(_float(x)), _SQRT_HALF)), 0.5)


@implements_ufunc("log_ndtr")
def log_ndtr(x):
    """log of the normal CDF: log(ndtr(x)) where that is accurate, log1p(-ndtr(-x)) for x > 0,
    and the asymptotic series for x < -20 (-10 in float32), where ndtr underflows."""
    x = _float(x)
    # where ndtr would underflow (float32 sooner) the series takes over
    far = P.compare(P.lt_p, x, -20.0 if x.dtype == np.float64 else -10.0)
    pos = P.compare(P.gt_p, x, 0.0)
    xs = P.where(far, -1.0, x)  # the other branches never see the far tail
    direct = P.unary(P.log_p, ndtr(P.where(pos, 0.0, xs)))
    upper = P.unary(P.log1p_p, P.neg(ndtr(P.neg(P.where(pos, xs, 1.0)))))
    xf = P.where(far, x, -30.0)
    u = P.div(1.0, P.mul(xf, xf))
    # 1 - u + 3u^2 - 15u^3 + ... (the terms (-1)^k (2k-1)!! u^k; at x = -20 the ninth is 1e-15)
    coefficients = [(-1) ** k * float(np.prod(np.arange(1, 2 * k, 2))) for k in range(1, 9)]
    series = P.const(coefficients[-1], xf.shape, xf.dtype)
    for c in reversed(coefficients[:-1]):  # Horner: c1 + u (c2 + u (... + u c8))
        series = P.add(P.mul(series, u), c)
    series = P.add(P.mul(series, u), 1.0)
    asymptotic = P.sub(
        P.sub(P.mul(P.mul(xf, xf), -0.5), P.unary(P.log_p, P.neg(xf))),
        0.5 * float(np.log(2 * np.pi)),
    )
    asymptotic = P.add(asymptotic, P.unary(P.log_p, series))
    return P.where(far, asymptotic, P.where(pos, upper, direct))


def x_times_log(log_prim):
    """x * log(y) (or log1p(y)), 0 where x == 0 whatever y is (as SciPy's)."""

    def handler(x, y):
        x, y = as_operand(x), as_operand(y)
        dtype = P.float_dtype(P.result_dtype([x, y]))
        x = P.convert(as_var(x), dtype)
        y = P.convert(as_var(y), dtype)
        shape = np.broadcast_shapes(x.shape, y.shape)
        x, y = (
            P.broadcast_to(P.reshape(v, (1,) * (len(shape) - v.ndim) + v.shape), shape)
            for v in (x, y)
        )
        zero = P.compare(P.eq_p, x, 0)
        safe = P.where(zero, 1.0 if log_prim is P.log_p else 0.0, y)
        return P.where(zero, 0.0, P.mul(x, P.unary(log_prim, safe)))

    return handler


register_ufunc("xlogy", x_times_log(P.log_p))
register_ufunc("xlog1py", x_times_log(P.log1p_p))
