"""The functions of `tracegrad.vmath` as LLVM IR definitions with plain C signatures.

A native kernel declares `tg_vm_exp_f64` and friends (`function_type` gives the declaration);
the engine links `definitions(used)` into the kernel's module before optimising it, so each
call is inlined and vectorised with the loop around it.

- symbols: `tg_vm_<name>_<f64|f32>`, `name` a vmath base name ("exp", "arctan2", "sincos");
- signatures, read from the vmath function itself (its parameters, Numba's type of its
  result): `T(T)`, `T(T, T)`, and `void(T, T*, T*)` for a function returning a pair, which it
  writes through the two pointers;
- linkage: each `tg_vm_*` definition is `linkonce_odr` and `alwaysinline`. Linking two
  outputs (or the same one into two kernels) keeps one copy, and after inlining the optimiser
  drops the unused definitions, so nothing of them is left for the execution engine to see
  twice. LLVM's linker takes a linkonce_odr definition only into a module that refers to it:
  link `definitions(...)` into the kernel module that declares the symbols, not the other way
  round. The text holds nothing else but LLVM intrinsic declarations: Numba's function is
  inlined into the wrapper here, and its environment globals and Python wrappers are deleted.

How: the vmath dispatcher is compiled for the scalar signature, Numba's module of it is taken
(`i32 @<mangled>(ret*, excinfo**, args...)`), a wrapper with the C signature is added that
calls it with a null excinfo (vmath functions never raise), and the module is reduced to that
wrapper: Numba's function inlined, everything else internalised and deleted, local values
numbered (Numba's names vary from one process to the next; the text does not). Numba's calls of
C functions that IEEE 754 defines exactly (`sqrt`, which is how it lowers math.sqrt) become the
LLVM intrinsics. A function that still refers to something outside LLVM (Numba's runtime, the
Python C API, other libm functions) is refused.

Cache: each function's text is a file `<cache root>/vmath_ir/<symbol>-<version()>.ll`, written
atomically, with a header that records its signature and a checksum of its body; a file that
does not match (damaged, truncated) or does not parse is written again. A file found on disk
costs a read, without importing Numba; `TRACEGRAD_CACHE_DIR=off` keeps them in memory only.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from ...base import cache_files, config

log = config.log

PREFIX = "tg_vm_"
SUFFIXES = {"float64": "f64", "float32": "f32"}
_VMATH_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "vmath")
_HEADER = "; tracegrad vmath_ir"
_TARGET_ATTRS = re.compile(r' "(?:target-cpu|target-features|tune-cpu)"="[^"]*"')
# C math functions that IEEE 754 defines exactly, so that every libm agrees with the LLVM
# intrinsic bit for bit (Numba lowers math.sqrt to a call of sqrt marked memory(none), which
# LLVM's backend turns into the instruction anyway): name -> intrinsic
_EXACT_LIBM = {
    f"{c}{sfx}": f"llvm.{c}.{t}"
    for c in ("sqrt", "fabs", "copysign", "floor", "ceil", "trunc", "rint", "fma")
    for sfx, t in (("", "f64"), ("f", "f32"))
}
_DECLARE = re.compile(r"^declare (?:[a-z_]+ )*(\w+) @(\w+)\(([^)]*)\).*$", re.M)


@dataclass(frozen=True)
class _Entry:
    """One function's definition: its number of arguments and results (1, or 2 for a pair
    written through pointers) and the LLVM IR text of a module defining it."""

    symbol: str
    args: int
    results: int
    text: str


_lock = threading.Lock()
_entries: dict[str, _Entry] = {}  # symbol -> entry, for this process


def symbol(name: str, dtype: np.dtype) -> str:
    """The C symbol of vmath's `name` for `dtype`: symbol("exp", np.float64) == "tg_vm_exp_f64"."""
    dt = np.dtype(dtype)
    if dt.name not in SUFFIXES:
        raise TypeError(f"vmath functions take float64 or float32, not {dt}")
    return f"{PREFIX}{name}_{SUFFIXES[dt.name]}"


def function_type(name: str, dtype: np.dtype) -> ir.FunctionType:
    """The C signature of `symbol(name, dtype)`: T(T) or T(T, T), and void(T, T*, T*) for a
    function returning a pair."""
    entry = _entry(symbol(name, dtype))
    t = ir.DoubleType() if np.dtype(dtype) == np.float64 else ir.FloatType()
    if entry.results == 1:
        return ir.FunctionType(t, [t] * entry.args)
    return ir.FunctionType(ir.VoidType(), [t] * entry.args + [t.as_pointer()] * entry.results)


def definitions(symbols: Iterable[str]) -> str:
    """LLVM IR text of one module defining every `tg_vm_*` symbol in `symbols` (linkonce_odr,
    alwaysinline; nothing else but intrinsic declarations)."""
    return _linked(tuple(sorted(set(symbols))))


@functools.lru_cache(maxsize=1)
def version() -> str:
    """A key of the definitions: changes with the source of tracegrad.vmath and of this module,
    with Numba's and llvmlite's versions and the machine's architecture. Computed without
    importing Numba."""
    import importlib.metadata
    import platform

    h = hashlib.sha256()
    paths = [os.path.join(_VMATH_DIR, f) for f in os.listdir(_VMATH_DIR) if f.endswith(".py")]
    for path in sorted(paths) + [os.path.abspath(__file__)]:
        h.update(os.path.basename(path).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read())
    for package in ("numba", "llvmlite"):
        h.update(f"{package} {importlib.metadata.version(package)}\0".encode())
    h.update(platform.machine().encode())
    return h.hexdigest()[:16]


# --- the linked text -----------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _linked(symbols: tuple[str, ...]) -> str:
    import llvmlite.binding as llvm

    # The linker takes a linkonce_odr definition only where the module refers to it.
    linked = llvm.parse_assembly("\n".join(_declaration(_entry(sym)) for sym in symbols))
    for sym in symbols:
        linked.link_in(_parsed(sym))
    return str(linked)


def _declaration(entry: _Entry) -> str:
    t = {"f64": "double", "f32": "float"}[entry.symbol[-3:]]
    params = [t] * entry.args + (["ptr"] * 2 if entry.results == 2 else [])
    ret = t if entry.results == 1 else "void"
    return f"declare {ret} @{entry.symbol}({', '.join(params)})"


def _parsed(sym: str):
    """The entry of `sym` parsed, computed again (and its file written again) if its text does
    not parse."""
    import llvmlite.binding as llvm

    text = _entry(sym).text
    try:
        return llvm.parse_assembly(text)
    except RuntimeError as exc:
        log.warning("tracegrad: the LLVM IR of %s does not parse (%s); making it again", sym, exc)
    return llvm.parse_assembly(_entry(sym, fresh=True).text)


# --- entries: memory, disk, Numba ------------------------------------------------------------


def _entry(sym: str, fresh: bool = False) -> _Entry:
    """The entry of `sym`: from memory, else from its file, else made from Numba (and written).
    `fresh`: made from Numba whatever memory and disk hold."""
    with _lock:
        entry = None if fresh else _entries.get(sym)
        if entry is None:
            path = _path(sym)
            if path is not None and not fresh:
                entry = _read(path, sym)
            if entry is None:
                entry = _from_numba(sym)
                if path is not None:
                    _write(path, entry)
            _entries[sym] = entry
        return entry


def _path(sym: str) -> str | None:
    """The file of `sym`'s entry; None when the disk cache is off or its folder is unsafe."""
    root = cache_files.cache_dir()
    if root is None or not cache_files.safe_dir(root, create=True):
        return None
    folder = os.path.join(root, "vmath_ir")
    if not cache_files.safe_dir(folder, create=True):
        return None
    return os.path.join(folder, f"{sym}-{version()}.ll")


def _checksum(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _header(entry: _Entry) -> str:
    return (
        f"{_HEADER} {version()} {entry.symbol} args={entry.args} results={entry.results} "
        f"sha={_checksum(entry.text)}\n"
    )


def _read(path: str, sym: str) -> _Entry | None:
    """The entry in `path`, or None when there is none, or it is not one this module wrote."""
    if not cache_files.safe_file(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            data = f.read()
    except (OSError, UnicodeDecodeError):
        return None
    first, _, text = data.partition("\n")
    m = re.fullmatch(
        rf"{_HEADER} (\w+) (\w+) args=(\d+) results=([12]) sha=(\w+)", first, flags=re.ASCII
    )
    if not m or m[1] != version() or m[2] != sym or m[5] != _checksum(text):
        log.warning("tracegrad: %s is damaged; writing it again", path)
        return None
    return _Entry(sym, int(m[3]), int(m[4]), text)


def _write(path: str, entry: _Entry) -> None:
    try:
        cache_files.write_atomically(path, (_header(entry) + entry.text).encode())
    except OSError as exc:
        log.warning("tracegrad: could not write %s (%s)", path, exc)
        return
    folder, stale = os.path.dirname(path), entry.symbol + "-"
    for name in os.listdir(folder):  # the entries of other versions
        if name.startswith(stale) and name.endswith(".ll") and name != os.path.basename(path):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))


def _split(sym: str) -> tuple[str, np.dtype]:
    base, _, suffix = sym.removeprefix(PREFIX).rpartition("_")
    dtypes = {v: np.dtype(k) for k, v in SUFFIXES.items()}
    if not sym.startswith(PREFIX) or not base or suffix not in dtypes:
        raise ValueError(f"{sym!r} is not a vmath symbol (tg_vm_<name>_f64 or _f32)")
    return base, dtypes[suffix]


def _from_numba(sym: str) -> _Entry:
    """Compiles vmath's function of `sym` with Numba and reduces its module to the C wrapper."""
    import inspect

    import llvmlite.binding as llvm
    from numba.core import types

    from ... import vmath

    name, dtype = _split(sym)
    disp = vmath.get(name, dtype)
    nt = types.float64 if dtype == np.float64 else types.float32
    argtypes = (nt,) * len(inspect.signature(disp.py_func).parameters)
    disp.compile(argtypes)
    overload = disp.overloads[argtypes]
    ret = overload.signature.return_type
    if ret == nt:
        results = 1
    elif isinstance(ret, types.UniTuple) and ret.count == 2 and ret.dtype == nt:
        results = 2
    else:
        raise RuntimeError(
            f"vmath.{disp.py_func.__name__} returns {ret}: not {nt} nor a pair of them"
        )
    library = overload.library
    # The module Numba links into its callers (from its cache too, where get_llvm_str is not
    # available); `get_llvm_str` where that private method has gone.
    shared = getattr(library, "_get_module_for_linking", None)
    numba_text = str(shared()) if shared is not None else library.get_llvm_str()
    numba_text = _TARGET_ATTRS.sub("", numba_text)  # the kernel's CPU decides, at inlining
    numba_text = _as_intrinsics(numba_text)
    entry = _Entry(sym, len(argtypes), results, "")
    wrapper = _wrapper(
        entry, overload.fndesc.mangled_name, "double" if nt == types.float64 else "float"
    )
    mod = llvm.parse_assembly(numba_text + wrapper)
    target = mod.get_function(overload.fndesc.mangled_name)
    if len(list(target.arguments)) != 2 + len(argtypes):
        raise RuntimeError(f"{target.name} does not have Numba's calling convention")
    for fn in mod.functions:
        if not fn.is_declaration and fn.name != sym:
            fn.linkage = "internal"
    for g in mod.global_variables:
        if not g.is_declaration:
            g.linkage = "internal"
    _reduce(mod)
    _check_closed(mod, sym, disp.py_func.__name__)
    mod.get_function(sym).linkage = "linkonce_odr"
    mod.triple = ""
    mod.data_layout = ""
    mod.verify()
    return _Entry(sym, len(argtypes), results, str(mod))


def _as_intrinsics(text: str) -> str:
    """`text` with the calls of `_EXACT_LIBM` functions made calls of their intrinsics."""
    declared = {m[2] for m in _DECLARE.finditer(text)}
    for m in list(_DECLARE.finditer(text)):
        ret, name, params = m[1], m[2], m[3]
        if name not in _EXACT_LIBM:
            continue
        intrinsic = _EXACT_LIBM[name]
        decl = "" if intrinsic in declared else f"declare {ret} @{intrinsic}({params})"
        declared.add(intrinsic)
        text = text.replace(m[0], decl)
        text = re.sub(rf"@{name}\(", f"@{intrinsic}(", text)
    return text


def _wrapper(entry: _Entry, mangled: str, t: str) -> str:
    """The C-signature function of `entry` calling Numba's `mangled` (element type `t`)."""
    params = [f"{t} %x{k}" for k in range(entry.args)]
    args = ", ".join(params)
    slot = t if entry.results == 1 else f"{{{t}, {t}}}"
    if entry.results == 1:
        head = f"define {t} @{entry.symbol}({args})"
        tail = [f"  %r = load {t}, ptr %ret", f"  ret {t} %r"]
    else:
        head = f"define void @{entry.symbol}({args}, ptr %out0, ptr %out1)"
        tail = [
            f"  %p1 = getelementptr inbounds {slot}, ptr %ret, i32 0, i32 1",
            f"  %r0 = load {t}, ptr %ret",
            f"  %r1 = load {t}, ptr %p1",
            f"  store {t} %r0, ptr %out0",
            f"  store {t} %r1, ptr %out1",
            "  ret void",
        ]
    lines = [
        f"{head} alwaysinline nounwind {{",
        f"  %ret = alloca {slot}",
        f'  %status = call i32 @"{mangled}"(ptr %ret, ptr null, {args})',
        *tail,
        "}",
    ]
    return "\n\n" + "\n".join(lines) + "\n"


def _reduce(mod) -> None:
    """Inlines Numba's function into the wrapper, deletes everything the wrapper does not use
    and numbers the local values (value-preserving passes only: no fast-math flag is added or
    dropped), so that the text does not depend on what Numba compiled before."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    tm = llvm.Target.from_default_triple().create_target_machine()
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=0))
    mpm = llvm.create_new_module_pass_manager()
    mpm.add_always_inliner_pass()
    mpm.add_sroa_pass()
    mpm.add_instruction_combine_pass()
    mpm.add_global_dead_code_eliminate_pass()
    mpm.add_strip_dead_prototype_pass()
    mpm.add_strip_symbols_pass()  # local names: they hold Numba's mangled names, whose ids vary
    mpm.run(mod, pb)


def _check_closed(mod, sym: str, label: str) -> None:
    """Refuses a definition that refers to anything but LLVM intrinsics."""
    outside = [f.name for f in mod.functions if f.is_declaration and not f.name.startswith("llvm.")]
    outside += [g.name for g in mod.global_variables if g.is_declaration]
    if outside:
        raise RuntimeError(
            f"vmath.{label} ({sym}) refers to {', '.join(sorted(outside))}: a native kernel can "
            "only inline vmath functions that call nothing outside LLVM (no Numba runtime, "
            "Python C API, libm nor exceptions)"
        )
    others = [f.name for f in mod.functions if not f.is_declaration and f.name != sym]
    if others:
        raise RuntimeError(f"vmath.{label} ({sym}): functions left beside it: {others}")


__all__ = ["definitions", "function_type", "symbol", "version"]
