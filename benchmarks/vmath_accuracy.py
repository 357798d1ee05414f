"""The largest error in ulps of every tracegrad.vmath function, against mpmath.

    python3 benchmarks/vmath_accuracy.py                  # 200,000 points per region
    python3 benchmarks/vmath_accuracy.py --n 1000000 --seeds 3 --names arcsin arccos
    python3 benchmarks/vmath_accuracy.py --exhaustive arcsin   # every float32 in [-1, 1]

Each function is measured on the test suite's samples (tests/test_vmath.py: every binade of the
domain, the subnormals, the overflow and underflow edges, next to multiples of pi/2 and the
other hard regions), drawn again with more points and other seeds. The error of every point is
measured against np.longdouble (glibc's x87 functions, 11 bits more than float64); the points
with the largest errors, and a random share of the rest, are then measured again against
mpmath (correctly rounded, tests/correctly_rounded.py), and the table gives mpmath's figure.

Numba compiles for the host CPU unless NUMBA_CPU_NAME (and NUMBA_CPU_FEATURES) say otherwise:
`NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=` measures AVX2 code, `NUMBA_CPU_NAME=x86-64
NUMBA_CPU_FEATURES=` code without FMA or AVX.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import correctly_rounded as cr
import test_vmath as tv

from tracegrad import vmath as vm

RECHECK_WORST = 400  # points with the largest long-double error, measured again with mpmath
RECHECK_RANDOM = 2000  # and so many random others


def measure(name, dt, n, seeds):
    """(mpmath max ulp, its argument, long-double max ulp, points) over the samples."""
    dtype = tv.DTYPES[dt]
    x = np.concatenate([tv.samples(name, dtype, n=n, seed=s) for s in range(seeds)])
    x = x[np.isfinite(x)]
    got = tv.apply(name, dt, x)
    err = tv.ulp_error(got, tv.reference(name, x), dtype)
    rng = np.random.default_rng(0)
    pick = np.unique(
        np.concatenate(
            [np.argsort(err)[-RECHECK_WORST:], rng.integers(0, x.size, min(RECHECK_RANDOM, x.size))]
        )
    )
    mp_err = cr.ulp_errors(got[pick], cr.reference(name, x[pick]), dtype)
    worst = int(np.argmax(mp_err))
    return float(mp_err[worst]), x[pick][worst], float(err.max()), x.size


def exhaustive(name, lo, hi, chunk=1 << 24):
    """The largest float32 error of ``name`` over every float32 in [lo, hi], against the
    float64 result of np.longdouble (an error in float64 far below a float32 ulp)."""
    it = np.int32
    start = int(np.array(np.float32(0.0)).view(it))
    stop = int(np.array(np.float32(max(abs(lo), abs(hi)))).view(it)) + 1
    worst, at = 0.0, None
    for sign in (1.0, -1.0) if lo < 0 < hi else (1.0 if hi > 0 else -1.0,):
        for a in range(start, stop, chunk):
            x = np.arange(a, min(a + chunk, stop), dtype=it).view(np.float32) * np.float32(sign)
            x = x[(x >= lo) & (x <= hi)]
            got = tv.apply(name, "f32", x)
            err = tv.ulp_error(got, tv.reference(name, x), np.float32)
            i = int(np.argmax(err))
            if err[i] > worst:
                worst, at = float(err[i]), x[i]
    mp_err = cr.ulp_errors(
        tv.apply(name, "f32", np.array([at], np.float32)), cr.reference(name, [at]), np.float32
    )
    return float(mp_err[0]), at


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000, help="points per sample region")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--names", nargs="*", default=list(vm.FUNCTIONS))
    ap.add_argument("--dtypes", nargs="*", default=list(tv.DTYPES))
    ap.add_argument("--exhaustive", nargs="*", default=[], help="float32 arcsin, arccos")
    args = ap.parse_args(argv)
    print(f"target: NUMBA_CPU_NAME={os.environ.get('NUMBA_CPU_NAME', '(host)')}")
    print("| function | dtype | max ulp (mpmath) | at x | long double max | points | bound |")
    print("|---|---|---:|---|---:|---:|---:|")
    for name in args.names:
        for dt in args.dtypes:
            t = time.perf_counter()
            mp_max, at, ld_max, points = measure(name, dt, args.n, args.seeds)
            bound = tv.MAX_ULP[name][0 if dt == "f64" else 1]
            print(
                f"| {name} | {dt} | {mp_max:.3f} | {at!r} | {ld_max:.3f} | {points} | {bound} |"
                f"  ({time.perf_counter() - t:.0f} s)",
                flush=True,
            )
    for name in args.exhaustive:
        domain = (-1.0, 1.0)
        mp_max, at = exhaustive(name, *domain)
        print(f"every float32 in {list(domain)}: {name} max {mp_max:.3f} ulp at {at!r}", flush=True)


if __name__ == "__main__":
    main()
