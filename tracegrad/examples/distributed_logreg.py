"""Logistic regression by Newton's method on a Dask cluster: each iteration sums tracegrad's
gradient and Hessian of the negative log-likelihood over row chunks that live on the workers.

    python3 -m tracegrad run distributed-logreg --workers 2             # 10^6 x 20 data
    python3 -m tracegrad run distributed-logreg --workers 2 --rows 20000

It starts a LocalCluster of --workers processes (0: no cluster, Dask's threads in this process),
makes the data on the workers, and needs the dask extra: pip install -e ".[dask]".
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np

from tracegrad.examples._common import (
    ExampleError,
    Printer,
    check_positive,
    header,
    no_plot,
    resolve_backend,
)

NAME = "distributed-logreg"
DESCRIPTION = (
    "logistic regression by Newton's method on a Dask LocalCluster: tracegrad.dask "
    "gradients and Hessians summed over row chunks"
)
DEFAULT_STEPS = 20
STEPS_HELP = "Newton iteration limit"
DEFAULT_WORKERS = 2
WORKERS_HELP = "local worker processes, 0 for Dask's threads without a cluster"
DEFAULT_ROWS = 1_000_000
ROWS_HELP = "data rows"
PLOT = False

FEATURES = 20
CHUNKS_PER_WORKER = 4
TOLERANCE = 1e-10  # converged when |gradient| / rows is below this
SEED = 2024


def nll(w, X, y):
    """This chunk's negative log-likelihood: the sum of log(1 + exp(z)) - y z, z = X w.

    np.logaddexp(0, z) never overflows, and tracegrad differentiates it as the smooth softplus it
    is, so the Hessian at w = 0 (where Newton starts and every z is 0) is exact."""
    z = X @ w
    return np.sum(np.logaddexp(0.0, z) - y * z)


def true_weights() -> np.ndarray:
    return np.linspace(-1.0, 1.0, FEATURES)


def chunk_rows(rows: int, workers: int) -> int:
    """Rows per chunk: CHUNKS_PER_WORKER chunks for each worker (at least that many)."""
    return max(1, math.ceil(rows / (CHUNKS_PER_WORKER * max(workers, 1))))


def make_data(rows: int, chunk: int, seed: int = SEED):
    """(X, y) as dask arrays of `chunk` rows a chunk, drawn where they are computed: X normal,
    y = 1 with probability sigmoid(X w_true)."""
    import dask.array as da

    rng = da.random.default_rng(seed)
    X = rng.standard_normal((rows, FEATURES), chunks=(chunk, FEATURES))
    p = 1.0 / (1.0 + da.exp(-(X @ true_weights())))
    y = (rng.random(rows, chunks=chunk) < p).astype(np.float64)
    return X, y


def _dask_module():
    try:
        import tracegrad.dask as tgd
    except ImportError:
        raise ExampleError(
            "the distributed-logreg example needs Dask, an optional dependency that is not installed",
            hint='install it with: python3 -m pip install -e ".[dask]"   '
            '(or: python3 -m pip install "dask[array]" distributed)',
        ) from None
    return tgd


def run(
    backend: str | None = None,
    steps: int = DEFAULT_STEPS,
    workers: int = DEFAULT_WORKERS,
    rows: int = DEFAULT_ROWS,
    plot=None,
    quiet: bool = False,
    client=None,
) -> dict:
    """Fit w by Newton's method from w = 0; returns the weights, the loss and gradient norm per
    iteration and the timings. `client`: run on this dask.distributed client instead of
    starting a LocalCluster (then `workers` only sets the chunking)."""
    no_plot(NAME, plot)
    check_positive("steps", steps)
    check_positive("workers", workers, 0)
    check_positive("rows", rows, 2)
    name = resolve_backend(backend)
    tgd = _dask_module()
    out = Printer(quiet)
    chunk = chunk_rows(rows, workers)
    n_chunks = math.ceil(rows / chunk)
    header(
        out,
        f"{NAME}: logistic regression on {rows:,} x {FEATURES} data in {n_chunks} chunks of "
        f"{chunk:,} rows, by Newton's method",
        name,
        backend,
    )
    cluster = None
    start = time.perf_counter()
    if client is None and workers > 0:
        from distributed import Client, LocalCluster

        cluster = LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0"
        )
        client = Client(cluster, set_as_default=False)
    try:
        if client is None:
            out("no cluster: Dask's threaded scheduler in this process")
        else:
            what = "started a LocalCluster" if cluster is not None else "on the given client"
            count = len(client.scheduler_info()["workers"])
            out(
                f"{what}: {count} worker process(es), scheduler at {client.scheduler.address} "
                f"({time.perf_counter() - start:.1f} s)"
            )
        X, y = make_data(rows, chunk)
        X, y = client.persist([X, y]) if client is not None else _persist_here(X, y)
        value_and_grad = tgd.value_and_grad(
            nll, argnums=0, data_argnums=(1, 2), client=client, backend=name
        )
        hessian = tgd.hessian(nll, argnums=0, data_argnums=(1, 2), client=client, backend=name)
        result = _newton(value_and_grad, hessian, X, y, rows, steps, out)
        counts = value_and_grad.worker_trace_counts(client)
    finally:
        if cluster is not None:
            client.close()
            cluster.close()
    status = (
        f"converged in {result['iterations']} iterations"
        if result["converged"]
        else f"NOT converged in {steps} iterations"
    )
    error = float(np.abs(result["w"] - true_weights()).max())
    out(
        f"{NAME}: {status} in {result['seconds']:.2f} s, final loss per row "
        f"{result['losses'][-1]:.6g}; |w - w_true| = {error:.3f} (the data's noise)"
    )
    out(f"programs traced per process (value_and_grad): {counts}")
    return {
        "backend": name,
        "workers": workers,
        "rows": rows,
        "chunk_rows": chunk,
        "trace_counts": counts,
        "ok": result["converged"],
        **result,
    }


def _persist_here(X, y):
    import dask

    return dask.persist(X, y)


def _newton(value_and_grad, hessian, X, y, rows: int, steps: int, out: Printer) -> dict:
    w = np.zeros(FEATURES)
    losses, norms = [], []
    converged = False
    start = time.perf_counter()
    for k in range(1, steps + 1):
        t = time.perf_counter()
        value, g = value_and_grad(w, X, y)
        losses.append(float(value) / rows)
        norms.append(float(np.linalg.norm(g)) / rows)
        if norms[-1] < TOLERANCE:
            converged = True
            out(
                f"  iteration {k:>2}  loss per row {losses[-1]:.10f}  |gradient| per row "
                f"{norms[-1]:.1e}  converged"
            )
            break
        H = hessian(w, X, y)
        w = w - np.linalg.solve(H, g)
        first = "  (with tracing and compiling)" if k == 1 else ""
        out(
            f"  iteration {k:>2}  loss per row {losses[-1]:.10f}  |gradient| per row "
            f"{norms[-1]:.1e}  {time.perf_counter() - t:.2f} s{first}"
        )
    return {
        "w": w,
        "losses": losses,
        "gradient_norms": norms,
        "converged": converged,
        "iterations": len(losses) - 1 if converged else steps,
        "seconds": time.perf_counter() - start,
    }


if __name__ == "__main__":
    from tracegrad.cli import main

    raise SystemExit(main(["run", NAME, *sys.argv[1:]]))
