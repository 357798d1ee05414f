"""Sparse Jacobians and Hessians: which output elements depend on which input elements, a
colouring of the rows that share no column, and one compressed seed per colour.

`pattern(graph, j, wrt)` propagates, node by node, a boolean map from each value's elements to
the elements of the inputs at `wrt` (sorted keys `row * columns + column`). The rule of a node is
read from the primitive table: its kind (elementwise: the same element of each operand; a
reduction: the elements it reduces; a shape primitive: where its reference implementation moves
each element, found by running it on element numbers), or its `sparsity` facet (gather and
scatter-add with constant indices). A node with no rule depends, for every output element, on
everything any of its inputs depends on, so the pattern is never too small: a Jacobian built from
it is the dense one.

`jacobian(graph, wrt, n_diff)` is `autodiff.jacobian` where the pattern allows fewer seeds: rows
of d out / d x that share no column get one colour (greedy, in row order), the adjoint is batched
over one seed per colour (the sum of those rows' basis cotangents), and one scatter writes each
compressed row's entries where the pattern puts them, into zeros (a fused loop over the result
where it has few colours and is small or not very sparse). A tridiagonal Hessian of any
size costs three reverse passes. Where the colours are not at most half the rows, or the pattern
is too big to analyse, it is `autodiff.jacobian`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import autodiff, ir
from .. import primitives as P
from ..ir import Builder, Graph, Var
from ..primitives import Kind

#: The most (row, column) pairs one node's rule may produce before the analysis gives up (the
#: Jacobian is then built densely); it bounds the time and memory the analysis takes.
MAX_PAIRS = 4_000_000
#: The most conflicting row pairs the greedy colouring visits before it gives up.
MAX_CONFLICTS = 2_000_000
#: Up to this many colours the fill is one fused loop over the result (each entry picks its
#: colour's compressed row, or 0, by a small integer constant); more: a gather and a scatter.
MAX_FUSED_COLOURS = 16
#: A result of at least this many entries with at most 1/SPARSE_FILL_RATIO of them in the
#: pattern is filled by the gather and scatter whatever its colours: a scatter into fresh zeros
#: touches only the pages that hold entries (NumPy's zeros are mapped lazily), where the fused
#: loop writes every entry (W3 at n = 1000: 8 MB written for 2998 entries).
SPARSE_FILL_MIN = 1 << 16
SPARSE_FILL_RATIO = 16
#: Off: every Jacobian is built densely (benchmarks compare the two paths with it).
ENABLED = True


class TooDense(Exception):
    """The pattern is too big to analyse: build the Jacobian densely."""


class Pattern:
    """Which of `columns` input elements each of a value's `size` elements depends on: sorted,
    unique keys `row * columns + column`."""

    __slots__ = ("columns", "keys", "size")

    def __init__(self, keys: np.ndarray, size: int, columns: int):
        self.keys = keys
        self.size = size
        self.columns = columns

    @property
    def rows(self) -> np.ndarray:
        return self.keys // self.columns

    @property
    def cols(self) -> np.ndarray:
        return self.keys % self.columns

    def indptr(self) -> np.ndarray:
        return np.searchsorted(self.rows, np.arange(self.size + 1))

    def dense(self) -> np.ndarray:
        """The pattern as a (size, columns) boolean array."""
        out = np.zeros(self.size * self.columns, dtype=bool)
        out[self.keys] = True
        return out.reshape(self.size, self.columns)


def _compose(pairs: list[tuple[np.ndarray, np.ndarray, Pattern]], size: int, columns: int):
    """The pattern of a value whose element `o` depends on element `i` of an operand with
    pattern `p`, for each (o, i) of every operand's pairs."""
    keys = []
    for out_pos, in_pos, p in pairs:
        if p.keys.size == 0 or out_pos.size == 0:
            continue
        indptr = p.indptr()
        starts, counts = indptr[in_pos], indptr[in_pos + 1] - indptr[in_pos]
        total = int(counts.sum())
        if total > MAX_PAIRS:
            raise TooDense
        first = np.cumsum(counts) - counts
        offsets = np.arange(total) - np.repeat(first, counts)
        cols = p.cols[np.repeat(starts, counts) + offsets]
        keys.append(np.repeat(out_pos.astype(np.int64), counts) * columns + cols)
    if not keys:
        return Pattern(np.zeros(0, np.int64), size, columns)
    return Pattern(np.unique(np.concatenate(keys)), size, columns)


def _everything(node: ir.Node, patterns: list[Pattern | None], columns: int) -> Pattern:
    """No rule: every output element depends on every column any input depends on."""
    used = [p.cols for p in patterns if p is not None and p.keys.size]
    cols = np.unique(np.concatenate(used)) if used else np.zeros(0, np.int64)
    size = node.out.size
    if size * cols.size > MAX_PAIRS:
        raise TooDense
    keys = (np.arange(size, dtype=np.int64)[:, None] * columns + cols[None, :]).reshape(-1)
    return Pattern(keys, size, columns)


def _numbers(shape: tuple[int, ...]) -> np.ndarray:
    return np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)


def _moved(node: ir.Node) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """(output, input) element pairs of a shape primitive that moves elements: its reference
    implementation run on element numbers (1 + the number, with an offset per operand; 0 where
    it writes zeros)."""
    offsets = np.cumsum([0] + [v.size for v in node.inputs])
    codes = [1 + offsets[k] + _numbers(v.shape) for k, v in enumerate(node.inputs)]
    moved = np.asarray(node.prim.impl(*codes, **node.params)).reshape(-1)
    if moved.shape != (node.out.size,) or moved.dtype.kind not in "iu":
        return [None] * len(node.inputs)
    out_pos = np.nonzero(moved)[0]
    read = moved[out_pos] - 1
    which = np.searchsorted(offsets, read, side="right") - 1
    pairs = []
    for k in range(len(node.inputs)):
        mine = which == k
        pairs.append((out_pos[mine], read[mine] - offsets[k]))
    return pairs


def _reduced(node: ir.Node) -> list[tuple[np.ndarray, np.ndarray] | None]:
    x, axes = node.inputs[0], tuple(node.params["axes"])
    if node.out.ndim != x.ndim - len(axes):
        return [None]
    out = _numbers(node.out.shape).reshape(
        tuple(1 if a in axes else d for a, d in enumerate(x.shape))
    )
    return [(np.broadcast_to(out, x.shape).reshape(-1), np.arange(x.size))]


def _scanned(node: ir.Node) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """A running reduction: element t along the axis reads elements 0..t."""
    x, axis = node.inputs[0], node.params["axis"]
    numbers = np.moveaxis(_numbers(x.shape), axis, -1)
    flat = numbers.reshape(-1, x.shape[axis])
    t, s = np.nonzero(np.tri(x.shape[axis], dtype=bool))  # s <= t
    if flat.shape[0] * t.size > MAX_PAIRS:
        raise TooDense
    return [(flat[:, t].reshape(-1), flat[:, s].reshape(-1))]


def _multiplied(node: ir.Node) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """A matrix product: out[..., i, j] reads a[..., i, :] and b[..., :, j]."""
    a, b = node.inputs
    if a.ndim < 2 or b.ndim < 2:
        return [None, None]
    k = a.shape[-1]
    if node.out.size * k > MAX_PAIRS:
        raise TooDense
    out = _numbers(node.out.shape)[..., None]  # (..., m, n, 1)
    na, nb = _numbers(a.shape), _numbers(b.shape)
    full = node.out.shape + (k,)
    ins_a = np.broadcast_to(na[..., :, None, :], full)
    ins_b = np.broadcast_to(np.swapaxes(nb, -1, -2)[..., None, :, :], full)
    outs = np.broadcast_to(out, full).reshape(-1)
    return [(outs, ins_a.reshape(-1)), (outs, ins_b.reshape(-1))]


def _rule(node: ir.Node, consts: dict[Var, np.ndarray]):
    """Per input, the (output, input) element pairs of `node`, None for an input with no rule."""
    prim, n_in = node.prim, len(node.inputs)
    if prim.sparsity is not None:
        return prim.sparsity(node, [consts.get(v) for v in node.inputs])
    if prim.kind is Kind.ELEMENTWISE:
        same = np.arange(node.out.size)
        return [(same, same) if v.shape == node.out.shape else None for v in node.inputs]
    if prim.kind is Kind.IDENTITY and n_in == 1:
        same = np.arange(node.out.size)
        return [(same, same)]
    if prim.kind is Kind.REDUCE:
        return _reduced(node)
    if prim.kind is Kind.SCAN:
        return _scanned(node)
    if prim.kind is Kind.MATMUL:
        return _multiplied(node)
    if prim.kind is Kind.SHAPE and prim.index_map not in (None, P.OWN_STEP):
        return _moved(node)
    return [None] * n_in


def patterns(graph: Graph, wrt: Sequence[int]) -> dict[Var, Pattern]:
    """The pattern of every float value of `graph` that depends on the inputs at `wrt`, over
    their elements in order (raises TooDense where a rule would be too big)."""
    sizes = [graph.inputs[i].size for i in wrt]
    columns = int(sum(sizes))
    found: dict[Var, Pattern] = {}
    start = 0
    for i, size in zip(wrt, sizes, strict=True):
        keys = np.arange(size, dtype=np.int64) * columns + start + np.arange(size)
        v = graph.inputs[i]
        if v not in found:  # an input passed twice: the first position's columns
            found[v] = Pattern(keys, size, columns)
        start += size
    consts: dict[Var, np.ndarray] = {}
    for node in graph.nodes:
        if node.prim is P.const_p:
            consts[node.out] = np.broadcast_to(node.params["value"], node.out.shape)
            continue
        ins = [found.get(v) for v in node.inputs]
        if not node.prim.differentiable or not P.is_float(node.out.dtype):
            continue  # no derivative flows through (as autodiff.active_values)
        if all(p is None for p in ins):
            continue
        try:
            rules = _rule(node, consts)
        except TooDense:
            raise
        except Exception:  # a rule that cannot read this node: no rule
            rules = [None] * len(ins)
        if any(p is not None and r is None for p, r in zip(ins, rules, strict=True)):
            found[node.out] = _everything(node, ins, columns)
        else:
            pairs = [(*r, p) for p, r in zip(ins, rules, strict=True) if p is not None]
            found[node.out] = _compose(pairs, node.out.size, columns)
    return found


def colour_rows(p: Pattern) -> tuple[np.ndarray, int]:
    """A colour per row such that rows of one colour share no column (greedy, rows in order),
    and the number of colours. Raises TooDense past MAX_CONFLICTS."""
    rows, cols = p.rows, p.cols
    order = np.argsort(cols, kind="stable")
    by_col = rows[order]
    col_ptr = np.searchsorted(cols[order], np.arange(p.columns + 1))
    counts = np.diff(col_ptr)
    if int((counts.astype(np.int64) ** 2).sum()) > MAX_CONFLICTS:
        raise TooDense
    row_ptr = p.indptr()
    colour = np.full(p.size, -1, dtype=np.int64)
    col_ptr_l, by_col_l, cols_l, row_ptr_l = (
        col_ptr.tolist(),
        by_col.tolist(),
        cols.tolist(),
        row_ptr.tolist(),
    )
    colour_l = colour.tolist()
    n_colours = 0
    for r in range(p.size):
        if row_ptr_l[r] == row_ptr_l[r + 1]:
            continue  # a row with no entries needs no seed
        forbidden = set()
        for c in cols_l[row_ptr_l[r] : row_ptr_l[r + 1]]:
            for other in by_col_l[col_ptr_l[c] : col_ptr_l[c + 1]]:
                forbidden.add(colour_l[other])
        k = 0
        while k in forbidden:
            k += 1
        colour_l[r] = k
        n_colours = max(n_colours, k + 1)
    return np.array(colour_l, dtype=np.int64), n_colours


class Colouring:
    """The colouring of d output / d inputs: the pattern (rows: the output's elements, columns:
    the inputs' elements in order), a colour per row (-1: an empty row) and the number of
    colours."""

    __slots__ = ("colour", "n_colours", "pattern")

    def __init__(self, pattern: Pattern, colour: np.ndarray, n_colours: int):
        self.pattern = pattern
        self.colour = colour
        self.n_colours = n_colours

    @property
    def worth_it(self) -> bool:
        """Whether compressed seeds beat one seed per row: at most half as many."""
        return self.n_colours > 0 and 2 * self.n_colours <= self.pattern.size

    def describe(self) -> str:
        p = self.pattern
        return (
            f"sparse jacobian: {self.n_colours} colours for {p.size} rows, "
            f"{p.keys.size} of {p.size * p.columns} entries"
        )


def colouring(graph: Graph, j: int, wrt: Sequence[int]) -> Colouring | None:
    """The colouring of d graph.outputs[j] / d inputs[wrt], or None where it is too big to find."""
    out = graph.outputs[j]
    try:
        found = patterns(graph, wrt)
        columns = int(sum(graph.inputs[i].size for i in wrt))
        p = found.get(out) or Pattern(np.zeros(0, np.int64), out.size, columns)
        colour, n = colour_rows(p)
    except TooDense:
        return None
    return Colouring(p, colour, n)


def jacobian(graph: Graph, wrt: Sequence[int], n_diff: int | None = None) -> Graph:
    """`autodiff.jacobian(graph, wrt, n_diff)` (same outputs, same values), from one compressed
    seed per colour for each output whose colouring is worth it."""
    n_diff = len(graph.outputs) if n_diff is None else n_diff
    colourings = {}
    for j, out in enumerate(graph.outputs[:n_diff]):
        if ENABLED and P.is_float(out.dtype) and out.size > 1:
            c = colouring(graph, j, wrt)
            if c is not None and c.worth_it:
                colourings[j] = c
    if not colourings:
        return autodiff.jacobian(graph, wrt, n_diff)
    builder = Builder()
    builder.inputs = list(graph.inputs)
    env = autodiff.copy_primal(builder, graph)
    outputs = [env[v] for v in graph.outputs]
    with ir.building(builder):
        dense = None  # the outputs left dense: autodiff's jacobian, inlined once
        n_out, per = len(graph.outputs), len(wrt)
        for j in range(n_diff):
            if j in colourings:
                outputs += _compressed(graph, wrt, j, colourings[j])
                continue
            if dense is None:
                dense = ir.inline(builder, autodiff.jacobian(graph, wrt, n_diff), graph.inputs)
            outputs += dense[n_out + j * per : n_out + (j + 1) * per]
    return builder.graph(outputs)


def _compressed(graph: Graph, wrt: Sequence[int], j: int, c: Colouring) -> list[Var]:
    """d output_j / d input_i for each i in `wrt`, from `c.n_colours` seeds, filled in."""
    out = graph.outputs[j]
    m, k = out.size, c.n_colours
    vjp = autodiff.adjoint(graph, wrt, [j], seed_ones=False)
    seed = np.zeros((k, m), dtype=out.dtype)
    rows = np.nonzero(c.colour >= 0)[0]
    seed[c.colour[rows], rows] = 1
    with ir.source_location(c.describe()):
        seed_v = P.const(seed.reshape((k,) + out.shape))
    results = P.batch_inline(
        vjp, list(graph.inputs) + [seed_v], [False] * len(graph.inputs) + [True], k
    )
    p_rows, p_cols = c.pattern.rows, c.pattern.cols
    jacs, start = [], 0
    for (ct, is_batched), i in zip(results[len(graph.outputs) :], wrt, strict=True):
        x = graph.inputs[i]
        n = x.size
        mine = (p_cols >= start) & (p_cols < start + n)
        r, col = p_rows[mine], p_cols[mine] - start
        start += n
        with ir.source_location(c.describe()):
            if r.size == 0:
                jacs.append(P.const(0, out.shape + x.shape, x.dtype))
                continue
            if not is_batched:
                ct = P.broadcast_to(P.reshape(ct, (1,) + x.shape), (k,) + x.shape)
            entries = m * n
            scattered = entries >= SPARSE_FILL_MIN and r.size * SPARSE_FILL_RATIO <= entries
            if k <= MAX_FUSED_COLOURS and not scattered:
                jacs.append(_selected(ct, c.colour[r], r * n + col, out.shape + x.shape))
                continue
            flat = P.reshape(ct, (k * n,))
            picked = P.gather(flat, P.const(c.colour[r] * n + col), 0)
            filled = P.scatter_add(picked, P.const(r * n + col), 0, (m * n,))
            jacs.append(P.reshape(filled, out.shape + x.shape))
    return jacs


def _selected(ct: Var, colours: np.ndarray, positions: np.ndarray, shape: tuple) -> Var:
    """The Jacobian of `shape` whose entry at flat `positions[e]` is `ct[colours[e]]` at that
    entry's column (the compressed row of its colour), 0 elsewhere: one elementwise pass."""
    k, n = ct.shape[0], int(np.prod(ct.shape[1:], dtype=np.int64))
    codes = np.full(int(np.prod(shape, dtype=np.int64)), -1, dtype=np.int8)
    codes[positions] = colours
    code = P.const(codes.reshape(shape))
    rows = P.reshape(ct, (k, n))
    total = P.const(0, shape, ct.dtype)
    for colour in range(k):
        row = P.slice_(rows, ((colour, colour + 1, 1), (0, n, 1)))
        row = P.broadcast_to(
            P.reshape(row, (1,) * (len(shape) - len(ct.shape) + 1) + ct.shape[1:]), shape
        )
        picked = P.compare(P.eq_p, code, P.const(colour, shape, np.int8))
        total = P.where(picked, row, total)
    return total
