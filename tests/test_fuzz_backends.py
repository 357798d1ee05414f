"""Fuzzing the fused backend: random IR programs run by the reference interpreter and by the cpu
backend must agree, values and gradients, including broadcasting, reductions over every axis
combination, 0-d and empty arrays, slices with any step, and non-contiguous inputs.

The examples are derandomized: the same programs every run, so their kernels come from the disk
cache after the first run."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracegrad import autodiff, interpreter, ir, passes
from tracegrad.runtime import backends
from tracegrad import primitives as P

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

UNARY = [
    ("sin", lambda x: P.unary(P.sin_p, x)),
    ("exp_tanh", lambda x: P.unary(P.exp_p, P.unary(P.tanh_p, x))),
    ("neg", P.neg),
    ("abs", lambda x: P.emit(P.abs_p, x)),
    ("sqrt1p", lambda x: P.unary(P.sqrt_p, P.add(P.mul(x, x), 1.0))),
    ("log1p_sq", lambda x: P.unary(P.log1p_p, P.mul(x, x))),
    ("cube", lambda x: P.integer_pow(x, 3)),
    ("recip", lambda x: P.div(1.0, P.add(P.mul(x, x), 0.5))),
    ("arctan", lambda x: P.unary(P.arctan_p, x)),
    ("cos_half", lambda x: P.mul(P.unary(P.cos_p, x), 0.5)),
]
BINARY = [
    ("add", P.add),
    ("sub", P.sub),
    ("mul", P.mul),
    ("max", P.maximum),
    ("min", P.minimum),
    ("where", lambda a, b: P.where(P.compare(P.gt_p, a, b), a, P.mul(b, 2.0))),
]
REDUCE = [P.reduce_sum_p, P.reduce_max_p, P.reduce_min_p, P.reduce_prod_p]


def _broadcastable(a, b) -> bool:
    try:
        np.broadcast_shapes(a.shape, b.shape)
        return True
    except ValueError:
        return False


def _apply(op, pool: list, draw) -> ir.Var | None:
    kind = op[0]
    x = pool[op[1] % len(pool)]
    if kind == "unary":
        return UNARY[op[2] % len(UNARY)][1](x)
    if kind == "binary":
        y = pool[op[2] % len(pool)]
        return BINARY[op[3] % len(BINARY)][1](x, y) if _broadcastable(x, y) else None
    if kind == "reduce":
        if x.ndim == 0:
            return None
        subsets = [
            s for r in range(1, x.ndim + 1) for s in itertools.combinations(range(x.ndim), r)
        ]
        axes = subsets[op[2] % len(subsets)]
        prim = REDUCE[op[3] % len(REDUCE)]
        if prim in (P.reduce_max_p, P.reduce_min_p) and x.size == 0:
            prim = P.reduce_sum_p
        return P.reduce(prim, x, axes, keepdims=bool(op[4] % 2))
    if kind == "transpose":
        if x.ndim < 2:
            return None
        perms = list(itertools.permutations(range(x.ndim)))
        return P.transpose(x, perms[op[2] % len(perms)])
    if kind == "slice":
        if x.ndim == 0:
            return None
        axis = op[2] % x.ndim
        n = x.shape[axis]
        step = [1, 2, -1, -2][op[3] % 4]
        s = slice(op[4] % (n + 1), None, step) if step > 0 else slice(None, None, step)
        start, stop, step = s.indices(n)
        index = tuple(
            (start, stop, step) if a == axis else (0, d, 1) for a, d in enumerate(x.shape)
        )
        if step < 0 and stop < 0:
            index = tuple((a, -1, c) if c < 0 else (a, b, c) for a, b, c in index)
        return P.slice_(x, index)
    if kind == "reshape":
        if op[2] % 2:
            return P.reshape(x, (x.size,))
        return P.reshape(x, (1,) + x.shape)
    if kind == "concat":
        if x.ndim == 0:
            return None
        axis = op[2] % x.ndim
        return P.concatenate([x, P.mul(x, 2.0)], axis)
    if kind == "matmul":
        y = pool[op[2] % len(pool)]
        if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[0]:
            if x.ndim == 2:
                return P.matmul(x, P.transpose(x))
            return None
        return P.matmul(x, y)
    raise AssertionError(kind)


op_strategy = st.tuples(
    st.sampled_from(
        [
            "unary",
            "unary",
            "binary",
            "binary",
            "reduce",
            "reduce",
            "transpose",
            "slice",
            "slice",
            "reshape",
            "concat",
            "matmul",
            "matmul",
        ]
    ),
    st.integers(0, 50),
    st.integers(0, 50),
    st.integers(0, 50),
    st.integers(0, 50),
)
shape_strategy = st.sampled_from([0, 1, 2, 2, 3, 3]).flatmap(
    lambda rank: st.tuples(*[st.sampled_from([1, 2, 2, 3, 3, 4, 4, 0])] * rank)
)


def _other_shape(shape: tuple[int, ...], code: int) -> tuple[int, ...]:
    """A shape that broadcasts against `shape`: some axes set to 1, some leading ones dropped."""
    out = tuple(1 if (code >> a) & 1 else d for a, d in enumerate(shape))
    return out[(code >> 4) % (len(out) + 1) :]


def build_graph(shape, code, ops, dtype, gradient: bool):
    builder = ir.Builder()
    with ir.building(builder):
        x = builder.new_input(shape, dtype)
        y = builder.new_input(_other_shape(shape, code), dtype)
        pool = [x, y]
        for op in ops:
            v = _apply(op, pool, None)
            if v is not None:
                pool.append(v)
        outs = pool[2:] or [P.add(x, y)]
        outs = [outs[-1], outs[len(outs) // 2]]
        if gradient:
            total = None
            for v in outs:
                term = P.reduce_sum(P.mul(v, P.unary(P.sin_p, P.convert(v, dtype))))
                total = term if total is None else P.add(total, term)
            outs = [total]
    graph = builder.graph(outs)
    if gradient:
        adj = autodiff.adjoint(graph, [0, 1], [0], seed_ones=True)
        graph = ir.Graph(adj.inputs, adj.nodes, adj.outputs)
    return ir.verify(graph)


def _inputs(graph, rng, layout: int):
    arrays = []
    for v in graph.inputs:
        base = rng.uniform(-1.5, 1.5, size=v.shape).astype(v.dtype)
        if layout == 1 and v.ndim >= 1:  # every other element of a bigger array
            big = np.zeros(v.shape[:-1] + (2 * v.shape[-1],), v.dtype)
            big[..., ::2] = base
            base = big[..., ::2]
        elif layout == 2 and v.ndim >= 2:  # Fortran order
            base = np.asfortranarray(base)
        elif layout == 3 and v.ndim >= 1:  # reversed view
            base = np.flip(np.flip(base, -1).copy(), -1)
        arrays.append(base)
    return arrays


def _compare(got, want, dtype):
    assert got.shape == want.shape and got.dtype == want.dtype
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    scale = float(np.max(np.abs(want[np.isfinite(want)]), initial=1.0))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(1.0, scale) * 8)


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(
    shape=shape_strategy,
    code=st.integers(0, 63),
    ops=st.lists(op_strategy, min_size=2, max_size=7),
    dtype=st.sampled_from([np.float64, np.float64, np.float32]),
    gradient=st.booleans(),
    layout=st.integers(0, 3),
    seed=st.integers(0, 1000),
)
def test_random_programs_agree_with_the_interpreter(
    shape, code, ops, dtype, gradient, layout, seed
):
    graph = build_graph(shape, code, ops, np.dtype(dtype), gradient)
    rng = np.random.default_rng(seed)
    args = _inputs(graph, rng, layout)
    want = interpreter.evaluate(graph, args)
    program = backends.get_backend("cpu").compile(passes.optimize(graph))
    got = program(args)
    for g, w in zip(got, want, strict=True):
        _compare(g, w, np.dtype(dtype))
    again = program(args)  # scratch buffers are reused: a second call agrees with the first
    for g, w in zip(again, want, strict=True):
        _compare(g, w, np.dtype(dtype))


@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (0, 2, 3), (1,), (2, 1, 3)])
def test_reductions_over_every_axis_combination(shape):
    builder = ir.Builder()
    with ir.building(builder):
        x = builder.new_input(shape, np.float64)
        outs = []
        for r in range(1, len(shape) + 1):
            for axes in itertools.combinations(range(len(shape)), r):
                e = P.unary(P.exp_p, P.mul(x, 0.5))
                outs.append(P.reduce_sum(e, axes))
                if x.size:
                    outs.append(P.reduce(P.reduce_max_p, x, axes))
                    outs.append(P.reduce(P.reduce_min_p, e, axes, keepdims=True))
                outs.append(P.reduce(P.reduce_prod_p, e, axes))
        outs.append(P.add(x, 1.0))
    graph = ir.verify(builder.graph(outs))
    x = np.random.default_rng(0).uniform(-1, 1, size=shape)
    want = interpreter.evaluate(graph, [x])
    got = backends.get_backend("cpu").compile(passes.optimize(graph))([x])
    for g, w in zip(got, want, strict=True):
        _compare(g, w, np.dtype(np.float64))
