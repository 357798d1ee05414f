"""Array updates written the NumPy way (`y[i] = ...`, `y[idx] += v`): compile time of element-by-
element loops and the per-call time of large updates, against JAX in the same run.

    python3 benchmarks/bench_updates.py                                  # tracegrad only
    python3 benchmarks/bench_updates.py --peer /tmp/benchenv/bin/python  # and JAX there

1. **Fill loops** (`y = np.zeros(64); for i in range(64): y[i] = sin(x[i]) * x[j(i)]`): the time
   from a fresh process's first `value_and_grad` call to its result, with an empty kernel cache,
   for a periodic neighbour (`j = (i + 1) % n`: rolled into one scan) and an irregular one
   (`j = (3 i + 1) % n`, `x[i * i % n]`: left unrolled, its reads' cotangents one scatter-add).
   JAX runs the same loop with `y = y.at[i].set(...)` under `jit(value_and_grad)`.
2. **Large updates** (n = 1,000,000, float64): exp, a scatter of 10,000 values, sin, an indexed
   accumulation, a sum; `value_and_grad` per call, with and without buffer donation
   (tracegrad/cpu/donation.py), with and without scatters in place (tracegrad/cpu/scatters.py)
   and their fix-up loops, with the kernels' loop indices signed (as before: Numba wraps a
   signed index around, and LLVM gathers instead of loading a vector), and JAX's `.at[]`
   version. The bytes floor is one pass that reads x and writes an array of
   its size (the gradient): what any program must move at least.

Medians of interleaved rounds (the machine is shared: only ratios from one run mean anything).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import types

os.environ.setdefault("TRACEGRAD_TIERED", "0")  # compiled programs from the first call
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import tracegrad as tg  # noqa: E402
from tracegrad.cpu import donation, kernels, scatters  # noqa: E402
from tracegrad.fusion import render  # noqa: E402

N_FILL = 64
N_BIG = 1_000_000
FILL = {
    "periodic": "np.sin(x[i]) * x[(i + 1) % n]",
    "irregular": "np.sin(x[(i * i) % n]) * x[(3 * i + 1) % n]",
}

FILL_SCRIPT = """
import time
t0 = time.perf_counter()
import numpy as np
{imports}
n = {n}
def f(x):
    y = {zeros}
    for i in range(n):
        {assign}
    return {total}
x = np.linspace(0.1, 1.0, n)
g = {transform}
out = g(x)
{block}
print(time.perf_counter() - t0)
"""


JAX_FILL = {
    "imports": "import jax; jax.config.update('jax_enable_x64', True); import jax.numpy as jnp",
    "zeros": "jnp.zeros(n)",
    "assign": "y = y.at[i].set({body})",
    "total": "jnp.sum(y ** 2)",
    "transform": "jax.jit(jax.value_and_grad(f))",
    "block": "out[1].block_until_ready()",
}
OUR_FILL = {
    "imports": "import tracegrad as tg",
    "zeros": "np.zeros(n)",
    "assign": "y[i] = {body}",
    "total": "np.sum(y ** 2)",
    "transform": "tg.value_and_grad(f, backend='cpu')",
    "block": "",
}


def fill_script(kind: str, peer: bool) -> str:
    parts = dict(JAX_FILL if peer else OUR_FILL)
    body = FILL[kind].replace("np.", "jnp.") if peer else FILL[kind]
    parts["assign"] = parts["assign"].format(body=body)
    return FILL_SCRIPT.format(n=N_FILL, **parts)


def first_call(python: str, script: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "first.py")
        with open(path, "w") as fh:
            fh.write(script)
        env = dict(
            os.environ,
            TRACEGRAD_CACHE_DIR=os.path.join(tmp, "cache"),
            TRACEGRAD_PROGRAM_CACHE="0",
            PYTHONPATH=ROOT,
        )
        proc = subprocess.run([python, path], capture_output=True, text=True, env=env, timeout=1800)
        if proc.returncode:
            raise RuntimeError(proc.stderr[-2000:])
        return float(proc.stdout.strip().splitlines()[-1])


def updates(x, v, idx, idx2):
    y = np.exp(x * 0.5)
    y[idx] = v
    z = np.sin(y) * 2.0
    z[idx2] += v
    return np.sum(z * y)


PEER_UPDATES = """
import sys, time, numpy as np, jax
jax.config.update('jax_enable_x64', True)
import jax.numpy as jnp
d = np.load(sys.argv[1])
def f(x, v, idx, idx2):
    y = jnp.exp(x * 0.5).at[idx].set(v)
    z = (jnp.sin(y) * 2.0).at[idx2].add(v)
    return jnp.sum(z * y)
g = jax.jit(jax.value_and_grad(f, argnums=(0, 1)))
args = [jnp.asarray(d[k]) for k in ("x", "v", "idx", "idx2")]
def run():
    out = g(*args); out[1][0].block_until_ready()
run(); run()
times = []
for _ in range(15):
    t0 = time.perf_counter(); run(); times.append(time.perf_counter() - t0)
print(sorted(times)[len(times) // 2])
"""


def renamed(fun, tag: str):
    """`fun` under another name: a function of its own for the program caches (which know a
    function by its code), so that each variant compiles its own program."""
    code = fun.__code__.replace(co_name=f"{fun.__name__}_{tag.replace(' ', '_').replace(',', '')}")
    return types.FunctionType(code, fun.__globals__, code.co_name)


def median(fn, rounds: int = 15) -> float:
    fn()
    fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", help="a Python with jax installed")
    parser.add_argument("--large-only", action="store_true", help="only the large updates")
    args = parser.parse_args()
    if not args.large_only:
        print("# fill loops: first value_and_grad in a fresh process, empty kernel cache (s)")
    for kind in () if args.large_only else FILL:
        ours = first_call(sys.executable, fill_script(kind, peer=False))
        line = f"{kind:10s} tracegrad {ours:7.2f}"
        if args.peer:
            theirs = first_call(args.peer, fill_script(kind, peer=True))
            line += f"   jax {theirs:6.2f}   ratio {ours / theirs:5.2f}"
        print(line)

    rng = np.random.default_rng(0)
    x = rng.normal(size=N_BIG)
    idx = rng.choice(N_BIG, 10_000, replace=False)
    idx2 = rng.choice(N_BIG, 10_000, replace=False)
    v = rng.normal(size=10_000)
    programs = {"tracegrad": tg.value_and_grad(updates, argnums=(0, 1), backend="cpu")}
    programs["tracegrad"](x, v, idx, idx2)
    off = lambda plan: plan
    variants = {
        "no donation": [(donation, "donate", off)],
        "no scatters in place": [(scatters, "scatter_in_place", off)],
        "no fix-up loops": [(scatters, "SPLIT_LOOPS", False)],
        # the kernels' own index signed, as before (Numba wraps it around: LLVM gathers)
        "signed indices": [(kernels.CpuPrinter, "subscript", render.Printer.subscript)],
    }
    variants["signed, no scatters in place"] = (
        variants["signed indices"] + variants["no scatters in place"]
    )
    for name, patches in variants.items():
        saved = [(obj, attr, getattr(obj, attr)) for obj, attr, _ in patches]
        try:
            for obj, attr, value in patches:
                setattr(obj, attr, value)
            programs[name] = tg.value_and_grad(
                renamed(updates, name), argnums=(0, 1), backend="cpu"
            )
            programs[name](x, v, idx, idx2)  # compiled now, with the patches
        finally:
            for obj, attr, value in saved:
                setattr(obj, attr, value)
    results = {k: f(x, v, idx, idx2) for k, f in programs.items()}
    for k, out in results.items():  # the same gradient, bit for bit
        np.testing.assert_array_equal(out[1][0], results["tracegrad"][1][0], err_msg=k)
        np.testing.assert_array_equal(out[1][1], results["tracegrad"][1][1], err_msg=k)
    grad = np.empty_like(x)
    programs["bytes floor"] = lambda *a: np.multiply(x, 1.0, out=grad)
    times = {k: [] for k in programs}
    for _ in range(5):  # interleaved
        for k, f in programs.items():
            times[k].append(median(lambda f=f: f(x, v, idx, idx2), 7))
    ms = {k: 1e3 * sorted(t)[len(t) // 2] for k, t in times.items()}
    print(f"# large updates, n = {N_BIG:,}: value_and_grad per call (ms)")
    line = (
        f"tracegrad {ms['tracegrad']:.2f} ("
        + ", ".join(f"{k} {ms[k]:.2f}" for k in programs if k != "tracegrad")
        + ")"
    )
    if args.peer:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "d.npz")
            np.savez(path, x=x, v=v, idx=idx, idx2=idx2)
            script = os.path.join(tmp, "peer.py")
            with open(script, "w") as fh:
                fh.write(textwrap.dedent(PEER_UPDATES))
            proc = subprocess.run([args.peer, script, path], capture_output=True, text=True)
            jax_ms = 1e3 * float(proc.stdout.strip().splitlines()[-1])
        line += f"   jax {jax_ms:.2f}   ratio {ms['tracegrad'] / jax_ms:.2f}"
    print(line)


if __name__ == "__main__":
    main()
