"""NumPy's ufuncs on traced values (stage: tracing): `UFUNCS`, each ufunc lowered to primitives
(arithmetic with NumPy's promotion, comparisons, logic, rounding, predicates...).
"""

from __future__ import annotations

import numpy as np

from .. import primitives as P
from ..base.errors import TracingError
from ..ir import Var
from .operands import _o, _src, _v
from .scipy_special import _log_ndtr, _logit, _ndtr, _xlogy


def _unary(prim):
    return lambda x: P.unary(prim, _v(x))


def _cmp(prim):
    return lambda a, b: _compare(prim, _o(a), _o(b))


# how each comparison answers `array OP value` when the Python int `value` lies above every value
# of the array's dtype (below: the answer of the mirrored comparison)
_ABOVE = {"lt": True, "le": True, "gt": False, "ge": False, "eq": False, "ne": True}
_MIRROR = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


def _compare(prim, a, b):
    """A comparison. An integer array against a Python int outside its dtype's range compares the
    exact values, as NumPy 2 does (int8 == 300 is all False, int8 < 300 all True)."""
    for array, number, name in ((a, b, prim.name), (b, a, _MIRROR[prim.name])):
        if not (isinstance(array, Var) and array.dtype.kind in "iu" and _is_int(number)):
            continue
        info = np.iinfo(array.dtype)
        if info.min <= number <= info.max:
            break
        answer = _ABOVE[name] if number > info.max else _ABOVE[_MIRROR[name]]
        return P.const(answer, array.shape, np.bool_)
    return P.compare(prim, a, b)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, (bool, np.generic))


def _logic(prim):
    return lambda *xs: P.logical(prim, *[_o(x) for x in xs])


def _bitwise(prim):
    return lambda *xs: P.bitwise(prim, *[_o(x) for x in xs])


def _logical_xor(a, b):
    return P.compare(P.ne_p, *[P.convert(_v(x), np.bool_) for x in (a, b)])


def _fextremum(pick):
    """np.fmax / np.fmin: like maximum / minimum, but a NaN operand is ignored (the other one is
    the result, and takes the gradient); NaN only where both are NaN."""

    def handler(a, b):
        a, b = _o(a), _o(b)
        out = pick(a, b)
        if not P.is_float(out.dtype):
            return out
        a_nan, b_nan = [P.compare(P.ne_p, x, x) for x in (a, b)]
        return P.where(b_nan, a, P.where(a_nan, b, out))

    return handler


def _reciprocal(x):
    """1 / x; on integers NumPy's integer result: 1 / x truncated (1 at 1, -1 at -1, else 0), and
    at 0 whatever NumPy's integer loop gives on this machine."""
    x = _v(x)
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


def _matmul(a, b):
    """a @ b, with NumPy's error for a 0-d operand (matmul does not broadcast scalars)."""
    a, b = _v(a), _v(b)
    for i, x in enumerate((a, b)):
        if x.ndim == 0:
            raise ValueError(
                f"matmul: Input operand {i} does not have enough dimensions (has 0, gufunc core "
                f"with signature (n?,k),(k,m?)->(n?,m?) requires 1){_src()}; use * to multiply "
                "by a scalar"
            )
    return P.matmul(a, b)


def _neg(x):
    x = _v(x)
    if x.dtype == np.bool_:
        raise TypeError(f"negating a boolean traced value is not supported{_src()}; use ~")
    return P.neg(x)


def _logaddexp(a, b):
    """log(e**a + e**b), smooth: softplus(b) when a is 0 (and the other way round), else
    a + softplus(b - a) or b + softplus(a - b), whichever has the larger base (no overflow). Both
    branches are the same analytic function, so every derivative is exact where a = b."""
    a, b = _o(a), _o(b)
    for zero, other in ((a, b), (b, a)):
        if not isinstance(zero, Var) and zero == 0 and isinstance(other, Var):
            return P.unary(P.softplus_p, other)
    dtype = P.float_dtype(P._result_dtype([a, b]))
    a, b = (P.convert(_v(v), dtype) if isinstance(v, Var) else v for v in (a, b))
    from_a = P.add(a, P.unary(P.softplus_p, _v(P.sub(b, a))))
    from_b = P.add(b, P.unary(P.softplus_p, _v(P.sub(a, b))))
    d = P.sub(a, b)
    # the same infinity twice: b - a is nan, the result is that infinity (as NumPy's)
    same_inf = P.logical(P.and_p, P.compare(P.ne_p, d, d), P.compare(P.eq_p, a, b))
    return P.where(same_inf, a, P.where(P.compare(P.ge_p, a, b), from_a, from_b))


def _square(x):
    x = _v(x)
    if x.dtype == np.bool_:  # NumPy has no boolean loop: it squares int8
        x = P.convert(x, np.int8)
    return P.integer_pow(x, 2)


def _no_bool_loop(name: str, handler):
    """A ufunc NumPy defines on numbers only: a boolean operand fails as NumPy's (the backends
    disagreed: the interpreter raised when it ran, a kernel computed something)."""

    def checked(x):
        x = _v(x)
        if x.dtype == np.bool_:
            raise TypeError(
                f"ufunc '{name}' did not contain a loop with signature matching types "
                f"(bool) -> None{_src()}; convert the booleans first (x.astype(int))"
            )
        return handler(x)

    return checked


def _float_binary(prim):
    """A binary ufunc computed in floats (integers and bools promote to float64, like NumPy's)."""

    def handler(a, b):
        a, b = _o(a), _o(b)
        return P._elementwise(prim, a, b, dtype=P.float_dtype(P._result_dtype([a, b])))

    return handler


def _arith_binary(prim):
    """A binary ufunc in the operands' promoted dtype (integers stay integers)."""

    def handler(a, b):
        a, b = _o(a), _o(b)
        if P._result_dtype([a, b]) == np.bool_:
            raise TypeError(
                f"np.{prim.name} of booleans is not supported{_src()}; convert with .astype(int)"
            )
        return P._elementwise(prim, a, b)

    return handler


def _rounding(prim):
    """floor, ceil, trunc: integers and bools are returned as they are (NumPy 2); rint of an
    integer is a float64, as in NumPy."""

    def handler(x):
        x = _v(x)
        if P.is_float(x.dtype):
            return P.emit(prim, x)
        if prim is not P.rint_p:
            return x
        if x.dtype == np.bool_:
            raise TypeError(
                f"np.rint of booleans is not supported{_src()}; convert with .astype(float)"
            )
        return P.unary(prim, x)

    return handler


def _fmod(a, b):
    """C's remainder (the sign of a). On integers: the floor remainder, moved by b where the
    signs differ (Numba's integer fmod is not NumPy's)."""
    a, b = _o(a), _o(b)
    dtype = P._result_dtype([a, b])
    if dtype == np.bool_:
        raise TypeError(f"np.fmod of booleans is not supported{_src()}; convert with .astype(int)")
    if dtype.kind == "f":
        return P._elementwise(P.fmod_p, a, b)
    a, b = P.convert(_v(a), dtype), P.convert(_v(b), dtype)
    r = P._elementwise(P.mod_p, a, b)
    differ = P.compare(P.ne_p, P.compare(P.lt_p, a, 0), P.compare(P.lt_p, b, 0))
    move = P.logical(P.and_p, P.compare(P.ne_p, r, 0), differ)
    return P.where(move, P.sub(r, b), r)


def _predicate(prim):
    def handler(x):
        x = _v(x)
        if not P.is_float(x.dtype):  # no NaN, no infinity, no sign bit set by a float op
            return P.emit(prim, P.convert(x, np.float64))
        return P.emit(prim, x)

    return handler


def _scaled(factor: float):
    return lambda x: P.mul(P.convert(_v(x), P.float_dtype(_v(x).dtype)), factor)


def _logaddexp2(a, b):
    """log2(2**a + 2**b) = logaddexp(a ln 2, b ln 2) / ln 2 (smooth at every order)."""
    ln2 = float(np.log(2.0))
    a, b = _o(a), _o(b)
    dtype = P.float_dtype(P._result_dtype([a, b]))
    a, b = (P.mul(P.convert(v, dtype), ln2) if isinstance(v, Var) else v * ln2 for v in (a, b))
    return P.div(_logaddexp(a, b), ln2)


def _heaviside(x, h0):
    x, h0 = _o(x), _o(h0)
    dtype = P.float_dtype(P._result_dtype([x, h0]))
    x = P.convert(_v(x), dtype)
    h0 = P.convert(_v(h0), dtype) if isinstance(h0, Var) else h0
    one, zero = P.const(1.0, (), dtype), P.const(0.0, (), dtype)
    step = P.where(P.compare(P.gt_p, x, 0), one, P.where(P.compare(P.lt_p, x, 0), zero, h0))
    return P.where(
        P.emit(P.isnan_p, x), x, P.broadcast_to(step, x.shape) if isinstance(step, Var) else step
    )


def _real_part(x, what: str) -> Var:
    x = _v(x)
    if x.dtype.kind == "c":
        raise TracingError(f"{what}: complex traced values are not supported{_src()}")
    return x


def _imag_part(x) -> Var:
    x = _real_part(x, "np.imag")
    return P.const(0, x.shape, x.dtype)


def _sign(x):
    x = _v(x)
    if x.dtype.kind == "u":  # unsigned: 0 or 1 (the kernel's sign would read the top bit as -)
        return P.convert(P.compare(P.ne_p, x, 0), x.dtype)
    return P.emit(P.sign_p, x)


UFUNCS = {
    "add": lambda a, b: P.add(_o(a), _o(b)),
    "subtract": lambda a, b: P.sub(_o(a), _o(b)),
    "multiply": lambda a, b: P.mul(_o(a), _o(b)),
    "divide": lambda a, b: P.div(_o(a), _o(b)),
    "true_divide": lambda a, b: P.div(_o(a), _o(b)),
    "power": lambda a, b: P.power(_o(a), _o(b)),
    "float_power": lambda a, b: P.power(P.convert(_v(a), np.float64), _o(b)),
    "negative": _neg,
    "positive": _no_bool_loop("positive", lambda x: x),
    "square": _square,
    "reciprocal": _reciprocal,
    "exp": _unary(P.exp_p),
    "exp2": _unary(P.exp2_p),
    "expm1": _unary(P.expm1_p),
    "log": _unary(P.log_p),
    "log2": _unary(P.log2_p),
    "log10": _unary(P.log10_p),
    "log1p": _unary(P.log1p_p),
    "logaddexp": _logaddexp,
    "sqrt": _unary(P.sqrt_p),
    "sin": _unary(P.sin_p),
    "cos": _unary(P.cos_p),
    "tan": _unary(P.tan_p),
    "arcsin": _unary(P.arcsin_p),
    "arccos": _unary(P.arccos_p),
    "arctan": _unary(P.arctan_p),
    "sinh": _unary(P.sinh_p),
    "cosh": _unary(P.cosh_p),
    "tanh": _unary(P.tanh_p),
    "absolute": lambda x: P.emit(P.abs_p, _v(x)),
    "fabs": lambda x: P.emit(P.abs_p, P.convert(_v(x), P.float_dtype(_v(x).dtype))),
    "sign": _no_bool_loop("sign", _sign),
    "maximum": lambda a, b: P.maximum(_o(a), _o(b)),
    "minimum": lambda a, b: P.minimum(_o(a), _o(b)),
    "fmax": _fextremum(P.maximum),
    "fmin": _fextremum(P.minimum),
    "less": _cmp(P.lt_p),
    "less_equal": _cmp(P.le_p),
    "greater": _cmp(P.gt_p),
    "greater_equal": _cmp(P.ge_p),
    "equal": _cmp(P.eq_p),
    "not_equal": _cmp(P.ne_p),
    "logical_and": _logic(P.and_p),
    "logical_or": _logic(P.or_p),
    "logical_not": _logic(P.not_p),
    "logical_xor": _logical_xor,
    "bitwise_and": _bitwise(P.bitwise_and_p),
    "bitwise_or": _bitwise(P.bitwise_or_p),
    "bitwise_xor": _bitwise(P.bitwise_xor_p),
    "invert": _bitwise(P.invert_p),
    "matmul": _matmul,
    "arcsinh": _unary(P.arcsinh_p),
    "arccosh": _unary(P.arccosh_p),
    "arctanh": _unary(P.arctanh_p),
    "cbrt": _unary(P.cbrt_p),
    "arctan2": _float_binary(P.arctan2_p),
    "hypot": _float_binary(P.hypot_p),
    "copysign": _float_binary(P.copysign_p),
    "floor": _rounding(P.floor_p),
    "ceil": _rounding(P.ceil_p),
    "trunc": _rounding(P.trunc_p),
    "rint": _rounding(P.rint_p),
    "floor_divide": _arith_binary(P.floor_divide_p),
    "remainder": _arith_binary(P.mod_p),
    "mod": _arith_binary(P.mod_p),
    "fmod": _fmod,
    "isfinite": _predicate(P.isfinite_p),
    "isnan": _predicate(P.isnan_p),
    "isinf": _predicate(P.isinf_p),
    "signbit": _predicate(P.signbit_p),
    "deg2rad": _scaled(np.pi / 180),
    "radians": _scaled(np.pi / 180),
    "rad2deg": _scaled(180 / np.pi),
    "degrees": _scaled(180 / np.pi),
    "logaddexp2": _logaddexp2,
    "heaviside": _heaviside,
    "divmod": lambda a, b: (_arith_binary(P.floor_divide_p)(a, b), _arith_binary(P.mod_p)(a, b)),
    # scipy.special
    "expit": lambda x: P.unary(P.sigmoid_p, _v(x)),
    "logit": _logit,
    "erf": _unary(P.erf_p),
    "erfc": _unary(P.erfc_p),
    "ndtr": _ndtr,
    "log_ndtr": _log_ndtr,
    "xlogy": _xlogy(P.log_p),
    "xlog1py": _xlogy(P.log1p_p),
    "gammaln": _unary(P.gammaln_p),
    "psi": lambda x: P.digamma(_v(x)),  # scipy.special.digamma's ufunc is named psi
    "conjugate": lambda x: _real_part(x, "np.conjugate"),  # real values: themselves
}
