"""Loops: compile time and kernel source against the number of steps, and run time per step
against JAX's lax.fori_loop under jax.grad.

    python3 benchmarks/bench_loops.py [--quick] [--jax PYTHON]

Every compile time is a first call in a fresh process with an empty kernel cache (cold: tracing,
rolling, differentiating, planning, and Numba compiling every kernel), measured by running
this file again as a child (`--child`). Programs:
- `shifted`: the shifted-concatenation step of issue 12 under jit, a plain Python loop of K steps;
- `leapfrog-plain`: velocity Verlet on a chain of 100 masses, a plain Python loop of K steps,
  gradient of the final energy with respect to the initial positions and the stiffness;
- `leapfrog-fori`: the same with tg.fori_loop.
Run time per step: the second call's time / K for leapfrog-fori (forward and reverse), beside
JAX's (jax.grad of the same lax.fori_loop, jitted, float64) when a Python with JAX is given
(`--jax`, default /tmp/benchenv/bin/python if it exists).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

N, DT = 100, 0.01


def force(q, k):
    dq = q[1:] - q[:-1]
    return np.concatenate([k * dq, np.zeros(1)]) - np.concatenate([np.zeros(1), k * dq])


def energy(q, p, k):
    dq = q[1:] - q[:-1]
    return 0.5 * (p**2).sum() + 0.5 * (k * dq**2).sum() + q[-1]


def leapfrog_plain(steps):
    def run(q, p, k):
        for _ in range(steps):
            p = p + 0.5 * DT * force(q, k)
            q = q + DT * p
            p = p + 0.5 * DT * force(q, k)
        return energy(q, p, k)

    return run


def leapfrog_fori(steps):
    import tracegrad as tg

    def run(q, p, k):
        def step(i, s):
            q, p = s
            p = p + 0.5 * DT * force(q, k)
            q = q + DT * p
            p = p + 0.5 * DT * force(q, k)
            return q, p

        q, p = tg.fori_loop(0, steps, step, (q, p))
        return energy(q, p, k)

    return run


def shifted(steps):
    def f(q):
        for _ in range(steps):
            q = np.sin(np.concatenate([q[1:], q[:1]]) + np.concatenate([q[-1:], q[:-1]]))
        return q

    return f


def child(program: str, steps: int) -> dict:
    import tracegrad as tg

    q0, p0 = np.linspace(0, 1, N), np.sin(np.arange(N))
    if program == "shifted":
        fn = tg.jit(shifted(steps), backend="cpu")
        args = (np.linspace(0, 1, 64),)
    else:
        make = leapfrog_plain if program == "leapfrog-plain" else leapfrog_fori
        fn = tg.grad(make(steps), argnums=(0, 2), backend="cpu")
        args = (q0, p0, 1.3)
    t0 = time.perf_counter()
    fn(*args)
    first = time.perf_counter() - t0
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn(*args)
        runs.append(time.perf_counter() - t0)
    source = tg.make_kernels(fn)(*args)
    nodes = len(tg.make_ir(fn)(*args).nodes)
    return {"first_s": first, "run_s": min(runs), "source_chars": len(source), "ir_nodes": nodes}


def measure(program: str, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(
            os.environ, TRACEGRAD_CACHE_DIR=cache, TRACEGRAD_TIERED="0", TRACEGRAD_PROGRAM_CACHE="0"
        )
        out = subprocess.run(
            [sys.executable, __file__, "--child", program, str(steps)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


JAX_CODE = r"""
import json, time, sys
import jax, jax.numpy as jnp
jax.config.update("jax_enable_x64", True)
N, DT = 100, 0.01
def force(q, k):
    dq = q[1:] - q[:-1]
    return jnp.concatenate([k * dq, jnp.zeros(1)]) - jnp.concatenate([jnp.zeros(1), k * dq])
def run(q, p, k, steps):
    def step(i, s):
        q, p = s
        p = p + 0.5 * DT * force(q, k)
        q = q + DT * p
        p = p + 0.5 * DT * force(q, k)
        return q, p
    q, p = jax.lax.fori_loop(0, steps, step, (q, p))
    dq = q[1:] - q[:-1]
    return 0.5 * (p**2).sum() + 0.5 * (k * dq**2).sum() + q[-1]
out = {}
for steps in map(int, sys.argv[1:]):
    g = jax.jit(jax.grad(lambda q, p, k: run(q, p, k, steps), argnums=(0, 2)))
    q0, p0 = jnp.linspace(0, 1, N), jnp.sin(jnp.arange(N) * 1.0)
    t0 = time.perf_counter(); jax.block_until_ready(g(q0, p0, 1.3)); first = time.perf_counter() - t0
    runs = []
    for _ in range(3):
        t0 = time.perf_counter(); jax.block_until_ready(g(q0, p0, 1.3)); runs.append(time.perf_counter() - t0)
    out[steps] = {"first_s": first, "run_s": min(runs)}
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", nargs=2)
    parser.add_argument("--quick", action="store_true", help="fewer step counts")
    parser.add_argument("--jax", default="/tmp/benchenv/bin/python")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]))))
        return
    counts = (1, 10, 1000) if args.quick else (1, 10, 100, 1000)
    print(
        "| program | K | IR nodes | kernel source chars | first call (cold) s | next call ms | per step us |"
    )
    print("|---|---|---|---|---|---|---|")
    rows = [("shifted", k) for k in counts] + [("leapfrog-plain", k) for k in counts]
    rows += [("leapfrog-fori", k) for k in (10, 10_000)]
    results = {}
    for program, k in rows:
        r = measure(program, k)
        results[(program, k)] = r
        print(
            f"| {program} | {k} | {r['ir_nodes']} | {r['source_chars']} | {r['first_s']:.2f} | "
            f"{r['run_s'] * 1e3:.2f} | {r['run_s'] / k * 1e6:.2f} |",
            flush=True,
        )
    if os.path.exists(args.jax):
        out = subprocess.run(
            [args.jax, "-c", JAX_CODE, "10", "10000"], capture_output=True, text=True
        )
        if out.returncode == 0:
            jax = {int(k): v for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}
            print()
            print("| leapfrog grad, 100 masses | K | first call s | next call ms | per step us |")
            print("|---|---|---|---|---|")
            for k in (10, 10_000):
                ours = results[("leapfrog-fori", k)]
                print(
                    f"| tracegrad tg.fori_loop | {k} | {ours['first_s']:.2f} | "
                    f"{ours['run_s'] * 1e3:.2f} | {ours['run_s'] / k * 1e6:.2f} |"
                )
                print(
                    f"| JAX lax.fori_loop | {k} | {jax[k]['first_s']:.2f} | "
                    f"{jax[k]['run_s'] * 1e3:.2f} | {jax[k]['run_s'] / k * 1e6:.2f} |"
                )
        else:
            print("JAX run failed:", out.stderr[-500:])
    else:
        print(f"(no JAX at {args.jax}: the comparison is skipped)")


if __name__ == "__main__":
    main()
