"""The guard of a compiled program: paths to the values it reads, and the check run per call.

A `Path` reaches a value from the call's roots (the transformed function, its static arguments);
a `Guard` records what the value must still be; `Captured` holds a program's guards and the
readers of its hidden inputs, compiled into one small Python function. A `BranchGuard` is the
other kind: an answer the trace gave to Python control flow on a traced value, which the program
computes again on every call (tracing/branches.py).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir import Graph


class Path:
    """Where a value the function read lives, from `root` ("fun" or "static", the
    `root_index`th static argument) through `steps`; `label` is the value as the user's code
    names it ("X", "params['W']", "self.c"), `context` where that name lives ("global {}",
    "closure variable {} of loss"). Immutable; equal when all five are."""

    __slots__ = ("context", "label", "root", "root_index", "steps")

    def __init__(
        self,
        root: str,
        root_index: int,
        steps: tuple[tuple[str, Any], ...] = (),
        label: str = "",
        context: str = "{}",
    ):
        self.root = root
        self.root_index = root_index
        self.steps = steps
        self.label = label
        self.context = context

    def _fields(self) -> tuple:
        return (self.root, self.root_index, self.steps, self.label, self.context)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Path) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return f"Path{self._fields()!r}"

    @property
    def description(self) -> str:
        return self.context.format(repr(self.label) if self.label else "")

    def hop(self, kind: str, key: Any) -> Path:
        """One more step, under the same name (a method's function, a wrapped function)."""
        return Path(
            self.root, self.root_index, (*self.steps, (kind, key)), self.label, self.context
        )

    def item(self, key: Any) -> Path:
        step = Path(self.root, self.root_index, (*self.steps, ("item", key)))
        return Path(step.root, step.root_index, step.steps, f"{self.label}[{key!r}]", self.context)

    def attr(self, name: str) -> Path:
        label = f"{self.label}.{name}" if self.label else name
        return Path(
            self.root, self.root_index, (*self.steps, ("getattr", name)), label, self.context
        )

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


def parent_and_step(path: Path, roots: tuple) -> tuple[Any, tuple[str, Any]]:
    """The object holding the value at `path` (read from `roots`: the function, the static
    arguments), and the last step from it to the value."""
    parent_path = Path(path.root, path.root_index, path.steps[:-1])
    return parent_path.read(*roots), path.steps[-1]


def read_step(parent: Any, step: tuple[str, Any]) -> Any:
    kind, key = step
    if kind in ("attr", "getattr"):
        return getattr(parent, key)
    if kind == "item":
        return parent[key]
    return parent.__closure__[key].cell_contents


def write_step(parent: Any, step: tuple[str, Any], value: Any) -> None:
    """Bind the value where `step` from `parent` leads (a trace's stand-ins go in this way, and
    the originals back)."""
    kind, key = step
    if kind in ("attr", "getattr"):
        setattr(parent, key, value)
    elif kind == "item":
        parent[key] = value
    else:
        parent.__closure__[key].cell_contents = value


class Guard:
    """What a program assumes of the value at `path`: `kind` is "value", "identity", "length",
    "keys", "array", "content" or "alias", and `expected` what it must be. An "alias" guard's
    `expected` is another `Path`: the value at `path` must be the very object found there (the
    walk met that object first there, and guarded it there)."""

    __slots__ = ("expected", "kind", "path")

    def __init__(self, path: Path, kind: str, expected: Any = None):
        self.path = path
        self.kind = kind
        self.expected = expected

    def __repr__(self) -> str:
        return f"Guard({self.path!r}, {self.kind!r})"


def ref(value: Any):
    """A weak reference where the type allows one (so a guard does not keep a user's object
    alive), else the object itself."""
    try:
        return weakref.ref(value)
    except TypeError:
        return lambda: value


class Captured:
    """Checks that a program still computes what the function computes now, and reads its
    hidden inputs. `read(fun, static)` returns the hidden inputs' current arrays, or None when a
    guard fails (the caller traces again; `why(fun, static)` says what changed)."""

    def __init__(self, guards: list[Guard], readers: list[Path | np.ndarray]):
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
            if guard.kind == "alias":
                try:
                    same = value is guard.expected.read(fun, static)
                except Exception:
                    return f"{guard.expected.description} is gone"
                if not same:
                    return (
                        f"{guard.path.description} changed (it was the same object as "
                        f"{guard.expected.description}, and is not now)"
                    )
            elif not _passes(guard, value):
                return f"{guard.path.description} changed{_change(guard, value)}"
        return "a captured value changed"


def _change(guard: Guard, value: Any) -> str:
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


def _passes(guard: Guard, value: Any) -> bool:
    kind, expected = guard.kind, guard.expected
    if kind == "value":
        return _same_value(expected, value)
    if kind == "identity":
        return value is expected()
    if kind == "length":
        return type(value) is expected[0] and len(value) == expected[1]
    if kind == "keys":
        return isinstance(value, dict) and tuple(value) == expected
    if kind == "array":
        return type(value) is np.ndarray and (value.shape, value.dtype) == expected
    if kind == "content":
        return (
            type(value) is np.ndarray
            and value.shape == expected.shape
            and value.dtype == expected.dtype
            and bool(np.array_equal(value, expected, equal_nan=expected.dtype.kind in "fc"))
        )
    # "alias" compares the values at two paths: Captured.why and _compile check it
    raise AssertionError(kind)  # pragma: no cover


def _no_guards(fun, static):
    return []


def _step(base: str, kind: str, key: str) -> str:
    """One step of a path as source; `key` is source too (a literal, or a name in the
    namespace of the generated function)."""
    if kind == "attr":
        return f"{base}.{key}"
    if kind == "getattr":
        return f"_getattr({base}, {key})"
    if kind == "item":
        return f"{base}[{key}]"
    return f"{base}.__closure__[{key}].cell_contents"  # "cell"


_LITERAL_KEYS = (str, int, bool, type(None))  # whose repr is source that evaluates to them


def _compile(guards: list[Guard], readers: list[Path | np.ndarray]) -> Callable:
    """One generated function that checks every guard and returns the hidden inputs. Each value
    on the way is read once (paths share their prefixes: `fun.fun.__globals__`)."""
    if not guards and not readers:
        return _no_guards
    ns: dict[str, Any] = {"_getattr": getattr, "_passes": _passes, "_ndarray": np.ndarray}
    lines = ["def read(fun, static):", "    try:"]
    names: dict[str, str] = {}
    keys: dict[tuple[type, Any], str] = {}

    def key_source(kind: str, key: Any) -> str:
        if kind == "attr":
            return key
        if type(key) in _LITERAL_KEYS:
            return repr(key)
        # any other dict key (a float, a tuple, an enum member...) is held by the namespace:
        # its repr need not be source, and the guard must find the very key the walk used
        named = keys.get((type(key), key))
        if named is None:
            named = keys[(type(key), key)] = f"K{len(keys)}"
            ns[named] = key
        return named

    def local(path: Path) -> str:
        text = "fun" if path.root == "fun" else f"static[{path.root_index}]"
        name = text
        for kind, key in path.steps:
            source = key_source(kind, key)
            text = _step(text, kind, source)
            if text not in names:
                names[text] = f"v{len(names)}"
                lines.append(f"        {names[text]} = {_step(name, kind, source)}")
            name = names[text]
        return name

    for i, guard in enumerate(guards):
        v, kind, expected = local(guard.path), guard.kind, guard.expected
        ns[f"G{i}"] = guard
        if kind == "identity":
            ns[f"E{i}"] = expected
            lines.append(f"        if {v} is not E{i}(): return None")
        elif kind == "alias":
            lines.append(f"        if {v} is not {local(expected)}: return None")
        elif kind == "value" and isinstance(expected, (str, bool, int, type(None))):
            ns[f"E{i}"], ns[f"T{i}"] = expected, type(expected)
            lines.append(f"        if type({v}) is not T{i} or {v} != E{i}: return None")
        elif kind == "array":
            ns[f"E{i}"] = expected
            lines.append(
                f"        if type({v}) is not _ndarray or ({v}.shape, {v}.dtype) != E{i}: return None"
            )
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


class BranchGuard:
    """What a trace answered to Python control flow on a traced value at `source`
    (tracing/branches.py): `outcome`, a bool (`kind` "bool") or an int ("int": int(), an index,
    range(); "whole": a float holding a whole number, used as an index), of the value the
    program returns as this guard's output."""

    __slots__ = ("kind", "outcome", "source")

    def __init__(self, kind: str, outcome: bool | int, source: str | None):
        self.kind, self.outcome, self.source = kind, outcome, source

    def __repr__(self) -> str:
        return f"BranchGuard({self.kind} {self.outcome!r} at {self.source})"

    def holds(self, value: Any) -> bool:
        return answer(self.kind, value) == self.outcome

    def describe(self, value: Any = None) -> str:
        where = self.source or "an unknown line"
        shown = "" if value is None else f", now {answer(self.kind, value)!r}"
        return f"{where} (traced as {self.outcome!r}{shown})"


def answer(kind: str, value: Any) -> bool | int | float:
    """The Python answer of a guard's value: a bool, an int (int() truncates a float), or for
    "whole" (a float used as an index) the number itself, equal to the traced int only while
    it is that whole number."""
    value = np.asarray(value)
    if kind == "bool":
        return bool(value)
    return value.item() if kind == "whole" else int(value)


def guard_subgraph(graph: Graph) -> Graph:
    """`graph` with only the nodes its outputs (a program's BranchGuards) need: no effects (a
    guard checked alone prints nothing), nothing else computed."""
    needed = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if node.out in needed:
            kept.append(node)
            needed.update(node.inputs)
    return Graph(graph.inputs, tuple(reversed(kept)), graph.outputs)
