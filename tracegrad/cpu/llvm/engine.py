"""LLVM IR text -> optimised machine code for this CPU -> addresses to call, cached on disk.

`compile_module(text, name)` parses a kernel module printed by printer.py, links in the
definitions of the vectorised math functions it declares (vmath_ir.py), optimises it at O3 with
loop and SLP vectorisation for the host CPU (or the CPU `NUMBA_CPU_NAME`/`NUMBA_CPU_FEATURES`
name, as Numba's kernels are compiled for it), emits its object code and adds that to the one
MCJIT execution engine of the process. The object code is kept in
`<cache root>/native/k_<key>.o`, keyed by the module's text, the math functions' version, the
llvmlite and LLVM versions and the CPU, so that a new process loads a kernel in milliseconds.

A cached file carries a checksum of its contents: a damaged or truncated file (another process
died writing it, a full disk) is compiled again and rewritten, never loaded. Files are written
through a temporary file renamed into place, so concurrent processes see whole files; the
folder is trimmed as the kernel cache is (least recently used first).

Nothing here imports Numba: a warm first call that finds its kernels on disk never does.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import threading
import time
from dataclasses import dataclass

from ...base import cache, config
from ...base.cache_files import cache_dir, safe_dir, safe_file, write_atomically

log = config.log

VMATH_PREFIX = "tg_vm_"
_VMATH_NAME = re.compile(r'@"?(' + VMATH_PREFIX + r"\w+)")
_MAGIC = b"tracegrad-native-2\n"
_DIGEST = 32  # bytes of the sha256 after the magic

_lock = threading.RLock()
_modules: dict[str, NativeModule] = {}


@dataclass
class NativeModule:
    """A module's machine code in the process's execution engine."""

    name: str
    key: str
    from_disk: bool  # the object code came from the disk cache
    seconds: float  # time to compile (or load) it
    engine: object  # the execution engine holding its code

    def address(self, symbol: str) -> int:
        """The address of a function the module defines."""
        address = self.engine.get_function_address(symbol)
        if not address:
            raise KeyError(f"the native module {self.name} defines no function {symbol!r}")
        return address


@functools.lru_cache(maxsize=1)
def _llvm():
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()
    return llvm


@functools.lru_cache(maxsize=1)
def cpu() -> tuple[str, str]:
    """The CPU name and feature string the code is compiled for: the host's, unless
    NUMBA_CPU_NAME (and NUMBA_CPU_FEATURES) choose another, as they do for Numba's kernels."""
    llvm = _llvm()
    name = os.environ.get("NUMBA_CPU_NAME") or ""
    if name and name != "host":
        return name, os.environ.get("NUMBA_CPU_FEATURES", "")
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


@functools.lru_cache(maxsize=1)
def _target_machine():
    llvm = _llvm()
    name, features = cpu()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=name, features=features, opt=3, reloc="default", codemodel="jitdefault"
    )


_engines: list = []  # the engine in use last; earlier ones stay alive (their code is called)


def _engine():
    if not _engines:
        llvm = _llvm()
        empty = llvm.parse_assembly("")
        empty.triple = llvm.get_process_triple()
        _engines.append(llvm.create_mcjit_compiler(empty, _target_machine()))
    return _engines[-1]


@functools.lru_cache(maxsize=1)
def _salt() -> str:
    import llvmlite

    from ...base import __version__

    name, features = cpu()
    llvm_version = ".".join(map(str, _llvm().llvm_version_info))
    return (
        f"tracegrad {__version__}|llvmlite {llvmlite.__version__}|llvm {llvm_version}|{name}|"
        f"{features}|{_PIPELINE}"
    )


def _vmath_symbols(text: str) -> list[str]:
    """The vectorised math functions a module's text declares (`@tg_vm_...` or, as llvmlite
    prints names, `@"tg_vm_..."`)."""
    return sorted(set(_VMATH_NAME.findall(text)))


def module_key(text: str) -> str:
    """The disk cache key of a module: its text, the math it links in and the target."""
    h = hashlib.sha256(_salt().encode())
    h.update(text.encode())
    if VMATH_PREFIX in text:
        from . import vmath_ir

        h.update(vmath_ir.version().encode())
    return h.hexdigest()[:32]


def native_dir() -> str | None:
    """The folder of the cached object code, created and checked; None when not usable."""
    root = cache_dir()
    if root is None or not safe_dir(root, create=True):
        return None
    path = os.path.join(root, "native")
    return path if safe_dir(path, create=True) else None


def in_memory(text: str) -> bool:
    """Whether the module `text` is compiled (or loaded) in this process already."""
    return module_key(text) in _modules


def in_memory_key(key: str) -> bool:
    """Whether the module of `key` is compiled (or loaded) in this process already."""
    return key in _modules


def clear_memory() -> None:
    """Forget the modules of this process, as a new process would (`tg.clear_cache`, tests):
    the next request loads or compiles again, into a new execution engine (the old one keeps
    the code already called)."""
    with _lock:
        _modules.clear()
        if _engines:
            _retired.append(_engines.pop())


_retired: list = []
cache.on_clear(clear_memory, lambda: len(_modules))


def compile_module(text, name: str, key: str | None = None) -> NativeModule:
    """The module `text` (LLVM IR, naming its functions after `name`) as machine code in this
    process: from memory, from the disk cache, or compiled (and then written there). With a
    `key` (see `module_key`) of what the text is printed from, `text` may be a function that
    prints it, called only when the module must be compiled."""
    key = module_key(text) if key is None else key
    module = _modules.get(key)
    if module is not None:
        return module
    with _lock:
        module = _modules.get(key)
        if module is None:
            module = _load_or_compile(text, name, key)
            _modules[key] = module
    return module


def _load_or_compile(text, name: str, key: str) -> NativeModule:
    start = time.perf_counter()
    directory = native_dir()
    path = os.path.join(directory, f"k_{key}.o") if directory else None
    cached = _read(path) if path else None
    from_disk = cached is not None
    if cached is None:
        text = text() if callable(text) else text
        externals = _externals(text)
        data = compile_object(text)
        if path is not None:
            _write(path, externals, data, directory)
    else:
        externals, data = cached
        with contextlib.suppress(OSError):
            os.utime(path)  # used now: the last to be evicted
    llvm = _llvm()
    engine = _engine()
    _resolve(externals)
    engine.add_object_file(llvm.ObjectFileRef.from_data(data))
    engine.finalize_object()
    return NativeModule(name, key, from_disk, time.perf_counter() - start, engine)


_resolved: set[str] = set()


def _externals(text: str) -> list[str]:
    """The C functions a module's text declares (libm's, for TRACEGRAD_MATH=libm kernels and
    the functions without a vectorised version)."""
    found = []
    for line in text.splitlines():
        if line.startswith("declare "):
            at = line.find("@")
            symbol = line[at + 1 : line.find("(", at)].strip('"')
            if not symbol.startswith((VMATH_PREFIX, "llvm.")):
                found.append(symbol)
    return found


def _resolve(externals: list[str]) -> None:
    """Tell LLVM where the C functions a module calls are: this process has them loaded."""
    import ctypes

    llvm = _llvm()
    process = None
    for symbol in externals:
        if symbol in _resolved:
            continue
        if process is None:
            process = ctypes.CDLL(None)
        try:
            address = ctypes.cast(getattr(process, symbol), ctypes.c_void_p).value
        except AttributeError:
            raise RuntimeError(
                f"a native kernel calls {symbol}, which this process lacks"
            ) from None
        llvm.add_symbol(symbol, address)
        _resolved.add(symbol)


# The optimisation pipeline, part of every cache key: a change to `optimised_module`'s options
# changes the machine code, so it must change this too.
_PIPELINE = "O3 loop+SLP vectorisation, no interleaving with vmath"


def optimised_module(text: str):
    """The module parsed, its math functions linked in, verified and optimised (O3 with loop
    and SLP vectorisation for this CPU).

    Loop interleaving is off in modules that link vectorised math functions: with it, LLVM 22's
    pipeline never finished on a two-element loop of tanh, exp2 and sincos whose inputs were
    all size-1 broadcasts (a program found by benchmarks/hunt.py; tests/test_llvm_pipeline.py),
    and with one of the three calls removed it still took 9-13 s against 0.02-0.2 s without.
    Interleaving bought nothing measurable on those kernels (each inlined math function already
    has the independent work it needs): benchmarks/RESULTS.md."""
    llvm = _llvm()
    module = llvm.parse_assembly(text)
    symbols = _vmath_symbols(text)
    if symbols:
        from . import vmath_ir

        module.link_in(llvm.parse_assembly(vmath_ir.definitions(symbols)))
    module.triple = llvm.get_process_triple()
    tm = _target_machine()
    module.data_layout = str(tm.target_data)
    module.verify()
    options = llvm.create_pipeline_tuning_options(speed_level=3)
    options.loop_vectorization = True
    options.slp_vectorization = True
    options.loop_interleaving = not symbols
    builder = llvm.create_pass_builder(tm, options)
    builder.getModulePassManager().run(module, builder)
    return module


def compile_object(text: str) -> bytes:
    """The object code of the module `text` for this CPU."""
    return _target_machine().emit_object(optimised_module(text))


def optimised_ir(text: str) -> str:
    """The module `text` as LLVM has optimised it (for reading: `tg.make_kernels`)."""
    return str(optimised_module(text))


def _read(path: str) -> tuple[list[str], bytes] | None:
    """A cached object file's external symbols and code, if it is whole and trusted."""
    if not os.path.exists(path) or not safe_file(path):
        return None
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError:
        return None
    head = len(_MAGIC) + _DIGEST
    body = blob[head:]
    if (
        not blob.startswith(_MAGIC)
        or len(body) < 4
        or hashlib.sha256(body).digest() != blob[len(_MAGIC) : head]
    ):
        log.warning("tracegrad: the cached machine code %s is damaged: compiling it again", path)
        return None
    n = int.from_bytes(body[:4], "little")
    names = body[4 : 4 + n].decode()
    return (names.split("\n") if names else []), body[4 + n :]


def _write(path: str, externals: list[str], data: bytes, directory: str) -> None:
    names = "\n".join(externals).encode()
    body = len(names).to_bytes(4, "little") + names + data
    try:
        write_atomically(path, _MAGIC + hashlib.sha256(body).digest() + body)
    except OSError as exc:
        log.warning("tracegrad: cannot write the machine code cache at %s (%s)", directory, exc)
        return
    cache.trim_after_write(directory, len(data))
