"""Watching gradients flow through a deep tanh network, with a tg.tap hook on every layer.

A hook per layer records the norm of the gradient arriving at that layer's activations at every
training step. With a too-small initialisation the gradient shrinks layer by layer on its way
back (it vanishes before it reaches the first layers); with a Xavier initialisation it stays
healthy.

    python3 -m tracegrad run gradient-flow --steps 200 --plot flow.png
"""

from __future__ import annotations

import itertools
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
from tracegrad.examples.mlp import two_moons

NAME = "gradient-flow"
DESCRIPTION = (
    "per-layer gradient norms of a 6-layer tanh MLP via tg.tap hooks: vanishing vs healthy [--plot]"
)
DEFAULT_SIZE = 256  # training points
DEFAULT_STEPS = 100  # SGD steps per initialisation
PLOT = True

LAYERS = 6
WIDTH = 32
LEARNING_RATE = 0.1
INITIALISATIONS = {
    "small (std 0.05)": lambda fan_in, rng, shape: rng.normal(scale=0.05, size=shape),
    "Xavier (std 1/sqrt(fan_in))": lambda fan_in, rng, shape: (
        rng.normal(size=shape) / np.sqrt(fan_in)
    ),
}


def init_params(init, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = [2] + [WIDTH] * LAYERS + [1]
    params = {}
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        params[f"W{i}"] = init(fan_in, rng, (fan_in, fan_out))
        params[f"b{i}"] = np.zeros(fan_out)
    return params


def make_loss(record):
    """The loss, with a hook on each hidden layer's activations that calls `record`."""

    def loss(params, points, labels):
        h = points
        for i in range(LAYERS):
            h = np.tanh(h @ params[f"W{i}"] + params[f"b{i}"])
            h = tg.tap(h, f"layer{i + 1}", hook=record)
        score = (h @ params[f"W{LAYERS}"] + params[f"b{LAYERS}"])[:, 0]
        return np.mean(np.log1p(np.exp(-labels * score)))

    return loss


def train(init, points, labels, steps: int, backend: str, out: Printer, title: str):
    norms: dict[str, list[float]] = {f"layer{i + 1}": [] for i in range(LAYERS)}

    def record(name, cotangent):
        norms[name].append(float(np.linalg.norm(cotangent)))

    step_fn = tg.value_and_grad(make_loss(record), backend=backend)
    params = init_params(init)
    progress = Progress(out, f"{NAME} [{title}]", steps, watch=(step_fn,))
    for step in range(1, steps + 1):
        value, grads = step_fn(params, points, labels)
        params = {k: params[k] - LEARNING_RATE * grads[k] for k in params}
        progress.step(step, value)
    progress.done()
    return {name: np.array(values) for name, values in norms.items()}, float(value)


def run(
    backend: str | None = None,
    size: int = DEFAULT_SIZE,
    steps: int = DEFAULT_STEPS,
    plot=None,
    quiet: bool = False,
) -> dict:
    """Train the same network from two initialisations; returns the per-layer gradient norms."""
    check_positive("size", size, 4)
    check_positive("steps", steps)
    check_plot_path(plot)
    name = resolve_backend(backend)
    out = Printer(quiet)
    header(
        out,
        f"{NAME}: {LAYERS} tanh layers of {WIDTH}, hooks record |d loss / d activations|",
        name,
        backend,
    )
    points, labels = two_moons(size)

    results = {}
    for title, init in INITIALISATIONS.items():
        norms, final_loss = train(init, points, labels, steps, name, out, title)
        results[title] = {"norms": norms, "final_loss": final_loss}
        out()

    out("mean gradient norm at each layer over training (layer 1 is nearest the input):")
    titles = list(results)
    out(f"  {'layer':<8}" + "".join(f"{t:>30}" for t in titles))
    for i in range(LAYERS):
        layer = f"layer{i + 1}"
        row = "".join(f"{np.mean(results[t]['norms'][layer]):>30.3e}" for t in titles)
        out(f"  {layer:<8}{row}")
    ratios = {
        t: float(
            np.mean(results[t]["norms"]["layer1"]) / np.mean(results[t]["norms"][f"layer{LAYERS}"])
        )
        for t in titles
    }
    out("  first/last layer ratio" + "".join(f"{ratios[t]:>22.3g}" for t in titles))
    out(
        f"{NAME}: with the small initialisation the gradient at layer 1 is "
        f"{ratios[titles[0]]:.1e} times the one at layer {LAYERS} (vanishing); "
        f"with Xavier it is {ratios[titles[1]]:.2g} (healthy)"
    )

    if plot is not None:
        fig = new_figure((8.0, 3.5))
        for k, t in enumerate(titles):
            ax = fig.add_subplot(1, len(titles), k + 1)
            for i in range(LAYERS):
                ax.semilogy(results[t]["norms"][f"layer{i + 1}"], label=f"layer {i + 1}")
            ax.set(title=t, xlabel="step", ylabel="|gradient|")
            if k == 0:
                ax.legend(fontsize=7)
        save(fig, plot, out)
    return {"backend": name, "results": results, "ratios": ratios}


if __name__ == "__main__":
    from tracegrad.cli import main

    raise SystemExit(main(["run", NAME, *sys.argv[1:]]))
