"""W4 side by side for two checkouts: the cached-call time of the tutorial gradient, interleaved.

    python3 benchmarks/bench_w4_ab.py OLD_CHECKOUT NEW_CHECKOUT

Each round runs one fresh process per checkout (in turn) that times 20,000 cached calls and
prints the median of 15 inner rounds; the table gives the median over rounds.
"""

import statistics
import subprocess
import sys

CHILD = """
import time, statistics, numpy as np, tracegrad as tg
g = tg.grad(lambda w, x, b: (w * x + b - 5.0) ** 2, backend="cpu")
assert float(g(2.0, 3.0, 1.0)) == 12.0
X = np.ones(3)
gc = tg.grad(lambda w: np.sum(w * X), backend="cpu")  # one captured array
gc(np.zeros(3))
out = []
for f, args in ((g, (2.0, 3.0, 1.0)), (gc, (np.zeros(3),))):
    times = []
    for _ in range(15):
        t = time.perf_counter()
        for _ in range(20000):
            f(*args)
        times.append((time.perf_counter() - t) / 20000)
    out.append(statistics.median(times))
print(out[0], out[1])
"""


def main(old: str, new: str, rounds: int = 5) -> None:
    results: dict[str, list[tuple[float, float]]] = {old: [], new: []}
    for _ in range(rounds):
        for where in (old, new):
            text = subprocess.run(
                [sys.executable, "-c", CHILD], cwd=where, capture_output=True, text=True, check=True
            ).stdout
            a, b = map(float, text.split())
            results[where].append((a, b))
    for where, rows in results.items():
        w4 = statistics.median(r[0] for r in rows) * 1e6
        cap = statistics.median(r[1] for r in rows) * 1e6
        print(f"{where}: W4 {w4:.2f} us, captured-array call {cap:.2f} us")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
