"""HIPS autograd's own `examples/`, run as written with autograd and with only their imports
rewritten to plain NumPy + tracegrad, compared number for number.

    python3 benchmarks/autograd_examples.py --autograd-repo /work/.mirror/HIPS+autograd/repo
    python3 benchmarks/autograd_examples.py --autograd-repo REPO --only black_box_svi --steps 5

For each example the runner extracts autograd's examples/ folder (`git archive HEAD examples`, or a
plain checkout's folder) into two temporary folders and runs the example in a subprocess in each:
(a) as written, under real autograd (`--autograd-python`, an interpreter where autograd is
installed: it is never a dependency of tracegrad), (b) with only its imports rewritten
(`autograd.numpy` -> `numpy`, `from autograd import grad` -> `from tracegrad import grad`,
`autograd.scipy.stats` / `.special` / `.integrate` -> `tracegrad.scipy.stats` / `.special` /
`.integrate`, which take traced values where SciPy's own do not, and autograd's helpers -> the
plain-NumPy stand-ins in benchmarks/autograd_examples_support.py). Both runs go through the same
instrumentation (autograd_examples_support.drive): the gradient makers are
wrapped to record the first top-level gradient call, the optimisers are capped at `--steps`
iterations and `scipy.optimize.minimize` at `--steps` `maxiter` (the objective after each run is
recorded), the global NumPy generator is seeded with 0, and plotting is made harmless (Agg, no
show/pause). An example without an optimiser gives its loss from a `final` expression evaluated
on its globals, or from the value of its N-th `value_and_grad` call (then it is stopped there);
the few loop caps that need an edit are listed in EXAMPLES and applied to both copies alike.

The table: whether the example runs under tracegrad (or the first line of its error), the largest
difference of the first gradient (per leaf, max |a - b| / max(max |a|, 1): relative, or absolute
below 1; target 1e-10), the loss after N steps under both, and whether they match (gradient
within 1e-10, every recorded loss within 1e-8 by the same measure). TRACEGRAD_* settings in the
environment reach the tracegrad run (TRACEGRAD_TIERED=0: compiled programs from the first call).

`--rounding-check` runs autograd a second time with other rounding (`--rounding-env`, by default
OPENBLAS_CORETYPE=SandyBridge: OpenBLAS's kernels without FMA, so every product rounds
differently) and reports how many of the recorded losses autograd reproduces from one rounding to
the other (its horizon) beside how many tracegrad reproduces. An optimiser that restarts from
new points can amplify a last-bit difference into another local optimum: past autograd's own
horizon its numbers are not defined by the code, and a match is judged up to that horizon
("match within autograd's horizon").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SUPPORT = "autograd_examples_support"
GRAD_TOL = 1e-10
LOSS_TOL = 1e-8

MNIST = "needs the MNIST download (data_mnist.py fetches it from the network)"
TRACER = "uses autograd's tracer internals (autograd.tracer Node/trace): nothing to stand in for"

# name -> how to run it. skip: why it is not run. final: an expression on the example's globals
# giving its loss when it has no optimiser. stop: end after this many top-level gradient calls
# (a loop with no iteration count), its loss the last value_and_grad value. caps: (regex,
# replacement) edits applied to both copies, "{steps}" standing for --steps. steps: a lower
# iteration cap for an example whose iterations are slow (both runs).
EXAMPLES: dict[str, dict] = {
    "bayesian_neural_net": {},
    "bayesian_optimization": {},
    "black_box_svi": {},
    "convnet": {"skip": MNIST},
    "deep_gaussian_process": {},
    "define_gradient": {"final": "grad_of_example(np.linspace(-1.0, 1.0, 10))"},
    "dot_graph": {"skip": TRACER},
    # the second derivative, grad(grad(sqrt)), is that of the stand-in's rule, not autograd's
    # (autograd applies its implicit rule again): it is reported in RESULTS, not compared here
    "fixed_points": {"final": "np.array([sqrt(2.0), grad(sqrt)(2.0)])"},
    "fluidsim/fluidsim": {"steps": 3},  # ~6 s a CG iteration under autograd
    "fluidsim/wing": {"steps": 2},  # ~18 s a CG iteration under autograd
    "gaussian_process": {},
    "generative_adversarial_net": {"skip": MNIST},
    "gmm": {},
    "gplvm": {},
    "hmm_em": {"stop": "steps"},
    "ica": {},
    "logistic_regression": {
        "caps": [(r"for i in range\(100\):", "for i in range({steps}):")],
        "final": "training_loss(weights)",
    },
    "lstm": {},
    "mixture_variational_inference": {},
    "natural_gradient_black_box_svi": {},
    "negative_binomial_maxlike": {"final": "np.array([r, p])"},
    "neural_net": {"skip": MNIST},
    "neural_net_regression": {},
    "ode_net": {},
    "print_trace": {"skip": TRACER},
    "rkhs": {
        "skip": "registers a function space as an autograd VSpace/Box whose gradient has other "
        "keys than its argument (RKHSFun(kernel, {x: 1})): no pytree stand-in can express it"
    },
    "rnn": {},
    "rosenbrock": {},
    "sinusoid": {"final": "np.array([dd_fun(v) for v in x])"},
    "tanh": {"final": "egrad(egrad(egrad(egrad(tanh))))(x)"},
    "variational_autoencoder": {"skip": MNIST},
}
NOT_EXAMPLES = {"__init__", "data", "data_mnist"}  # helpers the examples import

# import rewriting: module -> module, and (module, name) -> module for `from M import name`
MODULES = {
    "autograd.numpy": "numpy",
    "autograd.numpy.random": "numpy.random",
    "autograd.numpy.linalg": "numpy.linalg",
    "autograd.scipy.integrate": "tracegrad.scipy.integrate",
    "autograd.scipy.signal": "scipy.signal",
    "autograd.scipy.stats": "tracegrad.scipy.stats",
    "autograd.scipy.special": "tracegrad.scipy.special",
    "autograd.misc.optimizers": SUPPORT,
    "autograd.misc.flatten": SUPPORT,
    "autograd.misc.fixed_points": SUPPORT,
    "autograd.extend": SUPPORT,
    "autograd.test_util": SUPPORT,
    "autograd.builtins": SUPPORT,
}
NAMES = {
    ("autograd", "grad"): "tracegrad",
    ("autograd", "value_and_grad"): "tracegrad",
    ("autograd", "elementwise_grad"): SUPPORT,
    ("autograd", "hessian_vector_product"): SUPPORT,
    ("autograd.misc", "flatten"): SUPPORT,
}
ORIGINALS = "_original"
TEXT_FILE_RE = re.compile(r'join\(dirname\(__file__\), "(\w+\.py)"\)')
FROM_RE = re.compile(r"^(\s*)from\s+(autograd[\w.]*)\s+import\s+(.+?)\s*$")
IMPORT_AS_RE = re.compile(r"^(\s*)import\s+(autograd[\w.]*)\s+as\s+(\w+)\s*$")


def rewrite_imports(source: str) -> tuple[str, list[tuple[str, str]]]:
    """The source with autograd's imports replaced, and the (old, new) lines."""
    out, changes = [], []
    for line in source.splitlines(keepends=True):
        body = line.rstrip("\n")
        new = None
        m = FROM_RE.match(body)
        if m:
            indent, module, names = m.groups()
            groups: dict[str, list[str]] = {}
            for item in names.strip("()").split(","):
                item = item.strip()
                if not item:
                    continue
                name = item.split()[0]
                target = NAMES.get((module, name), MODULES.get(module, module))
                groups.setdefault(target, []).append(item)
            new = "\n".join(
                f"{indent}from {t} import {', '.join(items)}" for t, items in groups.items()
            )
        m = IMPORT_AS_RE.match(body)
        if m:
            indent, module, alias = m.groups()
            parent, _, leaf = module.rpartition(".")
            if module in MODULES:
                new = f"{indent}import {MODULES[module]} as {alias}"
            elif parent in MODULES:  # import autograd.scipy.stats.multivariate_normal as mvn
                new = f"{indent}from {MODULES[parent]} import {leaf} as {alias}"
        if new is not None and new != body:
            changes.append((body, new))
            out.append(new + "\n")
        else:
            out.append(line)
    return "".join(out), changes


def extract_examples(repo: str, dest: str) -> None:
    """autograd's examples/ folder from `repo` (a git repository, bare or not, or a checkout)."""
    if not os.path.exists(repo):
        sys.exit(f"error: --autograd-repo {repo}: no such path (give HIPS autograd's repository)")
    if os.path.isdir(os.path.join(repo, "examples")) and not os.path.isdir(
        os.path.join(repo, "refs")
    ):
        shutil.copytree(os.path.join(repo, "examples"), os.path.join(dest, "examples"))
        return
    archive = subprocess.run(
        ["git", "-C", repo, "archive", "HEAD", "examples"], capture_output=True, check=False
    )
    if archive.returncode != 0:
        err = archive.stderr.decode(errors="replace").strip().splitlines()
        sys.exit(
            f"error: --autograd-repo {repo}: `git archive HEAD examples` failed "
            f"({err[-1] if err else 'no message'}); give HIPS autograd's git repository "
            "or a checkout with an examples/ folder"
        )
    subprocess.run(["tar", "-x", "-C", dest], input=archive.stdout, check=True)
    if not os.path.isdir(os.path.join(dest, "examples")):
        sys.exit(f"error: --autograd-repo {repo}: its HEAD has no examples/ folder")


def list_examples(folder: str) -> list[str]:
    names = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != ORIGINALS]
        for f in files:
            if f.endswith(".py") and f != SUPPORT + ".py":
                rel = os.path.relpath(os.path.join(root, f), folder)[:-3].replace(os.sep, "/")
                if rel not in NOT_EXAMPLES:
                    names.append(rel)
    return sorted(names)


def prepare(repo: str, work: str, mode: str, steps: int) -> str:
    """A copy of the examples folder for `mode`, with the caps (both) and rewrites (tracegrad)."""
    dest = os.path.join(work, mode)
    os.makedirs(dest)
    extract_examples(repo, dest)
    folder = os.path.join(dest, "examples")
    # rnn, lstm and hmm_em train on the text of an example file: both runs read the pristine one
    shutil.copytree(folder, os.path.join(folder, ORIGINALS))
    for name in list_examples(folder) + sorted(NOT_EXAMPLES - {"__init__"}):
        path = os.path.join(folder, name + ".py")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            source = f.read()
        source = TEXT_FILE_RE.sub(
            lambda m: f'join(dirname(__file__), "{ORIGINALS}", "{m[1]}")', source
        )
        for pattern, repl in EXAMPLES.get(name, {}).get("caps", []):
            source = re.sub(pattern, repl.format(steps=steps), source)
        if mode == "tracegrad":
            source, _ = rewrite_imports(source)
        with open(path, "w") as f:
            f.write(source)
        shutil.copy(os.path.join(HERE, SUPPORT + ".py"), os.path.dirname(path))
    return folder


def run_one(python: str, mode: str, folder: str, name: str, steps: int, timeout: float, env: dict):
    spec = EXAMPLES.get(name, {})
    steps = min(steps, spec.get("steps", steps))
    script = os.path.join(folder, name + ".py")
    out = os.path.join(os.path.dirname(script), f"_report_{mode}_{os.path.basename(name)}.json")
    stop = str(steps) if spec.get("stop") == "steps" else ""
    cmd = [python, os.path.join(os.path.dirname(script), SUPPORT + ".py"), mode, script]
    cmd += [str(steps), out, spec.get("final") or "", stop]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=os.path.dirname(script),
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s", "seconds": timeout}
    seconds = time.perf_counter() - t0
    if not os.path.exists(out):
        tail = (proc.stderr or proc.stdout).strip().splitlines()
        return {"error": f"no report (exit {proc.returncode}): {tail[-1] if tail else ''}"}
    with open(out) as f:
        report = json.load(f)
    report["seconds"] = seconds
    return report


def max_rel_diff(a, b) -> float:
    """Largest per-leaf max |a - b| / max(max |a|, 1): relative, or absolute below 1 (a value
    that is zero up to rounding, as wing's lift of a symmetric flow, has no relative error)."""
    if a is None or b is None or len(a) != len(b):
        return float("nan")
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        if x.shape != y.shape:
            return float("nan")
        if x.size == 0:
            continue
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        diff = np.where(same, 0.0, np.abs(x - y))
        scale = np.max(np.abs(np.where(np.isfinite(x), x, 0.0)))
        worst = max(worst, float(np.max(diff)) / max(float(scale), 1.0))
    return worst


def loss_text(report: dict) -> str:
    losses = report.get("losses") or []
    if not losses:
        return "-"
    first = np.asarray(losses[0][0] if losses[0] else np.nan, dtype=float)
    text = f"{float(first.ravel()[0]):.12g}" + (f" (+{first.size - 1})" if first.size > 1 else "")
    return text + (f" [{len(losses)} runs]" if len(losses) > 1 else "")


def compare(ag: dict, tg: dict) -> dict:
    grad_diff = max_rel_diff(ag.get("first_grad"), tg.get("first_grad"))
    loss_diffs = []
    la, lt = ag.get("losses") or [], tg.get("losses") or []
    if len(la) != len(lt):
        loss_diffs.append(float("nan"))
    else:
        loss_diffs = [max_rel_diff(x, y) for x, y in zip(la, lt, strict=True)]
    loss_diff = max(loss_diffs, default=0.0) if not any(np.isnan(loss_diffs)) else float("nan")
    grad_ok = (
        ag.get("first_grad") is None and tg.get("first_grad") is None
    ) or grad_diff <= GRAD_TOL
    ok = not ag.get("error") and not tg.get("error") and grad_ok and loss_diff <= LOSS_TOL
    return {"grad_diff": grad_diff, "loss_diff": loss_diff, "match": bool(ok)}


def horizon(ag: dict, other: dict) -> int:
    """How many leading recorded losses of `other` agree with autograd's (within LOSS_TOL)."""
    count = 0
    for x, y in zip(ag.get("losses") or [], other.get("losses") or [], strict=False):
        if not max_rel_diff(x, y) <= LOSS_TOL:
            break
        count += 1
    return count


def rounding_horizons(ag: dict, tg: dict, again: dict, grad_diff: float) -> dict:
    """How many losses autograd reproduces under other rounding (`again`) and tracegrad
    reproduces, and whether tracegrad (first gradient `grad_diff` from autograd's) matches up to
    autograd's own horizon."""
    h = {
        "losses": len(ag.get("losses") or []),
        "autograd": horizon(ag, again),
        "tracegrad": horizon(ag, tg),
        "autograd_first_grad_diff": max_rel_diff(ag.get("first_grad"), again.get("first_grad")),
    }
    within = not tg.get("error") and grad_diff <= GRAD_TOL and h["tracegrad"] >= h["autograd"]
    return {"horizon": h, "match_within_horizon": bool(within)}


def first_line(text: str | None) -> str:
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    return lines[0] if lines else ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--autograd-repo", required=True, help="HIPS autograd's git repository")
    ap.add_argument("--only", action="append", help="run this example only (repeatable)")
    ap.add_argument("--steps", type=int, default=10, help="optimiser iterations (both runs)")
    ap.add_argument("--autograd-python", default="/tmp/benchenv/bin/python")
    ap.add_argument("--tracegrad-path", help="put this tracegrad checkout first on PYTHONPATH")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    ap.add_argument("--json", help="write every report here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folders")
    ap.add_argument(
        "--rounding-check",
        action="store_true",
        help="run autograd again with other rounding and report each run's horizon",
    )
    ap.add_argument(
        "--rounding-env",
        default="OPENBLAS_CORETYPE=SandyBridge",
        help="KEY=VALUE set for autograd's second run (default: OpenBLAS kernels without FMA)",
    )
    args = ap.parse_args(argv)

    probe = subprocess.run(
        [args.autograd_python, "-c", "import autograd"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        sys.exit(f"error: --autograd-python {args.autograd_python} cannot import autograd")
    work = tempfile.mkdtemp(prefix="autograd_examples_")
    try:
        folders = {
            m: prepare(args.autograd_repo, work, m, args.steps) for m in ("autograd", "tracegrad")
        }
        names = list_examples(folders["autograd"])
        if args.only:
            unknown = sorted(set(args.only) - set(names))
            if unknown:
                sys.exit(f"error: no example {', '.join(unknown)} (there are: {', '.join(names)})")
            names = [n for n in names if n in args.only]
        env_ag = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env_ag["MPLBACKEND"] = "Agg"
        env_tg = dict(env_ag)
        if args.tracegrad_path:
            env_tg["PYTHONPATH"] = os.path.abspath(args.tracegrad_path)
        rows, reports = [], {}
        print(
            f"steps {args.steps}; gradient target {GRAD_TOL:g}, loss target {LOSS_TOL:g}",
            flush=True,
        )
        for name in names:
            spec = EXAMPLES.get(name)
            if spec is None:
                spec = {"skip": "not in the runner's EXAMPLES table (new upstream)"}
            if spec.get("skip"):
                rows.append(
                    (name, f"not run: {spec['skip']}", "", "", "", "")
                    + (("", "") if args.rounding_check else ())
                )
                reports[name] = {"skip": spec["skip"]}
                print(f"{name}: skipped", flush=True)
                continue

            def run(python: str, mode: str, env: dict, name=name) -> dict:
                return run_one(python, mode, folders[mode], name, args.steps, args.timeout, env)

            ag = run(args.autograd_python, "autograd", env_ag)
            tg = run(sys.executable, "tracegrad", env_tg)
            cmp = compare(ag, tg)
            if args.rounding_check:
                key, _, value = args.rounding_env.partition("=")
                again = run(args.autograd_python, "autograd", env_ag | {key: value})
                cmp |= rounding_horizons(ag, tg, again, cmp["grad_diff"])
                h = cmp["horizon"]
                print(
                    f"{name}: autograd reproduces {h['autograd']} of {h['losses']} losses under "
                    f"{args.rounding_env}, tracegrad {h['tracegrad']}; match within autograd's "
                    f"horizon: {'yes' if cmp['match_within_horizon'] else 'no'}",
                    flush=True,
                )
            runs = "yes" if not tg.get("error") else f"error: {first_line(tg['error'])}"
            if ag.get("error"):
                runs += f" (autograd run failed too: {first_line(ag['error'])})"
            capped = min(args.steps, spec.get("steps", args.steps))
            rows.append(
                (
                    name if capped == args.steps else f"{name} ({capped} steps)",
                    runs,
                    f"{cmp['grad_diff']:.1e}",
                    loss_text(ag),
                    loss_text(tg),
                    "yes" if cmp["match"] else "no",
                )
                + (
                    (
                        f"{cmp['horizon']['autograd']} / {cmp['horizon']['tracegrad']} of "
                        f"{cmp['horizon']['losses']}",
                        "yes" if cmp["match_within_horizon"] else "no",
                    )
                    if args.rounding_check
                    else ()
                )
            )
            reports[name] = {"autograd": ag, "tracegrad": tg, **cmp}
            print(
                f"{name}: {runs[:100]} | grad {cmp['grad_diff']:.1e} | loss {cmp['loss_diff']:.1e} | "
                f"{ag.get('seconds', 0):.1f} s / {tg.get('seconds', 0):.1f} s",
                flush=True,
            )
        print()
        print(
            f"| example | runs under tracegrad | first gradient rel. diff | loss after {args.steps} (autograd) "
            f"| loss after {args.steps} (tracegrad) | match |"
            + (
                " losses reproduced: autograd with other rounding / tracegrad "
                "| match within autograd's horizon |"
                if args.rounding_check
                else ""
            )
        )
        print("|---|---|---|---|---|---|" + ("---|---|" if args.rounding_check else ""))
        for row in rows:
            print("| " + " | ".join(str(c).replace("|", "/") for c in row) + " |")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"steps": args.steps, "reports": reports}, f, indent=1)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
