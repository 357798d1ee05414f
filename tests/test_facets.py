"""The facets of the primitive table: every primitive carries what its kind needs, and what each
facet claims is true of the primitive's reference implementation.

Fusion, the simplifier and both code generators read these facets instead of naming primitives,
so a facet that is missing or wrong would silently miscompile: these tests check them against
NumPy, per primitive.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import codegen_cpu, fusion, ir
from tracegrad.fusion import render
from tracegrad import primitives as P
from tracegrad.primitives import Kind
from tracegrad.trace import traced_call

PRIMS = sorted(P.PRIMITIVES.values(), key=lambda p: p.name)


def _of_kind(kind: Kind) -> list[P.Primitive]:
    return [p for p in PRIMS if p.kind is kind]


# ----------------------------------------------------------------------------------------------
# Each kind has its facets


@pytest.mark.parametrize("prim", PRIMS, ids=lambda p: p.name)
def test_every_primitive_has_the_facets_of_its_kind(prim):
    assert isinstance(prim.algebra, P.Algebra)
    if prim.kind is Kind.ELEMENTWISE:
        assert prim.scalar is not None, f"{prim.name}: an elementwise primitive needs a template"
        assert prim.batch is not None
        assert prim.monoid is None and prim.index_map is None
    elif prim.kind in (Kind.REDUCE, Kind.SCAN):
        assert isinstance(prim.monoid, P.Monoid), f"{prim.name}: a reduction or scan needs a monoid"
        assert P.MONOIDS[prim.monoid.name] is prim.monoid  # the plan finds it by name
        assert prim.index_map is None
    elif prim.kind is Kind.SHAPE:
        assert isinstance(prim.index_map, P.IndexMap), (
            f"{prim.name}: a shape primitive needs an index map"
        )
        m = prim.index_map
        assert m is P.OWN_STEP or (m.through is None) != (m.pieces is None), prim.name
        assert not m.view or m.through is not None, f"{prim.name}: a view maps indices"
        assert m.inverse is None or P.PRIMITIVES[m.inverse].index_map.view
        assert prim.monoid is None
    else:
        assert prim.monoid is None and prim.index_map is None, prim.name
    if prim.pairing is not None:
        partner = P.PRIMITIVES[prim.pairing.partner]
        assert prim.kind is partner.kind is Kind.ELEMENTWISE


def test_every_kind_that_needs_a_facet_has_primitives():
    """The checks above would pass vacuously for an empty kind."""
    for kind in (Kind.ELEMENTWISE, Kind.REDUCE, Kind.SCAN, Kind.SHAPE):
        assert _of_kind(kind), kind


# ----------------------------------------------------------------------------------------------
# Monoids


DTYPES = [np.float64, np.float32, np.int64, np.int32, np.uint8, np.bool_]


def _step(monoid: P.Monoid):
    """The monoid's step as a Python function of two values (its template, evaluated)."""
    return eval("lambda a, b: " + monoid.combine.format("a", "b"))


# sums and products of bools are taken in integers (the op constructor converts them)
MONOID_DTYPES = [
    (m, d) for m in P.MONOIDS.values() for d in DTYPES if not (m.reassociate and d is np.bool_)
]


@pytest.mark.parametrize(
    ("monoid", "dtype"),
    MONOID_DTYPES,
    ids=[f"{m.name}-{np.dtype(d).name}" for m, d in MONOID_DTYPES],
)
def test_monoid_identity_and_step_agree_with_numpy(monoid, dtype):
    rng = np.random.default_rng(0)
    if np.dtype(dtype) == np.bool_:
        x = rng.random(7) > 0.5
    else:
        x = (rng.random(7) * 5).astype(dtype)
    acc = monoid.accumulator(dtype)
    identity = monoid.identity(acc)
    assert identity.dtype == acc and identity.ndim == 0
    step = _step(monoid)  # the template both generators splice in
    value = identity
    for v in x:
        value = acc.type(step(value, acc.type(v)))
        assert acc.type(step(identity, acc.type(v))) == acc.type(v)  # the identity changes nothing
    expected = monoid.reduce(x.astype(acc))
    np.testing.assert_allclose(np.asarray(value, np.float64), np.float64(expected), rtol=1e-6)


def test_max_and_min_steps_propagate_nan_like_numpy():
    for monoid in (P.MAX, P.MIN):
        step = _step(monoid)
        assert np.isnan(step(np.nan, 1.0)) and np.isnan(step(1.0, np.nan))
        assert np.isnan(monoid.reduce(np.array([1.0, np.nan, 2.0])))


def test_accumulators_widen_like_numpy():
    for monoid in (P.SUM, P.PROD):
        for dtype in (np.float32, np.int8, np.uint16):
            x = np.ones(3, dtype)
            assert monoid.accumulator(dtype) == monoid.reduce(x).dtype or dtype == np.float32
        assert monoid.accumulator(np.float32) == np.float64  # float32 sums accumulate in float64
    assert P.MAX.accumulator(np.float32) == np.float32


@pytest.mark.parametrize("monoid", P.MONOIDS.values(), ids=lambda m: m.name)
def test_cpu_helper_of_each_monoid_computes_its_step(monoid):
    helper = getattr(codegen_cpu, f"_r{monoid.helper}")
    step = _step(monoid)
    for a, b in itertools.product([1.5, -2.0, np.nan], repeat=2):
        got, want = helper(a, b), step(a, b)
        assert got == want or (np.isnan(got) and np.isnan(want))


def test_render_writes_identity_and_step_from_the_monoid():
    assert render.reduction_identity("max", np.float32) == "np.float32(-np.inf)"
    assert render.reduction_identity("min", np.int8, "math") == "np.int8(127)"
    assert render.reduction_identity("sum", np.float64) == "0.0"
    assert render.combine_text("prod", "a", "b") == "a * b"


# ----------------------------------------------------------------------------------------------
# Index maps, checked point by point against the primitive's NumPy implementation


def _node(prim_fn, *shapes):
    builder = ir.Builder()
    for s in shapes:
        builder.new_input(s, np.dtype(np.float64))
    with ir.building(builder):
        out = prim_fn(*builder.inputs)
    graph = builder.graph([out])
    (node,) = [n for n in graph.nodes if n.out is out]
    return node


INDEX_EXAMPLES = {
    "broadcast_to": (lambda x: P.broadcast_to(x, (2, 3, 4)), (3, 1)),
    "transpose": (lambda x: P.transpose(x, (2, 0, 1)), (2, 3, 4)),
    "slice": (lambda x: P.slice_(x, ((1, 4, 2), (3, -1, -1))), (5, 4)),
    "reshape": (lambda x: P.reshape(x, (1, 3, 1, 2)), (3, 2)),
    "unslice": (
        lambda x: P.emit(P.unslice_p, x, shape=(6, 3), index=((4, 0, -1), (0, 3, 1))),
        (4, 3),
    ),
    "concatenate": (lambda a, b: P.concatenate([a, b], 1), (2, 3), (2, 2)),
}


def _constant(offset):
    return fusion.Index(None, 0, offset)


def test_every_index_map_has_an_example():
    mapped = {p.name for p in _of_kind(Kind.SHAPE) if p.index_map is not P.OWN_STEP}
    assert mapped == set(INDEX_EXAMPLES)


@pytest.mark.parametrize("name", sorted(INDEX_EXAMPLES))
def test_index_map_reads_what_numpy_computes(name):
    fn, *shapes = INDEX_EXAMPLES[name]
    node = _node(fn, *shapes)
    m = node.prim.index_map
    assert m.inline(node)
    rng = np.random.default_rng(1)
    inputs = [rng.random(s) for s in shapes]
    expected = node.prim.impl(*inputs, **node.params)
    for point in itertools.product(*[range(d) for d in node.out.shape]):
        index = tuple(_constant(i) for i in point)
        if m.through is not None:
            read = m.through(node, index, _constant)
            got = inputs[0][tuple(ix.offset for ix in read)]
        else:
            got = 0.0 if m.zero_outside else None
            for piece in m.pieces(node, index):
                windows = [ax for ax in piece.axes if isinstance(ax, P.Window)]
                if all(not w.guard or 0 <= w.base.offset < w.length for w in windows):
                    at = tuple(
                        min(max(ax.base.offset, 0), ax.length - 1)
                        if isinstance(ax, P.Window)
                        else ax.offset
                        for ax in piece.axes
                    )
                    got = inputs[piece.input][at]
                    break
        assert got == expected[point], (name, point)


@pytest.mark.parametrize("name", ["broadcast_to", "transpose", "slice"])
def test_strides_make_the_view_numpy_makes(name):
    fn, shape = INDEX_EXAMPLES[name]
    node = _node(fn, shape)
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    strides = tuple(s // x.itemsize for s in x.strides)
    new, offset = node.prim.index_map.strides(node.params, x.shape, strides, node.out.shape)
    view = np.lib.stride_tricks.as_strided(
        x.reshape(-1)[offset:], node.out.shape, tuple(s * x.itemsize for s in new)
    )
    np.testing.assert_array_equal(view, node.prim.impl(x, **node.params))


# ----------------------------------------------------------------------------------------------
# Algebraic identities, checked against the implementation


SAMPLES = np.array([-2.5, -1.0, 0.0, 0.75, 3.0, np.inf, -np.inf])


@pytest.mark.parametrize(
    "prim", [p for p in PRIMS if p.algebra.neutral or p.algebra.absorbing], ids=lambda p: p.name
)
def test_neutral_and_absorbing_elements_hold(prim):
    for k, value in prim.algebra.neutral:
        args = [SAMPLES, SAMPLES]
        args[k] = np.full_like(SAMPLES, value)
        np.testing.assert_array_equal(prim.impl(*args), SAMPLES)
    for k, value in prim.algebra.absorbing:
        args = [SAMPLES, SAMPLES]
        args[k] = np.full_like(SAMPLES, value)
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(prim.impl(*args), np.full_like(SAMPLES, value))


def test_involutions_hold():
    for prim in PRIMS:
        if prim.algebra.involution:
            np.testing.assert_array_equal(prim.impl(prim.impl(SAMPLES)), SAMPLES)


@pytest.mark.parametrize("name", sorted(INDEX_EXAMPLES))
def test_only_primitives_that_move_data_move_a_fill(name):
    fn, *shapes = INDEX_EXAMPLES[name]
    node = _node(fn, *shapes)
    out = node.prim.impl(*[np.full(s, 2.5) for s in shapes], **node.params)
    assert node.prim.algebra.moves_fill == bool(np.all(out == 2.5)) or len(shapes) > 1


def test_a_sort_of_a_fill_is_not_the_fill():
    """argsort is a shape-kind primitive but makes indices: its result of a fill is 0, 1, 2..."""

    def f(x):
        return np.argsort(np.ones_like(x) * 2.5) + x

    x = np.zeros(100)
    np.testing.assert_array_equal(tg.jit(f, backend="numpy")(x), np.arange(100.0))


def test_a_factorisation_of_a_fill_is_computed():
    """np.linalg.inv is a shape-kind primitive that computes: a singular fill raises as in NumPy."""

    def f(x):
        return np.linalg.inv(np.ones_like(x) * 2.0) + x

    with pytest.raises(np.linalg.LinAlgError):
        tg.jit(f, backend="numpy")(np.zeros((9, 9)))


# ----------------------------------------------------------------------------------------------
# Math names and pairings


def test_math_names_come_from_the_templates():
    names = P.math_names()
    assert names["asin"] == "arcsin" and names["acos"] == "arccos" and names["atan"] == "arctan"
    assert "sin" not in names  # the same name in both
    assert P.sin_p.math_call == "sin" and P.add_p.math_call is None


def test_sin_pairs_with_cos_in_one_call_on_the_cpu():
    def f(x):
        return np.sin(x) * np.cos(x)

    source = tg.make_kernels(f, backend="cpu")(np.linspace(0.0, 1.0, 5))
    assert "sincos_f64(" in source
    assert source.count("_vm.sin_f64(") == 0 and source.count("_vm.cos_f64(") == 0


# ----------------------------------------------------------------------------------------------
# Scans: a table entry with a monoid is a fused kernel on every backend


SCAN_CASES = [
    (np.float64, (7,), None),
    (np.float32, (3, 5), 0),
    (np.float64, (3, 4, 2), 1),
    (np.int32, (4, 3), 1),
    (np.float64, (0, 3), 0),
]


@pytest.mark.parametrize(("dtype", "shape", "axis"), SCAN_CASES, ids=str)
def test_cumsum_equals_numpys(dtype, shape, axis, backend):
    rng = np.random.default_rng(2)
    x = (rng.uniform(-3, 3, size=shape) * (10 if np.dtype(dtype).kind == "i" else 1)).astype(dtype)

    def f(x):
        return np.cumsum(x * 2, axis=axis)

    got = tg.jit(f, backend=backend)(x)
    expected = f(x)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)  # the same additions in the same order


def test_a_long_cumsum_runs_in_order_on_the_cpu():
    """Axis 0 of a 1-d scan is the scanned axis: its loop is not split into parallel chunks."""
    x = np.linspace(-1.0, 1.0, 300_000)
    got = tg.jit(lambda x: np.cumsum(x * 3.0), backend="cpu")(x)
    np.testing.assert_array_equal(got, np.cumsum(x * 3.0))


@pytest.mark.parametrize("backend_name", ["cpu", "cuda"])
def test_cumsum_is_one_kernel_with_its_input_computed_inline(backend_name):
    x = np.linspace(0.0, 1.0, 6).reshape(2, 3)
    source = tg.make_kernels(lambda x: np.cumsum(np.sin(x), axis=0), backend=backend_name)(x)
    (loop,) = [line for line in source.splitlines() if "running sum->" in line]
    assert "(sin)" in loop  # sin fused into the scan's loop, not stored first


def test_scan_derivatives_of_order_one_and_two(backend):
    def f(x):
        return np.sum(np.cumsum(x**2, axis=1) * np.cumsum(np.sin(x), axis=0))

    x = np.linspace(-1.0, 1.2, 12).reshape(3, 4)
    eps = 1e-6
    basis = np.eye(12).reshape(12, 3, 4)
    g = tg.grad(f, backend=backend)(x)
    fd = np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in basis]).reshape(3, 4)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6)
    h = tg.hessian(f, backend=backend)(x)
    grad = tg.grad(f, backend="numpy")
    fd2 = np.array([(grad(x + eps * e) - grad(x - eps * e)) / (2 * eps) for e in basis])
    np.testing.assert_allclose(h.reshape(12, 12), fd2.reshape(12, 12), rtol=1e-5, atol=1e-5)


def test_cumsum_batches_over_a_vmap(backend):
    x = np.linspace(-1.0, 1.0, 12).reshape(3, 4)
    got = tg.vmap(lambda r: np.cumsum(r * r), backend=backend)(x)
    np.testing.assert_array_equal(got, np.cumsum(x * x, axis=1))


def test_a_new_scan_is_one_table_entry(backend):
    """A running maximum declared with the MAX monoid and nothing else computes on every backend
    (the planner and both generators know it only through its kind and monoid)."""
    from helpers import build, run

    prim = P.scan_primitive("running_max_for_test", P.MAX, adjoint=None)
    try:
        x = np.array([[0.5, -1.0, 2.0, np.nan, 3.0], [1.0, 4.0, -2.0, 0.0, 5.0]])
        graph = build(
            [(x.shape, np.dtype(np.float64))], lambda v: P.cumulative(prim, P.mul(v, 2.0), 1)
        )
        (got,) = run(graph, [x], backend)
        np.testing.assert_array_equal(got, np.maximum.accumulate(x * 2.0, axis=1))
    finally:
        del P.PRIMITIVES[prim.name]


def test_the_plans_reference_evaluates_a_scan():
    from helpers import build

    x = np.linspace(-1.0, 1.0, 24).reshape(2, 3, 4)
    graph = build(
        [(x.shape, np.dtype(np.float64))], lambda v: P.cumulative(P.cumsum_p, P.mul(v, v), 1)
    )
    plan = fusion.plan(graph)
    (loop,) = plan.loops
    assert loop.shape == (2, 4, 3) and [s.op for s in loop.scans] == ["sum"]  # scanned axis last
    (got,) = fusion.evaluate(plan, [x])
    np.testing.assert_array_equal(got, np.cumsum(x * x, axis=1))


def test_a_new_entry_is_written_with_the_rule_author_surface():
    """An elementwise primitive declared with only the names of `RULE_AUTHOR_SURFACE` traces,
    differentiates to second order, batches and runs on the interpreter; removed afterwards."""
    for name in P.RULE_AUTHOR_SURFACE:
        assert hasattr(P, name), f"primitives.{name} is named in the surface but missing"
    cube_p = P.elementwise_primitive(
        "cube_for_test",
        lambda x: x**3,
        P.unary_rule(lambda x, out: P.mul(P.mul(x, x), 3.0)),
        "({0} * {0} * {0})",
    )
    try:
        assert P.registered("cube_for_test") is cube_p and cube_p.batch is not None

        def f(x):
            return np.sum(traced_call(lambda v: P.emit(cube_p, v), x))

        x = np.array([0.5, -1.0, 2.0])
        np.testing.assert_allclose(tg.grad(f, backend="numpy")(x), 3 * x**2, rtol=1e-14)
        np.testing.assert_allclose(
            tg.hessian(f, backend="numpy")(x), np.diag(6 * x), rtol=1e-14, atol=1e-14
        )
        per_row = tg.vmap(tg.grad(f, backend="numpy"))(np.stack([x, 2 * x]))
        np.testing.assert_allclose(per_row, 3 * np.stack([x, 2 * x]) ** 2, rtol=1e-14)
    finally:
        del P.PRIMITIVES["cube_for_test"]
