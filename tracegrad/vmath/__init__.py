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

from collections.abc import Callable

from ..base import config

from ._atrig import (
    arccos_f32,
    arccos_f64,
    arcsin_f32,
    arcsin_f64,
    arctan2_f32,
    arctan2_f64,
    arctan_f32,
    arctan_f64,
)
from ._exp import (
    cosh_f32,
    cosh_f64,
    exp2_f32,
    exp2_f64,
    exp_f32,
    exp_f64,
    expm1_f32,
    expm1_f64,
    sinh_f32,
    sinh_f64,
    tanh_f32,
    tanh_f64,
)
from ._log import (
    log1p_f32,
    log1p_f64,
    log2_f32,
    log2_f64,
    log10_f32,
    log10_f64,
    log_f32,
    log_f64,
)
from ._root import cbrt_f32, cbrt_f64, hypot_f32, hypot_f64
from ._trig import (
    TRIG_LIMIT,
    cos_f32,
    cos_f64,
    sin_f32,
    sin_f64,
    sincos_f32,
    sincos_f64,
    tan_f32,
    tan_f64,
)

#: primitive name -> (float64 implementation, float32 implementation)
FUNCTIONS: dict[str, tuple[Callable, Callable]] = {
    "exp": (exp_f64, exp_f32),
    "expm1": (expm1_f64, expm1_f32),
    "log": (log_f64, log_f32),
    "log1p": (log1p_f64, log1p_f32),
    "exp2": (exp2_f64, exp2_f32),
    "log2": (log2_f64, log2_f32),
    "log10": (log10_f64, log10_f32),
    "sin": (sin_f64, sin_f32),
    "cos": (cos_f64, cos_f32),
    "tan": (tan_f64, tan_f32),
    "tanh": (tanh_f64, tanh_f32),
    "arctan": (arctan_f64, arctan_f32),
    "sinh": (sinh_f64, sinh_f32),
    "cosh": (cosh_f64, cosh_f32),
    "arcsin": (arcsin_f64, arcsin_f32),
    "arccos": (arccos_f64, arccos_f32),
    "cbrt": (cbrt_f64, cbrt_f32),
}

#: primitives of two arguments: name -> (float64 implementation, float32 implementation)
BINARY: dict[str, tuple[Callable, Callable]] = {
    "arctan2": (arctan2_f64, arctan2_f32),
    "hypot": (hypot_f64, hypot_f32),
}

#: helpers that are not primitives but save work in derivative code: name -> (f64, f32)
HELPERS: dict[str, tuple[Callable, Callable]] = {
    "sincos": (sincos_f64, sincos_f32),
}

#: |x| up to which sin/cos/tan/sincos are accurate; beyond it they return nan.
TRIG_MAX_ARG = {"float64": TRIG_LIMIT, "float32": TRIG_LIMIT}

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


def get(name: str, dtype) -> Callable:
    """The implementation of primitive or helper ``name`` for ``dtype`` (float64 or float32)."""
    import numpy as np

    dt = np.dtype(dtype)
    pair = FUNCTIONS.get(name) or BINARY.get(name) or HELPERS.get(name)
    if pair is None:
        raise KeyError(f"no vectorised implementation of {name!r}")
    if dt == np.float64:
        return pair[0]
    if dt == np.float32:
        return pair[1]
    raise TypeError(f"vmath functions take float64 or float32, not {dt}")


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
    *(f"{n}_{d}" for n in [*FUNCTIONS, *BINARY, *HELPERS] for d in ("f64", "f32")),
]
