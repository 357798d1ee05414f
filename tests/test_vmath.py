"""Accuracy, special values, vectorisation and mode switch of tracegrad.vmath.

Accuracy is measured in ulps against np.longdouble (x87 80-bit, 64-bit mantissa: glibc's long
double functions, the same code on every x86-64 CPU) over dense samples, and the points with the
largest errors are measured again against mpmath's correctly rounded results
(tests/correctly_rounded.py). No result is compared with NumPy's float32 or float64 functions,
whose last bits depend on the CPU NumPy dispatches for.  Every element-wise loop is compiled
once and shared between the tests that use it.
"""

from __future__ import annotations

import functools
import math
import os
import re

import numpy as np
import pytest
from numba import njit, prange

import correctly_rounded as cr
from tracegrad import vmath as vm
from tracegrad.vmath import _trig
from tracegrad.vmath import _exp as _vexp
from tracegrad.vmath import _log as _vlog

F64, F32 = np.float64, np.float32
DTYPES = {"f64": F64, "f32": F32}
NAMES = list(vm.FUNCTIONS)

# Largest error in ulps measured over the samples below (and over 10x denser ones while
# developing; see docs/vmath.md), rounded up.  The targets were 4 ulp (float64) and 2 ulp
# (float32); every function meets them.
MAX_ULP = {
    "exp": (1.1, 1.1),
    "expm1": (2.2, 1.7),
    "log": (0.9, 0.9),
    "log1p": (1.5, 1.5),
    "sin": (1.9, 0.7),
    "cos": (1.9, 0.7),
    "tan": (3.0, 0.7),
    "tanh": (2.7, 0.65),
    "arctan": (1.8, 1.95),
    "sinh": (2.3, 1.95),
    "cosh": (1.5, 1.5),
    "arcsin": (2.2, 0.65),
    "arccos": (1.2, 1.2),
    "exp2": (0.75, 0.55),
    "log2": (0.7, 0.55),
    "log10": (0.7, 0.55),
    "cbrt": (0.55, 0.51),
}
NP_FUNC = {name: getattr(np, name) for name in NAMES}
RECHECK = 32  # the points with the largest errors, measured again against mpmath


# --- sampling and reference --------------------------------------------------------------------


def _bits_range(rng, lo, hi, n, dtype):
    """n values uniformly distributed over the bit patterns between positive lo and hi, i.e.
    evenly over the binades: every exponent in the range gets about the same share."""
    it = np.int64 if dtype == F64 else np.int32
    a, b = (int(np.array(v, dtype).view(it)) for v in (lo, hi))
    return rng.integers(a, b, n).astype(it).view(dtype)


def samples(name, dtype, n=100_000, seed=0):
    """Dense samples of the whole domain of ``name``, with the hard regions oversampled."""
    rng = np.random.default_rng(seed)
    fi = np.finfo(dtype)
    d64 = dtype == F64
    sub = fi.smallest_subnormal

    def U(a, b):
        return rng.uniform(a, b, n).astype(dtype)

    def B(a, b):
        return _bits_range(rng, a, b, n, dtype)

    def pm(v):
        return np.concatenate([v, -v])

    if name == "exp":
        hi, lo, sub_lo = (709.8, -745.2, -708.4) if d64 else (88.8, -104.0, -87.4)
        parts = [
            U(lo - 2, hi + 2),
            U(-1, 1),
            pm(B(sub, 1.0)),
            U(hi - 1, hi + 0.1),
            U(lo - 0.1, sub_lo),
        ]
    elif name == "expm1":
        hi = 709.8 if d64 else 88.8
        parts = [U(-45, hi + 1), U(-1, 1), pm(B(sub, 1.0))]
    elif name == "exp2":
        hi, lo = (1024.0, -1075.0) if d64 else (128.0, -150.0)
        parts = [U(lo - 2, hi + 2), U(-1, 1), pm(B(sub, 1.0)), U(hi - 1, hi + 0.1), U(lo, lo + 30)]
    elif name in ("log", "log2", "log10"):
        parts = [B(sub, fi.max), U(0.5, 2), U(0.99, 1.01), B(sub, fi.smallest_normal)]
    elif name == "log1p":
        parts = [U(-1, 1), pm(B(sub, 1.0)), B(1.0, fi.max), -1 + B(fi.eps / 2, 1.0), U(-0.3, 0.5)]
    elif name in ("sin", "cos", "tan"):
        k = rng.integers(-(10**6), 10**6, n) * (np.pi / 2)  # next to multiples of pi/2
        near = np.concatenate([k, np.nextafter(k, np.inf), np.nextafter(k, -np.inf)])
        parts = [
            U(-10, 10),
            U(-1e4, 1e4),
            pm(B(sub, vm.TRIG_MAX_ARG["float64"])),
            near.astype(dtype),
        ]
        if d64:
            parts += [U(-1e10, 1e10), pm(B(1e13, vm.TRIG_MAX_ARG["float64"]))]
    elif name == "tanh":
        parts = [U(-25, 25), pm(B(sub, 30.0)), U(-1, 1)]
    elif name in ("sinh", "cosh"):
        hi = 711.0 if d64 else 90.0
        parts = [U(-hi, hi), pm(B(sub, 1.0)), U(-3, 3), pm(U(hi - 2, hi))]
    elif name == "arctan":
        parts = [pm(B(sub, fi.max)), U(-3, 3), U(-0.5, 0.5)]
    elif name == "cbrt":
        parts = [pm(B(sub, fi.max)), U(-10, 10), pm(B(sub, fi.smallest_normal))]
    elif name in ("arcsin", "arccos"):
        parts = [U(-1, 1), pm(1 - B(fi.eps / 4, 0.5)), pm(B(sub, 1.0)), U(-0.6, 0.6)]
    else:  # pragma: no cover
        raise KeyError(name)
    return np.concatenate(parts).astype(dtype)


def reference(name, x):
    """``name`` of x in np.longdouble (x87, 64-bit mantissa): glibc's long double functions,
    the same code on every x86-64 CPU (no vector units, no dispatch on CPU features)."""
    with np.errstate(all="ignore"):
        return NP_FUNC[name](x.astype(np.longdouble))


def ulp_error(got, ref, dtype):
    """|got - ref| in units of the last place of ref in ``dtype`` (subnormal spacing at the
    bottom); 0 where both are nan or got is the same infinity as ref rounded, inf where only one
    of them is nan or infinite."""
    fi = np.finfo(dtype)
    with np.errstate(all="ignore"):
        ref_rounded = ref.astype(dtype).astype(ref.dtype)
        g = got.astype(ref.dtype)
        same = ((g == ref_rounded) & np.isinf(g)) | (np.isnan(g) & np.isnan(ref))
        finite = np.isfinite(ref) & np.isfinite(g)
        _, e = np.frexp(np.abs(ref))
        e = np.maximum(e.astype(np.int64) - 1 - fi.nmant, fi.minexp - fi.nmant)
        err = np.where(finite, np.abs(g - ref) / np.ldexp(np.ones_like(ref), e), np.inf)
    return np.where(same, 0.0, err).astype(F64)


# --- compiled loops, shared ----------------------------------------------------------------------


def _scalar(f):
    """A jitted function calling f once: the way to see f's compiled types."""

    @njit
    def call(v):
        return f(v)

    return call


def _make_loop(f, parallel=False, fastmath=False):
    if fastmath:

        @njit(fastmath=True)
        def loop(x, out):
            for i in range(x.size):
                out[i] = f(x[i])

    elif parallel:

        @njit(parallel=True)
        def loop(x, out):
            for i in prange(x.size):
                out[i] = f(x[i])

    else:

        @njit
        def loop(x, out):
            for i in range(x.size):
                out[i] = f(x[i])

    return loop


@functools.cache
def loop_for(name, dt):
    return _make_loop(vm.get(name, DTYPES[dt]))


def apply(name, dt, x):
    out = np.empty_like(x)
    loop_for(name, dt)(x, out)
    return out


# --- accuracy --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("name", NAMES)
def test_accuracy(name, dt):
    dtype = DTYPES[dt]
    x = samples(name, dtype)
    got = apply(name, dt, x)
    assert got.dtype == dtype
    err = ulp_error(got, reference(name, x), dtype)
    worst = int(np.argmax(err))
    bound = MAX_ULP[name][0 if dt == "f64" else 1]
    assert err[worst] <= bound, f"{name}_{dt}({x[worst]!r}) = {got[worst]!r}: {err[worst]:.2f} ulp"
    assert bound <= (4.0 if dt == "f64" else 2.0)
    # the worst points again, against the correctly rounded results
    top = np.argsort(err)[-RECHECK:]
    exact = cr.ulp_errors(got[top], cr.reference(name, x[top]), dtype)
    assert exact.max() <= bound, (x[top][np.argmax(exact)], exact.max())
    np.testing.assert_allclose(exact, err[top], atol=0.01)  # the long double reference agrees


@pytest.mark.parametrize("name", NAMES)
def test_reference_is_accurate(name):
    """np.longdouble agrees with mpmath's correctly rounded results to a small fraction of a
    float64 ulp over every sample region (sin of large arguments, subnormals and the edges
    included), so it can serve as the reference for both dtypes."""
    x = samples(name, F64, n=300, seed=3)
    ld = reference(name, x)
    exact = cr.reference(name, x)
    ok = np.isfinite(exact.hi)
    np.testing.assert_array_equal(np.isnan(ld), np.isnan(exact.hi))
    beyond = np.isinf(exact.hi)  # beyond the float64 range: so is the long double
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(ld[beyond].astype(F64), exact.hi[beyond])
    e = np.maximum(exact.exp[ok], -1022) - 52  # the float64 ulp of the exact value
    rest = np.ldexp(exact.rest[ok].astype(np.longdouble), e)
    err = np.abs((ld[ok] - exact.hi[ok]) - rest) / np.ldexp(np.longdouble(1), e)
    assert ok.sum() > 0.9 * x.size and err.max() < 0.01, (x[ok][np.argmax(err)], err.max())


@pytest.mark.parametrize("name", ["arcsin", "arccos"])
def test_arcsin_arccos_f32_at_every_float_just_above_one_half(name):
    """Every float32 in [1/2, 0.640625], where pi/2 - 2 asin(sqrt((1 - x)/2)) takes over: the
    largest errors of all float32 inputs lie here (0.583 ulp at 0.50001913 for arcsin, 1.127 at
    0.6209703 for arccos, benchmarks/vmath_accuracy.py --exhaustive). The bound holds and is
    reached, not merely respected from afar."""
    lo, hi = (int(np.array(F32(v)).view(np.int32)) for v in (0.5, 0.640625))
    x = np.arange(lo, hi + 1, dtype=np.int32).view(F32)
    got = apply(name, "f32", x)
    err = ulp_error(got, reference(name, x), F32)
    worst = int(np.argmax(err))
    bound = MAX_ULP[name][1]
    assert bound - 0.1 < err[worst] <= bound, (x[worst], err[worst])
    exact = cr.ulp_errors(got[[worst]], cr.reference(name, x[[worst]]), F32)
    assert abs(exact[0] - err[worst]) < 1e-6


@pytest.mark.parametrize("dt", DTYPES)
def test_exact_at_exact_powers(dt):
    """log2 and exp2 at every power of two, log10 at every power of ten (the float nearest
    10**k): exact, subnormals included. The correctly rounded results are k, 2**k and k, as
    mpmath confirms."""
    dtype = DTYPES[dt]
    fi = np.finfo(dtype)
    k2 = np.arange(fi.minexp - fi.nmant, fi.maxexp)
    powers2 = np.ldexp(np.ones(k2.size, dtype), k2.astype(np.int32))
    assert np.all(np.isfinite(powers2)) and np.all(powers2 > 0)
    k10 = np.arange(
        int(np.ceil(np.log10(float(fi.smallest_normal)))), int(np.log10(float(fi.max))) + 1
    )
    powers10 = np.array([dtype(f"1e{k}") for k in k10])
    cases = [("log2", powers2, k2), ("exp2", k2.astype(dtype), powers2), ("log10", powers10, k10)]
    for name, x, want in cases:
        want = np.asarray(want).astype(dtype)
        np.testing.assert_array_equal(cr.rounded(cr.reference(name, x), dtype), want, name)
        np.testing.assert_array_equal(apply(name, dt, x), want, name)


# float32-arithmetic versions of functions whose float32 default computes in float64 (not
# accurate enough for the 0.50 ulp docs/vmath.md promises; benchmarks/bench_vmath_f32.py times
# them): name -> (function, bound in ulps)
F32_ARITH = {
    "exp2": (_vexp.exp2_f32_arith, 0.95),
    "log2": (_vlog.log2_f32_arith, 0.75),
    "log10": (_vlog.log10_f32_arith, 0.7),
}


@pytest.mark.parametrize("name", list(F32_ARITH))
def test_float32_arithmetic_alternatives(name):
    """In float32 throughout (no fpext in the loop), within their bound of the correctly
    rounded results over the samples and special values, and exact at exact powers."""
    f, bound = F32_ARITH[name]
    loop = _make_loop(f)
    x = np.concatenate([samples(name, F32), special_inputs(name, F32)])
    got = np.empty_like(x)
    loop(x, got)
    assert "fpext" not in loop.inspect_llvm(loop.signatures[0])
    err = ulp_error(got, reference(name, x), F32)
    worst = int(np.argmax(err))
    assert err[worst] <= bound, (x[worst], got[worst], err[worst])
    top = np.argsort(err)[-RECHECK:]
    assert cr.ulp_errors(got[top], cr.reference(name, x[top]), F32).max() <= bound
    assert np.array_equal(np.isnan(got), np.isnan(x) | (x < 0) if name != "exp2" else np.isnan(x))
    fi = np.finfo(F32)
    k = np.arange(fi.minexp - fi.nmant, fi.maxexp)
    p2 = np.ldexp(np.ones(k.size, F32), k.astype(np.int32))
    p10 = np.array([F32(f"1e{j}") for j in range(-37, 39)])
    x, want = {"exp2": (k.astype(F32), p2), "log2": (p2, k), "log10": (p10, np.arange(-37, 39))}[
        name
    ]
    got = np.empty(x.size, F32)
    loop(x.astype(F32), got)
    np.testing.assert_array_equal(got, np.asarray(want, F32))


def test_large_trig_arguments():
    x = np.array([1e10, -1e10, 123456789.0, 3.5e13, 2.0**45], dtype=F64)
    for name in ("sin", "cos", "tan"):
        err = ulp_error(apply(name, "f64", x), reference(name, x), F64)
        assert err.max() <= MAX_ULP[name][0], name
    assert abs(vm.sin_f64(1e10) - (-0.4875060250875107)) <= 2e-16


def test_trig_beyond_limit_is_nan():
    for dt, dtype in DTYPES.items():
        big = np.array([2.0**46, -1e20, np.finfo(dtype).max, np.inf, -np.inf], dtype=dtype)
        for name in ("sin", "cos", "tan"):
            assert np.isnan(apply(name, dt, big)).all(), (name, dt)


# --- special values --------------------------------------------------------------------------------


def special_inputs(name, dtype):
    fi = np.finfo(dtype)
    v = [
        0.0,
        -0.0,
        np.inf,
        -np.inf,
        np.nan,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        fi.smallest_subnormal,
        -fi.smallest_subnormal,
        fi.smallest_normal,
        fi.max,
        -fi.max,
    ]
    if name in ("exp", "expm1", "sinh", "cosh"):
        # around the overflow and underflow thresholds
        lo = math.log(float(fi.smallest_subnormal))
        hi = math.log(float(fi.max))
        edges = [
            hi,
            hi + math.log(2.0),
            lo,
            lo - math.log(2.0),
            math.log(float(fi.smallest_normal)),
        ]
        for e in edges:
            c = dtype(e)
            v += [c, np.nextafter(c, dtype(np.inf)), np.nextafter(c, dtype(-np.inf)), -c]
    if name == "exp2":  # around the overflow and underflow thresholds
        for e in (
            fi.maxexp,
            fi.maxexp - 1,
            fi.minexp - fi.nmant,
            fi.minexp - fi.nmant - 1,
            fi.minexp,
        ):
            c = dtype(e)
            v += [c, np.nextafter(c, dtype(np.inf)), np.nextafter(c, dtype(-np.inf)), -c]
    if name in ("log", "log1p", "log2", "log10"):
        v += [-2.0, 1.0 + fi.eps, 1.0 - fi.eps / 2, -1.0 + fi.eps / 2]
    x = np.array(v, dtype=dtype)
    if name in ("sin", "cos", "tan"):  # nan beyond the limit: test_trig_beyond_limit_is_nan
        x = x[~(np.abs(x) > vm.TRIG_MAX_ARG[np.dtype(dtype).name])]
    return x


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("name", NAMES)
def test_special_values(name, dt):
    """inf, nan, signed zeros, subnormals and the overflow/underflow edges: within the bound of
    the correctly rounded result; zeros and infinities exactly, with their sign."""
    dtype = DTYPES[dt]
    x = special_inputs(name, dtype)
    got = apply(name, dt, x)
    ref = reference(name, x)
    err = ulp_error(got, ref, dtype)
    bound = MAX_ULP[name][0 if dt == "f64" else 1]
    assert err.max() <= bound, (x[np.argmax(err)], got[np.argmax(err)])
    with np.errstate(over="ignore"):
        ref_d = ref.astype(dtype)
    exact = (ref_d == 0) | np.isinf(ref_d)
    np.testing.assert_array_equal(got[exact], ref_d[exact])
    np.testing.assert_array_equal(np.signbit(got[exact]), np.signbit(ref_d[exact]))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref_d))


EXACT = [
    ("exp", 0.0, 1.0),
    ("exp", -0.0, 1.0),
    ("log", 1.0, 0.0),
    ("log", 0.0, -np.inf),
    ("log", -0.0, -np.inf),
    ("log", np.inf, np.inf),
    ("log1p", 0.0, 0.0),
    ("log1p", -0.0, -0.0),
    ("log1p", -1.0, -np.inf),
    ("expm1", 0.0, 0.0),
    ("expm1", -0.0, -0.0),
    ("expm1", -np.inf, -1.0),
    ("sin", 0.0, 0.0),
    ("sin", -0.0, -0.0),
    ("cos", 0.0, 1.0),
    ("cos", -0.0, 1.0),
    ("tan", 0.0, 0.0),
    ("tan", -0.0, -0.0),
    ("tanh", 0.0, 0.0),
    ("tanh", -0.0, -0.0),
    ("tanh", 30.0, 1.0),
    ("tanh", -30.0, -1.0),
    ("tanh", np.inf, 1.0),
    ("tanh", -np.inf, -1.0),
    ("sinh", -0.0, -0.0),
    ("cosh", 0.0, 1.0),
    ("cosh", -np.inf, np.inf),
    ("arctan", -0.0, -0.0),
    ("arcsin", -0.0, -0.0),
    ("arcsin", 1.0, np.pi / 2),
    ("arccos", 1.0, 0.0),
    ("arccos", -1.0, np.pi),
    ("arccos", 0.0, np.pi / 2),
    ("arctan", np.inf, np.pi / 2),
    ("arctan", -np.inf, -np.pi / 2),
    ("exp2", 3.0, 8.0),
    ("exp2", -1.0, 0.5),
    ("exp2", 0.0, 1.0),
    ("exp2", -0.0, 1.0),
    ("exp2", np.inf, np.inf),
    ("exp2", -np.inf, 0.0),
    ("log2", 8.0, 3.0),
    ("log2", 1.0, 0.0),
    ("log2", 0.0, -np.inf),
    ("log2", np.inf, np.inf),
    ("log10", 1000.0, 3.0),
    ("log10", 0.1, -1.0),
    ("log10", 1.0, 0.0),
    ("log10", -0.0, -np.inf),
    ("exp", 710.0, np.inf),
    ("exp", -746.0, 0.0),
    ("sinh", 711.0, np.inf),
    ("sinh", -711.0, -np.inf),
    ("cbrt", 27.0, 3.0),
    ("cbrt", -8.0, -2.0),
    ("cbrt", 0.125, 0.5),
    ("cbrt", -0.0, -0.0),
    ("cbrt", -np.inf, -np.inf),
]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize(("name", "x", "expected"), EXACT)
def test_exact_values(name, x, expected, dt):
    dtype = DTYPES[dt]
    got = apply(name, dt, np.array([x], dtype=dtype))[0]
    want = dtype(expected)
    assert got == want and np.signbit(got) == np.signbit(want), (got, want)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("name", NAMES)
def test_nan_propagates(name, dt):
    dtype = DTYPES[dt]
    assert np.isnan(apply(name, dt, np.array([np.nan, -np.nan], dtype=dtype))).all()


def test_domain_errors_give_nan():
    for dt, dtype in DTYPES.items():
        assert np.isnan(apply("log", dt, np.array([-1.0, -1e-30, -np.inf], dtype))).all()
        assert np.isnan(apply("log1p", dt, np.array([-1.5, -np.inf], dtype))).all()
        for name in ("arcsin", "arccos"):
            assert np.isnan(apply(name, dt, np.array([1.0000001, -2.0, np.inf], dtype))).all()


def test_sincos_matches_sin_and_cos():
    for dt, dtype in DTYPES.items():
        x = samples("sin", dtype, n=20_000)
        sc = _scalar(vm.get("sincos", dtype))
        pairs = np.array([sc(v) for v in x[:2000]], dtype=dtype)
        for col, name in enumerate(("sin", "cos")):
            err = ulp_error(pairs[:, col], reference(name, x[:2000]), dtype)
            assert err.max() <= MAX_ULP["tan"][0 if dt == "f64" else 1], name


def test_float32_sincos_dense_and_in_float32_polynomials():
    """The private float32-arithmetic sin, cos and sincos (reduced in float64, evaluated in
    float32; slower than the default, docs/vmath.md): over the dense sin samples (next to
    multiples of pi/2, every binade up to 2**45) within 0.61 ulp of the correctly rounded
    results, sincos equal to sin and cos, and the loop holds packed single-precision FMAs."""
    x = samples("sin", F32, n=200_000, seed=7)
    sc, sin1, cos1 = _trig.sincos_f32_arith, _trig.sin_f32_arith, _trig.cos_f32_arith

    @njit
    def loop(x, s, c, s1, c1):
        for i in range(x.size):
            s[i], c[i] = sc(x[i])
            s1[i], c1[i] = sin1(x[i]), cos1(x[i])

    s, c, s1, c1 = (np.empty_like(x) for _ in range(4))
    loop(x, s, c, s1, c1)
    for name, got, alone in (("sin", s, s1), ("cos", c, c1)):
        np.testing.assert_array_equal(got, alone)
        err = ulp_error(got, reference(name, x), F32)
        top = np.argsort(err)[-RECHECK:]
        exact = cr.ulp_errors(got[top], cr.reference(name, x[top]), F32)
        assert err.max() <= 0.61 and exact.max() <= 0.61, (name, x[top][np.argmax(exact)])
    if _host_has("avx2") and _host_has("fma"):
        asm = loop.inspect_asm(loop.signatures[0])
        assert re.search(r"vfn?m(?:add|sub)\d+ps\s+[^\n]*%[yz]mm", asm), "no packed float32 FMA"


# --- types and compilation -------------------------------------------------------------------------


def test_function_table():
    assert set(NAMES) >= {
        "exp",
        "expm1",
        "log",
        "log1p",
        "sin",
        "cos",
        "tan",
        "tanh",
        "arctan",
        "sinh",
        "cosh",
        "arcsin",
        "arccos",
    }
    for name, (f64, f32) in vm.FUNCTIONS.items():
        assert f64 is getattr(vm, f"{name}_f64") and f32 is getattr(vm, f"{name}_f32")
        assert vm.get(name, "float64") is f64 and vm.get(name, np.float32) is f32
    with pytest.raises(TypeError):
        vm.get("exp", np.int64)
    with pytest.raises(KeyError):
        vm.get("nope", np.float64)


# Implemented in float32 arithmetic; the others compute in float64 on purpose (docs/vmath.md).
PURE_F32 = [
    "exp",
    "expm1",
    "log",
    "log1p",
    "sinh",
    "cosh",
    "arctan",
    "arccos",
    "cbrt",
]
PURE_F32_BINARY = ["arctan2"]


@pytest.mark.parametrize("name", NAMES)
def test_float32_stays_float32(name):
    loop = loop_for(name, "f32")
    loop(np.ones(4, F32), np.empty(4, F32))
    scalar = _scalar(vm.get(name, F32))
    scalar(F32(0.5))
    assert scalar.nopython_signatures[0].return_type.name == "float32"
    if name in PURE_F32:
        ir_text = loop.inspect_llvm(loop.signatures[0])
        assert "fpext" not in ir_text and "<8 x double>" not in ir_text, "promoted to float64"


def _host_has(feature):
    try:
        import llvmlite.binding as llvm

        features = llvm.get_host_cpu_features()
        return bool(features.get(feature, False))
    except Exception:  # pragma: no cover - fall back to /proc/cpuinfo
        try:
            with open("/proc/cpuinfo") as fh:
                return feature in fh.read().split()
        except OSError:
            return False


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("name", NAMES)
def test_loop_is_vectorised(name, dt):
    """The element-wise loop compiles to packed FMAs on ymm/zmm registers."""
    if not (_host_has("avx2") and _host_has("fma")):
        pytest.skip("host CPU has no AVX2/FMA: nothing to check")
    loop = loop_for(name, dt)
    loop(np.ones(64, DTYPES[dt]), np.empty(64, DTYPES[dt]))
    asm = loop.inspect_asm(loop.signatures[0])
    packed = re.findall(r"vfn?m(?:add|sub)\d+p[sd]\s+[^\n]*%[yz]mm", asm)
    assert len(packed) >= 3, f"{name}_{dt}: no packed FMA in the loop"


def test_compiled_for_the_cpu_numba_is_told():
    """CI runs these tests again with Numba compiling for Haswell (.ci/run): the loops must
    then use AVX2's 256-bit registers and no AVX-512 ones, whatever the CPU."""
    if os.environ.get("NUMBA_CPU_NAME") != "haswell":
        pytest.skip("Numba compiles for the host CPU here")
    from numba.core.registry import cpu_target

    _, cpu, features = cpu_target.target_context.codegen().magic_tuple()
    assert cpu == "haswell" and "+avx512" not in features, (cpu, features)
    for dt, dtype in DTYPES.items():
        loop = loop_for("exp", dt)
        loop(np.ones(64, dtype), np.empty(64, dtype))
        asm = loop.inspect_asm(loop.signatures[0])
        assert "%zmm" not in asm and re.search(r"%k[0-7]\b", asm) is None  # no AVX-512
        assert re.search(r"vfn?m(?:add|sub)\d+p[sd]\s+[^\n]*%ymm", asm), "no packed FMA"


@pytest.mark.parametrize("dt", DTYPES)
def test_parallel_prange_and_generated_source(dt):
    """Called the way the code generator does: ``_vm.<name>_<dt>(v)`` in exec'd source, inside
    a ``parallel=True`` prange loop and a plain loop."""
    dtype = DTYPES[dt]
    src = f"""
from tracegrad import vmath as _vm
from numba import njit, prange

@njit(parallel=True)
def kernel_par(x, out):
    for i in prange(x.size):
        v = x[i]
        out[i] = _vm.sin_{dt}(v) * _vm.exp_{dt}(-v * v) + _vm.tanh_{dt}(v) * v

@njit
def kernel_seq(x, out):
    for i in range(x.size):
        v = x[i]
        out[i] = _vm.sin_{dt}(v) * _vm.exp_{dt}(-v * v) + _vm.tanh_{dt}(v) * v
"""
    ns: dict = {}
    exec(compile(src, f"<generated {dt}>", "exec"), ns)
    x = np.linspace(-3, 3, 10_001).astype(dtype)
    out_par, out_seq = np.empty_like(x), np.empty_like(x)
    ns["kernel_par"](x, out_par)
    ns["kernel_seq"](x, out_seq)
    assert out_par.dtype == dtype
    np.testing.assert_array_equal(out_par, out_seq)
    xd = x.astype(F64)
    want = np.sin(xd) * np.exp(-xd * xd) + np.tanh(xd) * xd
    np.testing.assert_allclose(
        out_par, want, rtol=1e-13 if dt == "f64" else 1e-5, atol=1e-6 if dt == "f32" else 1e-15
    )


def test_fastmath_caller_keeps_accuracy():
    """vmath's operations keep their own flags when inlined into a fastmath=True kernel."""
    for name in ("exp", "sin", "log1p", "tanh"):
        for dt, dtype in DTYPES.items():
            loop = _make_loop(vm.get(name, dtype), fastmath=True)
            x = samples(name, dtype, n=5_000)
            out = np.empty_like(x)
            loop(x, out)
            finite = np.isfinite(x)
            err = ulp_error(out[finite], reference(name, x[finite]), dtype)
            assert err.max() <= MAX_ULP[name][0 if dt == "f64" else 1], (name, dt)


def test_big_fused_kernel_is_vectorised():
    """Many calls in one loop body, the shape of a generated value-and-gradient kernel: every
    call must be inlined (forceinline), or the loop stays scalar."""
    if not (_host_has("avx2") and _host_has("fma")):
        pytest.skip("host CPU has no AVX2/FMA: nothing to check")
    sin, cos, exp, tanh, sinh = vm.sin_f64, vm.cos_f64, vm.exp_f64, vm.tanh_f64, vm.sinh_f64

    @njit(fastmath={"reassoc", "contract"})
    def kernel(x, grad):
        total = 0.0
        for i in range(x.size):
            v = x[i]
            s, c, e, t = sin(v), cos(v), exp(-v * v), tanh(v)
            total += s * e + t * v * v * v + sinh(v)
            grad[i] = c * e - 2 * v * s * e + (1 - t * t) * v * v * v + 3 * v * v * t
        return total

    x = np.linspace(-2, 2, 1001)
    kernel(x, np.empty_like(x))
    asm = kernel.inspect_asm(kernel.signatures[0])
    assert re.search(r"call[^\n]*vmath", asm) is None, "a vmath function was not inlined"
    assert (
        len(
            re.findall(
                r"vfn?m(?:add|sub)\d+pd\s+[^\n]*%zmm|vfn?m(?:add|sub)\d+pd\s+[^\n]*%ymm", asm
            )
        )
        >= 20
    )


def test_accepts_other_scalar_types():
    assert vm.exp_f64(0) == 1.0
    assert vm.log_f32(1) == 0.0
    assert njit(lambda v: vm.exp_f32(v))(np.float64(0.0)) == 1.0


# --- mode switch -----------------------------------------------------------------------------------


def test_math_mode_reads_environment(monkeypatch):
    vm.set_math_mode(None)
    monkeypatch.delenv("TRACEGRAD_MATH", raising=False)
    assert vm.math_mode() == "vector"
    monkeypatch.setenv("TRACEGRAD_MATH", "libm")
    assert vm.math_mode() == "libm"  # read at call time
    monkeypatch.setenv("TRACEGRAD_MATH", "vector")
    assert vm.math_mode() == "vector"
    monkeypatch.setenv("TRACEGRAD_MATH", "svml")
    with pytest.raises(ValueError, match=r"vector.*libm"):
        vm.math_mode()


def test_set_math_mode_overrides(monkeypatch):
    monkeypatch.setenv("TRACEGRAD_MATH", "libm")
    try:
        vm.set_math_mode("vector")
        assert vm.math_mode() == "vector"
        with pytest.raises(ValueError, match=r"vector.*libm"):
            vm.set_math_mode("fast")
        assert vm.math_mode() == "vector"
        vm.set_math_mode(None)
        assert vm.math_mode() == "libm"
    finally:
        vm.set_math_mode(None)


def test_math_reference_sanity():
    """A few textbook values, independent of the reference machinery."""
    assert abs(vm.exp_f64(1.0) - math.e) <= 4.5e-16  # 0.67 ulp: the neighbour of e
    assert vm.log_f64(math.e) == 1.0
    assert abs(vm.sin_f64(math.pi / 6) - 0.5) <= 1.2e-16
    assert vm.arctan_f64(1.0) == math.pi / 4


# --- functions of two arguments (arctan2, hypot) ----------------------------------------------------

BINARY_ULP = {"arctan2": (2.1, 1.95), "hypot": (0.85, 0.51)}


@functools.cache
def binary_loop_for(name, dt):
    f = vm.get(name, DTYPES[dt])

    @njit
    def loop(y, x, out):
        for i in range(x.size):
            out[i] = f(y[i], x[i])

    return loop


def apply2(name, dt, y, x):
    out = np.empty_like(x)
    binary_loop_for(name, dt)(y, x, out)
    return out


def binary_samples(dtype, n=100_000, seed=1):
    """Pairs over every binade and both signs, pairs of nearby magnitudes (the hard region of
    both functions), and every pair of special values."""
    rng = np.random.default_rng(seed)
    fi = np.finfo(dtype)

    def signed(v):
        return v * np.where(rng.random(v.size) < 0.5, -1, 1).astype(dtype)

    wide_y = signed(_bits_range(rng, fi.smallest_subnormal, fi.max, n, dtype))
    wide_x = signed(_bits_range(rng, fi.smallest_subnormal, fi.max, n, dtype))
    near_x = signed(rng.uniform(0.1, 10, n).astype(dtype))
    near_y = (near_x * rng.uniform(0.5, 2.0, n)).astype(dtype)
    edge = dtype(fi.max / np.sqrt(2))  # hypot(edge, edge) is next to the overflow threshold
    special = np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, fi.smallest_subnormal, fi.max, -fi.tiny]
        + [edge, np.nextafter(edge, dtype(np.inf)), np.nextafter(edge, dtype(0)), 3 * fi.tiny],
        dtype,
    )
    sy, sx = (a.ravel() for a in np.meshgrid(special, special))
    return np.concatenate([wide_y, near_y, sy]), np.concatenate([wide_x, near_x, sx])


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("name", list(vm.BINARY))
def test_binary_accuracy_and_special_values(name, dt):
    dtype = DTYPES[dt]
    y, x = binary_samples(dtype)
    got = apply2(name, dt, y, x)
    assert got.dtype == dtype
    with np.errstate(all="ignore"):
        ref = getattr(np, name)(y.astype(np.longdouble), x.astype(np.longdouble))
        ref_d = ref.astype(dtype)
    err = ulp_error(got, ref, dtype)
    worst = int(np.argmax(err))
    bound = BINARY_ULP[name][0 if dt == "f64" else 1]
    assert err[worst] <= bound, (y[worst], x[worst], got[worst])
    top = np.argsort(err)[-RECHECK:]  # against the correctly rounded results
    exact = cr.ulp_errors(got[top], cr.reference(name, y[top], x[top]), dtype)
    finite = np.isfinite(err[top])
    assert exact[finite].max() <= bound, exact.max()
    # zeros, infinities and nan exactly as NumPy's, signs of zero included
    exact = (ref_d == 0) | np.isinf(ref_d)
    np.testing.assert_array_equal(got[exact], ref_d[exact])
    np.testing.assert_array_equal(np.signbit(got[exact]), np.signbit(ref_d[exact]))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref_d))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("name", list(vm.BINARY))
def test_binary_loop_is_vectorised(name, dt):
    if not (_host_has("avx2") and _host_has("fma")):
        pytest.skip("host CPU has no AVX2/FMA: nothing to check")
    loop = binary_loop_for(name, dt)
    ones = np.ones(64, DTYPES[dt])
    loop(ones, ones, np.empty_like(ones))
    asm = loop.inspect_asm(loop.signatures[0])
    assert re.search(r"call[^\n]*(atan2|hypot)", asm) is None, "a libm call in the loop"
    packed = re.findall(r"v\w+p[sd]\s+[^\n]*%[yz]mm", asm)
    assert len(packed) >= 3, f"{name}_{dt}: no packed arithmetic in the loop"


@pytest.mark.parametrize("name", list(vm.BINARY))
def test_binary_float32_stays_float32(name):
    loop = binary_loop_for(name, "f32")
    ones = np.ones(4, F32)
    loop(ones, ones, np.empty_like(ones))
    scalar = _scalar2(vm.get(name, F32))
    scalar(F32(0.5), F32(2.0))
    assert scalar.nopython_signatures[0].return_type.name == "float32"
    if name in PURE_F32_BINARY:
        ir_text = loop.inspect_llvm(loop.signatures[0])
        assert "fpext" not in ir_text and "double" not in ir_text, "promoted to float64"


def _scalar2(f):
    @njit
    def call(a, b):
        return f(a, b)

    return call


def test_hypot_float32_arithmetic_alternative():
    """vmath._root.hypot_f32_arith (not the default, benchmarks/bench_vmath_f32.py times it): in
    float32 throughout, within 0.9 ulp of the correctly rounded results, zeros, infinities and
    nan as NumPy's."""
    from tracegrad.vmath import _root

    f = _root.hypot_f32_arith

    @njit
    def loop(y, x, out):
        for i in range(x.size):
            out[i] = f(y[i], x[i])

    y, x = binary_samples(F32)
    got = np.empty_like(x)
    loop(y, x, got)
    ir_text = loop.inspect_llvm(loop.signatures[0])
    assert "fpext" not in ir_text and "double" not in ir_text
    with np.errstate(all="ignore"):
        ref = np.hypot(y.astype(np.longdouble), x.astype(np.longdouble))
        ref_d = ref.astype(F32)
    err = ulp_error(got, ref, F32)
    assert err.max() <= 0.9, (y[np.argmax(err)], x[np.argmax(err)])
    top = np.argsort(err)[-RECHECK:]
    assert cr.ulp_errors(got[top], cr.reference("hypot", y[top], x[top]), F32).max() <= 0.9
    exact = (ref_d == 0) | np.isinf(ref_d)
    np.testing.assert_array_equal(got[exact], ref_d[exact])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref_d))


def test_binary_table():
    for name, (f64, f32) in vm.BINARY.items():
        assert f64 is getattr(vm, f"{name}_f64") and f32 is getattr(vm, f"{name}_f32")
        assert vm.get(name, np.float64) is f64 and vm.get(name, "float32") is f32
    assert vm.arctan2_f64(1.0, 1.0) == math.pi / 4 and vm.hypot_f64(3.0, 4.0) == 5.0
