"""The planner: an optimised graph partitioned into fused loops, matrix products, views and
evaluations (the partitioning rules are in the package's docstring)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..ir import Graph, Node, Var
from ..primitives import Kind
from .inline import (
    MAX_INLINE_DEPTH,
    MAX_POINTS,
    RECOMPUTE_LIMIT,
    LoopBuilder,
    general_view,
    inline_kind,
    is_view,
    node_cost,
    points_read,
    uniform_value,
)
from .loop_ir import op_inputs
from .steps import (
    Buffer,
    Equal,
    EvalStep,
    FusedLoop,
    Index,
    MatmulStep,
    Op,
    Plan,
    Reduction,
    Scan,
    Step,
    Store,
    ViewStep,
    identity_index,
)


class Planner:
    def __init__(
        self, graph: Graph, supports: Callable[[Node], bool], computed_identity: bool = False
    ):
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
            if not general_view(node):  # a general reshape is a view of its input
                self.mat.add(v)
            for x in node.inputs:
                self._need_buffer_target(x)
        for v in g.outputs:
            node = self.producer.get(v)
            if node is not None and (not general_view(node) or self.fusable(node)):
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
            if (
                not self.fusable(node)
                or v in self.mat
                or v in self.literals  # one number: free at any point
                or self._is_buffer_leaf(v)
            ):
                continue
            here: set = set()
            for user in users.get(v, ()):
                out = user.out
                if not self.fusable(user):
                    # a reduction or scan computes its operand at one point per point of its
                    # loop (anything else reads it from a buffer): without this point, every
                    # value under a sum would look unread and none would be stored
                    here.add(identity_index(v.ndim))
                    continue
                at = (
                    {identity_index(out.ndim)}
                    if out in self.mat or out not in points
                    else points[out]
                )
                for index in at:
                    here |= points_read(user, v, index)
                    if len(here) > MAX_POINTS:
                        break
            if self._loaded_through(v):  # a load at another index: nothing to store
                points[v] = here
                continue
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

    def _loaded_through(self, v: Var) -> bool:
        """A value that index nodes make of an array (a reversed or broadcast input): a loop
        computes it by loading that array, at any number of points, as cheaply as it would load
        a stored copy."""
        if inline_kind(self.producer[v]) != "index":
            return False
        src = self._through_index_nodes(v)
        return src in self.mat or src in self.literals or self._is_buffer_leaf(src)

    def _through_index_nodes(self, v: Var) -> Var:
        while v in self.producer and inline_kind(self.producer[v]) == "index":
            v = self.producer[v].inputs[0]
        return v

    def _need_buffer_target(self, v: Var) -> None:
        """Make `v` available as an array: materialize it or what a view chain of it starts at."""
        while v in self.producer:
            node = self.producer[v]
            if is_view(node):
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
        if node is not None and general_view(node) and not self.fusable(node):
            return self.array_of(var)
        return None  # computed in the loop (views of it made for matmuls are not read here)

    def array_of(self, var: Var) -> Buffer:
        """`var` as an array: its buffer, or a view step over the buffer of what it views."""
        if var in self.buffer_of:
            return self.buffer_of[var]
        node = self.producer[var]
        assert is_view(node), node.prim
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

    def _analyse(self, node: Node, members: set[Var]) -> LoopBuilder:
        lb = LoopBuilder(self, self._space(node), members)
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
            if (
                own_point
                and group is not None
                and u in group.members
                and u not in self._reduced(group)
            ):
                soft.add(id(step))
            else:
                hard.add(id(step))
        before = hard | self._ancestors(hard) | self._ancestors(soft)
        scan = node.prim.kind is Kind.SCAN  # a loop of its own: its last axis runs in order
        candidates = [
            g
            for g in self.groups
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

    def _build_group(
        self, g: _Group
    ) -> tuple[LoopBuilder, list[Store], list[Reduction], list[Scan]]:
        lb = LoopBuilder(self, g.shape, set(g.members))
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
            loop = FusedLoop(
                f"k{k}",
                g.shape,
                _live(lb.ops, [r.value for r in [*stores, *reductions, *scans]]),
                stores,
                reductions,
                [n.out for n in sorted(g.roots, key=lambda n: self.order[n.out])],
                scans,
            )
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


def _live(ops: list[Op], results: list[str]) -> list[Op]:
    """The ops that the loop's results read, in their order: a piece's clamped index where the
    piece is a broadcast (an unslice of a scalar's broadcast is only its condition) is dead."""
    needed = set(results)
    live = []
    for op in reversed(ops):
        if op.id not in needed:
            continue
        live.append(op)
        if isinstance(op, Equal):
            needed.update(ix.var for ix in (op.a, op.b) if ix.var is not None)
        else:
            needed.update(op_inputs(op))
    return live[::-1]


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
    graph: Graph,
    supports: Callable[[Node], bool] = lambda node: True,
    computed_identity: bool = False,
) -> Plan:
    """Partition an optimised graph into fused loops, matrix products, views and fallbacks.

    `supports(node)` says whether the backend can compute this node inside a loop (or, for a
    matmul, as a matmul step); unsupported nodes become `EvalStep`s. With `computed_identity`,
    identity-matrix constants are computed in the loops that read them (`Equal` ops) instead of
    being read from memory: a jacobian's or hessian's seed then costs no memory traffic.
    """
    return Planner(graph, supports, computed_identity).run()


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
