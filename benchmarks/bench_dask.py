"""One gradient of the logistic loss on 10^7 x 20 data: tracegrad.dask on a LocalCluster of 1 and
of 2 worker processes, against plain single-process tracegrad, in the same run.

    python3 benchmarks/bench_dask.py                  # 10^7 rows; prints the tables
    python3 benchmarks/bench_dask.py --write          # also writes "## Dask" in RESULTS.md
    python3 benchmarks/bench_dask.py --rows 1000000   # smaller

The data is drawn on the workers (dask.array.random, 500,000-row chunks of 80 MB) and persisted
there; the single process gets the same numbers by computing the same dask arrays with threads.
The candidates are timed in interleaved rounds (medians), each after a warm-up call that traces
and compiles. Two more candidates measure the machine itself: one and two plain processes (no
Dask) that hold the same chunks, split evenly, and compute them on one thread each as a worker
does; on a shared machine their ratio is the ceiling of any split over two processes. A second table splits the cost of a call that has almost no work (the same
graph on tiny chunks) into its parts: that is the fixed overhead every call pays.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import platform
import statistics
import sys
import time
import uuid

# Compare compiled programs from their first call: no tiered execution (its first calls run on
# the interpreter).
os.environ.setdefault("TRACEGRAD_TIERED", "0")

# Dask's nanny starts each worker with one BLAS / OpenMP thread (distributed.nanny's
# pre-spawn-environ). The single process gets the same, so that the three candidates differ only in
# how the rows are shared out: with BLAS's own two threads on this shared 2-core machine, the
# single process measured 1.98 s against 1.20 s (the notes in RESULTS.md).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # this checkout's tracegrad

import numpy as np  # noqa: E402

import dask  # noqa: E402
import dask.array as da  # noqa: E402
import distributed  # noqa: E402
from dask._task_spec import TaskRef  # noqa: E402

import tracegrad as tg  # noqa: E402
import tracegrad.dask as tgd  # noqa: E402

RESULTS = os.path.join(HERE, "RESULTS.md")
SECTION = "## Dask: data-parallel gradients (tracegrad.dask)"
FEATURES = 20


def nll(w, X, y):
    z = X @ w
    return np.sum(np.log1p(np.exp(z)) - y * z)


def make_data(rows: int, chunk: int):
    rng = da.random.default_rng(7)
    X = rng.standard_normal((rows, FEATURES), chunks=(chunk, FEATURES))
    p = 1.0 / (1.0 + da.exp(-(X @ np.linspace(-1.0, 1.0, FEATURES))))
    y = (rng.random(rows, chunks=chunk) < p).astype(np.float64)
    return X, y


def timed(fun) -> float:
    start = time.perf_counter()
    fun()
    return time.perf_counter() - start


def plain_process(conn, rows: int, chunk: int, lo: int, hi: int, backend: str) -> None:
    """A process without Dask that holds chunks lo:hi of the data and, when told, computes their
    gradients on one thread one after the other and adds them: what a worker process does, with
    nothing around it."""
    import numba

    numba.set_num_threads(1)
    X, y = make_data(rows, chunk)
    Xs, ys = dask.compute(X[lo * chunk : hi * chunk], y[lo * chunk : hi * chunk], scheduler="sync")
    local = tg.grad(nll, backend=backend)
    w = 0.1 * np.ones(FEATURES)
    local(w, Xs[:chunk], ys[:chunk])
    conn.send("ready")
    while order := conn.recv():
        if order == "cpu":
            conn.send(time.process_time())
            continue
        total = sum(
            local(w, Xs[i : i + chunk], ys[i : i + chunk]) for i in range(0, len(Xs), chunk)
        )
        conn.send(total)


class PlainProcesses:
    """`count` plain processes sharing the chunks out evenly: the machine's own ceiling for a
    split over that many processes, measured in the same rounds as the candidates."""

    def __init__(self, count: int, rows: int, chunk: int, backend: str):
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        chunks = -(-rows // chunk)
        bounds = [round(k * chunks / count) for k in range(count + 1)]
        self.pipes, self.procs = [], []
        for k in range(count):
            mine, theirs = context.Pipe()
            proc = context.Process(
                target=plain_process,
                args=(theirs, rows, chunk, bounds[k], bounds[k + 1], backend),
                daemon=True,
            )
            proc.start()
            self.pipes.append(mine)
            self.procs.append(proc)
        for pipe in self.pipes:
            assert pipe.recv() == "ready"

    def __call__(self):
        for pipe in self.pipes:
            pipe.send(True)
        return sum(pipe.recv() for pipe in self.pipes)

    def cpu(self) -> list[float]:
        """Each process's CPU seconds so far."""
        for pipe in self.pipes:
            pipe.send("cpu")
        return [pipe.recv() for pipe in self.pipes]

    def close(self) -> None:
        for pipe in self.pipes:
            pipe.send(False)
        for proc in self.procs:
            proc.join(timeout=30)


def start_cluster(workers: int):
    cluster = distributed.LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        silence_logs=logging.CRITICAL,
    )
    return cluster, distributed.Client(cluster, set_as_default=False)


def gradients(rows: int, chunk: int, rounds: int, backend: str) -> tuple[list[dict], dict]:
    X, y = make_data(rows, chunk)
    w = 0.1 * np.ones(FEATURES)
    clusters = {n: start_cluster(n) for n in (1, 2)}
    plain = {n: PlainProcesses(n, rows, chunk, backend) for n in (1, 2)}
    try:
        candidates = {}
        for n, (_, client) in clusters.items():
            Xd, yd = client.persist([X, y])
            with client.as_current():
                distributed.wait([Xd, yd])
            g = tgd.grad(nll, argnums=0, data_argnums=(1, 2), client=client, backend=backend)
            candidates[f"tracegrad.dask, {n} worker process{'es' if n > 1 else ''}"] = (
                lambda g=g, Xd=Xd, yd=yd: g(w, Xd, yd)
            )
        Xm, ym = dask.compute(X, y, scheduler="threads")
        local = tg.grad(nll, backend=backend)
        candidates["tracegrad, one process (no Dask)"] = lambda: local(w, Xm, ym)
        for n, processes in plain.items():
            candidates[f"ceiling: {n} plain process{'es' if n > 1 else ''}, one thread each"] = (
                processes
            )
        reference = local(w, Xm, ym)
        first, agree = {}, {}
        for name, call in candidates.items():
            first[name] = timed(call)
            agree[name] = float(np.max(np.abs(call() - reference)) / np.max(np.abs(reference)))
        times: dict[str, list[float]] = {name: [] for name in candidates}
        for _ in range(rounds):
            for name, call in candidates.items():
                times[name].append(timed(call))
        rows_out = [
            {
                "name": name,
                "median": statistics.median(ts),
                "min": min(ts),
                "first": first[name],
                "difference": agree[name],
            }
            for name, ts in times.items()
        ]
        cpu = {}
        for n, (_, client) in clusters.items():
            name = next(k for k in candidates if k.startswith(f"tracegrad.dask, {n} "))
            cpu[name] = cpu_per_call(candidates[name], lambda c=client: list(cpu_of(c)), rounds)
        for n, processes in plain.items():
            name = next(k for k in candidates if k.startswith(f"ceiling: {n} "))
            cpu[name] = cpu_per_call(processes, processes.cpu, rounds)
        for row in rows_out:
            row["cpu"] = cpu.get(row["name"])
        overhead = call_overhead(clusters[2][1], backend, rounds)
    finally:
        for processes in plain.values():
            processes.close()
        for cluster, client in clusters.values():
            client.close()
            cluster.close()
    return rows_out, overhead


def cpu_of(client) -> list[float]:
    return client.run(time.process_time).values()


def cpu_per_call(call, cpu, calls: int) -> list[float]:
    """Each process's CPU seconds per call, over `calls` calls: the work it did, whatever the
    other processes on the machine took from it meanwhile."""
    before = cpu()
    for _ in range(calls):
        call()
    return [(b - a) / calls for a, b in zip(before, cpu(), strict=True)]


def call_overhead(client, backend: str, rounds: int) -> dict:
    """Where the time of a call with almost no work goes (20 chunks of 100 rows)."""
    X, y = make_data(2000, 100)
    Xd, yd = client.persist([X, y])
    with client.as_current():
        distributed.wait([Xd, yd])
    w = 0.1 * np.ones(FEATURES)
    g = tgd.grad(nll, argnums=0, data_argnums=(1, 2), client=client, backend=backend)
    first = timed(lambda: g(w, Xd, yd))
    parts: dict[str, list[float]] = {
        k: []
        for k in (
            "whole call",
            "checks, and the graph's structure found (client)",
            "this call's tasks made from it (client)",
            "submit, run the group tasks and the sums, gather the root",
            "one trivial task, for scale",
        )
    }
    for _ in range(max(rounds, 5) * 3):
        parts["whole call"].append(timed(lambda: g(w, Xd, yd)))
        start = time.perf_counter()
        data = g._data((w, Xd, yd))
        g._check_loss((w, Xd, yd), data)
        plan = g._plan(client, data)
        job = g._job_on(client)
        parts["checks, and the graph's structure found (client)"].append(
            time.perf_counter() - start
        )
        start = time.perf_counter()
        graph, root = plan.graph(TaskRef(job.key), {0: w}, 3, uuid.uuid4().hex[:12])
        parts["this call's tasks made from it (client)"].append(time.perf_counter() - start)
        parts["submit, run the group tasks and the sums, gather the root"].append(
            timed(lambda graph=graph, root=root: client.get(graph, root))
        )
        parts["one trivial task, for scale"].append(
            timed(lambda: client.submit(int, 1, pure=False).result())
        )
    out = {k: statistics.median(v) for k, v in parts.items()}
    out["first call (persist, find the chunks, send the job; compile)"] = first
    out["tasks in a call"] = len(plan.groups) + 1
    out["graph structures built"] = g.graph_builds
    return out


def report(rows: int, chunk: int, results: list[dict], overhead: dict, backend: str) -> str:
    single = next(r["median"] for r in results if "one process" in r["name"])
    lines = [
        f"### One gradient of the logistic loss, {rows:,} x {FEATURES} float64, "
        f"{rows // chunk} chunks of {chunk:,} rows, backend {backend}",
        "",
        "| candidate | median | fastest | vs one process | first call | max relative difference "
        "| CPU per call, each process |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        cpu = " + ".join(f"{c * 1e3:.0f}" for c in r["cpu"]) + " ms" if r.get("cpu") else ""
        lines.append(
            f"| {r['name']} | {r['median'] * 1e3:.0f} ms | {r['min'] * 1e3:.0f} ms | "
            f"{r['median'] / single:.2f}x | {r['first']:.2f} s | {r['difference']:.1e} | {cpu} |"
        )
    one = next(r for r in results if "1 worker" in r["name"])
    two = next(r for r in results if "2 worker" in r["name"])
    one_plain = next(r for r in results if "1 plain" in r["name"])
    two_plain = next(r for r in results if "2 plain" in r["name"])
    lines += [
        "",
        f"2 worker processes against 1: {one['median'] / two['median']:.2f}x (medians), "
        f"{one['min'] / two['min']:.2f}x (fastest rounds); the machine's ceiling in the same "
        f"rounds, 2 plain processes against 1: {one_plain['median'] / two_plain['median']:.2f}x "
        f"(medians), {one_plain['min'] / two_plain['min']:.2f}x (fastest).",
        "",
        "On free cores a call would take the busiest process's CPU time plus the fixed cost of a "
        f"call ({overhead['whole call'] * 1e3:.0f} ms, below): "
        f"{projected(one, overhead):.0f} ms on 1 worker process, {projected(two, overhead):.0f} "
        f"ms on 2, {(projected(one, overhead) / projected(two, overhead)):.2f}x (an estimate from "
        "the CPU times, not a timing).",
    ]
    lines += [
        "",
        "### The fixed cost of a call: 20 chunks of 100 rows on 2 worker processes (medians)",
        "",
        "| part | ms |",
        "|---|---:|",
    ]
    for name, seconds in overhead.items():
        if isinstance(seconds, int):
            lines.append(f"| {name} | {seconds} (a count) |")
        else:
            lines.append(f"| {name} | {seconds * 1e3:.1f} |")
    return "\n".join(lines)


def projected(row: dict, overhead: dict) -> float:
    """Milliseconds a call would take on free cores: its busiest process's CPU, and the fixed cost
    (which is mostly waiting for messages, not CPU)."""
    return (max(row["cpu"]) + overhead["whole call"]) * 1e3


def write_section(body: str) -> None:
    """Replace (or append) this script's section of RESULTS.md; the others stay as they are."""
    with open(RESULTS) as fh:
        text = fh.read()
    start = text.find(SECTION)
    if start >= 0:
        nxt = text.find("\n## ", start + len(SECTION))
        end = len(text) if nxt < 0 else nxt + 1
        text = text[:start] + body.rstrip() + "\n" + ("\n" + text[end:] if nxt >= 0 else "")
    else:
        text = text.rstrip() + "\n\n" + body.rstrip() + "\n"
    with open(RESULTS, "w") as fh:
        fh.write(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--chunk", type=int, default=500_000, help="rows per chunk")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    ap.add_argument("--notes", default="", help="a file whose text goes under the tables")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    results, overhead = gradients(args.rows, args.chunk, args.rounds, args.backend)
    tables = report(args.rows, args.chunk, results, overhead, args.backend)
    print(tables)
    if args.write:
        head = (
            f"{SECTION}\n\n`benchmarks/bench_dask.py --rows {args.rows}`, "
            f"{datetime.date.today().isoformat()}, {platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} cores (load average {load:.1f} at the start: a shared machine), "
            f"Dask {dask.__version__}, {args.rounds} interleaved rounds.\n"
        )
        notes = ""
        if args.notes:
            with open(args.notes) as fh:
                notes = fh.read().strip()
        write_section(head + "\n" + tables + ("\n\n" + notes if notes else "") + "\n")
        print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
