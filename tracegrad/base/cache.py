"""The compiled-kernel cache: in memory, and on disk so that a new process does not compile again.

Numba cannot cache functions created with `exec`, so each generated kernel is written as a real
module, `kernels/k_<key>.py`, in a per-user cache directory and imported from there; the kernels in
it are decorated with `cache=True`, so Numba keeps their machine code next to them in
`kernels/__pycache__`. What is cached on disk, then, is *kernels*: the key of a module is a hash
of its source and of everything its machine code depends on besides (tracegrad's version, the
source of `tracegrad.vmath` it calls, Numba's and Python's versions). A warm process still traces
and differentiates the function (milliseconds); only Numba's compilation (the slow part) is
skipped. The traced IR itself is not persisted: a key that is safe for it would have to cover the
function's code, its closure and every global it reads, transitively.

Safety, since the cache holds code that will be executed:
- the directory is `$TRACEGRAD_CACHE_DIR`, else `$XDG_CACHE_HOME/tracegrad`, else
  `~/.cache/tracegrad`; it is created with owner-only permissions (0700), and a directory or an
  entry that another user owns or can write to is refused (the disk cache is then not used, or
  the entry is deleted and compiled again);
- a module is written to a temporary file and renamed into place, so a reader sees either no
  file or a whole one, even with several processes compiling at once;
- a module whose text is not exactly what tracegrad would write is rewritten, never imported,
  and a kernel whose cached machine code Numba fails to load is recompiled with that code
  deleted (an error while running a kernel, such as a MemoryError or an argument Numba cannot
  type, is raised as it is and leaves the entry alone).
`TRACEGRAD_CACHE_DIR=off` keeps everything in memory.

Size: after writing a new module, the cache is trimmed to `TRACEGRAD_CACHE_MAX_MB` (default 1024)
by deleting the modules used least recently (a module's time stamp is refreshed when a process
loads it), never one used in the last hour, so processes running now keep their kernels.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
import time
import types
from dataclasses import dataclass
import contextlib
import functools

from . import config
from .cache_files import cache_dir, safe_dir, safe_file, write_atomically
from .cache_files import source_hash as source_hash  # the code generators' salts call it here

log = config.log

# Entries used more recently than this are never evicted (a running process may need them).
KEEP_RECENT_SECONDS = 3600
_lock = threading.Lock()
_modules: dict[str, types.ModuleType] = {}  # key -> loaded kernel module
_salt_cache: dict[str, str] = {}


def kernels_dir() -> str | None:
    """The directory kernel modules live in, created and checked; None when it is not usable."""
    root = cache_dir()
    if root is None or not safe_dir(root, create=True):
        return None
    path = os.path.join(root, "kernels")
    if not safe_dir(path, create=True):
        return None
    pycache = os.path.join(path, "__pycache__")
    if os.path.exists(pycache) and not safe_dir(pycache, create=False):
        return None
    return path


def salt(parts: tuple[str, ...]) -> str:
    """A hash of everything besides its source that a kernel's machine code depends on."""
    from . import __version__

    key = "|".join(parts)
    if key not in _salt_cache:
        text = f"tracegrad {__version__}|numba {numba_version()}|{sys.version}|{key}"
        _salt_cache[key] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return _salt_cache[key]


@functools.lru_cache(maxsize=1)
def numba_version() -> str:
    """Numba's version, without importing Numba when it is not imported yet (a warm first call
    of the cpu backend's native kernels runs without it)."""
    numba = sys.modules.get("numba")
    if numba is not None:
        return numba.__version__
    from importlib import metadata

    return metadata.version("numba")


def module_key(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:24]


def load_module(source: str) -> types.ModuleType:
    """The module for kernel `source` (which must embed its salt): from memory, from the disk
    cache, or written there and imported. Its kernels use Numba's cache only when on disk."""
    key = module_key(source)
    module = _modules.get(key)
    if module is not None:
        return module
    with _lock:
        module = _modules.get(key)
        if module is None:
            module = _load(key, source)
            _modules[key] = module
    return module


def loaded(key: str) -> types.ModuleType:
    """A module `load_module` has loaded in this process, by its key (generated code that calls
    other generated code finds it here)."""
    return _modules[key]


def _load(key: str, source: str) -> types.ModuleType:
    directory = kernels_dir()
    if directory is None:
        return _exec_module(key, source)
    path = os.path.join(directory, f"k_{key}.py")
    if not _entry_is_intact(path, source):
        _purge_compiled(directory, key)
        try:
            write_atomically(path, source.encode("utf-8"), sync=True)
        except OSError as exc:
            log.warning("tracegrad: cannot write the kernel cache at %s (%s)", directory, exc)
            return _exec_module(key, source)
        trim_after_write(directory, len(source))
    else:
        with contextlib.suppress(OSError):
            os.utime(path)  # used now: the last to be evicted
    if not _compiled_entries_safe(directory, key):
        _purge_compiled(directory, key)
    return _import_file(key, path)


def _entry_is_intact(path: str, source: str) -> bool:
    if not os.path.exists(path):
        return False
    if not safe_file(path):
        log.warning(
            "tracegrad: replacing kernel cache entry %s (unsafe owner or permissions)", path
        )
        with contextlib.suppress(OSError):
            os.unlink(path)
        return False
    try:
        with open(path, encoding="utf-8") as f:
            intact = f.read() == source
    except (OSError, UnicodeDecodeError):
        intact = False
    if not intact:
        log.warning("tracegrad: kernel cache entry %s is damaged; compiling it again", path)
    return intact


def _compiled_files(directory: str, key: str) -> list[str]:
    pycache = os.path.join(directory, "__pycache__")
    try:
        names = os.listdir(pycache)
    except OSError:
        return []
    return [os.path.join(pycache, n) for n in names if n.startswith(f"k_{key}.")]


def _compiled_entries_safe(directory: str, key: str) -> bool:
    return all(safe_file(p) for p in _compiled_files(directory, key))


def _purge_compiled(directory: str, key: str) -> None:
    for p in _compiled_files(directory, key):
        with contextlib.suppress(OSError):
            os.unlink(p)


def _import_file(key: str, path: str) -> types.ModuleType:
    # Numba's cached code names the module of its functions and imports it when it loads them:
    # the module must be in sys.modules under a plain name.
    name = f"_tracegrad_kernel_{key}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    module._TG_CACHE = True
    module._TG_KEY = key
    module._TG_DIR = os.path.dirname(path)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _exec_module(key: str, source: str) -> types.ModuleType:
    module = types.ModuleType(f"_tracegrad_kernel_{key}")
    module._TG_CACHE = False
    module._TG_KEY = key
    module._TG_DIR = None
    exec(compile(source, f"<tracegrad kernel {key}>", "exec"), module.__dict__)
    return module


def reload_without_compiled(module: types.ModuleType, source: str) -> types.ModuleType:
    """After a kernel failed to load its cached machine code: delete that code and import the
    module again (its kernels then compile from source)."""
    key = module._TG_KEY
    with _lock:
        if module._TG_DIR is not None:
            _purge_compiled(module._TG_DIR, key)
            fresh = _import_file(key, os.path.join(module._TG_DIR, f"k_{key}.py"))
        else:
            fresh = _exec_module(key, source)
        _modules[key] = fresh
    return fresh


def _max_bytes() -> int:
    return config.cache_max_bytes()


# Trimming lists the whole folder, so trimming after every write made compiling a program of
# many kernels quadratic in the folder's size (3.4 s of a 17 s test file, measured). A process
# trims a folder after its first write there, then after every TRIM_EVERY_WRITES writes or
# 1/TRIM_FRACTION of the size limit written, whichever comes first: the folder can outgrow its
# limit by that much per process between trims.
TRIM_EVERY_WRITES = 64
TRIM_FRACTION = 64
_written: dict[str, tuple[int, int]] = {}  # folder -> (writes, bytes) since this process trimmed it
_written_lock = threading.Lock()  # not _lock: load_module holds that one while it writes


def trim_after_write(directory: str, nbytes: int) -> int:
    """Count a write of `nbytes` into `directory`, and trim it when its turn has come (see
    TRIM_EVERY_WRITES). Returns how many entries were deleted."""
    with _written_lock:
        writes, written = _written.get(directory, (TRIM_EVERY_WRITES, 0))
        writes, written = writes + 1, written + nbytes
        if writes < TRIM_EVERY_WRITES and written < _max_bytes() // TRIM_FRACTION:
            _written[directory] = (writes, written)
            return 0
        _written[directory] = (0, 0)
    return trim(directory)


def trim(directory: str, now: float | None = None) -> int:
    """Delete the least recently used modules (and their compiled code) until the cache fits in
    its size limit, sparing those used within the last hour. Returns how many were deleted."""
    limit = _max_bytes()
    sizes: dict[str, int] = {}  # key -> bytes (module and compiled code)
    used: dict[str, float] = {}  # key -> last use
    for root in (directory, os.path.join(directory, "__pycache__")):
        try:
            entries = list(os.scandir(root))
        except OSError:
            continue
        for entry in entries:
            try:  # another process may delete or rename it meanwhile (Numba's temporary files)
                if not entry.name.startswith("k_") or not entry.is_file(follow_symlinks=False):
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            key = entry.name[2:].split(".")[0]
            sizes[key] = sizes.get(key, 0) + st.st_size
            if root == directory:
                used[key] = st.st_mtime
    total = sum(sizes.values())
    if total <= limit:
        return 0
    now = time.time() if now is None else now
    deleted = 0
    for key in sorted(used, key=used.get):
        if total <= limit or now - used[key] < KEEP_RECENT_SECONDS:
            break
        if key in _modules:
            continue
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(directory, f"k_{key}.py"))
        _purge_compiled(directory, key)
        total -= sizes.get(key, 0)
        deleted += 1
    return deleted


# ----------------------------------------------------------------------------------------------
# Reporting and clearing


@dataclass(frozen=True)
class CacheInfo:
    directory: str | None  # None: the disk cache is off (TRACEGRAD_CACHE_DIR=off) or refused
    entries: int  # kernel modules on disk
    bytes: int  # their size on disk, with Numba's compiled code
    loaded: int  # kernel modules loaded in this process
    programs: int  # compiled programs held in memory

    def __str__(self) -> str:
        where = self.directory or "(disk cache off)"
        return (
            f"kernel cache {where}: {self.entries} kernels on disk ({self.bytes:,} bytes), "
            f"{self.loaded} loaded, {self.programs} programs in memory"
        )


def native_dir_path(directory: str) -> str:
    """The folder of the native kernels' object code beside the kernel modules' `directory`
    (cpu/llvm/engine.py writes it)."""
    return os.path.join(os.path.dirname(directory), "native")


def info(programs: int = 0) -> CacheInfo:
    directory = kernels_dir()
    count = size = 0
    if directory is not None:
        native = native_dir_path(directory)
        for root, _, files in [*os.walk(directory), *os.walk(native)]:
            for name in files:
                if name.startswith("k_"):
                    try:
                        size += os.lstat(os.path.join(root, name)).st_size
                    except OSError:
                        continue
                    if (root == directory and name.endswith(".py")) or (
                        root == native and name.endswith(".o")
                    ):
                        count += 1
    root = os.path.dirname(directory) if directory else None
    loaded = len(_modules) + sum(count_loaded() for count_loaded in _loaded_hooks)
    return CacheInfo(root, count, size, loaded, programs)


_clear_hooks: list = []  # other kernel caches' `forget the memory` functions (cpu/llvm/engine)
_loaded_hooks: list = []  # and their `how many are loaded` functions


def on_clear(forget, loaded=None) -> None:
    """Have `clear` call `forget()` too, and `info` count `loaded()`: a kernel cache of another
    module (its files live in a folder of their own beside `kernels/`, `native/`, which `clear`
    empties and `info` and `entries` count as well)."""
    _clear_hooks.append(forget)
    if loaded is not None:
        _loaded_hooks.append(loaded)


def clear(disk: bool = True) -> None:
    """Forget the kernels loaded in memory and (with `disk`) delete the cached ones on disk:
    Numba's kernel modules (`kernels/`) and the native kernels' object code (`native/`)."""
    with _lock:
        _modules.clear()
        for forget in _clear_hooks:
            forget()
        directory = kernels_dir() if disk else None
        if directory is None:
            return
        native = native_dir_path(directory)
        for root, _, files in [*os.walk(directory), *os.walk(native)]:
            for name in files:
                if name.startswith(("k_", ".tmp-")):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(root, name))


# ----------------------------------------------------------------------------------------------
# Listing what is on disk (tracegrad cache list)


@dataclass(frozen=True)
class CacheEntry:
    """One kernel module on disk, described from its files alone."""

    key: str
    backend: str  # "cpu", "cuda", or "?" for a module tracegrad does not recognise
    summary: str  # what the module holds ("1 fused kernel", "a graph of 14 nodes, 4 launches")
    sources: tuple[str, ...]  # the user's lines its code came from, where the module records them
    signatures: tuple[
        str, ...
    ]  # argument types Numba compiled it for (cpu), e.g. "f64 2-d, f64 1-d"
    shapes: tuple[str, ...]  # array shapes baked into the module (cuda), e.g. "f64[5,1]"
    bytes: int  # the module and its compiled code
    last_used: float  # time stamp (refreshed whenever a process loads it)


_NUMBA_DTYPES = {
    "float64": "f64",
    "float32": "f32",
    "float16": "f16",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "bool": "bool",
}


def _numba_signatures(pycache: str, key: str, buffers: list[int]) -> tuple[str, ...]:
    """The types of the arguments at positions `buffers` in Numba's index files of module `key`."""
    import pickle

    found = []
    for path in sorted(_compiled_files(os.path.dirname(pycache), key)):
        # Numba names an index k_<key>.<function>-<line>...nbi: the kernel's, not its row loops'
        function = os.path.basename(path)[len(f"k_{key}.") :].split("-", 1)[0]
        if not path.endswith(".nbi") or function != "kernel" or not safe_file(path):
            continue
        try:
            with open(path, "rb") as f:
                pickle.load(f)  # Numba's version
                _, overloads = pickle.loads(f.read())  # the same check Numba makes before it loads
        except Exception:  # an index this Numba cannot read: nothing known
            continue
        for signature, *_ in overloads:
            arrays = [signature[i] for i in buffers if i < len(signature)]
            arrays = [t for t in arrays if hasattr(t, "ndim") and hasattr(t, "dtype")]
            text = ", ".join(
                f"{_NUMBA_DTYPES.get(str(t.dtype), str(t.dtype))} {t.ndim}-d" for t in arrays
            )
            if text and text not in found:
                found.append(text)
    return tuple(found)


def _describe_module(path: str) -> tuple[str, str, tuple[str, ...], tuple[str, ...], list[int]]:
    """(backend, summary, user source lines, baked shapes, positions of a cpu kernel's buffer
    arguments) read from a module's text."""
    import re

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return "?", "unreadable", (), (), []
    first = text.split("\n", 1)[0]
    sources = sorted(set(re.findall(r"\[(?:grad )?([^\[\]\s]+:\d+)\]", text)))
    if first.startswith("# tracegrad program for the cuda backend"):
        shapes = []
        for dtype, dims in re.findall(r"^#\s+\w+ \w+:(\w+)\[([\d, ]*)\]", text, flags=re.MULTILINE):
            shape = f"{_NUMBA_DTYPES.get(dtype, dtype)}[{dims.replace(' ', '')}]"
            if shape not in shapes:
                shapes.append(shape)
        for dims in re.findall(r"^#\s+loop \w+ \[([\d, ]*)\]", text, flags=re.MULTILINE):
            shape = f"loop[{dims.replace(' ', '')}]"
            if shape not in shapes:
                shapes.append(shape)
        return "cuda", first.split(": ", 1)[-1], tuple(sources), tuple(shapes), []
    if "tracegrad.codegen_cpu" in first:
        # a module's kernel is `kernel`; `_row<k>` are loops it calls (cpu/kernels.outline_rows)
        kernels = re.findall(r"^def kernel\(([^)]*)\)", text, flags=re.MULTILINE)
        params = [p.strip() for p in kernels[0].split(",")] if kernels else []
        buffers = [i for i, p in enumerate(params) if re.fullmatch(r"b\d+", p)]
        summary = f"{len(kernels)} fused kernel{'s' if len(kernels) != 1 else ''}"
        return "cpu", summary, tuple(sources), (), buffers
    return "?", "not a tracegrad kernel module", (), (), []


def entries() -> list[CacheEntry]:
    """What the disk cache holds, most recently used first (empty when it is off)."""
    directory = kernels_dir()
    if directory is None:
        return []
    pycache = os.path.join(directory, "__pycache__")
    found = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    for name in names:
        if not (name.startswith("k_") and name.endswith(".py")):
            continue
        path = os.path.join(directory, name)
        key = name[2:-3]
        try:
            st = os.lstat(path)
        except OSError:
            continue
        size = st.st_size
        for compiled in _compiled_files(directory, key):
            with contextlib.suppress(OSError):
                size += os.lstat(compiled).st_size
        backend, summary, sources, shapes, buffers = _describe_module(path)
        signatures = _numba_signatures(pycache, key, buffers) if backend == "cpu" else ()
        found.append(
            CacheEntry(key, backend, summary, sources, signatures, shapes, size, st.st_mtime)
        )
    native = native_dir_path(directory)
    with contextlib.suppress(OSError):
        for entry in os.scandir(native):
            if entry.name.startswith("k_") and entry.name.endswith(".o"):
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    found.append(
                        CacheEntry(
                            entry.name[2:-2],
                            "cpu",
                            "1 native kernel (machine code)",
                            (),
                            (),
                            (),
                            st.st_size,
                            st.st_mtime,
                        )
                    )
    found.sort(key=lambda e: e.last_used, reverse=True)
    return found
