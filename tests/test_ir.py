"""The IR: graphs print, compare by content, and the verifier rejects every broken invariant."""

import numpy as np
import pytest

from tracegrad import interpreter, ir
from tracegrad import primitives as P
from tracegrad.ir import Graph, IRError, Node, Var


def _graph():
    builder = ir.Builder()
    with ir.building(builder):
        x = builder.new_input((3,), np.float64)
        y = P.mul(P.unary(P.sin_p, x), x)
    return builder.graph([y]), x, y


def test_a_good_graph_verifies_prints_and_fingerprints():
    graph, _, _ = _graph()
    assert ir.verify(graph) is graph
    text = str(graph)
    assert text.startswith("graph(%0:f64[3])") and "sin %0" in text and "mul" in text
    again, _, _ = _graph()
    assert again.fingerprint() == graph.fingerprint() and again == graph


def test_verifier_rejects_a_use_before_definition():
    graph, _, _ = _graph()
    nodes = tuple(reversed(graph.nodes))
    with pytest.raises(IRError, match="before it is defined"):
        ir.verify(Graph(graph.inputs, nodes, graph.outputs))


def test_verifier_rejects_a_redefinition():
    graph, _, _ = _graph()
    first = graph.nodes[0]
    twice = Node(first.prim, first.inputs, first.params, first.out, first.source)
    with pytest.raises(IRError, match="redefines"):
        ir.verify(Graph(graph.inputs, (first, twice, *graph.nodes[1:]), graph.outputs))


def test_verifier_rejects_a_wrong_declared_type():
    graph, _, _ = _graph()
    node = graph.nodes[0]
    wrong = Node(node.prim, node.inputs, node.params, Var((4,), np.float64), node.source)
    with pytest.raises(IRError, match="declares f64\\[4\\] but sin gives f64\\[3\\]"):
        ir.verify(Graph(graph.inputs, (wrong,), (wrong.out,)))
    wrong_dtype = Node(node.prim, node.inputs, node.params, Var((3,), np.float32), node.source)
    with pytest.raises(IRError, match="declares f32\\[3\\]"):
        ir.verify(Graph(graph.inputs, (wrong_dtype,), (wrong_dtype.out,)))


def test_verifier_rejects_undefined_outputs_and_repeated_inputs():
    graph, x, _ = _graph()
    with pytest.raises(IRError, match="never defined"):
        ir.verify(Graph(graph.inputs, graph.nodes, (Var((3,), np.float64),)))
    with pytest.raises(IRError, match="appears twice"):
        ir.verify(Graph((x, x), graph.nodes, graph.outputs))


def test_inline_checks_the_number_of_arguments():
    graph, _, _ = _graph()
    builder = ir.Builder()
    with pytest.raises(IRError, match="takes 1 inputs, got 2"):
        ir.inline(builder, graph, [builder.new_input((3,), np.float64)] * 2)


# ----------------------------------------------------------------------------------------------
# The builder and the printer


def test_the_builder_records_nodes_with_their_source_and_types():
    builder = ir.Builder()
    with ir.building(builder):
        x = builder.new_input((2, 3), np.float32)
        with ir.source_location("model.py:12"):
            s = P.reduce_sum(x, axes=(1,))
        y = P.mul(s, 2.0)
    assert ir.active_builder() is None
    graph = builder.graph([y, x])
    assert graph.inputs == (x,) and graph.outputs == (y, x)
    reduce_node, const_node, mul_node = graph.nodes
    assert reduce_node.prim is P.reduce_sum_p and reduce_node.source == "model.py:12"
    assert reduce_node.out.shape == (2,) and reduce_node.out.dtype == np.float32
    assert const_node.prim is P.const_p and const_node.source is None
    assert mul_node.inputs == (s, const_node.out) and mul_node.out is y
    assert y.type == "f32[2]" and graph.producers()[y] is mul_node
    assert graph.uses()[s] == [mul_node]


def test_no_builder_outside_building():
    with pytest.raises(RuntimeError, match="no graph is being built"):
        P.unary(P.sin_p, Var((3,), np.float64))


def test_captured_values_become_inputs_after_the_builders_own():
    builder = ir.Builder()
    x = builder.new_input((3,), np.float64)
    outer = object()
    c = builder.capture(7, outer, (3,), np.float64)
    assert builder.capture(7, outer, (3,), np.float64) is c  # captured once
    with ir.building(builder):
        y = P.add(x, c)
    graph = builder.graph([y])
    assert graph.inputs == (x, c) and builder.captures == [(outer, c)]


def test_the_printer_writes_one_typed_line_per_node():
    builder = ir.Builder()
    with ir.building(builder):
        x = builder.new_input((2, 3), np.float64)
        with ir.source_location("model.py:7"):
            s = P.reduce_sum(x, axes=(0,))
        y = P.unary(P.exp_p, s)
    graph = builder.graph([y, s])
    assert str(graph).splitlines() == [
        "graph(%0:f64[2,3]) {",
        f"  {'%1:f64[3] = reduce_sum[axes=(0,)] %0':<52}  # model.py:7",
        "  %2:f64[3] = exp %1",
        "  return %2, %1",
        "}",
    ]
    assert (
        ir.format_graph(graph, sources=False).splitlines()[1]
        == "  %1:f64[3] = reduce_sum[axes=(0,)] %0"
    )
    assert repr(graph) == "<Graph 1 inputs, 2 nodes, 2 outputs>"
    dot = graph.to_dot()
    assert (
        dot.startswith("digraph")
        and f"v{x.id} -> v{s.id};" in dot
        and f"v{s.id} -> v{y.id};" in dot
    )
    assert graph._repr_html_().count("<tr>") == 1 + 1 + 2 + 1  # header, input, nodes, return


def test_the_printer_shows_small_constants_and_summarises_big_ones():
    builder = ir.Builder()
    with ir.building(builder):
        small = P.const(np.array([1.0, 2.0]))
        big = P.const(np.arange(10.0))
        fill = P.const(0.5, (4,), np.float32)
    text = str(builder.graph([small, big, fill]))
    assert "const[shape=(2,), value=[1.,2.]]" in text
    assert "const[shape=(10,), value=<f64[10] array>]" in text
    assert "%2:f32[4] = const[shape=(4,), value=0.5]" in text  # a fill: one number


# ----------------------------------------------------------------------------------------------
# Fingerprints: equal graphs are equal, whatever their Vars' ids and sources


def _scaled(value, dtype=np.float64, source=None, axes=(0,)):
    builder = ir.Builder()
    with ir.building(builder):
        x = builder.new_input((2, 2), dtype)
        with ir.source_location(source):
            y = P.mul(P.reduce_sum(x, axes=axes), P.const(np.array(value, dtype)))
    return builder.graph([y])


def test_fingerprints_compare_structure_not_identity():
    a, b = _scaled([1.0, 2.0]), _scaled([1.0, 2.0], source="elsewhere.py:3")
    assert a.inputs[0] is not b.inputs[0]
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert a != _scaled([1.0, 3.0])  # another constant
    assert a != _scaled([1.0, 2.0], axes=(1,))  # another parameter
    assert a != _scaled([1.0, 2.0], dtype=np.float32)  # another dtype
    builder = ir.Builder()
    x = builder.new_input((2, 2), np.float64)
    assert a != builder.graph([x])


# ----------------------------------------------------------------------------------------------
# Inlining


def test_inline_reemits_the_nodes_on_new_arguments():
    graph, _, _ = _graph()  # sin(x) * x
    builder = ir.Builder()
    with ir.building(builder):
        a = builder.new_input((3,), np.float64)
        doubled = P.add(a, a)
        (out,) = ir.inline(builder, graph, [doubled])
    outer = ir.verify(builder.graph([out]))
    assert [n.prim.name for n in outer.nodes] == ["add", "sin", "mul"]
    assert outer.nodes[1].inputs == (doubled,)
    x = np.array([0.1, -0.7, 2.0])
    (got,) = interpreter.evaluate(outer, [x])
    np.testing.assert_allclose(got, np.sin(2 * x) * (2 * x), rtol=1e-15)


# ----------------------------------------------------------------------------------------------
# More of what the verifier rejects


def test_verifier_rejects_a_node_that_defines_a_graph_input():
    graph, x, _ = _graph()
    node = graph.nodes[0]
    clash = Node(node.prim, node.inputs, node.params, x, node.source)
    with pytest.raises(IRError, match="redefines"):
        ir.verify(Graph(graph.inputs, (clash, *graph.nodes[1:]), graph.outputs))


def test_verifier_rejects_an_input_that_is_not_a_value():
    graph, _, _ = _graph()
    node = graph.nodes[0]
    bad = Node(node.prim, (np.ones(3),), node.params, node.out, node.source)
    with pytest.raises(IRError, match=r"has an input array\(\[1., 1., 1.\]\) that is not a Var"):
        ir.verify(Graph(graph.inputs, (bad, *graph.nodes[1:]), graph.outputs))
    node = graph.nodes[1]
    bad = Node(node.prim, node.inputs, node.params, "%2", node.source)
    with pytest.raises(IRError, match="defines '%2', which is not a Var"):
        ir.verify(Graph(graph.inputs, (graph.nodes[0], bad), graph.outputs))
    with pytest.raises(IRError, match="input 0 is not a Var"):
        ir.verify(Graph((0,), (), ()))


def test_verifier_rejects_the_wrong_number_of_inputs_and_missing_parameters():
    builder = ir.Builder()
    with ir.building(builder):
        a = builder.new_input((2, 3), np.float64)
        b = builder.new_input((3, 4), np.float64)
        prod = P.matmul(a, b)
        total = P.reduce_sum(a, axes=(0, 1))
    good = builder.graph([prod, total])
    matmul_node = next(n for n in good.nodes if n.prim is P.matmul_p)
    one_input = Node(P.matmul_p, (a,), {}, matmul_node.out)
    with pytest.raises(IRError, match="does not fit matmul's shape rule"):
        ir.verify(Graph(good.inputs, (one_input,), (one_input.out,)))
    reduce_node = next(n for n in good.nodes if n.prim is P.reduce_sum_p)
    no_axes = Node(P.reduce_sum_p, reduce_node.inputs, {}, reduce_node.out)
    with pytest.raises(IRError, match="does not fit reduce_sum's shape rule: KeyError"):
        ir.verify(Graph(good.inputs, (no_axes,), (no_axes.out,)))


def test_verifier_rejects_elementwise_operands_of_different_shapes():
    x, y = Var((3,), np.float64), Var((4,), np.float64)
    node = Node(P.add_p, (x, y), {}, Var((3,), np.float64))
    with pytest.raises(IRError, match="one shape"):
        ir.verify(Graph((x, y), (node,), (node.out,)))


def test_verifier_checks_the_graphs_that_nodes_hold():
    from tracegrad.transforms.remat import remat_p

    inner, _, _ = _graph()
    broken = Graph(inner.inputs, tuple(reversed(inner.nodes)), inner.outputs)
    x, value = Var((3,), np.float64), Var((3,), np.float64)
    for held, ok in ((inner, True), (broken, False)):
        node = Node(remat_p, (x, value), {"graph": held, "index": 0}, Var((3,), np.float64))
        graph = Graph((x, value), (node,), (node.out,))
        if ok:
            assert ir.verify(graph) is graph
        else:
            with pytest.raises(
                IRError, match=r"holds a broken graph in 'graph'(.|\n)*before it is"
            ):
                ir.verify(graph)


def test_verifier_reports_the_nodes_around_the_bad_one():
    graph, _, _ = _graph()
    node = graph.nodes[1]
    wrong = Node(node.prim, node.inputs, node.params, Var((5,), np.float64), "model.py:9")
    with pytest.raises(IRError) as info:
        ir.verify(Graph(graph.inputs, (graph.nodes[0], wrong), (wrong.out,)))
    lines = str(info.value).splitlines()
    assert lines[0] == "node 1 declares f64[5] but mul gives f64[3]:"
    assert lines[1].startswith("   %1:f64[3] = sin %0")
    assert lines[2].startswith("-> %2:f64[5] = mul %1 %0") and lines[2].endswith("# model.py:9")
