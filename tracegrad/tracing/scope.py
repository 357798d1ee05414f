"""The scope of a trace: what a function can reach by name, walked before it is traced.

The walk follows the names in the function's code through the user functions, objects and
containers it reaches (`MAX_DEPTH`, `MAX_ITEMS`, `MAX_ENTRIES` bound it) and records guards and
reachable arrays; while tracing, a reachable array used in the computation becomes a hidden
input; after it, `Scope.finish` makes the program's `Captured` guard.
"""

from __future__ import annotations

import functools
import sys
import types
from typing import Any

import numpy as np

from ..base import config
from .accumulators import is_accumulator
from .attributes import (
    DYNAMIC_LOOKUP,
    DYNAMIC_NAMES,
    attribute,
    implicit_methods,
    namespace_object,
    own_names,
)
from .guards import Captured, Guard, Path, ref
from .reads import generator_types, global_random, is_library_module

log = config.log  # `logging` is imported on first use

MAX_DEPTH = 16  # how far through objects and containers the walk goes

MAX_ITEMS = 64  # lists and dicts of more scalars than this are compared as a whole


MAX_ENTRIES = 4000  # a walk that reaches more values than this stops and guards identities


_SCALARS = (bool, int, float, complex, str, bytes, type(None), type(Ellipsis), slice, range)


_KEY_STEPS = frozenset({"fun", "fwd", "bwd", "__func__", "func"})


def _in_key(path: Path) -> bool:
    """The transformed function itself, and what it wraps: the program store's key already
    names their code and types (calls.transformed.spec_of), so they need no guard."""
    return path.root == "fun" and all(k == "attr" and n in _KEY_STEPS for k, n in path.steps)


def _bound_builtin(value: Any) -> bool:
    """A method of a C type bound to an object (not a module's function, as math.sin is)."""
    if not isinstance(value, (types.BuiltinMethodType, types.MethodWrapperType)):
        return False
    owner = getattr(value, "__self__", None)
    return owner is not None and not isinstance(owner, (types.ModuleType, type))


def _code_names(code: types.CodeType, into: set[str]) -> None:
    into.update(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code_names(const, into)


def view_of(base: np.ndarray, view: np.ndarray) -> tuple | None:
    """How `view` reads the memory of `base` as basic slicing and a transpose of `base`:
    (the slice index per axis of base, the shape with its unsliced axes dropped, the
    permutation of the remaining axes), after which a reshape to view.shape only inserts axes
    of length 1. None when it is not that (a dtype view, rows that wrap...). The answer is
    checked by making the view with NumPy from `base` and comparing pointer and strides."""
    if view.dtype != base.dtype or view.size == 0 or base.size == 0:
        return None
    offset = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    long_axes = sorted(
        (j for j in range(base.ndim) if base.shape[j] > 1), key=lambda j: -base.strides[j]
    )
    if offset < 0 or any(base.strides[j] <= 0 for j in long_axes):
        return None
    start = [0] * base.ndim
    for j in long_axes:  # the byte offset, as a start index on each axis (largest stride first)
        start[j], offset = divmod(offset, base.strides[j])
    if offset or any(start[j] >= base.shape[j] for j in long_axes):
        return None
    taken: dict[int, tuple[int, int]] = {}  # base axis -> (view axis, step)
    for k in (k for k in range(view.ndim) if view.shape[k] > 1):
        for j in long_axes:
            step, rest = divmod(view.strides[k], base.strides[j])
            last = start[j] + step * (view.shape[k] - 1)
            if j not in taken and not rest and step != 0 and 0 <= last < base.shape[j]:
                taken[j] = (k, step)
                break
        else:
            return None
    index = []  # (start, stop, step) per axis as range() takes them, as the slice primitive does
    for j in range(base.ndim):
        k, step = taken.get(j, (None, 1))
        last = start[j] + (0 if k is None else step * (view.shape[k] - 1))
        index.append((start[j], last + (1 if step > 0 else -1), step))
    index = tuple(index)
    kept = sorted(taken)  # the sliced array's remaining axes, in base's order
    squeezed = tuple(view.shape[taken[j][0]] for j in kept)
    perm = tuple(sorted(range(len(kept)), key=lambda i: taken[kept[i]][0]))
    window = tuple(slice(a, None if b < 0 else b, c) for a, b, c in index)
    made = base[window].reshape(squeezed).transpose(perm)
    made = made.reshape(view.shape)
    same = made.__array_interface__["data"][0] == view.__array_interface__["data"][0] and all(
        a == b for a, b, d in zip(made.strides, view.strides, view.shape, strict=True) if d > 1
    )
    return (index, squeezed, perm) if same else None


# _Reachable and Scope are plain classes, not dataclasses: a dataclass costs about 1 ms to create,
# paid by every process's first trace.


class _Reachable:
    """An array the function can reach by name, at `path`, and how the trace used it."""

    __slots__ = ("array", "beyond", "direct", "path", "read", "viewed")

    def __init__(self, array: np.ndarray, path: Path, beyond: bool = False):
        self.array = array
        self.path = path
        self.direct = False  # used as an operand of the traced computation
        self.viewed = False  # a view of it was used: the program holds that view
        # found beyond the walk's bounds: read afresh if the computation uses it, else only its
        # identity is guarded (no copy of everything a huge structure holds)
        self.beyond = beyond
        self.read = False  # tracegrad read its contents while tracing (a static index or mask)


class Scope:
    """The values a function can reach by name, found before it is traced."""

    def __init__(self):
        self.guards: list[Guard] = []
        self.arrays: dict[int, _Reachable] = {}  # id(array) -> where it is
        self.owners: dict[int, list[_Reachable]] = {}  # id(memory owner) -> arrays
        self.hidden: list[tuple[_Reachable | None, np.ndarray]] = []
        self._hidden_ids: dict[int, int] = {}
        # a view's hidden input by what it reads (see hidden_input): `H.T` makes a new view
        # object each time it runs, and each loop iteration must read the same input
        self._hidden_views: dict[tuple, int] = {}
        # random-number generators the function can reach (see `random_sources`), and the
        # names its code uses
        self.generators: list[tuple[str, Any]] = []
        self.generator_paths: list[tuple[Path, Any]] = []  # where each generator lives
        # where the function reaches numpy.random.default_rng by another name (`from
        # numpy.random import default_rng`): its unseeded calls must draw on every call too
        self.rng_constructors: list[Path] = []
        self.names: set[str] = set()
        self.roots: tuple = ()  # (the function, the static arguments): what the paths start at
        # every object the walk met, as _Walker.seen holds them: id -> (value, path, beyond)
        self.met: dict[int, tuple[Any, Path, bool]] = {}
        # where the arrays the function indexes with traced values live: the trace replaces
        # them there for its duration (tracing/indexed_arrays.py)
        self.stand_ins: tuple[Path, ...] = ()
        # tg.make_ir's: the arrays the function reaches show as the constants they are now
        self.constants = False

    @staticmethod
    def of(fun: Any, static: tuple) -> Scope:
        """Walk what `fun` (and the static arguments) can reach by name."""
        names: set[str] = set()
        for _ in range(4):  # the names grow as functions are found: walk until they settle
            known = len(names)
            scope = Scope()
            walker = _Walker(scope, names)
            walker.walk_roots(fun, static)
            scope.met = walker.seen
            if len(names) == known:
                break
        scope.names = names
        scope.roots = (fun, static)
        return scope

    def random_sources(self) -> list[tuple[str, Any]]:
        """(description, generator) for each random-number generator whose numbers the traced
        function could draw: the generators it reaches by name, and NumPy's global one when its
        code names `random` (np.random.normal...). Their draws are recorded while tracing
        (random_draws.py); one that is not (its state changed while tracing) would be baked
        into the program as a constant: `check_random_sources` refuses it."""
        sources = list(self.generators)
        glob = global_random(imported="random" in self.names)
        if glob is not None and ("random" in self.names or any(glob is g for _, g in sources)):
            sources.append(("NumPy's global random generator (np.random.*)", glob))
        return sources

    # ---- used while tracing
    def _entries(self, value: np.ndarray) -> tuple[_Reachable | None, list[_Reachable]]:
        """`value`'s own entry when it is a reachable array, else (None, the entries of the
        reachable arrays it is a view of)."""
        entry = self.arrays.get(id(value))
        if entry is not None:
            return entry, []
        owner = value if value.base is None else value.base
        return None, [
            e for e in self.owners.get(id(owner), ()) if np.may_share_memory(e.array, value)
        ]

    def path_of(self, value: np.ndarray) -> Path | None:
        """Where the function reaches `value` (or the array `value` is a view of), or None."""
        entry, viewed = self._entries(value)
        if entry is not None:
            return entry.path
        return viewed[0].path if viewed else None

    def hidden_input(self, value: np.ndarray) -> int | None:
        """If `value` is (a view of) a reachable array, the index of the hidden input that
        stands for it (created on first use), else None: the value is a constant."""
        if self.constants:
            return None
        index = self._hidden_ids.get(id(value))
        if index is not None:
            return index
        entry, viewed = self._entries(value)
        if entry is not None:
            entry.direct = True
        elif not viewed:
            return None
        geometry = None
        if entry is None:
            # Views of one owner with the same data pointer, shape, strides and dtype read the
            # same memory on every call (the program holds them, and their reachable arrays are
            # guarded by identity), so they are one input. The owner is kept alive by the view
            # held in self.hidden, so its id is not reused while this scope lives.
            owner = value if value.base is None else value.base
            geometry = (
                id(owner),
                value.__array_interface__["data"][0],
                value.shape,
                value.strides,
                value.dtype.str,
            )
            index = self._hidden_views.get(geometry)
            if index is not None:
                self._hidden_ids[id(value)] = index
                return index
        for e in viewed:
            e.viewed = True
        index = len(self.hidden)
        self._hidden_ids[id(value)] = index
        if geometry is not None:
            self._hidden_views[geometry] = index
        self.hidden.append((entry, value))
        return index

    def hidden_view(self, value: np.ndarray) -> tuple[int, np.ndarray, tuple] | None:
        """If `value` is a view of a reachable array that basic slicing and a transpose make
        (`data[t]`, `H.T`, `x[:, 1::2]`), (the hidden input of that array, the array, how:
        `view_of`): the trace computes the view from the array, so that a loop's iterations
        reading rows `data[t]` read one input and roll, and a rebound array is read afresh."""
        if self.constants or id(value) in self._hidden_ids:
            return None
        entry, viewed = self._entries(value)
        if entry is not None:
            return None
        for e in viewed:
            how = view_of(e.array, value)
            if how is not None:
                index = self.hidden_input(e.array)
                assert index is not None
                return index, e.array, how
        return None

    def read_while_tracing(self, value: np.ndarray) -> None:
        """Tracing used the contents of `value` (a static index array, a mask): if it is (a view
        of) a reachable array, its contents are guarded, even when the computation also uses it
        as an operand (read afresh, which alone would leave the read contents stale)."""
        entry, viewed = self._entries(value)
        for e in [entry] if entry is not None else viewed:
            e.read = True

    def finish(self, fun: Any, static: tuple, hooks: bool = False) -> Captured:
        """The guards and hidden-input readers of the program traced with this scope.

        Guarded values are read again now: what the trace itself changed (a call counter the
        function increments) is the value the next call must find, or every call would trace.

        A program with `hooks` holds callables made while tracing, which close over the very
        objects the function reached then (the list a tap's hook appends to): an equal object
        will not do, so every object met is guarded by identity, but tracegrad's own wrappers
        (which a new transform of the same function makes anew)."""
        guards = [_refreshed(g, fun, static) for g in self.guards]
        if hooks:
            for value, path, _ in self.met.values():
                if path.steps and getattr(type(value), "_capture_children", None) is None:
                    guards.append(Guard(path, "identity", ref(value)))
        for entry in self.arrays.values():
            if entry.viewed:  # rebinding it would leave the held view behind
                guards.append(Guard(entry.path, "identity", ref(entry.array)))
            if entry.read or not (entry.direct or entry.viewed or entry.beyond):
                # NumPy may have read it while tracing (or tracegrad did: entry.read)
                guards.append(Guard(entry.path, "content", np.array(entry.array, copy=True)))
            elif entry.beyond and not (entry.direct or entry.viewed):
                guards.append(Guard(entry.path, "identity", ref(entry.array)))
        readers: list[Path | np.ndarray] = []
        for entry, value in self.hidden:
            if entry is not None:
                readers.append(entry.path)
                guards.append(Guard(entry.path, "array", (value.shape, value.dtype)))
            else:
                readers.append(value)  # a view, held: its array is guarded by identity
        return Captured(guards, readers)


def _refreshed(guard: Guard, fun: Any, static: tuple) -> Guard:
    try:
        value = guard.path.read(fun, static)
    except Exception:
        return guard
    if guard.kind == "value" and isinstance(value, _SCALARS + (np.generic, np.dtype)):
        return Guard(guard.path, "value", value)
    if guard.kind == "identity":
        return Guard(guard.path, "identity", ref(value))
    if guard.kind == "length" and isinstance(value, (list, tuple)):
        return Guard(guard.path, "length", (type(value), len(value)))
    if guard.kind == "keys" and isinstance(value, dict):
        return Guard(guard.path, "keys", tuple(value))
    return guard


class _Walker:
    def __init__(self, scope: Scope, names: set[str]):
        self.scope, self.names = scope, names
        # id -> (the value, where the walk met it first, whether that was beyond the bounds);
        # holding the value keeps its id from being reused by another during the walk
        self.seen: dict[int, tuple[Any, Path, bool]] = {}
        self.count = 0
        self.stopped_at: Path | None = None  # where the walk reached MAX_ENTRIES

    def walk_roots(self, fun: Any, static: tuple) -> None:
        self.visit(fun, Path("fun", 0, (), "", "the function"), 0)
        for j, value in enumerate(static):
            self.visit(value, Path("static", j, (), f"arg{j}", "static argument {}"), 0)
        if self.stopped_at is not None:
            log.warning(
                "tracegrad: the traced function reaches more than %d values by name; from %s on, "
                "objects and containers are checked by identity only, so a change inside them "
                "is not seen by later calls. Pass what the function needs as arguments.",
                MAX_ENTRIES,
                self.stopped_at.description or "there",
            )

    def guard(self, path: Path, kind: str, expected: Any = None) -> None:
        self.scope.guards.append(Guard(path, kind, expected))

    def visit(self, value: Any, path: Path, depth: int) -> None:
        self.count += 1
        t = type(value)
        if isinstance(value, (*_SCALARS, np.generic, np.dtype)):
            self.guard(path, "value", value)
            return
        if _bound_builtin(value):
            # `d.clear`, `lst.append`: a new method object on every read, so its identity means
            # nothing; what it stands for is the object it is bound to
            value, path = value.__self__, path.hop("attr", "__self__")
            t = type(value)
        beyond = self.count > MAX_ENTRIES or depth > MAX_DEPTH
        # a tuple's identity means nothing (equal tuples made apart are not the same object):
        # it is walked wherever it is met, and what it holds is guarded as anything else
        met = None if t is tuple else self.seen.get(id(value))
        if met is not None:
            _, first, first_beyond = met
            # An object reached by two paths is guarded where it was met first; here the
            # program must prove that this path still holds that very object. Without this, a
            # closure over (x, x) whose code reads t[1] shares its program with one over (x, y).
            if beyond or not first_beyond:
                self.guard(path, "alias", first)
                return
            # met first beyond the bounds (guarded by identity only), now within them: walked
            # here, and the first path must hold what this one holds
            self.guard(first, "alias", path)
        if t is not tuple:
            self.seen[id(value)] = (value, path, beyond)
        if beyond:
            if met is None and self.stopped_at is None and depth <= MAX_DEPTH:
                self.stopped_at = path
            if isinstance(value, np.ndarray) and type(value) is np.ndarray:
                self._array(value, path, beyond=True)  # still read afresh if it is used
            else:
                self.guard(path, "identity", ref(value))
            return
        # a generator's method: from numpy.random import normal
        owner = attribute(value, "__self__")
        random_types = generator_types()
        if isinstance(owner, random_types) and not isinstance(value, random_types):
            value, path = owner, path.hop("attr", "__self__")
        if hasattr(t, "_tracegrad_generator"):  # a stand-in an enclosing trace installed
            value = object.__getattribute__(value, "_tracegrad_generator")
        if isinstance(value, random_types):
            self.scope.generators.append((f"the generator {path.description}", value))
            self.scope.generator_paths.append((path, value))
            self.guard(path, "identity", ref(value))
        elif _is_default_rng(value):
            self.scope.rng_constructors.append(path)
            self.guard(path, "identity", ref(value))
        elif isinstance(value, np.ndarray):
            self._array(value, path)
        elif t in (tuple, list):
            self._sequence(value, path, depth)
        elif t is dict:
            self._dict(value, path, depth)
        elif isinstance(value, (list, dict)):  # OrderedDict, defaultdict, a user's Config(dict)
            self._derived_container(value, path, depth)
        elif isinstance(value, types.ModuleType):
            self.guard(path, "identity", ref(value))
            if not is_library_module(value.__name__):
                self._attributes(value, path, depth, only_names=True)
        elif isinstance(value, types.FunctionType):
            self._function(value, path, depth)
        elif isinstance(value, types.MethodType):
            self.visit(value.__func__, path.hop("attr", "__func__"), depth + 1)
            self.visit(value.__self__, path.hop("attr", "__self__"), depth + 1)
        elif isinstance(value, functools.partial):
            # its class, how many arguments it holds and their names (the guard reads them)
            self.guard(path.hop("attr", "__class__"), "identity", ref(type(value)))
            self.guard(path.hop("attr", "args"), "length", (tuple, len(value.args)))
            self.guard(path.hop("attr", "keywords"), "keys", tuple(value.keywords))
            self.visit(value.func, path.hop("attr", "func"), depth + 1)
            for i, arg in enumerate(value.args):
                self.visit(arg, path.hop("attr", "args").item(i), depth + 1)
            for k, arg in value.keywords.items():
                self.visit(arg, path.hop("attr", "keywords").item(k), depth + 1)
        elif getattr(t, "_capture_children", None) is not None:
            self._object(value, path, depth)
        elif isinstance(value, type) and not is_library_module(value.__module__):
            self.guard(path, "identity", ref(value))
            self._class_attributes(value, path, depth)  # A.k, read through the class
        elif isinstance(value, type) or is_library_module(getattr(t, "__module__", None)):
            if not isinstance(value, type) and namespace_object(value):
                self._namespace(value, path, depth)  # argparse.Namespace, SimpleNamespace
            else:
                self.guard(path, "identity", ref(value))
        else:
            self._object(value, path, depth)

    # ---- kinds of values
    def _array(self, value: np.ndarray, path: Path, beyond: bool = False) -> None:
        scope = self.scope
        entry = scope.arrays.get(id(value))
        if entry is not None:  # met first beyond the bounds, now within them (see `visit`)
            entry.path, entry.beyond = path, beyond
            return
        entry = _Reachable(value, path, beyond=beyond)
        scope.arrays[id(value)] = entry
        owner = value if value.base is None else value.base
        scope.owners.setdefault(id(owner), []).append(entry)

    def _sequence(self, value: list | tuple, path: Path, depth: int) -> None:
        if not value and type(value) is list:
            # taken for an accumulator (a hook appends to it on every call): not its length but
            # its identity, so that a closure over another list does not share the program
            # (whose hook appends to this one)
            self.guard(path, "identity", ref(value))
            return
        if len(value) > MAX_ITEMS and all(isinstance(v, _SCALARS) for v in value):
            self.guard(path, "value", tuple(value) if type(value) is tuple else list(value))
            return
        self.guard(path, "length", (type(value), len(value)))
        for i in range(len(value)):  # read as the guard reads it (a subclass's __getitem__)
            self.visit(value[i], path.item(i), depth + 1)

    def _dict(self, value: dict, path: Path, depth: int) -> None:
        if not value:
            self.guard(path, "identity", ref(value))  # likewise an empty dict
            return
        if (
            type(value) is dict
            and len(value) > MAX_ITEMS
            and all(isinstance(v, _SCALARS) for v in value.values())
        ):
            self.guard(path, "value", dict(value))  # one comparison of the whole dict per call
            return
        self.guard(path, "keys", tuple(value))
        for key in list(value):  # under any key: the guards hold keys that are not literals
            self.visit(value[key], path.item(key), depth + 1)

    def _derived_container(self, value: list | dict, path: Path, depth: int) -> None:
        """A subclass of list or dict: its type, its items, and (a user's class) the attributes
        the code names, such as an attribute-access dict's."""
        self.guard(path.hop("attr", "__class__"), "identity", ref(type(value)))
        if isinstance(value, list):
            self._sequence(value, path, depth)
        else:
            self._dict(value, path, depth)
        if not is_library_module(getattr(type(value), "__module__", None)):
            self._attributes(value, path, depth, only_names=False)

    def _class_attributes(self, cls: type, path: Path, depth: int) -> None:
        """The attributes of a user's class that the code names (`A.k`, `Config.rate`): a class
        is guarded by identity, and what it holds may change."""
        names = self.names
        if DYNAMIC_NAMES.intersection(names):  # getattr(Config, key): every attribute
            names = names | own_names({}, cls)
        for name in sorted(names):
            if name.startswith("__"):
                continue
            owner = next((c for c in cls.__mro__ if name in vars(c)), None)
            if owner is None or owner is object:
                continue
            child = vars(owner)[name]
            if isinstance(child, property):
                self._getter(child, path.attr(name), depth)
                continue
            if isinstance(child, (staticmethod, classmethod)) or (
                hasattr(type(child), "__get__") and not isinstance(child, types.FunctionType)
            ):
                continue  # read through the class it is another object (a bound method...)
            self.visit(child, path.attr(name), depth + 1)

    def _getter(self, prop: property, path: Path, depth: int) -> None:
        """A property (at `path`) is not run here; what its getter reads is walked."""
        if isinstance(prop.fget, types.FunctionType):
            _code_names(prop.fget.__code__, self.names)
            self.visit(prop.fget, path.hop("attr", "fget"), depth + 1)

    def _namespace(self, value: Any, path: Path, depth: int) -> None:
        """A standard-library object that only holds attributes (argparse.Namespace,
        types.SimpleNamespace): its type and the attributes the code names."""
        self.guard(path.hop("attr", "__class__"), "identity", ref(type(value)))
        self._attributes(value, path, depth, only_names=True)

    def _function(self, fun: types.FunctionType, path: Path, depth: int) -> None:
        if is_library_module(getattr(fun, "__module__", None)):
            self.guard(path, "identity", ref(fun))
            return
        code = fun.__code__
        if not _in_key(path):
            self.guard(path.hop("attr", "__code__"), "identity", ref(code))
        own: set[str] = set()
        _code_names(code, own)
        self.names |= own
        name = fun.__name__
        for g in sorted(own):
            if g in fun.__globals__:
                value = fun.__globals__[g]
                where = path.named((("attr", "__globals__"), ("item", g)), g, "global {}")
                self._named(value, where, depth, code, g)
        for i, var in enumerate(code.co_freevars):
            cell = fun.__closure__[i]
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell: the variable is assigned later
                continue
            where = path.named((("cell", i),), var, f"closure variable {{}} of {name}")
            self._named(value, where, depth, code, var)
        params = code.co_varnames[code.co_posonlyargcount : code.co_argcount]
        defaults = fun.__defaults__ or ()
        for i, value in enumerate(defaults):
            label = (
                params[len(params) - len(defaults) + i] if len(params) >= len(defaults) else str(i)
            )
            where = path.named(
                (("attr", "__defaults__"), ("item", i)), label, f"default argument {{}} of {name}"
            )
            self.visit(value, where, depth + 1)
        for key, value in (fun.__kwdefaults__ or {}).items():
            where = path.named(
                (("attr", "__kwdefaults__"), ("item", key)), key, f"default argument {{}} of {name}"
            )
            self.visit(value, where, depth + 1)

    def _named(self, value: Any, path: Path, depth: int, code: types.CodeType, name: str) -> None:
        """A global or closure variable: an accumulator (accumulators.py) by identity only."""
        if is_accumulator(value, code, name):
            return self.guard(path, "identity", ref(value))
        self.visit(value, path, depth + 1)

    def _object(self, value: Any, path: Path, depth: int) -> None:
        """A user object: its type, the children it names (tracegrad's own callables), its
        functions, and its attributes whose names the traced code uses."""
        if not _in_key(path):
            self.guard(path.hop("attr", "__class__"), "identity", ref(type(value)))
        children = getattr(type(value), "_capture_children", None)
        if children is not None:
            for attr in children:
                child = getattr(value, attr, None)
                if child is not None:
                    self.visit(child, path.hop("attr", attr), depth + 1)
            return
        wrapped = attribute(value, "__wrapped__")
        if wrapped is not None:
            self.visit(wrapped, path.hop("getattr", "__wrapped__"), depth + 1)
        self._attributes(value, path, depth, only_names=False)

    def _attributes(self, value: Any, path: Path, depth: int, only_names: bool) -> None:
        instance = getattr(value, "__dict__", None)
        instance = instance if isinstance(instance, dict) else {}
        # the class's own (or inherited) __call__, looked up without binding it
        call = next(
            (vars(c)["__call__"] for c in type(value).__mro__ if "__call__" in vars(c)), None
        )
        if not only_names and isinstance(call, types.FunctionType):
            self.visit(call, path.hop("attr", "__class__").hop("getattr", "__call__"), depth + 1)
        names = self.names
        if not only_names:
            implicit = implicit_methods(type(value))
            for name, method in implicit.items():
                self.visit(method, path.hop("attr", "__class__").hop("getattr", name), depth + 1)
            if DYNAMIC_LOOKUP.intersection(implicit):
                # Python runs the class's own lookup (p.w through __getattr__, p["w"]): which
                # attributes it reads cannot be told from names, so every one is walked
                names = names | own_names(instance, None)
        if DYNAMIC_NAMES.intersection(self.names):
            # the code reads attributes by computed names (getattr(cfg, key), vars(obj)[key]):
            # every attribute may be read
            names = names | own_names(instance, None if only_names else type(value))
        for name in sorted(names):
            if name.startswith("__"):
                continue
            if name in instance:
                child = instance[name]
            elif not only_names and hasattr(type(value), name):
                child = getattr(type(value), name)
                if isinstance(child, property):
                    self._getter(child, path.hop("attr", "__class__").hop("getattr", name), depth)
                    continue
                if isinstance(child, (staticmethod, classmethod)):
                    continue
                if hasattr(type(child), "__get__") and not isinstance(child, types.FunctionType):
                    try:  # a slot or another descriptor: the value is the instance's
                        child = getattr(value, name)
                    except AttributeError:
                        continue
            else:
                continue
            self.visit(child, path.attr(name), depth + 1)


def _is_default_rng(value: Any) -> bool:
    """Whether `value` is NumPy's own `numpy.random.default_rng` (read without importing
    numpy.random, which `import tracegrad` does not load)."""
    module = sys.modules.get("numpy.random")
    current = None if module is None else module.__dict__.get("default_rng")
    original = getattr(current, "__wrapped__", current)  # a trace's stand-in wraps it
    return original is not None and value is original
