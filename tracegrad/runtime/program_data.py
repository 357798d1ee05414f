"""Graphs and output trees as plain data, for persisted programs (program_cache.py).

A graph becomes nested tuples: its input types, its nodes (primitive name, operand indices, plain
parameters, output type, source line, and the loop or branch bodies they hold, as data in turn)
and its outputs; reading it back rebuilds every node through its primitive's type rule and
verifies the graph, so an entry that does not describe a well-typed program is refused. A
parameter that another process could not read back (a callable, an object array) raises
`NotStable`: that program is not persisted.
"""

from __future__ import annotations

import importlib

from typing import Any

import numpy as np

from .. import ir
from .. import primitives as P
from ..ir import Graph, Node, Var
from ..base.tree import TreeDef
from .digests import PLAIN, NotStable

MAX_CONST_BYTES = 16 * 2**20  # programs holding more constant bytes are not persisted


def check_param(value: Any) -> None:
    if isinstance(value, (tuple, list)):
        for v in value:
            check_param(v)
    elif isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise NotStable("an object array")
    elif not isinstance(value, PLAIN + (np.generic, np.dtype)):
        raise NotStable(f"a {type(value).__name__} parameter")


def is_graphs(value: Any) -> bool:
    """A parameter that holds loop or branch bodies: a graph, or a non-empty tuple of graphs."""
    return isinstance(value, Graph) or (
        isinstance(value, tuple) and bool(value) and all(isinstance(v, Graph) for v in value)
    )


def graph_data(graph: Graph, const_bytes: list[int] | None = None) -> tuple:
    """A graph as plain data: its input types, its nodes (primitive name, operand indices, plain
    parameters, output type, source, and the bodies they hold, as data in turn) and its outputs.
    Raises NotStable for a parameter another process could not read back."""
    top = const_bytes is None
    const_bytes = [0] if top else const_bytes
    index: dict[Var, int] = {}

    def define(v: Var) -> tuple:
        index[v] = len(index)
        return (v.shape, v.dtype.str)

    inputs = tuple(define(v) for v in graph.inputs)
    nodes = []
    for node in graph.nodes:
        params, bodies = {}, []
        for key, value in node.params.items():
            if isinstance(value, Graph):
                bodies.append((key, False, graph_data(value, const_bytes)))
                continue
            if is_graphs(value):
                bodies.append((key, True, tuple(graph_data(g, const_bytes) for g in value)))
                continue
            check_param(value)
            if isinstance(value, np.ndarray):
                const_bytes[0] += value.nbytes
            params[key] = value
        args = tuple(index[v] for v in node.inputs)
        nodes.append((node.prim.name, args, params, define(node.out), node.source, tuple(bodies)))
    if top and const_bytes[0] > MAX_CONST_BYTES:
        raise NotStable("large constants")
    return inputs, tuple(nodes), tuple(index[v] for v in graph.outputs)


def primitive(name: str) -> P.Primitive:
    if name not in P.PRIMITIVES:
        load_extensions(name)
    return P.PRIMITIVES[name]  # still missing: a KeyError, and the entry is traced again


def load_extensions(name: str) -> None:
    """Import the modules the table lists as its extensions (`primitives.EXTENSIONS`), in order,
    until `name` is an entry."""
    for module in P.EXTENSIONS:
        if name in P.PRIMITIVES:
            return
        importlib.import_module(module)


def graph_of(data: tuple) -> Graph:
    inputs, nodes, outputs = data
    vars_: list[Var] = [Var(shape, dtype) for shape, dtype in inputs]
    built = []
    for name, args, params, (shape, dtype), source, bodies in nodes:
        prim = primitive(name)
        params = dict(params)
        for key, many, data in bodies:
            params[key] = tuple(graph_of(d) for d in data) if many else graph_of(data)
        operands = tuple(vars_[i] for i in args)
        out = Var(shape, dtype)
        inferred = prim.infer(
            tuple(v.shape for v in operands), tuple(v.dtype for v in operands), params
        )
        if (tuple(inferred[0]), np.dtype(inferred[1])) != (out.shape, out.dtype):
            raise ValueError(f"node {name} does not infer to its recorded type")
        vars_.append(out)
        built.append(Node(prim, operands, params, out, source))
    return ir.verify(
        Graph(tuple(vars_[: len(inputs)]), tuple(built), tuple(vars_[i] for i in outputs))
    )


class Unresolved(Exception):
    """An entry's result class that cannot be found in this process (yet): not damaged."""


def tree_data(tree: TreeDef) -> tuple:
    """The output tree as data. A namedtuple or dataclass result is kept by its class's module
    and qualified name, found again when the entry is read; other classes (registered nodes,
    dataclasses with static fields) make a program that is not persisted."""
    cls = None
    if tree.node_type is not None:
        t = tree.node_type
        if tree.kind not in ("namedtuple", "dataclass") or tree.aux:
            raise NotStable(f"a {tree.kind} result")
        cls = (t.__module__, t.__qualname__)
        try:
            reachable = find_class(cls, tree.kind, tuple(tree.keys)) is t
        except Unresolved:
            reachable = False
        if not reachable:  # a class made in a function: another process cannot find it
            raise NotStable(f"a result of the class {t.__qualname__}, not reachable by its name")
    children = tuple(tree_data(c) for c in tree.children)
    return (tree.kind, children, tuple(tree.keys), cls)


def tree_of(data: tuple) -> TreeDef:
    kind, children, keys, cls = data if len(data) == 4 else (*data, None)
    node_type = None
    if kind in ("namedtuple", "dataclass"):
        node_type = find_class(cls, kind, tuple(keys))
    return TreeDef(kind, tuple(tree_of(c) for c in children), tuple(keys), node_type)


def find_class(cls: tuple | None, kind: str, keys: tuple) -> type:
    """The class (module, qualified name) names, if this process has it with the same fields.
    Its module is looked up among the imported ones: reading an entry never imports code."""
    import sys

    found: Any = sys.modules.get(cls[0]) if cls else None
    for part in cls[1].split(".") if found is not None else ():
        found = getattr(found, part, None)
    if kind == "namedtuple":
        same = getattr(found, "_fields", None) == keys
    else:  # the fields that are children (static ones are never persisted)
        same = set(keys) <= set(getattr(found, "__dataclass_fields__", ()))
    if not isinstance(found, type) or not same:
        raise Unresolved(f"the result class {cls} with fields {keys}")
    return found
