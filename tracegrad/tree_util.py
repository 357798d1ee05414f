"""Pytree utilities under JAX's `jax.tree_util` names: what user code needs to take apart and
rebuild the containers that tracegrad's transforms accept (tree.py says which those are).

    >>> import numpy as np, tracegrad as tg
    >>> leaves, treedef = tg.tree_flatten({"w": np.ones(2), "b": (0.5, None)})
    >>> len(leaves), str(treedef)
    (2, "{'w': *, 'b': (*, None)}")
    >>> tg.tree_map(lambda x, y: x + y, {"a": 1.0, "b": 2.0}, {"a": 10.0, "b": 20.0})
    {'a': 11.0, 'b': 22.0}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .base import tree as _tree
from .base.tree import TreeDef
from .base.tree import register_pytree_node

__all__ = [
    "TreeDef",
    "register_pytree_node",
    "tree_flatten",
    "tree_leaves",
    "tree_map",
    "tree_structure",
    "tree_unflatten",
]


def tree_flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> tuple[list, TreeDef]:
    """`(leaves, treedef)`: the leaves in order and the structure (hashable, comparable).
    `is_leaf(x)` true keeps a subtree `x` whole, as one leaf."""
    return _tree.flatten(tree, is_leaf)


def tree_unflatten(treedef: TreeDef, leaves: Any) -> Any:
    """The tree of structure `treedef` with `leaves` in order (as many as it has leaves)."""
    if not isinstance(treedef, TreeDef):
        raise TypeError(
            f"tree_unflatten expects a TreeDef first (from tree_flatten or tree_structure), got "
            f"{type(treedef).__name__}; the signature is tree_unflatten(treedef, leaves)"
        )
    return _tree.unflatten(treedef, list(leaves))


def tree_leaves(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list:
    """The leaves of `tree`, in order."""
    return _tree.flatten(tree, is_leaf)[0]


def tree_structure(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> TreeDef:
    """The TreeDef of `tree`."""
    return _tree.flatten(tree, is_leaf)[1]


def tree_map(
    f: Callable, tree: Any, *rest: Any, is_leaf: Callable[[Any], bool] | None = None
) -> Any:
    """`f(leaf, *matching leaves of rest)` for each leaf of `tree`, in `tree`'s structure. The
    trees in `rest` have `tree`'s structure (or extend it: a leaf of `tree` may face a subtree,
    which `f` then receives whole)."""
    return _tree.tree_map(f, tree, *rest, is_leaf=is_leaf)
