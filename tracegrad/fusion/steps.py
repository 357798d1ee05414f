"""The fusion plan's data structure: buffers, the ops and stores of a fused loop, the other
steps, and the plan that lists them in order (documented in the package's docstring)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir import Graph, Node, Var

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
        return unique(op.buffer for op in self.ops if isinstance(op, Load))

    @property
    def writes(self) -> list[Buffer]:
        return unique(
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
        return unique([self.a, self.b])

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
        return unique(self.args)

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
                outs = unique(s.buffer.name for s in step.stores)
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
            elif hasattr(step, "describe"):  # a backend's own step
                lines.append(step.describe())
            else:
                args = ", ".join(b.name for b in step.args)
                lines.append(f"eval {step.out!r} = {step.node.prim.name}({args})")
        return "\n".join(lines)


def unique(items) -> list:
    seen, out = set(), []
    for item in items:
        if id(item) not in seen:
            seen.add(id(item))
            out.append(item)
    return out


# ----------------------------------------------------------------------------------------------
# Node classification
