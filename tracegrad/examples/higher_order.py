"""The first five derivatives of sin at a point, by applying tg.grad again and again, and the
Taylor polynomial built from them, both checked against the closed form.

    python3 -m tracegrad run higher-order
"""

from __future__ import annotations

import math
import sys

import numpy as np

import tracegrad as tg
from tracegrad.examples._common import Printer, check_positive, header, no_plot, resolve_backend

NAME = "higher-order"
DESCRIPTION = "five derivatives of sin by repeated tg.grad, and a Taylor polynomial from them"
DEFAULT_SIZE = 9
SIZE_HELP = "points where the Taylor polynomial is checked"  # what --size means
DEFAULT_STEPS = 0
STEPS_HELP = None  # --steps is not used
PLOT = False

X0 = 0.5  # the point of expansion
ORDER = 5


def run(
    backend: str | None = None,
    size: int = DEFAULT_SIZE,
    steps: int = DEFAULT_STEPS,
    plot=None,
    quiet: bool = False,
) -> dict:
    """Returns the derivatives, their closed forms, and the Taylor polynomial's errors."""
    no_plot(NAME, plot)
    check_positive("size", size, 2)
    name = resolve_backend(backend)
    out = Printer(quiet)
    header(
        out,
        f"higher-order: derivatives of sin at x0 = {X0}, each the grad of the one before",
        name,
        backend,
    )

    derivatives = [np.sin]
    for _ in range(ORDER):
        derivatives.append(tg.grad(derivatives[-1], backend=name))
    computed = [float(d(X0)) for d in derivatives]
    # d^k/dx^k sin(x) = sin(x + k pi/2)
    closed = [math.sin(X0 + k * math.pi / 2) for k in range(ORDER + 1)]
    nodes = [None] + [len(tg.make_ir(d)(X0).nodes) for d in derivatives[1:]]

    out(
        f"  k  {'tracegrad d^k/dx^k sin':<22}  {'closed form sin(x0 + k*pi/2)':<28}  difference  IR nodes"
    )
    for k in range(ORDER + 1):
        shown = "-" if nodes[k] is None else str(nodes[k])
        out(
            f"  {k}  {computed[k]:<+22.15f}  {closed[k]:<+28.15f}  {abs(computed[k] - closed[k]):<10.1e}  {shown}"
        )
    max_error = max(abs(c - e) for c, e in zip(computed, closed, strict=True))
    out()

    # T(x0 + h) = sum_k f^(k)(x0) h^k / k!; |sin(x0 + h) - T(x0 + h)| <= |h|^6 / 6!
    h = np.linspace(-1.0, 1.0, size)
    powers = np.stack([h**k / math.factorial(k) for k in range(ORDER + 1)])
    taylor = np.asarray(computed) @ powers
    taylor_closed = np.asarray(closed) @ powers
    exact = np.sin(X0 + h)
    bound = np.abs(h) ** (ORDER + 1) / math.factorial(ORDER + 1)
    out(f"Taylor polynomial of degree {ORDER} at x0 = {X0}, at {size} points x0 + h:")
    out(f"  {'h':>6}  {'sin(x0 + h)':<15}  {'Taylor':<15}  {'error':<7}  bound |h|^6/6!")
    for hi, e, t, b in zip(h, exact, taylor, bound, strict=True):
        out(f"  {hi:+.3f}  {e:+.12f}  {t:+.12f}  {abs(e - t):.1e}  {b:.1e}")
    within = bool(np.all(np.abs(exact - taylor) <= bound + 1e-15))
    polynomial_difference = float(np.max(np.abs(taylor - taylor_closed)))
    out()
    out(
        f"higher-order: derivatives match the closed form to {max_error:.1e}; the Taylor "
        f"polynomial matches the closed-form one to {polynomial_difference:.1e} and stays within "
        f"the remainder bound at {'every' if within else 'NOT every'} point"
    )
    return {
        "backend": name,
        "x0": X0,
        "derivatives": computed,
        "closed_form": closed,
        "max_error": max_error,
        "ir_nodes": nodes[1:],
        "h": h,
        "taylor": taylor,
        "taylor_error": np.abs(exact - taylor),
        "remainder_bound": bound,
        "within_bound": within,
        "polynomial_difference": polynomial_difference,
    }


if __name__ == "__main__":
    from tracegrad.cli import main

    raise SystemExit(main(["run", NAME, *sys.argv[1:]]))
