"""Elementwise entries of the table (stage: primitives) that are piecewise constant or linear, or
logical: rounding, floor division and remainders, float tests, abs and sign, selection, dtype
conversion, comparisons, logical and bitwise operations.
"""

from __future__ import annotations

import numpy as np

from .. import ir
from ..base.errors import at
from ..ir import Var
from .elementwise import elementwise_primitive
from .facets import Algebra, Primitive, registered
from .ops import (
    compare,
    conj,
    infer_real,
    Operand,
    apply_elementwise,
    prepare_operands,
    result_dtype,
    infer_same_bool,
    convert,
    ct_mul,
    div,
    emit,
    is_float,
    neg,
    where,
)


def _convert_scalar(args, params):
    dtype = np.dtype(params["dtype"])
    if dtype == np.bool_:
        return f"({args[0]} != 0)"
    return f"np.{dtype.name}({args[0]})"


def _convert_rule(ct, out, x, dtype):
    return (convert(ct, x.dtype) if is_float(x.dtype) else None,)


# ---- Rounding, NumPy's floor division and remainders: piecewise constant or linear. Rounding has
# a zero derivative (as JAX and PyTorch give); a - (a // b) b has slopes 1 and -(a // b).
floor_p = elementwise_primitive(
    "floor", np.floor, lambda ct, out, x: (None,), "np.floor({0})", differentiable=False
)
ceil_p = elementwise_primitive(
    "ceil", np.ceil, lambda ct, out, x: (None,), "np.ceil({0})", differentiable=False
)
trunc_p = elementwise_primitive(
    "trunc", np.trunc, lambda ct, out, x: (None,), "np.trunc({0})", differentiable=False
)
rint_p = elementwise_primitive(
    "rint", np.rint, lambda ct, out, x: (None,), "np.rint({0})", differentiable=False
)
# The smallest integer divided by -1 overflows: NumPy wraps it to itself (with a warning), where
# the compiled division gave 0. That one case is the integer a < 0 whose negation is < 0 too
# (it wraps); no float passes that test, so floats divide as before.
floor_divide_p = elementwise_primitive(
    "floor_divide",
    np.floor_divide,
    None,
    "({0} if ({1} == -1) & ({0} < 0) & (-{0} < 0) else {0} // {1})",
    differentiable=False,
)
mod_p = elementwise_primitive(
    "mod",
    np.mod,
    lambda ct, out, a, b: (ct, ct_mul(ct, neg(emit(floor_divide_p, a, b)))),
    "({0} % {1})",
    domain=(0.5, 2.0),
)
fmod_p = elementwise_primitive(
    "fmod",
    np.fmod,
    lambda ct, out, a, b: (ct, ct_mul(ct, neg(emit(trunc_p, div(a, b))))),
    "np.fmod({0}, {1})",
    domain=(0.5, 2.0),
)
isfinite_p = elementwise_primitive(
    "isfinite",
    np.isfinite,
    scalar="np.isfinite({0})",
    infer=infer_same_bool,
    differentiable=False,
    complex_operands=True,
)
isnan_p = elementwise_primitive(
    "isnan",
    np.isnan,
    scalar="np.isnan({0})",
    infer=infer_same_bool,
    differentiable=False,
    complex_operands=True,
)
isinf_p = elementwise_primitive(
    "isinf",
    np.isinf,
    scalar="np.isinf({0})",
    infer=infer_same_bool,
    differentiable=False,
    complex_operands=True,
)
signbit_p = elementwise_primitive(
    "signbit", np.signbit, scalar="np.signbit({0})", infer=infer_same_bool, differentiable=False
)


def _abs_rule(ct, out, x):
    if x.dtype.kind != "c":
        return (ct_mul(ct, emit(sign_p, x)),)
    # |z|' pairs with a tangent t as Re(conj(z) t) / |z|: the cotangent is ct conj(z) / |z|
    # (docs/complex.md), 0 at z = 0 as the real rule's sign(0) is
    slope = where(compare(registered("eq"), out, 0.0), 0.0, div(conj(x), out))
    return (ct_mul(ct, slope),)


abs_p = elementwise_primitive(
    "abs", np.abs, _abs_rule, "abs({0})", infer=infer_real, complex_operands=True
)
sign_p = elementwise_primitive("sign", np.sign, lambda ct, out, x: (None,), "np.sign({0})")

where_p = elementwise_primitive(
    "where",
    np.where,
    lambda ct, out, c, a, b: (None, where(c, ct, 0.0), where(c, 0.0, ct)),
    "({1} if {0} else {2})",
    # a known condition picks its operand
    algebra=Algebra(
        rewrite=lambda node, fills, producers: (
            None if fills[0] is None else node.inputs[1 if bool(fills[0]) else 2]
        )
    ),
    complex_operands=True,
)
convert_p = elementwise_primitive(
    "convert",
    lambda x, dtype: x.astype(dtype),
    _convert_rule,
    _convert_scalar,
    infer=lambda shapes, dtypes, p: (shapes[0], np.dtype(p["dtype"])),
    linear=True,
    complex_operands=True,
)

# named: a value under a user's name (the cotangent at a tg.tap). It computes nothing; it exists so
# that the name reaches the printed graph and the generated kernels, where the value is an output.
named_p = elementwise_primitive(
    "named",
    lambda x, name: x,
    lambda ct, out, x, name: (ct,),
    "{0}",
    linear=True,
    complex_operands=True,
)

lt_p = elementwise_primitive(
    "lt", np.less, scalar="({0} < {1})", infer=infer_same_bool, differentiable=False
)
le_p = elementwise_primitive(
    "le", np.less_equal, scalar="({0} <= {1})", infer=infer_same_bool, differentiable=False
)
gt_p = elementwise_primitive(
    "gt", np.greater, scalar="({0} > {1})", infer=infer_same_bool, differentiable=False
)
ge_p = elementwise_primitive(
    "ge", np.greater_equal, scalar="({0} >= {1})", infer=infer_same_bool, differentiable=False
)
eq_p = elementwise_primitive(
    "eq",
    np.equal,
    scalar="({0} == {1})",
    infer=infer_same_bool,
    differentiable=False,
    complex_operands=True,
)
ne_p = elementwise_primitive(
    "ne",
    np.not_equal,
    scalar="({0} != {1})",
    infer=infer_same_bool,
    differentiable=False,
    complex_operands=True,
)
and_p = elementwise_primitive(
    "and",
    np.logical_and,
    scalar="({0} and {1})",
    infer=infer_same_bool,
    differentiable=False,
    operands="bool",
)
or_p = elementwise_primitive(
    "or",
    np.logical_or,
    scalar="({0} or {1})",
    infer=infer_same_bool,
    differentiable=False,
    operands="bool",
)
not_p = elementwise_primitive(
    "not",
    np.logical_not,
    scalar="(not {0})",
    infer=infer_same_bool,
    differentiable=False,
    operands="bool",
)

# Bitwise operations on integers (& | ^ ~ and np.bitwise_*): the result keeps the operands' dtype.
# On bools NumPy's bitwise ops are the logical ones; the op constructors route bools to and/or/not.
bitwise_and_p = elementwise_primitive(
    "bitwise_and", np.bitwise_and, scalar="({0} & {1})", differentiable=False, operands="integer"
)
bitwise_or_p = elementwise_primitive(
    "bitwise_or", np.bitwise_or, scalar="({0} | {1})", differentiable=False, operands="integer"
)
bitwise_xor_p = elementwise_primitive(
    "bitwise_xor", np.bitwise_xor, scalar="({0} ^ {1})", differentiable=False, operands="integer"
)
invert_p = elementwise_primitive(
    "invert", np.invert, scalar="(~{0})", differentiable=False, operands="integer"
)

# the same operation on bools: NumPy's bitwise ops are the logical ones there
_ON_BOOLS = {bitwise_and_p: and_p, bitwise_or_p: or_p, bitwise_xor_p: ne_p, invert_p: not_p}


def bitwise(prim: Primitive, *operands: Operand) -> Var:
    """NumPy's bitwise ufunc `prim` (and, or, xor, invert) on integers, its logical twin on bools."""
    dtype = result_dtype(operands)
    if dtype == np.bool_:
        return emit(_ON_BOOLS[prim], *prepare_operands(operands, prim.name, np.bool_))
    if dtype.kind not in "iu":
        raise TypeError(
            f"np.{prim.name} is defined on integers and bools, not on {dtype}"
            f"{at(ir.current_source())}; compare first (x > 0) or convert with .astype(np.int64)"
        )
    return apply_elementwise(prim, *operands, dtype=dtype)
