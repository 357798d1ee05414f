"""User classes as pytree nodes: registered classes and dataclasses (the base of tree.py).

How one node of a user's class splits into its children and what rebuilds it: the classes
registered with `register_pytree_node(cls, flatten, unflatten)` (JAX's signature), and
dataclasses (their fields are children, but those marked `metadata={"static": True}`, which
are part of the cache key). tree.py walks the children.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .tree import TreeDef

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
