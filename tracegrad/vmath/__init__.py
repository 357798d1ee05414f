"""Vectorisable float64/float32 math functions for generated Numba kernels.

Numba compiles ``math.sin``, ``math.exp``, ... to scalar libm calls, which keep LLVM from
vectorising the loop around them.  The functions here are written in plain Numba with
branch-free range reductions and polynomial approximations, so when a jitted loop calls them
element-wise, LLVM inlines them and emits packed AVX2/AVX-512 code.

Each function exists as ``<name>_f64`` and ``<name>_f32``; the float32 versions compute in
float32 arithmetic, but for sin, cos, tan, sincos, tanh, arcsin, exp2, log2, log10 and hypot,
which compute in float64 and round once (float32 arithmetic missed their accuracy bounds).  ``FUNCTIONS`` maps the primitive name to the pair, and ``math_mode()``
says whether generated code should use them ("vector", the default) or libm ("libm", chosen
with ``TRACEGRAD_MATH=libm``).  See docs/vmath.md for the accuracy bounds and speed.
"""

from __future__ import annotations

from ..base import config

#: the names of FUNCTIONS, BINARY and HELPERS (known without importing Numba: the code
#: generators ask which functions exist before any kernel is compiled)
UNARY_NAMES = (
    "exp", "expm1", "log", "log1p", "exp2", "log2", "log10", "sin", "cos", "tan", "tanh",
    "arctan", "sinh", "cosh", "arcsin", "arccos", "cbrt",
)  # fmt: skip
BINARY_NAMES = ("arctan2", "hypot")
HELPER_NAMES = ("sincos",)
NAMES = frozenset(UNARY_NAMES + BINARY_NAMES + HELPER_NAMES)

MODES = ("vector", "libm")
ENV_VAR = config.MATH
_override: str | None = None


def _check(mode: str, source: str) -> str:
    if mode not in MODES:
        valid = ", ".join(MODES)
        raise ValueError(f"invalid math mode {mode!r} from {source}; valid modes: {valid}")
    return mode


def math_mode() -> str:
    """The math mode generated kernels should use: "vector" (this module) or "libm".

    A mode set with ``set_math_mode`` wins; otherwise ``TRACEGRAD_MATH`` is read now, at each
    call, defaulting to "vector".
    """
    if _override is not None:
        return _override
    value = config.math()
    return _check(value, f"${ENV_VAR}") if value else "vector"


def set_math_mode(mode: str | None) -> None:
    """Override the math mode ("vector" or "libm"); ``None`` goes back to the environment."""
    global _override
    _override = None if mode is None else _check(mode, "set_math_mode")


def __getattr__(name: str):
    # FUNCTIONS, BINARY, HELPERS, TRIG_MAX_ARG, get and the functions (exp_f64, ...) import
    # Numba, so they load on first use: a warm first call of native kernels never asks.
    import importlib

    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _tables = importlib.import_module(__name__ + "._tables")
    try:
        return getattr(_tables, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


__all__ = [
    "FUNCTIONS",
    "BINARY",
    "HELPERS",
    "MODES",
    "ENV_VAR",
    "TRIG_MAX_ARG",
    "math_mode",
    "set_math_mode",
    "get",
    "NAMES",
    *(f"{n}_{d}" for n in sorted(NAMES) for d in ("f64", "f32")),
]
