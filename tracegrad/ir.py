"""The SSA intermediate representation: values, nodes, graphs, the printer and the verifier.

A `Graph` is plain data. Every `Var` is defined exactly once (as a graph input or as the output of
one node) and carries a concrete shape and dtype. Transforms build new graphs; nothing mutates a
graph after it is built.

The IR knows nothing of NumPy dispatch, of autodiff or of code generation. It does hold the
*builder*: the object that records nodes while a graph is being constructed, whether by tracing
user code or by a transform emitting adjoint nodes.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import math
from collections.abc import Iterable, Iterator
from typing import Any, Protocol

import numpy as np

from .base.hashing import sha256


class Primitive(Protocol):
    """What the IR reads of a node's primitive (an entry of the table, primitives.py, which sits
    above the IR: the IR knows its entries only by this)."""

    name: str
    effectful: bool  # kept even when nothing uses its value

    def infer(self, shapes: tuple, dtypes: tuple, params: dict) -> tuple: ...


_ids = itertools.count()

DTYPE_NAMES = {
    np.dtype(np.float64): "f64",
    np.dtype(np.float32): "f32",
    np.dtype(np.float16): "f16",
    np.dtype(np.int64): "i64",
    np.dtype(np.int32): "i32",
    np.dtype(np.int16): "i16",
    np.dtype(np.int8): "i8",
    np.dtype(np.uint8): "u8",
    np.dtype(np.bool_): "bool",
}


def dtype_name(dtype: np.dtype) -> str:
    return DTYPE_NAMES.get(np.dtype(dtype), str(np.dtype(dtype)))


def type_str(shape: tuple[int, ...], dtype: np.dtype) -> str:
    return f"{dtype_name(dtype)}[{','.join(map(str, shape))}]"


class Var:
    """One SSA value: a concrete shape and dtype. Identity is the value's identity."""

    __slots__ = ("dtype", "id", "shape")

    def __init__(self, shape: tuple[int, ...], dtype: Any):
        self.id = next(_ids)
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def type(self) -> str:
        return type_str(self.shape, self.dtype)

    def __repr__(self) -> str:
        return f"Var(%{self.id}:{self.type})"


def freeze(value: Any) -> Any:
    """A hashable, comparable form of a static parameter (arrays become bytes)."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (tuple, list)):
        return tuple(freeze(v) for v in value)
    if isinstance(value, slice):
        return ("slice", value.start, value.stop, value.step)
    if isinstance(value, np.dtype):
        return ("dtype", value.str)
    if isinstance(value, Graph):
        return ("graph", value.fingerprint())
    if callable(value):
        return ("callable", id(value))
    return value


# Node and Graph are plain classes, not dataclasses, as are the other classes `import tracegrad`
# creates: a dataclass costs about 1 ms to create (its methods are compiled from source), paid by
# every process at start-up. Nothing mutates a node or a graph after it is built.


class Node:
    """`out = prim(*inputs, **params)`; `source` is the user's `file:line` that created it."""

    __slots__ = ("inputs", "out", "params", "prim", "source")

    def __init__(
        self,
        prim: Primitive,
        inputs: tuple[Var, ...],
        params: dict[str, Any],
        out: Var,
        source: str | None = None,
    ):
        self.prim = prim
        self.inputs = inputs
        self.params = params
        self.out = out
        self.source = source

    def __repr__(self) -> str:
        inputs = " ".join(repr(v) for v in self.inputs)
        return f"<Node {self.out!r} = {self.prim.name} {inputs}>"

    def param_key(self) -> tuple:
        return tuple(sorted((k, freeze(v)) for k, v in self.params.items()))


class Graph:
    """Inputs, nodes in execution order, outputs. Outputs may repeat or be inputs."""

    def __init__(self, inputs: tuple[Var, ...], nodes: tuple[Node, ...], outputs: tuple[Var, ...]):
        self.inputs = inputs
        self.nodes = nodes
        self.outputs = outputs
        self._cache: dict = {}  # what is derived from the graph once: its fingerprint
        self.guards: tuple = ()  # a program's BranchGuards, of its last outputs (branches.py)

    def __str__(self) -> str:
        return format_graph(self)

    def __repr__(self) -> str:
        return (
            f"<Graph {len(self.inputs)} inputs, {len(self.nodes)} nodes, "
            f"{len(self.outputs)} outputs>"
        )

    def _repr_html_(self) -> str:
        return format_graph_html(self)

    def to_dot(self) -> str:
        return format_graph_dot(self)

    def fingerprint(self) -> str:
        """A hash of the canonical text of the graph: equal graphs have equal fingerprints."""
        if "fingerprint" not in self._cache:
            text = format_graph(self, sources=False, canonical_consts=True)
            self._cache["fingerprint"] = sha256(text.encode()).hexdigest()
        return self._cache["fingerprint"]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Graph) and self.fingerprint() == other.fingerprint()

    def __hash__(self) -> int:
        return hash(self.fingerprint())

    def producers(self) -> dict[Var, Node]:
        return {node.out: node for node in self.nodes}

    def uses(self) -> dict[Var, list[Node]]:
        uses: dict[Var, list[Node]] = {}
        for node in self.nodes:
            for v in node.inputs:
                uses.setdefault(v, []).append(node)
        return uses

    def live(self, outputs: Iterable[Var]) -> tuple[list[Node], set[Var]]:
        """The nodes that `outputs` (or an effect) need, in order, and every value they read
        (the values of `outputs` included)."""
        need = set(outputs)
        kept = []
        for node in reversed(self.nodes):
            if node.out in need or node.prim.effectful:
                kept.append(node)
                need.update(node.inputs)
        return kept[::-1], need


# ----------------------------------------------------------------------------------------------
# Printing


def _format_param(value: Any) -> str:
    if isinstance(value, np.ndarray):
        if value.size <= 4:
            return np.array2string(value, separator=",").replace("\n", "")
        return f"<{type_str(value.shape, value.dtype)} array>"
    if isinstance(value, np.dtype):
        return dtype_name(value)
    if isinstance(value, Graph):
        return f"<graph: {len(value.nodes)} nodes>"
    if isinstance(value, slice):
        parts = ["" if p is None else str(p) for p in (value.start, value.stop, value.step)]
        return ":".join(parts).rstrip(":") or ":"
    if isinstance(value, tuple):
        return (
            "(" + ",".join(_format_param(v) for v in value) + ("," if len(value) == 1 else "") + ")"
        )
    if callable(value):
        return getattr(value, "__name__", "fn")
    return repr(value)


def params_text(node: Node, canonical_consts: bool) -> str:
    items = []
    for k, v in sorted(node.params.items()):
        if canonical_consts and isinstance(v, np.ndarray):
            items.append(f"{k}={sha256(v.tobytes()).hexdigest()[:16]}:{v.dtype.str}")
        elif canonical_consts and isinstance(v, Graph):
            items.append(f"{k}=graph:{v.fingerprint()[:16]}")
        else:
            items.append(f"{k}={_format_param(v)}")
    return "[" + ", ".join(items) + "]" if items else ""


def value_names(graph: Graph) -> dict[Var, str]:
    names: dict[Var, str] = {}
    for v in (*graph.inputs, *(node.out for node in graph.nodes)):
        if isinstance(v, Var):
            names.setdefault(v, f"%{len(names)}")
    return names


def node_lines(graph: Graph, sources: bool = True, canonical_consts: bool = False) -> list[str]:
    """One line per node: `%4:f64[8] = mul %2 %3   # model.py:12`."""
    names = value_names(graph)

    def name(v: Any) -> str:  # a broken graph (shown by the verifier) may hold anything
        if not isinstance(v, Var):
            return f"<{type(v).__name__}>"
        return names.get(v, f"?{v.id}")

    lines = []
    for node in graph.nodes:
        args = " ".join(name(v) for v in node.inputs)
        out_type = node.out.type if isinstance(node.out, Var) else "?"
        text = (
            f"{name(node.out)}:{out_type} = {node.prim.name}{params_text(node, canonical_consts)}"
        )
        if args:
            text += " " + args
        if sources and node.source:
            text = f"{text:<52}  # {node.source}"
        lines.append(text)
    return lines


def format_graph(
    graph: Graph, sources: bool = True, canonical_consts: bool = False, keyword: str = "graph"
) -> str:
    """The graph as text; the graphs a node holds (a loop's body) are shown under it, indented
    (not in the canonical text, where they appear by fingerprint)."""
    names = value_names(graph)
    ins = ", ".join(f"{names[v]}:{v.type}" for v in graph.inputs)
    body = []
    for node, line in zip(graph.nodes, node_lines(graph, sources, canonical_consts), strict=True):
        body.append("  " + line)
        if canonical_consts:
            continue
        for key, value in sorted(node.params.items()):
            held = value if isinstance(value, tuple) else (value,)
            for k, g in enumerate(v for v in held if isinstance(v, Graph)):
                label = f"{key}{k}" if isinstance(value, tuple) else key
                text = format_graph(g, sources, canonical_consts, keyword=label)
                body.extend("    " + sub for sub in text.splitlines())
    outputs, guards = graph.outputs, graph.guards
    if guards and not canonical_consts:
        outputs = outputs[: len(outputs) - len(guards)]
        for v, guard in zip(graph.outputs[len(outputs) :], guards, strict=True):
            text = f"  guard {names.get(v, f'?{v.id}')} == {guard.outcome!r}"
            body.append(f"{text:<54}  # {guard.source}" if sources and guard.source else text)
    outs = ", ".join(names.get(v, f"?{v.id}") for v in outputs)
    return "\n".join([f"{keyword}({ins}) {{", *body, f"  return {outs}", "}"])


def format_graph_html(graph: Graph) -> str:
    import html

    names = value_names(graph)
    rows = [
        "<tr><th>value</th><th>type</th><th>op</th><th>inputs</th><th>source</th></tr>",
        *(
            f"<tr><td>{names[v]}</td><td>{v.type}</td><td><i>input</i></td><td></td><td></td></tr>"
            for v in graph.inputs
        ),
    ]
    for node in graph.nodes:
        op = html.escape(node.prim.name + params_text(node, False))
        args = " ".join(names.get(v, "?") for v in node.inputs)
        rows.append(
            f"<tr><td>{names[node.out]}</td><td>{node.out.type}</td><td>{op}</td>"
            f"<td>{args}</td><td>{html.escape(node.source or '')}</td></tr>"
        )
    outs = ", ".join(names.get(v, "?") for v in graph.outputs)
    rows.append(f"<tr><td colspan=5><b>return</b> {outs}</td></tr>")
    return "<table class='tracegrad-ir'>" + "".join(rows) + "</table>"


def format_graph_dot(graph: Graph) -> str:
    names = value_names(graph)
    lines = ["digraph tracegrad {", "  rankdir=TB;", '  node [fontname="monospace"];']
    for v in graph.inputs:
        lines.append(f'  v{v.id} [label="{names[v]}\\n{v.type}", shape=box, style=rounded];')
    for node in graph.nodes:
        label = f"{names[node.out]} = {node.prim.name}\\n{node.out.type}"
        lines.append(f'  v{node.out.id} [label="{label}", shape=ellipse];')
        for v in node.inputs:
            lines.append(f"  v{v.id} -> v{node.out.id};")
    for i, v in enumerate(graph.outputs):
        lines.append(f'  out{i} [label="output {i}", shape=plaintext];')
        lines.append(f"  v{v.id} -> out{i};")
    lines.append("}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Verification


class IRError(AssertionError):
    """A graph broke an invariant of the IR (a bug in a transform, not in user code)."""


def verify(graph: Graph) -> Graph:
    """Check SSA form, shapes and dtypes against each primitive's rule, and the graphs that nodes
    hold (a checkpointed function's, for instance) the same way. Returns the graph."""
    if graph._cache.get("verified"):  # graphs are immutable: once is enough
        return graph
    defined: set[Var] = set()
    for v in graph.inputs:
        if not isinstance(v, Var):
            raise IRError(f"input {v!r} is not a Var")
        if v in defined:
            raise IRError(f"input {v} appears twice")
        defined.add(v)
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            if not isinstance(v, Var):
                raise IRError(_context(graph, i, f"has an input {v!r} that is not a Var"))
            if v not in defined:
                raise IRError(_context(graph, i, f"uses {v} before it is defined"))
        if not isinstance(node.out, Var):
            raise IRError(_context(graph, i, f"defines {node.out!r}, which is not a Var"))
        if node.out in defined:
            raise IRError(_context(graph, i, f"redefines {node.out}"))
        try:
            shape, dtype = node.prim.infer(
                tuple(v.shape for v in node.inputs),
                tuple(v.dtype for v in node.inputs),
                node.params,
            )
        except Exception as exc:  # wrong number of inputs, a missing or bad parameter
            message = f"does not fit {node.prim.name}'s shape rule: {type(exc).__name__}: {exc}"
            raise IRError(_context(graph, i, message)) from exc
        if tuple(shape) != node.out.shape or np.dtype(dtype) != node.out.dtype:
            raise IRError(
                _context(
                    graph,
                    i,
                    f"declares {node.out.type} but {node.prim.name} gives {type_str(shape, dtype)}",
                )
            )
        for key, value in node.params.items():
            if isinstance(value, Graph):
                try:
                    verify(value)
                except IRError as exc:
                    raise IRError(
                        _context(graph, i, f"holds a broken graph in {key!r}: {exc}")
                    ) from None
        defined.add(node.out)
    for v in graph.outputs:
        if v not in defined:
            raise IRError(f"output {v} is never defined")
    graph._cache["verified"] = True
    return graph


def _context(graph: Graph, index: int, message: str) -> str:
    lines = node_lines(graph)
    lo, hi = max(0, index - 3), min(len(lines), index + 4)
    shown = [("-> " if j == index else "   ") + lines[j] for j in range(lo, hi)]
    return f"node {index} {message}:\n" + "\n".join(shown)


# ----------------------------------------------------------------------------------------------
# Building


class Builder:
    """Records nodes while a graph is being built.

    Builders nest: tracing `grad(f)` inside a traced function opens an inner builder whose
    `parent` is the outer one. A value of an enclosing builder used inside an inner one is
    *captured*: it becomes an extra input of the inner graph (see `lift`).
    """

    def __init__(self, parent: Builder | None = None):
        self.parent = parent
        self.inputs: list[Var] = []
        self.nodes: list[Node] = []
        self.captures: list[tuple[Any, Var]] = []  # (value of an outer builder, inner input)
        self._captured: dict[int, Var] = {}
        # a top-level trace: what the function reads from outside (tracing.scope.Scope), and the
        # inputs that stand for the arrays among it
        self.scope: Any = None
        self.hidden_vars: list[Var] = []
        self.branching: Any = None  # answers Python control flow (tracing/branches.py), or None
        self.no_branching: str | None = None  # why it cannot, where that is not obvious

    @property
    def root(self) -> Builder:
        """The outermost builder: the top-level trace, which holds the scope."""
        builder = self
        while builder.parent is not None:
            builder = builder.parent
        return builder

    def new_input(self, shape: tuple[int, ...], dtype: Any) -> Var:
        v = Var(shape, dtype)
        self.inputs.append(v)
        return v

    def capture(self, outer_key: int, outer_value: Any, shape, dtype) -> Var:
        if outer_key not in self._captured:
            v = Var(shape, dtype)
            self._captured[outer_key] = v
            self.captures.append((outer_value, v))
        return self._captured[outer_key]

    def add(
        self, prim: Primitive, inputs: tuple[Var, ...], params: dict, source: str | None
    ) -> Var:
        shape, dtype = prim.infer(
            tuple(v.shape for v in inputs), tuple(v.dtype for v in inputs), params
        )
        out = Var(shape, dtype)
        self.nodes.append(Node(prim, tuple(inputs), dict(params), out, source))
        return out

    def graph(self, outputs: list[Var] | tuple[Var, ...]) -> Graph:
        inputs = tuple(self.inputs) + tuple(v for _, v in self.captures)
        return Graph(inputs, tuple(self.nodes), tuple(outputs))


_current: contextvars.ContextVar[Builder | None] = contextvars.ContextVar("builder", default=None)
_source: contextvars.ContextVar[str | None] = contextvars.ContextVar("source", default=None)


def current_builder() -> Builder:
    builder = _current.get()
    if builder is None:
        raise RuntimeError("no graph is being built (tracegrad internal error)")
    return builder


def active_builder() -> Builder | None:
    return _current.get()


@contextlib.contextmanager
def building(builder: Builder) -> Iterator[Builder]:
    token = _current.set(builder)
    try:
        yield builder
    finally:
        _current.reset(token)


@contextlib.contextmanager
def source_location(source: str | None) -> Iterator[None]:
    """Nodes emitted inside this block are attributed to `source` (e.g. 'Grad of: model.py:12')."""
    token = _source.set(source)
    try:
        yield
    finally:
        _source.reset(token)


def current_source() -> str | None:
    return _source.get()


def inline(builder: Builder, graph: Graph, args: list[Var] | tuple[Var, ...]) -> list[Var]:
    """Re-emit `graph`'s nodes into `builder`, with `args` standing for its inputs."""
    if len(args) != len(graph.inputs):
        raise IRError(f"inline: graph takes {len(graph.inputs)} inputs, got {len(args)}")
    env: dict[Var, Var] = dict(zip(graph.inputs, args, strict=True))
    for node in graph.nodes:
        inputs = tuple(env[v] for v in node.inputs)
        env[node.out] = builder.add(node.prim, inputs, node.params, node.source)
    return [env[v] for v in graph.outputs]
