"""Every algebraic rewrite of the simplifier leaves values and derivatives unchanged.

The simplifier (`passes.simplify`) rewrites nodes: folds constants, drops neutral elements, moves
fills through shape primitives, turns products over an inner dimension of 1 into elementwise
products and thin matrix-vector products into fused sums. Each rewrite is exercised here by a
small program, on random shapes that include axes of size 1, with operands that are inputs or
broadcast fills (the cotangent of a plain sum is one). The derivatives of orders 1-3 are built
without simplification, so each order's graph meets the rewrites afresh; every order must give
the same numbers with and without the simplifier, and must match central differences of the
order below it.
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers import directional, finite_differences, gradient_graph, interpret_scalar
from tracegrad import interpreter, ir, passes
from tracegrad import primitives as P
from tracegrad.primitive_table.facets import NO_ALGEBRA

import tracegrad as tg

F64 = np.dtype(np.float64)


def _fill(value: float, shape) -> ir.Var:
    return P.const(value, shape, F64)


def _sizes(rng, n: int) -> list[int]:
    """n axis lengths, each 1 about half the time."""
    return [int(rng.choice([1, 1, 2, 3])) for _ in range(n)]


# name -> draw(rng) -> (input shapes, body(*inputs) -> Var). Each body is a program in which the
# rewrite it is named for fires on the forward graph or on a derivative's graph; `fill` operands
# are where a broadcast fill meets the rewrite.
def _outer(rng):
    n, m = _sizes(rng, 2)
    if rng.random() < 0.5:  # (n, 1) @ (1, m): a column times a row
        return [(n, 1), (m, 1)], lambda v, u: P.matmul(v, P.transpose(u))
    # a stack of outer products with a broadcast batch axis
    return [(2, n, 1), (1, m)], lambda v, u: P.matmul(v, u)


def _outer_of_itself(rng):
    (n,) = _sizes(rng, 1)
    return [(n, 1)], lambda v: P.matmul(v, P.transpose(v))


def _outer_with_fill(rng):
    n, m = _sizes(rng, 2)
    return [(m, 1)], lambda u: P.matmul(_fill(0.5, (n, 1)), P.transpose(u))


def _matrix_vector(rng):
    m, k = _sizes(rng, 2)
    return [(m, k), (k, 1)], lambda a, w: P.mul(P.matmul(a, w), P.matmul(a, w))


def _matrix_vector_of_transpose(rng):
    m, k = _sizes(rng, 2)
    return [(k, m), (k, 1)], lambda h, w: P.unary(P.sin_p, P.matmul(P.transpose(h), w))


def _matrix_vector_with_fill(rng):
    m, k = _sizes(rng, 2)
    return [(k, 1)], lambda w: P.matmul(_fill(-1.5, (m, k)), P.unary(P.sin_p, w))


def _vector_by_row(rng):
    (m,) = _sizes(rng, 1)
    # (1,) @ (1, m): a vector operand is no outer product (the folding crash of a constant right)
    row = np.cos(np.arange(m).reshape(1, m) * 0.37)
    return [(1,)], lambda x: P.matmul(x, P.const(row))


def _neutral(rng):
    shape = tuple(_sizes(rng, 2))

    def body(x):
        y = P.add(x, _fill(0.0, shape))
        y = P.mul(_fill(1.0, shape), P.sub(y, _fill(0.0, shape)))
        return P.div(P.mul(y, y), _fill(1.0, shape))

    return [shape], body


def _absorbing(rng):
    shape = tuple(_sizes(rng, 2))
    return [shape], lambda x: P.add(P.ct_mul(_fill(0.0, shape), P.unary(P.exp_p, x)), P.mul(x, x))


def _involution(rng):
    shape = tuple(_sizes(rng, 2))
    return [shape], lambda x: P.mul(P.neg(P.neg(x)), P.transpose(P.transpose(x)))


def _reshape_twice(rng):
    a, b = _sizes(rng, 2)
    return [(a, b)], lambda x: P.mul(P.reshape(P.reshape(x, (b, a)), (a, b)), x)


def _moves_fill(rng):
    a, b = _sizes(rng, 2)

    def body(x):
        wide = P.broadcast_to(P.reshape(_fill(2.0, (b,)), (1, b)), (a + 1, b))
        return P.mul(x, P.slice_(P.transpose(P.transpose(wide)), ((1, a + 1, 1), (0, b, 1))))

    return [(a, b)], body


def _linear_of_zero(rng):
    a, b = _sizes(rng, 2)

    def body(x):
        zero = P.reduce_sum(_fill(0.0, (a, b, 2)), (2,))
        return P.add(P.mul(x, x), P.neg(P.convert(zero, F64)))

    return [(a, b)], body


def _reduce_of_fill(rng):
    a, b = _sizes(rng, 2)

    def body(x):
        total = P.reduce_sum(_fill(1.5, (a, b)), (1,))
        top = P.reduce(P.reduce_max_p, _fill(-2.0, (a, b)), (1,))
        prod = P.reduce(P.reduce_prod_p, _fill(1.1, (a, b)), (1,))
        return P.mul(P.reduce_sum(x, (1,)), P.add(P.add(total, top), prod))

    return [(a, b)], body


def _where_known(rng):
    shape = tuple(_sizes(rng, 2))

    def body(x):
        yes = P.compare(P.gt_p, _fill(1.0, shape), _fill(0.0, shape))
        return P.where(yes, P.mul(x, x), P.unary(P.sin_p, x))

    return [shape], body


def _integer_pow_zero(rng):
    shape = tuple(_sizes(rng, 2))
    return [shape], lambda x: P.mul(P.integer_pow(x, 0), P.integer_pow(x, 3))


def _slices_merged(rng):
    (n,) = _sizes(rng, 1)

    def body(x):
        rows = [P.slice_(x, ((k, k + 1, 1), (0, n, 1))) for k in range(3)]
        return P.mul(P.concatenate(rows, 0), x)

    return [(3, n)], body


def _folded(rng):
    shape = tuple(_sizes(rng, 2))
    value = np.linspace(0.5, 1.5, int(np.prod(shape))).reshape(shape)

    def body(x):
        const = P.const(value)
        return P.mul(x, P.unary(P.exp_p, P.mul(const, const)))

    return [shape], body


REWRITES = {
    "outer_product": _outer,
    "outer_product_of_itself": _outer_of_itself,
    "outer_product_with_fill": _outer_with_fill,
    "matrix_vector": _matrix_vector,
    "matrix_vector_of_transpose": _matrix_vector_of_transpose,
    "matrix_vector_with_fill": _matrix_vector_with_fill,
    "vector_by_row": _vector_by_row,
    "neutral": _neutral,
    "absorbing": _absorbing,
    "involution": _involution,
    "reshape_twice": _reshape_twice,
    "moves_fill": _moves_fill,
    "linear_of_zero": _linear_of_zero,
    "reduce_of_fill": _reduce_of_fill,
    "where_known": _where_known,
    "integer_pow_zero": _integer_pow_zero,
    "slices_merged": _slices_merged,
    "folded": _folded,
}
# The table's algebra facets, each by the program above that exercises it.
ALGEBRA_COVERED_BY = {
    "add": "neutral",
    "sub": "neutral",
    "mul": "neutral",
    "div": "neutral",
    "ct_mul": "absorbing",
    "neg": "involution",
    "transpose": "involution",
    "reshape": "reshape_twice",
    "broadcast_to": "moves_fill",
    "slice": "moves_fill",
    "where": "where_known",
    "integer_pow": "integer_pow_zero",
    "concatenate": "slices_merged",
}


def _scalar_graph(shapes, body, weights) -> ir.Graph:
    """sum(body(*inputs) * weights), built without any simplification."""
    builder = ir.Builder()
    with ir.building(builder):
        inputs = [builder.new_input(s, F64) for s in shapes]
        out = body(*inputs)
        total = P.reduce_sum(P.mul(out, P.const(weights(out.shape))))
    return ir.verify(builder.graph([total]))


def _orders(graph: ir.Graph, rng, orders: int):
    """[(scalar graph of order k, its gradient graph)] for k = 0..orders-1: the scalar of order
    k + 1 is its gradient's inner product with fixed random directions."""
    wrt = list(range(len(graph.inputs)))
    out = []
    for _ in range(orders):
        grads = gradient_graph(graph, wrt)
        out.append((graph, grads))
        directions = [rng.normal(size=v.shape) for v in grads.outputs]
        graph = directional(grads, directions)
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("name", sorted(REWRITES))
def test_rewrite_keeps_values_and_derivatives(name, seed):
    rng = np.random.default_rng(seed)
    shapes, body = REWRITES[name](rng)
    graph = _scalar_graph(shapes, body, lambda shape: rng.normal(size=shape))
    args = [rng.uniform(0.5, 1.5, size=s) * rng.choice([-1, 1], size=s) for s in shapes]
    for order, (scalar, grads) in enumerate(_orders(graph, rng, 3), start=1):
        for g in (scalar, grads):
            plain = interpreter.evaluate(g, args)
            simplified = interpreter.evaluate(passes.optimize(g), args)
            for a, b in zip(plain, simplified, strict=True):
                np.testing.assert_allclose(
                    b, a, rtol=1e-12, atol=1e-12, err_msg=f"{name}, order {order}"
                )
        fd = finite_differences(interpret_scalar(scalar), args, range(len(args)))
        for got, want in zip(interpreter.evaluate(grads, args), fd, strict=True):
            np.testing.assert_allclose(
                got, want, rtol=1e-5, atol=1e-6, err_msg=f"{name}, order {order}"
            )


@pytest.mark.parametrize("name", sorted(REWRITES))
def test_each_program_is_rewritten(name):
    """The programs above exercise a rewrite: the simplifier changes each (at some order)."""
    rng = np.random.default_rng(0)
    shapes, body = REWRITES[name](rng)
    graph = _scalar_graph(shapes, body, lambda shape: np.ones(shape))
    changed = False
    for scalar, grads in _orders(graph, rng, 2):
        for g in (scalar, grads):
            changed |= passes.simplify(g).nodes != g.nodes
    assert changed, f"{name}: no rewrite fired"


def test_every_algebra_facet_has_a_program():
    declared = {name for name, p in P.PRIMITIVES.items() if p.algebra is not NO_ALGEBRA}
    assert declared == set(ALGEBRA_COVERED_BY), (
        "primitives whose algebra facet has no program in REWRITES (add one and list it): "
        f"{sorted(declared ^ set(ALGEBRA_COVERED_BY))}"
    )
    assert set(ALGEBRA_COVERED_BY.values()) <= set(REWRITES)


# The programs that found the defects, through the public API, on every backend.
COLUMN = np.array([[0.3], [-1.1], [0.5], [-1.2]])
OTHER = np.array([[1.0], [2.0], [3.0]])


def test_gradient_of_a_sum_of_an_outer_product_of_columns(backend):
    dv, du = tg.grad(lambda v, u: np.sum(v @ u.T), argnums=(0, 1), backend=backend)(COLUMN, OTHER)
    np.testing.assert_allclose(dv, np.full((4, 1), OTHER.sum()), rtol=1e-15)
    np.testing.assert_allclose(du, np.full((3, 1), COLUMN.sum()), rtol=1e-15)
    gram = tg.grad(lambda v: np.sum(v @ v.T), backend=backend)(COLUMN)
    np.testing.assert_allclose(gram, np.full((4, 1), 2 * COLUMN.sum()), rtol=1e-15)
    hess = tg.hessian(lambda v: np.sum(v @ v.T), backend=backend)(COLUMN)
    np.testing.assert_allclose(hess.reshape(4, 4), np.full((4, 4), 2.0), rtol=1e-15)


def test_gradient_of_a_vector_times_a_constant_row(backend):
    row = np.cos(np.arange(3).reshape(1, 3) * 0.37)
    g = tg.grad(lambda x: np.sum(np.ravel(x) @ row), backend=backend)(np.ones(1))
    np.testing.assert_allclose(g, [row.sum()], rtol=1e-15)
    g = tg.grad(lambda x: np.sum(np.swapaxes(x, 0, -1) @ row), backend=backend)(np.ones((1, 3)))
    np.testing.assert_allclose(g, np.full((1, 3), row.sum()), rtol=1e-15)
