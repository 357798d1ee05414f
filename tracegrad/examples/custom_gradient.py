"""A numerically stable log-sum-exp three ways: naive, with tg.stop_gradient, and with a
hand-written rule (tg.custom_vjp); tg.check_grad confirms the gradients, and catches a wrong rule.

    python3 -m tracegrad run custom-gradient
"""

from __future__ import annotations

import sys

import numpy as np

import tracegrad as tg
from tracegrad.examples._common import Printer, check_positive, header, no_plot, resolve_backend

NAME = "custom-gradient"
DESCRIPTION = "stable log-sum-exp with tg.custom_vjp and tg.stop_gradient, checked by tg.check_grad"
DEFAULT_SIZE = 5
SIZE_HELP = "length of the vector x"  # what --size means
DEFAULT_STEPS = 0
STEPS_HELP = None  # --steps is not used
PLOT = False


def logsumexp_naive(x):
    """log(sum(exp(x))): exp overflows to inf for x above about 709."""
    return np.log(np.sum(np.exp(x)))


def logsumexp_shifted(x):
    """m + log(sum(exp(x - m))) with m = max(x). m is only a shift that cancels out, so it needs no
    derivative: stop_gradient says so, and the gradient of max (a tie-splitting rule) never runs."""
    m = tg.stop_gradient(np.max(x))
    return m + np.log(np.sum(np.exp(x - m)))


@tg.custom_vjp
def logsumexp(x):
    """The stable value, with the gradient given by hand: d/dx logsumexp(x) = softmax(x)."""
    m = np.max(x)
    return m + np.log(np.sum(np.exp(x - m)))


def logsumexp_fwd(x):
    m = np.max(x)
    e = np.exp(x - m)
    total = np.sum(e)
    return m + np.log(total), e / total  # (value, residuals that the backward pass needs)


def logsumexp_bwd(softmax, ct):
    return (ct * softmax,)  # one cotangent per argument


logsumexp.defvjp(logsumexp_fwd, logsumexp_bwd)


@tg.custom_vjp
def logsumexp_wrong(x):
    m = np.max(x)
    return m + np.log(np.sum(np.exp(x - m)))


logsumexp_wrong.defvjp(logsumexp_fwd, lambda softmax, ct: (ct * softmax * 1.01,))


def reference(x: np.ndarray) -> tuple[float, np.ndarray]:
    """The value and gradient by hand, in plain NumPy."""
    m = x.max()
    e = np.exp(x - m)
    return float(m + np.log(e.sum())), e / e.sum()


def show(v: np.ndarray, n: int = 4) -> str:
    items = [f"{x:.4f}" for x in v[:n]]
    return "[" + ", ".join(items) + (", ...]" if len(v) > n else "]")


def run(
    backend: str | None = None,
    size: int = DEFAULT_SIZE,
    steps: int = DEFAULT_STEPS,
    plot=None,
    quiet: bool = False,
) -> dict:
    """Returns each version's value and gradient at large x, and the check_grad results."""
    no_plot(NAME, plot)
    check_positive("size", size, 2)
    name = resolve_backend(backend)
    out = Printer(quiet)
    rng = np.random.default_rng(0)
    big = 1000.0 + rng.normal(size=size)
    small = rng.normal(size=size)
    header(out, f"custom-gradient: log-sum-exp of {size} values near 1000", name, backend)

    ref_value, ref_grad = reference(big)
    versions = {  # key: (label, function)
        "naive": ("naive: log(sum(exp(x)))", logsumexp_naive),
        "shifted": ("shifted by stop_gradient(max(x))", logsumexp_shifted),
        "custom": ("custom_vjp: softmax as the rule", logsumexp),
    }
    results = {}
    out(f"  {'version':<34}  {'value':<18}  {'gradient':<40}  right")
    for key, (label, fun) in versions.items():
        with np.errstate(
            over="ignore", invalid="ignore", divide="ignore"
        ):  # the naive one overflows
            value, gradient = tg.value_and_grad(fun, backend=name)(big)
        right = bool(
            np.isclose(value, ref_value, rtol=1e-12) and np.allclose(gradient, ref_grad, rtol=1e-10)
        )
        results[key] = {"value": float(value), "gradient": gradient, "right": right}
        out(
            f"  {label:<34}  {float(value):<18.12g}  {show(gradient):<40}  {'yes' if right else 'NO'}"
        )
    out(f"  {'reference, by hand in NumPy':<34}  {ref_value:<18.12g}  {show(ref_grad)}")
    out()

    checks = {}
    out("tg.check_grad against central finite differences, orders 1 and 2, near 0 and near 1000:")
    checked = {
        "shifted": versions["shifted"],
        "custom": versions["custom"],
        "wrong": ("custom_vjp with a wrong rule (x 1.01)", logsumexp_wrong),
    }
    for key, (label, fun) in checked.items():
        try:
            for x in (small, big):
                tg.check_grad(fun, x, order=2, rtol=1e-4, atol=1e-6, backend=name)
            checks[key] = "passed"
        except tg.GradientCheckError as exc:
            checks[key] = "GradientCheckError: " + str(exc).split(":")[0]
        out(f"  {label:<38}  {checks[key]}")
    out()
    naive_fails = not results["naive"]["right"]
    stable_right = results["shifted"]["right"] and results["custom"]["right"]
    stable_pass = checks["shifted"] == checks["custom"] == "passed"
    wrong_caught = checks["wrong"] != "passed"
    out(
        f"custom-gradient: the naive version {'overflows' if naive_fails else 'does not overflow'}; the "
        f"stable versions {'agree' if stable_right else 'DISAGREE'} with the reference and "
        f"{'pass' if stable_pass else 'FAIL'} check_grad; the wrong rule is "
        f"{'caught' if wrong_caught else 'NOT caught'}"
    )
    return {
        "backend": name,
        "x": big,
        "reference": (ref_value, ref_grad),
        "results": results,
        "checks": checks,
        "ok": naive_fails and stable_right and stable_pass and wrong_caught,
    }


if __name__ == "__main__":
    from tracegrad.cli import main

    raise SystemExit(main(["run", NAME, *sys.argv[1:]]))
