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

import inspect
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np


# User classes as nodes: registered classes and dataclasses (how one node of a user's class
# splits into its children and what rebuilds it).
registry: dict[type, tuple[Callable, Callable]] = {}  # class -> (flatten, unflatten)


def register_pytree_node(nodetype: type, flatten_func: Callable, unflatten_func: Callable) -> None:
    """Make instances of `nodetype` containers of arrays (pytree nodes), as in JAX.

    `flatten_func(obj)` returns `(children, aux_data)`: a tuple or list of the children (arrays,
    or trees of them) and anything hashable that the rebuild needs (a name, a shape, a flag;
    it is part of the cache key, so a new value traces again). `unflatten_func(aux_data,
    children)` rebuilds an instance; it is called with traced values while tracing and with
    gradients for a gradient, so it should only store its children.

    >>> import numpy as np, tracegrad as tg
    >>> class Affine:
    ...     def __init__(self, w, b, name):
    ...         self.w, self.b, self.name = w, b, name
    >>> tg.register_pytree_node(
    ...     Affine, lambda a: ((a.w, a.b), a.name), lambda name, c: Affine(*c, name))
    >>> g = tg.grad(lambda a, x: np.sum(a.w * x + a.b))(Affine(np.ones(2), 0.5, "l1"), np.ones(2))
    >>> type(g).__name__, g.w, float(g.b), g.name
    ('Affine', array([1., 1.]), 2.0, 'l1')
    """
    if not isinstance(nodetype, type):
        raise TypeError(f"register_pytree_node expects a class, got {type(nodetype).__name__}")
    # built-in types are leaves or containers already: registering one would change what every
    # argument means
    if nodetype.__module__ == "builtins" or issubclass(nodetype, (np.ndarray, np.generic)):
        raise TypeError(
            f"register_pytree_node: {nodetype.__name__} is a built-in type, which tracegrad "
            "already treats as a leaf or a container; register your own class (a subclass of "
            "it, for instance) instead"
        )
    if not callable(flatten_func) or not callable(unflatten_func):
        raise TypeError(
            f"register_pytree_node({nodetype.__name__}, flatten, unflatten): flatten and "
            "unflatten must be callables: flatten(obj) -> (children, aux_data), "
            "unflatten(aux_data, children) -> obj"
        )
    if nodetype in registry:
        raise ValueError(
            f"{nodetype.__qualname__} is already registered as a pytree node; a class is "
            "registered once (define the class again to change its rules)"
        )
    registry[nodetype] = (flatten_func, unflatten_func)


def is_user_node_type(cls: type) -> bool:
    """Whether `flatten` takes instances of `cls` apart and rebuilds them as `cls`: a registered
    class, a namedtuple or a dataclass (not a plain tuple, list or dict, nor a subclass of one,
    which come back as the plain container)."""
    if cls in registry:
        return True
    if issubclass(cls, (list, dict)):
        return False
    if issubclass(cls, tuple):
        return isinstance(getattr(cls, "_fields", None), tuple)
    return hasattr(cls, "__dataclass_fields__")


def custom_children(tree: Any, flatten_func: Callable) -> tuple[tuple | list, Any]:
    """(children, aux_data) of an instance of a registered class, checked."""
    cls = type(tree)
    out = flatten_func(tree)
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(
            f"the flatten function registered for {cls.__qualname__} must return a pair "
            f"(children, aux_data); it returned {_describe(out)}"
        )
    children, aux = out
    if not isinstance(children, (tuple, list)):
        raise TypeError(
            f"the flatten function registered for {cls.__qualname__} returned children of type "
            f"{type(children).__name__}; return a tuple or list of the children, e.g. "
            "((obj.w, obj.b), aux_data), or ((obj.w,), aux_data) for one child"
        )
    try:
        hash(aux)
    except TypeError:
        raise TypeError(
            f"the aux_data that the flatten function registered for {cls.__qualname__} returned "
            f"is not hashable (a {type(aux).__name__}); aux_data is part of the cache key: use "
            "tuples instead of lists, and keep arrays among the children"
        ) from None
    return children, aux


def _describe(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__}"


_layouts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class _Layout:
    """How a dataclass splits and rebuilds: `children`, the fields that hold arrays (or trees of
    them), in field order; `static`, the fields marked field(metadata={"static": True});
    `construct`, whether it is rebuilt by calling the class (its __init__ is the generated
    one)."""

    __slots__ = ("children", "construct", "static")

    def __init__(self, children: tuple[str, ...], static: tuple[str, ...], construct: bool):
        self.children = children
        self.static = static
        self.construct = construct


def _layout(cls: type) -> _Layout:
    layout = _layouts.get(cls)
    if layout is not None:
        return layout
    # imported here, not at import time (it costs 1-2 ms of every start-up): whoever passes a
    # dataclass has imported the module already
    import dataclasses

    params = getattr(cls, "__dataclass_params__", None)
    fields = dataclasses.fields(cls)
    construct = (params is None or params.init) and _init_takes(cls, [f for f in fields if f.init])
    if construct:
        initvars = [
            f.name
            for f in cls.__dataclass_fields__.values()
            if getattr(f, "_field_type", None) is dataclasses._FIELD_INITVAR
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        if initvars:
            raise TypeError(
                f"dataclass {cls.__qualname__} has an InitVar without a default "
                f"({', '.join(initvars)}), so tracegrad cannot rebuild it from its fields; give it "
                "a default, or register the class with tg.register_pytree_node"
            )
        # the others are set by __init__/__post_init__
        fields = [f for f in fields if f.init]
    static = tuple(f.name for f in fields if f.metadata.get("static", False))
    children = tuple(f.name for f in fields if f.name not in static)
    layout = _Layout(children, static, construct)
    _layouts[cls] = layout
    return layout


def _init_takes(cls: type, fields: list) -> bool:
    """Whether `cls(**fields)` rebuilds an instance: the generated __init__, or one of the
    class's own that takes the same keywords."""
    try:
        parameters = inspect.signature(cls.__init__).parameters.values()
    except (TypeError, ValueError):
        return False
    names = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return any(p.kind is p.VAR_KEYWORD for p in parameters) or all(f.name in names for f in fields)


def dataclass_parts(tree: Any) -> tuple[tuple[str, ...], tuple | None]:
    """(the names of the fields that are children, the static fields as aux) of a dataclass."""
    cls = type(tree)
    layout = _layout(cls)
    aux = None
    if layout.static:
        aux = tuple((name, getattr(tree, name)) for name in layout.static)
        try:
            hash(aux)
        except TypeError:
            bad = next(n for n, v in aux if not _hashable(v))
            raise TypeError(
                f"field {bad!r} of dataclass {cls.__qualname__} is static (metadata "
                f"{{'static': True}}) but its value is not hashable; static fields are part of "
                "the cache key: use a tuple, a number or a string"
            ) from None
    return layout.children, aux


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def build_dataclass(treedef: TreeDef, children: list) -> Any:
    cls = treedef.node_type
    values = dict(zip(treedef.keys, children, strict=True))
    values.update(treedef.aux or ())
    if _layout(cls).construct:
        return cls(**values)
    obj = object.__new__(cls)  # a class with its own __init__: set the fields directly
    for name, value in values.items():
        object.__setattr__(obj, name, value)
    return obj


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
