"""log, log1p, log2 and log10.

x = 2**k * m with m in [sqrt(1/2), sqrt(2)), f = m - 1, then
log(1 + f) = 2 atanh(s) with s = f / (2 + f), |s| <= 0.1716, written as
f - (f**2/2 - s * (f**2/2 + R(s**2)))   (the classic fdlibm arrangement, < 1 ulp),
with R(z) = z * Q(z) a minimax polynomial.  One division per element, no table lookups.

log2 and log10 use the same reduction, kept unrounded: log(1 + f) = f - c with c small, scaled by
1/ln2 or 1/ln10 held as two floats (the product f * 1/ln2 split exactly with an FMA) and added to
k or to k*log10(2) in double-float arithmetic, with one rounding at the end.  That makes them
exact wherever the result is: log2 at every power of two, log10 at every power of ten (the
nearest float to 10**k, for every k).  The float32 versions compute in float64 and round once
(0.50 ulp); the same steps in float32 arithmetic, kept here as ``log2_f32_arith`` and
``log10_f32_arith``, reach 0.72 and 0.67 ulp (docs/vmath.md).
"""

from __future__ import annotations

import numpy as np

from ._core import F32, F64, Spec, fma, horner, jit, named
from ._exp import LN2_SPLIT

# Q(z) ~ (2 atanh(s) - 2 s) / (s z), z = s**2 <= 0.02944, minimax for the absolute error of
# s * z * Q(z) relative to log(1 + f) (Remez exchange, 50-digit arithmetic).  Approximation
# error: 2**-58.5 (f64, degree 6), 2**-29.2 (f32, degree 2).
_LOG_Q64 = (
    0.6666666666666734,
    0.39999999999414343,
    0.28571428742469035,
    0.22222198564134715,
    0.1818356483050386,
    0.15314036819593413,
    0.14796095028101622,
)
_LOG_Q32 = (0.6666677594184875, 0.3997753858566284, 0.29871854186058044)

# Above this exponent log1p uses the mantissa of 1 + x directly: 2**-k is tiny there, and
# would not be a normal number near the top of the range.
_LOG1P_BIG_K = {F64: 60, F32: 30}


def _build(S: Spec):
    F = S.float
    as_int, as_float = S.as_int, S.as_float
    mant, bias = S.mant, S.bias
    Q = S.coeffs(_LOG_Q64 if S is F64 else _LOG_Q32)
    ln2_hi, ln2_lo = (S.c(v) for v in LN2_SPLIT[S])
    # Subtracting the bits of sqrt(1/2) makes the exponent field of (bits - off) the k for which
    # m = x / 2**k lies in [sqrt(1/2), sqrt(2)).
    off = int(np.array(S.c(np.sqrt(0.5))).view(np.int64 if S is F64 else np.int32))
    sub_scale = S.c(2.0 ** (mant + 2))  # lifts subnormals into the normal range
    sub_k = mant + 2
    shift, shift_bits = S.shift, S.shift_bits
    big_k = _LOG1P_BIG_K[S]
    one, two, half, zero = S.c(1.0), S.c(2.0), S.c(0.5), S.c(0.0)
    inf, nan = S.inf, S.nan
    tiny = S.tiny

    @jit
    def split(ix):
        """(k, m) with value(ix) = 2**k * m, m in [sqrt(1/2), sqrt(2)), for normal bits ix."""
        k = (ix - off) >> mant
        m = as_float(ix - (k << mant))
        return k, m

    @jit
    def int_to_float(k):
        """float(k) for |k| < 2**(mant-1) through the rounding constant: avoids a 64-bit
        integer conversion, which has no packed instruction before AVX-512."""
        return as_float(k + shift_bits) - shift

    @jit
    def log1p_reduced(f, k):
        """k*ln2 + log(1 + f) for |f| <= sqrt(2) - 1 (plus rounding slack)."""
        s = f / (two + f)
        z = s * s
        r = z * horner(z, Q)
        hfsq = half * f * f
        kf = int_to_float(k)
        return kf * ln2_hi - ((hfsq - fma(s, hfsq + r, kf * ln2_lo)) - f)

    def log(x):
        x = F(x)
        sub = x < tiny
        xs = x * sub_scale if sub else x
        k, m = split(as_int(xs))
        k = k - sub_k if sub else k
        res = log1p_reduced(m - one, k)  # m - 1 is exact
        res = res if x < inf else x  # +inf and nan
        res = -inf if x == zero else res
        return nan if x < zero else res

    def log1p(x):
        x = F(x)
        u = one + x
        k, m = split(as_int(u))
        # f = (1 + x) / 2**k - 1 from x itself, so the rounding of 1 + x does not matter.
        s = as_float((bias - k) << mant) if k <= big_k else one
        f = fma(x, s, s - one) if k <= big_k else m - one
        res = log1p_reduced(f, k)
        res = res if x < inf else x
        res = -inf if x == -one else res
        res = nan if x < -one else res
        return x if x == zero else res  # keeps the sign of zero

    sfx = "_f64" if S is F64 else "_f32"
    kind = "float64" if S is F64 else "float32"
    funcs = {
        "log": (log, f"Vectorisable natural log for {kind}: log(0) = -inf, log(x<0) = nan."),
        "log1p": (log1p, f"Vectorisable log(1 + x) for {kind}, accurate near 0."),
    }
    return {name: jit(named(f, name + sfx, doc)) for name, (f, doc) in funcs.items()}


_F64 = _build(F64)
_F32 = _build(F32)
log_f64, log1p_f64 = _F64["log"], _F64["log1p"]
log_f32, log1p_f32 = _F32["log"], _F32["log1p"]


# 1/ln2, 1/ln10 and log10(2) as a float64 and the float64 of what remains (mpmath, 300 bits);
# log10(2)'s first part has 33 significant bits, so k * it is exact for every exponent k.
_INV_LN2 = (float.fromhex("0x1.71547652b82fep+0"), float.fromhex("0x1.777d0ffda0d24p-56"))
_INV_LN10 = (float.fromhex("0x1.bcb7b1526e50ep-2"), float.fromhex("0x1.95355baaafad3p-57"))
_LOG10_2 = (float.fromhex("0x1.3441350900000p-2"), float.fromhex("0x1.ef3fde623e256p-35"))
# The same as float32 pairs; log10(2)'s first part has 16 significant bits (|k| < 2**8 here).
_INV_LN2_32 = (float.fromhex("0x1.715476p+0"), float.fromhex("0x1.4ae0cp-26"))
_INV_LN10_32 = (float.fromhex("0x1.bcb7b2p-2"), float.fromhex("-0x1.5b235ep-27"))
_LOG10_2_32 = (float.fromhex("0x1.3442p-2"), float.fromhex("-0x1.95ec1p-19"))


def _build_base_2_10(S: Spec):
    F = S.float
    as_int, as_float = S.as_int, S.as_float
    mant = S.mant
    Q = S.coeffs(_LOG_Q64 if S is F64 else _LOG_Q32)
    off = int(np.array(S.c(np.sqrt(0.5))).view(np.int64 if S is F64 else np.int32))
    sub_scale, sub_k = S.c(2.0 ** (mant + 2)), mant + 2
    shift, shift_bits = S.shift, S.shift_bits
    one, two, half, zero = S.c(1.0), S.c(2.0), S.c(0.5), S.c(0.0)
    inf, nan, tiny = S.inf, S.nan, S.tiny
    il2, il2_lo = (S.c(v) for v in (_INV_LN2 if S is F64 else _INV_LN2_32))
    il10, il10_lo = (S.c(v) for v in (_INV_LN10 if S is F64 else _INV_LN10_32))
    l10_2, l10_2_lo = (S.c(v) for v in (_LOG10_2 if S is F64 else _LOG10_2_32))

    @jit
    def reduced(x):
        """(k, u, v) with x = 2**k * (1 + f) and log(1 + f) = u + v, for finite x > 0: u is
        f - f**2/2 rounded and v, about a twentieth of it, holds the rest."""
        sub = x < tiny
        xs = x * sub_scale if sub else x
        ix = as_int(xs)
        k = (ix - off) >> mant
        f = as_float(ix - (k << mant)) - one  # exact
        k = k - sub_k if sub else k
        s = f / (two + f)
        z = s * s
        hf = half * f
        hfsq = hf * f
        hfsq_lo = fma(hf, f, -hfsq)  # f**2/2 = hfsq + hfsq_lo exactly
        u = f - hfsq
        # log(1 + f) = f - f**2/2 + s (f**2/2 + R(z)); f - u - hfsq is exact (|f| > hfsq)
        v = (((f - u) - hfsq) - hfsq_lo) + s * (hfsq + z * horner(z, Q))
        kf = as_float(k + shift_bits) - shift  # float(k), vectorisable
        return kf, u, v

    @jit
    def special(x, res):
        res = res if x < inf else x  # +inf and nan
        res = -inf if x == zero else res
        return nan if x < zero else res

    def log2(x):
        x = F(x)
        kf, u, v = reduced(x)
        p = u * il2
        lo = fma(u, il2_lo, fma(u, il2, -p)) + v * il2  # (u + v) / ln2 = p + lo
        w = kf + p  # exact sum w + e: |kf| >= 1 > |p|, or kf = 0
        lo = lo + ((kf - w) + p)
        return special(x, w + lo)

    def log10(x):
        x = F(x)
        kf, u, v = reduced(x)
        a = kf * l10_2  # exact
        b = u * il10
        lo = fma(u, il10_lo, fma(u, il10, -b)) + (v * il10 + kf * l10_2_lo)
        w = a + b  # exact sum w + e: |a| >= log10(2) > |b|, or a = 0
        lo = lo + ((a - w) + b)
        return special(x, w + lo)

    sfx = "_f64" if S is F64 else "_f32"
    kind = "float64" if S is F64 else "float32"
    funcs = {
        "log2": (log2, f"Vectorisable base-2 log for {kind}, exact at powers of two."),
        "log10": (log10, f"Vectorisable base-10 log for {kind}, exact at powers of ten."),
    }
    return {name: jit(named(f, name + sfx, doc)) for name, (f, doc) in funcs.items()}


_BASES = _build_base_2_10(F64)
log2_f64, log10_f64 = _BASES["log2"], _BASES["log10"]

# The same steps in float32 arithmetic: twice as many SIMD lanes, but 0.72 ulp (log2) and
# 0.67 ulp (log10) instead of 0.50 (s = f / (2 + f) and the products that scale it carry a
# float32 rounding each into the unrounded tail).  Not the default; benchmarks/bench_vmath_f32.py
# measures both.
_BASES32 = _build_base_2_10(F32)
log2_f32_arith, log10_f32_arith = _BASES32["log2"], _BASES32["log10"]


def _log2_f32(x):
    """Vectorisable base-2 log for float32 (computed in float64, rounded once)."""
    return np.float32(log2_f64(np.float64(np.float32(x))))


def _log10_f32(x):
    """Vectorisable base-10 log for float32 (computed in float64, rounded once)."""
    return np.float32(log10_f64(np.float64(np.float32(x))))


log2_f32 = jit(named(_log2_f32, "log2_f32", _log2_f32.__doc__))
log10_f32 = jit(named(_log10_f32, "log10_f32", _log10_f32.__doc__))
