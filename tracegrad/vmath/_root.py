"""cbrt and hypot.

cbrt: x = 2^e m with m in [1, 2) from the bits (subnormals first scaled by 2^54), e = 3q + r, so
cbrt(x) = 2^q cbrt(t) with t = 2^r m in [1, 8); a polynomial gives cbrt(t) to about 12 bits,
two Halley steps (cubic convergence) take it past float64, and a last Newton step with the
residual t - y^3 computed exactly (fma) leaves the result within about half an ulp.

hypot: both arguments are scaled by the same power of two (the larger one's exponent), so the
squares neither overflow nor underflow; sqrt of the sum is corrected by one Newton step whose
residual (a^2 + b^2 - h^2) is computed exactly with fmas. Infinities win over nan, as in C99.

cbrt_f32 runs the same steps in float32 arithmetic (one Halley step instead of two: the
polynomial's 12 bits become about 36). hypot_f32 squares and adds in float64 (exact squares)
and rounds once: faster than the float32-arithmetic form, kept as ``hypot_f32_arith``.
"""

from __future__ import annotations

import math

import numpy as np

from ._core import F32, F64, Spec, fma, jit, named

# cbrt(t) on [1, 8]: least-squares fit on Chebyshev nodes, degree 6 (relative error ~2e-4)
_NODES = 1 + 3.5 * (1 + np.cos(np.pi * (np.arange(64) + 0.5) / 64))
_CBRT_POLY = tuple(float(c) for c in np.polynomial.polynomial.polyfit(_NODES, np.cbrt(_NODES), 6))


def _build_cbrt(S: Spec):
    P = S.coeffs(_CBRT_POLY)
    zero, one, two, three, third = S.c(0.0), S.c(1.0), S.c(2.0), S.c(3.0), S.c(1.0 / 3.0)
    four, cbias = S.c(4.0), S.c(S.bias)
    mant, bias = S.mant, S.bias
    sub_k = mant + 2  # subnormals are first scaled by 2**sub_k
    sub_scale = S.c(2.0**sub_k)
    exp_mask = 2 * bias + 1
    halley = 2 if S is F64 else 1
    shift, shift_bits, tiny, inf = S.shift, S.shift_bits, S.tiny, S.inf
    F, as_int, as_float = S.float, S.as_int, S.as_float
    mant_mask = (1 << mant) - 1
    one_bits = bias << mant

    @jit
    def poly(t):
        p = P[len(P) - 1]
        for j in range(len(P) - 2, -1, -1):
            p = p * t + P[j]
        return p

    def cbrt(x):
        x = F(x)
        a = abs(x)
        sub = a < tiny
        a2 = a * sub_scale if sub else a
        bits = as_int(a2)
        e = ((bits >> mant) & exp_mask) - bias - (sub_k if sub else 0)
        m = as_float((bits & mant_mask) | one_bits)  # in [1, 2)
        ef = as_float(e + shift_bits) - shift  # float(e), vectorisable
        q = ((ef - one) * third + shift) - shift  # floor(e / 3): e = 3q + r, r in {0, 1, 2}
        r = ef - three * q
        t = m * (one if r == zero else (two if r == one else four))  # in [1, 8)
        y = poly(t)
        for _ in range(halley):  # Halley: y (y^3 + 2t) / (2y^3 + t)
            y3 = y * y * y
            y = y * (y3 + two * t) / (two * y3 + t)
        # Newton with the exact residual t - y^3
        y2 = y * y
        y2_lo = fma(y, y, -y2)
        y3 = y2 * y
        y3_lo = fma(y2, y, -y3)
        resid = (t - y3) - (y3_lo + y2_lo * y)
        y = y + resid / (three * y2)
        scale = as_float(as_int(q + cbias + shift) - shift_bits << mant)  # 2^q
        res = y * scale
        special = (a == zero) | (a == inf) | (x != x)
        return x if special else math.copysign(res, x)

    sfx, kind = ("_f64", "float64") if S is F64 else ("_f32", "float32")
    return jit(named(cbrt, "cbrt" + sfx, f"Vectorisable cbrt(x) for {kind}."))


def _build_hypot(S: Spec):
    zero, half, inf = S.c(0.0), S.c(0.5), S.inf
    F, as_int, as_float = S.float, S.as_int, S.as_float
    mant, emax = S.mant, 2 * S.bias + 1  # emax: the exponent field of inf and nan

    def hypot(x, y):
        x, y = F(x), F(y)
        a, b = abs(x), abs(y)
        big = a if a > b else b
        # 2^-e with e the exponent of `big` (from its bits; any finite big gives a normal factor)
        e = (as_int(big) >> mant) & emax
        e = 1 if e == 0 else (emax - 2 if e > emax - 2 else e)  # both factors stay normal
        down = as_float((emax - 1 - e) << mant)  # 2^(bias - e)
        up = as_float(e << mant)  # 2^(e - bias)
        sa, sb = a * down, b * down
        aa = sa * sa
        bb = sb * sb
        s = aa + bb
        h = math.sqrt(s)
        # residual sa^2 + sb^2 - h^2, exactly enough: each product split with an fma
        resid = (fma(-h, h, aa) + bb) + (fma(sa, sa, -aa) + fma(sb, sb, -bb))
        h = h + resid * half / h
        res = h * up
        res = zero if big == zero else res
        res = x + y if (a != a) | (b != b) else res  # nan
        return inf if (a == inf) | (b == inf) else res

    sfx, kind = ("_f64", "float64") if S is F64 else ("_f32", "float32")
    return jit(named(hypot, "hypot" + sfx, f"Vectorisable hypot(x, y) for {kind}."))


def _hypot32(x, y):
    """Vectorisable hypot(x, y) for float32 (computed in float64, rounded once)."""
    x64, y64 = np.float64(np.float32(x)), np.float64(np.float32(y))
    res = np.float32(math.sqrt(x64 * x64 + y64 * y64))  # exact squares, one rounding
    return np.float32(np.inf) if (abs(x64) == np.inf) | (abs(y64) == np.inf) else res


cbrt_f64, cbrt_f32 = _build_cbrt(F64), _build_cbrt(F32)
hypot_f64 = _build_hypot(F64)
hypot_f32 = jit(named(_hypot32, "hypot_f32", _hypot32.__doc__))
# The float64 steps in float32 arithmetic: 0.83 ulp, and 2-11% slower than hypot_f32 above
# (0.50 ulp, a handful of float64 operations), so not the default; benchmarks/bench_vmath_f32.py
# measures both.
hypot_f32_arith = _build_hypot(F32)
