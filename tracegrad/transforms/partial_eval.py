"""Splitting a graph into the part that can run now and the part that waits for more inputs.

`linearize` and `vjp` run the primal computation once, keep what the tangent (or cotangent)
computation needs from it (the residuals), and run only that computation on each later call.
`split(graph, n_known)` does the bookkeeping: the nodes that depend only on the first `n_known`
inputs are *known*; the rest are *unknown*. Constants the unknown part needs are copied into
it rather than stored.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import NamedTuple

from ..ir import Graph, Node, Var


class Split(NamedTuple):  # (not a dataclass: scan imports this, and dataclasses is slow)
    known: Graph  # inputs: the known inputs; outputs: `known_outputs`, then the residuals
    # inputs: the residuals, the shared known inputs, then the unknown inputs; outputs: the rest
    unknown: Graph
    n_known_outputs: int


def split(
    graph: Graph,
    n_known: int,
    known_outputs: int,
    shared: Sequence[int] = (),
    invariant: Sequence[int] = (),
    recompute: Collection = (),
) -> Split:
    """`graph`'s first `known_outputs` outputs must depend only on its first `n_known` inputs;
    the known graph computes them, and the unknown graph computes the remaining outputs.

    The known inputs at `shared` are inputs of the unknown graph too (it reads them as they are,
    not as residuals). Known values made only from constants and the shared inputs at
    `invariant` are recomputed by the unknown graph rather than stored. Nodes of the primitives
    in `recompute` are unknown (the unknown graph recomputes them from residuals)."""
    unknown_vars: set[Var] = set(graph.inputs[n_known:])
    known_nodes: list[Node] = []
    unknown_nodes: list[Node] = []
    producer: dict[Var, Node] = {}
    # known values the unknown graph can make itself: constants, and what invariant inputs give
    copyable: set[Var] = {graph.inputs[i] for i in invariant}
    for node in graph.nodes:
        if node.prim in recompute or any(v in unknown_vars for v in node.inputs):
            unknown_vars.add(node.out)
            unknown_nodes.append(node)
        else:
            known_nodes.append(node)
            producer[node.out] = node
            if not node.prim.effectful and all(v in copyable for v in node.inputs):
                copyable.add(node.out)
    for j, v in enumerate(graph.outputs[:known_outputs]):
        if v in unknown_vars:
            raise ValueError(f"partial evaluation: output {j} depends on the unknown inputs")

    # residuals: known values the unknown part reads (what it can make itself is copied instead)
    passed = {graph.inputs[i] for i in shared}
    residuals: list[Var] = []
    copied: set[Var] = set()
    seen: set[Var] = set()
    needed = [v for node in unknown_nodes for v in node.inputs] + list(
        graph.outputs[known_outputs:]
    )
    while needed:
        v = needed.pop(0)
        if v in unknown_vars or v in seen or v in passed:
            continue
        seen.add(v)
        if v in copyable:
            copied.add(v)
            needed.extend(producer[v].inputs)
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
        for n in [n for n in known_nodes if n.out in copied] + unknown_nodes
    ]
    unknown = Graph(
        tuple(fresh.values())
        + tuple(graph.inputs[i] for i in shared)
        + tuple(graph.inputs[n_known:]),
        tuple(nodes),
        tuple(fresh.get(v, v) for v in graph.outputs[known_outputs:]),
    )
    return Split(known, unknown, known_outputs)
