"""The gradient time of the three research examples (tracegrad/examples: gaussian-process,
lennard-jones, embedding-classifier) against JAX and HIPS autograd, in the same run.

    python3 benchmarks/bench_examples.py                                  # tracegrad only
    python3 benchmarks/bench_examples.py --peer /tmp/benchenv/bin/python  # and JAX, autograd there

Each workload is one `value_and_grad` call of the example's own function on its own data (the
Gaussian process at two sizes). tracegrad runs the plain NumPy function; JAX runs the same
function written with `jax.numpy` under `jax.jit(jax.value_and_grad(...))` in float64; autograd
runs it with `autograd.numpy`. Where a framework lacks an operation the example uses, its version
says what it does instead (autograd has no `np.add.at`: the Lennard-Jones energy sums the pair
energies directly, the same value). JAX and autograd are never dependencies of tracegrad: they
run in another interpreter (--peer), or in this one when importable here; what is missing is
reported, not hidden.

Times are medians of interleaved rounds after warm-up (the machine is shared: only ratios
measured in one run mean anything).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np

os.environ.setdefault("TRACEGRAD_TIERED", "0")  # compiled programs from the first call

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

import tracegrad as tg  # noqa: E402
from tracegrad.examples import embedding_classifier as ec  # noqa: E402
from tracegrad.examples import gaussian_process as gp  # noqa: E402
from tracegrad.examples import lennard_jones as lj  # noqa: E402


def median_time(fn, rounds: int = 7, inner: int = 5) -> float:
    fn()
    fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t0) / inner)
    return float(np.median(times))


def data() -> dict:
    """Every workload's arrays, by name (saved for the peer interpreter)."""
    out = {}
    for n in (40, 200):
        x, y = gp.data(n)
        out[f"gp{n}_x"], out[f"gp{n}_y"] = x, y
    out["theta"] = np.array([0.1, -0.2, -1.0])
    x = lj.icosahedron()
    i, j = lj.neighbours(x)
    out["lj_x"], out["lj_i"], out["lj_j"] = x, i, j
    tokens, labels = ec.sentences(600, 0)
    rng = np.random.default_rng(2)
    out["ec_tokens"] = tokens
    out["ec_onehot"] = labels[:, None] == np.arange(ec.CLASSES)
    out["ec_embedding"] = 0.1 * rng.normal(size=(ec.VOCABULARY, ec.WIDTH))
    out["ec_w"] = 0.1 * rng.normal(size=(ec.WIDTH, ec.CLASSES))
    out["ec_b"] = np.zeros(ec.CLASSES)
    return out


def workloads(d: dict) -> dict:
    """name -> (function, arguments) for tracegrad."""
    params = {"embedding": d["ec_embedding"], "w": d["ec_w"], "b": d["ec_b"]}
    return {
        "gaussian-process n=40": (
            gp.negative_log_likelihood,
            (d["theta"], d["gp40_x"], d["gp40_y"]),
        ),
        "gaussian-process n=200": (
            gp.negative_log_likelihood,
            (d["theta"], d["gp200_x"], d["gp200_y"]),
        ),
        "lennard-jones 13 atoms": (lj.energy, (d["lj_x"], d["lj_i"], d["lj_j"])),
        "embedding-classifier 600 sentences": (ec.loss, (params, d["ec_tokens"], d["ec_onehot"])),
    }


def measure_tracegrad(d: dict, backends: list[str]) -> dict:
    results = {}
    for name, (fun, args) in workloads(d).items():
        for backend in backends:
            step = tg.value_and_grad(fun, backend=backend)
            results[(name, f"tracegrad {backend}")] = median_time(
                lambda step=step, args=args: step(*args)
            )
    return results


# The peers' versions of the three functions, run in the peer interpreter (or here).
PEER = textwrap.dedent("""
    import json, sys, time
    import numpy as onp

    def median_time(fn, rounds=7, inner=5):
        fn(); fn()
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            times.append((time.perf_counter() - t0) / inner)
        return float(onp.median(times))

    d = dict(onp.load(sys.argv[1]))
    SMOOTHING, CLASSES = 0.1, int(d["ec_onehot"].shape[1])
    results, missing = {}, []

    def functions(np, scatter_sum):
        def gp_nll(theta, x, y):
            scale, signal, noise = np.exp(theta[0]), np.exp(theta[1]), np.exp(theta[2])
            d2 = (x[:, None] - x[None, :]) ** 2
            k = signal * np.exp(-0.5 * d2 / scale**2) + noise * np.eye(len(x))
            lower = np.linalg.cholesky(k)
            alpha = np.linalg.solve(lower.T, np.linalg.solve(lower, y))
            _, logdet = np.linalg.slogdet(k)
            return 0.5 * y @ alpha + 0.5 * logdet + 0.5 * len(x) * np.log(2 * np.pi)

        def lj_energy(x, i, j):
            dx = x[i] - x[j]
            inv6 = 1.0 / np.sum(dx * dx, axis=1) ** 3
            pair = 4.0 * (inv6 * inv6 - inv6)
            return scatter_sum(pair, i, j, x.shape[0])

        def ec_loss(params, tokens, onehot):
            vectors = params["embedding"][tokens]
            pooled = np.mean(vectors, axis=1)
            logits = pooled @ params["w"] + params["b"]
            top = np.max(logits, axis=1, keepdims=True)
            log_probs = logits - top - np.log(np.sum(np.exp(logits - top), axis=1, keepdims=True))
            target = np.where(onehot, 1.0 - SMOOTHING, SMOOTHING / (CLASSES - 1))
            return -np.mean(np.sum(target * log_probs, axis=1))

        return gp_nll, lj_energy, ec_loss

    def cases(gp_nll, lj_energy, ec_loss, asarray):
        params = {k: asarray(d["ec_" + k]) for k in ("embedding", "w", "b")}
        return {
            "gaussian-process n=40": (gp_nll, (asarray(d["theta"]), asarray(d["gp40_x"]), asarray(d["gp40_y"]))),
            "gaussian-process n=200": (gp_nll, (asarray(d["theta"]), asarray(d["gp200_x"]), asarray(d["gp200_y"]))),
            "lennard-jones 13 atoms": (lj_energy, (asarray(d["lj_x"]), d["lj_i"], d["lj_j"])),
            "embedding-classifier 600 sentences": (ec_loss, (params, d["ec_tokens"], d["ec_onehot"])),
        }

    try:
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp

        def jax_scatter(pair, i, j, n):  # per-atom energies by .at[].add, then their sum
            per_atom = jnp.zeros(n).at[i].add(0.5 * pair).at[j].add(0.5 * pair)
            return jnp.sum(per_atom)

        for name, (f, args) in cases(*functions(jnp, jax_scatter), jnp.asarray).items():
            step = jax.jit(jax.value_and_grad(f))
            results[name + "|JAX jit " + jax.__version__] = median_time(
                lambda: jax.block_until_ready(step(*args)))
    except ImportError as exc:
        missing.append(f"JAX ({exc})")

    try:
        import autograd
        import autograd.numpy as anp

        def autograd_sum(pair, i, j, n):  # no np.add.at in autograd: the same sum, directly
            return anp.sum(pair)

        for name, (f, args) in cases(*functions(anp, autograd_sum), onp.asarray).items():
            step = autograd.value_and_grad(f)
            results[name + "|autograd"] = median_time(lambda: step(*args))
    except ImportError as exc:
        missing.append(f"autograd ({exc})")
    print(json.dumps({"results": results, "missing": missing}))
""")


def measure_peers(d: dict, peer: str) -> tuple[dict, list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.npz")
        np.savez(path, **d)
        script = os.path.join(tmp, "peer.py")
        with open(script, "w") as f:
            f.write(PEER)
        proc = subprocess.run([peer, script, path], capture_output=True, text=True)
    if proc.returncode != 0:
        return {}, [f"the peer interpreter {peer} failed: {proc.stderr.strip().splitlines()[-1:]}"]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    results = {tuple(k.split("|")): v for k, v in out["results"].items()}
    return results, out["missing"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--peer",
        default=sys.executable,
        help="a Python with JAX and/or autograd installed (default: this one)",
    )
    parser.add_argument("--backends", default="numpy,cpu")
    args = parser.parse_args(argv)
    d = data()
    results = measure_tracegrad(d, [b for b in args.backends.split(",") if b])
    peer_results, missing = measure_peers(d, args.peer)
    results.update(peer_results)
    names = list(workloads(d))
    columns = sorted({c for _, c in results}, key=lambda c: (not c.startswith("tracegrad"), c))
    print("| workload (value_and_grad, median ms) | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for name in names:
        cells = [
            f"{results[(name, c)] * 1e3:.3f}" if (name, c) in results else "-" for c in columns
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    for m in missing:
        print(f"not measured: {m}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
