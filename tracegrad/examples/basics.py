"""The classic autograd tutorial numbers, each computed by tracegrad beside the expected value.

python3 -m tracegrad run basics
"""

from __future__ import annotations

import sys

import numpy as np

import tracegrad as tg
from tracegrad.examples._common import Printer, header, no_plot, resolve_backend

NAME = "basics"
DESCRIPTION = "the classic autograd tutorial numbers (w*x**2 -> 9, ...), each checked"
DEFAULT_SIZE = 0
SIZE_HELP = None  # --size is not used
DEFAULT_STEPS = 0
STEPS_HELP = None  # --steps is not used
PLOT = False


def relu(z):
    return np.maximum(z, 0.0)


def cases(backend: str) -> list[tuple[str, str, str, object, object]]:
    """(expression, derivative, point, expected, computed by tracegrad) for each classic case."""
    grad = lambda f, argnums=0: tg.grad(f, argnums=argnums, backend=backend)
    return [
        ("L = w*x**2", "dL/dw", "w=2, x=3", 9.0, grad(lambda w, x: w * x**2)(2.0, 3.0)),
        (
            "y = w*x + b",
            "(dy/dx, dy/dw, dy/db)",
            "x=2, w=3, b=1",
            (3.0, 2.0, 1.0),
            grad(lambda x, w, b: w * x + b, argnums=(0, 1, 2))(2.0, 3.0, 1.0),
        ),
        (
            "L = (w*x + b - 5)**2",
            "(dL/dw, dL/dx, dL/db)",
            "w=2, x=3, b=1",
            (12.0, 8.0, 4.0),
            grad(lambda w, x, b: (w * x + b - 5.0) ** 2, argnums=(0, 1, 2))(2.0, 3.0, 1.0),
        ),
        (
            "L = relu(x*w)",
            "dL/dw",
            "x=2, w=3",
            2.0,
            grad(lambda x, w: relu(x * w), argnums=1)(2.0, 3.0),
        ),
        ("y = x**3", "d2y/dx2", "x=1", 6.0, grad(grad(lambda x: x**3))(1.0)),
        (
            "y = sum(x**3)",
            "hessian",
            "x=[2, -1]",
            np.diag([12.0, -6.0]),
            tg.hessian(lambda x: np.sum(x**3), backend=backend)(np.array([2.0, -1.0])),
        ),
        ("L = (x**2 - 4)**2", "dL/dx", "x=2", 0.0, grad(lambda x: (x**2 - 4.0) ** 2)(2.0)),
    ]


def show(value) -> str:
    """9.0 -> '9', a tuple -> '(3, 2, 1)', a matrix -> '[[12, 0], [0, -6]]'."""
    if isinstance(value, tuple):
        return "(" + ", ".join(show(v) for v in value) + ")"
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        return f"{float(arr) + 0.0:g}"  # + 0.0 turns -0 into 0
    return "[" + ", ".join(show(row) for row in arr) + "]"


def agrees(expected, computed) -> bool:
    if isinstance(expected, tuple):
        return len(expected) == len(computed) and all(
            agrees(e, c) for e, c in zip(expected, computed, strict=True)
        )
    computed = np.asarray(computed, dtype=float)
    return computed.shape == np.shape(expected) and bool(
        np.allclose(computed, expected, rtol=1e-12, atol=1e-12)
    )


def run(
    backend: str | None = None,
    size: int = DEFAULT_SIZE,
    steps: int = DEFAULT_STEPS,
    plot=None,
    quiet: bool = False,
) -> dict:
    """Compute each case and print the table. Returns {"rows": [...], "passed": n, "total": n}."""
    no_plot(NAME, plot)
    name = resolve_backend(backend)
    out = Printer(quiet)
    header(out, "tracegrad basics: the classic autograd tutorial numbers", name, backend)
    rows = []
    for expression, derivative, point, expected, computed in cases(name):
        ok = agrees(expected, computed)
        rows.append(
            {
                "expression": expression,
                "derivative": derivative,
                "at": point,
                "expected": show(expected),
                "tracegrad": show(computed),
                "ok": ok,
                "value": computed,
            }
        )
    titles = ("expression", "derivative", "at", "expected", "tracegrad", "ok")
    table = [titles] + [
        (
            r["expression"],
            r["derivative"],
            r["at"],
            r["expected"],
            r["tracegrad"],
            "yes" if r["ok"] else "NO",
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(titles))]
    for k, line in enumerate(table):
        out("  " + "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
        if k == 0:
            out("  " + "  ".join("-" * w for w in widths))
    passed = sum(r["ok"] for r in rows)
    out()
    out(f"basics: {passed} of {len(rows)} derivatives match the expected values")
    return {
        "backend": name,
        "rows": rows,
        "passed": passed,
        "total": len(rows),
        "ok": passed == len(rows),
    }


if __name__ == "__main__":
    from tracegrad.cli import main

    raise SystemExit(main(["run", NAME, *sys.argv[1:]]))
