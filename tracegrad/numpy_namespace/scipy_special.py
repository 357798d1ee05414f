"""scipy.special's ufuncs on traced values (stage: tracing): logit, the normal distribution's
functions and xlogy, written with primitives (NumPy dispatches them to tracers like its own).
"""

from __future__ import annotations

import math

import numpy as np

from .. import primitives as P
from ..ir import Var
from ..tracing.dispatch import implements_ufunc, register_ufunc
from ..tracing.source import at_source
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


def _floats(*xs) -> list[Var]:
    """The operands in their common float dtype, broadcast to one shape."""
    xs = [as_operand(x) for x in xs]
    dtype = P.float_dtype(P.result_dtype(xs))
    xs = [P.convert(as_var(x), dtype) for x in xs]
    shape = P.broadcast_shapes(*[x.shape for x in xs])
    return [P.broadcast_to(P.reshape(x, (1,) * (len(shape) - x.ndim) + x.shape), shape) for x in xs]


def fill(value: float, like: Var) -> Var:
    """`value` in `like`'s shape and dtype (np.where of two Python numbers would be float64)."""
    return P.const(value, like.shape, like.dtype)


def _gammaln(x: Var) -> Var:
    return P.unary(P.gammaln_p, x)


def _gamma_sign(x: Var) -> Var:
    """The sign of Gamma(x): -1 where x < 0 and floor(x) is odd, 1 elsewhere."""
    odd = P.compare(
        P.eq_p, P.emit(P.mod_p, P.emit(P.floor_p, x), P.const(2.0, x.shape, x.dtype)), 1.0
    )
    return P.where(P.logical(P.and_p, P.compare(P.lt_p, x, 0.0), odd), fill(-1.0, x), 1.0)


def _is_pole(x: Var) -> Var:
    """x is 0 or a negative integer."""
    return P.logical(P.and_p, P.compare(P.le_p, x, 0.0), P.compare(P.eq_p, P.emit(P.floor_p, x), x))


@implements_ufunc("betaln")
def betaln(a, b):
    """log|B(a, b)| = gammaln(a) + gammaln(b) - gammaln(a + b) (the sum cancels for large
    arguments: about 1e-16 of gammaln's size absolutely)."""
    a, b = _floats(a, b)
    return P.sub(P.add(_gammaln(a), _gammaln(b)), _gammaln(P.add(a, b)))


@implements_ufunc("gamma")
def gamma(x):
    """Gamma(x) = sign * exp(gammaln(x)); inf at 0, nan at the negative integers (as SciPy's)."""
    (x,) = _floats(x)
    pole = _is_pole(x)
    xs = P.where(pole, 1.0, x)  # lgamma's kernel is not asked about its poles
    value = P.mul(_gamma_sign(xs), P.unary(P.exp_p, _gammaln(xs)))
    at_pole = P.where(
        P.compare(P.eq_p, x, 0.0),
        P.emit(P.copysign_p, P.const(np.inf, x.shape, x.dtype), x),
        np.nan,
    )
    return P.where(pole, at_pole, value)


@implements_ufunc("gammasgn")
def gammasgn(x):
    """The sign of Gamma(x): +-1 (the sign of zero at 0), nan at the negative integers."""
    (x,) = _floats(x)
    sign = P.where(
        P.compare(P.eq_p, x, 0.0), P.emit(P.copysign_p, P.ones_like(x), x), _gamma_sign(x)
    )
    undefined = P.logical(
        P.or_p,
        P.logical(P.and_p, _is_pole(x), P.compare(P.ne_p, x, 0.0)),
        P.logical(P.or_p, P.emit(P.isnan_p, x), P.compare(P.eq_p, x, -np.inf)),
    )
    return P.where(undefined, np.nan, sign)


@implements_ufunc("rgamma")
def rgamma(x):
    """1 / Gamma(x) = sign * exp(-gammaln(x)): 0 at the poles."""
    (x,) = _floats(x)
    pole = _is_pole(x)
    xs = P.where(pole, 1.0, x)
    value = P.mul(_gamma_sign(xs), P.unary(P.exp_p, P.neg(_gammaln(xs))))
    return P.where(pole, 0.0, value)


@implements_ufunc("beta")
def beta(a, b):
    """B(a, b) = Gamma(a) Gamma(b) / Gamma(a + b), as sign * exp(betaln(a, b))."""
    a, b = _floats(a, b)
    sign = P.mul(P.mul(_gamma_sign(a), _gamma_sign(b)), _gamma_sign(P.add(a, b)))
    return P.mul(sign, P.unary(P.exp_p, betaln(a, b)))


# ---- The regularized incomplete gamma functions P(a, x) (gammainc) and Q(a, x) = 1 - P
# (gammaincc): the series x^a e^-x / Gamma(a + 1) sum_n x^n / ((a + 1)...(a + n)) below
# x = a + 1, the continued fraction x^a e^-x / Gamma(a) / (x + 1 - a - 1 (1 - a) / (x + 3 - a -
# ...)) above, evaluated backwards from a fixed depth. Both have a fixed number of terms, enough
# for 1e-13 up to a = 100 (fewer digits beyond: 4e-8 at a = 300).
_GAMMAINC_TERMS = 100


def _gammainc_pair(a, x) -> tuple[Var, Var]:
    """(P, Q) of the regularized incomplete gamma functions, SciPy's edges included."""
    a, x = _floats(a, x)
    positive = P.logical(P.and_p, P.compare(P.gt_p, a, 0.0), P.compare(P.gt_p, x, 0.0))
    valid = P.logical(P.and_p, positive, P.compare(P.lt_p, x, np.inf))
    series = P.compare(P.lt_p, x, P.add(a, 1.0))
    a_safe = P.where(valid, a, 1.0)
    # each branch sees values of its own region only (a safe derivative in the other)
    xs = P.where(P.logical(P.and_p, valid, series), x, P.mul(a_safe, 0.5))
    xc = P.where(P.logical(P.and_p, valid, P.emit(P.not_p, series)), x, P.add(a_safe, 2.0))

    def log_prefactor(v):  # log(v^a e^-v / Gamma(a))
        return P.sub(P.sub(P.mul(a_safe, P.unary(P.log_p, v)), v), _gammaln(a_safe))

    term = P.ones_like(xs)
    total = term
    for n in range(1, _GAMMAINC_TERMS):
        term = P.div(P.mul(term, xs), P.add(a_safe, float(n)))
        total = P.add(total, term)
    p_series = P.div(P.mul(P.unary(P.exp_p, log_prefactor(xs)), total), a_safe)
    tail = P.zeros_like(xc)
    for k in range(_GAMMAINC_TERMS, 0, -1):
        numerator = P.mul(P.sub(float(k), a_safe), float(k))
        tail = P.div(numerator, P.sub(P.sub(P.add(xc, float(2 * k + 1)), a_safe), tail))
    q_fraction = P.div(
        P.unary(P.exp_p, log_prefactor(xc)), P.sub(P.sub(P.add(xc, 1.0), a_safe), tail)
    )
    p = P.where(series, p_series, P.sub(1.0, q_fraction))
    q = P.where(series, P.sub(1.0, p_series), q_fraction)
    # SciPy's edges: x = 0 gives P = 0 (a > 0); x = inf gives P = 1; a = 0 with x > 0 gives
    # P = 1; a < 0, x < 0, a = x = 0 or nan give nan
    x_zero = P.logical(P.and_p, P.compare(P.eq_p, x, 0.0), P.compare(P.gt_p, a, 0.0))
    x_inf = P.logical(P.and_p, P.compare(P.eq_p, x, np.inf), P.compare(P.ge_p, a, 0.0))
    a_zero = P.logical(P.and_p, P.compare(P.eq_p, a, 0.0), P.compare(P.gt_p, x, 0.0))
    ones = P.logical(P.or_p, x_inf, a_zero)
    p = P.where(valid, p, P.where(x_zero, fill(0.0, x), P.where(ones, fill(1.0, x), np.nan)))
    q = P.where(valid, q, P.where(x_zero, fill(1.0, x), P.where(ones, fill(0.0, x), np.nan)))
    a_inf = P.logical(P.and_p, P.compare(P.eq_p, a, np.inf), P.compare(P.lt_p, x, np.inf))
    p = P.where(a_inf, P.where(P.compare(P.ge_p, x, 0.0), fill(0.0, x), np.nan), p)
    q = P.where(a_inf, P.where(P.compare(P.ge_p, x, 0.0), fill(1.0, x), np.nan), q)
    return p, q


@implements_ufunc("gammainc")
def gammainc(a, x):
    """The regularized lower incomplete gamma function P(a, x)."""
    return _gammainc_pair(a, x)[0]


@implements_ufunc("gammaincc")
def gammaincc(a, x):
    """The regularized upper incomplete gamma function Q(a, x) = 1 - P(a, x)."""
    return _gammainc_pair(a, x)[1]


# ---- The regularized incomplete beta function I_x(a, b) (betainc): the continued fraction
# x^a (1-x)^b / (a B(a, b)) / (1 + d1 / (1 + d2 / ...)), evaluated backwards from a fixed depth,
# on I_x(a, b) below x = (a + 1) / (a + b + 2) and on 1 - I_(1-x)(b, a) above (where it
# converges fast): within 4e-13 of SciPy's up to a, b = 100.
_BETAINC_DEPTH = 80


def betainc_of(a: Var, b: Var, x: Var, y: Var) -> Var:
    """I_x(a, b) given y = 1 - x as well (computed on its own where the caller can: t's cdf)."""
    a, b, x, y = _floats(a, b, x, y)
    inside = P.logical(P.and_p, P.compare(P.gt_p, x, 0.0), P.compare(P.gt_p, y, 0.0))
    finite = P.logical(
        P.and_p,
        P.logical(P.and_p, P.compare(P.gt_p, a, 0.0), P.compare(P.lt_p, a, np.inf)),
        P.logical(P.and_p, P.compare(P.gt_p, b, 0.0), P.compare(P.lt_p, b, np.inf)),
    )
    valid = P.logical(P.and_p, inside, finite)
    a_s, b_s = P.where(valid, a, 1.0), P.where(valid, b, 1.0)
    x_s, y_s = P.where(valid, x, 0.5), P.where(valid, y, 0.5)
    flip = P.compare(P.gt_p, x_s, P.div(P.add(a_s, 1.0), P.add(P.add(a_s, b_s), 2.0)))
    aa, bb = P.where(flip, b_s, a_s), P.where(flip, a_s, b_s)
    xx, yy = P.where(flip, y_s, x_s), P.where(flip, x_s, y_s)
    tail = P.zeros_like(xx)
    for j in range(_BETAINC_DEPTH, 0, -1):
        m = float(j // 2)
        if j % 2:  # d_2m+1 = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1))
            top = P.mul(P.mul(P.add(aa, m), P.add(P.add(aa, bb), m)), P.neg(xx))
            bottom = P.mul(P.add(aa, 2 * m), P.add(aa, 2 * m + 1))
        else:  # d_2m = m (b - m) x / ((a + 2m - 1)(a + 2m))
            top = P.mul(P.mul(P.sub(bb, m), xx), m)
            bottom = P.mul(P.add(aa, 2 * m - 1), P.add(aa, 2 * m))
        tail = P.div(P.div(top, bottom), P.add(tail, 1.0))
    log_prefactor = P.sub(
        P.sub(
            P.add(P.mul(aa, P.unary(P.log_p, xx)), P.mul(bb, P.unary(P.log_p, yy))),
            betaln(aa, bb),
        ),
        P.unary(P.log_p, aa),
    )
    v = P.div(P.unary(P.exp_p, log_prefactor), P.add(tail, 1.0))
    out = P.where(flip, P.sub(1.0, v), v)
    # SciPy's edges: I_0 = 0 and I_1 = 1; a = 0 gives 1 and b = 0 gives 0 (the other > 0);
    # a = inf gives 0, b = inf gives 1 (the other finite, 0 < x < 1); the rest nan
    ab_ok = P.logical(P.and_p, P.compare(P.ge_p, a, 0.0), P.compare(P.ge_p, b, 0.0))
    some = P.logical(P.and_p, ab_ok, P.compare(P.gt_p, P.add(a, b), 0.0))
    at_0 = P.logical(P.and_p, finite, P.compare(P.eq_p, x, 0.0))
    at_1 = P.logical(P.and_p, finite, P.compare(P.eq_p, y, 0.0))
    zero = P.logical(
        P.or_p,
        at_0,
        P.logical(
            P.and_p,
            P.logical(P.and_p, some, inside),
            P.logical(P.or_p, P.compare(P.eq_p, b, 0.0), P.compare(P.eq_p, a, np.inf)),
        ),
    )
    one = P.logical(
        P.or_p,
        at_1,
        P.logical(
            P.and_p,
            P.logical(P.and_p, some, inside),
            P.logical(P.or_p, P.compare(P.eq_p, a, 0.0), P.compare(P.eq_p, b, np.inf)),
        ),
    )
    return P.where(valid, out, P.where(zero, fill(0.0, x), P.where(one, fill(1.0, x), np.nan)))


@implements_ufunc("betainc")
def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b)."""
    (x,) = _floats(x)
    return betainc_of(a, b, x, P.sub(1.0, x))


# ---- erfinv and erfcinv: M. Giles' single-precision approximation ("Approximating the erfinv
# function", 2010) as a first guess, an asymptotic one far in the tail, then Halley steps on
# erf(y) = a (|p| < 1/2) or on erfc(y) = q (the tail, where q = 1 - a is known exactly). Built from
# primitives, so every derivative exists (Halley converges in the derivatives too).
_GILES_CENTRAL = (
    2.81022636e-08,
    3.43273939e-07,
    -3.5233877e-06,
    -4.39150654e-06,
    0.00021858087,
    -0.00125372503,
    -0.00417768164,
    0.246640727,
    1.50140941,
)
_GILES_TAIL = (
    -0.000200214257,
    0.000100950558,
    0.00134934322,
    -0.00367342844,
    0.00573950773,
    -0.0076224613,
    0.00943887047,
    1.00167406,
    2.83297682,
)
_HALLEY_STEPS = 3


def _horner(coefficients, t: Var) -> Var:
    out = P.const(coefficients[0], t.shape, t.dtype)
    for c in coefficients[1:]:
        out = P.add(P.mul(out, t), c)
    return out


def _halley(y: Var, residual) -> Var:
    """Halley steps on erf(y) = target, `residual(y)` giving erf(y) - target (f''/f' = -2y)."""
    for _ in range(_HALLEY_STEPS):
        d = P.mul(P.unary(P.exp_p, P.neg(P.mul(y, y))), 2.0 / math.sqrt(math.pi))
        t = P.div(residual(y), d)
        y = P.sub(y, P.div(t, P.add(P.mul(y, t), 1.0)))
    return y


def _erfinv_solve(p: Var, a: Var, q: Var, sign: Var) -> Var:
    """y with erf(y) = p, given a = |p| < 1, q = 1 - a (exact where a >= 1/2) and the sign of
    p. Below a = 1/2 the solve runs on p itself (smooth through 0), above on erfc(|y|) = q."""
    central = P.compare(P.lt_p, a, 0.5)
    pc = P.where(central, p, 0.0)
    w = P.neg(P.unary(P.log1p_p, P.neg(P.mul(pc, pc))))  # -log(1 - p^2) < 0.29
    yc = P.mul(_horner(_GILES_CENTRAL, P.sub(w, 2.5)), pc)
    yc = _halley(yc, lambda y: P.sub(P.unary(P.erf_p, y), pc))
    at, qt = P.where(central, 0.75, a), P.where(central, 0.25, q)
    w = P.neg(P.unary(P.log_p, P.mul(qt, P.add(at, 1.0))))  # -log(1 - a^2)
    far = P.compare(P.gt_p, w, 12.0)
    w_near = P.where(far, 1.0, w)
    low = P.compare(P.lt_p, w_near, 5.0)
    guess = P.where(
        low,
        _horner(_GILES_CENTRAL, P.sub(w_near, 2.5)),
        _horner(_GILES_TAIL, P.sub(P.unary(P.sqrt_p, P.where(low, 9.0, w_near)), 3.0)),
    )
    # far in the tail (y > 3.3) erfc(y) ~ exp(-y^2) / (y sqrt(pi)) (1 - 1 / (2 y^2)), so
    # y^2 = -log q - log(y sqrt(pi)) + log(1 - 1 / (2 y^2)), iterated from y^2 = -log q
    lq = P.neg(P.unary(P.log_p, P.where(far, qt, 1e-6)))
    y_far = P.unary(P.sqrt_p, lq)
    for _ in range(3):
        correction = P.unary(P.log1p_p, P.neg(P.div(0.5, P.mul(y_far, y_far))))
        log_y = P.unary(P.log_p, P.mul(y_far, math.sqrt(math.pi)))
        y_far = P.unary(P.sqrt_p, P.add(P.sub(lq, log_y), correction))
    yt = P.where(far, y_far, P.mul(guess, at))
    yt = _halley(yt, lambda y: P.sub(qt, P.unary(P.erfc_p, y)))
    return P.where(central, yc, P.mul(sign, yt))


def _erfinv_ends(y: Var, end: Var, outside: Var, sign: Var) -> Var:
    """y, with sign * inf where `end` and nan where `outside`."""
    inf = P.mul(sign, P.const(np.inf, y.shape, y.dtype))
    return P.where(end, inf, P.where(outside, np.nan, y))


@implements_ufunc("erfinv")
def erfinv(p):
    """The inverse of erf on [-1, 1]: +-inf at +-1, nan outside."""
    (p,) = _floats(p)
    a = P.emit(P.abs_p, p)
    inside = P.compare(P.lt_p, a, 1.0)
    p_safe, a_safe = P.where(inside, p, 0.0), P.where(inside, a, 0.0)
    sign = P.emit(P.copysign_p, P.ones_like(p), p)
    y = _erfinv_solve(p_safe, a_safe, P.sub(1.0, a_safe), sign)
    outside = P.emit(P.not_p, P.compare(P.le_p, a, 1.0))  # beyond 1, or nan
    return _erfinv_ends(y, P.compare(P.eq_p, a, 1.0), outside, sign)


@implements_ufunc("erfcinv")
def erfcinv(q):
    """The inverse of erfc on [0, 2]: inf at 0, -inf at 2, nan outside (accurate for tiny q:
    the tail is solved on erfc itself)."""
    (q,) = _floats(q)
    upper = P.compare(P.gt_p, q, 1.0)
    small = P.where(upper, P.sub(2.0, q), q)  # the tail's q, exact
    inside = P.logical(P.and_p, P.compare(P.gt_p, small, 0.0), P.compare(P.le_p, small, 1.0))
    small_safe = P.where(inside, small, 1.0)
    p = P.sub(1.0, P.where(inside, q, 1.0))  # exact where it is read (|p| < 1/2)
    sign = P.where(upper, fill(-1.0, q), 1.0)
    y = _erfinv_solve(p, P.emit(P.abs_p, p), small_safe, sign)
    outside = P.emit(P.not_p, P.compare(P.ge_p, small, 0.0))  # below 0, above 2, or nan
    return _erfinv_ends(y, P.compare(P.eq_p, small, 0.0), outside, sign)


# ---- Bessel functions of orders 0 and 1: J (j0, j1) as the power series below |x| = 5, Bessel's
# integral (1/pi) int_0^pi cos(n t - x sin t) dt by the trapezoid rule on 64 panels up to 25 (a
# periodic integrand: the error is below 1e-16 there) and Hankel's asymptotic expansion beyond;
# I (i0, i1) as the power series (positive terms) up to 25 and the asymptotic expansion beyond.
_TRAPEZOID_PANELS = 64


def _bessel_series(n: int, x: Var, sign: float, terms: int) -> Var:
    """sum_k sign^k (x/2)^(2k+n) / (k! (k+n)!)."""
    half = P.mul(x, 0.5)
    q = P.mul(P.mul(half, half), sign)
    term = P.div(P.integer_pow(half, n), float(math.factorial(n))) if n else P.ones_like(x)
    total = term
    for k in range(1, terms):
        term = P.div(P.mul(term, q), float(k * (k + n)))
        total = P.add(total, term)
    return total


def _hankel_coefficients(n: int, count: int) -> list[float]:
    """a_k(n) = prod_j<=k (4n^2 - (2j - 1)^2) / (k! 8^k)."""
    out = [1.0]
    for k in range(1, count):
        out.append(out[-1] * (4 * n * n - (2 * k - 1) ** 2) / (8 * k))
    return out


def _bessel_j(n: int, x) -> Var:
    (x,) = _floats(x)
    ax = P.emit(P.abs_p, x)
    small = P.compare(P.lt_p, ax, 5.0)
    large = P.compare(P.ge_p, ax, 25.0)
    series = _bessel_series(n, P.where(small, x, 1.0), -1.0, 26)  # on x itself: smooth at 0
    am = P.where(P.logical(P.or_p, small, large), 10.0, ax)
    integral = None
    for j in range(_TRAPEZOID_PANELS + 1):
        t = math.pi * j / _TRAPEZOID_PANELS
        weight = (0.5 if j in (0, _TRAPEZOID_PANELS) else 1.0) / _TRAPEZOID_PANELS
        value = P.mul(P.unary(P.cos_p, P.sub(n * t, P.mul(am, math.sin(t)))), weight)
        integral = value if integral is None else P.add(integral, value)
    al = P.where(large, ax, 30.0)
    a = _hankel_coefficients(n, 24)
    inv = P.div(1.0, al)
    p_sum = _horner([(-1) ** (k // 2) * a[k] for k in range(22, -1, -2)], P.mul(inv, inv))
    q_sum = P.mul(
        _horner([(-1) ** (k // 2) * a[k] for k in range(23, 0, -2)], P.mul(inv, inv)), inv
    )
    chi = P.sub(al, (n / 2 + 0.25) * math.pi)
    hankel = P.mul(
        P.unary(P.sqrt_p, P.div(2 / math.pi, al)),
        P.sub(P.mul(p_sum, P.unary(P.cos_p, chi)), P.mul(q_sum, P.unary(P.sin_p, chi))),
    )
    outer = P.where(large, hankel, integral)
    if n % 2:  # J_n(-x) = (-1)^n J_n(x)
        outer = P.mul(outer, P.emit(P.copysign_p, P.ones_like(x), x))
    return P.where(small, series, outer)


def _bessel_i(n: int, x) -> Var:
    (x,) = _floats(x)
    ax = P.emit(P.abs_p, x)
    large = P.compare(P.ge_p, ax, 25.0)
    series = _bessel_series(n, P.where(large, 1.0, x), 1.0, 60)  # on x itself: smooth at 0
    al = P.where(large, ax, 30.0)
    a = _hankel_coefficients(n, 30)
    inv = P.div(-1.0, al)  # I_n(x) ~ e^x / sqrt(2 pi x) sum_k (-1)^k a_k x^-k
    asymptotic = P.mul(
        P.div(P.unary(P.exp_p, al), P.unary(P.sqrt_p, P.mul(al, 2 * math.pi))),
        _horner(list(reversed(a)), inv),
    )
    if n % 2:
        asymptotic = P.mul(asymptotic, P.emit(P.copysign_p, P.ones_like(x), x))
    return P.where(large, asymptotic, series)


_GAUSS_NODES, _GAUSS_WEIGHTS = ([float(v) for v in a] for a in np.polynomial.legendre.leggauss(64))
_EULER_GAMMA = 0.5772156649015329


def _bessel_y(n: int, x) -> Var:
    """Y_n for n = 0, 1: the series (with log(x/2) J_n) below 2, the integral form
    (1/pi) int_0^pi sin(x sin t - n t) dt - (1/pi) int_0^inf (e^(nt) + (-1)^n e^(-nt))
    e^(-x sinh t) dt by Gauss-Legendre (64 nodes each; the second cut where x sinh t > 45) up to
    25, Hankel's expansion beyond; -inf at 0, nan below 0 and at inf (as SciPy's)."""
    (x,) = _floats(x)
    small = P.compare(P.lt_p, x, 2.0)
    large = P.compare(P.ge_p, x, 25.0)
    xs = P.where(small, x, 1.0)
    half = P.mul(xs, 0.5)
    q = P.neg(P.mul(half, half))
    harmonic, total = 0.0, None
    if n == 0:  # Y0 = (2/pi)((log(x/2) + gamma) J0 - sum_k>=1 H_k (-x^2/4)^k / (k!)^2)
        term = P.ones_like(xs)
        for k in range(1, 30):
            term = P.div(P.mul(term, q), float(k * k))
            harmonic += 1 / k
            total = P.mul(term, harmonic) if total is None else P.add(total, P.mul(term, harmonic))
        log_part = P.mul(P.add(P.unary(P.log_p, half), _EULER_GAMMA), _bessel_j(0, xs))
        series = P.mul(P.sub(log_part, total), 2 / math.pi)
    else:  # Y1 = (2/pi) J1 log(x/2) - 2/(pi x) - (1/pi) sum_k (psi(k+1) + psi(k+2)) (-1)^k
        term = half  #      (x/2)^(2k+1) / (k! (k+1)!)
        for k in range(30):
            if k:
                term = P.div(P.mul(term, q), float(k * (k + 1)))
            weight = 2 * (harmonic - _EULER_GAMMA) + 1 / (k + 1)
            total = P.mul(term, weight) if total is None else P.add(total, P.mul(term, weight))
            harmonic += 1 / (k + 1)
        log_part = P.mul(P.mul(_bessel_j(1, xs), P.unary(P.log_p, half)), 2 / math.pi)
        series = P.sub(P.sub(log_part, P.div(2 / math.pi, xs)), P.div(total, math.pi))
    xm = P.where(P.logical(P.or_p, small, large), 10.0, x)
    cut = P.add(P.unary(P.arcsinh_p, P.div(45.0, xm)), 0.5)
    integral = None
    for u, w in zip(_GAUSS_NODES, _GAUSS_WEIGHTS, strict=True):
        theta = (u + 1) * math.pi / 2
        value = P.mul(P.unary(P.sin_p, P.sub(P.mul(xm, math.sin(theta)), n * theta)), w / 2)
        integral = value if integral is None else P.add(integral, value)
        t = P.mul(cut, (u + 1) / 2)
        growth = P.unary(P.exp_p, P.mul(t, float(n))) if n else P.ones_like(t)
        decay = P.unary(P.exp_p, P.neg(P.mul(xm, P.unary(P.sinh_p, t))))
        both = P.add(growth, P.div((-1.0) ** n, growth)) if n else P.mul(growth, 2.0)
        integral = P.sub(integral, P.div(P.mul(P.mul(both, decay), P.mul(cut, w / 2)), math.pi))
    al = P.where(large, x, 30.0)
    a = _hankel_coefficients(n, 24)
    inv = P.div(1.0, al)
    p_sum = _horner([(-1) ** (k // 2) * a[k] for k in range(22, -1, -2)], P.mul(inv, inv))
    q_sum = P.mul(
        _horner([(-1) ** (k // 2) * a[k] for k in range(23, 0, -2)], P.mul(inv, inv)), inv
    )
    chi = P.sub(al, (n / 2 + 0.25) * math.pi)
    hankel = P.mul(
        P.unary(P.sqrt_p, P.div(2 / math.pi, al)),
        P.add(P.mul(p_sum, P.unary(P.sin_p, chi)), P.mul(q_sum, P.unary(P.cos_p, chi))),
    )
    out = P.where(small, series, P.where(large, hankel, integral))
    out = P.where(P.compare(P.eq_p, x, 0.0), fill(-np.inf, x), out)
    return P.where(P.compare(P.lt_p, x, 0.0), np.nan, out)


register_ufunc("j0", lambda x: _bessel_j(0, x))
register_ufunc("j1", lambda x: _bessel_j(1, x))
register_ufunc("i0", lambda x: _bessel_i(0, x))
register_ufunc("i1", lambda x: _bessel_i(1, x))
register_ufunc("y0", lambda x: _bessel_y(0, x))
register_ufunc("y1", lambda x: _bessel_y(1, x))


def _bessel_any_order(kind: str):
    """scipy.special's Bessel functions of a real order `v` (not differentiated) at `x`: SciPy's
    values, on the host (primitive_table/bessel.py)."""

    def handler(v, x):
        v, x = as_operand(v), as_operand(x)
        dtype = P.float_dtype(P.result_dtype([v, x]))
        if P.is_complex(dtype):
            raise TypeError(
                f"scipy.special.{kind} of complex values is not supported on traced values"
                f"{at_source()}; tracegrad's Bessel functions take real orders and arguments"
            )
        return P.bessel(kind, *P.prepare_operands([v, x], kind, dtype))

    return handler


for _kind in P.BESSEL_KINDS:
    register_ufunc(_kind, _bessel_any_order(_kind))
register_ufunc("yn", _bessel_any_order("yv"))  # an integer order: yv's values


# ---- polygamma(n, x) (a Python function in SciPy: the traced version is tracegrad.scipy.special's)
_BERNOULLI_2K = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510)


def _polygamma_plan(n: int) -> tuple[int, list[float]]:
    """(shift, series coefficients): psi_n(y) ~ (-1)^(n+1) y^-n [(n-1)! + n!/(2y) +
    sum_k B_2k (2k+n-1)!/(2k)! y^-2k], with y = x + shift large enough that the first
    dropped term is below 1e-17 of the first."""
    terms = len(_BERNOULLI_2K)
    coefficients = [
        b * math.factorial(2 * k + n - 1) / math.factorial(2 * k)
        for k, b in enumerate(_BERNOULLI_2K, start=1)
    ]
    dropped = 43867 / 798 * math.factorial(2 * terms + n + 1) / math.factorial(2 * terms + 2)
    shift = 8
    while dropped / math.factorial(n - 1) / shift ** (2 * terms + 2) > 1e-17:
        shift += 4
    return shift, coefficients


def _cot_derivative(n: int) -> np.polynomial.Polynomial:
    """q with d^n/dx^n cot(pi x) = q(cot(pi x)): q_0 = c, q_k+1 = -pi (1 + c^2) q_k'."""
    q = np.polynomial.Polynomial([0.0, 1.0])
    for _ in range(n):
        q = -math.pi * np.polynomial.Polynomial([1.0, 0.0, 1.0]) * q.deriv()
    return q


def polygamma(n: int, x) -> Var:
    """The n-th derivative of digamma (n >= 0 a static int): the recurrence psi_n(x) = psi_n(x +
    N) + (-1)^(n+1) n! sum_k 1 / (x + k)^(n+1), the asymptotic series at x + N, and the reflection
    psi_n(x) = (-1)^n psi_n(1 - x) - pi d^n/dx^n cot(pi x) below 0."""
    (x,) = _floats(x)
    if n == 0:
        return P.digamma(x)
    reflect = P.compare(P.lt_p, x, 0.0)
    z = P.where(reflect, P.sub(1.0, x), x)
    shift, coefficients = _polygamma_plan(n)
    sign = float((-1) ** (n + 1))
    total = None
    for k in range(shift):
        term = P.integer_pow(P.div(1.0, P.add(z, float(k)) if k else z), n + 1)
        total = term if total is None else P.add(total, term)
    y = P.add(z, float(shift))
    inv = P.div(1.0, y)
    inv2 = P.mul(inv, inv)
    series = _horner([*reversed(coefficients), 0.0], inv2)  # sum_k c_k y^-2k
    series = P.add(P.add(series, P.mul(inv, math.factorial(n) / 2)), float(math.factorial(n - 1)))
    value = P.mul(
        P.add(P.mul(series, P.integer_pow(inv, n)), P.mul(total, float(math.factorial(n)))), sign
    )
    # reflected: tan at a harmless 1/4 where not
    c = P.div(1.0, P.unary(P.tan_p, P.mul(P.where(reflect, x, 0.25), math.pi)))
    q = _cot_derivative(n)
    cot_n = _horner([float(v) for v in reversed(q.coef)], c)
    reflected = P.sub(P.mul(value, float((-1) ** n)), P.mul(cot_n, math.pi))
    out = P.where(reflect, reflected, value)
    inf = P.const(sign * np.inf, x.shape, x.dtype)
    return P.where(_is_pole(x), inf, out)


def multigammaln(a, d: int) -> Var:
    """log of the multivariate gamma function: d(d-1)/4 log(pi) + sum_j<d gammaln(a - j/2)."""
    (a,) = _floats(a)
    out = P.const(d * (d - 1) / 4 * math.log(math.pi), a.shape, a.dtype)
    for j in range(d):
        out = P.add(out, _gammaln(P.sub(a, j / 2)))
    return out
