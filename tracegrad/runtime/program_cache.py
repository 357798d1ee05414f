"""Persisted programs: the traced, differentiated and optimised graph of a call, kept on disk.

A new process that calls a function it called before (same code, same values read from
outside, same argument signature) loads the optimised graph instead of tracing, differentiating
and optimising it again; with the kernels in the disk cache (cache.py) it then skips every step
of the pipeline but Numba's loading of machine code.

When an entry may be used. Its file name starts with a hash of everything known before tracing:
the transform and its options, the code of the transformed function (bytecode, constants, names,
file and line table), the argument signature (tree, shapes, dtypes, static arguments), the
backend and its variant, and the versions of tracegrad (the hash of its source), NumPy and
Python. The entry then lists the guards of the program (tracing/guards.py): every value the function
can reach by name, each recorded with a digest that does not depend on the process (code objects
by their contents, user classes by their methods' code, modules and library functions by name,
numbers and strings by value, arrays read while tracing by their bytes, hidden-input arrays by
shape and dtype). An entry is used only when every guard's current value has the digest it had
when the entry was written; another entry under the same prefix may match instead (a closure
variable that went back to an earlier value). A program whose guards include a value with no
such digest (a user object compared by identity, a view held by the program), tap hooks,
callables in its graph or large constants is not persisted. Loop and branch bodies are kept
with the graph (program_data.py), so a rolled Python loop of thousands of steps loads as fast as
a plain program.

Damage: an entry is written to a temporary file and renamed into place, carries a hash of its
contents, and is read with an unpickler that accepts only NumPy arrays, dtypes and plain Python
values. An entry that fails any check is deleted (with a warning) and the function is traced
again, which writes it anew. The folder is `programs/` in the kernel cache's directory, with its
checks (owner only).

`TRACEGRAD_PROGRAM_CACHE=0` turns it off (and `TRACEGRAD_CACHE_DIR=off` turns off both caches).
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import sys
from typing import Any

import numpy as np

from ..base import config
from ..base.hashing import sha256
from ..tracing.guards import Captured, Guard, Path, ref
from ..ir import Graph
from ..base.tree import TreeDef
from .program_data import Unresolved, graph_data, graph_of, tree_data, tree_of
from ..base.cache_files import cache_dir, safe_dir, safe_file, write_atomically
from .digests import (
    NotStable,
    expected_of,
    guard_digest,
    hash_parts,
    package_hash,
    package_sources,
    spec_text,
    static_text,
    stored_expected,
    tree_text,
    value_text,
)

log = config.log

FORMAT = 2  # 2: loop and branch bodies are kept (as graphs in the nodes' data)
MAGIC = b"tracegrad-program\n"
PER_KEY = 8  # entries kept per prefix (one function and signature), the most recent
MAX_FILES = 4096  # entries kept in all, the most recently used


def enabled() -> bool:
    return config.program_cache()


def programs_dir() -> str | None:
    root = cache_dir()
    if root is None or not safe_dir(root, create=True):
        return None
    path = os.path.join(root, "programs")
    return path if safe_dir(path, create=True) else None


def prefix(key: tuple, directory: str) -> str:
    """The part of an entry's name known before tracing (raises NotStable)."""
    spec, backend_name, variant, sig = key
    package = _package_hash(directory)
    if package is None:
        raise NotStable("tracegrad's source changed after this process imported it")
    return hash_parts(
        FORMAT,
        package,
        spec_text(spec),
        backend_name,
        repr(variant),
        tree_text(sig.treedef),
        sig.avals,
        static_text(sig.static),
    )


SOURCES_MEMO = "package-sources"
_package: list[str | None] = []  # this process's package_hash, once known


def _package_hash(directory: str) -> str | None:
    """digests.package_hash, remembered in `directory` under the paths, sizes and modification
    times (in nanoseconds) of the source files and the versions of NumPy and Python. Reading and
    hashing the ~130 files took a warm first call 4-8 ms and their `stat` 2 ms. As for Python's
    bytecode cache, an edit is seen by a file's size or time: one that kept both (a copy that
    restores the time stamps of files of another content) would go unseen.

    None when a source file is newer than this process's import of tracegrad: the code it runs
    may not be the code on disk, so its programs must not be filed under the hash of that code."""
    if _package:
        return _package[0]
    sources = package_sources()
    if any(mtime > config.IMPORTED_NS for _, _, mtime in sources):
        log.debug("tracegrad: not persisting programs: its source changed after it was imported")
        _package.append(None)
        return None
    stamp = hash_parts(FORMAT, sources, np.__version__, sys.version)
    memo = os.path.join(directory, SOURCES_MEMO)
    value = ""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        if safe_file(memo):
            with open(memo, "rb") as f:  # not as text: its codec is one import more
                seen, _, value = f.read().decode("ascii").partition(" ")
            if seen != stamp or len(value) != 32:
                value = ""
    if not value:
        value = package_hash([path for path, _, _ in sources])
        with contextlib.suppress(OSError):
            write_atomically(memo, f"{stamp} {value}".encode())
    _package.append(value)
    return value


# ----------------------------------------------------------------------------------------------
# Guards as plain data


def _path_data(path: Path) -> tuple:
    for _, key in path.steps:
        value_text(key)  # a key the unpickler refuses (an enum member...): NotStable
    return (path.root, path.root_index, path.steps, path.label, path.context)


def _guard_data(guard: Guard) -> tuple:
    """A guard as an entry holds it: its path, kind and the digest of what it expects; an
    "alias" guard holds the other path instead, which `_match` reads back."""
    if guard.kind == "alias":
        return (_path_data(guard.path), guard.kind, _path_data(guard.expected))
    expected = stored_expected(guard.kind, guard.expected)
    return (_path_data(guard.path), guard.kind, guard_digest(guard.kind, expected))


# ----------------------------------------------------------------------------------------------
# Reading and writing


class _Unpickler(pickle.Unpickler):
    """Only NumPy's arrays, dtypes and scalars and a few plain types: an entry holds data."""

    _ALLOWED = {
        ("builtins", "slice"),
        ("builtins", "complex"),
        ("builtins", "range"),
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "bytearray"),
        ("numpy", "dtype"),
        ("numpy", "ndarray"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) in self._ALLOWED or (module == "numpy" and name in np.sctypeDict):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a program entry may not hold {module}.{name}")


def _describe(key: tuple) -> str:
    return f"{key[0][0]} of {key[0][1]!r}" if isinstance(key[0], tuple) else "a function"


def save(
    fun: Any,
    static: tuple,
    key: tuple,
    graph: Graph,
    out_tree: TreeDef,
    hooks: list,
    captured: Captured,
) -> bool:
    """Write the program of `key` (a key of the program store) to disk, if it can be made safe
    for another process. Returns whether it was written."""
    if not enabled() or hooks:
        return False
    directory = programs_dir()
    if directory is None:
        return False
    try:
        head = prefix(key, directory)
        if any(isinstance(r, np.ndarray) for r in captured.readers):
            raise NotStable("a held view")
        guards = tuple(_guard_data(g) for g in captured.guards)
        readers = tuple(_path_data(r) for r in captured.readers)
        payload = pickle.dumps(
            (FORMAT, head, guards, readers, graph_data(graph), tree_data(out_tree)),
            protocol=pickle.HIGHEST_PROTOCOL,
        )
    except Exception as why:  # NotStable, or a value whose digest cannot be taken
        log.debug("tracegrad: not persisting a program (%s)", why)
        return False
    name = f"{head}-{hash_parts(guards)[:16]}.tgp"
    data = MAGIC + sha256(payload).hexdigest().encode() + b"\n" + payload
    try:
        write_atomically(os.path.join(directory, name), data)
    except OSError as exc:
        log.warning("tracegrad: cannot write the program cache at %s (%s)", directory, exc)
        return False
    _trim(directory, head)
    return True


def load(fun: Any, static: tuple, key: tuple) -> tuple[Graph, TreeDef, Captured] | None:
    """The persisted program of `key` whose guards all hold now, as (graph, output tree,
    captured), or None."""
    if not enabled():
        return None
    directory = programs_dir()
    if directory is None:
        return None
    try:
        head = prefix(key, directory)
    except NotStable:
        return None
    try:
        names = [
            n for n in os.listdir(directory) if n.startswith(head + "-") and n.endswith(".tgp")
        ]
    except OSError:
        return None
    paths = [os.path.join(directory, n) for n in names]
    with contextlib.suppress(OSError):
        paths.sort(key=os.path.getmtime, reverse=True)
    for path in paths:
        entry = _read(path, head)
        if entry is None:
            continue
        found = _match(entry, fun, static)
        if found is not None:
            with contextlib.suppress(OSError):
                os.utime(path)
            return found
    return None


def _read(path: str, head: str) -> tuple | None:
    """An entry's contents, checked; a damaged one is deleted."""
    try:
        if not safe_file(path):
            raise ValueError("unsafe owner or permissions")
        with open(path, "rb") as f:
            data = f.read()
        if not data.startswith(MAGIC):
            raise ValueError("not a program entry")
        digest, _, payload = data[len(MAGIC) :].partition(b"\n")
        if sha256(payload).hexdigest().encode() != digest:
            raise ValueError("its checksum does not match")
        entry = _Unpickler(io.BytesIO(payload)).load()
        if entry[0] != FORMAT or entry[1] != head:
            raise ValueError("another format or key")
        graph = graph_of(entry[4])
        tree = tree_of(entry[5])
        guards = [
            (Path(*p), kind, Path(*digest) if kind == "alias" else digest)
            for p, kind, digest in entry[2]
        ]
        readers = [Path(*p) for p in entry[3]]
    except (FileNotFoundError, Unresolved):
        return None
    except Exception as exc:
        log.warning("tracegrad: program cache entry %s is damaged (%s); tracing again", path, exc)
        with contextlib.suppress(OSError):
            os.unlink(path)
        return None
    return graph, tree, guards, readers


def _match(entry: tuple, fun: Any, static: tuple) -> tuple[Graph, TreeDef, Captured] | None:
    graph, tree, guards, readers = entry
    made = []
    for path, kind, digest in guards:
        if kind == "alias":  # `digest` is the other path: checked by captured.read below
            made.append(Guard(path, kind, digest))
            continue
        try:
            value = path.read(fun, static)
            expected = expected_of(kind, value)
            if guard_digest(kind, expected) != digest:
                return None
        except Exception:
            return None
        if kind == "identity":
            expected = ref(value)
        elif kind == "content":
            expected = np.array(value, copy=True)
        made.append(Guard(path, kind, expected))
    captured = Captured(made, readers)
    if captured.read(fun, static) is None:
        return None
    return graph, tree, captured


def _trim(directory: str, head: str) -> None:
    """Keep the newest PER_KEY entries of this prefix, and the newest MAX_FILES in all (file
    times are read only when there are too many)."""
    try:
        names = [n for n in os.listdir(directory) if n.endswith(".tgp") and not n.startswith(".")]
    except OSError:
        return
    same = [n for n in names if n.startswith(head + "-")]
    doomed = _oldest(directory, same, PER_KEY) if len(same) > PER_KEY else []
    if len(names) > MAX_FILES:
        doomed += _oldest(directory, names, MAX_FILES)
    for name in doomed:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(directory, name))


def _oldest(directory: str, names: list[str], keep: int) -> list[str]:
    def used(name: str) -> float:
        try:
            return os.path.getmtime(os.path.join(directory, name))
        except OSError:
            return 0.0

    return sorted(names, key=used, reverse=True)[keep:]


def clear() -> None:
    """Delete every persisted program."""
    directory = programs_dir()
    if directory is None:
        return
    for name in os.listdir(directory):
        if name.endswith(".tgp"):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))
