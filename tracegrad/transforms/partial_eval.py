"""Splitting a graph into the part that can run now and the part that waits for more inputs.

`linearize` and `vjp` run the primal computation once, keep what the tangent (or cotangent)
computation needs from it (the residuals), and run only that computation on each later call.
`split(graph, n_known)` does the bookkeeping: the nodes that depend only on the first `n_known`
inputs are *known*; the rest are *unknown*. Constants the unknown part needs are copied into
it rather than stored.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import primitives as P
from ..ir import Graph, Node, Var


@dataclass(frozen=True)
class Split:
    known: Graph  # inputs: the known inputs; outputs: `known_outputs`, then the residuals
    unknown: Graph  # inputs: the residuals, then the unknown inputs; outputs: the rest
    n_known_outputs: int


def split(graph: Graph, n_known: int, known_outputs: int) -> Split:
    """`graph`'s first `known_outputs` outputs must depend only on its first `n_known` inputs;
    the known graph computes them, and the unknown graph computes the remaining outputs."""
    unknown_vars: set[Var] = set(graph.inputs[n_known:])
    known_nodes: list[Node] = []
    unknown_nodes: list[Node] = []
    consts: dict[Var, Node] = {}
    for node in graph.nodes:
        if any(v in unknown_vars for v in node.inputs):
            unknown_vars.add(node.out)
            unknown_nodes.append(node)
        else:
            known_nodes.append(node)
            if node.prim is P.const_p:
                consts[node.out] = node
    for j, v in enumerate(graph.outputs[:known_outputs]):
        if v in unknown_vars:
            raise ValueError(f"partial evaluation: output {j} depends on the unknown inputs")

    # residuals: known values the unknown part reads (constants are copied instead)
    residuals: list[Var] = []
    copied: list[Node] = []
    seen: set[Var] = set()
    needed = [v for node in unknown_nodes for v in node.inputs] + list(
        graph.outputs[known_outputs:]
    )
    for v in needed:
        if v in unknown_vars or v in seen:
            continue
        seen.add(v)
        if v in consts:
            copied.append(consts[v])
        else:
            residuals.append(v)

    known = Graph(
        graph.inputs[:n_known],
        tuple(known_nodes),
        tuple(graph.outputs[:known_outputs]) + tuple(residuals),
    )
    # the unknown graph reads each residual through an input of its own (a residual may be one of
    # the known inputs, and a graph defines each value once)
    fresh = {v: Var(v.shape, v.dtype) for v in residuals}
    nodes = [
        Node(n.prim, tuple(fresh.get(v, v) for v in n.inputs), n.params, n.out, n.source)
        for n in copied + unknown_nodes
    ]
    unknown = Graph(
        tuple(fresh.values()) + tuple(graph.inputs[n_known:]),
        tuple(nodes),
        tuple(fresh.get(v, v) for v in graph.outputs[known_outputs:]),
    )
    return Split(known, unknown, known_outputs)
