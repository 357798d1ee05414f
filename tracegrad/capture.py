"""What a traced function reads from outside its arguments, and how a program stays current.

A user's function reads globals, closure variables, default arguments and attributes of static
arguments. A compiled program must never return a stale result when one of them changes, so
before a top-level trace tracegrad walks everything the function can reach *by name* (the names
in its code, recursively through the user functions, objects and containers it reaches) and
records a `Scope`. After the trace, the scope becomes a `Captured` object that the program
checks on every call:

- an array used directly in the traced computation is a *hidden input* of the program: it is read
  through its path (say, `loss.__globals__['X']`) on every call and passed to the compiled code,
  so in-place changes (`X[:] = ...`) and rebinding (`X = new_array`, same shape and dtype) are
  seen without tracing again;
- a view of such an array (`X[:, 0]`, `X.T`) is a hidden input held by reference (so in-place
  changes are seen); its array must stay the same object, else the function is traced again;
- an array the trace can have read with plain NumPy (`X.mean(0)` is computed while tracing and
  baked into the program) is compared with a snapshot on every call;
- Python numbers, strings, tuples, dtypes, modules, functions' code and other objects are guarded
  by value or identity: a change traces again, and `TRACEGRAD_LOG=retrace` names what changed.

The guard of a program is generated as one small Python function, so a call pays a few dictionary
and attribute reads for it.
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MAX_DEPTH = 6  # how far through objects and containers the walk goes
MAX_ITEMS = 64  # containers longer than this are compared as a whole (lists, dicts of scalars)
MAX_ENTRIES = 4000  # a walk that reaches more values than this stops and guards identities

_SCALARS = (bool, int, float, complex, str, bytes, type(None), type(Ellipsis), slice, range)
_STDLIB = os.path.abspath(sysconfig.get_paths()["stdlib"])
_LIBRARIES = ("numpy", "tracegrad", "numba", "scipy", "llvmlite", "math", "builtins")


def _is_library_module(name: str | None) -> bool:
    """Modules whose functions and values do not change under a running program: NumPy,
    tracegrad, the standard library. Everything else (the user's `__main__`, notebooks, their
    own packages) is walked."""
    if not name:
        return False
    top = name.split(".")[0]
    if top in _LIBRARIES:
        return True
    if top not in sys.stdlib_module_names:
        return False
    # a user's own module can share a standard name (a package called `test`): check the file
    file = getattr(sys.modules.get(top), "__file__", None)
    return file is None or os.path.abspath(file).startswith(_STDLIB)


_GENERATORS = (np.random.Generator, np.random.RandomState, np.random.BitGenerator)
_GLOBAL_RANDOM = np.random.mtrand._rand


def _generator_state(generator: Any) -> bytes:
    """A comparable snapshot of a generator's state (it changes with every number drawn)."""
    bits = generator if isinstance(generator, np.random.BitGenerator) else None
    if bits is None:
        bits = getattr(generator, "bit_generator", None) or generator._bit_generator
    return _state_bytes(bits.state)


def _state_bytes(state: Any) -> bytes:
    if isinstance(state, dict):
        return b"{" + b",".join(repr(k).encode() + b":" + _state_bytes(v) for k, v in state.items()) + b"}"
    if isinstance(state, np.ndarray):
        return state.tobytes()
    return repr(state).encode()


def snapshot_random_sources(scope: Any) -> list[tuple[str, Any, bytes]]:
    if scope is None:
        return []
    return [(what, g, _generator_state(g)) for what, g in scope.random_sources()]


def check_random_sources(snapshot: list[tuple[str, Any, bytes]], function: str, fix_line: str) -> None:
    """Refuse a trace that drew random numbers from a generator that outlives the call: the
    compiled program would return those same numbers on every call."""
    from .errors import TracingError

    for what, generator, before in snapshot:
        if _generator_state(generator) != before:
            raise TracingError(
                f"{function} drew random numbers from {what} while it was traced{fix_line}; the "
                "compiled program would return the same numbers on every call. Draw them outside "
                "the function and pass them in as an argument, or pass a seed as a static "
                "argument (static_argnums) and create the generator inside the function "
                "(np.random.default_rng(seed)), so that each seed gives its own numbers."
            )


def refuse_array_subclass(value: Any, what: str) -> None:
    """Masked arrays and other ndarray subclasses that change NumPy's semantics are refused:
    reading them as plain arrays would silently drop what makes them different."""
    t = type(value)
    if t is np.ndarray or not isinstance(value, np.ndarray) or hasattr(t, "_tracegrad_current"):
        return  # plain, not an array, or a fillable.Fillable (plain NumPy semantics)
    if isinstance(value, np.ma.MaskedArray):
        raise TypeError(
            f"{what} is a masked array (numpy.ma); tracegrad would ignore its mask. Pass "
            "m.filled(value) for a plain array, or the data and the mask as two arrays and "
            "use np.where(mask, ..., ...) in the function."
        )
    changes = (
        t.__array_ufunc__ is not np.ndarray.__array_ufunc__
        or t.__array_function__ is not np.ndarray.__array_function__
        or isinstance(value, np.matrix)
    )
    if changes:
        raise TypeError(
            f"{what} is a {t.__module__}.{t.__name__}, an ndarray subclass with its own "
            "arithmetic; tracegrad computes with plain NumPy semantics. Convert it with "
            "np.asarray(...) first if plain array semantics are what you mean."
        )


# ----------------------------------------------------------------------------------------------
# Paths: how to reach a value from the call's roots (the transformed function, static arguments)


@dataclass(frozen=True)
class Path:
    root: str  # "fun" or "static"
    root_index: int
    steps: tuple[tuple[str, Any], ...] = ()
    label: str = ""  # the value as the user's code names it: "X", "params['W']", "self.c"
    context: str = "{}"  # where that name lives: "global {}", "closure variable {} of loss"

    @property
    def description(self) -> str:
        return self.context.format(repr(self.label) if self.label else "")

    def hop(self, kind: str, key: Any) -> Path:
        """One more step, under the same name (a method's function, a wrapped function)."""
        return Path(self.root, self.root_index, (*self.steps, (kind, key)), self.label, self.context)

    def item(self, key: Any) -> Path:
        step = Path(self.root, self.root_index, (*self.steps, ("item", key)))
        return Path(step.root, step.root_index, step.steps, f"{self.label}[{key!r}]", self.context)

    def attr(self, name: str) -> Path:
        label = f"{self.label}.{name}" if self.label else name
        return Path(self.root, self.root_index, (*self.steps, ("getattr", name)), label, self.context)

    def named(self, steps: tuple[tuple[str, Any], ...], label: str, context: str) -> Path:
        """Steps into a function's namespace: the value gets the name it has there."""
        return Path(self.root, self.root_index, (*self.steps, *steps), label, context)

    def read(self, fun: Any, static: tuple) -> Any:
        value = fun if self.root == "fun" else static[self.root_index]
        for kind, key in self.steps:
            if kind in ("attr", "getattr"):
                value = getattr(value, key)
            elif kind == "item":
                value = value[key]
            else:
                value = value.__closure__[key].cell_contents
        return value


# ----------------------------------------------------------------------------------------------
# Guards


@dataclass
class _Guard:
    path: Path
    kind: str  # "value", "identity", "code", "length", "keys", "array", "held_base", "content"
    expected: Any = None


_KEY_STEPS = frozenset({"fun", "fwd", "bwd", "__func__", "func"})


def _in_key(path: Path) -> bool:
    """The transformed function itself, and what it wraps: the program store's key already
    names their code and types (api._spec_of), so they need no guard."""
    return path.root == "fun" and all(k == "attr" and n in _KEY_STEPS for k, n in path.steps)


def _code_names(code: types.CodeType, into: set[str]) -> None:
    into.update(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _code_names(const, into)


@dataclass
class _Reachable:
    array: np.ndarray
    path: Path
    direct: bool = False  # used as an operand of the traced computation
    viewed: bool = False  # a view of it was used: the program holds that view


@dataclass
class Scope:
    """The values a function can reach by name, found before it is traced."""

    guards: list[_Guard] = field(default_factory=list)
    arrays: dict[int, _Reachable] = field(default_factory=dict)  # id(array) -> where it is
    owners: dict[int, list[_Reachable]] = field(default_factory=dict)  # id(memory owner) -> arrays
    hidden: list[tuple[_Reachable | None, np.ndarray]] = field(default_factory=list)
    _hidden_ids: dict[int, int] = field(default_factory=dict)
    # random-number generators the function can reach (see `random_sources`), and the names
    # its code uses
    generators: list[tuple[str, Any]] = field(default_factory=list)
    names: set[str] = field(default_factory=set)

    @staticmethod
    def of(fun: Any, static: tuple) -> Scope:
        """Walk what `fun` (and the static arguments) can reach by name."""
        names: set[str] = set()
        for _ in range(4):  # the names grow as functions are found: walk until they settle
            known = len(names)
            scope = Scope()
            _Walker(scope, names).walk_roots(fun, static)
            if len(names) == known:
                break
        scope.names = names
        return scope

    def random_sources(self) -> list[tuple[str, Any]]:
        """(description, generator) for each random-number generator whose numbers the traced
        function could draw: the generators it reaches by name, and NumPy's global one when its
        code names `random` (np.random.normal...). A draw while tracing would be baked into the
        program as a constant: `check_random_sources` refuses it."""
        sources = list(self.generators)
        if "random" in self.names or any(_GLOBAL_RANDOM is g for _, g in sources):
            sources.append(("NumPy's global random generator (np.random.*)", _GLOBAL_RANDOM))
        return sources

    # ---- used while tracing
    def hidden_input(self, value: np.ndarray) -> int | None:
        """If `value` is (a view of) a reachable array, the index of the hidden input that
        stands for it (created on first use), else None: the value is a constant."""
        index = self._hidden_ids.get(id(value))
        if index is not None:
            return index
        entry = self.arrays.get(id(value))
        if entry is not None:
            entry.direct = True
        else:
            owner = value if value.base is None else value.base
            viewed = [e for e in self.owners.get(id(owner), ()) if np.may_share_memory(e.array, value)]
            if not viewed:
                return None
            for e in viewed:
                e.viewed = True
        self._hidden_ids[id(value)] = len(self.hidden)
        self.hidden.append((entry, value))
        return len(self.hidden) - 1

    def finish(self, fun: Any, static: tuple) -> Captured:
        """The guards and hidden-input readers of the program traced with this scope.

        Guarded values are read again now: what the trace itself changed (a call counter the
        function increments) is the value the next call must find, or every call would trace."""
        guards = [_refreshed(g, fun, static) for g in self.guards]
        for entry in self.arrays.values():
            if entry.viewed:  # rebinding it would leave the held view behind
                guards.append(_Guard(entry.path, "identity", _ref(entry.array)))
            elif not entry.direct:  # NumPy may have read it while tracing
                guards.append(_Guard(entry.path, "content", np.array(entry.array, copy=True)))
        readers: list[Path | np.ndarray] = []
        for entry, value in self.hidden:
            if entry is not None:
                readers.append(entry.path)
                guards.append(_Guard(entry.path, "array", (value.shape, value.dtype)))
            else:
                readers.append(value)  # a view, held: its array is guarded by identity
        return Captured(guards, readers)


def _refreshed(guard: _Guard, fun: Any, static: tuple) -> _Guard:
    try:
        value = guard.path.read(fun, static)
    except Exception:
        return guard
    if guard.kind == "value" and isinstance(value, _SCALARS + (np.generic, np.dtype)):
        return _Guard(guard.path, "value", value)
    if guard.kind == "identity":
        return _Guard(guard.path, "identity", _ref(value))
    if guard.kind == "length" and type(value) in (list, tuple):
        return _Guard(guard.path, "length", (type(value), len(value)))
    if guard.kind == "keys" and type(value) is dict:
        return _Guard(guard.path, "keys", tuple(value))
    return guard


def _ref(value: Any):
    """A weak reference where the type allows one (so a guard does not keep a user's object
    alive), else the object itself."""
    try:
        return weakref.ref(value)
    except TypeError:
        return lambda: value


class _Walker:
    def __init__(self, scope: Scope, names: set[str]):
        self.scope, self.names = scope, names
        self.seen: set[int] = set()
        self.count = 0

    def walk_roots(self, fun: Any, static: tuple) -> None:
        self.visit(fun, Path("fun", 0, (), "", "the function"), 0)
        for j, value in enumerate(static):
            self.visit(value, Path("static", j, (), f"arg{j}", "static argument {}"), 0)

    def guard(self, path: Path, kind: str, expected: Any = None) -> None:
        self.scope.guards.append(_Guard(path, kind, expected))

    def visit(self, value: Any, path: Path, depth: int) -> None:
        self.count += 1
        t = type(value)
        if isinstance(value, (*_SCALARS, np.generic, np.dtype)):
            self.guard(path, "value", value)
            return
        if self.count > MAX_ENTRIES or depth > MAX_DEPTH or id(value) in self.seen:
            self.guard(path, "identity", _ref(value))
            return
        self.seen.add(id(value))
        owner = getattr(value, "__self__", None)  # a generator's method: from numpy.random import normal
        if isinstance(owner, _GENERATORS) and not isinstance(value, _GENERATORS):
            value, path = owner, path.hop("attr", "__self__")
        if isinstance(value, _GENERATORS):
            self.scope.generators.append((f"the generator {path.description}", value))
            self.guard(path, "identity", _ref(value))
        elif isinstance(value, np.ndarray):
            self._array(value, path)
        elif t in (tuple, list):
            self._sequence(value, path, depth)
        elif t is dict:
            self._dict(value, path, depth)
        elif isinstance(value, types.ModuleType):
            self.guard(path, "identity", _ref(value))
            if not _is_library_module(value.__name__):
                self._attributes(value, path, depth, only_names=True)
        elif isinstance(value, types.FunctionType):
            self._function(value, path, depth)
        elif isinstance(value, types.MethodType):
            self.visit(value.__func__, path.hop("attr", "__func__"), depth + 1)
            self.visit(value.__self__, path.hop("attr", "__self__"), depth + 1)
        elif isinstance(value, functools.partial):
            self.guard(path, "value", (type(value), len(value.args), tuple(value.keywords)))
            self.visit(value.func, path.hop("attr", "func"), depth + 1)
            for i, arg in enumerate(value.args):
                self.visit(arg, path.hop("attr", "args").item(i), depth + 1)
            for k, arg in value.keywords.items():
                self.visit(arg, path.hop("attr", "keywords").item(k), depth + 1)
        elif getattr(t, "_capture_children", None) is not None:
            self._object(value, path, depth)
        elif isinstance(value, type) or _is_library_module(getattr(t, "__module__", None)):
            self.guard(path, "identity", _ref(value))
        else:
            self._object(value, path, depth)

    # ---- kinds of values
    def _array(self, value: np.ndarray, path: Path) -> None:
        scope = self.scope
        if id(value) in scope.arrays:
            return
        entry = _Reachable(value, path)
        scope.arrays[id(value)] = entry
        owner = value if value.base is None else value.base
        scope.owners.setdefault(id(owner), []).append(entry)

    def _sequence(self, value: list | tuple, path: Path, depth: int) -> None:
        if not value and type(value) is list:
            return  # an empty list is taken for an accumulator (hooks append to one): unread
        if len(value) > MAX_ITEMS and all(isinstance(v, _SCALARS) for v in value):
            self.guard(path, "value", tuple(value) if type(value) is tuple else list(value))
            return
        self.guard(path, "length", (type(value), len(value)))
        for i, item in enumerate(value[: MAX_ITEMS * 4]):
            self.visit(item, path.item(i), depth + 1)

    def _dict(self, value: dict, path: Path, depth: int) -> None:
        if not value:
            return  # likewise an empty dict
        self.guard(path, "keys", tuple(value))
        for key, item in list(value.items())[: MAX_ITEMS * 4]:
            if isinstance(key, (str, int, float, bool, tuple)):
                self.visit(item, path.item(key), depth + 1)

    def _function(self, fun: types.FunctionType, path: Path, depth: int) -> None:
        if _is_library_module(getattr(fun, "__module__", None)):
            self.guard(path, "identity", _ref(fun))
            return
        code = fun.__code__
        if not _in_key(path):
            self.guard(path.hop("attr", "__code__"), "identity", _ref(code))
        own: set[str] = set()
        _code_names(code, own)
        self.names |= own
        name = fun.__name__
        for g in sorted(own):
            if g in fun.__globals__:
                value = fun.__globals__[g]
                where = path.named((("attr", "__globals__"), ("item", g)), g, "global {}")
                self.visit(value, where, depth + 1)
        for i, var in enumerate(code.co_freevars):
            cell = fun.__closure__[i]
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell: the variable is assigned later
                continue
            where = path.named((("cell", i),), var, f"closure variable {{}} of {name}")
            self.visit(value, where, depth + 1)
        params = code.co_varnames[code.co_posonlyargcount : code.co_argcount]
        defaults = fun.__defaults__ or ()
        for i, value in enumerate(defaults):
            label = params[len(params) - len(defaults) + i] if len(params) >= len(defaults) else str(i)
            where = path.named((("attr", "__defaults__"), ("item", i)), label, f"default argument {{}} of {name}")
            self.visit(value, where, depth + 1)
        for key, value in (fun.__kwdefaults__ or {}).items():
            where = path.named((("attr", "__kwdefaults__"), ("item", key)), key, f"default argument {{}} of {name}")
            self.visit(value, where, depth + 1)

    def _object(self, value: Any, path: Path, depth: int) -> None:
        """A user object: its type, the children it names (tracegrad's own callables), its
        functions, and its attributes whose names the traced code uses."""
        if not _in_key(path):
            self.guard(path.hop("attr", "__class__"), "identity", _ref(type(value)))
        children = getattr(type(value), "_capture_children", None)
        if children is not None:
            for attr in children:
                child = getattr(value, attr, None)
                if child is not None:
                    self.visit(child, path.hop("attr", attr), depth + 1)
            return
        wrapped = getattr(value, "__wrapped__", None)
        if wrapped is not None:
            self.visit(wrapped, path.hop("getattr", "__wrapped__"), depth + 1)
        self._attributes(value, path, depth, only_names=False)

    def _attributes(self, value: Any, path: Path, depth: int, only_names: bool) -> None:
        instance = getattr(value, "__dict__", None)
        instance = instance if isinstance(instance, dict) else {}
        # the class's own (or inherited) __call__, looked up without binding it
        call = next((vars(c)["__call__"] for c in type(value).__mro__ if "__call__" in vars(c)), None)
        if not only_names and isinstance(call, types.FunctionType):
            self.visit(call, path.hop("attr", "__class__").hop("getattr", "__call__"), depth + 1)
        for name in sorted(self.names):
            if name.startswith("__"):
                continue
            if name in instance:
                child = instance[name]
            elif not only_names and hasattr(type(value), name):
                child = getattr(type(value), name)
                if isinstance(child, property):  # not run here; what its getter reads is
                    if isinstance(child.fget, types.FunctionType):
                        _code_names(child.fget.__code__, self.names)
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


# ----------------------------------------------------------------------------------------------
# The guard of a compiled program


class Captured:
    """Checks that a program still computes what the function computes now, and reads its
    hidden inputs. `read(fun, static)` returns the hidden inputs' current arrays, or None when a
    guard fails (the caller traces again; `why(fun, static)` says what changed)."""

    def __init__(self, guards: list[_Guard], readers: list[Path | np.ndarray]):
        self.guards, self.readers = guards, readers
        # snapshots, and the arrays behind held views (a program keeps them alive)
        self.nbytes = sum(g.expected.nbytes for g in guards if g.kind == "content") + sum(
            (r if r.base is None else r.base).nbytes for r in readers if isinstance(r, np.ndarray)
        )
        self.read = _compile(guards, readers)

    @property
    def empty(self) -> bool:
        return not self.guards and not self.readers

    def why(self, fun: Any, static: tuple) -> str:
        for guard in self.guards:
            try:
                value = guard.path.read(fun, static)
            except Exception:
                return f"{guard.path.description} is gone"
            if not _passes(guard, value):
                return f"{guard.path.description} changed{_change(guard, value)}"
        return "a captured value changed"


def _change(guard: _Guard, value: Any) -> str:
    if guard.kind == "value":
        return f" ({guard.expected!r} -> {value!r})"
    if guard.kind == "array":
        shape, dtype = guard.expected
        if isinstance(value, np.ndarray):
            return f" (an array {dtype}{list(shape)} -> {value.dtype}{list(value.shape)})"
        return f" (an array -> a {type(value).__name__})"
    if guard.kind == "content":
        return " (its contents, which were read while tracing)"
    return ""


def _same_value(expected: Any, value: Any) -> bool:
    if type(value) is not type(expected):
        return False
    if value is expected:
        return True
    try:
        if isinstance(expected, (float, np.floating)) and expected != expected:
            return bool(value != value)
        return bool(value == expected)
    except Exception:
        return False


def _passes(guard: _Guard, value: Any) -> bool:
    kind, expected = guard.kind, guard.expected
    if kind == "value":
        return _same_value(expected, value)
    if kind == "identity":
        return value is expected()
    if kind == "length":
        return type(value) is expected[0] and len(value) == expected[1]
    if kind == "keys":
        return type(value) is dict and tuple(value) == expected
    if kind == "array":
        return type(value) is np.ndarray and (value.shape, value.dtype) == expected
    if kind == "content":
        return (
            type(value) is np.ndarray
            and value.shape == expected.shape
            and value.dtype == expected.dtype
            and bool(np.array_equal(value, expected, equal_nan=expected.dtype.kind in "fc"))
        )
    raise AssertionError(kind)  # pragma: no cover


def _no_guards(fun, static):
    return []


def _step(base: str, kind: str, key: Any) -> str:
    if kind == "attr":
        return f"{base}.{key}"
    if kind == "getattr":
        return f"_getattr({base}, {key!r})"
    if kind == "item":
        return f"{base}[{key!r}]"
    return f"{base}.__closure__[{key}].cell_contents"  # "cell"


def _compile(guards: list[_Guard], readers: list[Path | np.ndarray]) -> Callable:
    """One generated function that checks every guard and returns the hidden inputs. Each value
    on the way is read once (paths share their prefixes: `fun.fun.__globals__`)."""
    if not guards and not readers:
        return _no_guards
    ns: dict[str, Any] = {"_getattr": getattr, "_passes": _passes, "_ndarray": np.ndarray}
    lines = ["def read(fun, static):", "    try:"]
    names: dict[str, str] = {}

    def local(path: Path) -> str:
        text = "fun" if path.root == "fun" else f"static[{path.root_index}]"
        name = text
        for kind, key in path.steps:
            text = _step(text, kind, key)
            if text not in names:
                names[text] = f"v{len(names)}"
                lines.append(f"        {names[text]} = {_step(name, kind, key)}")
            name = names[text]
        return name

    for i, guard in enumerate(guards):
        v, kind, expected = local(guard.path), guard.kind, guard.expected
        ns[f"G{i}"] = guard
        if kind == "identity":
            ns[f"E{i}"] = expected
            lines.append(f"        if {v} is not E{i}(): return None")
        elif kind == "value" and isinstance(expected, (str, bool, int, type(None))):
            ns[f"E{i}"], ns[f"T{i}"] = expected, type(expected)
            lines.append(f"        if type({v}) is not T{i} or {v} != E{i}: return None")
        elif kind == "array":
            ns[f"E{i}"] = expected
            lines.append(f"        if type({v}) is not _ndarray or ({v}.shape, {v}.dtype) != E{i}: return None")
        elif kind == "length":
            ns[f"T{i}"], ns[f"N{i}"] = expected
            lines.append(f"        if type({v}) is not T{i} or len({v}) != N{i}: return None")
        else:
            lines.append(f"        if not _passes(G{i}, {v}): return None")
    out = []
    for j, reader in enumerate(readers):
        if isinstance(reader, Path):
            out.append(local(reader))
        else:
            ns[f"H{j}"] = reader
            out.append(f"H{j}")
    lines.append(f"        return [{', '.join(out)}]")
    lines.append("    except Exception:")
    lines.append("        return None")
    exec(compile("\n".join(lines) + "\n", "<tracegrad guard>", "exec"), ns)
    return ns["read"]

