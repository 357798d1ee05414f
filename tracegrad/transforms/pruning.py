"""Control-flow nodes pruned to what their readers use (run by `passes.optimize`).

A loop node's packed result (see packing.py) is read through slices. Where every reader is such a
slice, the pieces no slice touches are dead, and with them the body outputs that make them; a
carry stays only while its final value or its saved rows are read, or a kept output of the body
reads it (a fixed point over the carries). Inputs the pruned body no longer reads are dropped,
and an input that is a fill constant (a zero cotangent, mostly) moves into the body as a constant
that the body's simplification folds. The graphs a node holds are optimised too, by the
`optimize` the caller passes in.

Differentiating a loop makes its result wider than what the next derivative reads: the reverse
scan accumulates the cotangent of every loop-invariant input and every carry, a forward scan
saves every carry. Without this pass each order differentiated the previous order's dead
carries and the programs grew by about 4x per order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import primitives as P
from ..ir import Graph, Node, Var
from ..primitives import Kind
from .loops import cond_p, loop_p, while_count_p, while_p
from .packing import Aval, avals, pack_dtype, pack_size
from .scan import scan_layout, scan_p


def prune_loops(graph: Graph, optimize: Callable[[Graph], Graph], key: object) -> Graph:
    """`graph` with its control-flow nodes pruned and their bodies optimised (by `optimize`,
    whose results are kept on each body under `key`); `graph` itself when nothing changed."""
    if not any(node.prim.kind is Kind.CONTROL for node in graph.nodes):
        return graph
    uses = graph.uses()
    outputs = set(graph.outputs)
    fills = {node.out: node for node in graph.nodes if _is_fill(node)}
    moved: dict[Var, tuple[Var, dict[int, int], list[Aval], list[Aval]]] = {}
    nodes: list[Node] = []
    changed = False
    for node in graph.nodes:
        if node.prim is P.slice_p and node.inputs[0] in moved:
            nodes.extend(_moved_slice(node, *moved[node.inputs[0]]))
            changed = True
            continue
        if node.prim.kind is not Kind.CONTROL:
            nodes.append(node)
            continue
        held = _optimized_params(node.params, optimize, key)
        if held is not node.params:
            node = Node(node.prim, node.inputs, held, node.out, node.source)
            changed = True
        rule = _RULES.get(node.prim)
        pruned = None if rule is None else rule(node, _live(node, uses, outputs), fills)
        if pruned is None:
            nodes.append(node)
            continue
        inputs, params, piece_map = pruned
        params = _optimized_params(params, optimize, key)
        old_layout, new_layout = _layout(node.prim, node.params), _layout(node.prim, params)
        if new_layout == old_layout:
            out = node.out
        else:
            out = Var((pack_size(new_layout),), pack_dtype(new_layout))
            moved[node.out] = (out, piece_map, old_layout, new_layout)
        nodes.append(Node(node.prim, tuple(inputs), params, out, node.source))
        changed = True
    if not changed:
        return graph
    return Graph(graph.inputs, tuple(nodes), graph.outputs)


# ----------------------------------------------------------------------------------------------
# what is read of a node's result


def _layout(prim, params: dict) -> list[Aval]:
    if prim is scan_p:
        return scan_layout(params)
    if prim is cond_p:
        return avals(params["branches"][0].outputs)
    if prim is while_count_p:
        return []
    return avals(params["body"].outputs)


def _pieces(layout: Sequence[Aval]) -> list[tuple[int, int]]:
    """(offset, size) of each piece of a packed layout."""
    out, offset = [], 0
    for shape, _ in layout:
        n = int(np.prod(shape, dtype=np.int64))
        out.append((offset, n))
        offset += n
    return out


def _window(node: Node) -> tuple[int, int] | None:
    """[start, stop) of a slice of a packed (1-D) result, or None for another kind of read."""
    if node.prim is not P.slice_p:
        return None
    ((start, stop, step),) = node.params["index"]
    if step != 1 or not 0 <= start <= stop <= node.inputs[0].shape[0]:
        return None
    return start, stop


def _live(node: Node, uses: dict, outputs: set) -> list[bool]:
    """Which pieces of the node's packed result some reader needs (all, for a reader that is not
    a slice of it, or for a result the graph returns)."""
    layout = _layout(node.prim, node.params)
    readers = uses.get(node.out, [])
    windows = [_window(r) for r in readers]
    if node.out in outputs or node.prim is while_count_p or any(w is None for w in windows):
        return [True] * len(layout)
    return [
        any(start < offset + n and offset < stop for start, stop in windows)
        for offset, n in _pieces(layout)
    ]


def _moved_slice(node: Node, out: Var, piece_map, old_layout, new_layout) -> list[Node]:
    """A slice of a pruned node's old result, reading the same elements of the new one (and
    converted to the old packed dtype where that changed): one slice where they lie in one
    window of it, else the concatenation of one slice per piece."""
    start, stop = _window(node)
    old, new = _pieces(old_layout), _pieces(new_layout)
    windows: list[list[int]] = []
    for k, (o, n) in enumerate(old):
        a, b = max(start, o), min(stop, o + n)
        if a >= b:
            continue
        if isinstance(piece_map[k], Node):  # a fill, not stacked
            windows.append([piece_map[k], b - a])
            continue
        begin = a - o + new[piece_map[k]][0]
        if windows and not isinstance(windows[-1][0], Node) and windows[-1][1] == begin:
            windows[-1][1] = begin + b - a
        else:
            windows.append([begin, begin + b - a])
    windows = windows or [[0, 0]]
    nodes: list[Node] = []
    parts = []
    for a, b in windows:
        if isinstance(a, Node):
            part = Var((b,), out.dtype)
            params = {"value": np.asarray(a.params["value"], out.dtype), "shape": (b,)}
            nodes.append(Node(P.const_p, (), params, part, node.source))
        else:
            part = Var((b - a,), out.dtype)
            nodes.append(Node(P.slice_p, (out,), {"index": ((a, b, 1),)}, part, node.source))
        parts.append(part)
    if len(parts) > 1:
        joined = Var(node.out.shape, out.dtype)
        nodes.append(Node(P.concatenate_p, tuple(parts), {"axis": 0}, joined, node.source))
        parts = [joined]
    if out.dtype == node.out.dtype:
        nodes[-1] = Node(nodes[-1].prim, nodes[-1].inputs, nodes[-1].params, node.out, node.source)
    else:
        nodes.append(
            Node(P.convert_p, (parts[0],), {"dtype": node.out.dtype}, node.out, node.source)
        )
    return nodes


# ----------------------------------------------------------------------------------------------
# graphs


def _optimized_params(params: dict, optimize: Callable[[Graph], Graph], key: object) -> dict:
    """`params` with every graph it holds optimised (the same dict if none changed)."""
    new = {}
    for name, value in params.items():
        if isinstance(value, Graph):
            new[name] = _optimized(value, optimize, key)
        elif isinstance(value, tuple) and value and all(isinstance(g, Graph) for g in value):
            new[name] = tuple(_optimized(g, optimize, key) for g in value)
    if all(new[k] is params[k] for k in new):
        return params
    return {**params, **new}


def _optimized(graph: Graph, optimize: Callable[[Graph], Graph], key: object) -> Graph:
    # kept on the graph: a body nested k deep is optimised once, not once per round per level
    if key not in graph._cache:
        result = optimize(graph)
        graph._cache[key] = result
        result._cache[key] = result
    return graph._cache[key]


def _reads(graph: Graph, outputs: Sequence[int]) -> set[int]:
    """Positions of the inputs that the outputs at `outputs` depend on."""
    _, need = graph.live(graph.outputs[i] for i in outputs)
    return {i for i, v in enumerate(graph.inputs) if v in need}


def _is_fill(node: Node) -> bool:
    return node.prim is P.const_p and node.params["value"].ndim == 0


def _subgraph(
    graph: Graph, inputs: Sequence[int], outputs: Sequence[int], folded: dict[int, Node]
) -> Graph:
    """`graph` with only the inputs at `inputs` and the outputs at `outputs`; the inputs in
    `folded` are defined instead by a copy of the fill constant given (one row of it for a
    stacked input, whose shape the graph's input has)."""
    consts = []
    for i, fill in folded.items():
        v = graph.inputs[i]
        params = {"value": fill.params["value"], "shape": v.shape}
        consts.append(Node(P.const_p, (), params, v, fill.source))
    kept, _ = graph.live(graph.outputs[i] for i in outputs)
    return Graph(
        tuple(graph.inputs[i] for i in inputs),
        tuple(consts) + tuple(kept),
        tuple(graph.outputs[i] for i in outputs),
    )


def _carry_fixpoint(
    body: Graph, first: int, n_carry: int, others: Sequence[int], keep: set[int]
) -> list[int]:
    """The carries to keep: those in `keep`, and every carry that a kept output of `body` reads
    (its `n_carry` carry inputs start at `first`, its outputs with the carries; `others`: the
    outputs after the carries that stay)."""
    while True:
        read = _reads(body, sorted(keep) + list(others))
        grown = keep | {i - first for i in read if first <= i < first + n_carry}
        if grown == keep:
            return sorted(keep)
        keep = grown


# ----------------------------------------------------------------------------------------------
# the rules: (node, live pieces, fill constants of the graph) -> (inputs, params, piece map)
# or None where nothing is pruned; the piece map sends a live piece to its place in the new
# layout


def _inputs_kept(
    graph: Graph, outputs: Sequence[int], positions: Sequence[int], operands, fills
) -> tuple[list[int], dict[int, Node]]:
    """Of the inputs of `graph` at `positions` (fed by `operands`), those its `outputs` read and
    that are not fill constants, and the fills to fold in (by input position)."""
    read = _reads(graph, outputs)
    kept, folded = [], {}
    for i, v in zip(positions, operands, strict=True):
        if i not in read:
            continue
        if v in fills:
            folded[i] = fills[v]
        else:
            kept.append(i)
    return kept, folded


def _prune_scan(node: Node, live: list[bool], fills):
    p = node.params
    body, nc, nk = p["body"], p["n_consts"], p["n_carry"]
    n_ys = len(body.outputs) - nk
    n_xs = len(body.inputs) - nc - nk
    saved = live[nk + n_ys :] if p["save"] else [False] * nk
    keep = {i for i in range(nk) if live[i] or saved[i]}
    # a value returned twice as ys (a residual two derivatives read) is stacked once, and a
    # fill constant (a zero cotangent) not at all: its readers read a fill
    made = {n.out: n for n in body.nodes}
    first: dict[Var, int] = {}
    stacked_fills: dict[int, Node] = {}
    for j in range(n_ys):
        v = body.outputs[nk + j]
        if live[nk + j] and v in made and _is_fill(made[v]):
            stacked_fills[nk + j] = made[v]
        elif live[nk + j]:
            first.setdefault(v, j)
    ys = sorted(first.values())
    carries = _carry_fixpoint(body, nc, nk, [nk + j for j in ys], keep)
    save = any(saved[i] for i in carries)
    outs = carries + [nk + j for j in ys]
    consts, c_fold = _inputs_kept(body, outs, range(nc), node.inputs[:nc], fills)
    x_pos = [nc + nk + j for j in range(n_xs)]
    xs, x_fold = _inputs_kept(body, outs, x_pos, node.inputs[nc + nk :], fills)
    if len(outs) == len(body.outputs) and save == p["save"] and len(consts) + len(xs) == nc + n_xs:
        return None
    carry_pos = [nc + i for i in carries]
    new_body = _subgraph(body, consts + carry_pos + xs, outs, {**c_fold, **x_fold})
    inputs = [node.inputs[i] for i in consts + carry_pos + xs]
    params = {**p, "body": new_body, "n_consts": len(consts), "n_carry": len(carries), "save": save}
    n_new = len(carries) + len(ys)
    piece_map = {i: k for k, i in enumerate(carries)}
    piece_map.update({nk + j: len(carries) + k for k, j in enumerate(ys)})
    for j, v in enumerate(body.outputs[nk:]):
        if v in first:
            piece_map[nk + j] = piece_map[nk + first[v]]
    if save:
        piece_map.update({nk + n_ys + i: n_new + k for k, i in enumerate(carries)})
    piece_map.update(stacked_fills)
    return inputs, params, piece_map


def _prune_loop(node: Node, live: list[bool], fills):
    p = node.params
    body, nc = p["body"], p["n_consts"]
    nk = len(body.outputs)
    carries = _carry_fixpoint(body, nc, nk, [], {i for i in range(nk) if live[i]})
    consts, folded = _inputs_kept(body, carries, range(nc), node.inputs[1 : 1 + nc], fills)
    if len(carries) == nk and len(consts) == nc:
        return None
    new_body = _subgraph(body, consts + [nc + i for i in carries], carries, folded)
    inputs = [node.inputs[0]] + [node.inputs[1 + i] for i in consts + [nc + i for i in carries]]
    return inputs, {**p, "body": new_body, "n_consts": len(consts)}, _renumbered(carries)


def _prune_while(node: Node, live: list[bool], fills):
    p = node.params
    cond, body = p["cond"], p["body"]
    ncc, nbc = p["n_cond_consts"], p["n_body_consts"]
    nk = len(body.outputs)
    keep = {i for i in range(nk) if live[i]}
    keep |= {i - ncc for i in _reads(cond, [0]) if i >= ncc}
    carries = _carry_fixpoint(body, nbc, nk, [], keep)
    cc, c_fold = _inputs_kept(cond, [0], range(ncc), node.inputs[:ncc], fills)
    bc, b_fold = _inputs_kept(body, carries, range(nbc), node.inputs[ncc : ncc + nbc], fills)
    if len(carries) == nk and len(cc) == ncc and len(bc) == nbc:
        return None
    new_cond = _subgraph(cond, cc + [ncc + i for i in carries], [0], c_fold)
    new_body = _subgraph(body, bc + [nbc + i for i in carries], carries, b_fold)
    init = node.inputs[ncc + nbc :]
    inputs = [node.inputs[i] for i in cc] + [node.inputs[ncc + i] for i in bc]
    inputs += [init[i] for i in carries]
    params = {
        **p,
        "cond": new_cond,
        "body": new_body,
        "n_cond_consts": len(cc),
        "n_body_consts": len(bc),
    }
    return inputs, params, _renumbered(carries)


def _prune_count(node: Node, live: list[bool], fills):
    # the trip count reads only the carries the predicate reads, and those they are made from
    return _prune_while(node, [False] * len(node.params["body"].outputs), fills)


def _prune_cond(node: Node, live: list[bool], fills):
    branches = node.params["branches"]
    n_ops = len(node.inputs) - 1
    outs = [j for j, on in enumerate(live) if on]
    read = set().union(*(_reads(g, outs) for g in branches))
    kept = [i for i in range(n_ops) if i in read and node.inputs[1 + i] not in fills]
    folded = {i: fills[node.inputs[1 + i]] for i in range(n_ops) if i in read and i not in kept}
    if len(outs) == len(live) and len(kept) == n_ops:
        return None
    new = tuple(_subgraph(g, kept, outs, folded) for g in branches)
    inputs = [node.inputs[0]] + [node.inputs[1 + i] for i in kept]
    return inputs, {**node.params, "branches": new}, _renumbered(outs)


def _renumbered(kept: Sequence[int]) -> dict[int, int]:
    return {i: k for k, i in enumerate(kept)}


_RULES = {
    scan_p: _prune_scan,
    loop_p: _prune_loop,
    while_p: _prune_while,
    while_count_p: _prune_count,
    cond_p: _prune_cond,
}
