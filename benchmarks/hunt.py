"""A long fuzzing campaign over random user-level programs (tests/fuzz_programs.py, fuzz_checks.py).

    python3 benchmarks/hunt.py --programs 20000 --backends numpy --seed 0
    python3 benchmarks/hunt.py --programs 300 --backends cpu,cuda --seed 100000 --minutes 60

Each program runs through jit / value_and_grad / grad / jacobian / hessian / grad-of-grad on each
backend and is compared with plain NumPy, with finite differences (orders 1 to 3), with the
reference interpreter, and checked for fresh results, unchanged inputs, captured values read at
call time, threads and input layouts. Failures are counted per area: the areas of issue 10
(known defects, fixed on other branches) apart from new ones. Each new failure is shrunk to a
small program and written as a runnable repro under --out. The counts are printed at the end and
written to --out/summary.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

# Compare compiled programs from their first call: no tiered execution (its first calls run on
# the interpreter).
os.environ.setdefault("TRACEGRAD_TIERED", "0")

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import numpy as np  # noqa: E402

import fuzz_checks as fc  # noqa: E402
import fuzz_programs as fp  # noqa: E402


# New defects this campaign found (and filed), recognised by their message, so that the counts
# show them apart from the ones still unexplained.
FOUND = {
    "H1-empty-max": ("zero-size array to reduction operation", ""),
    "H4-keyword-operand": ("cannot convert a traced value to a NumPy array", "a_max="),
    "H5-axis-of-0d": ("is out of bounds for an array of dimension 0", ""),
    "H6-builtin-abs-int": ("dtype float64 != int64", "abs("),
    "H8-einsum-broadcast": ("np.einsum: index", "einsum"),
}


LIGHT = {
    "value",
    "vs-interpreter",
    "fresh",
    "mutate",
    "inputs",
    "threads",
    "grad",
    "hessian",
    "order3",
    "layout-device",
    "fresh-device",
    "capture-inplace",
} | {f"layout-{n}" for n in ("F", "reversed", "strided", "readonly", "broadcast", "unaligned")}


def _found(message: str, source: str) -> str | None:
    return next(
        (k for k, (text, code) in FOUND.items() if text in message and code in source), None
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=100)
    parser.add_argument("--backends", default="numpy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--orders", default="1,2,3")
    parser.add_argument(
        "--minutes", type=float, default=0.0, help="stop after this long (0: no limit)"
    )
    parser.add_argument(
        "--large-every", type=int, default=25, help="every n-th program has large arrays"
    )
    parser.add_argument("--out", default="hunt-out")
    parser.add_argument("--no-shrink", action="store_true")
    parser.add_argument(
        "--checks",
        default="all",
        help="'all', 'light' (the checks that reuse one compiled program per "
        "transform: for the compiled backends) or a comma-separated list",
    )
    args = parser.parse_args(argv)
    if (
        "cuda" in args.backends
        and "NUMBA_ENABLE_CUDASIM" not in os.environ
        and not os.path.exists("/proc/driver/nvidia")
    ):
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    warnings.simplefilter("ignore")
    backends = [b for b in args.backends.split(",") if b]
    orders = tuple(int(o) for o in args.orders.split(","))
    checks = (
        None
        if args.checks == "all"
        else LIGHT
        if args.checks == "light"
        else set(args.checks.split(","))
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    programs = 0
    by_area: Counter = Counter()
    programs_by_area: Counter = Counter()  # programs with at least one failure in the area
    by_check: Counter = Counter()
    checks_run: Counter = Counter()
    new_signatures: dict[str, str] = {}
    for k in range(args.programs):
        if args.minutes and time.time() - start > 60 * args.minutes:
            break
        seed = args.seed + k
        large = args.large_every > 0 and k % args.large_every == args.large_every - 1
        spec = fp.generate(seed, large=large)
        failures, stats = fc.check_program(spec, backends, orders, checks)
        _forget_programs()
        programs += 1
        checks_run.update(stats)
        areas = set()
        for f in failures:
            f.area = _found(f.message, spec.source()) or f.area  # a filed defect comes first
            by_area[(f.backend, f.area)] += 1
            areas.add((f.backend, f.area))
        programs_by_area.update(areas)
        for f in failures:
            by_check[(f.backend, f.check, f.area)] += 1
            if f.area == "new":
                key = f"{f.check}:{f.backend}:{f.message.splitlines()[0][:60]}"
                if key in new_signatures:
                    continue
                small = spec if args.no_shrink else _shrink(spec, f)
                path = out / f"repro-{seed}-{f.check}-{f.backend}.py"
                again = fc.check_program(small, [f.backend], orders, {f.check})[0]
                message = again[0].message if again else f.message
                area = fc.area_of(f.check, small, message)
                path.write_text(
                    f"# {f.check} on {f.backend} [{area}]\n"
                    + "".join(f"# {line}\n" for line in message.splitlines())
                    + small.repro()
                )
                new_signatures[key] = str(path)
                print(
                    f"NEW seed {seed}: {f.check} on {f.backend}: {message.splitlines()[0][:200]}"
                    f" -> {path}",
                    flush=True,
                )
        if programs % (20 if backends == ["numpy"] else 1) == 0:  # compiled backends are slow
            _report(
                programs,
                backends,
                orders,
                by_area,
                programs_by_area,
                by_check,
                checks_run,
                start,
                out,
                new_signatures,
            )
    _report(
        programs,
        backends,
        orders,
        by_area,
        programs_by_area,
        by_check,
        checks_run,
        start,
        out,
        new_signatures,
    )
    return 0


def _forget_programs() -> None:
    """Each program's functions are new: drop what the store keeps of the last one."""
    from tracegrad.runtime import program_store

    program_store.clear_programs()
    counts = getattr(program_store, "_trace_counts", None)  # per-function bookkeeping, where kept
    if isinstance(counts, dict):
        counts.clear()


def _shrink(spec, failure):
    def still_fails(candidate) -> bool:
        try:
            f_out = candidate.instantiate()[0]
            with np.errstate(all="raise"):
                f_out(candidate.params(), candidate.data(), candidate.static)
        except Exception:
            return False
        got = fc.check_program(candidate, [failure.backend], (1, 2, 3), {failure.check})[0]
        return any(g.check == failure.check for g in got)

    return fp.shrink(spec, still_fails)


def _report(
    programs, backends, orders, by_area, programs_by_area, by_check, checks_run, start, out, new
):
    summary = {
        "programs": programs,
        "backends": backends,
        "orders": list(orders),
        "seconds": round(time.time() - start, 1),
        "checks_run": dict(checks_run),
        "failures_by_area": {f"{b}:{a}": n for (b, a), n in sorted(by_area.items())},
        "programs_failing_by_area": {
            f"{b}:{a}": n for (b, a), n in sorted(programs_by_area.items())
        },
        "failures_by_check": {f"{b}:{c}:{a}": n for (b, c, a), n in sorted(by_check.items())},
        "new_repros": new,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(
        f"programs {programs} on {','.join(backends)}, orders {orders}, "
        f"{summary['seconds']} s; programs failing, by area: "
        f"{summary['programs_failing_by_area']}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
