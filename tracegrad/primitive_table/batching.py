"""Batching rules' plumbing (stage: primitives): a value given a leading batch axis, the rule that
batches every operand, and a graph emitted or rebuilt with a batch axis (jacobians, hessians, vmap).
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import ir
from ..ir import Var
from .facets import OfItsEntry, Primitive
from .ops import broadcast_to, emit, reshape

# ----------------------------------------------------------------------------------------------
# Batching rules: batch(size, inputs, batched, **params) -> output with a leading batch axis.


def with_batch_axis(x: Var, is_batched: bool, size: int) -> Var:
    return x if is_batched else broadcast_to(reshape(x, (1,) + x.shape), (size,) + x.shape)


def batch_every_operand(prim: Primitive, graph_param: str | None = None):
    """The batching rule that broadcasts every unbatched operand and applies `prim` to the batch
    (elementwise primitives; stacked-matrix ones). With `graph_param`, the graph the node holds
    under that name (a custom rule, a checkpointed function) is batched with it."""

    def rule(size, inputs, batched, **params):
        xs = [with_batch_axis(x, b, size) for x, b in zip(inputs, batched, strict=True)]
        if graph_param is not None:
            params = {**params, graph_param: batch_graph(params[graph_param], size)}
        return emit(prim, *xs, **params)

    return rule


def every_operand(graph_param: str | None = None) -> OfItsEntry:
    """`batch_every_operand` as the `batch` facet of the entry being declared."""
    return OfItsEntry(lambda prim: batch_every_operand(prim, graph_param))


def batch_inline(graph: ir.Graph, args: Sequence[Var], batched: Sequence[bool], size: int):
    """Emit `graph` into the current builder with a leading batch axis of `size` on some inputs.

    Returns the output values and, for each, whether it carries the batch axis.
    """
    builder = ir.current_builder()
    env: dict[Var, tuple[Var, bool]] = {
        v: (a, b) for v, a, b in zip(graph.inputs, args, batched, strict=True)
    }
    for node in graph.nodes:
        inputs = [env[v] for v in node.inputs]
        flags = tuple(b for _, b in inputs)
        values = tuple(v for v, _ in inputs)
        with ir.source_location(node.source):
            if any(flags):
                env[node.out] = (node.prim.batch(size, values, flags, **node.params), True)
            else:
                env[node.out] = (builder.add(node.prim, values, node.params, node.source), False)
    return [env[v] for v in graph.outputs]


def batch_graph(graph: ir.Graph, size: int) -> ir.Graph:
    """`graph` with a leading batch axis of `size` on every input and every output (the graph a
    node holds, such as a custom rule, when the node itself is batched)."""
    builder = ir.Builder()
    for v in graph.inputs:
        builder.new_input((size,) + v.shape, v.dtype)
    with ir.building(builder):
        outs = batch_inline(graph, builder.inputs, [True] * len(graph.inputs), size)
        outputs = [with_batch_axis(v, b, size) for v, b in outs]
    return builder.graph(outputs)
