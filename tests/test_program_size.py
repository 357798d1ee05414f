"""Programs of any size: the fusion plan keeps every loop's expression linear in the graph, and
nothing in the pipeline recurses as deep as the program is long.

These tests are about programs left unrolled, so rolling (tests/test_rolling.py) is off here."""

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import fusion, passes
from tracegrad.transforms import rolling


@pytest.fixture(autouse=True)
def unrolled(monkeypatch):
    monkeypatch.setattr(rolling, "MIN_REPEATS", 10**9)


def shifted_sum(k):
    def f(q):
        for _ in range(k):
            q = np.sin(np.concatenate([q[1:], q[:1]]) + np.concatenate([q[-1:], q[:-1]]))
        return q

    return f


def chain(k):
    def f(x):
        for _ in range(k):
            x = np.sin(x) * 1.01
        return np.sum(x)

    return f


def test_kernel_source_grows_linearly_with_the_number_of_steps():
    x = np.linspace(0, 1, 64)
    sizes = {
        k: len(tg.make_kernels(tg.jit(shifted_sum(k)), backend="cpu")(x)) for k in (2, 4, 8, 16)
    }
    per_step = [(sizes[b] - sizes[a]) / (b - a) for a, b in ((2, 4), (4, 8), (8, 16))]
    assert max(per_step) < 1.5 * min(per_step), sizes  # was x16 per step
    assert sizes[16] < 40_000, sizes


def test_a_value_read_at_shifted_points_is_stored_once(backend):
    x = np.linspace(0, 1, 16)
    f = shifted_sum(6)
    np.testing.assert_allclose(tg.jit(f, backend=backend)(x), f(x), rtol=1e-13)
    g = tg.grad(lambda q: np.sum(f(q) ** 2), backend=backend)(x)
    g0 = tg.grad(lambda q: np.sum(f(q) ** 2), backend="numpy")(x)
    np.testing.assert_allclose(g, g0, rtol=1e-11)


def test_long_chains_plan_without_deep_recursion():
    """300 steps forward and backward: planned and rendered (not compiled, to keep the suite
    fast); the planner used to recurse once per step and fail near 130."""
    x = np.linspace(0, 1, 8)
    graph = passes.optimize(tg.make_ir(tg.grad(chain(300)), optimize=False)(x))
    stored = [b for b in fusion.plan(graph).buffers if b.role == "temp"]
    assert len(stored) >= 2 * 300 // fusion.MAX_INLINE_DEPTH  # the chain is cut into pieces
    assert "def kernel" in tg.make_kernels(tg.grad(chain(300)), backend="cpu")(x)
    assert tg.grad(chain(300), backend="numpy")(x).shape == (8,)
