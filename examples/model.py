"""A small model to look inside with `tracegrad ir` (the commands in README.md and docs/cli.md):

    python3 -m tracegrad ir examples/model.py:loss --args 'f64[3],f64[100,3],f64[100]' --grad
    python3 -m tracegrad ir examples/model.py:energy --args 'f64[4]' --hessian
    python3 -m tracegrad ir examples/model.py:step --args 'f32[8],static:3' --grad --argnums 0

`tracegrad ir` imports this file, traces the function on arrays of the shapes that --args gives and
prints its IR (and its gradient's or hessian's, and with --kernels the generated kernels).
"""

import numpy as np


def loss(w, x, y):
    """The mean squared error of a one-layer tanh model: the README's example."""
    return np.mean((np.tanh(x @ w) - y) ** 2)


def energy(x):
    """A double-well energy with nearest-neighbour coupling (its hessian is tridiagonal)."""
    return np.sum(x**4 - 2.0 * x**2) + 0.5 * np.sum(x[:-1] * x[1:])


def step(w, n):
    """`n` (static: the loop is unrolled while tracing) damped updates of `w`, then a loss."""
    for _ in range(n):
        w = w - 0.1 * np.tanh(w)
    return np.sum(w**2)


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    x, y, w = rng.normal(size=(100, 3)), rng.normal(size=100), np.zeros(3)
    print(f"loss at w = 0: {loss(w, x, y):.4f}")
