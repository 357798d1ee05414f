"""Fit a Gaussian process's hyper-parameters by Newton's method on its negative log marginal
likelihood, written in plain NumPy with np.linalg.cholesky, solve and slogdet: the gradient by
tg.value_and_grad, the Hessian by tg.hessian, both checked against finite differences.

    python3 -m tracegrad run gaussian-process --size 40
"""

from __future__ import annotations

import sys

import numpy as np

import tracegrad as tg
from tracegrad.examples._common import Printer, check_positive, header, no_plot, resolve_backend

NAME = "gaussian-process"
DESCRIPTION = "GP hyper-parameters by Newton's method: gradient and Hessian through np.linalg (cholesky, solve, slogdet)"
DEFAULT_SIZE = 40
SIZE_HELP = "data points"  # what --size means
DEFAULT_STEPS = 25
STEPS_HELP = "Newton iteration limit"  # what --steps means
PLOT = False

TOLERANCE = 1e-8  # converged when the gradient's norm is below this


def data(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Noisy samples of a smooth function on [0, 5] (a fixed seed: the same data every run)."""
    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(0.0, 5.0, n))
    return x, np.sin(1.5 * x) + 0.3 * np.cos(4.0 * x) + 0.1 * rng.normal(size=n)


def negative_log_likelihood(theta, x, y):
    """-log p(y | x, theta) for a squared-exponential kernel; theta = log(length scale, signal
    variance, noise variance). What a researcher writes: no special functions, plain np.linalg."""
    scale, signal, noise = np.exp(theta[0]), np.exp(theta[1]), np.exp(theta[2])
    d2 = (x[:, None] - x[None, :]) ** 2
    k = signal * np.exp(-0.5 * d2 / scale**2) + noise * np.eye(len(x))
    lower = np.linalg.cholesky(k)
    alpha = np.linalg.solve(lower.T, np.linalg.solve(lower, y))
    _, logdet = np.linalg.slogdet(k)
    return 0.5 * y @ alpha + 0.5 * logdet + 0.5 * len(x) * np.log(2 * np.pi)


def finite_difference_check(f, grad, theta, x, y, eps=1e-5) -> float:
    """The largest relative difference between `grad` and central differences of `f`."""
    g = np.asarray(grad(theta, x, y))
    fd = np.array(
        [
            (f(theta + eps * e, x, y) - f(theta - eps * e, x, y)) / (2 * eps)
            for e in np.eye(len(theta))
        ]
    )
    return float(np.max(np.abs(g - fd)) / max(1.0, float(np.max(np.abs(fd)))))


def run(
    backend: str | None = None,
    size: int = DEFAULT_SIZE,
    steps: int = DEFAULT_STEPS,
    plot=None,
    quiet: bool = False,
) -> dict:
    """Newton's method from theta = 0; returns the fitted hyper-parameters and the checks."""
    no_plot(NAME, plot)
    check_positive("size", size, 3)
    check_positive("steps", steps)
    name = resolve_backend(backend)
    out = Printer(quiet)
    header(
        out,
        f"gaussian-process: {size} points, squared-exponential kernel, Newton's method on "
        "log(length scale, signal variance, noise variance)",
        name,
        backend,
    )
    x, y = data(size)
    value_and_grad = tg.value_and_grad(negative_log_likelihood, backend=name)
    hessian = tg.hessian(negative_log_likelihood, backend=name)
    theta = np.zeros(3)
    history = []
    converged = False
    for k in range(steps):
        f, g = value_and_grad(theta, x, y)
        history.append(float(f))
        out(
            f"  step {k:>2}: -log p = {float(f):+.8f}  |grad| = {np.linalg.norm(g):.2e}  "
            f"theta = {np.array2string(theta, precision=4)}"
        )
        if np.linalg.norm(g) < TOLERANCE:
            converged = True
            break
        h = hessian(theta, x, y)
        # a Newton step when the Hessian is positive definite, else a gradient step; halved
        # until the likelihood improves
        p = -np.linalg.solve(h, g) if np.all(np.linalg.eigvalsh(h) > 0) else -g
        t = 1.0
        while negative_log_likelihood(theta + t * p, x, y) > f and t > 1e-8:
            t *= 0.5
        theta = theta + t * p
    out()
    grad_error = finite_difference_check(
        negative_log_likelihood, tg.grad(negative_log_likelihood, backend=name), theta, x, y
    )
    hess_error = finite_difference_check(
        lambda t, x, y: tg.grad(negative_log_likelihood, backend="numpy")(t, x, y),
        hessian,
        theta,
        x,
        y,
    )
    scale, signal, noise = np.exp(theta)
    out(
        f"{'converged' if converged else 'NOT converged'} after {len(history) - 1} Newton steps: "
        f"length scale {scale:.4f}, signal variance {signal:.4f}, noise variance {noise:.5f}"
    )
    out(
        f"gradient vs finite differences: {grad_error:.1e} relative; "
        f"Hessian vs finite differences of the gradient: {hess_error:.1e}"
    )
    return {
        "backend": name,
        "converged": converged,
        "theta": theta,
        "history": history,
        "grad_error": grad_error,
        "hessian_error": hess_error,
    }


if __name__ == "__main__":
    from tracegrad.cli import main

    raise SystemExit(main(["run", NAME, *sys.argv[1:]]))
