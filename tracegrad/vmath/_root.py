"""cbrt and hypot.

cbrt: x = 2^e m with m in [1, 2) from the bits (subnormals first scaled by 2^54), e = 3q + r, so
cbrt(x) = 2^q cbrt(t) with t = 2^r m in [1, 8); a polynomial gives cbrt(t) to about 12 bits,
two Halley steps (cubic convergence) take it past float64, and a last Newton step with the
residual t - y^3 computed exactly (fma) leaves the result within about half an ulp.

hypot: both arguments are scaled by the same power of two (the larger one's exponent), so the
squares neither overflow nor underflow; sqrt of the sum is corrected by one Newton step whose
residual (a^2 + b^2 - h^2) is computed exactly with fmas. Infinities win over nan, as in C99.

float32 versions compute in float64 and round once.
"""

from __future__ import annotations

import math

import numpy as np

from ._core import F64, fma, jit, named

# cbrt(t) on [1, 8]: least-squares fit on Chebyshev nodes, degree 6 (relative error ~2e-4)
_NODES = 1 + 3.5 * (1 + np.cos(np.pi * (np.arange(64) + 0.5) / 64))
_CBRT_POLY = tuple(float(c) for c in np.polynomial.polynomial.polyfit(_NODES, np.cbrt(_NODES), 6))


def _build_cbrt():
    S = F64
    P = S.coeffs(_CBRT_POLY)
    zero, one, two, three, third = S.c(0.0), S.c(1.0), S.c(2.0), S.c(3.0), S.c(1.0 / 3.0)
    four, c1023 = S.c(4.0), S.c(1023.0)
    two54 = S.c(2.0**54)
    shift, shift_bits, tiny, inf = S.shift, S.shift_bits, S.tiny, S.inf
    F, as_int, as_float = S.float, S.as_int, S.as_float
    mant_mask = (1 << 52) - 1
    one_bits = 1023 << 52

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
        a2 = a * two54 if sub else a
        bits = as_int(a2)
        e = ((bits >> 52) & 0x7FF) - 1023 - (54 if sub else 0)
        m = as_float((bits & mant_mask) | one_bits)  # in [1, 2)
        ef = F(e)
        q = ((ef - one) * third + shift) - shift  # floor(e / 3): e = 3q + r, r in {0, 1, 2}
        r = ef - three * q
        t = m * (one if r == zero else (two if r == one else four))  # in [1, 8)
        y = poly(t)
        for _ in range(2):  # Halley: y (y^3 + 2t) / (2y^3 + t)
            y3 = y * y * y
            y = y * (y3 + two * t) / (two * y3 + t)
        # Newton with the exact residual t - y^3
        y2 = y * y
        y2_lo = fma(y, y, -y2)
        y3 = y2 * y
        y3_lo = fma(y2, y, -y3)
        resid = (t - y3) - (y3_lo + y2_lo * y)
        y = y + resid / (three * y2)
        scale = as_float(as_int(q + c1023 + shift) - shift_bits << 52)  # 2^q
        res = y * scale
        special = (a == zero) | (a == inf) | (x != x)
        return x if special else math.copysign(res, x)

    def cbrt32(x):
        return np.float32(cbrt64(np.float64(np.float32(x))))

    cbrt64 = jit(named(cbrt, "cbrt_f64", "Vectorisable cbrt(x) for float64."))
    return cbrt64, jit(named(cbrt32, "cbrt_f32", "Vectorisable cbrt(x) for float32."))


def _build_hypot():
    S = F64
    zero, half, inf = S.c(0.0), S.c(0.5), S.inf
    F, as_int, as_float = S.float, S.as_int, S.as_float

    def hypot(x, y):
        x, y = F(x), F(y)
        a, b = abs(x), abs(y)
        big = a if a > b else b
        # 2^-e with e the exponent of `big` (from its bits; any finite big gives a normal factor)
        e = (as_int(big) >> 52) & 0x7FF
        e = 1 if e == 0 else (2045 if e > 2045 else e)  # both factors stay normal
        down = as_float((2046 - e) << 52)  # 2^(1023 - e)
        up = as_float(e << 52)  # 2^(e - 1023)
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

    def hypot32(x, y):
        x64, y64 = np.float64(np.float32(x)), np.float64(np.float32(y))
        res = np.float32(math.sqrt(x64 * x64 + y64 * y64))  # exact squares, one rounding
        return np.float32(np.inf) if (abs(x64) == np.inf) | (abs(y64) == np.inf) else res

    return (
        jit(named(hypot, "hypot_f64", "Vectorisable hypot(x, y) for float64.")),
        jit(named(hypot32, "hypot_f32", "Vectorisable hypot(x, y) for float32.")),
    )


cbrt_f64, cbrt_f32 = _build_cbrt()
hypot_f64, hypot_f32 = _build_hypot()
