"""Kernel source size and planning time against the number of steps of a plain Python loop.

    python3 benchmarks/bench_program_size.py [--compile] [--steps 1,2,4,...]

Two programs: the shifted-concatenation step of docs/how-it-works.md (jit) and an elementwise
chain `x = sin(x) * 1.01` under grad. For each step count K: the IR's node count, the characters
of generated cpu source, the time to trace, differentiate, plan and render it, and (with
--compile) the time of the first call, which includes Numba's compilation. Linear growth is the
target: the per-step columns should stay flat.
"""

import argparse
import time

import numpy as np

import tracegrad as tg


def shifted(k):
    def f(q):
        for _ in range(k):
            q = np.sin(np.concatenate([q[1:], q[:1]]) + np.concatenate([q[-1:], q[:-1]]))
        return q

    return tg.jit(f, backend="cpu")


def chain(k):
    def f(x):
        for _ in range(k):
            x = np.sin(x) * 1.01
        return np.sum(x)

    return tg.grad(f, backend="cpu")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", default="1,2,4,8,16,32,64,128,256")
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args()
    x = np.linspace(0, 1, 64)
    print("| program | K | IR nodes | source chars | chars/step | plan+render s | first call s |")
    print("|---|---|---|---|---|---|---|")
    for name, make in (("shifted concat (jit)", shifted), ("sin chain (grad)", chain)):
        for k in (int(s) for s in args.steps.split(",")):
            fn = make(k)
            t0 = time.perf_counter()
            source = tg.make_kernels(fn)(x)
            t1 = time.perf_counter()
            nodes = len(tg.make_ir(fn)(x).nodes)
            first = "-"
            if args.compile:
                t2 = time.perf_counter()
                fn(x)
                first = f"{time.perf_counter() - t2:.2f}"
            print(
                f"| {name} | {k} | {nodes} | {len(source)} | {len(source) / k:.0f} | {t1 - t0:.2f} | {first} |"
            )


if __name__ == "__main__":
    main()
