"""Minimise the n-dimensional Rosenbrock function with Newton's method (tg.hessian) and with
gradient descent, and count the iterations each needs.

    python3 -m tracegrad run newton --size 10 --plot convergence.png
"""

from __future__ import annotations

import sys
import time

import numpy as np

import tracegrad as tg
from tracegrad.examples._common import (
    Printer,
    Progress,
    check_plot_path,
    check_positive,
    header,
    new_figure,
    resolve_backend,
    save,
)

NAME = "newton"
DESCRIPTION = (
    "Rosenbrock in n dimensions: Newton's method (tg.hessian) against gradient descent [--plot]"
)
DEFAULT_SIZE = 10
SIZE_HELP = "dimensions"  # what --size means
DEFAULT_STEPS = 30000
STEPS_HELP = "iteration limit for each method"  # what --steps means
PLOT = True

TOLERANCE = 1e-6  # converged when the gradient's norm is below this


def rosenbrock(x):
    """sum of 100 (x[i+1] - x[i]**2)**2 + (1 - x[i])**2; the minimum is 0 at x = (1, ..., 1)."""
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def newton_direction(hess: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Solve (H + tau I) p = -g, with the smallest tau >= 0 (doubling) that makes it positive
    definite, so that p always points downhill."""
    tau = 0.0
    while True:
        try:
            lower = np.linalg.cholesky(hess + tau * np.eye(len(g)))
        except np.linalg.LinAlgError:
            tau = max(2.0 * tau, 1e-3)
            continue
        return -np.linalg.solve(lower.T, np.linalg.solve(lower, g))


def backtrack(x: np.ndarray, f: float, g: np.ndarray, p: np.ndarray, t: float) -> float:
    """The largest step t, t/2, t/4, ... with sufficient decrease (the Armijo condition)."""
    slope = float(g @ p)
    while rosenbrock(x + t * p) > f + 1e-4 * t * slope and t > 1e-12:
        t *= 0.5
    return t


def minimise(method: str, x0: np.ndarray, steps: int, backend: str, out: Printer) -> dict:
    value_and_grad = tg.value_and_grad(rosenbrock, backend=backend)
    hessian = tg.hessian(rosenbrock, backend=backend)
    x, t = x0.copy(), 1.0
    history = []
    newton = method == "Newton's method"
    progress = Progress(
        out,
        method,
        steps,
        every=5 if newton else None,
        unit="iteration",
        label="f",
        show_total=not newton,
        watch=(value_and_grad, hessian) if newton else (value_and_grad,),
    )
    converged = False
    start = time.perf_counter()
    for k in range(steps):
        f, g = value_and_grad(x)
        history.append(float(f))
        if np.linalg.norm(g) < TOLERANCE:
            converged = True
            break
        if newton:
            p = newton_direction(hessian(x), g)
            t = backtrack(x, float(f), g, p, 1.0)
        else:
            p = -g
            t = backtrack(x, float(f), g, p, min(2.0 * t, 1.0))  # try a longer step each time
        x = x + t * p
        progress.step(k + 1, f)  # the whole iteration: a hessian compiled in it counts as such
    seconds = time.perf_counter() - start
    iterations = len(history) - 1 if converged else steps
    status = (
        f"converged in {iterations:,} iterations"
        if converged
        else f"NOT converged in {steps:,} iterations"
    )
    progress.loss = history[-1]
    progress.done(steps=max(iterations, 1), extra=status)
    return {
        "converged": converged,
        "iterations": iterations,
        "x": x,
        "f": history[-1],
        "gradient_norm": float(np.linalg.norm(g)),
        "history": history,
        "seconds": seconds,
    }


def run(
    backend: str | None = None,
    size: int = DEFAULT_SIZE,
    steps: int = DEFAULT_STEPS,
    plot=None,
    quiet: bool = False,
) -> dict:
    """Run both methods from x = 0; returns {"newton": {...}, "gradient_descent": {...}}."""
    check_positive("size", size, 2)
    check_positive("steps", steps)
    check_plot_path(plot)
    name = resolve_backend(backend)
    out = Printer(quiet)
    header(
        out,
        f"newton: Rosenbrock function in {size} dimensions from x = 0; "
        f"converged when |gradient| < {TOLERANCE:g}",
        name,
        backend,
    )
    x0 = np.zeros(size)
    out("Newton's method, with tg.hessian:")
    newton = minimise("Newton's method", x0, steps, name, out)
    out()
    out("gradient descent, with tg.value_and_grad:")
    descent = minimise("gradient descent", x0, steps, name, out)
    out()

    def line(label: str, r: dict) -> str:
        what = (
            f"{r['iterations']:>7,} iterations"
            if r["converged"]
            else f"not converged after {r['iterations']:,}"
        )
        return f"  {label:<17} {what}  f = {r['f']:.3g}  |x - 1| = {np.abs(r['x'] - 1.0).max():.1e}  {r['seconds']:.2f} s"

    out("iterations to convergence:")
    out(line("Newton", newton))
    out(line("gradient descent", descent))
    if plot is not None:
        fig = new_figure()
        ax = fig.add_subplot()
        for label, r in (("Newton (tg.hessian)", newton), ("gradient descent", descent)):
            ax.loglog(
                np.arange(1, len(r["history"]) + 1), np.maximum(r["history"], 1e-300), label=label
            )
        ax.set(xlabel="iteration", ylabel="f(x)", title=f"Rosenbrock, n = {size} ({name} backend)")
        ax.legend()
        save(fig, plot, out)
    return {"backend": name, "newton": newton, "gradient_descent": descent}


if __name__ == "__main__":
    from tracegrad.cli import main

    raise SystemExit(main(["run", NAME, *sys.argv[1:]]))
