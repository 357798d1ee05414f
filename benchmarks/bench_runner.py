"""The thin MLP's step with the compiled run (cpu/runner.py) and with the Python driver, A/B.

    python3 benchmarks/bench_runner.py              # 9 rounds, the four cases of goal 3
    python3 benchmarks/bench_runner.py --rounds 5 --sizes 64,2048

Both programs are built in this process from the same graph (`program.RUNNER` on and off), warmed
up, then timed in alternating blocks of calls, so the machine's load falls on both alike. Prints,
per case, the median step of each and the median of the per-round ratios (runner / driver: below
1 is faster). The results of the two are compared too (equal within rounding: the products are
split into other chunks).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]
os.environ.setdefault("TRACEGRAD_TIERED", "0")

import numpy as np  # noqa: E402

import bench_first_call as B  # noqa: E402
import tracegrad as tg  # noqa: E402
from tracegrad.runtime import backends  # noqa: E402
from tracegrad import passes  # noqa: E402
from tracegrad.cpu import program as cpu_program  # noqa: E402


def _program(graph, runner: bool):
    cpu_program.RUNNER = runner
    try:
        return backends.get_backend("cpu").compile(graph)
    finally:
        cpu_program.RUNNER = True


def _block(program, args, calls: int) -> float:
    t = time.perf_counter()
    for _ in range(calls):
        program(args)
    return (time.perf_counter() - t) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--sizes", default="2048,16384")
    parser.add_argument("--dtypes", default="float64,float32")
    opts = parser.parse_args()
    ns: dict = {"np": np}
    exec(B.THIN, ns)
    grad = tg.value_and_grad(ns["thin"])
    print(
        f"thin MLP 10-64-64-1, value_and_grad per step, {opts.rounds} rounds, threads "
        f"{cpu_program._threads()}"
    )
    print("| case | runner | driver | runner / driver (median of rounds) | max rel. diff |")
    print("|---|---:|---:|---:|---:|")
    for dtype in opts.dtypes.split(","):
        for n in map(int, opts.sizes.split(",")):
            params, X, y = ns["thin_args"](n, dtype)
            args = [*params, X, y]
            graph = passes.optimize(tg.make_ir(grad, optimize=False)(params, X, y))
            flat = [np.asarray(a) for a in tg.tree_leaves((params, X, y))]
            fast, slow = _program(graph, True), _program(graph, False)
            assert fast.runner is not None and slow.runner is None
            a, b = fast(flat), slow(flat)
            diff = max(
                float(np.max(np.abs(u - v)) / (np.max(np.abs(v)) or 1.0))
                for u, v in zip(a, b, strict=True)
            )
            calls = max(5, int(0.1 / max(_block(slow, flat, 3), 1e-6)))
            for _ in range(3):
                _block(fast, flat, calls)
                _block(slow, flat, calls)
            tf, ts, ratios = [], [], []
            for _ in range(opts.rounds):
                f, s = _block(fast, flat, calls), _block(slow, flat, calls)
                tf.append(f)
                ts.append(s)
                ratios.append(f / s)
            del args
            print(
                f"| {n:,} {dtype} | {statistics.median(tf) * 1e3:.3f} ms "
                f"| {statistics.median(ts) * 1e3:.3f} ms | {statistics.median(ratios):.2f} "
                f"({min(ratios):.2f}-{max(ratios):.2f}) | {diff:.1e} |"
            )


if __name__ == "__main__":
    main()
