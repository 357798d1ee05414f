"""Relax a Lennard-Jones cluster to its minimum energy with a neighbour list: the energy gathers
atom positions by index arrays (x[i] - x[j]) and sums per-atom energies with np.add.at, in plain
NumPy; forces by tg.value_and_grad, Newton steps by tg.hessian.

    python3 -m tracegrad run lennard-jones
"""

from __future__ import annotations

import sys

import numpy as np

import tracegrad as tg
from tracegrad.examples._common import Printer, check_positive, header, no_plot, resolve_backend

NAME = "lennard-jones"
DESCRIPTION = "a 13-atom Lennard-Jones cluster relaxed through a neighbour list (gathers, np.add.at, tg.hessian)"
DEFAULT_SIZE = 0
SIZE_HELP = None  # --size is not used: the cluster has 13 atoms
DEFAULT_STEPS = 60
STEPS_HELP = "iteration limit"
PLOT = False

CUTOFF = 3.0  # pairs farther apart than this (in units of sigma) do not interact
MINIMUM = -44.326801  # the known global minimum of LJ13 (the icosahedron), in units of epsilon


def icosahedron(seed: int = 0, noise: float = 0.08) -> np.ndarray:
    """13 atoms: a centre and the 12 vertices of an icosahedron, randomly displaced."""
    phi = (1 + 5**0.5) / 2
    vertices = [(0, s1, s2 * phi) for s1 in (-1, 1) for s2 in (-1, 1)]
    vertices = vertices + [(b, c, a) for a, b, c in vertices] + [(c, a, b) for a, b, c in vertices]
    x = np.vstack([np.zeros(3), np.array(vertices, float) / np.sqrt(1 + phi**2) * 1.1])
    return x + noise * np.random.default_rng(seed).normal(size=x.shape)


def neighbours(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pairs i < j closer than the cutoff, as two index arrays (computed outside the
    traced function: they are data, passed in)."""
    i, j = np.triu_indices(len(x), 1)
    keep = np.linalg.norm(x[i] - x[j], axis=1) < CUTOFF
    return i[keep], j[keep]


def energy(x, i, j):
    """sum over pairs of 4 (r^-12 - r^-6), accumulated per atom with np.add.at."""
    d = x[i] - x[j]
    inv6 = 1.0 / np.sum(d * d, axis=1) ** 3
    pair = 4.0 * (inv6 * inv6 - inv6)
    per_atom = np.zeros_like(x[:, 0])
    np.add.at(per_atom, i, 0.5 * pair)
    np.add.at(per_atom, j, 0.5 * pair)
    return np.sum(per_atom)


def run(
    backend: str | None = None,
    size: int = DEFAULT_SIZE,
    steps: int = DEFAULT_STEPS,
    plot=None,
    quiet: bool = False,
) -> dict:
    """Newton's method (with a gradient step where the Hessian is not positive definite on the
    moving directions); returns the final energy and the checks."""
    no_plot(NAME, plot)
    check_positive("steps", steps)
    name = resolve_backend(backend)
    out = Printer(quiet)
    header(
        out,
        f"lennard-jones: 13 atoms from a perturbed icosahedron, pairs within {CUTOFF} sigma",
        name,
        backend,
    )
    x = icosahedron()
    i, j = neighbours(x)
    value_and_grad = tg.value_and_grad(energy, backend=name)
    hessian = tg.hessian(lambda flat, i, j: energy(flat.reshape(-1, 3), i, j), backend=name)
    history = []
    converged = False
    for k in range(steps):
        e, g = value_and_grad(x, i, j)
        history.append(float(e))
        norm = float(np.linalg.norm(g))
        if k % 5 == 0 or norm < 1e-8:
            out(f"  step {k:>3}: energy {float(e):+.6f}  |force| = {norm:.2e}")
        if norm < 1e-8:
            converged = True
            break
        h = hessian(x.ravel(), i, j)
        # Newton on the directions that are not rigid motions (6 zero modes), else a gradient step
        w, v = np.linalg.eigh(h)
        moving = np.abs(w) > 1e-6
        if np.all(w[moving] > 0):
            p = -(v[:, moving] @ ((v[:, moving].T @ g.ravel()) / w[moving])).reshape(x.shape)
        else:
            p = -g
        t = 1.0
        while energy(x + t * p, i, j) > e and t > 1e-10:
            t *= 0.5
        x = x + t * p
    out()
    final = float(value_and_grad(x, i, j)[0])
    # the derivative checked where the forces are large: at the start, along a random direction
    start, eps = icosahedron(), 1e-6
    probe = np.random.default_rng(1).normal(size=start.shape)
    analytic = float(np.sum(value_and_grad(start, i, j)[1] * probe))
    fd = (energy(start + eps * probe, i, j) - energy(start - eps * probe, i, j)) / (2 * eps)
    out(
        f"{'converged' if converged else 'NOT converged'} after {len(history) - 1} steps: energy "
        f"{final:.6f} (known minimum {MINIMUM}); {len(i)} pairs in the neighbour list"
    )
    out(
        f"directional derivative at the start: tg.grad {analytic:+.8e}, finite differences {fd:+.8e}"
    )
    return {
        "backend": name,
        "converged": converged,
        "energy": final,
        "history": history,
        "pairs": len(i),
        "x": x,
        "derivative": analytic,
        "finite_difference": fd,
    }


if __name__ == "__main__":
    from tracegrad.cli import main

    raise SystemExit(main(["run", NAME, *sys.argv[1:]]))
