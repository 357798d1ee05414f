"""A second process of a time-stepping script: how long until its first result (issue 38).

    python3 benchmarks/bench_warm_start.py                  # writes "## Warm start" in RESULTS.md
    python3 benchmarks/bench_warm_start.py --quick          # fewer rounds, prints only
    python3 benchmarks/bench_warm_start.py --before 0469c9a # also the code of a git revision

The script: a 1-D heat equation on 128 points stepped 2,000 times in a plain Python loop (which
tracing rolls into one loop), differentiated with respect to the diffusion coefficient and the
initial state. Each configuration runs in new processes: the first with an empty cache folder,
the second with the folder the first left (which waited for its background compilation). Timed
in each process: `import` (NumPy and tracegrad), the first call, the time until the compiled
program is ready (`tg.wait_compiled()`), and a compiled call. Tiered execution on (the default)
and off (`TRACEGRAD_TIERED=0`). The floor is NumPy alone running the forward simulation once in
a new process (no derivative). Interleaved rounds, medians.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "RESULTS.md")
SECTION = "## Warm start: a second process of a 2,000-step script (`bench_warm_start.py`)"

SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    start = time.perf_counter()
    import numpy as np
    {import_line}

    def simulate(kappa, u0, steps=2000):
        u = u0
        for _ in range(steps):
            u = u + kappa * (np.roll(u, 1) - 2 * u + np.roll(u, -1))
        return np.sum(u ** 2)

    u0 = np.sin(np.linspace(0, np.pi, 128))
    imported = time.perf_counter()
    {body}
    """
)

TRACEGRAD = textwrap.dedent(
    """
    g = tg.grad(simulate, argnums=(0, 1))
    g(0.1, u0)
    first = time.perf_counter()
    tg.wait_compiled()
    ready = time.perf_counter()
    t = time.perf_counter(); g(0.1, u0); call = time.perf_counter() - t
    print(json.dumps({"import": imported - start, "first": first - imported,
                      "ready": ready - imported, "call": call, "traces": g.trace_count,
                      "where": tg.__file__}))
    """
)

FLOOR = textwrap.dedent(
    """
    simulate(0.1, u0)
    first = time.perf_counter()
    print(json.dumps({"import": imported - start, "first": first - imported,
                      "ready": first - imported, "call": first - imported, "traces": 0}))
    """
)


def _code(floor: bool) -> str:
    if floor:
        return SCRIPT.format(import_line="", body=FLOOR)
    return SCRIPT.format(import_line="import tracegrad as tg", body=TRACEGRAD)


def _run(code: str, env: dict) -> dict:
    # run from the root folder: `-c` puts the working directory first on sys.path, where a
    # checkout's tracegrad would shadow the PYTHONPATH of the revision measured
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=900,
        cwd="/",
    )
    if done.returncode:
        raise RuntimeError(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _source(rev: str | None, scratch: str) -> str:
    """The folder holding the `tracegrad` package of `rev` (None: this checkout)."""
    if rev is None:
        return ROOT
    folder = os.path.join(scratch, f"src-{rev}")
    os.makedirs(folder, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", ROOT, "archive", rev, "tracegrad"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
    return folder


def measure(rounds: int, before: str | None) -> dict:
    scratch = tempfile.mkdtemp(prefix="tg-warm-")
    pycache = os.path.join(scratch, "pycache")
    configs = [("this checkout", None)] + ([(f"at {before}", before)] if before else [])
    results: dict = {}
    try:
        for label, rev in configs:
            source = _source(rev, scratch)
            for tiered in ("1", "0"):
                name = f"{label}, tiered {'on' if tiered == '1' else 'off'}"
                results[name] = {"cold": [], "warm": []}
                base = {"PYTHONPATH": source, "PYTHONPYCACHEPREFIX": pycache}
                base["TRACEGRAD_TIERED"] = tiered
                _run(_code(False), {**base, "TRACEGRAD_CACHE_DIR": os.path.join(scratch, "w")})
        for r in range(rounds):
            results.setdefault("NumPy alone, the forward simulation (floor)", {"warm": []})
            floor = _run(_code(True), {"PYTHONPYCACHEPREFIX": pycache})
            results["NumPy alone, the forward simulation (floor)"]["warm"].append(floor)
            for label, rev in configs:
                source = _source(rev, scratch)
                for tiered in ("1", "0"):
                    name = f"{label}, tiered {'on' if tiered == '1' else 'off'}"
                    folder = os.path.join(scratch, f"cache-{r}-{rev}-{tiered}")
                    env = {
                        "PYTHONPATH": source,
                        "PYTHONPYCACHEPREFIX": pycache,
                        "TRACEGRAD_TIERED": tiered,
                        "TRACEGRAD_CACHE_DIR": folder,
                    }
                    for process in ("cold", "warm"):
                        run = _run(_code(False), env)
                        if not run["where"].startswith(source):
                            raise RuntimeError(f"{name} imported {run['where']}, not {source}")
                        results[name][process].append(run)
                    shutil.rmtree(folder, ignore_errors=True)
            print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return results


def _median(runs: list[dict], key: str) -> float:
    return float(np.median([run[key] for run in runs]))


def table(results: dict) -> str:
    rows = [
        "| configuration | process | import | first result | compiled program ready "
        "| a compiled call | traces |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, by_process in results.items():
        for process, runs in by_process.items():
            if not runs:
                continue
            cells = [f"{_median(runs, k):.3f} s" for k in ("import", "first", "ready")]
            cells.append(f"{_median(runs, 'call') * 1e3:.2f} ms")
            traces = sorted({run["traces"] for run in runs})
            rows.append(f"| {name} | {process} | " + " | ".join(cells) + f" | {traces} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds, print only")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", help="also measure the tracegrad of this git revision")
    args = parser.parse_args()
    rounds = 2 if args.quick else args.rounds
    results = measure(rounds, args.before)
    text = table(results)
    print(text)
    if args.quick:
        return
    cpu = subprocess.run(["uname", "-m"], capture_output=True, text=True).stdout.strip()
    section = (
        f"{SECTION}\n\n{datetime.date.today()}, {os.cpu_count()} cores ({cpu}), {rounds} rounds, "
        "medians; times from the start of each process (first result, compiled program ready) "
        "after its `import`.\n\n" + text + "\n"
    )
    with open(RESULTS) as f:
        old = f.read()
    if SECTION in old:
        head, _, rest = old.partition(SECTION)
        tail = rest[rest.find("\n## ") :] if "\n## " in rest else ""
        old = head.rstrip() + "\n\n" + section + tail
    else:
        old = old.rstrip() + "\n\n" + section
    with open(RESULTS, "w") as f:
        f.write(old)


if __name__ == "__main__":
    main()
