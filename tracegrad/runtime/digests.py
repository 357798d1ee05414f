"""Digests that mean the same in every process: the names of persisted programs (program_cache).

A digest covers what a value means rather than where it lives: code objects by their contents,
user classes by their methods' code, modules and library functions by name, numbers and strings
by value, arrays by their bytes (or shape and dtype). A value with no such digest (a user object
compared by identity) raises `NotStable`, and its program is not persisted.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

import numpy as np

from ..base.hashing import sha256
from ..tracing.reads import is_library_module
from ..base.tree import TreeDef
from ..base.cache_files import source_hash


class NotStable(Exception):
    """A value with no digest that means the same in another process."""


def hash_parts(*parts: Any) -> str:
    h = sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else repr(part).encode())
        h.update(b"\x00")
    return h.hexdigest()[:32]


def code_digest(code: types.CodeType) -> str:
    consts = tuple(
        ("code", code_digest(c)) if isinstance(c, types.CodeType) else (type(c).__name__, repr(c))
        for c in code.co_consts
    )
    lines = getattr(code, "co_linetable", None) or getattr(code, "co_lnotab", b"")
    return hash_parts(
        code.co_name,
        code.co_filename,
        code.co_firstlineno,
        code.co_argcount,
        code.co_posonlyargcount,
        code.co_kwonlyargcount,
        code.co_flags,
        code.co_names,
        code.co_varnames,
        code.co_freevars,
        code.co_cellvars,
        consts,
        code.co_code,
        lines,
    )


def _qualified(obj: Any) -> tuple[str, str]:
    return (
        getattr(obj, "__module__", None) or "?",
        getattr(obj, "__qualname__", None) or repr(obj),
    )


def _class_digest(cls: type) -> str:
    if is_library_module(cls.__module__):
        return hash_parts("type", *_qualified(cls))
    members = []
    for c in cls.__mro__:
        if is_library_module(c.__module__):
            members.append(("base", *_qualified(c)))
            continue
        for name, value in sorted(vars(c).items()):
            if name in ("__dict__", "__weakref__", "__doc__", "__module__", "__qualname__"):
                continue
            members.append((c.__qualname__, name, _member_digest(value)))
    return hash_parts("class", *_qualified(cls), tuple(members))


def _member_digest(value: Any) -> Any:
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, types.FunctionType):
        return ("function", code_digest(value.__code__))
    if isinstance(value, property):
        return ("property", *(_member_digest(f) for f in (value.fget, value.fset, value.fdel)))
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return ("value", type(value).__name__, repr(value))
    return ("object", type(value).__qualname__)


def _identity_digest(obj: Any) -> str:
    """A digest for a value the program is guarded on by identity."""
    if isinstance(obj, types.CodeType):
        return hash_parts("code", code_digest(obj))
    if isinstance(obj, types.ModuleType):
        return hash_parts("module", obj.__name__)
    if isinstance(obj, type):
        return _class_digest(obj)
    if type(obj) in (list, dict) and not obj:
        # an accumulator (tracing/scope.py): in another process, a list or dict still empty
        return hash_parts("empty", type(obj).__name__)
    if isinstance(obj, types.FunctionType):
        if is_library_module(obj.__module__):
            if obj.__closure__:  # made at run time around other values: its name is not enough
                raise NotStable("a closure of a library function")
            return hash_parts("library function", *_qualified(obj))
        return _function_digest(obj, 0)
    if isinstance(obj, (types.BuiltinFunctionType, np.ufunc)) or callable(obj):
        module = getattr(obj, "__module__", None) or getattr(type(obj), "__module__", None)
        if is_library_module(module):
            return hash_parts(
                "library callable",
                module,
                getattr(obj, "__qualname__", None) or getattr(obj, "__name__", ""),
            )
    raise NotStable(type(obj).__qualname__)


PLAIN = (bool, int, float, complex, str, bytes, type(None), type(Ellipsis), slice, range)


def _function_digest(fun: types.FunctionType, depth: int) -> str:
    """A user function reached a second time (guarded by identity there): its code and what it
    closes over and defaults to, which no other guard covers on that path. Its globals are
    walked where the function was first reached."""
    if depth > 4:
        raise NotStable("functions nested too deep")
    parts = []
    for cell in fun.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            parts.append(("empty",))
            continue
        if isinstance(value, types.FunctionType) and not is_library_module(value.__module__):
            parts.append(("function", _function_digest(value, depth + 1)))
        else:
            parts.append(value_text(value))
    defaults = value_text(tuple(fun.__defaults__ or ()))
    kwdefaults = value_text(tuple(sorted((fun.__kwdefaults__ or {}).items())))
    return hash_parts(
        "function", *_qualified(fun), code_digest(fun.__code__), tuple(parts), defaults, kwdefaults
    )


def value_text(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(value_text(v) for v in value))
    if isinstance(value, PLAIN + (np.generic, np.dtype)):
        return (type(value).__qualname__, repr(value))
    raise NotStable(type(value).__qualname__)


def guard_digest(kind: str, expected: Any) -> str:
    """The digest of a guard's expected value (for identity guards: the object itself)."""
    if kind == "value":
        return hash_parts("value", value_text(expected))
    if kind == "identity":
        return _identity_digest(expected)
    if kind == "length":
        return hash_parts("length", expected[0].__qualname__, expected[1])
    if kind == "keys":
        return hash_parts("keys", value_text(tuple(expected)))
    if kind == "array":
        shape, dtype = expected
        return hash_parts("array", tuple(shape), np.dtype(dtype).str)
    if kind == "content":
        data = np.ascontiguousarray(expected)
        return hash_parts(
            "content", data.shape, data.dtype.str, sha256(data.view(np.uint8)).hexdigest()
        )
    raise NotStable(kind)


def expected_of(kind: str, value: Any) -> Any:
    """What a guard of `kind` expects, made from the value found now (tracing.scope._refreshed)."""
    if kind == "value":
        return value
    if kind == "identity":
        return value
    if kind == "length":
        return (type(value), len(value))
    if kind == "keys":
        if not isinstance(value, dict):
            raise NotStable("keys")
        return tuple(value)
    if kind == "array":
        if type(value) is not np.ndarray:
            raise NotStable("array")
        return (value.shape, value.dtype)
    if kind == "content":
        if type(value) is not np.ndarray:
            raise NotStable("content")
        return value
    raise NotStable(kind)


def stored_expected(kind: str, expected: Any) -> Any:
    if kind == "identity":
        value = expected()
        if value is None:
            raise NotStable("a collected object")
        return value
    return expected


_NOT_SOURCES = ("examples", "__pycache__")


def package_sources() -> list[tuple[str, int, int]]:
    """tracegrad's source files (its examples aside), each with its size and modification time,
    in order of path. (A walk with os.scandir: os.walk took half as long again, 1.5 ms.)"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the package, not runtime/
    found = []
    folders = [root]
    while folders:
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                if entry.name.endswith(".py"):
                    try:
                        st = entry.stat()
                    except OSError:
                        continue
                    found.append((entry.path, st.st_size, st.st_mtime_ns))
                elif entry.is_dir(follow_symlinks=False) and entry.name not in _NOT_SOURCES:
                    folders.append(entry.path)
    found.sort()
    return found


def package_hash(paths: list[str]) -> str:
    """The source of tracegrad (its version may not change between two edits), and the versions
    of NumPy and Python."""
    from ..base import __version__

    return hash_parts(__version__, source_hash(paths), np.__version__, sys.version)


def spec_text(spec: Any) -> Any:
    """api.Transformed.spec with its code objects and types as digests."""
    if isinstance(spec, tuple):
        return tuple(spec_text(s) for s in spec)
    if isinstance(spec, types.CodeType):
        return ("code", code_digest(spec))
    if isinstance(spec, type):
        return ("type", _class_digest(spec))
    if isinstance(spec, PLAIN):
        return (type(spec).__name__, repr(spec))
    return ("object", _identity_digest(spec))


def tree_text(tree: TreeDef) -> Any:
    """An argument tree as text for a program's key on disk. A class of its own (a namedtuple, a
    dataclass, a registered node) is refused: the program depends on which class it is, its
    static fields and the code of its methods, none of which this text would hold (a program
    traced for one such argument was loaded for another)."""
    if tree.node_type is not None or tree.aux is not None:
        raise NotStable(f"an argument of the class {getattr(tree.node_type, '__qualname__', '?')}")
    return (tree.kind, tuple(tree_text(c) for c in tree.children), value_text(tuple(tree.keys)))


def static_text(static_key: tuple) -> Any:
    def typed(entry):
        kind, value = entry
        if kind in (tuple, list):
            return (kind.__name__, tuple(typed(v) for v in value))
        value = getattr(value, "float_value", value)  # program_store._Float: repr keeps -0.0
        return (kind.__qualname__, value_text(value))

    return tuple(typed(e) for e in static_key)
