"""Python's cmath functions on complex128 values, as Numba compiles them, for the LLVM printer.

Numba lowers `cmath.exp(z)` and the rest by compiling short Python functions of its own
(numba/cpython/cmathimpl.py, which follow CPython's cmathmodule.c and NumPy's npy_csqrt). Each
function here is the same computation, step for step, written as a sequence of named
expressions that `scalars.ExpressionCompiler` compiles: every `if` becomes a conditional
expression (both branches are computed and one is selected, which changes nothing: the math
functions have no side effects), every call the same math-library call, every operation in the
same float64 order. So the two compilers give the same bits (tests/test_llvm_kernels.py checks it
at edge values: infinities, nans, signed zeros, huge parts).

(The complex square root and logarithms are not among them: the templates write them out
themselves, `fusion/render.py`, because cmath.sqrt as Numba compiles it halves the imaginary part
of huge values and cmath.log overflows on them.)

Only complex128: on complex64, Numba's typing widens some intermediate values to float64 (a float32
variable reassigned with a float64 literal product) in ways this module does not copy; those
kernels, and the inverse trigonometric and hyperbolic functions, stay Numba's.

Names: `x`, `y` are the argument's parts, `xf`, `yf` whether each is finite, `z` the argument,
`NAN` a quiet nan. The last step is the result.
"""

from __future__ import annotations

# cmath.exp (cmathimpl.exp_impl)
_EXP = [
    ("c", "math.cos(y)"),
    ("s", "math.sin(y)"),
    ("r", "math.exp(x)"),
    ("finite", "complex(r * c, r * s) if yf else complex(NAN, NAN)"),
    ("at_nan", "complex(x, x) if y else complex(x, y)"),
    (
        "at_inf",
        "complex(c * x if c != 0 else c, s * x if s != 0 else s) if yf else complex(x, NAN)",
    ),
    ("at_minus_inf", "complex(r * c, r * s) if yf else complex(0.0, 0.0)"),
    (
        "out",
        "finite if xf else (at_nan if math.isnan(x) else (at_inf if x > 0.0 else at_minus_inf))",
    ),
]

# cmath.cosh (cmathimpl.impl_cmath_cosh)
_COSH = [
    ("c", "math.cos(y)"),
    ("s", "math.sin(y)"),
    ("re", "abs(x) if math.isnan(y) or y == 0.0 else math.copysign(x, c)"),
    ("im", "y if math.isnan(y) or y == 0.0 else math.copysign(x, s)"),
    ("at_inf", "complex(re, -im if x < 0.0 else im)"),
    ("out", "at_inf if math.isinf(x) else complex(c * math.cosh(x), s * math.sinh(x))"),
]

# cmath.sinh (cmathimpl.impl_cmath_sinh)
_SINH = [
    ("c", "math.cos(y)"),
    ("s", "math.sin(y)"),
    ("re", "x if math.isnan(y) else (c * x if c != 0.0 else c)"),
    ("im", "y if math.isnan(y) else (s * abs(x) if s != 0.0 else s)"),
    ("out", "complex(re, im) if math.isinf(x) else complex(c * math.sinh(x), s * math.cosh(x))"),
]

# cmath.tanh (cmathimpl.impl_cmath_tanh: CPython's c_tanh)
_TANH = [
    ("at_inf", "complex(math.copysign(1.0, x), 0.0 if math.isinf(y) else "
               "math.copysign(0.0, math.sin(2.0 * y)))"),
    ("tx", "math.tanh(x)"),
    ("ty", "math.tan(y)"),
    ("cx", "1.0 / math.cosh(x)"),
    ("txty", "tx * ty"),
    ("denom", "1.0 + txty * txty"),
    ("out", "at_inf if math.isinf(x) else "
            "complex(tx * (1.0 + ty * ty) / denom, ((ty / denom) * cx) * cx)"),
]  # fmt: skip

# cmath.cos(z) = cosh(z j), sin(z) = -j sinh(z j), tan(z) = -j tanh(z j) (cmathimpl)
_COS = [("out", "cmath.cosh(complex(-y, x))")]
_SIN = [("r", "cmath.sinh(complex(-y, x))"), ("out", "complex(r.imag, -r.real)")]
_TAN = [("r", "cmath.tanh(complex(-y, x))"), ("out", "complex(r.imag, -r.real)")]

PROGRAMS: dict[str, list[tuple[str, str]]] = {
    "exp": _EXP,
    "cosh": _COSH,
    "sinh": _SINH,
    "tanh": _TANH,
    "cos": _COS,
    "sin": _SIN,
    "tan": _TAN,
}
