"""Compile time and memory of unrolled loops' gradients on the cpu backend, against their length.

    python3 benchmarks/bench_unrolled_compile.py [--steps 50 100 200 1000] [--programs ...]

Each measurement runs in a fresh process (no disk cache, first tier only: TRACEGRAD_CACHE_DIR=off,
TRACEGRAD_TIERED=0), which reports the seconds of its first call of `tg.grad(f, backend="cpu")`
and its peak resident memory; the numpy backend's first call of the same gradient is measured in
the same process as the floor (tracing and differentiating, no compiling). Programs:

- `two_back`: `x, y = sin(x) * 0.9 + 0.1 * y, x`: reads a value two iterations back; rolled into
  one scan with two carries (tracing/rolling), so its size does not depend on the steps.
- `irregular`: each step one of three bodies, in a fixed random order: no period to roll, so the
  gradient stays straight-line code, one fused loop of thousands of ops that fusion/split.py cuts
  into loops of at most 256 ops.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r"""
import resource, sys, time
import numpy as np
import tracegrad as tg

N, NAME = int(sys.argv[1]), sys.argv[2]

def two_back(x):
    y = x * 0.5
    for t in range(N):
        x, y = np.sin(x) * 0.9 + 0.1 * y, x
    return np.sum(x + y)

CHOICES = [int(c) for c in np.random.default_rng(0).integers(0, 3, N)]

def irregular(x):
    for t, c in enumerate(CHOICES):
        if c == 0:
            x = np.sin(x) * 0.9
        elif c == 1:
            x = np.cos(x) * 0.8 + 0.1 * x
        else:
            x = np.tanh(x * 1.1)
    return np.sum(x)

f = {"two_back": two_back, "irregular": irregular}[NAME]
x = np.linspace(-1.0, 1.0, 64)
t = time.perf_counter()
ref = tg.grad(f, backend="numpy")(x)
t_numpy = time.perf_counter() - t
t = time.perf_counter()
got = tg.grad(f, backend="cpu")(x)
t_cpu = time.perf_counter() - t
err = float(np.max(np.abs(got - ref)) / max(1e-300, float(np.max(np.abs(ref)))))
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("RESULT", t_numpy, t_cpu, rss, err)
"""


def measure(steps: int, name: str, timeout: float) -> dict:
    env = dict(os.environ, TRACEGRAD_CACHE_DIR="off", TRACEGRAD_TIERED="0")
    try:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(steps), name],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"program": name, "steps": steps, "error": f"over {timeout:.0f} s"}
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")), None)
    if line is None:
        return {"program": name, "steps": steps, "error": out.stderr.strip()[-300:]}
    t_numpy, t_cpu, rss, err = map(float, line.split()[1:])
    return {
        "program": name,
        "steps": steps,
        "numpy_s": t_numpy,
        "cpu_s": t_cpu,
        "rss_mb": rss,
        "rel_err": err,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, nargs="+", default=[50, 100, 200, 1000])
    parser.add_argument("--programs", nargs="+", default=["two_back", "irregular"])
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    rows = []
    print(
        "| program | steps | numpy first call (s) | cpu first call (s) | cpu / numpy | peak RSS (MB) | rel. error |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in args.programs:
        for steps in args.steps:
            r = measure(steps, name, args.timeout)
            rows.append(r)
            if "error" in r:
                print(f"| {name} | {steps} | - | - | - | - | {r['error']} |", flush=True)
                continue
            print(
                f"| {name} | {steps} | {r['numpy_s']:.1f} | {r['cpu_s']:.1f} | "
                f"{r['cpu_s'] / r['numpy_s']:.1f} | {r['rss_mb']:.0f} | {r['rel_err']:.1e} |",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
