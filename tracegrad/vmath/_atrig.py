"""arctan, arcsin and arccos.

arctan reduces |x| to |t| <= tan(pi/8) with one division (t = x, (x-1)/(x+1) or -1/x, adding
0, pi/4 or pi/2); arcsin and arccos use asin(s) = s + s**3 * P(s**2) on |s| <= 1/2 and, above
1/2, the identity asin(a) = pi/2 - 2 asin(sqrt((1 - a) / 2)).
"""

from __future__ import annotations

import math

import numpy as np

from ._core import F32, F64, Spec, fma, horner, jit, named

# Minimax coefficients (Remez exchange, 50-digit arithmetic, relative error):
#   atan(t) = t + t**3 * ATAN(t**2), |t| <= tan(pi/8): error 2**-59.4 (f64), 2**-30.5 (f32)
_ATAN64 = (
    -0.333333333333332,
    0.19999999999953205,
    -0.1428571428016208,
    0.11111110781921207,
    -0.09090897718282007,
    0.07692059589483777,
    -0.06663097708105956,
    0.05847848112876718,
    -0.05039138973746643,
    0.03806080490182969,
    -0.017903548892762484,
)
_ATAN32 = (
    -0.33333316445350647,
    0.19998471438884735,
    -0.142435222864151,
    0.10593727231025696,
    -0.060779910534620285,
)
#   asin(s) = s + s**3 * ASIN(s**2), |s| <= 1/2: error 2**-59.9 (f64), 2**-27.6 (f32)
_ASIN64 = (
    0.1666666666666676,
    0.07499999999970798,
    0.044642857174613464,
    0.03038194270772295,
    0.022372214988988337,
    0.01735161199502533,
    0.01398082071826339,
    0.011398911141294411,
    0.010780257680739853,
    0.0037063931405013507,
    0.02170748038647659,
    -0.02099910509863542,
    0.03262864838209136,
)
_ASIN32 = (
    0.16666752481993308,
    0.0749529764308589,
    0.04547037598860667,
    0.024179514506655973,
    0.04216630871663012,
)


def _hi_lo(S: Spec, value_hex: str, rest: float):
    """A constant as hi + lo in type S: hi is the rounded value, lo what it leaves over."""
    hi = float.fromhex(value_hex)
    if S is F32:
        lo = float(S.c(hi - float(S.c(hi)) + rest))
        hi = float(S.c(hi))
        return S.c(hi), S.c(lo)
    return S.c(hi), S.c(rest)


def _build(S: Spec, asin_coeffs=None, sfx=None):
    F = S.float
    A = S.coeffs(_ATAN64 if S is F64 else _ATAN32)
    P = S.coeffs(asin_coeffs or (_ASIN64 if S is F64 else _ASIN32))
    # pi/4, pi/2 and pi with the error of their rounding (float64 parts from 100-digit pi).
    pio4_hi, pio4_lo = _hi_lo(S, "0x1.921fb54442d18p-1", float.fromhex("0x1.1a62633145c07p-55"))
    pio2_hi, pio2_lo = _hi_lo(S, "0x1.921fb54442d18p+0", float.fromhex("0x1.1a62633145c07p-54"))
    pi_hi, pi_lo = _hi_lo(S, "0x1.921fb54442d18p+1", float.fromhex("0x1.1a62633145c07p-53"))
    tan_pi8 = S.c(math.tan(math.pi / 8))
    tan_3pi8 = S.c(math.tan(3 * math.pi / 8))
    zero, one, two, half = S.c(0.0), S.c(1.0), S.c(2.0), S.c(0.5)
    inf, as_int = S.inf, S.as_int

    @jit
    def asin_small(s, z):
        """asin(s) for |s| <= 1/2, z = s**2."""
        return s + s * z * horner(z, P)

    @jit
    def asin_parts(a):
        """(p, small) for a = |x| <= 1: asin(a) = p if small else pi/2 - 2p."""
        small = a <= half
        z = a * a if small else (one - a) * half  # 1 - a is exact for a in [1/2, 1]
        s = a if small else math.sqrt(z)  # sqrt of a negative (|x| > 1) gives nan
        return asin_small(s, z), small

    def arctan(x):
        x = F(x)
        a = abs(x)
        big = a > tan_3pi8
        mid = a > tan_pi8
        num = -one if big else (a - one if mid else a)
        den = a if big else (a + one if mid else one)
        t = num / den  # nan stays nan; inf gives -0
        off_hi = pio2_hi if big else (pio4_hi if mid else zero)
        off_lo = pio2_lo if big else (pio4_lo if mid else zero)
        z = t * t
        res = off_hi + (t + (t * z * horner(z, A) + off_lo))
        return math.copysign(res, x)

    def arcsin(x):
        x = F(x)
        p, small = asin_parts(abs(x))
        res = p if small else pio2_hi - (two * p - pio2_lo)
        return math.copysign(res, x)

    def arccos(x):
        x = F(x)
        p, small = asin_parts(abs(x))
        # small: pi/2 - asin(x); x > 1/2: 2 asin(sqrt((1-x)/2)); x < -1/2: pi - that
        mid = pio2_hi - (math.copysign(p, x) - pio2_lo)
        res = two * p if x > zero else pi_hi - (two * p - pi_lo)
        return mid if small else res

    @jit
    def atan_unit(a):
        """arctan(a) for a in [0, 1]."""
        mid = a > tan_pi8
        t = (a - one) / (a + one) if mid else a
        z = t * t
        return (pio4_hi if mid else zero) + (
            t + (t * z * horner(z, A) + (pio4_lo if mid else zero))
        )

    def arctan2(y, x):
        y, x = F(y), F(x)
        ay, ax = abs(y), abs(x)
        swap = ay > ax
        n = ax if swap else ay  # the smaller
        d = ay if swap else ax  # the larger
        both_inf = (ax == inf) & (ay == inf)
        ok = (d > zero) & (d < inf)
        a = n / d if ok else (one if both_inf else zero)  # in [0, 1]; nan stays nan
        a = a if (n == n) & (d == d) else n + d
        a_lo = fma(-a, d, n) / d if ok else zero  # the rounding error of n / d
        t = atan_unit(a)
        t_lo = a_lo / (one + a * a)
        # atan2 = off + sign * t: t (off 0), pi/2 - t (|y| > |x|), pi - t (x < 0, or x = -0),
        # pi/2 + t (both): the offset's low part and t's correction added before the high parts
        negative_x = as_int(x) < 0
        minus = swap != negative_x
        off_hi = (pio2_hi if swap else pi_hi) if (swap | negative_x) else zero
        off_lo = (pio2_lo if swap else pi_lo) if (swap | negative_x) else zero
        r = off_hi + ((-t if minus else t) + ((-t_lo if minus else t_lo) + off_lo))
        return math.copysign(r, y)

    sfx = sfx or ("_f64" if S is F64 else "_f32")
    kind = "float64" if S is F64 else "float32"
    funcs = {
        "arctan": (arctan, f"Vectorisable arctan(x) for {kind}."),
        "arcsin": (arcsin, f"Vectorisable arcsin(x) for {kind}; nan outside [-1, 1]."),
        "arccos": (arccos, f"Vectorisable arccos(x) for {kind}; nan outside [-1, 1]."),
        "arctan2": (arctan2, f"Vectorisable arctan2(y, x) for {kind}."),
    }
    return {name: jit(named(f, name + sfx, doc)) for name, (f, doc) in funcs.items()}


_F64 = _build(F64)
_F32 = _build(F32)
# float64 arithmetic with the float32 polynomial: enough for a float32 result within 0.6 ulp.
_F32_IN_F64 = _build(F64, _ASIN32, sfx="_f32_in_f64")
_arcsin_in_f64 = _F32_IN_F64["arcsin"]


def _arcsin_f32(x):
    """Vectorisable arcsin(x) for float32; nan outside [-1, 1].

    Computed in float64 and rounded once: in float32, pi/2 - 2 asin(sqrt((1-|x|)/2)) loses a
    bit to cancellation just above |x| = 1/2 (2.4 ulp).
    """
    return np.float32(_arcsin_in_f64(np.float64(np.float32(x))))


_F32["arcsin"] = jit(_arcsin_f32)
_F32["arcsin"].__name__ = "arcsin_f32"
arctan_f64, arcsin_f64, arccos_f64 = (_F64[n] for n in ("arctan", "arcsin", "arccos"))
arctan_f32, arcsin_f32, arccos_f32 = (_F32[n] for n in ("arctan", "arcsin", "arccos"))
arctan2_f64, arctan2_f32 = _F64["arctan2"], _F32["arctan2"]
