"""NumPy's ufuncs on traced values (stage: tracing), each lowered to primitives and registered in
the dispatch registry's `UFUNCS`: arithmetic with NumPy's promotion, comparisons, logic, rounding,
predicates..., scipy.special's expit, erf, erfc, gammaln and psi; and np.real, np.imag, np.angle,
np.fix.
"""

from __future__ import annotations

import numpy as np

from .. import primitives as P
from ..base.errors import TracingError
from ..ir import Var
from ..tracing.dispatch import implements, implements_ufunc, register, register_ufunc
from ..tracing.source import at_source
from .operands import as_operand, as_var


def unary_ufunc(prim):
    return lambda x: P.unary(prim, as_var(x))


def comparison(prim):
    return lambda a, b: _compare(prim, as_operand(a), as_operand(b))


# how each comparison answers `array OP value` when the Python int `value` lies above every value
# of the array's dtype (below: the answer of the mirrored comparison)
_ABOVE = {"lt": True, "le": True, "gt": False, "ge": False, "eq": False, "ne": True}
_MIRROR = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


def _compare(prim, a, b):
    """A comparison. An integer array against a Python int outside its dtype's range compares the
    exact values, as NumPy 2 does (int8 == 300 is all False, int8 < 300 all True)."""
    for array, number, name in ((a, b, prim.name), (b, a, _MIRROR[prim.name])):
        if not (isinstance(array, Var) and array.dtype.kind in "iu" and is_python_int(number)):
            continue
        info = np.iinfo(array.dtype)
        if info.min <= number <= info.max:
            break
        answer = _ABOVE[name] if number > info.max else _ABOVE[_MIRROR[name]]
        return P.const(answer, array.shape, np.bool_)
    return P.compare(prim, a, b)


def is_python_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, (bool, np.generic))


def logical(prim):
    return lambda *xs: P.logical(prim, *[as_operand(x) for x in xs])


def bitwise(prim):
    return lambda *xs: P.bitwise(prim, *[as_operand(x) for x in xs])


@implements_ufunc("logical_xor")
def logical_xor(a, b):
    return P.compare(P.ne_p, *[P.convert(as_var(x), np.bool_) for x in (a, b)])


def fextremum(pick):
    """np.fmax / np.fmin: like maximum / minimum, but a NaN operand is ignored (the other one is
    the result, and takes the gradient); NaN only where both are NaN."""

    def handler(a, b):
        a, b = as_operand(a), as_operand(b)
        out = pick(a, b)
        if not P.is_float(out.dtype):
            return out
        a_nan, b_nan = [P.compare(P.ne_p, x, x) for x in (a, b)]
        return P.where(b_nan, a, P.where(a_nan, b, out))

    return handler


@implements_ufunc("reciprocal")
def reciprocal(x):
    """1 / x; on integers NumPy's integer result: 1 / x truncated (1 at 1, -1 at -1, else 0), and
    at 0 whatever NumPy's integer loop gives on this machine."""
    x = as_var(x)
    if P.is_float(x.dtype):
        return P.reciprocal(x)
    with np.errstate(all="ignore"):
        at_zero = np.reciprocal(np.zeros((), x.dtype))
    dtype = at_zero.dtype
    x = P.convert(x, dtype)
    out = P.where(P.compare(P.eq_p, x, 0), P.const(at_zero, x.shape), P.const(0, x.shape, dtype))
    out = P.where(P.compare(P.eq_p, x, 1), P.const(1, x.shape, dtype), out)
    if dtype.kind == "i":
        out = P.where(P.compare(P.eq_p, x, -1), P.const(-1, x.shape, dtype), out)
    return out


@implements_ufunc("matmul")
def matmul(a, b):
    """a @ b, with NumPy's error for a 0-d operand (matmul does not broadcast scalars)."""
    a, b = as_var(a), as_var(b)
    for i, x in enumerate((a, b)):
        if x.ndim == 0:
            raise ValueError(
                f"matmul: Input operand {i} does not have enough dimensions (has 0, gufunc core "
                f"with signature (n?,k),(k,m?)->(n?,m?) requires 1){at_source()}; use * to multiply "
                "by a scalar"
            )
    return P.matmul(a, b)


@implements_ufunc("negative")
def negative(x):
    x = as_var(x)
    if x.dtype == np.bool_:
        raise TypeError(f"negating a boolean traced value is not supported{at_source()}; use ~")
    return P.neg(x)


@implements_ufunc("logaddexp")
def logaddexp(a, b):
    """log(e**a + e**b), smooth: softplus(b) when a is 0 (and the other way round), else
    a + softplus(b - a) or b + softplus(a - b), whichever has the larger base (no overflow). Both
    branches are the same analytic function, so every derivative is exact where a = b."""
    a, b = as_operand(a), as_operand(b)
    for zero, other in ((a, b), (b, a)):
        if not isinstance(zero, Var) and zero == 0 and isinstance(other, Var):
            return P.unary(P.softplus_p, other)
    dtype = P.float_dtype(P.result_dtype([a, b]))
    a, b = (P.convert(as_var(v), dtype) if isinstance(v, Var) else v for v in (a, b))
    from_a = P.add(a, P.unary(P.softplus_p, as_var(P.sub(b, a))))
    from_b = P.add(b, P.unary(P.softplus_p, as_var(P.sub(a, b))))
    d = P.sub(a, b)
    # the same infinity twice: b - a is nan, the result is that infinity (as NumPy's)
    same_inf = P.logical(P.and_p, P.compare(P.ne_p, d, d), P.compare(P.eq_p, a, b))
    return P.where(same_inf, a, P.where(P.compare(P.ge_p, a, b), from_a, from_b))


@implements_ufunc("square")
def square(x):
    x = as_var(x)
    if x.dtype == np.bool_:  # NumPy has no boolean loop: it squares int8
        x = P.convert(x, np.int8)
    return P.integer_pow(x, 2)


def without_bool_loop(name: str, handler):
    """A ufunc NumPy defines on numbers only: a boolean operand fails as NumPy's (the backends
    disagreed: the interpreter raised when it ran, a kernel computed something)."""

    def checked(x):
        x = as_var(x)
        if x.dtype == np.bool_:
            raise TypeError(
                f"ufunc '{name}' did not contain a loop with signature matching types "
                f"(bool) -> None{at_source()}; convert the booleans first (x.astype(int))"
            )
        return handler(x)

    return checked


def float_binary(prim):
    """A binary ufunc computed in floats (integers and bools promote to float64, like NumPy's)."""

    def handler(a, b):
        a, b = as_operand(a), as_operand(b)
        return P.apply_elementwise(prim, a, b, dtype=P.float_dtype(P.result_dtype([a, b])))

    return handler


def arith_binary(prim):
    """A binary ufunc in the operands' promoted dtype (integers stay integers)."""

    def handler(a, b):
        a, b = as_operand(a), as_operand(b)
        if P.result_dtype([a, b]) == np.bool_:
            raise TypeError(
                f"np.{prim.name} of booleans is not supported{at_source()}; convert with .astype(int)"
            )
        return P.apply_elementwise(prim, a, b)

    return handler


def rounding(prim):
    """floor, ceil, trunc: integers and bools are returned as they are (NumPy 2); rint of an
    integer is a float64, as in NumPy."""

    def handler(x):
        x = as_var(x)
        if P.is_float(x.dtype):
            return P.emit(prim, x)
        if prim is not P.rint_p:
            return x
        if x.dtype == np.bool_:
            raise TypeError(
                f"np.rint of booleans is not supported{at_source()}; convert with .astype(float)"
            )
        return P.unary(prim, x)

    return handler


@implements_ufunc("fmod")
def fmod(a, b):
    """C's remainder (the sign of a). On integers: the floor remainder, moved by b where the
    signs differ (Numba's integer fmod is not NumPy's)."""
    a, b = as_operand(a), as_operand(b)
    dtype = P.result_dtype([a, b])
    if dtype == np.bool_:
        raise TypeError(
            f"np.fmod of booleans is not supported{at_source()}; convert with .astype(int)"
        )
    if dtype.kind == "f":
        return P.apply_elementwise(P.fmod_p, a, b)
    a, b = P.convert(as_var(a), dtype), P.convert(as_var(b), dtype)
    r = P.apply_elementwise(P.mod_p, a, b)
    differ = P.compare(P.ne_p, P.compare(P.lt_p, a, 0), P.compare(P.lt_p, b, 0))
    move = P.logical(P.and_p, P.compare(P.ne_p, r, 0), differ)
    return P.where(move, P.sub(r, b), r)


def predicate(prim):
    def handler(x):
        x = as_var(x)
        if not P.is_float(x.dtype):  # no NaN, no infinity, no sign bit set by a float op
            return P.emit(prim, P.convert(x, np.float64))
        return P.emit(prim, x)

    return handler


def scaled(factor: float):
    return lambda x: P.mul(P.convert(as_var(x), P.float_dtype(as_var(x).dtype)), factor)


@implements_ufunc("logaddexp2")
def logaddexp2(a, b):
    """log2(2**a + 2**b) = logaddexp(a ln 2, b ln 2) / ln 2 (smooth at every order)."""
    ln2 = float(np.log(2.0))
    a, b = as_operand(a), as_operand(b)
    dtype = P.float_dtype(P.result_dtype([a, b]))
    a, b = (P.mul(P.convert(v, dtype), ln2) if isinstance(v, Var) else v * ln2 for v in (a, b))
    return P.div(logaddexp(a, b), ln2)


@implements_ufunc("heaviside")
def heaviside(x, h0):
    x, h0 = as_operand(x), as_operand(h0)
    dtype = P.float_dtype(P.result_dtype([x, h0]))
    x = P.convert(as_var(x), dtype)
    h0 = P.convert(as_var(h0), dtype) if isinstance(h0, Var) else h0
    one, zero = P.const(1.0, (), dtype), P.const(0.0, (), dtype)
    step = P.where(P.compare(P.gt_p, x, 0), one, P.where(P.compare(P.lt_p, x, 0), zero, h0))
    return P.where(
        P.emit(P.isnan_p, x), x, P.broadcast_to(step, x.shape) if isinstance(step, Var) else step
    )


def real_part(x) -> Var:
    """np.real: the real part (a real value itself)."""
    return P.real(as_var(x))


def imag_part(x) -> Var:
    """np.imag: the imaginary part (zeros for a real value)."""
    return P.imag(as_var(x))


def angle(z, deg=False) -> Var:
    """np.angle: arctan2(imag, real), in degrees with `deg`."""
    z = as_var(z)
    if z.dtype.kind != "c":
        z = P.convert(z, P.float_dtype(z.dtype))
    a = P.apply_elementwise(P.arctan2_p, P.imag(z), P.real(z))
    return P.mul(a, 180 / np.pi) if deg else a


def sign(x):
    x = as_var(x)
    if x.dtype.kind == "u":  # unsigned: 0 or 1 (the kernel's sign would read the top bit as -)
        return P.convert(P.compare(P.ne_p, x, 0), x.dtype)
    if x.dtype.kind == "c":  # NumPy 2: z / |z|, and 0 at 0
        size = P.emit(P.abs_p, x)
        return P.where(P.compare(P.eq_p, size, 0.0), 0.0, P.div(x, size))
    return P.emit(P.sign_p, x)


register_ufunc("add", lambda a, b: P.add(as_operand(a), as_operand(b)))
register_ufunc("subtract", lambda a, b: P.sub(as_operand(a), as_operand(b)))
register_ufunc("multiply", lambda a, b: P.mul(as_operand(a), as_operand(b)))
register_ufunc("divide", lambda a, b: P.div(as_operand(a), as_operand(b)))
register_ufunc("true_divide", lambda a, b: P.div(as_operand(a), as_operand(b)))
register_ufunc("power", lambda a, b: P.power(as_operand(a), as_operand(b)))
register_ufunc("float_power", lambda a, b: P.power(P.convert(as_var(a), np.float64), as_operand(b)))
register_ufunc("positive", without_bool_loop("positive", lambda x: x))
register_ufunc("exp", unary_ufunc(P.exp_p))
register_ufunc("exp2", unary_ufunc(P.exp2_p))
register_ufunc("expm1", unary_ufunc(P.expm1_p))
register_ufunc("log", unary_ufunc(P.log_p))
register_ufunc("log2", unary_ufunc(P.log2_p))
register_ufunc("log10", unary_ufunc(P.log10_p))
register_ufunc("log1p", unary_ufunc(P.log1p_p))
register_ufunc("sqrt", unary_ufunc(P.sqrt_p))
register_ufunc("sin", unary_ufunc(P.sin_p))
register_ufunc("cos", unary_ufunc(P.cos_p))
register_ufunc("tan", unary_ufunc(P.tan_p))
register_ufunc("arcsin", unary_ufunc(P.arcsin_p))
register_ufunc("arccos", unary_ufunc(P.arccos_p))
register_ufunc("arctan", unary_ufunc(P.arctan_p))
register_ufunc("sinh", unary_ufunc(P.sinh_p))
register_ufunc("cosh", unary_ufunc(P.cosh_p))
register_ufunc("tanh", unary_ufunc(P.tanh_p))
register_ufunc("absolute", lambda x: P.emit(P.abs_p, as_var(x)))
register_ufunc(
    "fabs", lambda x: P.emit(P.abs_p, P.convert(as_var(x), P.float_dtype(as_var(x).dtype)))
)
register_ufunc("sign", without_bool_loop("sign", sign))
register_ufunc("maximum", lambda a, b: P.maximum(as_operand(a), as_operand(b)))
register_ufunc("minimum", lambda a, b: P.minimum(as_operand(a), as_operand(b)))
register_ufunc("fmax", fextremum(P.maximum))
register_ufunc("fmin", fextremum(P.minimum))
register_ufunc("less", comparison(P.lt_p))
register_ufunc("less_equal", comparison(P.le_p))
register_ufunc("greater", comparison(P.gt_p))
register_ufunc("greater_equal", comparison(P.ge_p))
register_ufunc("equal", comparison(P.eq_p))
register_ufunc("not_equal", comparison(P.ne_p))
register_ufunc("logical_and", logical(P.and_p))
register_ufunc("logical_or", logical(P.or_p))
register_ufunc("logical_not", logical(P.not_p))
register_ufunc("bitwise_and", bitwise(P.bitwise_and_p))
register_ufunc("bitwise_or", bitwise(P.bitwise_or_p))
register_ufunc("bitwise_xor", bitwise(P.bitwise_xor_p))
register_ufunc("invert", bitwise(P.invert_p))
register_ufunc("arcsinh", unary_ufunc(P.arcsinh_p))
register_ufunc("arccosh", unary_ufunc(P.arccosh_p))
register_ufunc("arctanh", unary_ufunc(P.arctanh_p))
register_ufunc("cbrt", unary_ufunc(P.cbrt_p))
register_ufunc("arctan2", float_binary(P.arctan2_p))
register_ufunc("hypot", float_binary(P.hypot_p))
register_ufunc("copysign", float_binary(P.copysign_p))
register_ufunc("floor", rounding(P.floor_p))
register_ufunc("ceil", rounding(P.ceil_p))
register_ufunc("trunc", rounding(P.trunc_p))
register_ufunc("rint", rounding(P.rint_p))
register_ufunc("floor_divide", arith_binary(P.floor_divide_p))
register_ufunc("remainder", arith_binary(P.mod_p))
register_ufunc("mod", arith_binary(P.mod_p))
register_ufunc("isfinite", predicate(P.isfinite_p))
register_ufunc("isnan", predicate(P.isnan_p))
register_ufunc("isinf", predicate(P.isinf_p))
register_ufunc("signbit", predicate(P.signbit_p))
register_ufunc("deg2rad", scaled(np.pi / 180))
register_ufunc("radians", scaled(np.pi / 180))
register_ufunc("rad2deg", scaled(180 / np.pi))
register_ufunc("degrees", scaled(180 / np.pi))
register_ufunc(
    "divmod", lambda a, b: (arith_binary(P.floor_divide_p)(a, b), arith_binary(P.mod_p)(a, b))
)
# scipy.special (its other ufuncs: scipy_special.py)
register_ufunc("expit", lambda x: P.unary(P.sigmoid_p, as_var(x)))
register_ufunc("erf", unary_ufunc(P.erf_p))
register_ufunc("erfc", unary_ufunc(P.erfc_p))
register_ufunc("gammaln", unary_ufunc(P.gammaln_p))
register_ufunc("psi", lambda x: P.digamma(as_var(x)))  # scipy.special.digamma's ufunc is named psi
register_ufunc("conjugate", lambda x: P.conj(as_var(x)))  # real values: themselves

# NumPy's functions of the same family (not ufuncs: NumPy dispatches them as functions)
register("real", real_part)
register("imag", imag_part)
register("angle", angle)
# the dtype's answers (known while tracing), and the values' (NumPy's: a nonzero imaginary part)
register("iscomplexobj", lambda x: P.is_complex(as_var(x).dtype))
register("isrealobj", lambda x: not P.is_complex(as_var(x).dtype))
register("iscomplex", lambda x: P.compare(P.ne_p, P.imag(as_var(x)), 0))
register("isreal", lambda x: P.compare(P.eq_p, P.imag(as_var(x)), 0))


@implements("real_if_close")
def real_if_close(a, tol=100):
    """A real value is itself; a complex one would have a dtype chosen by its values."""
    a = as_var(a)
    if P.is_complex(a.dtype):
        raise TracingError(
            f"np.real_if_close of a complex traced value{at_source()}: its result's dtype "
            "depends on the values, which are not known while tracing; use np.real(z) where "
            "the imaginary part is known to be negligible"
        )
    return a


register("fix", lambda x, out=None: rounding(P.trunc_p)(x))
