"""The cold first call, tracegrad (both cpu compilers) against JAX's jit, in fresh processes.

    python3 benchmarks/cold_compile.py                            # 8 programs, 3 rounds
    python3 benchmarks/cold_compile.py --programs W1,W3 --repeats 5 --json out.json
    python3 benchmarks/cold_compile.py --compilers numba --jax-python /tmp/benchenv/bin/python

Each measurement is a new process running one program of vs_jax_programs.py once:

- **cold**: tracegrad with an empty kernel cache (TRACEGRAD_CACHE_DIR a new temporary folder
  for each run) and tiering off (TRACEGRAD_TIERED=0: the first call compiles before it
  returns), so `first` is trace + differentiate + compile + run; JAX's `jax.jit` of the same
  function, compile and first call (JAX keeps no compilation cache unless asked to);
- **llvm+vmath IR**: the llvm compiler cold, but with the LLVM IR of tracegrad's vmath
  functions (which the llvm compiler takes from Numba once and keeps in the cache folder, under
  vmath_ir/) copied into the new folder from an untimed run of every program first: what a cold
  kernel costs when only vmath's IR is already built (`--no-vmath-seed` leaves it out);
- **warm** (W1 and the thin MLP): a second tracegrad process given the folder the cold one
  left (kernels and traced programs on disk), timed from just before the process starts to
  its first result: Python's start, `import numpy`, `import tracegrad`, loading, the call.

Configurations run interleaved: each round runs every program under tracegrad-llvm,
tracegrad-numba, llvm+vmath IR and JAX, the order rotating from round to round. Medians over the
rounds are reported, with tracegrad's time over JAX's and the largest difference between their
values (each element's difference relative to the largest magnitude of its array), and each
child's import time (NumPy and the library). Python's bytecode of both libraries is written
by an untimed run of each configuration first (as an installed package has it); Numba keeps
the machine code of tracegrad's vmath functions beside them in the package (not in the kernel
cache), so those stay compiled between runs too.

JAX is never a dependency of tracegrad: it runs in another interpreter (`--jax-python`, default
/tmp/benchenv/bin/python, made with `python3 -m venv /tmp/benchenv && /tmp/benchenv/bin/pip
install jax numpy`); without it the JAX columns are left empty and tracegrad's two compilers
are compared with each other. A configuration that fails is reported with its error and not
run again. Prints markdown tables; `--json` also writes every run and the summary.
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

PROGRAMS = ("W1", "W2", "W3", "leapfrog", "gp_hessian", "thin_mlp", "vmap_grad", "scan_rnn")
WARM = ("W1", "thin_mlp")
COMPILERS = ("llvm", "numba")
LABELS = {
    "W1": "W1 grad, 10^5",
    "W2": "W2 MLP grad, batch 256",
    "W3": "W3 hessian, n = 100",
    "leapfrog": "leapfrog grad, 1,000 steps (Python loop; JAX fori_loop)",
    "gp_hessian": "GP neg. log marginal likelihood hessian, 40 points",
    "thin_mlp": "thin MLP 10-64-64-1 value_and_grad, N = 2,048",
    "vmap_grad": "vmap(grad) per-example MLP, 256 examples",
    "scan_rnn": "scan RNN grad, 100 steps",
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
        type=lambda t: _names(t, tuple(PROGRAMS), "program"),
        default=list(PROGRAMS),
        help=f"comma-separated, of {', '.join(PROGRAMS)} (default: all)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="rounds (default 3)")
    parser.add_argument(
        "--compilers",
        type=lambda t: _names(t, COMPILERS, "compiler"),
        default=list(COMPILERS),
        help="tracegrad's cpu compilers to run (default llvm,numba)",
    )
    parser.add_argument("--jax-python", default=vp.DEFAULT_JAX, help="an interpreter with jax")
    parser.add_argument("--json", help="write every run and the summary to this file")
    parser.add_argument(
        "--no-vmath-seed",
        action="store_true",
        help=f"leave out {SEEDED} (llvm, cold kernels with vmath's IR already on disk)",
    )
    parser.add_argument("--small", action="store_true", help="tiny sizes (for tests)")
    parser.add_argument("--timeout", type=int, default=900, help="seconds a child may take")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return args


SEEDED = "tracegrad-llvm-vmath"  # llvm, with vmath's LLVM IR already in the cache folder
SHORT = {"tracegrad-llvm": "llvm", "tracegrad-numba": "numba", SEEDED: "llvm+vmath IR"}


def _short(config: str) -> str:
    return SHORT.get(config, config)


def _compiler(config: str) -> str:
    return config.split("-")[1]


def configurations(args) -> list[str]:
    configs = [f"tracegrad-{c}" for c in args.compilers]
    if "llvm" in args.compilers and not args.no_vmath_seed:
        configs.append(SEEDED)
    if os.path.exists(args.jax_python):
        configs.append("jax")
    return configs


def _run(config: str, program: str, args, cache_dir: str, save: str | None) -> dict:
    if config == "jax":
        python, library, env = args.jax_python, "jax", vp.jax_env()
    else:
        python, library = sys.executable, "tracegrad"
        env = vp.tracegrad_env(_compiler(config), cache_dir)
    load = os.getloadavg()[0]
    out = vp.run_child(
        python, library, program, "first", env, small=args.small, save=save, timeout=args.timeout
    )
    out["load"] = load
    return out


def measure(args) -> dict:
    """Every run: a list of records {round, program, config, kind (cold/warm), import, first,
    total, load, error}; values are compared once per program and configuration."""
    configs = configurations(args)
    if "jax" not in configs:
        print(f"no JAX at {args.jax_python}: its columns stay empty", file=sys.stderr)
    scratch = tempfile.mkdtemp(prefix="tg-cold-compile-")
    runs, failed, saved = [], {}, {}
    try:
        for config in configs:  # untimed: bytecode written, libraries' own caches filled
            cache = tempfile.mkdtemp(dir=scratch)
            out = _run(config, "prime", args, cache, None)
            if "error" in out:
                failed[config] = out["error"]
                print(f"{config} fails to start: {out['error']}", file=sys.stderr)
        seed = None
        if SEEDED in configs and SEEDED not in failed:  # vmath's IR of every program, untimed
            seed = tempfile.mkdtemp(dir=scratch)
            for program in args.programs:
                _run(SEEDED, program, args, seed, None)
        for r in range(args.repeats):
            order = configs[r % len(configs) :] + configs[: r % len(configs)]
            for program in args.programs:
                for config in order:
                    if config in failed or (config, program) in failed:
                        continue
                    cache = tempfile.mkdtemp(dir=scratch)
                    if config == SEEDED and os.path.isdir(os.path.join(seed, "vmath_ir")):
                        shutil.copytree(
                            os.path.join(seed, "vmath_ir"), os.path.join(cache, "vmath_ir")
                        )
                    save = None
                    if (program, config) not in saved:
                        save = os.path.join(scratch, f"{program}-{config}.npz")
                    out = _run(config, program, args, cache, save)
                    runs.append(_record(r, program, config, "cold", out))
                    print(_progress(runs[-1]), file=sys.stderr, flush=True)
                    if "error" in out:
                        failed[config, program] = out["error"]
                    elif save:
                        saved[program, config] = vp.load_values(save)
                    warm = config not in ("jax", SEEDED) and program in WARM
                    if warm and "error" not in out:
                        warm = _run(config, program, args, cache, None)
                        runs.append(_record(r, program, config, "warm", warm))
                        print(_progress(runs[-1]), file=sys.stderr, flush=True)
                    shutil.rmtree(cache, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "machine": vp.machine(),
        "args": {k: v for k, v in vars(args).items()},
        "configs": configs,
        "runs": runs,
        "failed_to_start": {c: e for c, e in failed.items() if isinstance(c, str)},
        "differences": differences(saved),
    }


def _record(r: int, program: str, config: str, kind: str, out: dict) -> dict:
    keys = ("import", "first", "total", "load", "error", "compiler", "versions")
    return {"round": r, "program": program, "config": config, "kind": kind} | {
        k: out[k] for k in keys if k in out
    }


def _progress(rec: dict) -> str:
    head = f"round {rec['round'] + 1} {rec['program']} {rec['config']} {rec['kind']}:"
    if "error" in rec:
        return f"{head} failed: {rec['error']}"
    return f"{head} first {rec['first']:.3f} s, total {rec['total']:.3f} s"


def differences(saved: dict) -> dict:
    """{program: {config: largest relative difference}}: each tracegrad configuration against
    JAX where JAX ran, else against tracegrad-numba."""
    out: dict = {}
    for program in {p for p, _ in saved}:
        ref = "jax" if (program, "jax") in saved else "tracegrad-numba"
        if (program, ref) not in saved:
            continue
        for (p, config), values in saved.items():
            if p == program and config != ref:
                try:
                    d = vp.max_relative_difference(values, saved[program, ref])
                except ValueError as exc:
                    d = f"shapes differ: {exc}"
                out.setdefault(program, {})[config] = {"against": ref, "max_rel_diff": d}
    return out


def summarize(raw: dict) -> dict:
    """Medians per program, configuration and kind, ratios to JAX, import times."""
    configs, runs = raw["configs"], raw["runs"]
    programs = list(dict.fromkeys(rec["program"] for rec in runs))
    table: dict = {}
    for program in programs:
        for kind in ("cold", "warm"):
            for config in configs:
                recs = [
                    x
                    for x in runs
                    if (x["program"], x["config"], x["kind"]) == (program, config, kind)
                ]
                if not recs:
                    continue
                ok = [x for x in recs if "error" not in x]
                table.setdefault(program, {}).setdefault(kind, {})[config] = {
                    "first": vp.median(x["first"] for x in ok),
                    "total": vp.median(x["total"] for x in ok),
                    "import": vp.median(x["import"] for x in ok),
                    "n": len(ok),
                    "error": next((x["error"] for x in recs if "error" in x), None),
                }
    ratios: dict = {}
    for program, kinds in table.items():
        cold = kinds.get("cold", {})
        jax = cold.get("jax", {})
        for config in configs:
            if config == "jax":
                continue
            mine = cold.get(config, {})
            warm = kinds.get("warm", {}).get(config, {})
            ratios.setdefault(program, {})[config] = {
                "cold_first": vp.ratio(mine.get("first"), jax.get("first")),
                "cold_total": vp.ratio(mine.get("total"), jax.get("total")),
                "warm_total": vp.ratio(warm.get("total"), jax.get("total")),
            }
    imports = {
        config: vp.median(x["import"] for x in runs if x["config"] == config and "import" in x)
        for config in configs
    }
    loads = [x["load"] for x in runs if "load" in x]
    return {
        "table": table,
        "ratios": ratios,
        "imports": imports,
        "load": [min(loads), max(loads)] if loads else None,
    }


def _cell(table, program, kind, config, key="first") -> str:
    entry = table.get(program, {}).get(kind, {}).get(config)
    if entry is None:
        return "-"
    if entry["n"] == 0:
        return f"failed ({entry['error'][:80]})"
    return vp.fmt_seconds(entry[key])


def _diff_cell(raw, program, config) -> str:
    d = raw["differences"].get(program, {}).get(config)
    if d is None:
        return "-"
    value = d["max_rel_diff"]
    text = value if isinstance(value, str) else vp.fmt_diff(value)
    return text if d["against"] == "jax" else f"{text} (vs numba)"


def format_tables(raw: dict, summary: dict) -> str:
    configs, table, ratios = raw["configs"], summary["table"], summary["ratios"]
    mine = [c for c in configs if c != "jax"]
    has_jax = "jax" in configs
    m = raw["machine"]
    lines = [
        f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}; load average "
        f"{m['load'][0]:.2f} at the start, {summary['load'][0]:.2f}-{summary['load'][1]:.2f} "
        f"during the runs; {raw['args']['repeats']} rounds, medians."
        if m.get("load") and summary.get("load")
        else f"Machine: {m['cpu']}, {m['cores']} cores; {raw['args']['repeats']} rounds.",
        "",
        *(
            ["Small sizes (--small): not the sizes the labels name.", ""]
            if raw["args"]["small"]
            else []
        ),
        "Cold first call (trace, differentiate, compile, run; after import), empty caches:",
        "",
    ]
    head = ["program"] + [_short(c) for c in mine] + (["JAX jit"] if has_jax else [])
    head += [f"{_short(c)} / JAX" for c in mine] if has_jax else []
    head += [f"max rel. diff {_short(c)}" for c in mine]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for program in table:
        row = [LABELS.get(program, program)]
        row += [_cell(table, program, "cold", c) for c in mine]
        if has_jax:
            row.append(_cell(table, program, "cold", "jax"))
            row += [vp.fmt_ratio(ratios[program][c]["cold_first"]) for c in mine]
        row += [_diff_cell(raw, program, c) for c in mine]
        lines.append("| " + " | ".join(row) + " |")
    warm_programs = [p for p in table if "warm" in table[p]]
    mine = [c for c in mine if any(c in table[p]["warm"] for p in warm_programs)]
    if warm_programs:
        lines += [
            "",
            "Process start to first result (Python, `import numpy`, the library, the call); "
            "tracegrad cold (empty cache) and warm (the cache the cold process left); JAX has "
            "no cache:",
            "",
        ]
        head = ["program"] + [f"{_short(c)} cold" for c in mine]
        head += [f"{_short(c)} warm" for c in mine]
        head += ["JAX jit"] + [f"{_short(c)} warm / JAX" for c in mine] if has_jax else []
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for program in warm_programs:
            row = [LABELS.get(program, program)]
            row += [_cell(table, program, "cold", c, "total") for c in mine]
            row += [_cell(table, program, "warm", c, "total") for c in mine]
            if has_jax:
                row.append(_cell(table, program, "cold", "jax", "total"))
                row += [vp.fmt_ratio(ratios[program][c]["warm_total"]) for c in mine]
            lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Import (NumPy and the library) in each child, median of all its runs:", ""]
    lines += ["| " + " | ".join(map(_short, configs)) + " |", "|" + "---|" * len(configs)]
    lines.append("| " + " | ".join(vp.fmt_seconds(summary["imports"][c]) for c in configs) + " |")
    for config, error in raw["failed_to_start"].items():
        lines.append(f"\n{config} did not start: {error}")
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
