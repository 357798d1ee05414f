"""Bessel functions of any real order (stage: primitives): SciPy's jv, yv, iv, ive and kv, of an
order array `v` and an argument `x` of one shape.

The values are SciPy's own (`scipy.special.<kind>(v, x)`, on the host: a step of its own on every
backend; SciPy is needed only by a program that uses them). The order has no derivative; the
argument's comes from the recurrences, written with the same primitive at the neighbouring orders,
so every order of derivative exists:

    J'v = (J(v-1) - J(v+1)) / 2        Y'v = (Y(v-1) - Y(v+1)) / 2
    I'v = (I(v-1) + I(v+1)) / 2        K'v = -(K(v-1) + K(v+1)) / 2
    ive = iv e^-|x|:  ive'v = (ive(v-1) + ive(v+1)) / 2 - sign(x) ive(v)
"""

from __future__ import annotations

import numpy as np

from .batching import every_operand
from .facets import OWN_STEP, Kind, Primitive, register, registered
from .ops import add, ct_mul, emit, infer_same, mul, sub

BESSEL_KINDS = ("jv", "yv", "iv", "ive", "kv")


def _impl(v, x, kind):
    import scipy.special  # a program that calls a Bessel function has SciPy

    return np.asarray(getattr(scipy.special, kind)(v, x))


def _infer(shapes, dtypes, params):
    # SciPy's loops: float32 arguments give float32, anything else float64
    real32 = all(np.dtype(d) == np.float32 for d in dtypes)
    return infer_same(shapes, dtypes, params, np.float32 if real32 else np.float64)


def bessel(kind: str, v, x):
    return emit(bessel_p, v, x, kind=kind)


def _rule(ct, out, v, x, kind):
    lower, upper = bessel(kind, sub(v, 1.0), x), bessel(kind, add(v, 1.0), x)
    if kind in ("jv", "yv"):
        slope = mul(sub(lower, upper), 0.5)
    elif kind == "iv":
        slope = mul(add(lower, upper), 0.5)
    elif kind == "kv":
        slope = mul(add(lower, upper), -0.5)
    else:  # ive
        slope = sub(mul(add(lower, upper), 0.5), mul(emit(registered("sign"), x), out))
    return None, ct_mul(ct, slope)


bessel_p = register(
    Primitive(
        "bessel",
        Kind.SHAPE,
        _impl,
        _infer,
        _rule,
        every_operand(),
        index_map=OWN_STEP,
        fresh_result=True,
    )
)
