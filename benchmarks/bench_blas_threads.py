"""The thin MLP's step under four rules for small products' threads, idle or loaded.

    python3 benchmarks/bench_blas_threads.py                 # idle machine, 2 rounds
    python3 benchmarks/bench_blas_threads.py --load 2        # with 2 busy processes beside it
    python3 benchmarks/bench_blas_threads.py --jax           # and JAX's step, after each round

The rules: "pooled" (the default: OpenBLAS on one thread for the program's whole call, each
product shared out over tracegrad's threads, loops on all threads: cpu/products.py), and, with
pooled products off (loops then on one thread beside OpenBLAS), "one" (every small product on one
OpenBLAS thread), "all" (every product on all of OpenBLAS's threads) and "chosen" (each program
times its calls with both and keeps the faster: `blas_threads.ThreadChoice`). Each rule runs in a
fresh process, in turn, for the 10-64-64-1 network of `bench_first_call.py` (value_and_grad,
float64 and float32, N = 2,048 and 16,384), and prints the median step after 20 warm-up calls.
Only ratios within one run mean anything on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CASES = [(2048, "float64"), (16384, "float64"), (2048, "float32"), (16384, "float32")]

CHILD = """
import json, os, sys
os.environ["TRACEGRAD_TIERED"] = "0"
sys.path[:0] = [{root!r}, {here!r}]
import numpy as np
import bench_first_call as B
import tracegrad as tg
from tracegrad.runtime import blas_threads

rule = sys.argv[1]
if rule != "pooled":
    from tracegrad.cpu import program

    program.POOLED_PRODUCTS = False
if rule == "one":  # never leave one thread
    blas_threads.ThreadChoice._record = lambda self, setting, seconds: None
elif rule == "all":  # every product counts as large
    blas_threads.SMALL_PRODUCT = 0
ns = {{"np": np}}
exec(B.THIN, ns)
out = {{}}
for n, d in {cases!r}:
    params, X, y = ns["thin_args"](n, d)
    g = tg.value_and_grad(ns["thin"], backend="cpu")
    for _ in range(20):
        g(params, X, y)
    out[f"{{n}}:{{d}}"] = B.per_step(g, params, X, y)
print(json.dumps(out))
"""


def run(rule: str) -> dict:
    code = CHILD.format(root=ROOT, here=HERE, cases=CASES)
    done = subprocess.run(
        [sys.executable, "-c", code, rule], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--load", type=int, default=0, help="busy processes to run beside it")
    parser.add_argument("--jax", action="store_true", help="JAX's step too (bench_first_call's)")
    parser.add_argument("--jax-python", default="/tmp/benchenv/bin/python")
    args = parser.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    rules = ("pooled", "one", "all", "chosen")
    rows: dict[str, list[dict]] = {rule: [] for rule in rules}
    try:
        for _ in range(args.rounds):
            for rule in rules:
                rows[rule].append(run(rule))
            if args.jax:
                sys.path[:0] = [ROOT, HERE]
                import bench_first_call as B

                env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
                cases = ",".join(f"{n}:{d}" for n, d in CASES)
                rows.setdefault("JAX jit", []).append(
                    B.run_json(args.jax_python, B.JAX_THIN, [cases, "15"], env)
                )
    finally:
        for p in busy:
            p.kill()
    header = " | ".join(f"{n:,} {d.replace('float', 'f')}" for n, d in CASES)
    print(f"per step, ms ({args.load} busy processes beside it); one entry per round\n")
    print(f"| rule | {header} |")
    print("|---|" + "---:|" * len(CASES))
    for rule, results in rows.items():
        cells = [", ".join(f"{r[f'{n}:{d}'] * 1e3:.2f}" for r in results) for n, d in CASES]
        print(f"| {rule} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
