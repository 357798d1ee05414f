"""Inline computation inside one loop: which nodes a loop can compute in place and at what cost,
the index maths that carries a loop's index through shape nodes, and `LoopBuilder`, which
writes one loop's ops (the planner decides what goes in which loop; see the package docstring).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from .. import primitives as P
from ..ir import Node, Var
from ..primitives import Kind
from .steps import (
    Buffer,
    Clamp,
    Compute,
    Equal,
    Index,
    Inside,
    Literal,
    Load,
    Op,
    Select,
    identity_index,
)


class Planner(Protocol):
    """What a loop builder reads of the planner that made its loop (planner.py)."""

    literals: dict[Var, np.ndarray]  # values that are one number, computed as a literal
    producer: dict[Var, Node]
    identities: set[Var]  # values equal to their operand (loaded through it)

    def literal_of(self, var: Var) -> np.ndarray | None: ...

    def buffer_for_load(self, var: Var) -> Buffer | None: ...


# Inline cost of an op: a call into the math library (or pow) counts as many arithmetic ops.
MATH_COST = 20
# Above this inline cost a value read through a broadcast, or by several loops, is materialized.
RECOMPUTE_LIMIT = 8
# A value computed inline at more points than this is stored once instead (see _bound_inlining).
MAX_POINTS = 4
# Chains of inline nodes are cut (a value stored) every this many nodes.
MAX_INLINE_DEPTH = 48


def uniform_value(node: Node | None) -> np.ndarray | None:
    """The one number of a constant that holds the same value everywhere (a fill), else None."""
    if node is None or node.prim.kind is not Kind.CONST:
        return None
    value = node.params["value"]
    if value.ndim == 0:
        return value
    if value.size == 0:
        return np.zeros((), value.dtype)
    first = value.reshape(-1)[0]
    if value.size <= 1 << 16 and (
        np.all(value == first) and (first == first or np.all(value != value))
    ):
        return np.asarray(first).copy()
    return None


def inline_kind(node: Node) -> str | None:
    """How a loop computes this node in place: "elementwise", "index" (a shape node that only
    changes indices), "select" (pieces: unslice, concatenate), "literal"; None if it cannot.
    A shape node's answer comes from its primitive's index map."""
    prim = node.prim
    if prim.kind is Kind.ELEMENTWISE:
        return "elementwise"
    if prim.kind is Kind.CONST:
        return "literal" if uniform_value(node) is not None else None
    m = prim.index_map
    if m is None or not m.inline(node):
        return None
    if m.through is not None:
        return "index"
    return "select" if m.pieces is not None else None


def is_view(node: Node) -> bool:
    """A node that is a NumPy view of its input (a plan's `ViewStep`)."""
    return node.prim.index_map is not None and node.prim.index_map.view


def general_view(node: Node) -> bool:
    """A view even where no loop can compute it (a reshape of any shape)."""
    return node.prim.index_map is not None and node.prim.index_map.general_view


def node_cost(node: Node) -> int:
    scalar = node.prim.scalar
    if isinstance(scalar, str) and ("M." in scalar or "**" in scalar):
        return MATH_COST
    return 1


# ----------------------------------------------------------------------------------------------
# Building the ops of one loop


class LoopBuilder:
    """Emits the ops that evaluate values at symbolic indices of one iteration space."""

    def __init__(self, planner: Planner, shape: tuple[int, ...], members: set[Var]):
        self.planner = planner
        self.shape = shape
        self.members = members  # materialized values this loop computes (its roots)
        self.ops: list[Op] = []
        self.memo: dict[tuple, str] = {}
        self.depths: dict[str, int] = {f"i{a}": a + 1 for a in range(len(shape))}
        self.loaded: dict[Var, bool] = {}  # materialized value read -> always at its own point
        self.computed: set[Var] = set()

    def _new(self, prefix: str) -> str:
        return f"{prefix}{len(self.ops)}"

    def _depth_of_index(self, index: tuple[Index, ...]) -> int:
        return max([self.depths[ix.var] for ix in index if ix.var is not None], default=0)

    def _add(self, op: Op) -> str:
        self.ops.append(op)
        self.depths[op.id] = op.depth
        return op.id

    def value(self, var: Var, index: tuple[Index, ...]) -> str:
        key = (var, None) if var in self.planner.literals else (var, index)
        if key not in self.memo:
            self.memo[key] = self._emit(var, index)
        return self.memo[key]

    def _emit(self, var: Var, index: tuple[Index, ...]) -> str:
        planner = self.planner
        at_own_point = var.shape == self.shape and index == identity_index(len(self.shape))
        node = planner.producer.get(var)
        literal = planner.literal_of(var)
        if literal is not None:
            return self._add(Literal(self._new("c"), literal))
        if var in planner.identities:
            return self._identity(var, index)
        if var in self.members and at_own_point:
            return self._compute(node, index)
        buffer = planner.buffer_for_load(var)
        if buffer is not None:
            self.loaded[var] = self.loaded.get(var, True) and at_own_point
            if var in self.members:  # read at another point: the planner must split the loop
                self.loaded[var] = False
            return self._add(Load(self._new("v"), buffer, index, self._depth_of_index(index)))
        return self._compute(node, index)

    def _compute(self, node: Node, index: tuple[Index, ...]) -> str:
        kind = inline_kind(node)
        self.computed.add(node.out)
        if kind == "elementwise":
            args = tuple(self.value(v, index) for v in node.inputs)
            depth = max([self.depths[a] for a in args], default=0)
            return self._add(Compute(self._new("v"), node, args, depth))
        if kind == "index":
            return self.value(node.inputs[0], index_through(node, index))
        if kind == "select":
            return self._pieces(node, index)
        raise AssertionError(f"cannot compute {node.prim.name} inline")  # pragma: no cover

    def _identity(self, var: Var, index: tuple[Index, ...]) -> str:
        """An identity matrix, computed: 1 where the two indices are equal."""
        a, b = index
        depth = max(self.depths[ix.var] if ix.var is not None else 0 for ix in index)
        if a.var is None and b.var is None:
            value = np.ones((), var.dtype) if a.offset == b.offset else np.zeros((), var.dtype)
            return self._add(Literal(self._new("c"), value))
        equal = self._add(Equal(self._new("g"), a, b, depth))
        one = self._add(Literal(self._new("c"), np.ones((), var.dtype)))
        zero = self._zero(var.dtype)
        return self._add(Select(self._new("v"), equal, one, zero, var.dtype, depth))

    def _zero(self, dtype: np.dtype) -> str:
        """The loop's one literal zero of `dtype` (the value outside every piece)."""
        key = ("zero", np.dtype(dtype))
        if key not in self.memo:
            self.memo[key] = self._add(Literal(self._new("c"), np.zeros((), dtype)))
        return self.memo[key]

    def _piece(self, base: Index, length: int) -> tuple[Index | None, str | None]:
        """The index into a piece of `length` along one axis, and its in-range condition."""
        if base.var is None:  # known now: inside or not
            return (
                (Index(None, 0, base.offset), None) if 0 <= base.offset < length else (None, None)
            )
        depth = self.depths[base.var]
        clamp = self._add(Clamp(self._new("j"), base, length, depth))
        self.depths[clamp] = depth
        inside = self._add(Inside(self._new("g"), base, length, depth))
        return Index(clamp), inside

    def _guard(self, conds: list[str], value: str, dtype) -> str:
        if not conds:
            return value
        zero = self._zero(dtype)
        cond = conds[0]
        for other in conds[1:]:  # and of conditions: nested selects keep ops simple
            value = self._add(
                Select(
                    self._new("v"),
                    other,
                    value,
                    zero,
                    dtype,
                    max(self.depths[other], self.depths[value]),
                )
            )
        return self._add(
            Select(
                self._new("v"),
                cond,
                value,
                zero,
                dtype,
                max(self.depths[cond], self.depths[value], self.depths[zero]),
            )
        )

    def _pieces(self, node: Node, index: tuple[Index, ...]) -> str:
        """A piecewise node (its index map's `pieces`): the first piece whose windows hold the
        index, else 0 (`zero_outside`) or the last piece, read at a clamped index."""
        m = node.prim.index_map
        dtype = node.out.dtype
        pieces = m.pieces(node, index)
        if not pieces:  # nothing to read (empty inputs): no point is ever computed
            return self._zero(dtype)
        windows = [ax for piece in pieces for ax in piece.axes if isinstance(ax, P.Window)]
        if all(w.base.var is None for w in windows):  # the piece is known now
            for piece in pieces:
                if all(
                    0 <= w.base.offset < w.length for w in piece.axes if isinstance(w, P.Window)
                ):
                    inner = tuple(
                        Index(None, 0, ax.base.offset) if isinstance(ax, P.Window) else ax
                        for ax in piece.axes
                    )
                    return self.value(node.inputs[piece.input], inner)
            if m.zero_outside:
                return self._zero(dtype)
            raise AssertionError("piecewise index out of range")  # pragma: no cover
        result = None
        for piece in reversed(pieces):
            inner, conds = [], []
            for ax in piece.axes:
                if not isinstance(ax, P.Window):
                    inner.append(ax)
                elif not ax.guard:  # takes everything past the other pieces
                    depth = self.depths[ax.base.var]
                    clamp = self._add(Clamp(self._new("j"), ax.base, ax.length, depth))
                    self.depths[clamp] = depth
                    inner.append(Index(clamp))
                else:
                    piece_ix, cond = self._piece(ax.base, ax.length)
                    if piece_ix is None:
                        break
                    inner.append(piece_ix)
                    if cond is not None:
                        conds.append(cond)
            else:
                value = self.value(node.inputs[piece.input], tuple(inner))
                if result is None and not m.zero_outside:
                    result = value
                elif result is None:
                    result = self._guard(conds, value, dtype)
                else:  # one guarded window: this piece, else the later ones
                    (cond,) = conds
                    depth = max(self.depths[cond], self.depths[value], self.depths[result])
                    result = self._add(Select(self._new("v"), cond, value, result, dtype, depth))
        return self._zero(dtype) if result is None else result


def points_read(node: Node, x: Var, index: tuple[Index, ...]) -> set[tuple[Index, ...]]:
    """The points of input `x` that computing `node` at `index` inline evaluates (an axis read
    through a window of a piecewise node is a new loop variable, named after the window)."""
    kind = inline_kind(node)
    if kind == "elementwise":
        return {index} if x.shape == node.out.shape else {identity_index(x.ndim)}
    if kind == "index":
        return {index_through(node, index)}
    if kind == "literal" or kind is None:
        return set()
    out = set()
    for piece in node.prim.index_map.pieces(node, index):
        if node.inputs[piece.input] is x:
            out.add(
                tuple(
                    Index(f"piece{piece.input}:{ax.base}:{ax.length}")
                    if isinstance(ax, P.Window)
                    else ax
                    for ax in piece.axes
                )
            )
    return out


def constant_index(offset: int) -> Index:
    return Index(None, 0, offset)


def index_through(node: Node, index: tuple[Index, ...]) -> tuple[Index, ...]:
    """The index into node.inputs[0] that the index `index` into node.out reads."""
    return node.prim.index_map.through(node, index, constant_index)


# ----------------------------------------------------------------------------------------------
# The planner
