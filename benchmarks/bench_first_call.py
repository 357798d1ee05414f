"""The first call in a fresh process, tracegrad against JAX, and the thin MLP per step (issue 15).

    python3 benchmarks/bench_first_call.py                     # writes "## First call"
    python3 benchmarks/bench_first_call.py --quick             # fewer rounds, prints only
    python3 benchmarks/bench_first_call.py --jax-python /tmp/benchenv/bin/python
    python3 benchmarks/bench_first_call.py --before 6a4779d    # also the code of a git revision

Every first-call number is measured in a new subprocess: `import` (NumPy and the library) and
the first call (trace, compile or load, run) of

- **W1**: the gradient of sum(sin(x)·exp(-x²) + tanh(x)·x³), x of 1,000 float64;
- **MLP**: value_and_grad of the logistic loss of the `mlp` example (2-16-16-1, dict of weights,
  500 points).

The floor is NumPy alone: the same workloads with their gradients written out by hand, in a new
process that imports only NumPy. tracegrad runs with an empty disk cache (`TRACEGRAD_CACHE_DIR`
a new folder) and with the cache filled by an earlier process (which waited for its background
compilation); JAX runs `jit(grad)` (`jit(value_and_grad)`) without its compilation cache. JAX is
never a dependency of tracegrad: it runs in another interpreter (`--jax-python`, default
/tmp/benchenv/bin/python, e.g. made with `python3 -m venv /tmp/benchenv && /tmp/benchenv/bin/pip
install jax`); without it the JAX rows are skipped with a message. All processes write their
bytecode to one temporary folder (PYTHONPYCACHEPREFIX), filled by an untimed run of each
configuration first, so that no candidate pays for compiling Python sources. The configurations
are measured in interleaved rounds; medians are reported.

The thin MLP, 10-64-64-1 with tanh, value_and_grad of the mean squared error, float64 and float32,
N = 2,048 and 16,384 rows: tracegrad's cpu backend (compiled, steady state), the same with its
row pipelines turned off (breadth first, as before they were built), and JAX's jit, per step,
each in a fresh process per round, interleaved (`--thin-only` measures just this and prints it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "RESULTS.md")
SECTION = "## First call"
DEFAULT_JAX = "/tmp/benchenv/bin/python"
FLOOR = "NumPy alone, the gradient written by hand (the floor)"

WORKLOADS = textwrap.dedent(
    """
    def w1(x):
        return np.sum(np.sin(x) * np.exp(-x * x) + np.tanh(x) * x**3)

    def softplus(t):
        return np.maximum(t, 0.0) + np.log1p(np.exp(-np.abs(t)))

    def mlp(params, points, labels):
        h = np.tanh(points @ params["W1"] + params["b1"])
        h = np.tanh(h @ params["W2"] + params["b2"])
        score = (h @ params["W3"] + params["b3"])[:, 0]
        return np.mean(softplus(-labels * score))

    def mlp_args(rng):
        params = {"W1": rng.normal(size=(2, 16)), "b1": np.zeros(16),
                  "W2": rng.normal(size=(16, 16)) / 4.0, "b2": np.zeros(16),
                  "W3": rng.normal(size=(16, 1)) / 4.0, "b3": np.zeros(1)}
        points = rng.normal(size=(500, 2))
        labels = np.where(rng.uniform(size=500) < 0.5, -1.0, 1.0)
        return params, points, labels
    """
)

TRACEGRAD_FIRST = (
    """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import tracegrad as tg
t1 = time.perf_counter()
"""
    + WORKLOADS
    + """
rng = np.random.default_rng(0)
if sys.argv[1] == "W1":
    g, args = tg.grad(w1), (rng.standard_normal(1000),)
else:
    g, args = tg.value_and_grad(mlp), mlp_args(rng)
t2 = time.perf_counter()
g(*args)
t3 = time.perf_counter()
if len(sys.argv) > 2 and hasattr(tg, "wait_compiled"):  # filling the cache: wait for it
    tg.wait_compiled()
print(json.dumps({"import": t1 - t0, "first": t3 - t2}))
"""
)

# The floor: NumPy alone, each workload's gradient written out by hand (what any library that
# takes NumPy code pays before its own work: the interpreter is started, NumPy imported).
NUMPY_FIRST = (
    """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
t1 = time.perf_counter()
"""
    + WORKLOADS
    + """
def w1_grad(x):
    e, t = np.exp(-x * x), np.tanh(x)
    return np.cos(x) * e - 2 * x * np.sin(x) * e + (1 - t * t) * x**3 + 3 * x * x * t

def mlp_value_and_grad(params, points, labels):
    h1 = np.tanh(points @ params["W1"] + params["b1"])
    h2 = np.tanh(h1 @ params["W2"] + params["b2"])
    margin = -labels * (h2 @ params["W3"] + params["b3"])[:, 0]
    value = np.mean(softplus(margin))
    dscore = (-labels / (1 + np.exp(-margin)) / len(labels))[:, None]
    dz2 = (dscore @ params["W3"].T) * (1 - h2 * h2)
    dz1 = (dz2 @ params["W2"].T) * (1 - h1 * h1)
    grads = {"W1": points.T @ dz1, "b1": dz1.sum(0), "W2": h1.T @ dz2, "b2": dz2.sum(0),
             "W3": h2.T @ dscore, "b3": dscore.sum(0)}
    return value, grads

rng = np.random.default_rng(0)
if sys.argv[1] == "W1":
    g, args = w1_grad, (rng.standard_normal(1000),)
else:
    g, args = mlp_value_and_grad, mlp_args(rng)
t2 = time.perf_counter()
g(*args)
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "first": t3 - t2}))
"""
)

JAX_FIRST = (
    """
import json, sys, time
t0 = time.perf_counter()
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as np
t1 = time.perf_counter()
"""
    + WORKLOADS.replace(
        "np.where(rng.uniform(size=500) < 0.5, -1.0, 1.0)",
        "__import__('numpy').where(rng.uniform(size=500) < 0.5, -1.0, 1.0)",
    )
    + """
import numpy
rng = numpy.random.default_rng(0)
if sys.argv[1] == "W1":
    g, args = jax.jit(jax.grad(w1)), (rng.standard_normal(1000),)
else:
    g, args = jax.jit(jax.value_and_grad(mlp)), mlp_args(rng)
t2 = time.perf_counter()
jax.block_until_ready(g(*args))
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "first": t3 - t2}))
"""
)

THIN = textwrap.dedent(
    """
    def thin(params, X, y):
        W1, b1, W2, b2, W3, b3 = params
        h = np.tanh(X @ W1 + b1)
        h = np.tanh(h @ W2 + b2)
        return np.mean(((h @ W3 + b3)[:, 0] - y) ** 2)

    def thin_args(n, dtype):
        rng = __import__("numpy").random.default_rng(2)
        shapes = [(10, 64), (64,), (64, 64), (64,), (64, 1), (1,)]
        params = tuple((rng.standard_normal(s) / 8).astype(dtype) for s in shapes)
        return params, rng.standard_normal((n, 10)).astype(dtype), rng.standard_normal(n).astype(dtype)
    """
)

# The per-step timing both peers' scripts share: `prepare(case)` returns (step, args) after
# warm-up; argv[1] the cases, argv[2] the blocks of 10 calls; prints {case: median seconds}.
TIME_THIN = """
out = {}
for case in sys.argv[1].split(","):
    step, args = prepare(case)
    for _ in range(20):
        step(*args)
    times = []
    for _ in range(int(sys.argv[2])):
        t = time.perf_counter()
        for _ in range(10):
            step(*args)
        times.append((time.perf_counter() - t) / 10)
    out[case] = sorted(times)[len(times) // 2]
print(json.dumps(out))
"""

JAX_THIN = (
    """
import json, sys, time
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as np
"""
    + THIN
    + """
def prepare(case):
    n, dtype = case.split(":")
    args = jax.tree_util.tree_map(jax.numpy.asarray, thin_args(int(n), dtype))
    g = jax.jit(jax.value_and_grad(thin))
    return (lambda *a: jax.block_until_ready(g(*a))), args
"""
    + TIME_THIN
)

# tracegrad's thin-network step in a fresh process; argv[3] "pipelines" or "breadth-first" (the
# compiled run without row pipelines, as before the eleventh pass)
TG_THIN = (
    """
import json, os, sys, time
os.environ["TRACEGRAD_TIERED"] = "0"
import numpy as np
import tracegrad as tg
from tracegrad.cpu import runner
runner.PIPELINES = sys.argv[3] == "pipelines"
"""
    + THIN
    + """
def prepare(case):
    n, dtype = case.split(":")
    return tg.value_and_grad(thin, backend="cpu"), thin_args(int(n), dtype)
"""
    + TIME_THIN
)


def run_json(python: str, code: str, args: list[str], env: dict) -> dict:
    # `python -c` puts the working folder first on sys.path: run where the tracegrad to measure is
    where = env.get("PYTHONPATH") or tempfile.gettempdir()
    done = subprocess.run(
        [python, "-c", code, *args], capture_output=True, text=True, env=env, cwd=where, timeout=900
    )
    if done.returncode:
        raise RuntimeError(f"{python} {args} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def base_env(pycache: str, tracegrad_root: str | None) -> dict:
    env = dict(os.environ, PYTHONPYCACHEPREFIX=pycache)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for name in (
        "TRACEGRAD_TIERED",
        "TRACEGRAD_PROGRAM_CACHE",
        "TRACEGRAD_CACHE_DIR",
        "TRACEGRAD_BACKEND",
    ):
        env.pop(name, None)
    if tracegrad_root is not None:
        env["PYTHONPATH"] = tracegrad_root
    return env


def export_revision(rev: str, into: str) -> str:
    """The tracegrad package of git revision `rev`, extracted into `into`."""
    os.makedirs(into, exist_ok=True)
    archive = subprocess.run(
        ["git", "archive", rev, "tracegrad"], cwd=ROOT, capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", into], input=archive.stdout, check=True)
    return into


def first_calls(rounds: int, jax_python: str | None, before: str | None) -> dict:
    """{config: {workload: {"import", "first", "total"}}} as medians over rounds."""
    work = tempfile.mkdtemp(prefix="tg-first-")
    pycache = os.path.join(work, "pycache")
    roots = {"tracegrad": ROOT}
    if before:
        roots[f"before ({before})"] = export_revision(before, os.path.join(work, "before"))
    configs = []  # (name, kind, root, extra env)
    for label, root in roots.items():
        configs.append((f"{label}, empty kernel cache", "cold", root, {}))
        configs.append((f"{label}, warm disk cache", "warm", root, {}))
    configs.append(
        ("tracegrad, empty cache, TRACEGRAD_TIERED=0", "cold", ROOT, {"TRACEGRAD_TIERED": "0"})
    )
    configs.append(
        ("tracegrad, warm cache, TRACEGRAD_TIERED=0", "warm", ROOT, {"TRACEGRAD_TIERED": "0"})
    )
    configs.append(
        (
            "tracegrad, warm cache, no persisted programs",
            "warm",
            ROOT,
            {"TRACEGRAD_PROGRAM_CACHE": "0"},
        )
    )
    configs.append((FLOOR, "numpy", None, {}))
    if jax_python:
        configs.append(("JAX jit (no compilation cache)", "jax", None, {}))
    samples: dict = {name: {"W1": [], "MLP": []} for name, *_ in configs}
    try:
        for r in range(rounds + 1):  # round 0 fills the bytecode folder: not counted
            for name, kind, root, extra in configs:
                for workload in ("W1", "MLP"):
                    if kind in ("jax", "numpy"):
                        env = base_env(pycache, None)
                        env.pop("PYTHONPATH", None)
                        python, script = (
                            (jax_python, JAX_FIRST)
                            if kind == "jax"
                            else (sys.executable, NUMPY_FIRST)
                        )
                        got = run_json(python, script, [workload], env)
                    else:
                        env = base_env(pycache, root) | extra
                        env["TRACEGRAD_CACHE_DIR"] = os.path.join(
                            work, f"cache-{r}-{len(samples[name][workload])}-{abs(hash(name))}"
                        )
                        if kind == "warm":  # filled by an earlier process that compiled
                            run_json(sys.executable, TRACEGRAD_FIRST, [workload, "fill"], env)
                        got = run_json(sys.executable, TRACEGRAD_FIRST, [workload], env)
                        shutil.rmtree(env["TRACEGRAD_CACHE_DIR"], ignore_errors=True)
                    got["total"] = got["import"] + got["first"]
                    if r:
                        samples[name][workload].append(got)
            if r:
                print(f"  round {r} of {rounds} done", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        name: {
            w: {k: float(np.median([s[k] for s in runs])) for k in ("import", "first", "total")}
            for w, runs in per.items()
        }
        for name, per in samples.items()
    }


def thin_mlp(rounds: int, jax_python: str | None, cases: list[tuple[int, str]]) -> dict:
    """Per-step medians: {case: {"tracegrad": s, "breadth first": s, "JAX": s}}. Each round runs
    a fresh process of each, interleaved; round 0 compiles and is not counted."""
    names = ",".join(f"{n}:{d}" for n, d in cases)
    kinds = {"tracegrad": "pipelines", "breadth first": "breadth-first"}
    out: dict = {c: {k: [] for k in (*kinds, "JAX")} for c in names.split(",")}
    env = base_env(tempfile.gettempdir(), ROOT)
    jax_env = base_env(tempfile.gettempdir(), None)
    jax_env.pop("PYTHONPATH", None)
    for r in range(rounds + 1):
        order = list(kinds.items()) if r % 2 else list(reversed(kinds.items()))
        for kind, arg in order:
            got = run_json(sys.executable, TG_THIN, [names, "15", arg], env)
            for case, t in got.items():
                if r:
                    out[case][kind].append(t)
        if jax_python and r:
            for case, t in run_json(jax_python, JAX_THIN, [names, "15"], jax_env).items():
                out[case]["JAX"].append(t)
        print(f"  thin network: round {r} of {rounds} done", flush=True)
    return {
        case: {k: float(np.median(v)) for k, v in per.items() if v} for case, per in out.items()
    }


def ms(t: float) -> str:
    return f"{t * 1e3:.0f} ms" if t >= 0.01 else f"{t * 1e3:.2f} ms"


def report(first: dict, thin: dict, jax_note: str) -> str:
    lines = [
        SECTION,
        "",
        f"`benchmarks/bench_first_call.py`, {datetime.date.today()}, {platform.machine()}, "
        f"{os.cpu_count()} cores; medians of fresh subprocesses, interleaved. {jax_note}",
        "",
    ]
    workloads = (
        ("W1", "W1's gradient, 1,000 float64"),
        ("MLP", "the mlp example's value_and_grad (2-16-16-1, 500 points)"),
    )
    for workload, title in workloads if first else ():
        lines += [
            f"### First call in a fresh process: {title}",
            "",
            "| configuration | import | first call | total |",
            "|---|---:|---:|---:|",
        ]
        for name, per in first.items():
            m = per[workload]
            lines.append(f"| {name} | {ms(m['import'])} | {ms(m['first'])} | {ms(m['total'])} |")
        lines.append("")
    if thin:
        lines += [
            "### Thin MLP 10-64-64-1, value_and_grad, per step",
            "",
            "| N, dtype | tracegrad cpu | the same, breadth first | JAX jit | tracegrad / JAX |",
            "|---|---:|---:|---:|---:|",
        ]
        for case, per in thin.items():
            n, d = case.split(":")
            tgt, bf, jt = per.get("tracegrad"), per.get("breadth first"), per.get("JAX")
            ratio = f"{tgt / jt:.2f}x" if tgt and jt else "-"
            lines.append(
                f"| {int(n):,}, {d} | {ms(tgt)} | {ms(bf)} | {ms(jt) if jt else '-'} | {ratio} |"
            )
        lines.append("")
    return "\n".join(lines)


def write_section(text: str) -> None:
    with open(RESULTS, encoding="utf-8") as f:
        old = f.read()
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.M | re.S)
    marker = "<!-- first-call table: generated -->"
    body = text.rstrip() + "\n\n"
    if pattern.search(old):
        start = pattern.search(old)
        existing = start.group(0)
        # keep the hand-written analysis after the generated tables
        keep = existing.split(marker, 1)[1] if marker in existing else ""
        new = old[: start.start()] + body + marker + keep + old[start.end() :]
    else:
        new = old.rstrip() + "\n\n" + body + marker + "\n"
    with open(RESULTS, "w", encoding="utf-8") as f:
        f.write(new)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one round, prints only")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jax-python", default=DEFAULT_JAX)
    parser.add_argument("--before", help="a git revision whose tracegrad to measure too")
    parser.add_argument("--no-thin", action="store_true")
    parser.add_argument(
        "--thin-only", action="store_true", help="the thin network's step only, printed"
    )
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    jax_python, note = args.jax_python, f"JAX from `{args.jax_python}`."
    try:
        version = subprocess.run(
            [jax_python, "-c", "import jax; print(jax.__version__)"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if version.returncode:
            raise OSError(version.stderr.strip().splitlines()[-1])
        note = f"JAX {version.stdout.strip()} in `{jax_python}`."
    except (OSError, IndexError, subprocess.SubprocessError) as exc:
        print(
            f"JAX is not available at {jax_python} ({exc}): its rows are skipped", file=sys.stderr
        )
        jax_python, note = None, "JAX not installed: no JAX rows."
    cases = [(n, d) for d in ("float64", "float32") for n in (2048, 16384)]
    if args.thin_only:
        print(report({}, thin_mlp(rounds, jax_python, cases), note))
        return
    first = first_calls(rounds, jax_python, args.before)
    thin = {} if args.no_thin else thin_mlp(max(1, rounds // 2 + 1), jax_python, cases)
    text = report(first, thin, note)
    print(text)
    if not args.quick:
        write_section(text)
        with open(os.path.join(HERE, "bench_first_call_raw.json"), "w") as f:
            json.dump({"first": first, "thin": thin}, f, indent=1)


if __name__ == "__main__":
    main()
