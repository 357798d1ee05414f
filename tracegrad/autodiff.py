"""Reverse mode as a graph-to-graph transform, and the batching transform jacobians are built on.

`adjoint(graph, wrt, of)` walks the nodes backwards, asks each primitive's adjoint rule for the
cotangents of its inputs and accumulates them with `add`. The rules emit ordinary primitives, so
the result is an ordinary graph: differentiate it again for higher orders.

`jacobian(graph, wrt)` seeds the adjoint with every basis cotangent at once: it batches the
adjoint graph over an identity matrix instead of running it once per output element.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import ir
from . import primitives as P
from .ir import Builder, Graph, Var
from .primitives import Kind, batch_inline


def tap_nodes(graph: Graph) -> list[ir.Node]:
    return [node for node in graph.nodes if node.prim is P.tap_p]


def active_values(graph: Graph, wrt: Sequence[int], taps: bool = False) -> set[Var]:
    """Values that depend differentiably on the inputs at `wrt` (or, with `taps`, on a tap)."""
    active = {graph.inputs[i] for i in wrt}
    for node in graph.nodes:
        if (taps and node.prim is P.tap_p and P.is_float(node.out.dtype)) or (
            node.prim.differentiable
            and P.is_float(node.out.dtype)
            and any(v in active for v in node.inputs)
        ):
            active.add(node.out)
    return active


def backward(
    graph: Graph,
    env: dict[Var, Var],
    wrt: Sequence[int],
    seeds: dict[int, Var],
    taps: bool = False,
    label: str | None = "grad",
) -> tuple[list[Var], list[Var]]:
    """Emit, into the current builder, the cotangents of `graph.inputs[wrt]`.

    `env` maps the graph's values to values of the current builder (for the primal part);
    `seeds` maps output positions to their cotangents there. With `taps`, also returns the
    cotangent flowing into each tap node (in graph order) and emits a hook node for each tap
    that has a hook.
    """
    active = active_values(graph, wrt, taps)
    cts: dict[Var, Var] = {}
    tap_cts: dict[ir.Node, Var] = {}

    # cotangents of `x[index]` wait here until `x`'s own cotangent is needed, so that many
    # small reads of one array (a loop over its elements) become one scatter-add
    slice_cts: dict[Var, list[tuple[tuple, Var, str | None]]] = {}
    # the results of control-flow nodes, packed into one value, read a window per result
    packed = {node.out for node in graph.nodes if node.prim.kind is Kind.CONTROL}

    def accumulate(v: Var, ct: Var) -> None:
        cts[v] = P.add(cts[v], ct) if v in cts else ct

    def settle(v: Var) -> None:
        parts = slice_cts.pop(v, None)
        if parts:
            accumulate(v, sum_of_slices(env[v], parts, v in packed))

    for index, ct in seeds.items():
        if graph.outputs[index] in active:
            accumulate(graph.outputs[index], ct)

    for node in reversed(graph.nodes):
        settle(node.out)
        ct = cts.pop(node.out, None)
        if taps and node.prim is P.tap_p:
            with ir.source_location(node.source):
                ct = P.zeros_like(env[node.out]) if ct is None else ct
                named = P.emit(P.named_p, ct, name=node.params["name"])
                tap_cts[node] = named
                if node.params["hook"] is not None:
                    P.emit(P.hook_p, named, name=node.params["name"], hook=node.params["hook"])
        if ct is None or node.out not in active:
            continue
        if node.prim.adjoint is None:
            raise NotImplementedError(f"no adjoint rule for {node.prim.name}")
        if node.prim is P.slice_p and node.inputs[0] in active:
            slice_cts.setdefault(node.inputs[0], []).append(
                (node.params["index"], ct, _marked(node.source, label))
            )
            continue
        inputs = [env[v] for v in node.inputs]
        with ir.source_location(_marked(node.source, label)):
            input_cts = node.prim.adjoint(ct, env[node.out], *inputs, **node.params)
        for v, v_ct in zip(node.inputs, input_cts, strict=True):
            if v_ct is not None and v in active:
                accumulate(v, v_ct)

    grads = []
    for i in wrt:
        v = graph.inputs[i]
        settle(v)
        grads.append(cts[v] if v in cts else P.zeros_like(env[v]))
    return grads, [tap_cts[node] for node in tap_nodes(graph)] if taps else []


def _marked(source: str | None, label: str | None) -> str | None:
    """The source line of nodes a rule emits: that of the node they differentiate, marked with
    `label` (None: unmarked, for a transpose that undoes a marked transform)."""
    if label is None:
        return source
    return f"{label} {source}" if source else label


def sum_of_slices(x: Var, parts: list[tuple[tuple, Var, str | None]], packed: bool = False) -> Var:
    """The cotangent of `x` from reads `x[index]` with cotangents `ct`: a zero-padded `unslice`
    per read, or, for many small reads, one scatter-add of every read's cotangent at the flat
    positions it came from. A loop reading 64 elements one by one would otherwise sum 64
    unslices into one kernel with 64 operands (minutes to compile); the scatter is one node,
    O(reads + size) to run, and its own adjoint is a gather. Windows that cover half of `x` on
    average (shifted copies of one array: a stencil, a convolution) stay unslices, however many:
    one fused loop sums them point by point, where the scatter-add moves every read element and
    its position (the gradient of a sum of 9 shifted windows of 1e5 points: 0.15 ms, not 9)."""
    joined = _joined_windows(x, parts, packed)
    if joined is not None:
        return joined
    read = sum(ct.size for _, ct, _ in parts)
    dense = len(parts) * x.size <= 2 * read
    if len(parts) < 3 or (len(parts) < 8 and read > x.size // 2) or dense:
        total = None
        for index, ct, source in parts:
            with ir.source_location(source):
                piece = P.emit(P.unslice_p, ct, shape=x.shape, index=index)
            total = piece if total is None else P.add(total, piece)
        return total
    flat = np.arange(x.size, dtype=np.int64).reshape(x.shape)
    positions, values = [], []
    for index, ct, _ in parts:
        window = tuple(slice(a, None if b < 0 else b, c) for a, b, c in index)
        positions.append(flat[window].reshape(-1))
        values.append(P.reshape(ct, (ct.size,)))
    with ir.source_location(parts[0][2]):
        every = P.concatenate(values, 0)
        summed = P.scatter_add(every, P.const(np.concatenate(positions)), 0, (x.size,))
        return P.reshape(summed, x.shape)


# At most this many operands (windows and the zeros between them) join into one concatenate,
# unless the value is a loop's packed results (read a window per result).
MAX_JOINED = 16


def _joined_windows(x: Var, parts: list[tuple[tuple, Var, str | None]], packed: bool) -> Var | None:
    """Reads of disjoint windows of a vector (the results of a loop, read from its packed
    value) with cotangents `ct`: their concatenation, with zeros between (reads of one window
    summed first). A slice of it that reads one window is then that window's cotangent (a
    loop's adjoint reads them so), where a sum of zero-padded unslices would hide it. None for
    other reads."""
    if x.ndim != 1 or len(parts) < 2:
        return None
    by_window: dict[tuple, list[Var]] = {}
    for index, ct, _ in parts:
        by_window.setdefault(index[0], []).append(ct)
    segments, end = [], 0  # a window's cotangents, or the length of zeros before the next
    for start, stop, step in sorted(by_window):
        if step != 1 or start < end or stop < start:
            return None
        segments += ([start - end] if start > end else []) + [by_window[start, stop, step]]
        end = stop
    segments += [x.shape[0] - end] if end < x.shape[0] else []
    if len(segments) > MAX_JOINED and not packed:
        return None
    with ir.source_location(parts[0][2]):
        pieces = []
        for s in segments:
            if isinstance(s, int):
                pieces.append(P.const(0, (s,), x.dtype))
            else:
                total = s[0]
                for ct in s[1:]:
                    total = P.add(total, ct)
                pieces.append(total)
        return P.concatenate(pieces, 0)


def copy_primal(builder: Builder, graph: Graph) -> dict[Var, Var]:
    """Emit `graph`'s nodes into `builder` with its inputs as they are; taps become plain values
    (the differentiation that owns them has consumed them). Returns the value mapping."""
    env: dict[Var, Var] = {v: v for v in graph.inputs}
    for node in graph.nodes:
        if node.prim is P.tap_p:
            env[node.out] = env[node.inputs[0]]
        else:
            inputs = tuple(env[v] for v in node.inputs)
            env[node.out] = builder.add(node.prim, inputs, node.params, node.source)
    return env


def adjoint(
    graph: Graph,
    wrt: Sequence[int],
    of: Sequence[int],
    seed_ones: bool,
    taps: bool = False,
    label: str | None = "grad",
) -> Graph:
    """A graph computing `graph`'s outputs, then the cotangents of the inputs at `wrt`, then (with
    `taps`) the cotangent at each tap node of `graph`, in graph order.

    With `seed_ones`, each output in `of` is seeded with 1 (it must be a scalar: this is `grad`).
    Otherwise the seeds are extra inputs, appended after `graph.inputs` (a vector-Jacobian product).
    """
    builder = Builder()
    builder.inputs = list(graph.inputs)
    env = copy_primal(builder, graph)
    with ir.building(builder):
        seeds = {}
        for index in of:
            out = graph.outputs[index]
            seeds[index] = (
                P.const(1, out.shape, out.dtype)
                if seed_ones
                else builder.new_input(out.shape, out.dtype)
            )
        grads, tap_cts = backward(graph, env, wrt, seeds, taps, label)
    return builder.graph([env[v] for v in graph.outputs] + grads + tap_cts)


def jacobian(graph: Graph, wrt: Sequence[int], n_diff: int | None = None) -> Graph:
    """Outputs: `graph`'s outputs, then d output_j / d input_i for each of the first `n_diff`
    outputs j (default: all), each i in `wrt`.

    Each jacobian has shape `output_j.shape + input_i.shape`.
    """
    builder = Builder()
    builder.inputs = list(graph.inputs)
    env = copy_primal(builder, graph)
    outputs = [env[v] for v in graph.outputs]
    with ir.building(builder):
        for j, out in enumerate(graph.outputs[:n_diff]):
            if not P.is_float(out.dtype):
                raise TypeError(
                    f"jacobian: output {j} has dtype {out.dtype}; only float outputs have derivatives"
                )
            vjp = adjoint(graph, wrt, [j], seed_ones=False)
            m = out.size
            seed = P.const(np.eye(m, dtype=out.dtype).reshape((m,) + out.shape))
            results = batch_inline(
                vjp,
                list(graph.inputs) + [seed],
                [False] * len(graph.inputs) + [True],
                m,
            )
            for (ct, is_batched), i in zip(results[len(graph.outputs) :], wrt, strict=True):
                x = graph.inputs[i]
                if not is_batched:  # a cotangent that does not depend on the seed
                    ct = P.broadcast_to(P.reshape(ct, (1,) + x.shape), (m,) + x.shape)
                outputs.append(P.reshape(ct, out.shape + x.shape))
    return builder.graph(outputs)
