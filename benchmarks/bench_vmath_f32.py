"""float32 vmath in float32 arithmetic against the float64-evaluated versions it replaced.

    python3 benchmarks/bench_vmath_f32.py                  # per-function table and W1
    python3 benchmarks/bench_vmath_f32.py --n 4000000 --rounds 9
    python3 benchmarks/bench_vmath_f32.py --skip-w1

1. Per function, ns per float32 element on ``--n`` elements (out of cache), each variant in
   a Numba loop compiled the way generated kernels are (``error_model="numpy"``, a plain loop
   calling ``_vm.<name>_f32``):
   - ``f32 arith``: the float32-arithmetic version (cbrt, arctan2, sin and cos: now the
     default; sin and cos reduce the argument in float64 first; exp2,
     log2, log10 and hypot: the private ``*_f32_arith`` ones, not the default);
   - ``f64 eval``: the float64-evaluated version, a copy of the code before the change (the
     float64 functions it calls did not change; still the default for exp2, log2, log10 and
     hypot);
   - NumPy's float32 ufunc with ``out=`` (the SIMD floor of this machine).
   The variants run interleaved, round after round, and the table gives medians and ratios.
2. W1, the float32 gradient of sum(sin(x) exp(-x^2) + tanh(x) x^3) on 10**7 float32 elements
   with ``backend="cpu"``, end to end: the working tree's tracegrad against the one of
   ``--before`` (a git revision, extracted with ``git archive`` to a temporary directory), each
   in its own process, the processes alternated, medians of the warm calls.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from numba import njit

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from tracegrad import vmath as vm  # noqa: E402
from tracegrad.vmath import _exp, _log, _root, _trig  # noqa: E402

F32, F64 = np.float32, np.float64
OPTS = dict(error_model="numpy", nogil=True)

# --- the float64-evaluated float32 versions, as they were before the change --------------------

cbrt_f64, arctan2_f64 = vm.cbrt_f64, vm.arctan2_f64


@njit(error_model="numpy", forceinline=True)
def old_cbrt_f32(x):
    return np.float32(cbrt_f64(np.float64(np.float32(x))))


@njit(error_model="numpy", forceinline=True)
def old_hypot_f32(x, y):
    x64, y64 = np.float64(np.float32(x)), np.float64(np.float32(y))
    res = np.float32(math.sqrt(x64 * x64 + y64 * y64))  # exact squares, one rounding
    return np.float32(np.inf) if (abs(x64) == np.inf) | (abs(y64) == np.inf) else res


@njit(error_model="numpy", forceinline=True)
def old_arctan2_f32(y, x):
    return np.float32(arctan2_f64(np.float64(np.float32(y)), np.float64(np.float32(x))))


#: name -> (float32 arithmetic, float64 evaluated, NumPy ufunc, arity)
CASES = {
    "cbrt": (vm.cbrt_f32, old_cbrt_f32, np.cbrt, 1),
    "hypot": (_root.hypot_f32_arith, old_hypot_f32, np.hypot, 2),
    "arctan2": (vm.arctan2_f32, old_arctan2_f32, np.arctan2, 2),
    "exp2": (_exp.exp2_f32_arith, vm.exp2_f32, np.exp2, 1),
    "log2": (_log.log2_f32_arith, vm.log2_f32, np.log2, 1),
    "log10": (_log.log10_f32_arith, vm.log10_f32, np.log10, 1),
    "sin": (vm.sin_f32, _trig.sin_f32_f64eval, np.sin, 1),
    "cos": (vm.cos_f32, _trig.cos_f32_f64eval, np.cos, 1),
}
DEFAULT_NOW = {"cbrt", "arctan2", "sin", "cos"}  # the float32-arithmetic version is the default
DOMAIN = {"exp2": (-20.0, 20.0), "log2": (1e-3, 1e3), "log10": (1e-3, 1e3)}


def _loop1(f):
    @njit(**OPTS)
    def loop(x, out):
        for i in range(x.size):
            out[i] = f(x[i])

    return loop


def _loop2(f):
    @njit(**OPTS)
    def loop(y, x, out):
        for i in range(x.size):
            out[i] = f(y[i], x[i])

    return loop


def per_function(n, rounds):
    rng = np.random.default_rng(0)
    rows = []
    for name, (new, old, ufunc, arity) in CASES.items():
        lo, hi = DOMAIN.get(name, (-10.0, 10.0))
        args = [rng.uniform(lo, hi, n).astype(F32) for _ in range(arity)]
        out = np.empty(n, F32)
        make = _loop1 if arity == 1 else _loop2
        new_loop, old_loop = make(new), make(old)
        calls = {
            "f32 arith": (new_loop, (*args, out), {}),
            "f64 eval": (old_loop, (*args, out), {}),
            "numpy f32": (ufunc, tuple(args), {"out": out}),
        }
        for f, pos, kw in calls.values():
            f(*pos, **kw)  # compile, warm up
        times = {k: [] for k in calls}
        for _ in range(rounds):
            for k, (f, pos, kw) in calls.items():  # interleaved
                t = time.perf_counter()
                f(*pos, **kw)
                times[k].append(time.perf_counter() - t)
        med = {k: float(np.median(v)) / n * 1e9 for k, v in times.items()}
        rows.append((name, med))
        print(
            f"  {name:8s} f32 arith {med['f32 arith']:6.2f}  f64 eval {med['f64 eval']:6.2f}  "
            f"numpy {med['numpy f32']:6.2f} ns/elt",
            file=sys.stderr,
            flush=True,
        )
    return rows


def table(rows):
    out = [
        "| function | default now | f32 arith ns | f64 eval ns | NumPy f32 ns "
        "| f64 eval / f32 arith | f32 arith / NumPy |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, m in rows:
        a, o, u = m["f32 arith"], m["f64 eval"], m["numpy f32"]
        default = "f32 arith" if name in DEFAULT_NOW else "f64 eval"
        out.append(
            f"| {name} | {default} | {a:.2f} | {o:.2f} | {u:.2f} | {o / a:.2f}x | {a / u:.2f}x |"
        )
    return "\n".join(out)


# --- W1 end to end ------------------------------------------------------------------------------

W1_CHILD = r"""
import sys, time, json
import numpy as np
import tracegrad as tg
x = np.random.default_rng(0).uniform(-2, 2, 10**7).astype(np.float32)
g = tg.grad(lambda x: np.sum(np.sin(x) * np.exp(-x**2) + np.tanh(x) * x**3), backend="cpu")
t = time.perf_counter(); r = g(x); first = time.perf_counter() - t
assert r.dtype == np.float32, r.dtype
ts = []
for _ in range(int(sys.argv[1])):
    t = time.perf_counter(); g(x); ts.append(time.perf_counter() - t)
print(json.dumps({"first": first, "warm": ts, "check": float(np.sum(r[:1000], dtype=np.float64)),
                  "file": tg.__file__}))
"""


def _w1_run(path, calls):
    env = dict(os.environ, PYTHONPATH=path)
    res = subprocess.run(
        [sys.executable, "-c", W1_CHILD, str(calls)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
    )
    import json

    return json.loads(res.stdout.strip().splitlines()[-1])


def w1(before, processes, calls):
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", ROOT, "archive", before, "tracegrad"], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        paths = {"before": tmp, "after": ROOT}
        warm = {k: [] for k in paths}
        checks = {}
        for _ in range(processes):
            for k, path in paths.items():  # alternated
                r = _w1_run(path, calls)
                assert r["file"].startswith(path), r["file"]
                warm[k].append(float(np.median(r["warm"])))
                checks[k] = r["check"]
                print(f"  W1 {k}: {warm[k][-1] * 1e3:.1f} ms", file=sys.stderr, flush=True)
    med = {k: float(np.median(v)) * 1e3 for k, v in warm.items()}
    best = {k: float(np.min(v)) * 1e3 for k, v in warm.items()}
    return med, best, checks


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--before", default="42ddbf3", help="git revision of the old vmath (W1)")
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--calls", type=int, default=7)
    ap.add_argument("--skip-w1", action="store_true")
    a = ap.parse_args()
    print(f"per function: n = {a.n}, {a.rounds} interleaved rounds, medians")
    print(table(per_function(a.n, a.rounds)))
    if not a.skip_w1:
        med, best, checks = w1(a.before, a.processes, a.calls)
        print(
            f"\nW1 float32 grad, 10**7 elements, medians of {a.processes} processes x {a.calls} "
            f"warm calls: before ({a.before}) {med['before']:.1f} ms, after {med['after']:.1f} ms, "
            f"after/before {med['after'] / med['before']:.3f} (best process: {best['before']:.1f} "
            f"and {best['after']:.1f} ms, {best['after'] / best['before']:.3f}); "
            f"gradient checksums {checks}"
        )


if __name__ == "__main__":
    main()
