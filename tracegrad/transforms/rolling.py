"""Rolling: plain Python loops found in a trace become `scan` nodes, before differentiation.

A Python `for` loop over traced values leaves in the trace the same run of nodes once per
iteration: the same primitives with the same parameters, from the same source lines, on values of
the same shapes, each iteration reading what the previous one computed. `roll_loops` finds such
repetitions and replaces them by one `scan` node whose body is one iteration, so that tracing
still costs one pass over the loop, but differentiation, optimisation and compilation see one
iteration instead of all of them (a 1,000-step time integration compiles like a 1-step one).

What an iteration reads is classified from the second iteration on (the first reads the values
the loop starts from):
- a value computed earlier in the same iteration: inside the body;
- a value computed by the previous iteration: a *carry*, started from what the first iteration
  reads in its place; a value computed j iterations back (up to `MAX_LAG`, the two-back loop
  `x, y = f(x, y), x`) is carried in j slots, each step shifting them by one, started from what
  the first j iterations read in its place;
- a value from before the loop: a loop constant (the same value in every iteration);
- a literal whose value changes from iteration to iteration (`x * (i * dt)` with a Python `i`):
  a row of a stacked `xs` input.
Values of an iteration read after the loop come out as final carries (the last iterations',
from the carry slots) or as stacked `ys` (`trajectory.append(x)` then `np.stack`). A repetition
whose iterations read anything else (a value from before the loop in one iteration and from the
loop in another, or further back than `MAX_LAG`) is left unrolled, as is one holding effects
(hooks, taps) or too small to be worth a loop (fewer than `MIN_REPEATS` iterations or
`MIN_NODES` nodes in all). Rolling repeats until nothing changes, so nested loops roll from the inside out.
"""

from __future__ import annotations

import numpy as np

from .. import primitives as P
from ..ir import Builder, Graph, Node, Var, building, freeze, source_location
from . import scan as scans

MIN_REPEATS = 4
MIN_NODES = 64
PERIOD_TRIES = 6  # candidate periods tried per position: the k-th next node of its signature
# the furthest back an iteration may read (each iteration back is one more carry)
MAX_LAG = 4


def roll_loops(graph: Graph) -> Graph:
    for _ in range(8):  # nested loops: one level per round
        rolled = _roll_once(graph)
        if rolled is graph:
            return graph
        graph = rolled
    return graph


def _signature(node: Node) -> tuple:
    if node.prim is P.slice_p:  # the window may move from iteration to iteration (xs[t])
        x = node.inputs[0]
        return ("slice", x.shape, x.dtype.str, node.out.shape, node.source)
    if node.prim is P.const_p:  # a literal's value may change from iteration to iteration
        value = node.params["value"]
        return ("const", value.shape, value.dtype.str, tuple(node.params["shape"]), node.source)
    return (
        node.prim.name,
        node.param_key(),
        node.source,
        node.out.shape,
        node.out.dtype.str,
        tuple((v.shape, v.dtype.str) for v in node.inputs),
    )


def _roll_once(graph: Graph) -> Graph:
    nodes = graph.nodes
    n = len(nodes)
    weight = [_weight(node) for node in nodes]
    if sum(weight) < MIN_NODES:
        return graph
    ids: dict[tuple, int] = {}
    sig = [ids.setdefault(_signature(node), len(ids)) for node in nodes]
    nxt = [0] * n
    last: dict[int, int] = {}
    for i in range(n - 1, -1, -1):
        nxt[i] = last.get(sig[i], -1)
        last[sig[i]] = i
    position = {node.out: i for i, node in enumerate(nodes)}
    used_after = _last_use(graph)

    # candidate repetitions: (period, start, repeats); a position inside a candidate of the
    # same period is a rotation of it and is skipped
    candidates = []
    covered_until: dict[int, int] = {}
    # a later start inside a repetition of fewer than MIN_REPEATS iterations repeats no more
    # often: it is not counted again (a long chain of them cost O(n^2) comparisons)
    short_until: dict[int, int] = {}
    for i in range(n):
        # the period is the distance to the next node of the same signature, or to a later one
        # (a function called twice per iteration repeats its nodes within the iteration)
        j = i
        for _ in range(PERIOD_TRIES):
            j = nxt[j]
            if j < 0:
                break
            period = j - i
            if i < covered_until.get(period, 0):
                break
            if i < short_until.get(period, 0):
                continue
            repeats = 1
            while i + (repeats + 1) * period <= n and all(
                sig[i + repeats * period + k] == sig[i + k] for k in range(period)
            ):
                repeats += 1
            if repeats >= MIN_REPEATS and sum(weight[i : i + period]) * repeats >= MIN_NODES:
                candidates.append((period, i, repeats))
                covered_until[period] = i + period * repeats
                break
            if repeats < MIN_REPEATS:
                short_until[period] = i + period * repeats
    # the shortest periods first (inner loops before the loops around them), without overlaps
    runs, taken = [], []
    for period, i, repeats in sorted(candidates):
        end = i + period * repeats
        if any(i < e and s < end for s, e in taken):
            continue
        fitted = _fit_run(graph, i, period, repeats, position, used_after)
        if fitted is not None:
            runs.append((*fitted[:1], period, *fitted[1:]))
            taken.append((i, end))
    runs.sort(key=lambda run: run[0])
    # the last first: the positions of the earlier runs stay valid
    for start, period, repeats, plan in reversed(runs):
        graph = _rolled(graph, start, period, repeats, plan)
    return graph


def _weight(node: Node) -> int:
    """A node counts for the nodes of the graphs it holds (a rolled inner loop), plus one."""
    held = [v for v in node.params.values() if isinstance(v, Graph)]
    return 1 + sum(sum(_weight(n) for n in g.nodes) for g in held)


def _last_use(graph: Graph) -> dict[Var, int]:
    """For each value, the position of the last node reading it (outputs: past the end)."""
    last: dict[Var, int] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            last[v] = i
    for v in graph.outputs:
        last[v] = len(graph.nodes)
    return last


# iterations a repetition may leave unrolled at either end: a periodic boundary (`x[(i + 1) % n]`)
# reads an irregular window in the first or last iteration, and that one iteration must not keep
# the other ones from rolling
_TRIMS = ((0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (2, 0))


def _fit_run(graph: Graph, start: int, period: int, repeats: int, position, used_after):
    """(start, repeats, plan) of the longest rollable part of a repetition, or None."""
    for head, tail in _TRIMS:
        kept = repeats - head - tail
        if kept < MIN_REPEATS:
            break
        plan = _plan_run(graph, start + head * period, period, kept, position, used_after)
        if plan is not None:
            return start + head * period, kept, plan
    return None


class _Plan:
    def __init__(self):
        # (offset, input k) -> what it reads from the last iteration's point of view:
        # ("inside", offset), ("lag", iterations back, offset) or ("outer", value)
        self.refs: dict[tuple[int, int], tuple] = {}
        # (offset, lag) -> the value a read `lag` iterations back finds in the first iteration
        # (from before the loop); the body's carries are these slots
        self.init: dict[tuple[int, int], Var] = {}
        self.consts: list[Var] = []  # values from before the loop
        self.varying: list[int] = []  # offsets of literals that change between iterations
        # offsets of slices whose window moves: (sliced value, axis, first start, step)
        self.sliced: dict[int, tuple[Var, int, int, int]] = {}
        self.outside: dict[int, set[int]] = {}  # offset -> iterations whose value is read after

    def depth(self) -> dict[int, int]:
        """Carried offset -> how many of its last iterations' values the carries hold."""
        out: dict[int, int] = {}
        for k, lag in self.init:
            out[k] = max(out.get(k, 0), lag)
        return out


def _plan_run(graph: Graph, start: int, period: int, repeats: int, position, used_after):
    nodes = graph.nodes
    end = start + period * repeats
    if all(node.prim.kind is P.Kind.SHAPE for node in nodes[start : start + period]):
        return None  # only moves data (the rows of a rolled loop's ys, read one by one)
    plan = _Plan()
    const_index: dict[Var, int] = {}
    # what each operand reads in each iteration
    seen: dict[tuple[int, int], list[tuple]] = {}
    for r in range(repeats):
        base = start + r * period
        for k in range(period):
            node = nodes[base + k]
            if node.prim.effectful or node.prim is P.tap_p:
                return None
            for a, v in enumerate(node.inputs):
                p = position.get(v, -1)
                if p >= base:
                    ref = ("inside", p - base)
                elif p >= start:
                    lag = r - (p - start) // period
                    if lag > MAX_LAG:
                        return None
                    ref = ("lag", lag, (p - start) % period)
                else:
                    ref = ("outer", v)
                seen.setdefault((k, a), []).append(ref)
            if used_after.get(node.out, -1) >= end:
                plan.outside.setdefault(k, set()).add(r)
    # every iteration must read what the last one reads; a read `lag` iterations back finds a
    # value from before the loop in the first `lag` iterations, which starts the carry slot that
    # iteration's read comes from (slot j of offset k holds k's value of j iterations ago, and
    # each step shifts the slots by one)
    for key, refs in seen.items():
        steady = refs[-1]
        if steady[0] == "lag":
            _, lag, k = steady
            for r, ref in enumerate(refs):
                if r >= lag:
                    if ref != steady:
                        return None
                    continue
                if ref[0] != "outer":
                    return None
                if plan.init.setdefault((k, lag - r), ref[1]) is not ref[1]:
                    return None
        elif steady[0] == "outer":
            if any(ref[0] != "outer" or ref[1] is not steady[1] for ref in refs):
                return None
        elif any(ref != steady for ref in refs):
            return None
        plan.refs[key] = steady
    # literals whose values differ between iterations
    for k in range(period):
        node = nodes[start + k]
        if node.prim is P.const_p:
            first = freeze(node.params["value"])
            if any(
                freeze(nodes[start + r * period + k].params["value"]) != first
                for r in range(1, repeats)
            ):
                plan.varying.append(k)
    # slices of a value from before the loop whose window moves by a fixed step each iteration
    for k in range(period):
        node = nodes[start + k]
        if node.prim is not P.slice_p:
            continue
        windows = [nodes[start + r * period + k].params["index"] for r in range(repeats)]
        if all(w == windows[0] for w in windows):
            continue
        ref = plan.refs.get((k, 0))
        moving = _moving_window(windows)
        if ref is None or ref[0] != "outer" or moving is None:
            return None
        axis, move = moving
        plan.sliced[k] = (ref[1], axis, windows[0][axis][0], move)
    for ref in plan.refs.values():
        if ref[0] == "outer" and ref[1] not in const_index:
            const_index[ref[1]] = len(plan.consts)
            plan.consts.append(ref[1])
    # a carried value read after the loop from one of its last iterations is a carry slot too
    # (the two-back loop's `x + y` after it); the new slots' first values are never read
    depth = plan.depth()
    for k, iterations in plan.outside.items():
        back = repeats - min(iterations)
        if k in depth and back <= MAX_LAG:
            for lag in range(depth[k] + 1, back + 1):
                plan.init[(k, lag)] = plan.init[(k, depth[k])]
    return plan


def _moving_window(windows: list) -> tuple[int, int] | None:
    """(axis, step) when the windows differ only on one axis, each one element wide there, moving
    forwards by the same step every iteration (xs[t], xs[:, 2 * t]); else None."""
    first = windows[0]
    axes = [a for a in range(len(first)) if any(w[a] != first[a] for w in windows)]
    if len(axes) != 1:
        return None
    (axis,) = axes
    start, stop, step = first[axis]
    if stop - start != 1 or step != 1 or len(windows) < 2:
        return None
    move = windows[1][axis][0] - start
    if move <= 0:
        return None
    for r, w in enumerate(windows):
        if w[axis] != (start + r * move, start + r * move + 1, 1):
            return None
        if any(w[a] != first[a] for a in range(len(first)) if a != axis):
            return None
    return axis, move


def _rolled(graph: Graph, start: int, period: int, repeats: int, plan: _Plan) -> Graph:
    nodes = graph.nodes
    block = nodes[start : start + period]
    slots = sorted(plan.init)  # (offset, lag): the carries
    depth = plan.depth()
    outside = sorted(plan.outside)
    # ys: offsets read after the loop from an iteration no carry slot holds at the end
    stacked = [k for k in outside if repeats - min(plan.outside[k]) > depth.get(k, 0)]

    # the body: one iteration as a graph
    consts_in = [Var(v.shape, v.dtype) for v in plan.consts]
    carry_in = [Var(block[k].out.shape, block[k].out.dtype) for k, _ in slots]
    stepped = plan.varying + sorted(plan.sliced)  # offsets read from a stacked xs each step
    xs_in = [Var(block[k].out.shape, block[k].out.dtype) for k in stepped]
    const_of = dict(zip(plan.consts, consts_in, strict=True))
    carry_of = dict(zip(slots, carry_in, strict=True))
    x_of = dict(zip(stepped, xs_in, strict=True))
    env: dict[int, Var] = {}
    body_nodes = []
    for k, node in enumerate(block):
        if k in x_of:
            env[k] = x_of[k]
            continue
        inputs = []
        for a, _ in enumerate(node.inputs):
            ref = plan.refs[(k, a)]
            if ref[0] == "inside":
                inputs.append(env[ref[1]])
            elif ref[0] == "lag":
                inputs.append(carry_of[(ref[2], ref[1])])
            else:
                inputs.append(const_of[ref[1]])
        out = Var(node.out.shape, node.out.dtype)
        body_nodes.append(Node(node.prim, tuple(inputs), node.params, out, node.source))
        env[k] = out
    # the newest slot takes this iteration's value, each older one the slot before it
    carry_out = [env[k] if lag == 1 else carry_of[(k, lag - 1)] for k, lag in slots]
    outputs = carry_out + [env[k] for k in stacked]
    body = Graph(tuple(consts_in + carry_in + xs_in), tuple(body_nodes), tuple(outputs))

    # the scan node and the values that replace the iterations' values read after the loop
    xs_values = [
        np.stack(
            [
                np.broadcast_to(nodes[start + r * period + k].params["value"], block[k].out.shape)
                for r in range(repeats)
            ]
        )
        for k in plan.varying
    ]
    builder = Builder()
    builder.inputs = list(graph.inputs)
    builder.nodes = list(nodes[:start])
    replace: dict[Var, Var] = {}
    source = block[0].source
    with building(builder), source_location(f"loop {source}" if source else "loop"):
        xs = [P.const(v) for v in xs_values]
        for k in sorted(plan.sliced):
            value, axis, first, move = plan.sliced[k]
            window = list(block[k].params["index"])
            window[axis] = (first, first + (repeats - 1) * move + 1, move)
            rows = P.slice_(value, tuple(window))  # every iteration's window, along `axis`
            rows = P.transpose(rows, [axis] + [a for a in range(rows.ndim) if a != axis])
            xs.append(P.reshape(rows, (repeats,) + block[k].out.shape))
        results = scans.scan(
            plan.consts, [plan.init[slot] for slot in slots], xs, body=body, length=repeats
        )
        finals = dict(zip(slots, results[: len(slots)], strict=True))
        ys = dict(zip(stacked, results[len(slots) :], strict=True))
        for k, iterations in plan.outside.items():
            for r in iterations:
                old = nodes[start + r * period + k].out
                if k in ys:
                    row = P.slice_(ys[k], ((r, r + 1, 1),) + tuple((0, d, 1) for d in old.shape))
                    replace[old] = P.reshape(row, old.shape)
                else:
                    replace[old] = finals[(k, repeats - r)]
    rest = []
    for node in nodes[start + period * repeats :]:
        inputs = tuple(replace.get(v, v) for v in node.inputs)
        rest.append(
            node
            if inputs == node.inputs
            else Node(node.prim, inputs, node.params, node.out, node.source)
        )
    return Graph(
        graph.inputs,
        tuple(builder.nodes) + tuple(rest),
        tuple(replace.get(v, v) for v in graph.outputs),
    )
