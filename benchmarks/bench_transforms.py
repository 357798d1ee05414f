"""The transforms of issue 14, measured: per-example gradients by vmap(grad) against a Python
loop of grad, a tall jacobian by jacfwd against jacrev, the memory of hvp at n = 10^6 and of a
checkpointed gradient, and JAX on the same workloads when a Python with JAX is given.

    python3 benchmarks/bench_transforms.py                        # tracegrad only
    python3 benchmarks/bench_transforms.py --peer /tmp/benchenv/bin/python   # and JAX there

Times are medians of interleaved rounds after warm-up (this machine is shared: only ratios
measured in one run mean anything). Memory is the peak resident size of a fresh process running
one call, minus that process's size before the call. JAX is never a dependency of tracegrad: it
runs in the other interpreter, through a script this file writes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time
import tracemalloc

import numpy as np

# measure compiled programs from their first call (not the interpreter of tiered execution)
os.environ.setdefault("TRACEGRAD_TIERED", "0")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

import tracegrad as tg  # noqa: E402


def median_times(candidates: dict, rounds: int = 7, inner: int = 3) -> dict:
    """Median seconds per call of each candidate, measured in interleaved rounds."""
    for fn in candidates.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            times[name].append((time.perf_counter() - t0) / inner)
    return {k: float(np.median(v)) for k, v in times.items()}


# ---------------------------------------------------------------------------------------------
# Workloads (the same definitions are written out for JAX in PEER_SCRIPT)


def mlp_params(d: int, h: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return {
        "w1": rng.normal(size=(d, h)) / np.sqrt(d),
        "b1": np.zeros(h),
        "w2": rng.normal(size=(h, h)) / np.sqrt(h),
        "b2": np.zeros(h),
        "w3": rng.normal(size=h) / np.sqrt(h),
    }


def mlp_loss(p, x, y):
    a = np.tanh(x @ p["w1"] + p["b1"])
    a = np.tanh(a @ p["w2"] + p["b2"])
    return (a @ p["w3"] - y) ** 2


T = np.linspace(0, 1, 2000)


def curve(p):
    return np.sin(p[0] * T) * np.exp(-p[1] * T) + p[2] * T**2


def chain_loss(x):
    return np.sum(np.sin(x) ** 2 * np.exp(-0.1 * x))


def per_example(d: int, h: int, batch: int = 256) -> dict:
    params = mlp_params(d, h)
    rng = np.random.default_rng(1)
    xs, ys = rng.normal(size=(batch, d)), rng.normal(size=batch)
    batched = tg.vmap(tg.grad(mlp_loss), in_axes=(None, 0, 0))
    one = tg.grad(mlp_loss)
    got = batched(params, xs, ys)
    for i in (0, batch - 1):  # the same numbers as the loop
        ref = one(params, xs[i], ys[i])
        assert all(np.allclose(got[k][i], ref[k], rtol=1e-12, atol=1e-14) for k in ref)
    times = median_times(
        {
            "vmap(grad)": lambda: batched(params, xs, ys),
            "loop of grad": lambda: [one(params, xs[i], ys[i]) for i in range(batch)],
        }
    )
    return {
        "mlp": f"{d}-{h}-{h}-1",
        "batch": batch,
        **times,
        "speedup": times["loop of grad"] / times["vmap(grad)"],
    }


def tall_jacobian() -> dict:
    p = np.array([3.0, 0.5, -1.0])
    fwd, rev = tg.jacfwd(curve), tg.jacrev(curve)
    assert np.allclose(fwd(p), rev(p), rtol=1e-12, atol=1e-12)
    graph = tg.make_ir(fwd)(p)
    biggest = max(n.out.size for n in graph.nodes)
    times = median_times({"jacfwd": lambda: fwd(p), "jacrev": lambda: rev(p)}, rounds=9, inner=10)
    return {**times, "largest intermediate (elements)": biggest, "jacobian (elements)": 3 * 2000}


def peak_memory(fn, *args) -> int:
    """Peak bytes NumPy allocates during one call of `fn` (traced and compiled by a first call
    before measuring, so that only the run is counted). The numpy backend allocates every value
    through NumPy, so this is the memory the program holds at its peak."""
    fn(*args)
    tracemalloc.start()
    fn(*args)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def hvp_memory(n: int = 10**6) -> dict:
    x, v = np.linspace(-1, 1, n), np.ones(n)
    used = peak_memory(tg.hvp(chain_loss, backend="numpy"), x, v)
    return {"n": n, "peak bytes": used, "peak / (8 n)": used / (8 * n)}


def block(x):
    for _ in range(4):
        x = np.tanh(np.sin(x) * 1.1 + 0.1 * x)
    return x


def deep(wrap):
    def loss(x):
        for _ in range(8):
            x = wrap(block)(x)
        return np.sum(x**2)

    return loss


def checkpoint_memory(n: int = 10**6) -> dict:
    x = np.linspace(-1, 1, n)
    plain = tg.grad(deep(lambda f: f), backend="numpy")
    saved = tg.grad(deep(tg.checkpoint), backend="numpy")
    assert np.allclose(plain(x), saved(x), rtol=1e-12, atol=1e-14)
    without, with_ = peak_memory(plain, x), peak_memory(saved, x)
    times = median_times({"without": lambda: plain(x), "with": lambda: saved(x)}, rounds=3, inner=1)
    return {
        "n": n,
        "8 blocks of 4 steps; peak bytes without checkpoint": without,
        "with checkpoint": with_,
        "memory ratio": without / with_,
        "time with / without": times["with"] / times["without"],
    }


PEER_SCRIPT = textwrap.dedent(
    """
    import json, time, numpy as np, jax, jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    def median_times(c, rounds=7, inner=3):
        for f in c.values(): f()
        t = {k: [] for k in c}
        for _ in range(rounds):
            for k, f in c.items():
                t0 = time.perf_counter()
                for _ in range(inner): f()
                t[k].append((time.perf_counter() - t0) / inner)
        return {k: float(np.median(v)) for k, v in t.items()}
    out = {}
    def loss(p, x, y):
        a = jnp.tanh(x @ p["w1"] + p["b1"]); a = jnp.tanh(a @ p["w2"] + p["b2"])
        return (a @ p["w3"] - y) ** 2
    for d, h in SIZES:
        rng = np.random.default_rng(0)
        p = {"w1": rng.normal(size=(d, h)) / np.sqrt(d), "b1": np.zeros(h),
             "w2": rng.normal(size=(h, h)) / np.sqrt(h), "b2": np.zeros(h),
             "w3": rng.normal(size=h) / np.sqrt(h)}
        rng = np.random.default_rng(1)
        xs, ys = rng.normal(size=(256, d)), rng.normal(size=256)
        pe = jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))
        out[f"{d}-{h}"] = median_times({"jax vmap(grad)": lambda: jax.block_until_ready(pe(p, xs, ys))})
    T = jnp.linspace(0, 1, 2000)
    curve = lambda p: jnp.sin(p[0] * T) * jnp.exp(-p[1] * T) + p[2] * T**2
    fwd, rev = jax.jit(jax.jacfwd(curve)), jax.jit(jax.jacrev(curve))
    p = jnp.array([3.0, 0.5, -1.0])
    out["tall"] = median_times({"jax jacfwd": lambda: jax.block_until_ready(fwd(p)),
                                "jax jacrev": lambda: jax.block_until_ready(rev(p))}, rounds=9, inner=10)
    print(json.dumps(out))
    """
)


def peers(python: str, sizes) -> dict:
    script = f"SIZES = {list(sizes)!r}\n" + PEER_SCRIPT
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out = subprocess.run([python, "-c", script], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        print(f"(JAX run failed: {out.stderr.strip().splitlines()[-1:]})")
        return {}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--peer", help="a Python interpreter with JAX installed")
    args = parser.parse_args()
    sizes = [(8, 16), (32, 64)]
    report: dict = {"per-example gradients": [per_example(d, h) for d, h in sizes]}
    report["tall jacobian R^3 -> R^2000"] = tall_jacobian()
    report["hvp memory"] = hvp_memory()
    report["checkpoint memory"] = checkpoint_memory()
    if args.peer:
        report["jax"] = peers(args.peer, sizes)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
