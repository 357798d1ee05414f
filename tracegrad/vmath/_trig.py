"""sin, cos, tan and sincos with a branch-free Cody-Waite argument reduction.

sin and cos reduce by pi: x = q*pi + r with |r| <= pi/2, sin(x) = (-1)**q sin(r), and one odd
polynomial covers [-pi/2, pi/2] (cos shifts by half a period first).  tan and sincos reduce by
pi/2 to |r| <= pi/4 and evaluate both the sine and the cosine polynomial.

pi is split into three float64 parts.  With a fused multiply-add, x - q*PI_1 is exact, and the
later parts carry the rest of pi to ~160 bits, so r keeps its relative accuracy even next to a
multiple of pi.  The integer q comes from the 1.5 * 2**52 rounding constant; the results are
accurate for |x| <= TRIG_LIMIT and nan beyond it (see docs/vmath.md; TRACEGRAD_MATH=libm gives
libm's results there).

The float32 versions compute in float64 throughout, with shorter polynomials, and round once at
the end: float32 arithmetic cannot reduce large arguments (q needs up to 45 bits).  Private
`sin_f32_arith`, `cos_f32_arith` and `sincos_f32_arith` reduce in float64 and evaluate the
polynomials in float32 arithmetic on the remainder held as two float32s, with the r**3/6 term of
the sine in double-float arithmetic (the plain float32 polynomial reached 0.83 ulp): within 0.58
ulp, but 2-3x slower in a generated loop than the float64 evaluation, so not the default.
"""

from __future__ import annotations

import math

import numpy as np

from ._core import F32, F64, Spec, f32_as_i32, fma, horner, i32_as_f32, jit, named

# Minimax coefficients (Remez exchange, 50-digit arithmetic, relative error).  The intervals
# extend 0.01 past pi/2 and pi/4: near TRIG_LIMIT the computed quotient q can be off by one
# when x/pi lies within 0.003 of a half-integer, which leaves |r| slightly larger.
#   sin(r) = r + r**3 * SIN(r**2) on |r| <= pi/2 + 0.01: error 2**-61.5 (f64), 2**-27.2 (f32)
_SIN_PI2_64 = (
    -0.16666666666666666,
    0.00833333333333318,
    -0.00019841269841204347,
    2.7557319210284567e-06,
    -2.5052106793202318e-08,
    1.6058935633720093e-10,
    -7.642883804284067e-13,
    2.7200243730540702e-15,
)
_SIN_PI2_32 = (
    -0.1666665916987943,
    0.008333055695083484,
    -0.00019808781458764677,
    2.6038712758834417e-06,
)
#   sin(r) = r + r**3 * SIN4(r**2) on |r| <= pi/4 + 0.01: error 2**-57.7 (f64), 2**-27.8 (f32)
_SIN_PI4_64 = (
    -0.16666666666666624,
    0.0083333333333206,
    -0.00019841269828341403,
    2.755731317857238e-06,
    -2.5050677071087505e-08,
    1.5892062506818333e-10,
)
_SIN_PI4_32 = (-0.16666653653225078, 0.008332099750778598, -0.0001950694251977433)
#   cos(r) = 1 - r**2/2 + r**4 * COS4(r**2) on |r| <= pi/4 + 0.01: error 2**-63.7 (f64),
#   2**-32.8 (f32)
# The *_32 sets are used in float64 arithmetic for the float32 functions.
_COS_PI4_64 = (
    0.04166666666666658,
    -0.0013888888888870887,
    2.4801587287476966e-05,
    -2.755731377683948e-07,
    2.087564549180835e-09,
    -1.135564084457274e-11,
)
_COS_PI4_32 = (0.04166664399657013, -0.0013887233439520855, 2.4423625506668383e-05)

# pi as a sum of three float64 parts, each the rounding of what the previous ones leave over.
_PI_PARTS = ("0x1.921fb54442d18p+1", "0x1.1a62633145c07p-53", "-0x1.f1976b7ed8fbcp-109")

# |x| up to which the results are accurate (see docs/vmath.md); beyond it they are nan.
# The computed quotient q can be one off when x/pi is within |x| * 2**-52 of a half-integer,
# which the 0.01 margin of the polynomials covers up to here.
TRIG_LIMIT = 2.0**45

R = F64  # the type the reduction and the polynomials are evaluated in
_SHIFT = R.shift
_as_int, _as_float = R.as_int, R.as_float


@jit
def _quadrant(x, scale, offset):
    """(q, n): q = round(x * scale + offset) as a float64, n an integer with q's parity (the
    rounding constant's own low bits are even)."""
    qs = fma(x, scale, offset) + _SHIFT
    return qs - _SHIFT, _as_int(qs)


@jit
def _remainder(x, q, parts):
    """x - q * (sum of the three parts); the first step is exact."""
    r = fma(-q, parts[0], x)
    r = fma(-q, parts[1], r)
    return fma(-q, parts[2], r)


@jit
def _flip_sign(v, n):
    """-v if the integer n is odd, else v (an xor into the float64 sign bit)."""
    return _as_float(_as_int(v) ^ (n << 63))


def _build(S: Spec):
    """The trig functions for inputs and results of type S (computed in float64)."""
    F = S.float
    to_r = R.float
    pi_parts = tuple(float.fromhex(h) for h in _PI_PARTS)
    pio2_parts = tuple(p / 2 for p in pi_parts)  # halving is exact
    inv_pi = 1.0 / math.pi
    two_over_pi = 2.0 / math.pi
    SIN2 = R.coeffs(_SIN_PI2_64 if S is F64 else _SIN_PI2_32)
    SIN4 = R.coeffs(_SIN_PI4_64 if S is F64 else _SIN_PI4_32)
    COS4 = R.coeffs(_COS_PI4_64 if S is F64 else _COS_PI4_32)
    limit = TRIG_LIMIT
    nan = R.nan

    @jit
    def sin_pi2(r):
        """sin(r) for |r| <= pi/2, clamped to [-1, 1] (near +-pi/2 rounding can reach 1+ulp)."""
        z = r * r
        s = fma(r * z, horner(z, SIN2), r)
        s = 1.0 if s > 1.0 else s
        return -1.0 if s < -1.0 else s

    @jit
    def sin_cos_pi4(r):
        """(sin(r), cos(r)) for |r| <= pi/4."""
        z = r * r
        s = fma(r * z, horner(z, SIN4), r)
        # cos(r) = w + ((1 - w) - z/2 + z**2*COS4), w = 1 - z/2 rounded: the bracket recovers
        # the rounding error of w exactly (Sterbenz), so only the final addition rounds.
        hz = 0.5 * z
        w = 1.0 - hz
        c = w + (((1.0 - w) - hz) + z * z * horner(z, COS4))
        return s, c

    def sin(x):
        x = F(x)
        xr = to_r(x)
        q, n = _quadrant(xr, inv_pi, 0.0)
        res = _flip_sign(sin_pi2(_remainder(xr, q, pi_parts)), n)  # x = q*pi + r
        res = xr if xr == 0.0 else res  # r + r**3*P(r**2) would turn -0 into +0
        return F(res if abs(xr) <= limit else nan)

    def cos(x):
        x = F(x)
        xr = to_r(x)
        # q = round(x/pi - 1/2), x = (q + 1/2)*pi + r, cos(x) = (-1)**(q+1) sin(r)
        q, n = _quadrant(xr, inv_pi, -0.5)
        res = _flip_sign(sin_pi2(_remainder(xr, q + 0.5, pi_parts)), n + 1)
        return F(res if abs(xr) <= limit else nan)

    def sincos(x):
        x = F(x)
        xr = to_r(x)
        q, n = _quadrant(xr, two_over_pi, 0.0)
        s, c = sin_cos_pi4(_remainder(xr, q, pio2_parts))  # x = q*pi/2 + r
        odd = (n & 1) != 0
        sv = _flip_sign(c if odd else s, n >> 1)
        sv = xr if xr == 0.0 else sv
        cv = _flip_sign(s if odd else c, (n + 1) >> 1)
        ok = abs(xr) <= limit
        return F(sv if ok else nan), F(cv if ok else nan)

    def tan(x):
        x = F(x)
        xr = to_r(x)
        q, n = _quadrant(xr, two_over_pi, 0.0)
        s, c = sin_cos_pi4(_remainder(xr, q, pio2_parts))
        odd = (n & 1) != 0
        res = (-c if odd else s) / (s if odd else c)
        res = xr if xr == 0.0 else res
        return F(res if abs(xr) <= limit else nan)

    sfx = "_f64" if S is F64 else "_f32"
    kind = "float64" if S is F64 else "float32"
    lim = "|x| <= 2**45, nan beyond"
    funcs = {
        "sin": (sin, f"Vectorisable sin(x) for {kind}; {lim}."),
        "cos": (cos, f"Vectorisable cos(x) for {kind}; {lim}."),
        "tan": (tan, f"Vectorisable tan(x) for {kind}; {lim}."),
        "sincos": (sincos, f"(sin(x), cos(x)) for {kind} with one shared reduction; {lim}."),
    }
    return {name: jit(named(f, name + sfx, doc)) for name, (f, doc) in funcs.items()}


_F64 = _build(F64)
_F32 = _build(F32)
sin_f64, cos_f64, tan_f64, sincos_f64 = (_F64[n] for n in ("sin", "cos", "tan", "sincos"))

# sin(r) = r + r**3 * SIN_F32(r**2) on |r| <= pi/4 + 0.01, for float32 arithmetic: least squares
# on 400 Chebyshev nodes (40-digit mpmath values), weighted for the relative error of sin:
# 2**-37.2.  The first coefficient is used as a float32 pair.
_SIN_F32 = (
    -0.1666666663994108,
    0.008333329152933817,
    -0.00019839253370813545,
    2.7174976235695985e-06,
)


def _build_f32():
    """sin, cos and sincos for float32: the reduction in float64, the rest in float32."""
    F, D = np.float32, np.float64
    p1, p2 = (D(float.fromhex(h) / 2) for h in _PI_PARTS[:2])  # q * the third part < 2**-62
    two_over_pi = D(2.0 / math.pi)
    c0 = F(_SIN_F32[0])
    c0_lo = F(_SIN_F32[0] - float(c0))
    SIN = F32.coeffs(_SIN_F32[1:])
    COS = F32.coeffs(_COS_PI4_32)
    one, half = F(1.0), F(0.5)
    limit, nan = F(TRIG_LIMIT), F32.nan

    @jit
    def reduce(x):
        """(r, r_lo, n): x = n*pi/2 + r + r_lo, r and r_lo float32, n an int32 of q's low bits."""
        xd = D(x)
        q, n = _quadrant(xd, two_over_pi, 0.0)
        rd = fma(-q, p2, fma(-q, p1, xd))  # the first step exact: r to 2**-61 absolute
        r = F(rd)
        return r, F(rd - D(r)), np.int32(n)

    @jit
    def sin_cos(r, r_lo):
        """(sin, cos) of r + r_lo for |r| <= pi/4 + 0.01, in float32 arithmetic."""
        z = r * r
        z_lo = fma(r, r, -z)  # r**2 = z + z_lo exactly
        hz = half * z
        # sin: r + [r**3 c0] + r**5 P(z) + r_lo cos(r); the bracket in double-float
        t = r * z
        t_lo = fma(r, z, -t) + r * z_lo  # r**3 = t + t_lo
        p = t * c0
        p_lo = fma(t, c0, -p)
        rest = p_lo + fma(t_lo, c0, t * c0_lo) + t * z * horner(z, SIN) + fma(-r_lo, hz, r_lo)
        s = r + (p + rest)
        # cos: w + ((1 - w) - r**2/2 + z**2 COS(z)), the rounding error of w recovered
        w = one - hz
        hz_lo = fma(half, z_lo, r * r_lo)
        c = w + ((((one - w) - hz) - hz_lo) + z * z * horner(z, COS))
        return s, c

    @jit
    def flip(v, n):
        return i32_as_f32(f32_as_i32(v) ^ (n << 31))

    def sincos(x):
        x = F(x)
        r, r_lo, n = reduce(x)
        s, c = sin_cos(r, r_lo)
        odd = (n & 1) != 0
        sv = flip(c if odd else s, n >> 1)
        sv = x if x == 0 else sv  # keeps the sign of zero
        cv = flip(s if odd else c, (n + 1) >> 1)
        ok = abs(x) <= limit
        return (sv if ok else nan), (cv if ok else nan)

    def sin(x):
        x = F(x)
        r, r_lo, n = reduce(x)
        s, c = sin_cos(r, r_lo)
        sv = flip(c if (n & 1) != 0 else s, n >> 1)
        sv = x if x == 0 else sv
        return sv if abs(x) <= limit else nan

    def cos(x):
        x = F(x)
        r, r_lo, n = reduce(x)
        s, c = sin_cos(r, r_lo)
        cv = flip(s if (n & 1) != 0 else c, (n + 1) >> 1)
        return cv if abs(x) <= limit else nan

    lim = "|x| <= 2**45, nan beyond"
    funcs = {
        "sin": (sin, f"Vectorisable sin(x) for float32; {lim}."),
        "cos": (cos, f"Vectorisable cos(x) for float32; {lim}."),
        "sincos": (sincos, f"(sin(x), cos(x)) for float32 with one shared reduction; {lim}."),
    }
    return {name: jit(named(f, name + "_f32", doc)) for name, (f, doc) in funcs.items()}


#: the float64-evaluated float32 sin, cos and sincos (the defaults; benchmarks/bench_vmath_f32.py)
sin_f32_f64eval, cos_f32_f64eval, sincos_f32_f64eval = (_F32[n] for n in ("sin", "cos", "sincos"))
#: the float32-arithmetic ones, private: as accurate (0.58 ulp) but 2-3x slower per element in a
#: generated loop (the float64 reduction and the float32 polynomials vectorise at different widths)
_ARITH = _build_f32()
sin_f32_arith, cos_f32_arith, sincos_f32_arith = (_ARITH[n] for n in ("sin", "cos", "sincos"))
sin_f32, cos_f32, tan_f32, sincos_f32 = (_F32[n] for n in ("sin", "cos", "tan", "sincos"))
