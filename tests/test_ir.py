"""The IR: graphs print, compare by content, and the verifier rejects every broken invariant."""

import numpy as np
import pytest

from tracegrad import ir
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
