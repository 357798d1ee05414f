"""Compiled loops at steady state: tracegrad (both cpu compilers) against JAX's jit, side by side.

    python3 benchmarks/loops_vs_jax.py                       # 3 programs, 3 rounds, 200 calls
    python3 benchmarks/loops_vs_jax.py --programs heat --repeats 5 --calls 500 --json out.json

The programs (vs_jax_programs.py), each a gradient through a loop:

- **heat**: bench_warm_start.py's 1-D heat equation, 128 points, 2,000 explicit steps, with
  respect to the diffusion coefficient and the initial state;
- **kalman**: the log likelihood of a 4-state Kalman filter over 100 observations, a cholesky
  and two solves per step, with respect to the transition matrix and two log noise scales;
- **leapfrog**: bench_loops.py's velocity Verlet on a chain of 100 masses, 1,000 steps, with
  respect to the initial positions and the stiffness.

tracegrad's are plain Python loops (which tracing rolls into loops); JAX's are `lax.fori_loop`
of the same step under `jax.jit`, and the Kalman filter also as `lax.scan` over the
observations. Each round runs every configuration in a new process (the order rotating from
round to round); a process makes the first call, waits for tracegrad's compiled program
(tiering is off anyway), warms up with a tenth of the calls (at least 5) and times CALLS calls
one by one. A round's number is the median of its calls; the table shows the median of the
rounds' numbers and their range, tracegrad's time over JAX's fori_loop, and the largest
difference between their gradients (each element's difference relative to the largest
magnitude of its array). tracegrad keeps one kernel cache folder per compiler for the whole
run (temporary), so only the first round compiles.

JAX runs in another interpreter (`--jax-python`, default /tmp/benchenv/bin/python); without it
the JAX columns are left empty and the llvm compiler's values are compared with Numba's. Prints
markdown tables; `--json` also writes every run and the summary.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import vs_jax_programs as vp  # noqa: E402

PROGRAMS = ("heat", "kalman", "leapfrog")
COMPILERS = ("llvm", "numba")
# the JAX configurations of each program: (configuration, vs_jax_programs program)
JAX_VARIANTS = {
    "heat": [("jax", "heat")],
    "kalman": [("jax", "kalman"), ("jax-scan", "kalman_scan")],
    "leapfrog": [("jax", "leapfrog")],
}
LABELS = {
    "heat": "heat equation grad, 128 points, 2,000 steps",
    "kalman": "Kalman filter grad, 4 states, 100 steps",
    "leapfrog": "leapfrog grad, 100 masses, 1,000 steps",
}


def _names(text: str, allowed, what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in allowed]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {', '.join(unknown) or '(none given)'}: choose from {', '.join(allowed)}"
        )
    return names


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--programs",
        type=lambda t: _names(t, PROGRAMS, "program"),
        default=list(PROGRAMS),
        help=f"comma-separated, of {', '.join(PROGRAMS)} (default: all)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--calls", type=int, default=200, help="timed calls a process (200)")
    parser.add_argument(
        "--compilers",
        type=lambda t: _names(t, COMPILERS, "compiler"),
        default=list(COMPILERS),
        help="tracegrad's cpu compilers to run (default llvm,numba)",
    )
    parser.add_argument("--jax-python", default=vp.DEFAULT_JAX, help="an interpreter with jax")
    parser.add_argument("--json", help="write every run and the summary to this file")
    parser.add_argument("--small", action="store_true", help="tiny sizes (for tests)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds a child may take")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.calls < 1:
        parser.error("--repeats and --calls must be at least 1")
    return args


def configurations(args, program: str) -> list[tuple[str, str]]:
    """(configuration, child program) pairs for one program."""
    out = [(f"tracegrad-{c}", program) for c in args.compilers]
    if os.path.exists(args.jax_python):
        out += JAX_VARIANTS[program]
    return out


def measure(args) -> dict:
    """Every run: records {round, program, config, median, min, first, load, error}; the values
    of each configuration's first successful run are compared at the end."""
    if not os.path.exists(args.jax_python):
        print(f"no JAX at {args.jax_python}: its columns stay empty", file=sys.stderr)
    scratch = tempfile.mkdtemp(prefix="tg-loops-vs-jax-")
    caches = {c: tempfile.mkdtemp(dir=scratch) for c in args.compilers}
    runs, failed, values = [], {}, {}
    mode = f"steady:{args.calls}"
    try:
        for r in range(args.repeats):
            for program in args.programs:
                configs = configurations(args, program)
                k = r % len(configs)
                for config, child_program in configs[k:] + configs[:k]:
                    if (config, program) in failed:
                        continue
                    if config.startswith("jax"):
                        python, library, env = args.jax_python, "jax", vp.jax_env()
                    else:
                        python, library = sys.executable, "tracegrad"
                        compiler = config.split("-", 1)[1]
                        env = vp.tracegrad_env(compiler, caches[compiler])
                    load = os.getloadavg()[0]
                    out = vp.run_child(
                        python,
                        library,
                        child_program,
                        mode,
                        env,
                        small=args.small,
                        timeout=args.timeout,
                    )
                    rec = {"round": r, "program": program, "config": config, "load": load}
                    if "error" in out:
                        rec["error"] = out["error"]
                        failed[config, program] = out["error"]
                    else:
                        rec |= {
                            "median": vp.median(out["calls"]),
                            "min": min(out["calls"]),
                            "first": out["first"],
                            "import": out["import"],
                            "compiler": out.get("compiler"),
                            "versions": out.get("versions"),
                        }
                        values.setdefault((program, config), out["values"])
                    runs.append(rec)
                    print(_progress(rec), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "machine": vp.machine(),
        "args": dict(vars(args)),
        "runs": runs,
        "differences": differences(values),
    }


def _progress(rec: dict) -> str:
    head = f"round {rec['round'] + 1} {rec['program']} {rec['config']}:"
    if "error" in rec:
        return f"{head} failed: {rec['error']}"
    return f"{head} median call {rec['median'] * 1e3:.3f} ms (first call {rec['first']:.2f} s)"


def differences(values: dict) -> dict:
    """{program: {config: {against, max_rel_diff}}}: every configuration against JAX's
    fori_loop where it ran, else against tracegrad-numba."""
    out: dict = {}
    for program in {p for p, _ in values}:
        ref = "jax" if (program, "jax") in values else "tracegrad-numba"
        if (program, ref) not in values:
            continue
        for (p, config), mine in values.items():
            if p == program and config != ref:
                try:
                    d = vp.max_relative_difference(mine, values[program, ref])
                except ValueError as exc:
                    d = f"shapes differ: {exc}"
                out.setdefault(program, {})[config] = {"against": ref, "max_rel_diff": d}
    return out


def summarize(raw: dict) -> dict:
    """{program: {config: {median, low, high, rounds, error}}} over the rounds' medians, and
    each configuration's median over JAX's fori_loop's."""
    table: dict = {}
    for rec in raw["runs"]:
        entry = table.setdefault(rec["program"], {}).setdefault(
            rec["config"], {"medians": [], "error": None}
        )
        if "error" in rec:
            entry["error"] = rec["error"]
        else:
            entry["medians"].append(rec["median"])
    for configs in table.values():
        for entry in configs.values():
            ms = entry.pop("medians")
            entry |= {
                "median": vp.median(ms),
                "low": min(ms, default=None),
                "high": max(ms, default=None),
                "rounds": len(ms),
            }
    ratios = {
        program: {
            config: vp.ratio(entry["median"], configs.get("jax", {}).get("median"))
            for config, entry in configs.items()
            if config != "jax"
        }
        for program, configs in table.items()
    }
    loads = [rec["load"] for rec in raw["runs"]]
    return {"table": table, "ratios": ratios, "load": [min(loads), max(loads)] if loads else None}


def format_tables(raw: dict, summary: dict) -> str:
    table, ratios = summary["table"], summary["ratios"]
    configs = list(dict.fromkeys(c for p in table.values() for c in p))
    mine = [c for c in configs if c.startswith("tracegrad")]
    others = [c for c in configs if c.startswith("jax") and c != "jax"]
    has_jax = "jax" in configs
    m, args = raw["machine"], raw["args"]
    load = summary["load"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}; load average "
        + (f"{m['load'][0]:.2f} at the end, " if m.get("load") else "")
        + (f"{load[0]:.2f}-{load[1]:.2f} at each child's start; " if load else "")
        + f"{args['repeats']} rounds of {args['calls']} calls, median of the rounds' medians"
        + " (range).",
        "",
    ]
    if args["small"]:
        lines += ["Small sizes (--small): not the sizes the labels name.", ""]
    head = ["program"] + [c.replace("tracegrad-", "tracegrad ") for c in mine]
    head += ["JAX fori_loop"] if has_jax else []
    head += ["JAX scan"] if others else []
    head += [f"{c.split('-')[1]} / JAX" for c in mine] if has_jax else []
    head += [f"max rel. diff {c.split('-')[1]}" for c in mine]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def cell(program, config):
        entry = table[program].get(config)
        if entry is None:
            return "-"
        if entry["rounds"] == 0:
            return f"failed ({entry['error'][:80]})"
        return (
            f"{vp.fmt_seconds(entry['median'])} "
            f"({vp.fmt_seconds(entry['low'])}-{vp.fmt_seconds(entry['high'])})"
        )

    for program in table:
        row = [LABELS.get(program, program)] + [cell(program, c) for c in mine]
        if has_jax:
            row.append(cell(program, "jax"))
        if others:
            row.append(cell(program, "jax-scan"))
        if has_jax:
            row += [vp.fmt_ratio(ratios[program].get(c)) for c in mine]
        for c in mine:
            d = raw["differences"].get(program, {}).get(c)
            if d is None:
                row.append("-")
                continue
            v = d["max_rel_diff"]
            text = v if isinstance(v, str) else vp.fmt_diff(v)
            row.append(text if d["against"] == "jax" else f"{text} (vs numba)")
        lines.append("| " + " | ".join(row) + " |")
    scan = [
        f"{p}: JAX scan against fori_loop {vp.fmt_diff(d['jax-scan']['max_rel_diff'])}"
        for p, d in raw["differences"].items()
        if "jax-scan" in d and not isinstance(d["jax-scan"]["max_rel_diff"], str)
    ]
    if scan:
        lines += ["", "Largest relative differences, " + "; ".join(scan) + "."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    raw = measure(args)
    summary = summarize(raw)
    print(format_tables(raw, summary))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(raw | {"summary": summary}, f, indent=1, default=str)
    return raw | {"summary": summary}


if __name__ == "__main__":
    main()
