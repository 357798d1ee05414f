"""Pytrees: nested containers of arrays, flattened to a list of leaves and a `TreeDef`, and back.

This module is the one place where containers are taken apart and rebuilt: arguments, results,
`has_aux` payloads, gradients, custom rules and loop carries all go through `flatten` and
`unflatten`.

The containers ("nodes"):
- tuples, lists and dicts (dict keys keep their insertion order, so the gradient of a dict of
  parameters lists them as the user wrote them); `None` is a node without children;
- namedtuples: their fields, rebuilt with `cls(*children)`;
- dataclasses: their fields in field order, rebuilt by calling the class (so `__post_init__`
  runs again and recomputes fields declared with `field(init=False)`, which are not children);
  a field declared with `field(metadata={"static": True})` is not a child but part of the tree
  definition (hashable, compared, a cache key: a new value traces again);
- classes registered with `register_pytree_node(cls, flatten, unflatten)` (JAX's signature).

Anything else is a leaf. A `TreeDef` is hashable and part of every cache key: it holds the class
of each namedtuple, dataclass and registered node, so two classes with the same fields are two
different trees.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .tree_nodes import (
    build_dataclass,
    custom_children,
    dataclass_parts,
    registry,
)


class TreeDef:
    """One level of a tree's structure, and the levels below it (immutable once made).

    - `kind`: "leaf", "none", "tuple", "list", "dict", "namedtuple", "dataclass", "custom";
    - `children`: the TreeDefs of its children;
    - `keys`: dict keys; the field names of a namedtuple or dataclass;
    - `node_type`: the class of a namedtuple, dataclass or registered node;
    - `aux`: a registered node's aux_data; a dataclass's static fields ((name, value)...).

    A plain class, not a dataclass: `import tracegrad` creates its classes in every process,
    and a dataclass costs about 1 ms to create (its methods are compiled from source)."""

    def __init__(
        self,
        kind: str,
        children: tuple[TreeDef, ...] = (),
        keys: tuple = (),
        node_type: type | None = None,
        aux: Any = None,
    ):
        self.kind = kind
        self.children = children
        self.keys = keys
        self.node_type = node_type
        self.aux = aux

    def __repr__(self) -> str:
        return f"TreeDef({self})"

    # Tree definitions are part of every cache key: hash once, compare cheaply. Dict keys and aux
    # data compare with their types: {1: x}, {1.0: x} and {True: x} are different trees (the
    # results come back under the caller's own keys).
    def _key(self) -> tuple:
        key = self.__dict__.get("_cached_key")
        if key is None:
            key = (
                self.kind,
                self.node_type,
                self.children,
                typed_key(self.keys),
                typed_key(self.aux),
            )
            object.__setattr__(self, "_cached_key", key)
        return key

    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(self._key())
            object.__setattr__(self, "_hash", h)
        return h

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return (
            isinstance(other, TreeDef) and hash(self) == hash(other) and self._key() == other._key()
        )

    def __getstate__(self) -> dict:  # pickled without the cached hash (hashes differ per process)
        return {k: v for k, v in self.__dict__.items() if k not in ("_hash", "_cached_key")}

    @property
    def num_leaves(self) -> int:
        n = self.__dict__.get("_num_leaves")
        if n is None:
            n = 1 if self.kind == "leaf" else sum(c.num_leaves for c in self.children)
            object.__setattr__(self, "_num_leaves", n)
        return n

    def __str__(self) -> str:
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        if self.kind == "dict":
            return (
                "{"
                + ", ".join(f"{k!r}: {c}" for k, c in zip(self.keys, self.children, strict=True))
                + "}"
            )
        if self.kind == "tuple":
            return (
                "("
                + ", ".join(map(str, self.children))
                + ("," if len(self.children) == 1 else "")
                + ")"
            )
        if self.kind == "list":
            return "[" + ", ".join(map(str, self.children)) + "]"
        name = getattr(self.node_type, "__qualname__", "?")
        if self.kind == "custom":
            aux = "" if self.aux is None else f"[{self.aux!r}]"
            return f"{name}{aux}(" + ", ".join(map(str, self.children)) + ")"
        fields = [f"{k}={c}" for k, c in zip(self.keys, self.children, strict=True)]
        fields += [f"{k}={v!r}" for k, v in (self.aux or ())]
        return f"{name}(" + ", ".join(fields) + ")"


def typed_key(value: Any) -> Any:
    """A value with the types of its parts, so that 1, 1.0 and True differ (a dict key as
    tree definitions compare it)."""
    if type(value) is tuple:
        return tuple(typed_key(v) for v in value)
    return (type(value), value)


LEAF = TreeDef("leaf")
NONE = TreeDef("none")


# ----------------------------------------------------------------------------------------------
# Flattening and rebuilding


_LEAF_TYPES = frozenset({np.ndarray, float, int, bool, np.float64, np.float32})


def flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> tuple[list[Any], TreeDef]:
    """(the leaves of `tree` in order, its TreeDef). `is_leaf(x)` true keeps `x` whole."""
    leaves: list[Any] = []
    return leaves, _flatten(tree, leaves, is_leaf)


def _flatten(tree: Any, leaves: list, is_leaf) -> TreeDef:
    t = type(tree)
    if t in _LEAF_TYPES or (is_leaf is not None and is_leaf(tree)):
        leaves.append(tree)
        return LEAF
    if t is tuple:
        return TreeDef("tuple", tuple(_flatten(c, leaves, is_leaf) for c in tree))
    if t is list:
        return TreeDef("list", tuple(_flatten(c, leaves, is_leaf) for c in tree))
    if t is dict:
        keys = tuple(tree)
        return TreeDef("dict", tuple(_flatten(tree[k], leaves, is_leaf) for k in keys), keys)
    if tree is None:
        return NONE
    registered = registry.get(t)
    if registered is not None:
        children, aux = custom_children(tree, registered[0])
        return TreeDef("custom", tuple(_flatten(c, leaves, is_leaf) for c in children), (), t, aux)
    if isinstance(tree, tuple):
        subtrees = tuple(_flatten(c, leaves, is_leaf) for c in tree)
        fields = getattr(t, "_fields", None)
        if isinstance(fields, tuple):  # a namedtuple
            return TreeDef("namedtuple", subtrees, fields, t)
        return TreeDef("tuple", subtrees)
    if isinstance(tree, list):
        return TreeDef("list", tuple(_flatten(c, leaves, is_leaf) for c in tree))
    if isinstance(tree, dict):
        keys = tuple(tree)
        return TreeDef("dict", tuple(_flatten(tree[k], leaves, is_leaf) for k in keys), keys)
    if hasattr(t, "__dataclass_fields__"):
        names, aux = dataclass_parts(tree)
        subtrees = tuple(_flatten(getattr(tree, name), leaves, is_leaf) for name in names)
        return TreeDef("dataclass", subtrees, names, t, aux)
    leaves.append(tree)
    return LEAF


def unflatten(treedef: TreeDef, leaves: list[Any]) -> Any:
    """The tree `treedef` with `leaves` in its leaves' places (in order)."""
    it = iter(leaves)
    try:
        out = _unflatten(treedef, it)
    except StopIteration:
        raise ValueError(
            f"unflatten: {treedef} has {treedef.num_leaves} leaves, but only {len(leaves)} "
            "were given"
        ) from None
    rest = list(it)
    if rest:
        raise ValueError(f"unflatten: {len(rest)} leaves too many for {treedef}")
    return out


def _unflatten(treedef: TreeDef, it) -> Any:
    kind = treedef.kind
    if kind == "leaf":
        return next(it)
    if kind == "none":
        return None
    children = [_unflatten(c, it) for c in treedef.children]
    if kind == "tuple":
        return tuple(children)
    if kind == "list":
        return children
    if kind == "dict":
        return dict(zip(treedef.keys, children, strict=True))
    if kind == "namedtuple":
        return treedef.node_type(*children)
    if kind == "dataclass":
        return build_dataclass(treedef, children)
    return registry[treedef.node_type][1](treedef.aux, tuple(children))


def flatten_up_to(treedef: TreeDef, tree: Any, what: str = "tree") -> list[Any]:
    """The subtrees of `tree` at the leaves of `treedef`, of which `tree` must be an extension
    (the same containers down to `treedef`'s leaves, anything below them): for per-leaf options
    given as a tree prefix (vmap's in_axes) and for mapping over several trees at once."""
    out: list[Any] = []
    _up_to(treedef, tree, out, "", what)
    return out


def _up_to(treedef: TreeDef, tree: Any, out: list, path: str, what: str) -> None:
    if treedef.kind == "leaf":
        out.append(tree)
        return
    subtree = _flatten(tree, [], lambda x: x is not tree)  # one level: the node and its children
    same = (
        subtree.kind == treedef.kind
        and subtree.node_type is treedef.node_type
        and len(subtree.children) == len(treedef.children)
        and typed_key(subtree.keys) == typed_key(treedef.keys)
        and typed_key(subtree.aux) == typed_key(treedef.aux)
    )
    if not same:
        shown = "None" if tree is None else _one_level(subtree)
        raise ValueError(
            f"{what} does not match the structure {treedef} at {path or 'the top'}: "
            f"expected {_one_level(treedef)}, got {shown}"
        )
    for i, (child_def, child) in enumerate(zip(treedef.children, _children(tree), strict=True)):
        _up_to(child_def, child, out, path + path_step(treedef, i), what)


def _one_level(treedef: TreeDef) -> str:
    return str(
        TreeDef(
            treedef.kind,
            tuple(LEAF for _ in treedef.children),
            treedef.keys,
            treedef.node_type,
            treedef.aux,
        )
    )


def _children(tree: Any) -> list[Any]:
    """A node's children (one level), in flattening order."""
    children: list[Any] = []
    _flatten(tree, children, lambda x: x is not tree)
    return children


def broadcast_prefix(
    prefix: Any,
    treedef: TreeDef,
    is_leaf: Callable[[Any], bool] | None = None,
    what: str = "prefix",
) -> list[Any]:
    """One entry per leaf of `treedef`, from `prefix`: a tree with `treedef`'s containers down
    to some depth, each of whose leaves stands for the whole subtree at its place (JAX's tree
    prefixes: vmap's in_axes, where `is_leaf=lambda a: a is None` makes None an entry). Dicts
    match by keys, in any order."""
    out: list[Any] = []
    _broadcast(prefix, treedef, out, "", what, is_leaf)
    return out


def _broadcast(prefix: Any, treedef: TreeDef, out: list, path: str, what: str, is_leaf) -> None:
    level = _flatten(prefix, [], lambda x: x is not prefix or (is_leaf is not None and is_leaf(x)))
    if level.kind == "leaf":
        out.extend([prefix] * treedef.num_leaves)
        return
    children = _children(prefix)
    if level.kind == "dict" and treedef.kind == "dict" and set(level.keys) == set(treedef.keys):
        children = [prefix[k] for k in treedef.keys]
        level = TreeDef(level.kind, level.children, treedef.keys, level.node_type, level.aux)
    same = (
        level.kind == treedef.kind
        and level.node_type is treedef.node_type
        and len(level.children) == len(treedef.children)
        and typed_key(level.keys) == typed_key(treedef.keys)
    )
    if not same:
        raise ValueError(
            f"{what} does not match the structure {treedef} at {path or 'the top'}: expected "
            f"{_one_level(treedef)} or one entry for all of it, got {_one_level(level)}"
        )
    for i, (child_def, child) in enumerate(zip(treedef.children, children, strict=True)):
        _broadcast(child, child_def, out, path + path_step(treedef, i), what, is_leaf)


def tree_map(
    f: Callable, tree: Any, *rest: Any, is_leaf: Callable[[Any], bool] | None = None
) -> Any:
    """`f` applied to each leaf of `tree` (and the matching parts of the trees in `rest`, which
    have `tree`'s structure, or extend it), in a tree of the same structure."""
    leaves, treedef = flatten(tree, is_leaf)
    others = [flatten_up_to(treedef, r, f"tree_map: tree {i + 1}") for i, r in enumerate(rest)]
    return unflatten(treedef, [f(*xs) for xs in zip(leaves, *others, strict=True)])


def replace_leaves(treedef: TreeDef, make: Callable[[], TreeDef]) -> TreeDef:
    """The tree `treedef` with each leaf replaced by the subtree `make()` (a tree of trees)."""
    if treedef.kind == "leaf":
        return make()
    children = tuple(replace_leaves(c, make) for c in treedef.children)
    return TreeDef(treedef.kind, children, treedef.keys, treedef.node_type, treedef.aux)


def tuple_of(*children: TreeDef) -> TreeDef:
    return TreeDef("tuple", tuple(children))


def path_step(treedef: TreeDef, i: int) -> str:
    """The path from a node to its child `i`, as the user would write it: `[0]`, `['w']`, `.w`."""
    if treedef.kind in ("namedtuple", "dataclass"):
        return f".{treedef.keys[i]}"
    key = treedef.keys[i] if treedef.kind == "dict" else i
    return f"[{key!r}]"


def leaf_paths(treedef: TreeDef, prefix: str = "") -> list[str]:
    """Readable paths of the leaves, e.g. ["[0]", "['w']", ".bias"], for error messages."""
    if treedef.kind == "leaf":
        return [prefix]
    paths = []
    for i, child in enumerate(treedef.children):
        paths += leaf_paths(child, prefix + path_step(treedef, i))
    return paths
