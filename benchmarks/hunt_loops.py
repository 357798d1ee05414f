"""A long fuzzing campaign over random loop programs (tests/fuzz_loops.py).

    python3 benchmarks/hunt_loops.py --programs 500 --backends numpy --orders 3
    python3 benchmarks/hunt_loops.py --programs 100 --backends cpu --orders 2 --minutes 30

Each program steps a carry through a random body in one of the loop forms a user writes (a plain
`for` loop, rolled or left unrolled; tg.fori_loop, tg.scan, tg.while_loop; a scan inside a
fori_loop) and is compared with plain NumPy (its value) and with central differences (its
derivatives, orders 1 to --orders). Failures are printed with the program's source and counted
per form and check; the counts are written to --out/summary.json.
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

# Compare compiled programs from their first call: no tiered execution.
os.environ.setdefault("TRACEGRAD_TIERED", "0")

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import fuzz_loops as fl  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=100)
    parser.add_argument("--backends", default="numpy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--orders", type=int, default=2)
    parser.add_argument("--minutes", type=float, default=0.0, help="stop after this long (0: none)")
    parser.add_argument("--out", default="hunt-loops-out")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    from tracegrad.runtime.program_store import clear_programs

    backends = [b for b in args.backends.split(",") if b]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    tried: Counter = Counter()
    failed: Counter = Counter()
    by_check: Counter = Counter()
    for k in range(args.programs):
        if args.minutes and time.time() - start > 60 * args.minutes:
            break
        program = fl.generate(args.seed + k)
        for backend in backends:
            tried[(backend, program.form)] += 1
            failures = fl.check(program, backend, args.orders)
            if failures:
                failed[(backend, program.form)] += 1
                by_check.update((backend, f.check.split(" ")[0]) for f in failures)
                print("\n".join(map(str, failures)), "\n", program.source(), flush=True)
        clear_programs()  # each program is new code: keep memory flat
    summary = {
        "programs": sum(tried.values()),
        "failing": sum(failed.values()),
        "seconds": round(time.time() - start, 1),
        "orders": args.orders,
        "by_form": {f"{b}:{form}": [tried[(b, form)], failed[(b, form)]] for b, form in tried},
        "failures_by_check": {f"{b}:{c}": n for (b, c), n in by_check.items()},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    return 1 if summary["failing"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
