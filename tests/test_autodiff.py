"""tracegrad/autodiff.py on small hand-built graphs: adjoints, vector-Jacobian products, jacobians
and second derivatives against central finite differences of the interpreter; symbolic zeros;
inputs and values that have no derivative."""

import numpy as np
import pytest

from tracegrad import autodiff, interpreter, ir
from tracegrad import primitives as P
from tracegrad.primitives import Kind, Primitive

from helpers import build, finite_differences, interpret_scalar

F64 = np.float64


def _outputs(graph: ir.Graph, first: int) -> ir.Graph:
    """The same graph with only its outputs from `first` on."""
    return ir.Graph(graph.inputs, graph.nodes, graph.outputs[first:])


def _loss(x, y):  # sum(sin(x) * y + x**2 / y): both inputs matter, through several primitives
    return P.reduce_sum(P.add(P.mul(P.unary(P.sin_p, x), y), P.div(P.mul(x, x), y)))


def _args(rng, *shapes):
    return [rng.uniform(0.5, 1.5, shape) for shape in shapes]


def test_adjoint_computes_the_primal_then_the_gradients(rng):
    graph = build([((3,), F64), ((3,), F64)], _loss)
    adj = autodiff.adjoint(graph, [0, 1], [0], seed_ones=True)
    assert adj.inputs == graph.inputs and len(adj.outputs) == 3
    args = _args(rng, (3,), (3,))
    value, gx, gy = interpreter.evaluate(adj, args)
    np.testing.assert_allclose(value, interpreter.evaluate(graph, args)[0], rtol=1e-15)
    fx, fy = finite_differences(interpret_scalar(graph), args, [0, 1])
    np.testing.assert_allclose(gx, fx, rtol=1e-7)
    np.testing.assert_allclose(gy, fy, rtol=1e-7)
    assert gx.shape == (3,) and gx.dtype == F64


def test_adjoint_of_a_subset_of_inputs(rng):
    graph = build([((3,), F64), ((3,), F64)], _loss)
    adj = autodiff.adjoint(graph, [1], [0], seed_ones=True)
    assert len(adj.outputs) == 2
    args = _args(rng, (3,), (3,))
    (fy,) = finite_differences(interpret_scalar(graph), args, [1])
    np.testing.assert_allclose(interpreter.evaluate(adj, args)[1], fy, rtol=1e-7)


def test_a_vector_jacobian_product_takes_its_seed_as_an_input(rng):
    # f(x) = exp(x) * x[::-1] @ W: a (2,) output of a (3,) input
    w = rng.normal(size=(3, 2))

    def f(x):
        reversed_x = P.slice_(x, ((2, -1, -1),))
        return P.matmul(P.reshape(P.mul(P.unary(P.exp_p, x), reversed_x), (1, 3)), P.const(w))

    graph = build([((3,), F64)], f)
    vjp = autodiff.adjoint(graph, [0], [0], seed_ones=False)
    assert [v.shape for v in vjp.inputs] == [(3,), (1, 2)]  # x, then the seed
    x, seed = rng.normal(size=3), rng.normal(size=(1, 2))
    _, got = interpreter.evaluate(vjp, [x, seed])
    # the directional derivative of seed . f along each basis vector is (J^T seed)_i
    (want,) = finite_differences(
        lambda a: float(np.sum(interpreter.evaluate(graph, a)[0] * seed)), [x], [0]
    )
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_seeds_of_several_outputs_add_up(rng):
    builder = ir.Builder()
    with ir.building(builder):
        x = builder.new_input((3,), F64)
        a = P.reduce_sum(P.unary(P.sin_p, x))
        b = P.reduce_sum(P.mul(x, x))
    graph = builder.graph([a, b])
    adj = autodiff.adjoint(graph, [0], [0, 1], seed_ones=True)
    x0 = rng.normal(size=3)
    np.testing.assert_allclose(interpreter.evaluate(adj, [x0])[2], np.cos(x0) + 2 * x0, rtol=1e-15)


def test_an_input_the_output_does_not_use_gets_a_zero_of_its_type():
    graph = build([((3,), F64), ((2, 2), np.float32)], lambda x, unused: P.reduce_sum(x))
    adj = autodiff.adjoint(graph, [0, 1], [0], seed_ones=True)
    _, gx, gu = interpreter.evaluate(adj, [np.ones(3), np.ones((2, 2), np.float32)])
    np.testing.assert_array_equal(gx, np.ones(3))
    assert gu.shape == (2, 2) and gu.dtype == np.float32 and not gu.any()
    # the zero is one constant: no node of the backward pass touches the unused input
    unused = graph.inputs[1]
    assert not any(unused in node.inputs for node in adj.nodes)


def test_an_output_that_does_not_depend_on_the_inputs_has_zero_gradients():
    graph = build([((3,), F64)], lambda x: P.reduce_sum(P.const(np.arange(3.0))))
    adj = autodiff.adjoint(graph, [0], [0], seed_ones=True)
    value, g = interpreter.evaluate(adj, [np.ones(3)])
    assert value == 3.0 and g.shape == (3,) and not g.any()
    # no adjoint rule ran: the backward pass is constants only (the seed and the zero)
    assert {n.prim for n in adj.nodes[len(graph.nodes) :]} == {P.const_p}


def test_cotangents_stop_at_comparisons_and_integer_values(rng):
    # where(x > 0, x * n, -x) with an integer n: the comparison and n carry no derivative
    def f(x, n):
        return P.reduce_sum(P.where(P.compare(P.gt_p, x, 0.0), P.mul(x, n), P.neg(x)))

    graph = build([((4,), F64), ((4,), np.int64)], f)
    active = autodiff.active_values(graph, [0])
    assert graph.inputs[1] not in active
    compare_node = next(node for node in graph.nodes if node.prim is P.gt_p)
    assert compare_node.out not in active
    adj = autodiff.adjoint(graph, [0, 1], [0], seed_ones=True)
    x, n = np.array([-1.5, 0.5, 2.0, -0.25]), np.array([3, -2, 5, 7])
    _, gx, gn = interpreter.evaluate(adj, [x, n])
    np.testing.assert_array_equal(gx, np.where(x > 0, n, -1.0))
    assert gn.dtype == np.int64 and not gn.any()


def test_an_integer_graph_has_no_active_values():
    graph = build([((3,), np.int64)], lambda n: P.reduce_sum(P.mul(n, n)))
    assert autodiff.active_values(graph, []) == set()
    assert autodiff.active_values(graph, [0]) == {graph.inputs[0]}  # the input only


def test_second_derivatives_come_from_differentiating_the_adjoint(rng):
    graph = build([((3,), F64), ((3,), F64)], _loss)
    grad_x = _outputs(autodiff.adjoint(graph, [0], [0], seed_ones=True), 1)
    # d/dy of sum(grad_x): the mixed second derivatives, summed over x's elements
    summed = build(
        [((3,), F64), ((3,), F64)],
        lambda x, y: P.reduce_sum(ir.inline(ir.current_builder(), grad_x, [x, y])[0]),
    )
    second = autodiff.adjoint(summed, [0, 1], [0], seed_ones=True)
    args = _args(rng, (3,), (3,))
    _, hx, hy = interpreter.evaluate(second, args)
    fx, fy = finite_differences(interpret_scalar(summed), args, [0, 1])
    np.testing.assert_allclose(hx, fx, rtol=1e-6)
    np.testing.assert_allclose(hy, fy, rtol=1e-6)


def test_jacobian_against_finite_differences(rng):
    def f(x, y):  # a (2, 3) output of a (3,) and a (2, 1) input
        return P.mul(P.unary(P.tanh_p, x), P.mul(y, y))

    graph = build([((3,), F64), ((2, 1), F64)], f)
    jac = autodiff.jacobian(graph, [0, 1])
    args = _args(rng, (3,), (2, 1))
    value, jx, jy = interpreter.evaluate(jac, args)
    assert jx.shape == (2, 3, 3) and jy.shape == (2, 3, 2, 1)
    for index in np.ndindex(value.shape):
        element = lambda a, index=index: interpreter.evaluate(graph, a)[0][index]
        fx, fy = finite_differences(element, args, [0, 1])
        np.testing.assert_allclose(jx[index], fx, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(jy[index], fy, rtol=1e-7, atol=1e-9)


def test_jacobian_of_an_input_the_output_ignores_is_zero_and_of_a_linear_map_constant():
    def f(x, y):
        return P.mul(y, 3.0)  # x is not used; y enters linearly

    graph = build([((2,), F64), ((3,), F64)], f)
    jac = autodiff.jacobian(graph, [0, 1])
    _, jx, jy = interpreter.evaluate(jac, [np.ones(2), np.arange(3.0)])
    assert jx.shape == (3, 2) and not jx.any()
    np.testing.assert_array_equal(jy, 3.0 * np.eye(3))


def test_jacobian_of_the_first_outputs_only_and_not_of_integer_ones():
    builder = ir.Builder()
    with ir.building(builder):
        x = builder.new_input((2,), F64)
        y = P.unary(P.exp_p, x)
        count = P.reduce_sum(P.convert(P.compare(P.gt_p, x, 0.0), np.int64))
    graph = builder.graph([y, count])
    jac = autodiff.jacobian(graph, [0], n_diff=1)
    x0 = np.array([0.3, -0.2])
    value, n, jx = interpreter.evaluate(jac, [x0])
    np.testing.assert_array_equal(value, np.exp(x0))
    assert n == 1
    np.testing.assert_allclose(jx, np.diag(np.exp(x0)), rtol=1e-15)
    with pytest.raises(TypeError, match="output 1 has dtype int64; only float outputs"):
        autodiff.jacobian(graph, [0])


def test_adjoint_nodes_carry_the_line_they_differentiate():
    builder = ir.Builder()
    with ir.building(builder):
        x = builder.new_input((3,), F64)
        with ir.source_location("model.py:4"):
            y = P.reduce_sum(P.unary(P.sin_p, x))
    adj = autodiff.adjoint(builder.graph([y]), [0], [0], seed_ones=True)
    backward = adj.nodes[len(builder.nodes) :]
    assert {n.source for n in backward if n.prim is not P.const_p} == {"grad model.py:4"}
    unlabelled = autodiff.adjoint(builder.graph([y]), [0], [0], seed_ones=True, label=None)
    assert {
        n.source for n in unlabelled.nodes[len(builder.nodes) :] if n.prim is not P.const_p
    } == {"model.py:4"}


def test_a_differentiable_primitive_without_an_adjoint_rule_is_named():
    fake = Primitive("fake", Kind.ELEMENTWISE, np.negative, lambda s, d, p: (s[0], d[0]))
    builder = ir.Builder()
    x = builder.new_input((3,), F64)
    out = builder.add(fake, (x,), {}, None)
    with ir.building(builder):
        total = P.reduce_sum(out)
    graph = builder.graph([total])
    with pytest.raises(NotImplementedError, match="no adjoint rule for fake"):
        autodiff.adjoint(graph, [0], [0], seed_ones=True)
    # without a cotangent reaching it, no rule is asked for
    assert len(autodiff.adjoint(graph, [], [0], seed_ones=True).outputs) == 1


def _reads(x, windows):
    """sum over windows of sum(sin(x[window]) * (k + 1)): one slice per window."""
    total = None
    for k, window in enumerate(windows):
        term = P.reduce_sum(P.mul(P.unary(P.sin_p, P.slice_(x, window)), float(k + 1)))
        total = term if total is None else P.add(total, term)
    return total


# single elements, repeated ones, a 2-by-2 block, a reversed row and a strided column
_WINDOWS = [((i, i + 1, 1), (j, j + 1, 1)) for i, j in [(0, 0), (2, 3), (0, 0), (4, 1), (1, 2)]]
_WINDOWS += [((1, 3, 1), (2, 4, 1)), ((3, 4, 1), (4, -1, -1)), ((0, 5, 2), (1, 2, 1))]


@pytest.mark.parametrize("count", [2, len(_WINDOWS)])
def test_many_reads_of_one_array_give_one_scatter_add(rng, count):
    """A loop reading an array element by element: the cotangents of its reads are one scatter-add
    at their flat positions (repeated positions add), not one zero-padded array per read."""
    windows = _WINDOWS[:count]
    graph = build([((5, 5), F64)], lambda x: _reads(x, windows))
    adj = autodiff.adjoint(graph, [0], [0], seed_ones=True)
    prims = [node.prim for node in adj.nodes]
    if count < 3:  # a few reads keep their unslices (fused into the kernel that reads them)
        assert prims.count(P.unslice_p) == count and P.scatter_add_p not in prims
    else:
        assert prims.count(P.scatter_add_p) == 1 and P.unslice_p not in prims
    args = _args(rng, (5, 5))
    (grad,) = interpreter.evaluate(_outputs(adj, 1), args)
    (fd,) = finite_differences(interpret_scalar(graph), args, [0])
    np.testing.assert_allclose(grad, fd, rtol=1e-7, atol=1e-9)
    # and the second derivative: the scatter-add's own adjoint is a gather
    direction = rng.normal(size=(5, 5))
    hvp = build(
        [((5, 5), F64)],
        lambda x: P.reduce_sum(
            P.mul(ir.inline(ir.current_builder(), _outputs(adj, 1), [x])[0], P.const(direction))
        ),
    )
    (second,) = interpreter.evaluate(
        _outputs(autodiff.adjoint(hvp, [0], [0], seed_ones=True), 1), args
    )
    (fd2,) = finite_differences(interpret_scalar(hvp), args, [0])
    np.testing.assert_allclose(second, fd2, rtol=1e-6, atol=1e-8)
