"""The fusion plan: how graphs are partitioned, and that a plan computes what its graph computes.

These tests need no compiler: `fusion.evaluate` runs a plan with NumPy, loop by loop, and is
compared with the reference interpreter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import fusion, interpreter, passes
from tracegrad.transforms import sparsity
from tracegrad.fusion import FusedLoop, Index, Load, MatmulStep, ViewStep
from tracegrad.base.tree import flatten


def graph_of(fun, *args):
    return passes.optimize(tg.make_ir(fun, optimize=False)(*args))


def plan_of(fun, *args):
    return fusion.plan(graph_of(fun, *args))


def agrees(fun, *args):
    graph = graph_of(fun, *args)
    arrays = [np.asarray(a) for a in flatten(args)[0]]
    plan = fusion.plan(graph)
    for got, want in zip(
        fusion.evaluate(plan, arrays), interpreter.evaluate(graph, arrays), strict=True
    ):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)
    return plan


def w1(x):
    return np.sum(np.sin(x) * np.exp(-x * x) + np.tanh(x) * x**3)


def mlp(params, X, Y):
    W1, b1, W2, b2 = params
    return np.mean((np.tanh(X @ W1 + b1) @ W2 + b2 - Y) ** 2)


def w3(x):
    return np.sum(x**3) + np.sum(x[:-1] * x[1:])


rng = np.random.default_rng(0)
X = rng.standard_normal((8, 4))
PARAMS = (
    rng.standard_normal((4, 6)),
    rng.standard_normal(6),
    rng.standard_normal((6, 3)),
    rng.standard_normal(3),
)
Y = rng.standard_normal((8, 3))


def test_value_and_gradient_come_out_of_one_pass():
    plan = agrees(tg.value_and_grad(w1), rng.standard_normal(100))
    (loop,) = plan.steps
    assert isinstance(loop, FusedLoop) and loop.shape == (100,)
    assert [b.role for b in loop.reads] == ["input"]
    assert len(loop.stores) == 1 and len(loop.reductions) == 1  # the gradient and the value
    loads = [op for op in loop.ops if isinstance(op, Load)]
    assert len(loads) == 1  # x is read once


def test_sum_of_a_function_writes_no_temporary():
    plan = agrees(tg.jit(lambda x: np.sum(np.exp(np.sin(x)) * 2.0)), rng.standard_normal((7, 5)))
    (loop,) = plan.steps
    assert loop.stores == [] and loop.reductions[0].axes == (0, 1)
    assert [b.role for b in plan.buffers] == ["input", "output"]


def test_matmuls_are_steps_with_elementwise_work_fused_around_them():
    plan = agrees(tg.grad(mlp), PARAMS, X, Y)
    kinds = [type(s).__name__ for s in plan.steps if not isinstance(s, ViewStep)]
    assert kinds.count("MatmulStep") == 5
    assert kinds.count("FusedLoop") == 3  # tanh(. + b1); the loss and its cotangent; tanh's adjoint
    loops = plan.loops
    assert sorted(len(lp.reductions) for lp in loops) == [0, 1, 1]
    for step in plan.steps:
        if isinstance(step, MatmulStep):
            assert step.a.role != "const" and step.b.role != "const"


def test_transposed_matmul_operands_are_views():
    plan = plan_of(tg.grad(mlp), PARAMS, X, Y)
    views = [s for s in plan.steps if isinstance(s, ViewStep)]
    assert views and all(v.node.prim.name == "transpose" for v in views)


def test_hessian_with_slices_is_one_loop():
    x = rng.standard_normal(100)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(sparsity, "ENABLED", False)  # one seed per row: the whole Hessian in one loop
        plan = agrees(tg.hessian(w3), x)
    assert len(plan.steps) == 1
    # compressed seeds (a tridiagonal Hessian: 3 colours): one loop over the 3 compressed rows
    # and one fused fill of the 100 x 100 result
    plan = agrees(tg.hessian(w3), x)
    assert [s.shape for s in plan.steps] == [(3, 100), (100, 100)]


def test_cheap_broadcast_values_are_recomputed_expensive_ones_stored():
    x, y = rng.standard_normal(6), rng.standard_normal((5, 6))
    cheap = agrees(tg.jit(lambda x, y: (x * 2.0 + 1.0) * y), x, y)
    assert len(cheap.loops) == 1
    costly = agrees(tg.jit(lambda x, y: np.exp(np.sin(x)) * y), x, y)
    assert [lp.shape for lp in costly.loops] == [(6,), (5, 6)]


def test_values_read_at_other_points_come_from_an_earlier_loop():
    plan = agrees(tg.jit(lambda x: (np.sin(x), np.sin(x).T * 2.0)), rng.standard_normal((3, 4)))
    assert len(plan.loops) == 2
    first, second = plan.loops
    assert first.shape == (3, 4) and second.shape == (4, 3)


def test_loop_invariant_values_have_low_depth():
    plan = plan_of(
        tg.jit(lambda x, y: np.exp(x)[:, None] * y),
        rng.standard_normal(5),
        rng.standard_normal((5, 7)),
    )
    loop = plan.loops[-1]
    depth = {op.id: op.depth for op in loop.ops}
    loads = [op for op in loop.ops if isinstance(op, Load)]
    assert sorted(depth[op.id] for op in loads) == [1, 2]


def test_index_composition():
    assert Index("i0").shifted(-1, 4) == Index("i0", -1, 4)
    assert Index("i1", 2, 1).shifted(3, 1) == Index("i1", 6, 4)
    assert Index(None, 0, 2).shifted(2, 1) == Index(None, 0, 5)
    assert str(Index("i0", -1, 4)) == "-1*i0+4"
    plan = plan_of(tg.jit(lambda x: x[::-1, 2:] * 1.5), np.ones((4, 6)))
    (load,) = [op for op in plan.loops[0].ops if isinstance(op, Load)]
    assert load.index == (Index("i0", -1, 3), Index("i1", 1, 2))


@pytest.mark.parametrize(
    "fun, shapes",
    [
        (lambda x: np.concatenate([x, 2 * x, x[:1]], axis=0) + 1.0, [(3, 2)]),
        (lambda x: np.concatenate([np.sin(x), x], axis=1).sum(0), [(3, 2)]),
        (lambda x: (x.reshape(6) * 2.0, x.reshape(3, 2).T + 1.0), [(2, 3)]),
        (lambda x, y: (x[:, None] - y[None, :]) ** 2, [(4,), (5,)]),
        (lambda x: (x.sum(axis=(0, 2)), x.max(axis=1), x.min(), x.prod(axis=0)), [(2, 3, 4)]),
        (lambda x: np.where(x > 0, x, 0.0).mean(axis=-1, keepdims=True) * x, [(3, 5)]),
        (lambda x: x[1:3, ::2].T @ x[:2, :3], [(4, 5)]),
        (lambda x: (np.zeros((2, 2)), x * 0.0 + 3.0, x), [(2, 2)]),
        (lambda x: np.sum(x[::-2] * 1.0), [(7,)]),
        (lambda x: x.astype(np.float32) * np.float32(2), [(3,)]),
        (lambda x: np.sum(x.astype(np.int64) * 3), [(4,)]),
        (lambda x: np.sum(x), [(0,)]),
        (lambda x: x.sum(axis=0), [(0, 3)]),
    ],
)
def test_plans_compute_what_graphs_compute(fun, shapes):
    args = [rng.standard_normal(s) for s in shapes]
    agrees(tg.jit(fun), *args)


@pytest.mark.parametrize("kind", ["grad", "hessian"])
def test_plans_of_derivatives(kind):
    def f(x):
        return (
            np.sum(np.tanh(x @ x.T) * np.cos(x[:, :1]))
            + np.max(x)
            + np.sum(x[1:] / (1 + x[:-1] ** 2))
        )

    transform = tg.grad(f) if kind == "grad" else tg.hessian(f)
    agrees(transform, rng.standard_normal((3, 4)))


def test_unsupported_nodes_fall_back_to_eval_steps():
    graph = graph_of(tg.jit(lambda x: np.sin(x) * 2.0), np.ones(3))
    plan = fusion.plan(graph, supports=lambda node: node.prim.name != "sin")
    assert [type(s).__name__ for s in plan.steps] == ["EvalStep", "FusedLoop"]
    out = fusion.evaluate(plan, [np.arange(3.0)])
    np.testing.assert_allclose(out[0], np.sin(np.arange(3.0)) * 2)


def test_plan_description_is_readable():
    text = plan_of(tg.value_and_grad(w1), np.ones(10)).describe()
    assert text.startswith("loop k0 [10]: reads [a0]") and "sin" in text and "sum[0]" in text


def test_fusion_is_backend_neutral():
    for path in Path(fusion.__file__).parent.glob("*.py"):
        source = path.read_text(encoding="utf-8")
        assert "import numba" not in source and "from numba" not in source, path.name
    ops = plan_of(tg.jit(np.sin), np.ones(2)).loops[0].ops
    assert [type(op).__name__ for op in ops] == ["Load", "Compute"] and ops[
        1
    ].node.prim.name == "sin"


def test_identity_seeds_can_be_computed_instead_of_read(monkeypatch):
    monkeypatch.setattr(sparsity, "ENABLED", False)  # the dense Hessian: one identity seed
    graph = graph_of(tg.hessian(w3), rng.standard_normal(50))
    read = fusion.plan(graph)
    computed = fusion.plan(graph, computed_identity=True)
    assert any(b.role == "const" for b in read.buffers)
    assert not any(b.role == "const" for b in computed.buffers)
    assert any(isinstance(op, fusion.Equal) for op in computed.loops[0].ops)
    x = [rng.standard_normal(50)]
    np.testing.assert_array_equal(fusion.evaluate(computed, x)[0], fusion.evaluate(read, x)[0])
    eye = tg.jit(lambda x: np.eye(4) * x)
    plan = fusion.plan(graph_of(eye, np.ones(4)), computed_identity=True)
    np.testing.assert_array_equal(
        fusion.evaluate(plan, [np.arange(4.0)])[0], np.eye(4) * np.arange(4.0)
    )


def test_long_elementwise_chains_are_split_into_loops_of_bounded_depth(monkeypatch):
    """A chain of 3000 elementwise nodes plans (the loop builder recurses along inlined chains:
    it once hit Python's recursion limit at about 250) and computes what the graph computes.
    (Left unrolled: rolling would make the chain one loop node.)"""
    from tracegrad.transforms import rolling

    monkeypatch.setattr(rolling, "MIN_REPEATS", 10**9)

    def deep(x):
        for _ in range(1500):
            x = x * 1.0001 + 0.001
        return x

    plan = agrees(deep, np.linspace(-1.0, 1.0, 5))
    stored = sum(b.role == "temp" for b in plan.buffers)  # where the chain is cut
    assert 3000 // fusion.MAX_INLINE_DEPTH - 1 <= stored <= 2 * 3000 // fusion.MAX_INLINE_DEPTH
