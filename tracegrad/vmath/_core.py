"""Building blocks shared by the vectorisable math kernels.

Everything here is meant to be inlined into an element-wise loop, so it must stay free of
branches, calls into libm and exceptions: LLVM's loop vectoriser only turns a loop into packed
SIMD code when every operation in its body has a vector form.
"""

from __future__ import annotations

import os

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic


def _cacheable() -> bool:
    """Whether Numba has somewhere to keep these functions' machine code (beside this file, or
    its per-user cache): then a new process compiling a new kernel loads them instead of
    compiling them again."""
    here = os.path.dirname(os.path.abspath(__file__))
    home = os.path.expanduser("~")
    return (
        bool(os.environ.get("NUMBA_CACHE_DIR"))
        or os.access(here, os.W_OK)
        or (os.path.isdir(home) and os.access(home, os.W_OK))
    )


# Compile options of every kernel.
# - ``contract`` lets LLVM fuse a*b + c into one FMA (faster and more accurate) without the
#   value-changing rewrites of full fast-math, which would undo the round-to-nearest trick below.
# - The numpy error model turns x / 0 into inf/nan instead of a ZeroDivisionError check, a
#   branch that would stop vectorisation.
# - ``forceinline`` marks the LLVM function alwaysinline.  A call that is not inlined cannot be
#   vectorised, and LLVM's cost model may refuse to inline a large function (sinh with its
#   helpers inlined) into a large kernel.  Unlike numba's ``inline="always"``, which re-lowers
#   the body inside the caller with the caller's fast-math flags and error model, this keeps
#   the flags above on every operation: a caller compiled with fastmath=True cannot reassociate
#   (x + 1.5*2**52) - 1.5*2**52 away.
JIT_OPTIONS = {
    "fastmath": {"contract"},
    "error_model": "numpy",
    "forceinline": True,
    "cache": _cacheable(),
}


def jit(func):
    """Compile ``func`` lazily with the kernel options (``JIT_OPTIONS``)."""
    return njit(**JIT_OPTIONS)(func)


# --- bit casts -------------------------------------------------------------------------------


def _int_arg(builder, value, width):
    """Sign-extend or truncate an integer LLVM value to ``width`` bits."""
    if value.type.width < width:
        return builder.sext(value, ir.IntType(width))
    if value.type.width > width:
        return builder.trunc(value, ir.IntType(width))
    return value


@intrinsic
def f64_as_i64(typingctx, x):
    """The IEEE-754 bits of a float64, as int64."""
    if x != types.float64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


@intrinsic
def i64_as_f64(typingctx, i):
    """The float64 whose bits are the low 64 bits of integer ``i``."""
    if not isinstance(i, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(_int_arg(builder, args[0], 64), ir.DoubleType())

    return types.float64(i), codegen


@intrinsic
def f32_as_i32(typingctx, x):
    """The IEEE-754 bits of a float32, as int32."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


@intrinsic
def i32_as_f32(typingctx, i):
    """The float32 whose bits are the low 32 bits of integer ``i``.

    Numba widens int32 arithmetic to int64; truncating here lets LLVM narrow the whole integer
    computation back to 32-bit lanes.
    """
    if not isinstance(i, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(_int_arg(builder, args[0], 32), ir.FloatType())

    return types.float32(i), codegen


@intrinsic
def fma(typingctx, a, b, c):
    """a * b + c with a single rounding (``llvm.fma``; one instruction on FMA hardware).

    Used where the algorithm is only exact with a fused operation (Cody-Waite reduction,
    expm1 reconstruction), independent of the fast-math flags of the caller.  All three
    arguments must have the same float type, which also guards against silent promotion.
    """
    if not (isinstance(a, types.Float) and a == b == c):
        return None

    def codegen(context, builder, signature, args):
        fty = args[0].type
        fnty = ir.FunctionType(fty, [fty, fty, fty])
        fn = builder.module.declare_intrinsic("llvm.fma", [fty], fnty)
        return builder.call(fn, args)

    return a(a, b, c), codegen


# --- polynomials ------------------------------------------------------------------------------


@njit(inline="always")
def horner(u, coeffs):
    """coeffs[0] + coeffs[1]*u + ... + coeffs[-1]*u**(n-1), by Horner's rule.

    ``coeffs`` is a compile-time tuple, so LLVM fully unrolls the loop into a chain of FMAs.
    """
    p = coeffs[len(coeffs) - 1]
    for j in range(len(coeffs) - 2, -1, -1):
        p = p * u + coeffs[j]
    return p


# --- per-dtype constants ----------------------------------------------------------------------


class Spec:
    """Format constants of one float type, in that type (so no float32 value gets promoted)."""

    def __init__(self, dtype):
        info = np.finfo(dtype)
        self.dtype = np.dtype(dtype)
        self.float = dtype  # converts a scalar to this type inside jitted code
        self.mant = info.nmant  # explicit mantissa bits: 52 / 23
        self.bias = info.maxexp - 1  # exponent bias: 1023 / 127
        if dtype is np.float64:
            self.as_int, self.as_float = f64_as_i64, i64_as_f64
        else:
            self.as_int, self.as_float = f32_as_i32, i32_as_f32
        # Adding 1.5 * 2**mant rounds any |t| < 2**(mant-1) to the nearest integer (ties to
        # even) in the current rounding mode, and the integer appears in the low bits.
        self.shift = dtype(1.5 * 2.0**self.mant)
        self.shift_bits = int(np.array(self.shift).view(_INT[dtype]))
        self.inf = dtype(np.inf)
        self.nan = dtype(np.nan)
        self.tiny = dtype(info.smallest_normal)

    def c(self, value):
        """A constant in this type."""
        return self.dtype.type(value)

    def coeffs(self, values):
        """A polynomial coefficient tuple in this type."""
        return tuple(self.dtype.type(v) for v in values)


_INT = {np.float64: np.int64, np.float32: np.int32}
F64 = Spec(np.float64)
F32 = Spec(np.float32)


def named(func, name, doc):
    """Give a kernel built by a factory its public name and docstring before it is jitted."""
    func.__name__ = func.__qualname__ = name
    func.__doc__ = doc
    return func
