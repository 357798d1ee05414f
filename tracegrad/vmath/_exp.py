"""exp, expm1, exp2 and the functions built from them: sinh, cosh, tanh.

All five share one core: x = k*ln2 + r with |r| <= ln2/2 (Cody-Waite), then
expm1(r) = r + r**2 * P(r) with a minimax polynomial P.
"""

from __future__ import annotations

import math

import numpy as np

from ._core import F32, F64, Spec, fma, horner, jit, named

# P(r) ~ (expm1(r) - r) / r**2 on |r| <= 0.3467, minimax for the relative error of expm1(r),
# computed with a Remez exchange in 50-digit arithmetic.  Approximation error: 2**-55.6 (f64,
# degree 9), 2**-26.2 (f32, degree 4).
_EXPM1_P64 = (
    0.5000000000000006,
    0.16666666666666588,
    0.04166666666657656,
    0.00833333333338967,
    0.0013888888931632506,
    0.00019841269718813806,
    2.4801505187068385e-05,
    2.7557407635632874e-06,
    2.7626074237825316e-07,
    2.505377592126121e-08,
)
_EXPM1_P32 = (
    0.49999998151137015,
    0.16666543490889935,
    0.04166720041739806,
    0.008366538143576449,
    0.0013882518524630286,
)

# ln(2) = LN2_HI + LN2_LO, LN2_HI with its trailing mantissa bits zero, so k * LN2_HI is exact
# for every exponent k that can occur.
LN2_SPLIT = {
    F64: (float.fromhex("0x1.62e42fee00000p-1"), float.fromhex("0x1.a39ef35793c76p-33")),
    F32: (float.fromhex("0x1.62e400p-1"), float.fromhex("0x1.7f7d1cp-20")),
}

# Thresholds, as (f64, f32) pairs:
#  EXP_HI: exp(x) overflows above 709.78 / 88.72; clamping at a slightly larger value keeps the
#          reduction in range and still gives inf.
#  EXP_LO: exp(x) rounds to 0 below -745.13 / -103.97; the clamped value still gives 0.
#  EXPM1_LO: expm1(x) rounds to -1 below -37.5 / -17.3.
#  BIG: above this |x|, sinh/cosh/expm1 use exp(x) scaled in two steps (2**k alone would
#       overflow) and the -1 or 1/e terms no longer matter.
#  TANH_SAT: tanh(x) rounds to +-1 above 19.1 / 9.0.
_LIMITS = {
    F64: dict(exp_hi=710.0, exp_lo=-746.0, expm1_lo=-40.0, big=700.0, sinh_hi=711.0, tanh_sat=20.0),
    F32: dict(exp_hi=89.0, exp_lo=-104.0, expm1_lo=-18.0, big=80.0, sinh_hi=90.0, tanh_sat=10.0),
}


def _build(S: Spec, coeffs=None, sfx=None):
    """The exp family for one float type (``coeffs`` overrides the polynomial)."""
    F = S.float
    as_int, as_float = S.as_int, S.as_float
    mant, bias = S.mant, S.bias
    shift, shift_bits = S.shift, S.shift_bits
    P = S.coeffs(coeffs or (_EXPM1_P64 if S is F64 else _EXPM1_P32))
    inv_ln2 = S.c(1.0 / math.log(2.0))
    ln2_hi, ln2_lo = (S.c(v) for v in LN2_SPLIT[S])
    lim = {k: S.c(v) for k, v in _LIMITS[S].items()}
    exp_hi, exp_lo, expm1_lo = lim["exp_hi"], lim["exp_lo"], lim["expm1_lo"]
    big, sinh_hi, tanh_sat = lim["big"], lim["sinh_hi"], lim["tanh_sat"]
    one, two, half = S.c(1.0), S.c(2.0), S.c(0.5)

    @jit
    def reduce(x):
        """(expm1(r), k) with x = k*ln2 + r, |r| <= ln2/2; needs |x| < 2**(mant-1)*ln2."""
        t = fma(x, inv_ln2, shift)  # k + shift: k = round(x / ln2) lands in the low bits
        kf = t - shift
        k = as_int(t) - shift_bits
        r = fma(-kf, ln2_hi, x)  # exact
        r = fma(-kf, ln2_lo, r)
        return fma(r * r, horner(r, P), r), k

    @jit
    def pow2(k):
        """2**k for a normal-range exponent k, by writing the exponent field."""
        return as_float((k + bias) << mant)

    @jit
    def scale(v, k):
        """v * 2**k for |k| up to about 2*bias: two exact-range factors, one final rounding."""
        k1 = k >> 1
        return v * pow2(k1) * pow2(k - k1)

    @jit
    def expm1_from(em, k):
        """expm1(x) = 2**k * (1 + em) - 1 rounded once, for k in the normal exponent range."""
        s = pow2(k)
        return fma(s, em, s - one)

    def exp(x):
        x = F(x)
        x = exp_hi if x > exp_hi else x  # nan passes both comparisons untouched
        x = exp_lo if x < exp_lo else x
        em, k = reduce(x)
        return scale(one + em, k)

    def expm1(x):
        x = F(x)
        xc = exp_hi if x > exp_hi else x
        xc = expm1_lo if xc < expm1_lo else xc
        em, k = reduce(xc)
        res = expm1_from(em, k) if xc < big else scale(one + em, k)
        return x if x == 0 else res  # keeps the sign of zero

    def sinh(x):
        x = F(x)
        a = abs(x)
        a = sinh_hi if a > sinh_hi else a
        em, k = reduce(a)
        t = expm1_from(em, k)  # e**a - 1
        u = t / (t + one)  # 1 - e**-a
        # 2 sinh(a) = t + u; for a < 1 the form 2t - t*u avoids the cancellation in t + u.
        twice = fma(-t, u, two * t) if a < one else t + u
        res = half * twice if a < big else scale(one + em, k - 1)
        return math.copysign(res, x)

    def cosh(x):
        x = F(x)
        a = abs(x)
        a = sinh_hi if a > sinh_hi else a
        em, k = reduce(a)
        e = scale(one + em, k)
        # 0.5*e + 0.5/e has no cancellation: both terms are positive.
        res = fma(half, e, half / e) if a < big else scale(one + em, k - 1)
        return res

    def tanh(x):
        x = F(x)
        a = abs(x)
        a = tanh_sat if a > tanh_sat else a
        em, k = reduce(two * a)
        t = expm1_from(em, k)
        # tanh(a) = expm1(2a) / (expm1(2a) + 2): accurate near 0 and saturates to 1.
        res = t / (t + two)
        return math.copysign(res, x)

    sfx = sfx or ("_f64" if S is F64 else "_f32")
    kind = "float64" if S is F64 else "float32"
    funcs = {
        "exp": (exp, f"Vectorisable exp(x) for {kind}."),
        "expm1": (expm1, f"Vectorisable exp(x) - 1 for {kind}, accurate near 0."),
        "sinh": (sinh, f"Vectorisable sinh(x) for {kind}."),
        "cosh": (cosh, f"Vectorisable cosh(x) for {kind}."),
        "tanh": (tanh, f"Vectorisable tanh(x) for {kind}; saturates to +-1, keeps the sign of 0."),
    }
    return {name: jit(named(f, name + sfx, doc)) for name, (f, doc) in funcs.items()}


_F64 = _build(F64)
_F32 = _build(F32)

# tanh(x) ~ x * P(x**2) / Q(x**2) on |x| <= 10, for float32 results: a rational minimax fit for the
# relative error (a linearised least-squares iteration in 30-digit arithmetic, in the variable
# x**2 / 100), error 2**-27.9 (0.07 float32 ulp).  At 10 and above, tanh rounds to 1 in float32.
_TANH_P32 = (
    0.9999999962041408,
    0.13632633560115878,
    0.0038093370698603,
    2.683526587670588e-05,
    2.7852730899838445e-08,
    -1.0270395499942518e-11,
)
_TANH_Q32 = (
    1.0,
    0.4696596335279454,
    0.02702926897828089,
    0.0003835234286400394,
    1.2065631757525184e-06,
)


def _build_tanh_f32():
    """tanh for float32, evaluated in float64 and rounded once (0.52 ulp).

    The expm1-based formula in float32 arithmetic reaches 2.5 ulp for small |x|; the rational
    form needs no exponent reduction or integer work, and took 0.97 ms per 10**6 elements
    against 1.42 ms for the expm1 form in float64 (docs/vmath.md)."""
    P, Q = F64.coeffs(_TANH_P32), F64.coeffs(_TANH_Q32)
    sat = F64.c(10.0)

    def tanh(x):
        v = np.float64(np.float32(x))
        a = abs(v)
        a = sat if a > sat else a  # nan passes untouched; +-inf gives +-1
        s = a * a
        res = a * horner(s, P) / horner(s, Q)
        return np.float32(math.copysign(res, v))  # keeps the sign of zero

    doc = "Vectorisable tanh(x) for float32; saturates to +-1, keeps the sign of 0."
    return jit(named(tanh, "tanh_f32", doc))


_F32["tanh"] = _build_tanh_f32()

exp_f64, expm1_f64, sinh_f64, cosh_f64, tanh_f64 = (
    _F64[n] for n in ("exp", "expm1", "sinh", "cosh", "tanh")
)
exp_f32, expm1_f32, sinh_f32, cosh_f32, tanh_f32 = (
    _F32[n] for n in ("exp", "expm1", "sinh", "cosh", "tanh")
)


# ln(2) as a float64 and the float64 of what remains (mpmath, 300 bits)
_LN2_PAIR = (float.fromhex("0x1.62e42fefa39efp-1"), float.fromhex("0x1.abc9e3b39803fp-56"))


def _build_exp2():
    """2**x for float64: x = k + r with k = round(x), |r| <= 1/2 exact, then 2**r = exp(r ln2)
    with r ln2 held as two floats. Exact at every integer x (r = 0): 2**k, subnormals included."""
    S = F64
    F = S.float
    as_int = S.as_int
    shift, shift_bits = S.shift, S.shift_bits
    P = S.coeffs(_EXPM1_P64)
    ln2, ln2_lo = _LN2_PAIR
    one = S.c(1.0)
    # 2**1025 overflows and 2**-1080 rounds to 0, as every x beyond them does
    hi, lo = S.c(1025.0), S.c(-1080.0)
    scale = _F64_SCALE

    def exp2(x):
        x = F(x)
        x = hi if x > hi else x  # nan passes both comparisons untouched
        x = lo if x < lo else x
        t = x + shift
        kf = t - shift
        k = as_int(t) - shift_bits
        r = x - kf  # exact
        a = r * ln2
        a_lo = fma(r, ln2_lo, fma(r, ln2, -a))  # r ln2 = a + a_lo
        q = a * a * horner(a, P)  # expm1(a) = a + q
        s = one + a
        e = (one - s) + a  # 1 + a = s + e exactly
        # exp(a + a_lo) = s + e + q + a_lo * exp(a), rounded once
        return scale(s + (e + fma(a_lo, s, q)), k)

    return jit(named(exp2, "exp2_f64", "Vectorisable 2**x for float64, exact at integers."))


def _build_scale(S: Spec = F64):
    as_float, mant, bias = S.as_float, S.mant, S.bias

    @jit
    def pow2(k):
        return as_float((k + bias) << mant)

    @jit
    def scale(v, k):
        """v * 2**k for |k| up to about 2*bias: two exact-range factors, one final rounding."""
        k1 = k >> 1
        return v * pow2(k1) * pow2(k - k1)

    return scale


_F64_SCALE = _build_scale(F64)
_F32_SCALE = _build_scale(F32)
exp2_f64 = _build_exp2()


# 2**r = 1 + r * E(r) on |r| <= 1/2, for float32: a weighted least-squares fit on 400 Chebyshev
# nodes (Lawson iteration towards minimax, 40-digit mpmath values) of (2**r - 1) / r, error of
# 1 + r * E(r) relative to 2**r: 2**-28.9.
_EXP2_E32 = (
    0.6931472028551285,
    0.24022647913619927,
    0.05550332471025689,
    0.009618437358255162,
    0.0013398874445861055,
    0.00015353361829628133,
)


def _build_exp2_f32():
    """2**x for float32 in float32 arithmetic: x = k + r with k = round(x) and r = x - k exact,
    |r| <= 1/2, 2**r = 1 + r * E(r), then scaled by 2**k in two exact steps (one rounding for
    subnormal results). Exact at every integer x (r = 0)."""
    S = F32
    F = S.float
    as_int = S.as_int
    shift, shift_bits = S.shift, S.shift_bits
    E = S.coeffs(_EXP2_E32)
    one = S.c(1.0)
    # 2**129 overflows and 2**-152 rounds to 0, as every x beyond them does
    hi, lo = S.c(129.0), S.c(-152.0)
    scale = _F32_SCALE

    def exp2(x):
        x = F(x)
        x = hi if x > hi else x  # nan passes both comparisons untouched
        x = lo if x < lo else x
        t = x + shift
        kf = t - shift
        k = as_int(t) - shift_bits
        r = x - kf  # exact
        return scale(fma(r, horner(r, E), one), k)

    doc = "2**x for float32 in float32 arithmetic (0.94 ulp), exact at integers."
    return jit(named(exp2, "exp2_f32_arith", doc))


# Not the default: 0.94 ulp against the 0.50 of the float64 evaluation below (the rounding of
# r * E(r) reaches the result undamped); benchmarks/bench_vmath_f32.py measures both.
exp2_f32_arith = _build_exp2_f32()


def _exp2_f32(x):
    """Vectorisable 2**x for float32 (computed in float64, rounded once), exact at integers."""
    return np.float32(exp2_f64(np.float64(np.float32(x))))


exp2_f32 = jit(named(_exp2_f32, "exp2_f32", _exp2_f32.__doc__))
