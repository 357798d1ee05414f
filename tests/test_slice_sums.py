"""Sums of many shifted slices of one padded value (a stencil, np.convolve's shifted copies): the
plan stays linear in the number of shifts, forwards and backwards.

Forwards, the padded value is stored once and each shift loads it (a sum's operand is read at
one point per point of its loop, so the values under a reduction are bounded like any others);
backwards, the shifted windows' cotangents are zero-padded `unslice`s summed in one loop, not
a scatter-add moving every element of every window."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import fusion, interpreter, passes
from tracegrad import primitives as P
from tracegrad.fusion import EvalStep, Inside, Load, Select


def shifted_sum(m):
    def f(a, v):
        p = np.concatenate([np.zeros(m - 1), a, np.zeros(m - 1)])
        return np.sum(sum(v[j] * p[j : j + a.size + m - 1] for j in range(m)) ** 2)

    return f


def graph_of(fun, *args):
    return passes.optimize(tg.make_ir(fun, optimize=False)(*args))


def inputs(m, n=40):
    rng = np.random.default_rng(m)
    return rng.standard_normal(n), rng.standard_normal(m)


def count(plan, kind):
    return sum(isinstance(op, kind) for loop in plan.loops for op in loop.ops)


def matches_interpreter(graph, args):
    plan = fusion.plan(graph)
    arrays = [np.asarray(x) for x in args]
    for got, want in zip(
        fusion.evaluate(plan, arrays), interpreter.evaluate(graph, arrays), strict=True
    ):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    return plan


@pytest.mark.parametrize("m", [9, 32])
def test_the_padded_value_is_stored_once_and_loaded_at_each_shift(m):
    a, v = inputs(m)
    plan = matches_interpreter(graph_of(shifted_sum(m), a, v), (a, v))
    # a loop pads `a` into a buffer; the loop that sums reads it m times, with no piece logic:
    # recomputing the concatenate at each shift was 2 selects per shift (18 at m=9, 62 at 32)
    assert len(plan.loops) == 2
    padded, summing = plan.loops
    assert padded.shape == (a.size + 2 * (m - 1),) and summing.reductions
    stored = {s.buffer.name for s in padded.stores}
    loads = [op for op in summing.ops if isinstance(op, Load) and op.buffer.name in stored]
    assert len(loads) == m
    assert not any(isinstance(op, (Select, Inside)) for op in summing.ops)
    assert count(plan, Select) <= 4  # the padding loop's pieces
    # the zeros that pad are a literal: never a buffer of their own
    assert all(loop.shape != (m - 1,) for loop in plan.loops)


@pytest.mark.parametrize("m", [9, 32])
def test_the_gradient_sums_unslices_in_loops_linear_in_the_shifts(m):
    a, v = inputs(m)
    graph = graph_of(tg.grad(shifted_sum(m)), a, v)
    prims = [node.prim for node in graph.nodes]
    assert P.scatter_add_p not in prims and prims.count(P.unslice_p) == m
    plan = matches_interpreter(graph, (a, v))
    assert not [s for s in plan.steps if isinstance(s, EvalStep)]
    assert len(plan.loops) <= 4
    # each shift costs a few ops (its condition, its select, its add, its loads): linear in m
    assert sum(len(loop.ops) for loop in plan.loops) <= 12 * m + 32
    assert count(plan, Select) <= 2 * m + 4


def test_compiled_values_and_gradients_match_the_interpreter_and_finite_differences():
    m = 9
    f = shifted_sum(m)
    a, v = inputs(m, n=25)
    a0, v0 = a.copy(), v.copy()
    want = tg.jit(tg.value_and_grad(f, argnums=(0, 1)), backend="numpy")(a, v)
    got = tg.jit(tg.value_and_grad(f, argnums=(0, 1)), backend="cpu")(a, v)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
    for g, w in zip(got[1], want[1], strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-13)
    assert np.array_equal(a, a0) and np.array_equal(v, v0)
    # the reference itself, against central differences in float64
    h = 1e-6
    for x, g in ((a, want[1][0]), (v, want[1][1])):
        for i in (0, 3, x.size - 1):
            e = np.zeros_like(x)
            e[i] = h
            up = f(*((a + e, v) if x is a else (a, v + e)))
            down = f(*((a - e, v) if x is a else (a, v - e)))
            assert abs((up - down) / (2 * h) - g[i]) <= 1e-6 * max(1.0, abs(g[i]))
