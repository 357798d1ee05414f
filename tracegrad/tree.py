"""Nested tuples, lists and dicts of arrays ("trees"): flatten to leaves and back.

A `TreeDef` is hashable, so it can be part of a cache key. Dict keys keep their insertion order
(the gradient of a dict of parameters lists them as the user wrote them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, eq=False)
class TreeDef:
    kind: str  # "leaf", "none", "tuple", "list", "dict"
    children: tuple[TreeDef, ...] = ()
    keys: tuple = ()

    # Tree definitions are part of every cache key: hash once, compare cheaply. Dict keys compare
    # with their types: {1: x}, {1.0: x} and {True: x} are different trees (the results come back
    # under the caller's own keys).
    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.kind, self.children, self._typed_keys()))
            object.__setattr__(self, "_hash", h)
        return h

    def _typed_keys(self) -> tuple:
        return tuple((type(k), k) for k in self.keys)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return (
            isinstance(other, TreeDef)
            and hash(self) == hash(other)
            and (self.kind, self.children, self._typed_keys())
            == (other.kind, other.children, other._typed_keys())
        )

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def __str__(self) -> str:
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        if self.kind == "dict":
            return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(self.keys, self.children)) + "}"
        inner = ", ".join(map(str, self.children))
        return f"({inner})" if self.kind == "tuple" else f"[{inner}]"


LEAF = TreeDef("leaf")


def flatten(tree: Any) -> tuple[list[Any], TreeDef]:
    leaves: list[Any] = []
    return leaves, _flatten(tree, leaves)


def _flatten(tree: Any, leaves: list) -> TreeDef:
    if isinstance(tree, tuple) and not hasattr(tree, "_fields"):
        return TreeDef("tuple", tuple(_flatten(t, leaves) for t in tree))
    if isinstance(tree, list):
        return TreeDef("list", tuple(_flatten(t, leaves) for t in tree))
    if isinstance(tree, dict):
        keys = tuple(tree)
        return TreeDef("dict", tuple(_flatten(tree[k], leaves) for k in keys), keys)
    if tree is None:
        return TreeDef("none")
    leaves.append(tree)
    return LEAF


def unflatten(treedef: TreeDef, leaves: list[Any]) -> Any:
    it = iter(leaves)
    out = _unflatten(treedef, it)
    rest = list(it)
    if rest:
        raise ValueError(f"unflatten: {len(rest)} leaves too many for {treedef}")
    return out


def _unflatten(treedef: TreeDef, it) -> Any:
    if treedef.kind == "leaf":
        return next(it)
    if treedef.kind == "none":
        return None
    children = [_unflatten(c, it) for c in treedef.children]
    if treedef.kind == "tuple":
        return tuple(children)
    if treedef.kind == "list":
        return children
    return dict(zip(treedef.keys, children))


def map_leaves(fn: Callable[[Any], Any], tree: Any) -> Any:
    leaves, treedef = flatten(tree)
    return unflatten(treedef, [fn(x) for x in leaves])


def replace_leaves(treedef: TreeDef, make: Callable[[], TreeDef]) -> TreeDef:
    """The tree `treedef` with each leaf replaced by the subtree `make()` (a tree of trees)."""
    if treedef.kind == "leaf":
        return make()
    return TreeDef(treedef.kind, tuple(replace_leaves(c, make) for c in treedef.children), treedef.keys)


def tuple_of(*children: TreeDef) -> TreeDef:
    return TreeDef("tuple", tuple(children))


def leaf_paths(treedef: TreeDef, prefix: str = "") -> list[str]:
    """Readable paths of the leaves, e.g. ["[0]", "['w']"], for error messages."""
    if treedef.kind == "leaf":
        return [prefix]
    if treedef.kind == "none":
        return []
    paths = []
    for i, child in enumerate(treedef.children):
        key = treedef.keys[i] if treedef.kind == "dict" else i
        paths += leaf_paths(child, f"{prefix}[{key!r}]")
    return paths
