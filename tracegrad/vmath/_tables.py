"""The vectorised functions themselves, by primitive name (this imports Numba; the package's
`__init__` imports it when one of these names is first asked for)."""

from __future__ import annotations

from collections.abc import Callable

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
