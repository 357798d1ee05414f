"""Long fused loops split into loops of bounded length (fusion/split.py) compute what one loop
computes. Every program here is compiled with the bound forced down to a few ops, so that every
kind of value crosses between parts: computed at each point, depending on the outer axes only,
reduced, stored at the loop's own point or broadcast, read by a later part or by none."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import codegen_cpu
from tracegrad.fusion import split

RNG = np.random.default_rng(7)
A = RNG.standard_normal((5, 6))
B = RNG.standard_normal((5, 1))
V = RNG.standard_normal(6)


def _chain(x):
    for k in range(12):
        x = np.sin(x) * 0.9 + 0.05 * k if k % 3 else np.tanh(x * 1.1)
    return np.sum(x)


def _broadcast_rows(x):
    row = np.cos(x[:, :1]) * 2.0 + 1.0  # depends on the outer axis only
    y = np.exp(-x * x) * row + np.sin(row * x)
    return np.sum(y * y) + np.sum(np.tanh(y), axis=1) @ np.arange(5.0)


def _reductions(x):
    m = np.max(x, axis=1, keepdims=True)
    e = np.exp(x - m)
    s = e / np.sum(e, axis=1, keepdims=True)
    return np.sum(s * np.log(s + 1.0)) + np.mean(np.sqrt(np.abs(x) + 1.0))


def _vector(v):
    y = v
    for k in range(8):
        y = np.sin(y) + 0.5 * np.cos(3.0 * y) * v if k % 3 else np.arctan(y * v)
    return np.sum(y**2)


PROGRAMS = {
    "chain": (_chain, A),
    "broadcast rows": (_broadcast_rows, A + B),
    "reductions": (_reductions, A),
    "vector": (_vector, V),
}


@pytest.fixture
def tiny_parts(monkeypatch):
    monkeypatch.setattr(split, "MAX_LOOP_OPS", 5)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_split_loops_compute_the_interpreters_values_and_gradients(name, tiny_parts):
    f, x = PROGRAMS[name]
    x_before = x.copy()
    value, grad = tg.value_and_grad(f, backend="cpu")(x)
    ref_value, ref_grad = tg.value_and_grad(f, backend="numpy")(x)
    np.testing.assert_allclose(value, ref_value, rtol=1e-13)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(x, x_before)
    # and the program did run split loops
    graph = tg.make_ir(tg.value_and_grad(f))(x)
    steps = codegen_cpu.build(graph, load=False).plan.steps
    assert any(getattr(s, "name", "").endswith("_1") for s in steps)


def test_a_long_loop_is_split_and_a_short_one_is_not(tiny_parts):
    graph = tg.make_ir(tg.grad(_chain))(A)
    many = codegen_cpu.build(graph, load=False)
    loops = [s for s in many.plan.steps if type(s).__name__ == "FusedLoop"]
    assert len(loops) > 3 and all(len(s.ops) <= 5 * 4 for s in loops)
    kept = split.split_loops(many.plan, max_ops=10**9)
    assert kept is many.plan
