"""Long fused loops split into loops of bounded length (a step of the fusion plan, after
planning; cpu).

Numba compiles a function in time and memory that grow faster than its length: its SSA
reconstruction, closure inlining and rewrites go over the whole function for each variable, and
LLVM's passes over one huge loop body too. A 50-step unrolled recurrence's gradient, one loop of
452 ops, took 10.5 s to compile, 2.3 s of it in SSA reconstruction; at 100 steps 30 s (9.4 s),
and at 1,000 steps it ran out of memory. So a fused loop of more than `MAX_LOOP_OPS` ops becomes
consecutive loops over the same iteration space, each computing the next `MAX_LOOP_OPS` of its
ops in their order: a value that one part computes and a later part reads is stored by the first
in a scratch buffer of the loop's shape and loaded by the other. Loads, literals, index ops and
loop-invariant values are cheap to repeat: each part that reads one repeats it (with what it
reads) instead. The parts compile in time linear in the loop's length; each pass over the data
costs a store and a load of the values crossing it, next to hundreds of ops per element.
"""

from __future__ import annotations

from .loop_ir import op_inputs
from .steps import (
    Buffer,
    Compute,
    FusedLoop,
    Index,
    Load,
    Op,
    Plan,
    Reduction,
    Select,
    Store,
    identity_index,
)

MAX_LOOP_OPS = 256


def split_loops(plan: Plan, max_ops: int | None = None) -> Plan:
    """`plan` with each fused loop of more than `max_ops` (default `MAX_LOOP_OPS`) ops split
    into consecutive loops of at most about that many."""
    limit = MAX_LOOP_OPS if max_ops is None else max_ops
    if not any(_splits(step, limit) for step in plan.steps):
        return plan
    buffers = list(plan.buffers)
    steps = []
    for step in plan.steps:
        steps += _split(step, limit, buffers) if _splits(step, limit) else [step]
    return Plan(plan.graph, buffers, plan.inputs, plan.outputs, steps)


def _splits(step, limit: int) -> bool:
    # a scan runs along its last axis in order with its running value; an empty space would
    # read a loaded loop-invariant value outside the loop that never runs
    return (
        isinstance(step, FusedLoop)
        and len(step.ops) > limit
        and bool(step.shape)
        and all(step.shape)
        and not step.scans
    )


def _repeated(op: Op) -> bool:
    """An op each part computes for itself rather than load: everything but values computed
    at a point of the loop."""
    return not isinstance(op, (Compute, Select)) or op.depth == 0


class _Parts:
    def __init__(self, loop: FusedLoop, buffers: list[Buffer]):
        self.loop, self.buffers = loop, buffers
        self.ops = {op.id: op for op in loop.ops}
        self.types = loop.op_types()
        self.bodies: list[list[Op]] = []
        self.present: list[set[str]] = []
        self.stores: list[list[Store]] = []
        self.reductions: list[list[Reduction]] = []
        self.part_of: dict[str, int] = {}  # a computed op's id -> the part computing it
        self.crossing: dict[str, Buffer] = {}  # a computed op's id -> the buffer it crosses in
        # values the loop stores at its own point anyway: a later part reads them there
        own = identity_index(len(loop.shape))
        for st in loop.stores:
            if st.index == own and st.buffer.shape == loop.shape:
                self.crossing.setdefault(st.value, st.buffer)

    def new_part(self) -> None:
        self.bodies.append([])
        self.present.append(set())
        self.stores.append([])
        self.reductions.append([])

    def need(self, j: int, name: str) -> None:
        """Make the value `name` (an op's id; loop variables are always there) available in part
        `j`: repeated with what it reads, loaded from the part computing it, or computed here."""
        if name in self.present[j] or name not in self.ops:
            return
        op = self.ops[name]
        if not _repeated(op) and name in self.part_of:
            self.bodies[j].append(self._load(name))
        else:
            for dep in op_inputs(op):
                self.need(j, dep)
            self.bodies[j].append(op)
            if not _repeated(op):
                self.part_of[name] = j
        self.present[j].add(name)

    def _load(self, name: str) -> Load:
        op = self.ops[name]
        buf = self.crossing.get(name)
        r = len(self.loop.shape)
        if buf is None:
            var = op.node.out if isinstance(op, Compute) else None
            buf = Buffer(
                f"t{len(self.buffers)}", self.loop.shape, self.types[name], "temp", var=var
            )
            self.buffers.append(buf)
            self.crossing[name] = buf
            self.stores[self.part_of[name]].append(Store(name, buf, identity_index(r)))
        # a value that depends on the outer axes only is read where it is computed: at the
        # first element of the inner ones
        index = tuple(Index(f"i{a}") if a < op.depth else Index(None, 0, 0) for a in range(r))
        return Load(name, buf, index, op.depth)

    def place(self, value: str, index: tuple[Index, ...]) -> int:
        """The part that stores or reduces `value`: the one computing it, else the last."""
        j = self.part_of.get(value, len(self.bodies) - 1)
        self.need(j, value)
        for ix in index:
            if ix.var is not None:
                self.need(j, ix.var)
        return j


def _split(loop: FusedLoop, limit: int, buffers: list[Buffer]) -> list[FusedLoop]:
    parts = _Parts(loop, buffers)
    parts.new_part()
    for op in loop.ops:
        if _repeated(op):
            continue  # made where it is read
        if len(parts.bodies[-1]) >= limit:
            parts.new_part()
        parts.need(len(parts.bodies) - 1, op.id)
    for st in loop.stores:
        parts.stores[parts.place(st.value, st.index)].append(st)
    for red in loop.reductions:
        parts.reductions[parts.place(red.value, ())].append(red)
    out = []
    for j, body in enumerate(parts.bodies):
        written = {id(b.buffer.var) for b in parts.stores[j] + parts.reductions[j]}
        roots = [v for v in loop.roots if id(v) in written]
        out.append(
            FusedLoop(
                f"{loop.name}_{j}",
                loop.shape,
                body,
                parts.stores[j],
                parts.reductions[j],
                roots,
            )
        )
    return out
