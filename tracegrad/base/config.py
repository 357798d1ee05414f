"""Every `TRACEGRAD_*` environment variable, read here and nowhere else.

| variable | values | default | effect |
|---|---|---|---|
| `TRACEGRAD_BACKEND` | `numpy`, `cpu`, `cuda` | the fastest available | the backend of transforms that name none |
| `TRACEGRAD_LOG` | topics, comma-separated: `retrace`, `compile`, `cuda`, `all` | none | `retrace`: log each re-trace of a function and why; `compile`: log each kernel's compile or load time and whether it was compiled, loaded from disk or already in memory; `cuda`: log each step the cuda backend runs on the host |
| `TRACEGRAD_DEBUG_NANS` | `1` (anything but `0`) | off | a NaN in a result raises `FloatingPointError` naming the node and source line that produced it |
| `TRACEGRAD_MATH` | `vector`, `libm` | `vector` | compiled backends: `libm` calls the C math library in kernels instead of tracegrad's vectorised math functions |
| `TRACEGRAD_CPU_COMPILER` | `llvm`, `numba` | `llvm` | the `cpu` backend: `llvm` prints kernels as LLVM IR and compiles them through llvmlite (milliseconds a kernel), falling back to Numba for a kernel it cannot print; `numba` compiles every kernel's Python source with Numba (the cross-check) |
| `TRACEGRAD_CACHE_DIR` | a folder, or `off` | `$XDG_CACHE_HOME/tracegrad`, else `~/.cache/tracegrad` | compiled backends: the folder of the on-disk kernel and program cache; `off` (or `0`, `none`, empty) keeps everything in memory |
| `TRACEGRAD_CACHE_MAX_MB` | megabytes | `1024` | compiled backends: the disk cache's size limit; the least recently used entries go first |
| `TRACEGRAD_PROGRAM_MEMORY_MB` | megabytes | `1024` | the compiled programs held in memory: a bound on the bytes of their constants (read once, at import) |
| `TRACEGRAD_TIERED` | `0`, `off`, `false`, `no` | on | the `cpu` backend: `0` compiles a new program before its first call returns, instead of running its first calls on the NumPy interpreter while it compiles in the background |
| `TRACEGRAD_PROGRAM_CACHE` | `0`, `off`, `false`, `no` | on | `0`: traced and optimised programs are not kept on disk for the next process |
| `TRACEGRAD_DUMP_KERNELS` | a folder | none | compiled backends: write the generated source of each compiled program into that folder |
| `TRACEGRAD_GUARDS` | `0`, `off`, `false`, `no` | on | Python `if`, `while`, `int()` and indices on traced values are answered on the call being traced and kept as guards of the program; `0` refuses them (JAX's rule) |
| `TRACEGRAD_MAX_VARIANTS` | a count | `32` | the programs a function may have for one argument signature, one per outcome of its Python branches on traced values (a warning names the line at 8); one more is an error naming the line whose outcome keeps changing |

Each setting is read when it is used, not once at import, so that a program (or a test) can
change it while it runs; the one exception is `TRACEGRAD_PROGRAM_MEMORY_MB`, which sizes the
program store when it is created. The same table is in docs/api.md; `VARIABLES` holds it as data
(tests/test_config.py keeps the three in step). This module imports nothing else of tracegrad.
"""

from __future__ import annotations

import os
import time


class _Logger:
    """The "tracegrad" logger, looked up on first use: `logging` (with `traceback` and `string`)
    is about 10 ms of a new process's `import tracegrad`, and most processes never log."""

    __slots__ = ()

    def __getattr__(self, name: str):
        import logging

        return getattr(logging.getLogger("tracegrad"), name)


log = _Logger()

# When this process imported tracegrad: a source file changed later may not be the code it runs
# (runtime/program_cache.py persists no program then).
IMPORTED_NS = time.time_ns()

BACKEND = "TRACEGRAD_BACKEND"
LOG = "TRACEGRAD_LOG"
DEBUG_NANS = "TRACEGRAD_DEBUG_NANS"
MATH = "TRACEGRAD_MATH"
CPU_COMPILER = "TRACEGRAD_CPU_COMPILER"
CACHE_DIR = "TRACEGRAD_CACHE_DIR"
CACHE_MAX_MB = "TRACEGRAD_CACHE_MAX_MB"
PROGRAM_MEMORY_MB = "TRACEGRAD_PROGRAM_MEMORY_MB"
TIERED = "TRACEGRAD_TIERED"
PROGRAM_CACHE = "TRACEGRAD_PROGRAM_CACHE"
DUMP_KERNELS = "TRACEGRAD_DUMP_KERNELS"
GUARDS = "TRACEGRAD_GUARDS"
MAX_VARIANTS = "TRACEGRAD_MAX_VARIANTS"

DEFAULT_MB = 1024
_OFF = ("0", "off", "false", "no")


class Variable:
    """One environment variable: its `name`, the `values` it takes, its `default`, its
    `effect`, and a one-line `summary` for `tracegrad doctor`."""

    __slots__ = ("default", "effect", "name", "summary", "values")

    def __init__(self, name: str, values: str, default: str, effect: str, summary: str):
        self.name = name
        self.values = values
        self.default = default
        self.effect = effect
        self.summary = summary

    def __repr__(self) -> str:
        return f"Variable({self.name!r})"


VARIABLES = (
    Variable(
        BACKEND,
        "`numpy`, `cpu`, `cuda`",
        "the fastest available",
        "the backend of transforms that name none",
        "the default backend (numpy, cpu or cuda)",
    ),
    Variable(
        LOG,
        "topics, comma-separated: `retrace`, `compile`, `cuda`, `all`",
        "none",
        "`retrace`: log each re-trace of a function and why; `compile`: log each kernel's "
        "compile or load time and whether it was compiled, loaded from disk or already in "
        "memory; `cuda`: log each step the cuda backend runs on the host",
        "'retrace' logs why a function is traced again",
    ),
    Variable(
        DEBUG_NANS,
        "`1` (anything but `0`)",
        "off",
        "a NaN in a result raises `FloatingPointError` naming the node and source line that "
        "produced it",
        "'1' names the node and line where a NaN in the results was born",
    ),
    Variable(
        MATH,
        "`vector`, `libm`",
        "`vector`",
        "compiled backends: `libm` calls the C math library in kernels instead of "
        "tracegrad's vectorised math functions",
        "compiled backends: 'libm' uses the C math library in kernels",
    ),
    Variable(
        CPU_COMPILER,
        "`llvm`, `numba`",
        "`llvm`",
        "the `cpu` backend: `llvm` prints kernels as LLVM IR and compiles them through "
        "llvmlite (milliseconds a kernel), falling back to Numba for a kernel it cannot "
        "print; `numba` compiles every kernel's Python source with Numba (the cross-check)",
        "the cpu backend's kernel compiler: 'numba' for Numba only",
    ),
    Variable(
        CACHE_DIR,
        "a folder, or `off`",
        "`$XDG_CACHE_HOME/tracegrad`, else `~/.cache/tracegrad`",
        "compiled backends: the folder of the on-disk kernel and program cache; `off` (or "
        "`0`, `none`, empty) keeps everything in memory",
        "compiled backends: the disk cache's folder ('off': memory only)",
    ),
    Variable(
        CACHE_MAX_MB,
        "megabytes",
        f"`{DEFAULT_MB}`",
        "compiled backends: the disk cache's size limit; the least recently used entries go first",
        "compiled backends: the disk cache's size limit (default 1024)",
    ),
    Variable(
        PROGRAM_MEMORY_MB,
        "megabytes",
        f"`{DEFAULT_MB}`",
        "the compiled programs held in memory: a bound on the bytes of their constants "
        "(read once, at import)",
        "the bytes of constants compiled programs may hold in memory (default 1024)",
    ),
    Variable(
        TIERED,
        "`0`, `off`, `false`, `no`",
        "on",
        "the `cpu` backend: `0` compiles a new program before its first call returns, "
        "instead of running its first calls on the NumPy interpreter while it compiles in "
        "the background",
        "cpu backend: '0' compiles before the first call returns",
    ),
    Variable(
        PROGRAM_CACHE,
        "`0`, `off`, `false`, `no`",
        "on",
        "`0`: traced and optimised programs are not kept on disk for the next process",
        "'0' keeps traced programs off the disk",
    ),
    Variable(
        DUMP_KERNELS,
        "a folder",
        "none",
        "compiled backends: write the generated source of each compiled program into that folder",
        "compiled backends: a folder to write generated kernel source to",
    ),
    Variable(
        GUARDS,
        "`0`, `off`, `false`, `no`",
        "on",
        "Python `if`, `while`, `int()` and indices on traced values are answered on the call "
        "being traced and kept as guards of the program; `0` refuses them (JAX's rule)",
        "'0' refuses Python control flow on traced values",
    ),
    Variable(
        MAX_VARIANTS,
        "a count",
        "`32`",
        "the programs a function may have for one argument signature, one per outcome of its "
        "Python branches on traced values (a warning names the line at 8); one more is an "
        "error naming the line whose outcome keeps changing",
        "programs per signature, one per outcome of Python branches",
    ),
)


def markdown_table() -> str:
    """`VARIABLES` as the Markdown table of this module's docstring and of docs/api.md."""
    rows = ["| variable | values | default | effect |", "|---|---|---|---|"]
    rows += [f"| `{v.name}` | {v.values} | {v.default} | {v.effect} |" for v in VARIABLES]
    return "\n".join(rows)


_KEYS: dict[str, bytes] = {}


def env(name: str) -> str:
    """os.environ.get(name, ""), without the encoding work on POSIX (some settings are read on
    every call of a compiled function)."""
    data = getattr(os.environ, "_data", None)
    if os.name == "posix" and isinstance(data, dict):
        key = _KEYS.get(name)
        if key is None:
            key = _KEYS[name] = name.encode()
        value = data.get(key)
        return "" if value is None else value.decode()
    return os.environ.get(name, "")


_ON = frozenset({"", "1", "on", "true", "yes"})
_warned: set[tuple[str, str]] = set()


def _ignoring(name: str, text: str, what: str) -> None:
    """Log once that a variable's value is not understood (and the default is used)."""
    if (name, text) not in _warned:
        _warned.add((name, text))
        log.warning("tracegrad: ignoring %s=%r (%s)", name, text, what)


def _switch(name: str) -> bool:
    """On unless set to 0/off/false/no; another value is logged and means on (the default)."""
    text = env(name).strip().lower()
    if text not in _OFF and text not in _ON:
        _ignoring(name, text, "use 1 or 0")
    return text not in _OFF


def _megabytes(name: str) -> int:
    """The variable's megabytes in bytes; a value that is not a non-negative number is logged
    and ignored."""
    text = env(name)
    try:
        megabytes = float(text or DEFAULT_MB)
    except ValueError:
        megabytes = -1.0
    if not megabytes >= 0:  # also nan
        _ignoring(name, text, "not a number of megabytes")
        megabytes = DEFAULT_MB
    return int(megabytes * 2**20)


def backend() -> str:
    """The default backend's name as set ('' when unset: the fastest available)."""
    return env(BACKEND).strip()


def log_topics() -> set[str]:
    """The topics TRACEGRAD_LOG asks for (empty: no logging)."""
    return {t.strip() for t in env(LOG).split(",") if t.strip()}


def log_enabled(topic: str) -> bool:
    topics = log_topics()
    return topic in topics or "all" in topics


def debug_nans() -> bool:
    return env(DEBUG_NANS) not in ("", "0")


def math() -> str:
    """The math mode as set, lower case ('' when unset); tracegrad.vmath checks and defaults it."""
    return env(MATH).strip().lower()


def cpu_compiler() -> str:
    """ "llvm" (the default) or "numba": how the cpu backend compiles its kernels."""
    value = env(CPU_COMPILER).strip().lower()
    if value in ("", "llvm"):
        return "llvm"
    if value == "numba":
        return "numba"
    raise ValueError(f"{CPU_COMPILER}={value!r} is not a compiler: use llvm or numba")


def cache_dir() -> str | None:
    """The disk cache's folder as set, made absolute; None when unset (the default folder) or
    turned off (see `cache_off`)."""
    text = os.environ.get(CACHE_DIR)
    if text is None or cache_off():
        return None
    return os.path.abspath(os.path.expanduser(text))


def cache_off() -> bool:
    """Whether TRACEGRAD_CACHE_DIR turns the disk cache off (set to off, 0, none or empty)."""
    text = os.environ.get(CACHE_DIR)
    return text is not None and text.strip().lower() in ("", "off", "0", "none")


def cache_max_bytes() -> int:
    return _megabytes(CACHE_MAX_MB)


def program_memory_bytes() -> int:
    return _megabytes(PROGRAM_MEMORY_MB)


def tiered() -> bool:
    return _switch(TIERED)


def program_cache() -> bool:
    return _switch(PROGRAM_CACHE)


def guards() -> bool:
    return _switch(GUARDS)


def max_variants() -> int:
    """TRACEGRAD_MAX_VARIANTS as a count of at least 1 (32 when unset or not understood)."""
    text = env(MAX_VARIANTS).strip()
    if not text:
        return 32
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        _ignoring(MAX_VARIANTS, text, "not a count of at least 1")
        return 32
    return count


def dump_kernels() -> str | None:
    """The folder generated kernel source is written to, or None."""
    return env(DUMP_KERNELS) or None
