"""The elementwise entries of the table (stage: primitives), first part: how an elementwise entry is
declared (`elementwise_primitive`, scalar templates), then literals, arithmetic, powers, exponentials, logarithms,
trigonometric and hyperbolic functions, sigmoid and softplus.
"""

from __future__ import annotations

import math
import re

import numpy as np

from .batching import every_operand
from .facets import (
    PICK_MAX,
    PICK_MIN,
    NO_ALGEBRA,
    PRIMITIVES,
    Algebra,
    Kind,
    Pairing,
    Primitive,
    register,
    registered,
)
from .ops import (
    infer_same,
    unary_rule,
    add,
    compare,
    ct_mul,
    div,
    emit,
    integer_pow,
    mul,
    neg,
    reciprocal,
    sub,
    unary,
    where,
)

# ----------------------------------------------------------------------------------------------
# Scalar templates. `M.f(...)` is a math-library call; each code generator renders it.


def _integer_pow_scalar(args, params):
    # x*x is correctly rounded, x*x*x within 1.2 ulp and 1/x correctly rounded; any other power
    # calls pow() with a float exponent (within 1 ulp, like NumPy's power, and no intermediate
    # overflow or underflow: 1e155 ** -2 is 1e-310). An integer exponent would make Numba
    # multiply repeatedly (48 ulp at n = 64). Integer x only reaches here with n <= 3.
    x, n = args[0], params["n"]
    if n == 0:
        return f"({x} ** 0)"
    if 0 < n <= 3:
        return "(" + " * ".join([x] * n) + ")"
    if n == -1:
        return f"(1 / {x})"
    return f"M.pow({x}, {float(n)!r})"


def complex_division(a: str, b: str) -> str:
    """`a / b` on complex values as NumPy divides them (Smith's method: no overflow for large
    parts; inf and nan, not an exception, for a zero divisor)."""
    ar, ai, br, bi = f"{a}.real", f"{a}.imag", f"{b}.real", f"{b}.imag"
    zero = f"complex({ar} / abs({br}), {ai} / abs({bi}))"
    rat, scl = f"({bi} / {br})", f"(1.0 / ({br} + {bi} * ({bi} / {br})))"
    wide = f"complex(({ar} + {ai} * {rat}) * {scl}, ({ai} - {ar} * {rat}) * {scl})"
    rat, scl = f"({br} / {bi})", f"(1.0 / ({bi} + {br} * ({br} / {bi})))"
    tall = f"complex(({ar} * {rat} + {ai}) * {scl}, ({ai} * {rat} - {ar}) * {scl})"
    return f"({zero} if {b} == 0 else ({wide} if abs({br}) >= abs({bi}) else {tall}))"


def _integer_pow_complex(args, params):
    # z**n for n <= 3 as products, 1/z**|n| through NumPy's division, else the library's power
    x, n = args[0], params["n"]
    if n < 0:
        return complex_division("1.0", _integer_pow_complex(args, {"n": -n}))
    if n <= 3:
        return _integer_pow_scalar(args, params)
    return f"M.pow({x}, {float(n)!r})"


# NumPy's complex power: 1 at a zero exponent, 0 at a zero base with a positive real exponent,
# nan + nan j at a zero base otherwise (Numba's and Python's raise there)
_POW_COMPLEX = (
    "(complex(1.0, 0.0) if {1} == 0 else (M.pow({0}, {1}) if {0} != 0 else "
    "(complex(0.0, 0.0) if ({1}.imag == 0) & ({1}.real > 0) else complex(math.nan, math.nan))))"
)


def _pow_rule(ct, out, a, b):
    # b a**(b-1) is 0 * inf at a = 0, b = 0; x**0 is 1 everywhere, so its slope is 0 there
    slope = mul(b, emit(pow_p, a, sub(b, 1.0)))
    ct_a = ct_mul(ct, where(compare(registered("eq"), b, 0.0), 0.0, slope))
    # out * log(a) is 0 * -inf at a = 0; its limit (b > 0) is 0.
    ct_b = ct_mul(ct, where(compare(registered("eq"), out, 0.0), 0.0, mul(out, unary(log_p, a))))
    return ct_a, ct_b


def _integer_pow_rule(ct, out, x, n):
    if n == 0:
        return (None,)
    return (ct_mul(ct, mul(integer_pow(x, n - 1), float(n))),)


# ----------------------------------------------------------------------------------------------
# The elementwise entries


_ONE_CALL = re.compile(r"M\.(\w+)\(\{0\}(, \{1\})?\)")


def elementwise_primitive(
    name,
    impl,
    adjoint=None,
    scalar=None,
    infer=infer_same,
    differentiable=True,
    linear=False,
    domain=(-2.0, 2.0),
    algebra=NO_ALGEBRA,
    pairing=None,
    operands="number",
    complex_operands=False,
    complex_scalar=None,
):
    call = _ONE_CALL.fullmatch(scalar) if isinstance(scalar, str) else None
    prim = Primitive(
        name,
        Kind.ELEMENTWISE,
        impl,
        infer,
        adjoint,
        every_operand(),
        scalar,
        differentiable,
        linear,
        domain,
        algebra=algebra,
        operands=operands,
        pairing=pairing,
        math_call=call.group(1) if call else None,
        complex_operands=complex_operands,
        complex_scalar=complex_scalar,
    )
    return register(prim)


def math_names() -> dict[str, str]:
    """Math-library names whose vectorised version (tracegrad.vmath) is named otherwise: the
    primitive's name (asin -> arcsin)."""
    return {
        p.math_call: p.name
        for p in PRIMITIVES.values()
        if p.math_call is not None and p.math_call != p.name
    }


const_p = register(
    Primitive(
        "const",
        Kind.CONST,
        impl=lambda value, shape: np.broadcast_to(value, shape),
        infer=lambda shapes, dtypes, p: (tuple(p["shape"]), p["value"].dtype),
        differentiable=False,
    )
)

neg_p = elementwise_primitive(
    "neg",
    np.negative,
    lambda ct, out, x: (neg(ct),),
    "(-{0})",
    linear=True,
    algebra=Algebra(involution=True),
    complex_operands=True,
)
add_p = elementwise_primitive(
    "add",
    np.add,
    lambda ct, out, a, b: (ct, ct),
    "({0} + {1})",
    linear=True,
    algebra=Algebra(neutral=((1, 0), (0, 0))),
    complex_operands=True,
)
sub_p = elementwise_primitive(
    "sub",
    np.subtract,
    lambda ct, out, a, b: (ct, neg(ct)),
    "({0} - {1})",
    linear=True,
    algebra=Algebra(neutral=((1, 0),)),
    complex_operands=True,
)
mul_p = elementwise_primitive(
    "mul",
    np.multiply,
    lambda ct, out, a, b: (ct_mul(ct, b), ct_mul(ct, a)),
    "({0} * {1})",
    algebra=Algebra(neutral=((1, 1), (0, 1))),
    complex_operands=True,
)
div_p = elementwise_primitive(
    "div",
    np.true_divide,
    lambda ct, out, a, b: (ct_mul(ct, reciprocal(b)), ct_mul(ct, neg(div(out, b)))),
    "({0} / {1})",
    domain=(0.5, 2.0),
    complex_scalar=lambda args, params: complex_division(*args),
    algebra=Algebra(neutral=((1, 1),)),
    complex_operands=True,
)
pow_p = elementwise_primitive(
    "pow",
    np.power,
    _pow_rule,
    "({0} ** {1})",
    domain=(0.5, 2.0),
    complex_operands=True,
    complex_scalar=_POW_COMPLEX,
)
integer_pow_p = elementwise_primitive(
    "integer_pow",
    lambda x, n: np.power(x, n) if n >= 0 else np.power(x, float(n)).astype(x.dtype),
    _integer_pow_rule,
    _integer_pow_scalar,
    complex_scalar=_integer_pow_complex,
    # x**0 is 1, even for nan and inf (as in NumPy)
    algebra=Algebra(
        rewrite=lambda node, fills, producers: (
            np.ones((), node.out.dtype) if node.params["n"] == 0 else None
        )
    ),
    complex_operands=True,
)
ct_mul_p = elementwise_primitive(
    "ct_mul",
    lambda ct, d: np.where(ct == 0, ct, ct * d),
    # d(out)/d(d) is ct, itself 0 where masked: mask that term on ct, not on g.
    lambda g, out, ct, d: (ct_mul(g, d), ct_mul(ct, g)),
    "({0} * {1} if {0} != 0 else {0})",
    algebra=Algebra(absorbing=((0, 0),), neutral=((1, 1), (0, 1))),
    complex_operands=True,
)


def _extremum_binary(pick: str):
    """maximum's and minimum's adjoint: the cotangent goes to the operand picked, half to each on
    a tie. The comparisons are entries declared later (piecewise.py), found when the rule runs."""

    def rule(ct, out, a, b):
        win_a, tie = compare(registered(pick), a, b), compare(registered("eq"), a, b)
        half = mul(ct, 0.5)
        ct_a = where(win_a, ct, where(tie, half, 0.0))
        ct_b = where(win_a, 0.0, where(tie, half, ct))
        return ct_a, ct_b

    return rule


maximum_p = elementwise_primitive("maximum", np.maximum, _extremum_binary("gt"), f"({PICK_MAX})")
minimum_p = elementwise_primitive("minimum", np.minimum, _extremum_binary("lt"), f"({PICK_MIN})")

exp_p = elementwise_primitive(
    "exp", np.exp, unary_rule(lambda x, out: out), "M.exp({0})", complex_operands=True
)
# expm1' = exp(x): out + 1 cancels for negative x (and is 0 below -37)
expm1_p = elementwise_primitive(
    "expm1",
    np.expm1,
    unary_rule(lambda x, out: unary(exp_p, x)),
    "M.expm1({0})",
    complex_operands=True,
)
log_p = elementwise_primitive(
    "log",
    np.log,
    unary_rule(lambda x, out: reciprocal(x)),
    "M.log({0})",
    domain=(0.2, 3.0),
    complex_operands=True,
)
log1p_p = elementwise_primitive(
    "log1p",
    np.log1p,
    unary_rule(lambda x, out: reciprocal(add(x, 1.0))),
    "M.log1p({0})",
    domain=(-0.5, 2.0),
    complex_operands=True,
)
sqrt_p = elementwise_primitive(
    "sqrt",
    np.sqrt,
    unary_rule(lambda x, out: div(0.5, out)),
    "M.sqrt({0})",
    domain=(0.2, 3.0),
    complex_operands=True,
)
sin_p = elementwise_primitive(
    "sin",
    np.sin,
    unary_rule(lambda x, out: unary(cos_p, x)),
    "M.sin({0})",
    pairing=Pairing("cos", "sincos"),
    complex_operands=True,
)
cos_p = elementwise_primitive(
    "cos",
    np.cos,
    unary_rule(lambda x, out: neg(unary(sin_p, x))),
    "M.cos({0})",
    complex_operands=True,
)
tan_p = elementwise_primitive(
    "tan",
    np.tan,
    unary_rule(lambda x, out: add(mul(out, out), 1.0)),
    "M.tan({0})",
    domain=(-1.2, 1.2),
    complex_operands=True,
)


# 1 - x^2, computed as (1 - x)(1 + x): no cancelling near |x| = 1. One primitive, not that
# product of two nodes: at x = +-1 one factor is 0, and the product rule would multiply it by the
# infinite cotangent arriving from 1 / sqrt(1 - x^2) (nan, where the limit is infinite). Its
# derivative -2x has no such factor, so arcsin'' and arccos'' reach their one-sided limits.
one_minus_square_p = elementwise_primitive(
    "one_minus_square",
    lambda x: np.multiply(np.subtract(1, x), np.add(1, x)),
    unary_rule(lambda x, out: mul(x, -2.0)),
    "((1.0 - {0}) * (1.0 + {0}))",
    complex_operands=True,
)


def one_minus_square(x):
    return unary(one_minus_square_p, x)


arcsin_p = elementwise_primitive(
    "arcsin",
    np.arcsin,
    unary_rule(lambda x, out: reciprocal(unary(sqrt_p, one_minus_square(x)))),
    "M.asin({0})",
    domain=(-0.9, 0.9),
    complex_operands=True,
)
arccos_p = elementwise_primitive(
    "arccos",
    np.arccos,
    unary_rule(lambda x, out: neg(reciprocal(unary(sqrt_p, one_minus_square(x))))),
    "M.acos({0})",
    domain=(-0.9, 0.9),
    complex_operands=True,
)
arctan_p = elementwise_primitive(
    "arctan",
    np.arctan,
    unary_rule(lambda x, out: reciprocal(add(mul(x, x), 1.0))),
    "M.atan({0})",
    complex_operands=True,
)
sinh_p = elementwise_primitive(
    "sinh",
    np.sinh,
    unary_rule(lambda x, out: unary(cosh_p, x)),
    "M.sinh({0})",
    complex_operands=True,
)
cosh_p = elementwise_primitive(
    "cosh",
    np.cosh,
    unary_rule(lambda x, out: unary(sinh_p, x)),
    "M.cosh({0})",
    complex_operands=True,
)
tanh_p = elementwise_primitive(
    "tanh",
    np.tanh,
    unary_rule(lambda x, out: sub(1.0, mul(out, out))),
    "M.tanh({0})",
    complex_operands=True,
)
# ---- Base-2 and base-10 logs and powers, softplus and sigmoid (one block; docs/limitations.md)
# As exact as NumPy's: log2 and exp2 at powers of two, log10 at powers of ten (kernels call
# tracegrad.vmath's versions, or libm's). Their derivatives are written with primitives, so every
# order exists.


# math.exp2 is Python 3.11's (and what numba.cuda lowers); before it, pow(2, x)
_EXP2_SCALAR = "M.exp2({0})" if hasattr(math, "exp2") else "M.pow(2.0, {0})"


def _sigmoid_impl(x):
    e = np.exp(-np.abs(x))  # never overflows
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


def _softplus_impl(x):
    # log(1 + e**x) without overflow; its limits: 0 at -inf, x at +inf
    return (np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))).astype(x.dtype, copy=False)


log2_p = elementwise_primitive(
    "log2",
    np.log2,
    unary_rule(lambda x, out: div(1 / math.log(2.0), x)),
    "M.log2({0})",
    domain=(0.2, 3.0),
    complex_operands=True,
)
log10_p = elementwise_primitive(
    "log10",
    np.log10,
    unary_rule(lambda x, out: div(1 / math.log(10.0), x)),
    "M.log10({0})",
    domain=(0.2, 3.0),
    complex_operands=True,
)
exp2_p = elementwise_primitive(
    "exp2",
    np.exp2,
    unary_rule(lambda x, out: mul(out, math.log(2.0))),
    _EXP2_SCALAR,
    complex_operands=True,
)
# sigmoid(x) = 1 / (1 + e**-x); its derivative sigmoid(x) * sigmoid(-x) is 1 - sigmoid(x) without
# the cancellation for large x.
sigmoid_p = elementwise_primitive(
    "sigmoid",
    _sigmoid_impl,
    unary_rule(lambda x, out: mul(out, unary(sigmoid_p, neg(x)))),
    "((1.0 if {0} >= 0 else M.exp(-abs({0}))) / (1.0 + M.exp(-abs({0}))))",
)
# softplus(x) = log(1 + e**x), smooth everywhere (the simplifier rewrites the stable idioms
# max(x, 0) + log1p(exp(-|x|)) and friends to it, see passes.smooth_idioms).
softplus_p = elementwise_primitive(
    "softplus",
    _softplus_impl,
    unary_rule(lambda x, out: unary(sigmoid_p, x)),
    "(({0} if {0} > 0 else 0.0) + M.log1p(M.exp(-abs({0}))))",
)
