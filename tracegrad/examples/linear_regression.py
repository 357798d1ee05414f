"""Fit y = w*x + b to generated data by gradient descent, and print the loss curve.

python3 -m tracegrad run linear-regression --steps 200 --plot loss.png
"""

from __future__ import annotations

import sys

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

NAME = "linear-regression"
DESCRIPTION = "fit y = w*x + b by gradient descent on generated data; loss curve [--plot]"
DEFAULT_SIZE = 1000
SIZE_HELP = "data points"  # what --size means
DEFAULT_STEPS = 200
STEPS_HELP = "gradient-descent steps"  # what --steps means
PLOT = True

TRUE_W, TRUE_B, NOISE = 2.5, -0.7, 0.1
LEARNING_RATE = 0.1


def make_data(size: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, size)
    y = TRUE_W * x + TRUE_B + NOISE * rng.normal(size=size)
    return x, y


def loss(w, b, x, y):
    """Mean squared error of the line w*x + b."""
    return np.mean((w * x + b - y) ** 2)


def run(
    backend: str | None = None,
    size: int = DEFAULT_SIZE,
    steps: int = DEFAULT_STEPS,
    plot=None,
    quiet: bool = False,
) -> dict:
    """Fit the line; returns w, b, the true values, the loss at every step and the timings."""
    check_positive("size", size, 2)
    check_positive("steps", steps)
    check_plot_path(plot)
    name = resolve_backend(backend)
    out = Printer(quiet)
    header(
        out,
        f"linear regression: fit y = w*x + b to {size} points from y = {TRUE_W}*x - {-TRUE_B} + noise",
        name,
        backend,
    )

    x, y = make_data(size)
    loss_and_grads = tg.value_and_grad(loss, argnums=(0, 1), backend=name)
    w, b = 0.0, 0.0
    losses = []
    progress = Progress(out, NAME, steps, watch=(loss_and_grads,))
    for step in range(1, steps + 1):
        value, (dw, db) = loss_and_grads(w, b, x, y)
        w, b = w - LEARNING_RATE * float(dw), b - LEARNING_RATE * float(db)
        losses.append(float(value))
        progress.step(step, value)
    final = float(loss(w, b, x, y))
    progress.loss = final
    timing = progress.done(extra=f"w = {w:.4f} (true {TRUE_W}), b = {b:.4f} (true {TRUE_B})")
    # The best a line can do on this data: the least-squares solution, in closed form.
    w_ls, b_ls = np.polyfit(x, y, 1)
    out(
        f"least squares in closed form: w = {w_ls:.4f}, b = {b_ls:.4f}, loss {loss(w_ls, b_ls, x, y):.6g}"
    )

    if plot is not None:
        fig = new_figure()
        ax = fig.add_subplot()
        ax.semilogy(np.arange(1, steps + 1), losses, label="gradient descent")
        ax.axhline(loss(w_ls, b_ls, x, y), color="gray", ls="--", label="least squares")
        ax.set(
            xlabel="step", ylabel="mean squared error", title=f"linear regression ({name} backend)"
        )
        ax.legend()
        save(fig, plot, out)
    return {
        "backend": name,
        "w": w,
        "b": b,
        "true_w": TRUE_W,
        "true_b": TRUE_B,
        "least_squares": (float(w_ls), float(b_ls)),
        "losses": losses,
        "final_loss": final,
        **timing,
    }


if __name__ == "__main__":
    from tracegrad.cli import main

    raise SystemExit(main(["run", NAME, *sys.argv[1:]]))
