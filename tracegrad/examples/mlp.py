"""A small tanh network learns two interleaved half-moons: value_and_grad over a dict of weights.

python3 -m tracegrad run mlp --size 500 --steps 1000 --plot boundary.png
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

NAME = "mlp"
DESCRIPTION = "a tanh network learns the two-moons data set (Adam, dict of weights) [--plot]"
DEFAULT_SIZE = 500
SIZE_HELP = "training points (the test set has as many)"  # what --size means
DEFAULT_STEPS = 1000
STEPS_HELP = "Adam steps on the whole training set"  # what --steps means
PLOT = True

HIDDEN = 16
LEARNING_RATE = 0.03


def two_moons(size: int, noise: float = 0.15, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """`size` points on two interleaved half circles; labels are -1 (upper) and +1 (lower)."""
    rng = np.random.default_rng(seed)
    upper = size // 2
    t = rng.uniform(0.0, np.pi, size)
    x = np.where(np.arange(size) < upper, np.cos(t), 1.0 - np.cos(t))
    y = np.where(np.arange(size) < upper, np.sin(t), 0.5 - np.sin(t))
    points = np.stack([x, y], axis=1) + noise * rng.normal(size=(size, 2))
    labels = np.where(np.arange(size) < upper, -1.0, 1.0)
    order = rng.permutation(size)
    return points[order], labels[order]


def init_params(hidden: int = HIDDEN, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "W1": rng.normal(size=(2, hidden)),
        "b1": np.zeros(hidden),
        "W2": rng.normal(size=(hidden, hidden)) / np.sqrt(hidden),
        "b2": np.zeros(hidden),
        "W3": rng.normal(size=(hidden, 1)) / np.sqrt(hidden),
        "b3": np.zeros(1),
    }


def predict(params, points):
    """The network's score for each point: positive means class +1."""
    h = np.tanh(points @ params["W1"] + params["b1"])
    h = np.tanh(h @ params["W2"] + params["b2"])
    return (h @ params["W3"] + params["b3"])[:, 0]


def softplus(t):
    """log(1 + exp(t)), without overflow for large t."""
    return np.maximum(t, 0.0) + np.log1p(np.exp(-np.abs(t)))


def loss(params, points, labels):
    """Logistic loss: mean of log(1 + exp(-label * score))."""
    return np.mean(softplus(-labels * predict(params, points)))


class Adam:
    """The Adam optimiser over a dict of arrays (plain NumPy: the optimiser is not differentiated)."""

    def __init__(self, params, lr: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
        self.lr, self.b1, self.b2, self.eps, self.t = lr, b1, b2, eps, 0
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}

    def update(self, params, grads):
        self.t += 1
        new = {}
        for k in params:
            self.m[k] = self.b1 * self.m[k] + (1 - self.b1) * grads[k]
            self.v[k] = self.b2 * self.v[k] + (1 - self.b2) * grads[k] ** 2
            m_hat = self.m[k] / (1 - self.b1**self.t)
            v_hat = self.v[k] / (1 - self.b2**self.t)
            new[k] = params[k] - self.lr * m_hat / (np.sqrt(v_hat) + self.eps)
        return new


def run(
    backend: str | None = None,
    size: int = DEFAULT_SIZE,
    steps: int = DEFAULT_STEPS,
    plot=None,
    quiet: bool = False,
) -> dict:
    """Train; returns the training and test accuracy, the loss at every step and the timings."""
    check_positive("size", size, 4)
    check_positive("steps", steps)
    check_plot_path(plot)
    name = resolve_backend(backend)
    out = Printer(quiet)
    header(
        out,
        f"mlp: 2-{HIDDEN}-{HIDDEN}-1 tanh network on two moons, {size} training points",
        name,
        backend,
    )

    points, labels = two_moons(size, seed=0)
    test_points, test_labels = two_moons(size, seed=1)
    params = init_params()
    loss_and_grads = tg.value_and_grad(loss, backend=name)  # gradients come back as a dict
    scores = tg.jit(predict, backend=name)
    optimiser = Adam(params, LEARNING_RATE)
    losses = []
    progress = Progress(out, NAME, steps, watch=(loss_and_grads,))
    for step in range(1, steps + 1):
        value, grads = loss_and_grads(params, points, labels)
        params = optimiser.update(params, grads)
        losses.append(float(value))
        progress.step(step, value)
    accuracy = float(np.mean(np.sign(scores(params, points)) == labels))
    test_accuracy = float(np.mean(np.sign(scores(params, test_points)) == test_labels))
    timing = progress.done(extra=f"accuracy {accuracy:.1%} (train), {test_accuracy:.1%} (test)")

    if plot is not None:
        fig = new_figure((5.5, 4.5))
        ax = fig.add_subplot()
        gx, gy = np.meshgrid(np.linspace(-1.6, 2.6, 200), np.linspace(-1.1, 1.6, 150))
        grid = np.stack([gx.ravel(), gy.ravel()], axis=1)
        z = scores(params, grid).reshape(gx.shape)
        ax.contourf(gx, gy, z, levels=[-1e9, 0.0, 1e9], colors=["#c6dbef", "#fdd0a2"])
        ax.contour(gx, gy, z, levels=[0.0], colors="k", linewidths=1)
        for label, color in ((-1.0, "#2171b5"), (1.0, "#d94801")):
            chosen = labels == label
            ax.scatter(points[chosen, 0], points[chosen, 1], s=8, color=color)
        ax.set(
            title=f"decision boundary: train {accuracy:.1%}, test {test_accuracy:.1%}",
            xlabel="x1",
            ylabel="x2",
        )
        save(fig, plot, out)
    return {
        "backend": name,
        "accuracy": accuracy,
        "test_accuracy": test_accuracy,
        "losses": losses,
        "final_loss": losses[-1],
        "params": params,
        **timing,
    }


if __name__ == "__main__":
    from tracegrad.cli import main

    raise SystemExit(main(["run", NAME, *sys.argv[1:]]))
