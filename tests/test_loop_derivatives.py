"""Nested derivatives of loops: right at every order, and no bigger than they need to be.

Each order of `grad` adds a forward and a reverse loop per loop; the reverse loop reads the
residuals the forward one stacks, and the pruning pass (transforms/pruning.py) drops what the next
order leaves unread. Without that the programs grew about 4x per order (issue: grad^5 of a 5-step
scan was 8556 IR lines, JAX's jaxpr of it 1872). benchmarks/bench_loop_derivatives.py prints the
sizes of every order.
"""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
import itertools

W = np.array([0.9, 1.1, 0.7])
STEPS = 5
# JAX's jaxpr of grad^5 of the same 5-step scan (jax.make_jaxpr, jax_enable_x64): 1872 lines
JAX_GRAD5_LINES = 1872


def _scan(x):
    c, _ = tg.scan(lambda c, _: (np.sin(c) * W, None), x * np.ones(3), None, length=STEPS)
    return np.sum(c)


def _scan_reading_x(x):
    c, _ = tg.scan(lambda c, _: (np.sin(c) * x, None), np.full(3, 0.5), None, length=STEPS)
    return np.sum(c)


def _fori(x):
    return np.sum(tg.fori_loop(0, STEPS, lambda i, c: np.sin(c) * W, x * np.ones(3)))


def _while(x):
    def step(state):
        i, c = state
        return i + 1, np.sin(c) * W

    _, c = tg.while_loop(lambda state: state[0] < STEPS, step, (0, x * np.ones(3)))
    return np.sum(c)


def _unrolled(x):
    c = x * np.ones(3)
    for _ in range(STEPS):
        c = np.sin(c) * W
    return np.sum(c)


def _unrolled_reading_x(x):
    c = np.full(3, 0.5)
    for _ in range(STEPS):
        c = np.sin(c) * x
    return np.sum(c)


LOOPS = {
    "scan": (_scan, _unrolled),
    "scan reading x": (_scan_reading_x, _unrolled_reading_x),
    "fori_loop": (_fori, _unrolled),
    "while_loop": (_while, _unrolled),
}


def _lines(f, order: int, x: float = 0.3) -> list[int]:
    sizes = []
    for _ in range(order):
        f = tg.grad(f)
        sizes.append(len(str(tg.make_ir(f)(x)).splitlines()))
    return sizes


def test_the_fifth_derivative_of_a_scan_is_at_most_two_and_a_half_times_jaxs():
    sizes = _lines(_scan, 5)
    assert sizes[-1] <= 2.5 * JAX_GRAD5_LINES, sizes
    # and it grows at about JAX's rate per order (x2.8 at the fifth), not x4
    assert all(b <= 3.0 * a for a, b in itertools.pairwise(sizes)), sizes


def test_a_loop_invariant_read_in_the_body_grows_as_slowly():
    sizes = _lines(_scan_reading_x, 5)
    assert all(b <= 3.0 * a for a, b in itertools.pairwise(sizes)), sizes


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_every_order_up_to_five_is_the_unrolled_loops(name):
    """The unrolled loop (no loop node: plain straight-line derivatives) is the oracle; its first
    orders are checked against central differences elsewhere. On the interpreter: what is
    checked is the derivative graph (compiling the fifth order took the suite 3 minutes); the
    compiled backends run it in test_third_order_compiled_is_the_interpreters."""
    looped, unrolled = LOOPS[name]
    for _order in range(1, 6):
        looped, unrolled = tg.grad(looped, backend="numpy"), tg.grad(unrolled, backend="numpy")
        for x in (0.3, -1.2):
            np.testing.assert_allclose(looped(x), unrolled(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["scan", "while_loop"])
def test_third_order_compiled_is_the_interpreters(name):
    looped, _ = LOOPS[name]
    f = tg.grad(tg.grad(tg.grad(looped)))
    np.testing.assert_allclose(tg.jit(f, backend="cpu")(0.3), f(0.3), rtol=1e-12)


def test_second_derivative_against_central_differences():
    g = tg.grad(_scan)
    h = 1e-5
    fd = (g(0.3 + h) - g(0.3 - h)) / (2 * h)
    np.testing.assert_allclose(tg.grad(g)(0.3), fd, rtol=1e-7)
