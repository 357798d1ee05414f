"""Throughput of tracegrad.vmath against NumPy ufuncs and Numba's libm calls.

    python3 benchmarks/bench_vmath.py            # print the tables
    python3 benchmarks/bench_vmath.py --write    # also update benchmarks/RESULTS.md

Two parts:

1. ns per element for each function, float64 and float32, on 2**16 elements (in cache), the
   median of many repeats: a jitted loop calling ``vmath.<name>_<dt>``, the NumPy ufunc with
   ``out=``, and a jitted loop calling ``math.<name>`` (a scalar libm call per element).
2. A fused value-and-gradient kernel, sum(sin(x)*exp(-x*x) + tanh(x)*x**3) and its gradient
   in one pass over 10**7 elements, with ``math.*`` or vmath calls, serial and with
   ``parallel=True`` prange; NumPy (several passes over memory) for scale.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import sys
import time

import numpy as np
from numba import njit, prange

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tracegrad import vmath as vm

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "RESULTS.md")
SECTION = "## Vectorised math"

LIBM = {"arctan": math.atan, "arcsin": math.asin, "arccos": math.acos}
DOMAIN = {"log": (1e-3, 10.0), "arcsin": (-1.0, 1.0), "arccos": (-1.0, 1.0), "log1p": (-0.9, 10.0)}


def _loop(f):
    @njit
    def loop(x, out):
        for i in range(x.size):
            out[i] = f(x[i])

    return loop


def _median_ns(call, n, repeats):
    call()  # compile / warm up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return float(np.median(times)) / n * 1e9


def per_function(n=2**16, repeats=300):
    rows = []
    for name in vm.FUNCTIONS:
        lo, hi = DOMAIN.get(name, (-3.0, 3.0))
        row = {"name": name}
        for dt, dtype in (("f64", np.float64), ("f32", np.float32)):
            x = np.random.default_rng(0).uniform(lo, hi, n).astype(dtype)
            out = np.empty_like(x)
            vec, lib = _loop(vm.get(name, dtype)), _loop(LIBM.get(name, getattr(math, name, None)))
            ufunc = getattr(np, name)
            row[dt] = {
                "vmath": _median_ns(lambda f=vec, x=x, out=out: f(x, out), n, repeats),
                "numpy": _median_ns(lambda f=ufunc, x=x, out=out: f(x, out=out), n, repeats),
                "libm": _median_ns(lambda f=lib, x=x, out=out: f(x, out), n, repeats),
            }
        rows.append(row)
        print(f"  {name}: done", file=sys.stderr, flush=True)
    return rows


# --- the fused kernel -------------------------------------------------------------------------


def _w1_kernel(fns, parallel, fastmath):
    """value = sum(sin(x) e^{-x^2} + tanh(x) x^3), grad = d value / dx, in one pass.

    ``fns`` is (sincos, exp, tanh); sincos returns the pair.
    """
    sincos, exp, tanh = fns
    rng = prange if parallel else range

    @njit(parallel=parallel, fastmath=fastmath)
    def kernel(x, grad):
        total = 0.0
        for i in rng(x.size):
            v = x[i]
            s, c = sincos(v)
            e, t = exp(-v * v), tanh(v)
            v2 = v * v
            total += s * e + t * v2 * v
            grad[i] = c * e - 2 * v * s * e + (1 - t * t) * v2 * v + 3 * v2 * t
        return total

    return kernel


def _pair(sin, cos):
    # forceinline: a wrapper that LLVM declines to inline would keep the kernel scalar.
    @njit(forceinline=True)
    def sincos(v):
        return sin(v), cos(v)

    return sincos


def _w1_numpy(x, grad):
    s, c, e, t = np.sin(x), np.cos(x), np.exp(-x * x), np.tanh(x)
    x2 = x * x
    grad[...] = c * e - 2 * x * s * e + (1 - t * t) * x2 * x + 3 * x2 * t
    return float(np.sum(s * e + t * x2 * x))


def fused(n=10**7, repeats=5):
    """The fused kernel with each set of math functions, serial and prange, without fast-math
    ("strict") and with reassociation allowed for the kernel's own arithmetic ("reassoc"),
    which the float sum needs before LLVM will vectorise the loop.  (vmath's own operations
    keep their flags when inlined, so their accuracy is the same either way.)"""
    results = []
    for dt, dtype in (("f64", np.float64), ("f32", np.float32)):
        x = np.random.default_rng(1).uniform(-3, 3, n).astype(dtype)
        grad = np.empty_like(x)
        exp, tanh = vm.get("exp", dtype), vm.get("tanh", dtype)
        sets = {
            "math.*": (_pair(math.sin, math.cos), math.exp, math.tanh),
            "vmath sin, cos": (_pair(vm.get("sin", dtype), vm.get("cos", dtype)), exp, tanh),
            "vmath sincos": (vm.get("sincos", dtype), exp, tanh),
        }
        want = _w1_numpy(x.astype(np.float64), np.empty(n))
        for fm_label, fm in (("strict", False), ("reassoc", {"reassoc", "contract"})):
            for par_label, par in (("serial", False), ("prange", True)):
                for label, fns in sets.items():
                    kernel = _w1_kernel(fns, par, fm)
                    value = kernel(x, grad)
                    ms = _median_ns(lambda k=kernel, x=x, g=grad: k(x, g), 1, repeats) / 1e6
                    results.append((dt, f"{label}, {par_label}, {fm_label}", ms, value, want))
                    print(f"  {dt} {results[-1][1]}: {ms:.1f} ms", file=sys.stderr, flush=True)
        ms = _median_ns(lambda x=x, g=grad: _w1_numpy(x, g), 1, repeats) / 1e6
        results.append((dt, "NumPy, unfused (several passes)", ms, _w1_numpy(x, grad), want))
    return results


# --- report -----------------------------------------------------------------------------------


def report(rows, w1):
    lines = ["### Per function: ns per element (2^16 elements in cache, median)", ""]
    lines.append(
        "| function | f64 vmath | f64 NumPy | f64 libm loop | f32 vmath | f32 NumPy | f32 libm loop |"
    )
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        cells = [f"{r[dt][k]:.2f}" for dt in ("f64", "f32") for k in ("vmath", "numpy", "libm")]
        lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    lines += ["", "### Fused value + gradient, 10^7 elements: ms (median)", ""]
    lines.append("| dtype | kernel | ms | value | value (NumPy, float64) |")
    lines.append("|---|---|---:|---:|---:|")
    for dt, label, ms, value, want in w1:
        lines.append(f"| {dt} | {label} | {ms:.1f} | {value:.9g} | {want:.9g} |")
    return "\n".join(lines)


def write_section(body):
    """Replace (or append) the ``## Vectorised math`` section of RESULTS.md, leaving the
    other sections as they are."""
    text = "# Benchmark results\n"
    if os.path.exists(RESULTS):
        with open(RESULTS) as fh:
            text = fh.read()
    start = text.find(SECTION)
    if start >= 0:
        nxt = text.find("\n## ", start + len(SECTION))
        end = len(text) if nxt < 0 else nxt + 1
        text = text[:start] + body.rstrip() + "\n" + ("\n" + text[end:] if nxt >= 0 else "")
    else:
        text = text.rstrip() + "\n\n" + body.rstrip() + "\n"
    with open(RESULTS, "w") as fh:
        fh.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    ap.add_argument("--notes", default="", help="a file whose text goes under the tables")
    args = ap.parse_args()
    rows = per_function()
    w1 = fused()
    tables = report(rows, w1)
    print(tables)
    if args.write:
        head = (
            f"{SECTION}\n\n"
            f"`benchmarks/bench_vmath.py`, {datetime.date.today().isoformat()}, "
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
            "numpy " + np.__version__ + ", numba " + __import__("numba").__version__ + ". "
            "Medians on a noisy 2-core machine: differences under ~15% are not significant.\n\n"
        )
        notes = ""
        if args.notes:
            with open(args.notes) as fh:
                notes = fh.read().strip() + "\n"
        write_section(head + tables + "\n\n" + notes)


if __name__ == "__main__":
    main()
