"""The fusion plan: an optimised graph partitioned into the steps a fused backend runs.

The plan is backend-neutral (no Numba here): the CPU code generator and the CUDA code generator
consume the same plan. It is concrete: every shape, offset and constant is known, because a graph
is traced for one argument signature. A generator decides which of those numbers it bakes into
its source and which it passes at run time (the CPU generator passes sizes, offsets and most
constants, so that one compiled kernel serves every shape with the same structure).

Data structure
--------------
`Plan`
    `buffers`  every array the program touches (`Buffer`: name, shape, dtype, role)
    `inputs`   the buffer of each graph input;   `outputs`: the buffer of each graph output
    `steps`    in execution order, each one of:

`FusedLoop(name, shape, ops, stores, reductions)`
    One loop nest over the iteration space `shape` (axis 0 outermost; loop index `i<a>` for axis a).
    `ops` is a straight-line SSA program evaluated at each point of the space; every op has an
    `id` (its value's name) and a `depth`: the number of outer loop levels its value depends on
    (0: loop invariant, len(shape): innermost), so a generator may hoist it.
        `Load(id, buffer, index)`       read `buffer[index]`
        `Literal(id, value)`            a constant (a 0-d array; dtype = value.dtype)
        `Compute(id, node, args)`       an elementwise IR node applied to op ids `args`
        `Clamp(id, base, length)`       an index value: `base` clamped to [0, length)
        `Inside(id, base, length)`      a bool: 0 <= base < length
        `Select(id, cond, then, other)` `then if cond else other` (pieces of unslice/concatenate)
        `Equal(id, a, b)`               a bool: index a == index b (only with `computed_identity`:
                                        an identity-matrix constant, e.g. a jacobian's seed,
                                        is then computed, `1 if i == j else 0`, not read)
    An index is a tuple with one `Index(var, stride, offset)` per axis of the indexed buffer:
    `offset + stride * var`, where `var` is a loop index "i<a>", the id of a `Clamp` op, or None
    (the constant `offset`). Broadcasting, transposes, slices, unslices and concatenations are
    all expressed through indices: they never copy data.
    `stores`: `Store(value, buffer, index)` writes an op's value at every point.
    `scans`: `Scan(value, buffer, index, op, node)` combines an op's value along the last loop
    axis, storing each running result at `index` of `buffer` (the loop's space is the scanned
    array's, the scanned axis moved last; a loop with a scan computes nothing else).
    `reductions`: `Reduction(value, buffer, axes, op, node)` combines an op's value over the loop
    axes `axes` (op is "sum", "prod", "max" or "min"); `buffer` has the shape of the kept axes.
`MatmulStep(out, a, b)`     out = a @ b over buffers (batched over leading dims; BLAS on the CPU)
`ViewStep(out, src, node)`  out = a view of src through a shape node (reshape, transpose, slice,
                            broadcast); NumPy's semantics (a reshape of a non-contiguous array
                            copies)
`EvalStep(out, node, args)` out = node.prim.impl(*args) (the reference implementation): the
                            fallback for what a backend cannot fuse (`supports` says so)

Partitioning rules
------------------
- Values are *materialized* (get a buffer) when they must be: graph outputs, reduction results,
  matrix product operands and results, inputs of a general reshape or of an `EvalStep`. An
  expensive value (with a transcendental function in it) is also materialized when a broadcast
  would recompute it many times, or when several loops need it; a cheap one is recomputed where
  it is used, which moves fewer bytes than storing and reloading it.
- Every other elementwise or shape node is computed inline, in each loop that needs it, at the
  index that loop needs it at.
- A materialized value computed by a loop is that loop's *root*. Roots with the same iteration
  space share one loop (one pass over the data) unless a dependency forbids it: a root may read
  another root of its own loop only at the same point; anything else (a transposed read, a
  reduction's result) must come from an earlier step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from collections.abc import Callable

import numpy as np

from . import primitives as P
from .ir import Graph, Node, Var
from .primitives import Kind

# Inline cost of an op: a call into the math library (or pow) counts as many arithmetic ops.
MATH_COST = 20
# Above this inline cost a value read through a broadcast, or by several loops, is materialized.
RECOMPUTE_LIMIT = 8
# A value computed inline at more points than this is stored once instead (see _bound_inlining).
MAX_POINTS = 4
# Chains of inline nodes are cut (a value stored) every this many nodes.
MAX_INLINE_DEPTH = 48


# ----------------------------------------------------------------------------------------------
# The data structure


@dataclass(eq=False)
class Buffer:
    """An array of the program. role: "input", "const", "temp", "output" or "view"."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    role: str
    input_index: int | None = None  # role "input": position among the graph inputs
    value: np.ndarray | None = None  # role "const": the array (read-only)
    var: Var | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"{self.name}:{np.dtype(self.dtype).name}{list(self.shape)}"


@dataclass(frozen=True)
class Index:
    """One axis of an array index: `offset + stride * var` (var None: the constant `offset`)."""

    var: str | None
    stride: int = 1
    offset: int = 0

    def shifted(self, stride: int, offset: int) -> Index:
        """`offset + stride * self`."""
        if self.var is None:
            return Index(None, 0, offset + stride * self.offset)
        return Index(self.var, self.stride * stride, offset + stride * self.offset)

    def __str__(self) -> str:
        if self.var is None:
            return str(self.offset)
        text = self.var if self.stride == 1 else f"{self.stride}*{self.var}"
        return text if self.offset == 0 else f"{text}{self.offset:+d}"


def identity_index(ndim: int) -> tuple[Index, ...]:
    return tuple(Index(f"i{a}") for a in range(ndim))


@dataclass(frozen=True)
class Load:
    id: str
    buffer: Buffer
    index: tuple[Index, ...]
    depth: int


@dataclass(frozen=True)
class Literal:
    id: str
    value: np.ndarray  # 0-d
    depth: int = 0


@dataclass(frozen=True)
class Compute:
    id: str
    node: Node
    args: tuple[str, ...]
    depth: int


@dataclass(frozen=True)
class Clamp:
    id: str
    base: Index
    length: int
    depth: int


@dataclass(frozen=True)
class Inside:
    id: str
    base: Index
    length: int
    depth: int


@dataclass(frozen=True)
class Select:
    id: str
    cond: str
    then: str
    other: str
    dtype: np.dtype
    depth: int


@dataclass(frozen=True)
class Equal:
    id: str
    a: Index
    b: Index
    depth: int


Op = Load | Literal | Compute | Clamp | Inside | Select | Equal


@dataclass(frozen=True)
class Store:
    value: str
    buffer: Buffer
    index: tuple[Index, ...]


@dataclass(frozen=True)
class Reduction:
    value: str
    buffer: Buffer
    axes: tuple[int, ...]
    op: str
    node: Node


@dataclass(frozen=True)
class Scan:
    """A running reduction: `op` of `value` along the loop's last axis, every partial result
    stored at `index` of `buffer` (op: the name of a monoid, see primitives.MONOIDS)."""

    value: str
    buffer: Buffer
    index: tuple[Index, ...]
    op: str
    node: Node


@dataclass(eq=False)
class FusedLoop:
    name: str
    shape: tuple[int, ...]
    ops: list[Op]
    stores: list[Store]
    reductions: list[Reduction]
    roots: list[Var] = field(default_factory=list)
    scans: list[Scan] = field(default_factory=list)

    @property
    def reads(self) -> list[Buffer]:
        return _unique(op.buffer for op in self.ops if isinstance(op, Load))

    @property
    def writes(self) -> list[Buffer]:
        return _unique(
            [s.buffer for s in self.stores]
            + [r.buffer for r in self.reductions]
            + [s.buffer for s in self.scans]
        )

    def op_types(self) -> dict[str, np.dtype]:
        """The dtype of every op's value (index values are "index")."""
        types: dict[str, np.dtype] = {}
        for op in self.ops:
            if isinstance(op, Load):
                types[op.id] = np.dtype(op.buffer.dtype)
            elif isinstance(op, Literal):
                types[op.id] = op.value.dtype
            elif isinstance(op, Compute):
                types[op.id] = op.node.out.dtype
            elif isinstance(op, (Inside, Equal)):
                types[op.id] = np.dtype(np.bool_)
            elif isinstance(op, Select):
                types[op.id] = np.dtype(op.dtype)
        return types


@dataclass(eq=False)
class MatmulStep:
    out: Buffer
    a: Buffer
    b: Buffer
    node: Node

    @property
    def reads(self) -> list[Buffer]:
        return _unique([self.a, self.b])

    @property
    def writes(self) -> list[Buffer]:
        return [self.out]


@dataclass(eq=False)
class ViewStep:
    out: Buffer
    src: Buffer
    node: Node

    @property
    def reads(self) -> list[Buffer]:
        return [self.src]

    @property
    def writes(self) -> list[Buffer]:
        return [self.out]


@dataclass(eq=False)
class EvalStep:
    out: Buffer
    node: Node
    args: list[Buffer]

    @property
    def reads(self) -> list[Buffer]:
        return _unique(self.args)

    @property
    def writes(self) -> list[Buffer]:
        return [self.out]


Step = FusedLoop | MatmulStep | ViewStep | EvalStep


@dataclass(eq=False)
class Plan:
    graph: Graph
    buffers: list[Buffer]
    inputs: list[Buffer]
    outputs: list[Buffer]
    steps: list[Step]

    @property
    def loops(self) -> list[FusedLoop]:
        return [s for s in self.steps if isinstance(s, FusedLoop)]

    def describe(self) -> str:
        """One line per step, e.g. `loop k0 f64[1000]: sin cos ... -> out0, sum->out1`."""
        lines = []
        for step in self.steps:
            if isinstance(step, FusedLoop):
                names = [op.node.prim.name for op in step.ops if isinstance(op, Compute)]
                outs = _unique(s.buffer.name for s in step.stores)
                outs += [f"{r.op}{list(r.axes)}->{r.buffer.name}" for r in step.reductions]
                outs += [f"running {s.op}->{s.buffer.name}" for s in step.scans]
                reads = ", ".join(b.name for b in step.reads)
                lines.append(
                    f"loop {step.name} {list(step.shape)}: reads [{reads}], "
                    f"{len(names)} ops ({' '.join(names)}) -> {', '.join(outs)}"
                )
            elif isinstance(step, MatmulStep):
                lines.append(f"matmul {step.out!r} = {step.a.name} @ {step.b.name}")
            elif isinstance(step, ViewStep):
                lines.append(f"view {step.out!r} = {step.node.prim.name}({step.src.name})")
            else:
                args = ", ".join(b.name for b in step.args)
                lines.append(f"eval {step.out!r} = {step.node.prim.name}({args})")
        return "\n".join(lines)


def _unique(items) -> list:
    seen, out = set(), []
    for item in items:
        if id(item) not in seen:
            seen.add(id(item))
            out.append(item)
    return out


# ----------------------------------------------------------------------------------------------
# Node classification


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


def _is_view(node: Node) -> bool:
    """A node that is a NumPy view of its input (a plan's `ViewStep`)."""
    return node.prim.index_map is not None and node.prim.index_map.view


def _general_view(node: Node) -> bool:
    """A view even where no loop can compute it (a reshape of any shape)."""
    return node.prim.index_map is not None and node.prim.index_map.general_view


def node_cost(node: Node) -> int:
    scalar = node.prim.scalar
    if isinstance(scalar, str) and ("M." in scalar or "**" in scalar):
        return MATH_COST
    return 1


# ----------------------------------------------------------------------------------------------
# Building the ops of one loop


class _LoopBuilder:
    """Emits the ops that evaluate values at symbolic indices of one iteration space."""

    def __init__(self, planner: _Planner, shape: tuple[int, ...], members: set[Var]):
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
            return self.value(node.inputs[0], _index_through(node, index))
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
        return self._add(Literal(self._new("c"), np.zeros((), dtype)))

    def _piece(self, base: Index, length: int) -> tuple[Index | None, str | None]:
        """The index into a piece of `length` along one axis, and its in-range condition."""
        if base.var is None:  # known now: inside or not
            return (Index(None, 0, base.offset), None) if 0 <= base.offset < length else (None, None)
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
            value = self._add(Select(self._new("v"), other, value, zero, dtype,
                                     max(self.depths[other], self.depths[value])))
        return self._add(Select(self._new("v"), cond, value, zero, dtype,
                                max(self.depths[cond], self.depths[value], self.depths[zero])))

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
                if all(0 <= w.base.offset < w.length for w in piece.axes if isinstance(w, P.Window)):
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


def _points_read(node: Node, x: Var, index: tuple[Index, ...]) -> set[tuple[Index, ...]]:
    """The points of input `x` that computing `node` at `index` inline evaluates (an axis read
    through a window of a piecewise node is a new loop variable, named after the window)."""
    kind = inline_kind(node)
    if kind == "elementwise":
        return {index} if x.shape == node.out.shape else {identity_index(x.ndim)}
    if kind == "index":
        return {_index_through(node, index)}
    if kind == "literal" or kind is None:
        return set()
    out = set()
    for piece in node.prim.index_map.pieces(node, index):
        if node.inputs[piece.input] is x:
            out.add(tuple(
                Index(f"piece{piece.input}:{ax.base}:{ax.length}") if isinstance(ax, P.Window)
                else ax
                for ax in piece.axes
            ))
    return out


def _constant_index(offset: int) -> Index:
    return Index(None, 0, offset)


def _index_through(node: Node, index: tuple[Index, ...]) -> tuple[Index, ...]:
    """The index into node.inputs[0] that the index `index` into node.out reads."""
    return node.prim.index_map.through(node, index, _constant_index)


# ----------------------------------------------------------------------------------------------
# The planner


class _Planner:
    def __init__(self, graph: Graph, supports: Callable[[Node], bool], computed_identity: bool = False):
        self.graph = graph
        self.supports = supports
        self.producer: dict[Var, Node] = graph.producers()
        self.users: dict[Var, list[Node]] = graph.uses()
        self.order: dict[Var, int] = {v: i for i, v in enumerate(graph.inputs)}
        for i, node in enumerate(graph.nodes):
            self.order[node.out] = len(graph.inputs) + i
        self.literals: dict[Var, np.ndarray] = {}
        self.identities: set[Var] = set()
        for node in graph.nodes:
            u = uniform_value(node)
            if u is not None:
                self.literals[node.out] = u
            elif computed_identity and _is_identity(node):
                self.identities.add(node.out)

    # ---- classification
    def literal_of(self, var: Var) -> np.ndarray | None:
        return self.literals.get(var)

    def fusable(self, node: Node) -> bool:
        if node.out in self.identities:
            return self.supports(node)
        return inline_kind(node) is not None and self.supports(node)

    def is_root_kind(self, node: Node) -> bool:
        return self.fusable(node) or (_combines(node) and self.supports(node))

    # ---- one round of partitioning with the materialized set `self.mat`
    def run(self) -> Plan:
        self.mat: set[Var] = set()
        self._mandatory()
        self._bound_inlining()
        for _ in range(6):
            self._partition()
            extra = self._recompute_too_costly()
            if not extra:
                break
            self.mat |= extra
        return self._finish()

    def _mandatory(self) -> None:
        """Values that need a buffer whatever the grouping (plus expensive broadcast inputs)."""
        g = self.graph
        cost: dict[Var, int] = {}
        for node in g.nodes:
            v = node.out
            if node.prim.kind is Kind.CONST:
                continue
            if self.fusable(node):
                cost[v] = node_cost(node) * (inline_kind(node) == "elementwise") + sum(
                    cost.get(x, 0) for x in node.inputs if x not in self.mat
                )
                if inline_kind(node) == "index" and v.size > node.inputs[0].size:
                    src = self._through_index_nodes(node.inputs[0])
                    if cost.get(src, 0) > RECOMPUTE_LIMIT // 2:
                        self.mat.add(src)
                continue
            if _combines(node) and self.supports(node):
                self.mat.add(v)  # its input is computed in the loop that reduces it
                continue
            if not _general_view(node):  # a general reshape is a view of its input
                self.mat.add(v)
            for x in node.inputs:
                self._need_buffer_target(x)
        for v in g.outputs:
            node = self.producer.get(v)
            if node is not None and (not _general_view(node) or self.fusable(node)):
                self.mat.add(v)
        self.mat = {v for v in self.mat if not self._is_buffer_leaf(v)}

    def _bound_inlining(self) -> None:
        """Keep every loop's expression linear in the graph (the cost model of
        docs/how-it-works.md): in one pass backwards over the graph, find for each value computed
        inline the points at which its consumers will evaluate it (its own point, points shifted
        by slices and concatenations, transposed points). A value needed at more than one point
        whose recomputation costs more than storing it, or at more than MAX_POINTS points, is
        materialized: a loop then reads it from memory at each point. Then, forwards, no chain
        of inline nodes grows deeper than MAX_INLINE_DEPTH (which also bounds the recursion of
        building a loop)."""
        users = self.users
        cost: dict[Var, int] = {}  # inline cost of computing a value at one point
        for node in self.graph.nodes:
            v = node.out
            if self.fusable(node) and v not in self.mat:
                own = node_cost(node) if inline_kind(node) == "elementwise" else 0
                cost[v] = own + sum(cost.get(x, 0) for x in node.inputs)
        points: dict[Var, set] = {}
        for node in reversed(self.graph.nodes):
            v = node.out
            if not self.fusable(node) or v in self.mat or self._is_buffer_leaf(v):
                continue
            here: set = set()
            for user in users.get(v, ()):
                out = user.out
                at = {identity_index(out.ndim)} if out in self.mat or out not in points else points[out]
                for index in at:
                    here |= _points_read(user, v, index)
                    if len(here) > MAX_POINTS:
                        break
            if len(here) > MAX_POINTS or (len(here) > 1 and cost.get(v, 0) > RECOMPUTE_LIMIT):
                self.mat.add(v)
                continue
            points[v] = here
        depth: dict[Var, int] = {}
        for node in self.graph.nodes:
            v = node.out
            if not self.fusable(node) or v in self.mat:
                continue
            depth[v] = 1 + max((depth.get(x, 0) for x in node.inputs), default=0)
            if depth[v] > MAX_INLINE_DEPTH and node.prim.kind is not Kind.CONST:
                self.mat.add(v)
                depth[v] = 0
        self.mat = {v for v in self.mat if not self._is_buffer_leaf(v)}

    def _is_buffer_leaf(self, v: Var) -> bool:
        """Inputs and non-uniform constant arrays are buffers already."""
        node = self.producer.get(v)
        return node is None or (
            node.prim.kind is Kind.CONST and v not in self.literals and v not in self.identities
        )

    def _through_index_nodes(self, v: Var) -> Var:
        while v in self.producer and inline_kind(self.producer[v]) == "index":
            v = self.producer[v].inputs[0]
        return v

    def _need_buffer_target(self, v: Var) -> None:
        """Make `v` available as an array: materialize it or what a view chain of it starts at."""
        while v in self.producer:
            node = self.producer[v]
            if _is_view(node):
                v = node.inputs[0]
                continue
            break
        if not self._is_buffer_leaf(v):
            self.mat.add(v)

    # ---- buffers
    def _partition(self) -> None:
        self.buffers: list[Buffer] = []
        self.buffer_of: dict[Var, Buffer] = {}
        self.steps: list[Step] = []
        self.step_of: dict[int, Step] = {}  # id(buffer) -> producing step
        self.preds: dict[int, set[int]] = {}  # id(step) -> ids of steps that must run before
        self.step_by_id: dict[int, Step] = {}
        self.groups: list[_Group] = []
        self.group_of: dict[Var, _Group] = {}
        outputs = set(self.graph.outputs)
        for i, v in enumerate(self.graph.inputs):
            self._new_buffer(v, "input", input_index=i)
        for node in self.graph.nodes:
            v = node.out
            if node.prim.kind is Kind.CONST and v not in self.literals and v not in self.identities:
                self._new_buffer(v, "const", value=node.params["value"])
        for node in self.graph.nodes:
            v = node.out
            if v not in self.mat:
                continue
            role = "output" if v in outputs else "temp"
            if self.is_root_kind(node):
                self._add_root(node, role)
            elif node.prim.kind is Kind.MATMUL and self.supports(node):
                a, b = (self.array_of(x) for x in node.inputs)
                out = self._new_buffer(v, role)
                self._add_step(MatmulStep(out, a, b, node), [a, b], [out])
            else:
                args = [self.array_of(x) for x in node.inputs]
                out = self._new_buffer(v, role)
                self._add_step(EvalStep(out, node, args), args, [out])

    def _new_buffer(self, var: Var, role: str, **kw) -> Buffer:
        prefix = {"input": "a", "const": "k", "temp": "t", "output": "r", "view": "w"}[role]
        buf = Buffer(f"{prefix}{len(self.buffers)}", var.shape, var.dtype, role, var=var, **kw)
        self.buffers.append(buf)
        self.buffer_of[var] = buf
        return buf

    def buffer_for_load(self, var: Var) -> Buffer | None:
        """The buffer a loop reads `var` from, if it has one (or is a view of one)."""
        buf = self.buffer_of.get(var)
        if buf is not None and buf.role != "view":
            return buf
        node = self.producer.get(var)
        if node is not None and _general_view(node) and not self.fusable(node):
            return self.array_of(var)
        return None  # computed in the loop (views of it made for matmuls are not read here)

    def array_of(self, var: Var) -> Buffer:
        """`var` as an array: its buffer, or a view step over the buffer of what it views."""
        if var in self.buffer_of:
            return self.buffer_of[var]
        node = self.producer[var]
        assert _is_view(node), node.prim
        src = self.array_of(node.inputs[0])
        out = self._new_buffer(var, "view")
        self._add_step(ViewStep(out, src, node), [src], [out])
        return out

    def _add_step(self, step: Step, reads: list[Buffer], writes: list[Buffer]) -> None:
        self.steps.append(step)
        self.step_by_id[id(step)] = step
        self.preds[id(step)] = {id(self.step_of[id(b)]) for b in reads if id(b) in self.step_of}
        for b in writes:
            self.step_of[id(b)] = step

    # ---- grouping roots into loops
    def _space(self, node: Node) -> tuple[int, ...]:
        if node.prim.kind is Kind.SCAN:
            return tuple(node.out.shape[a] for a in _scan_order(node))
        return node.inputs[0].shape if node.prim.kind is Kind.REDUCE else node.out.shape

    def _analyse(self, node: Node, members: set[Var]) -> _LoopBuilder:
        lb = _LoopBuilder(self, self._space(node), members)
        if node.prim.kind is Kind.SCAN:
            lb.value(node.inputs[0], _scan_index(node))
        elif node.prim.kind is Kind.REDUCE:
            lb.value(node.inputs[0], identity_index(len(lb.shape)))
        else:
            lb.value(node.out, identity_index(len(lb.shape)))
        return lb

    def _ancestors(self, step_ids: set[int]) -> set[int]:
        seen: set[int] = set()
        stack = list(step_ids)
        while stack:
            s = stack.pop()
            for p in self.preds.get(s, ()):
                if p not in seen:
                    seen.add(p)
                    stack.append(p)
        return seen

    def _add_root(self, node: Node, role: str) -> None:
        v = node.out
        space = self._space(node)
        out = self._new_buffer(v, role)
        lb = self._analyse(node, {v})
        hard, soft = set(), set()
        for u, own_point in lb.loaded.items():
            step = self.step_of.get(id(self.buffer_for_load(u)))
            if step is None:
                continue
            group = step if isinstance(step, _Group) else None
            if own_point and group is not None and u in group.members and u not in self._reduced(group):
                soft.add(id(step))
            else:
                hard.add(id(step))
        before = hard | self._ancestors(hard) | self._ancestors(soft)
        scan = node.prim.kind is Kind.SCAN  # a loop of its own: its last axis runs in order
        candidates = [
            g for g in self.groups
            if g.shape == space and id(g) not in before and not g.scans and not scan
        ]
        chosen = None
        for g in candidates:
            if id(g) in soft:
                chosen = g
                break
        if chosen is None and candidates:
            reads = {id(self.buffer_for_load(u)) for u in lb.loaded}
            chosen = max(candidates, key=lambda g: len(reads & g.reads))
        if chosen is None:
            chosen = _Group(space, scans=scan)
            self.groups.append(chosen)
            self.steps.append(chosen)
            self.step_by_id[id(chosen)] = chosen
            self.preds[id(chosen)] = set()
        chosen.members.add(v)
        chosen.roots.append(node)
        chosen.reads |= {id(self.buffer_for_load(u)) for u in lb.loaded}
        self.preds[id(chosen)] |= (hard | soft) - {id(chosen)}
        self.step_of[id(out)] = chosen
        self.group_of[v] = chosen

    def _reduced(self, group: _Group) -> set[Var]:
        return {n.out for n in group.roots if _combines(n)}

    def _recompute_too_costly(self) -> set[Var]:
        """Inline values that several loops compute and that cost more than storing them."""
        seen_in: dict[Var, int] = {}
        for g in self.groups:
            lb = self._build_group(g)[0]
            for v in lb.computed:
                seen_in[v] = seen_in.get(v, 0) + 1
        extra = set()
        for v, count in seen_in.items():
            if count > 1 and v not in self.mat and self._cost(v) > RECOMPUTE_LIMIT:
                extra.add(v)
        return extra

    def _cost(self, v: Var, memo=None) -> int:
        memo = {} if memo is None else memo
        if v in memo:
            return memo[v]
        node = self.producer.get(v)
        if node is None or v in self.literals or node.prim.kind is Kind.CONST:
            return 0
        if v in self.mat and memo:
            return 0
        memo[v] = node_cost(node) if inline_kind(node) == "elementwise" else 0
        memo[v] += sum(self._cost(x, memo) for x in node.inputs)
        return memo[v]

    def _build_group(self, g: _Group) -> tuple[_LoopBuilder, list[Store], list[Reduction], list[Scan]]:
        lb = _LoopBuilder(self, g.shape, set(g.members))
        ident = identity_index(len(g.shape))
        stores, reductions, scans = [], [], []
        for node in sorted(g.roots, key=lambda n: self.order[n.out]):
            buf = self.buffer_of[node.out]
            if node.prim.kind is Kind.SCAN:
                index = _scan_index(node)
                value = lb.value(node.inputs[0], index)
                scans.append(Scan(value, buf, index, node.prim.monoid.name, node))
            elif node.prim.kind is Kind.REDUCE:
                value = lb.value(node.inputs[0], ident)
                op = node.prim.monoid.name
                reductions.append(Reduction(value, buf, tuple(node.params["axes"]), op, node))
            else:
                stores.append(Store(lb.value(node.out, ident), buf, ident))
        return lb, stores, reductions, scans

    def _finish(self) -> Plan:
        # loops
        made: dict[int, Step] = {}
        for k, g in enumerate(self.groups):
            lb, stores, reductions, scans = self._build_group(g)
            loop = FusedLoop(f"k{k}", g.shape, lb.ops, stores, reductions,
                             [n.out for n in sorted(g.roots, key=lambda n: self.order[n.out])],
                             scans)
            made[id(g)] = loop
        # execution order: a topological order of the steps, stable in creation order
        order, done = [], set()
        self._positions = {id(s): i for i, s in enumerate(self.steps)}
        for step in self.steps:  # depth first, without recursion (plans can be long)
            if id(step) in done:
                continue
            done.add(id(step))
            stack = [(id(step), iter(sorted(self.preds[id(step)], key=self._position)))]
            while stack:
                s, pending = stack[-1]
                for p in pending:
                    if p not in done:
                        done.add(p)
                        stack.append((p, iter(sorted(self.preds[p], key=self._position))))
                        break
                else:
                    stack.pop()
                    order.append(s)
        steps = [made.get(s, self.step_by_id[s]) for s in order]
        outputs = []
        for v in self.graph.outputs:
            outputs.append(self.buffer_of[v] if v in self.buffer_of else self.array_of(v))
        # array_of may have added view steps for outputs: append them in order
        for step in self.steps:
            if isinstance(step, ViewStep) and id(step) not in done:
                steps.append(step)
                done.add(id(step))
        inputs = [self.buffer_of[v] for v in self.graph.inputs]
        return Plan(self.graph, self.buffers, inputs, outputs, steps)

    def _position(self, step_id: int) -> int:
        return self._positions.get(step_id, -1)


@dataclass(eq=False)
class _Group:
    """A loop being formed: its iteration space and the roots it computes."""

    shape: tuple[int, ...]
    members: set[Var] = field(default_factory=set)
    roots: list[Node] = field(default_factory=list)
    reads: set[int] = field(default_factory=set)
    scans: bool = False  # computes a scan (and nothing else)


def _combines(node: Node) -> bool:
    """A reduction or a scan: a loop root whose value combines its input's (with a monoid)."""
    return node.prim.kind in (Kind.REDUCE, Kind.SCAN)


def _scan_order(node: Node) -> tuple[int, ...]:
    """The axes of a scan's loop: the array's, the scanned axis moved last."""
    axis = node.params["axis"]
    return tuple(a for a in range(node.out.ndim) if a != axis) + (axis,)


def _scan_index(node: Node) -> tuple[Index, ...]:
    """The index into a scan's input (and output) at each point of its loop."""
    order = _scan_order(node)
    return tuple(Index(f"i{order.index(a)}") for a in range(node.out.ndim))


def plan(
    graph: Graph, supports: Callable[[Node], bool] = lambda node: True, computed_identity: bool = False
) -> Plan:
    """Partition an optimised graph into fused loops, matrix products, views and fallbacks.

    `supports(node)` says whether the backend can compute this node inside a loop (or, for a
    matmul, as a matmul step); unsupported nodes become `EvalStep`s. With `computed_identity`,
    identity-matrix constants are computed in the loops that read them (`Equal` ops) instead of
    being read from memory: a jacobian's or hessian's seed then costs no memory traffic.
    """
    return _Planner(graph, supports, computed_identity).run()


def _is_identity(node: Node) -> bool:
    """A constant that is a square identity matrix."""
    if node.prim.kind is not Kind.CONST:
        return False
    value = node.params["value"]
    if value.ndim != 2 or value.shape[0] != value.shape[1] or value.shape[0] < 2:
        return False
    return bool(np.array_equal(value, np.eye(value.shape[0], dtype=value.dtype)))


# ----------------------------------------------------------------------------------------------
# The plan's meaning, executed with NumPy (a reference for code generators and for tests)


def evaluate(plan: Plan, args: list[np.ndarray]) -> list[np.ndarray]:
    """Run a plan with NumPy, each loop evaluated over its whole iteration space at once.

    This is the executable definition of the ops: a generator's kernel must compute what this
    computes (up to rounding and the order of reductions)."""
    arrays: dict[int, np.ndarray] = {}
    for buf, a in zip(plan.inputs, args, strict=True):
        arrays[id(buf)] = np.asarray(a, dtype=buf.dtype)
    for buf in plan.buffers:
        if buf.role == "const":
            arrays[id(buf)] = np.broadcast_to(buf.value, buf.shape)
    with np.errstate(all="ignore"):
        for step in plan.steps:
            if isinstance(step, FusedLoop):
                _evaluate_loop(step, arrays)
            elif isinstance(step, MatmulStep):
                arrays[id(step.out)] = np.matmul(arrays[id(step.a)], arrays[id(step.b)])
            elif isinstance(step, ViewStep):
                arrays[id(step.out)] = step.node.prim.impl(arrays[id(step.src)], **step.node.params)
            else:
                value = step.node.prim.impl(*[arrays[id(b)] for b in step.args], **step.node.params)
                arrays[id(step.out)] = np.asarray(value, dtype=step.out.dtype)
    return [arrays[id(b)] for b in plan.outputs]


def _evaluate_loop(loop: FusedLoop, arrays: dict[int, np.ndarray]) -> None:
    grid = np.indices(loop.shape, dtype=np.int64) if loop.shape else np.zeros((0,), np.int64)
    env: dict[str, np.ndarray] = {f"i{a}": grid[a] for a in range(len(loop.shape))}

    def index_value(ix: Index) -> np.ndarray:
        if ix.var is None:
            return np.full(loop.shape, ix.offset, np.int64)
        return ix.offset + ix.stride * env[ix.var]

    def at(buf: Buffer, index: tuple[Index, ...]) -> np.ndarray:
        a = arrays[id(buf)]
        return a[tuple(index_value(ix) for ix in index)] if index else np.broadcast_to(a, loop.shape)

    for op in loop.ops:
        if isinstance(op, Load):
            value = at(op.buffer, op.index)
        elif isinstance(op, Literal):
            value = np.broadcast_to(op.value, loop.shape)
        elif isinstance(op, Compute):
            value = np.asarray(op.node.prim.impl(*[env[a] for a in op.args], **op.node.params))
            value = value.astype(op.node.out.dtype, copy=False)
        elif isinstance(op, Clamp):
            value = np.clip(index_value(op.base), 0, max(op.length - 1, 0))
        elif isinstance(op, Inside):
            base = index_value(op.base)
            value = (base >= 0) & (base < op.length)
        elif isinstance(op, Equal):
            value = index_value(op.a) == index_value(op.b)
        else:
            value = np.where(env[op.cond], env[op.then], env[op.other]).astype(op.dtype)
        env[op.id] = np.broadcast_to(value, loop.shape)
    for st in loop.stores:
        out = arrays.setdefault(id(st.buffer), np.empty(st.buffer.shape, st.buffer.dtype))
        out[...] = env[st.value]
    for scan in loop.scans:
        out = arrays.setdefault(id(scan.buffer), np.empty(scan.buffer.shape, scan.buffer.dtype))
        running = P.MONOIDS[scan.op].accumulate(env[scan.value], axis=len(loop.shape) - 1)
        out[tuple(index_value(ix) for ix in scan.index)] = running
    for red in loop.reductions:
        value = P.MONOIDS[red.op].reduce(env[red.value], axis=red.axes)
        arrays[id(red.buffer)] = np.asarray(value, dtype=red.buffer.dtype)
