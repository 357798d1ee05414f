"""NumPy's functions on traced values: each supported ufunc and function, lowered to primitives.

Handlers receive IR values (`Var`) for tracers and arrays at the top level, Python scalars as they
are, and anything nested (lists of arrays) raw; `as_operand`/`as_var` convert the rest.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import ir
from . import primitives as P
from .errors import ShapeError, TracingError, at
from .ir import Var


def _src() -> str:
    return at(ir.current_source())


def _v(x: Any) -> Var:
    """An IR value: tracers arrive as values already; numbers and arrays become constants."""
    if isinstance(x, Var):
        return x
    if isinstance(x, np.ndarray):
        return _array_operand(x)
    return P.const(_array(x))


def _o(x: Any):
    """An operand: a value, or a Python number kept weakly typed for NumPy's promotion."""
    if isinstance(x, Var) or (isinstance(x, (bool, int, float)) and not isinstance(x, np.generic)):
        return x
    if isinstance(x, np.ndarray):
        return _array_operand(x)
    return P.const(_array(x))


def _array_operand(x: np.ndarray) -> Var:
    """A NumPy array used as an operand: a hidden input of the program when the traced function
    read it from outside its arguments (a global, a closure: see tracing/scope.py), else a constant."""
    from .trace import operand  # trace imports this module: looked up when first needed

    return operand(x, ir.current_builder())


def _array(x: Any) -> np.ndarray:
    arr = np.asarray(x)
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise TypeError(f"cannot use a value of dtype {arr.dtype} in a traced computation{_src()}")
    return arr


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
    return P.integer_pow(x, 2)


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


# ---- scipy.special's ufuncs (NumPy dispatches them to tracers like its own)

_SQRT_HALF = float(np.sqrt(0.5))


def _float(x) -> Var:
    x = _v(x)
    return P.convert(x, P.float_dtype(x.dtype))


def _logit(p):
    p = _float(p)
    return P.sub(P.unary(P.log_p, p), P.unary(P.log1p_p, P.neg(p)))


def _ndtr(x):
    """The standard normal CDF: erfc(-x / sqrt 2) / 2 (accurate in both tails' shapes)."""
    return P.mul(P.unary(P.erfc_p, P.mul(P.neg(_float(x)), _SQRT_HALF)), 0.5)


def _log_ndtr(x):
    """log of the normal CDF: log(ndtr(x)) where that is accurate, log1p(-ndtr(-x)) for x > 0,
    and the asymptotic series for x < -20 (-10 in float32), where ndtr underflows."""
    x = _float(x)
    # where ndtr would underflow (float32 sooner) the series takes over
    far = P.compare(P.lt_p, x, -20.0 if x.dtype == np.float64 else -10.0)
    pos = P.compare(P.gt_p, x, 0.0)
    xs = P.where(far, -1.0, x)  # the other branches never see the far tail
    direct = P.unary(P.log_p, _ndtr(P.where(pos, 0.0, xs)))
    upper = P.unary(P.log1p_p, P.neg(_ndtr(P.neg(P.where(pos, xs, 1.0)))))
    xf = P.where(far, x, -30.0)
    u = P.div(1.0, P.mul(xf, xf))
    # 1 - u + 3u^2 - 15u^3 + ... (the terms (-1)^k (2k-1)!! u^k; at x = -20 the ninth is 1e-15)
    coefficients = [(-1) ** k * float(np.prod(np.arange(1, 2 * k, 2))) for k in range(1, 9)]
    series = P.const(coefficients[-1], xf.shape, xf.dtype)
    for c in reversed(coefficients[:-1]):  # Horner: c1 + u (c2 + u (... + u c8))
        series = P.add(P.mul(series, u), c)
    series = P.add(P.mul(series, u), 1.0)
    asymptotic = P.sub(
        P.sub(P.mul(P.mul(xf, xf), -0.5), P.unary(P.log_p, P.neg(xf))),
        0.5 * float(np.log(2 * np.pi)),
    )
    asymptotic = P.add(asymptotic, P.unary(P.log_p, series))
    return P.where(far, asymptotic, P.where(pos, upper, direct))


def _xlogy(log_prim):
    """x * log(y) (or log1p(y)), 0 where x == 0 whatever y is (as SciPy's)."""

    def handler(x, y):
        x, y = _o(x), _o(y)
        dtype = P.float_dtype(P._result_dtype([x, y]))
        x = P.convert(_v(x), dtype)
        y = P.convert(_v(y), dtype)
        shape = np.broadcast_shapes(x.shape, y.shape)
        x, y = (
            P.broadcast_to(P.reshape(v, (1,) * (len(shape) - v.ndim) + v.shape), shape)
            for v in (x, y)
        )
        zero = P.compare(P.eq_p, x, 0)
        safe = P.where(zero, 1.0 if log_prim is P.log_p else 0.0, y)
        return P.where(zero, 0.0, P.mul(x, P.unary(log_prim, safe)))

    return handler


UFUNCS = {
    "add": lambda a, b: P.add(_o(a), _o(b)),
    "subtract": lambda a, b: P.sub(_o(a), _o(b)),
    "multiply": lambda a, b: P.mul(_o(a), _o(b)),
    "divide": lambda a, b: P.div(_o(a), _o(b)),
    "true_divide": lambda a, b: P.div(_o(a), _o(b)),
    "power": lambda a, b: P.power(_o(a), _o(b)),
    "float_power": lambda a, b: P.power(P.convert(_v(a), np.float64), _o(b)),
    "negative": _neg,
    "positive": lambda x: _v(x),
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
    "sign": lambda x: P.emit(P.sign_p, _v(x)),
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


def _real_part(x, what: str) -> Var:
    x = _v(x)
    if x.dtype.kind == "c":
        raise TracingError(f"{what}: complex traced values are not supported{_src()}")
    return x


def _imag_part(x) -> Var:
    x = _real_part(x, "np.imag")
    return P.const(0, x.shape, x.dtype)


def _round(a, decimals=0, out=None):
    """np.round / np.around: half to even, at `decimals` places (rint(x * 10**d) / 10**d, as
    NumPy computes it); integers are returned unchanged for decimals >= 0."""
    if out is not None:
        raise TracingError(f"np.round(..., out=...) is not supported on traced values{_src()}")
    x = _v(a)
    if x.dtype == np.bool_:
        raise TypeError(
            f"np.round of booleans is not supported{_src()}; convert with .astype(float)"
        )
    if not P.is_float(x.dtype):
        if decimals >= 0:
            return x
        # NumPy rounds integers to tens, hundreds, ... through float64, half to even
        scale = 10.0**-decimals
        y = P.mul(P.unary(P.rint_p, P.div(P.convert(x, np.float64), scale)), scale)
        return P.convert(y, x.dtype)
    if decimals == 0:
        return P.unary(P.rint_p, x)
    scale = 10.0**decimals
    if decimals > 0:
        return P.div(P.unary(P.rint_p, P.mul(x, scale)), scale)
    scale = 10.0**-decimals
    return P.mul(P.unary(P.rint_p, P.div(x, scale)), scale)


def _nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    x = _v(x)
    if not P.is_float(x.dtype):
        return x
    info = np.finfo(x.dtype)
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    out = P.where(P.emit(P.isnan_p, x), nan, x)
    out = P.where(P.compare(P.eq_p, x, np.inf), posinf, out)
    return P.where(P.compare(P.eq_p, x, -np.inf), neginf, out)


def _sinc(x):
    """sin(pi x) / (pi x), 1 at 0. Near 0 a Taylor polynomial (exact to rounding for |pi x| <
    1e-3), so that every derivative at 0 is the true one (sinc''(0) = -pi^2 / 3), not 0."""
    x = _v(x)
    x = P.convert(x, P.float_dtype(x.dtype))
    t = P.mul(x, np.pi)
    small = P.compare(P.lt_p, P.emit(P.abs_p, t), 1e-3)
    safe = P.where(small, 1.0, t)  # the far branch never divides by 0, so its gradient is finite
    far = P.div(P.unary(P.sin_p, safe), safe)
    t2 = P.mul(t, t)
    near = P.add(P.sub(1.0, P.div(t2, 6.0)), P.div(P.mul(t2, t2), 120.0))
    return P.where(small, near, far)


# ----------------------------------------------------------------------------------------------
# Reductions


def _no_extra(name: str, kwargs: dict, allowed=()):
    extra = [k for k, v in kwargs.items() if k not in allowed and v is not None and k != "out"]
    if kwargs.get("out") is not None:
        extra.append("out")
    if extra:
        raise TracingError(
            f"np.{name}: argument(s) {extra} are not supported on traced values{_src()}"
        )


def _reduction(prim, name):
    def handler(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
        _no_extra(name, {**kwargs, "out": out})
        x = _v(a)
        if dtype is not None:
            x = P.convert(x, dtype)
        if x.ndim == 0 and isinstance(axis, (int, np.integer)) and axis in (0, -1):
            axis = ()  # NumPy's reduce takes axis 0 or -1 of a 0-d value as no axis
        return P.reduce(prim, x, axis, keepdims)

    return handler


def _mean(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    _no_extra("mean", {**kwargs, "out": out})
    x = _v(a)
    if dtype is None:
        dtype = P.float_dtype(x.dtype)
    axes = P.normalize_axes(axis, x.ndim)
    total = P.reduce(P.reduce_sum_p, P.convert(x, dtype), axes, keepdims)
    return _divide_count(total, _count(x, axes), np.dtype(dtype))


def _count(x: Var, axes) -> int:
    return int(np.prod([x.shape[i] for i in axes], dtype=np.int64))


def _divide_count(total: Var, count: int, dtype: np.dtype) -> Var:
    """total / count, cast back to `dtype` as NumPy's mean and var do (truncating integers)."""
    if not count:
        return P.convert(P.mul(total, float("nan")), P.float_dtype(dtype))
    return P.convert(P.div(total, count if P.is_float(dtype) else float(count)), dtype)


def _var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
    """NumPy's var: the mean and the sum of squares are accumulated in `dtype` (float64 for
    integer input by default), the deviations in the promoted dtype of the input and the mean."""
    _no_extra("var", {**kwargs, "out": out})
    x = _v(a)
    if dtype is None:
        dtype = P.float_dtype(x.dtype)
    dtype = np.dtype(dtype)
    axes = P.normalize_axes(axis, x.ndim)
    mean = _divide_count(P.reduce_sum(P.convert(x, dtype), axes, True), _count(x, axes), dtype)
    centred = P.sub(x, mean)
    squares = P.reduce_sum(P.convert(P.mul(centred, centred), dtype), axes, keepdims)
    count = max(_count(x, axes) - ddof, 0)
    if not count:
        return P.div(squares, 0.0)
    return _divide_count(squares, count, dtype)


def _std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
    # Where the variance is 0 (one element, or constant data) the standard deviation has a kink,
    # like |t| at 0: its derivative there is 0 at every order (as np.abs's), not 0 * inf = NaN.
    var = _var(a, axis, dtype, out, ddof, keepdims, **kwargs)
    root = P.where(P.compare(P.eq_p, var, 0.0), 0.0, P.unary(P.sqrt_p, var))
    if P.is_float(var.dtype):
        return root
    if var.ndim:
        raise TypeError(
            f"np.std with the integer dtype {var.dtype} over an axis cannot store its float square "
            f"roots (NumPy raises the same){_src()}; use a float dtype"
        )
    return P.convert(root, var.dtype)


_SVD_NORMS = (2, -2, "nuc")  # the matrix norms read from the singular values


def _norm(x, ord=None, axis=None, keepdims=False):
    """np.linalg.norm: vector norms of every order, and matrix norms of every order (2, -2 and
    'nuc' from the singular values, linalg.svd_s_p)."""
    x = _v(x)
    x = P.convert(x, P.float_dtype(x.dtype))
    if axis is None:
        if (
            ord is None
            or (ord in ("f", "fro") and x.ndim == 2)
            or (_is_number(ord) and ord == 2 and x.ndim == 1)
        ):
            out = _sqrt_sum_squares(x, tuple(range(x.ndim)))
            return P.reshape(out, (1,) * x.ndim) if keepdims else out
        axis = tuple(range(x.ndim))
    elif not isinstance(axis, tuple):
        axis = (int(axis),)
    if len(axis) == 1:
        (ax,) = P.normalize_axes(axis, x.ndim)
        out = _vector_norm(x, ord, ax)
        return P.reshape(out, P._keepdims_shape(x.shape, (ax,))) if keepdims else out
    if len(axis) == 2:
        row, col = [P.normalize_axes(a, x.ndim)[0] for a in axis]
        if row == col:
            raise ValueError(f"Duplicate axes given.{_src()}")
        out = _matrix_norm(x, ord, row, col)
        return P.reshape(out, P._keepdims_shape(x.shape, (row, col))) if keepdims else out
    raise ValueError(f"Improper number of dimensions to norm.{_src()}")


def _is_number(ord) -> bool:
    return isinstance(ord, (int, float, np.integer, np.floating)) and not isinstance(ord, bool)


def _sqrt_sum_squares(x: Var, axes) -> Var:
    return P.unary(P.sqrt_p, P.reduce_sum(P.mul(x, x), axes))


def _abs_extremum(prim, x: Var, axis: int) -> Var:
    """max/min of |x| over `axis`; NumPy's max starts at 0, so an empty axis gives 0."""
    if x.shape[axis] == 0 and prim is P.reduce_max_p:
        return P.const(0, tuple(d for i, d in enumerate(x.shape) if i != axis), x.dtype)
    return P.reduce(prim, P.emit(P.abs_p, x), axis)


def _vector_norm(x: Var, ord, axis: int) -> Var:
    if ord is None:
        return _sqrt_sum_squares(x, axis)
    if not _is_number(ord):
        raise ValueError(f"Invalid norm order {ord!r} for vectors{_src()}")
    if ord == np.inf:
        return _abs_extremum(P.reduce_max_p, x, axis)
    if ord == -np.inf:
        return _abs_extremum(P.reduce_min_p, x, axis)
    if ord == 0:  # the number of nonzero entries
        return P.reduce_sum(P.convert(P.compare(P.ne_p, x, 0.0), x.dtype), axis)
    if ord == 1:
        return P.reduce_sum(P.emit(P.abs_p, x), axis)
    if ord == 2:
        return _sqrt_sum_squares(x, axis)
    p = float(ord)
    total = P.reduce_sum(P.power(P.emit(P.abs_p, x), p), axis)
    return P.power(total, 1.0 / p)


def _matrix_norm(x: Var, ord, row: int, col: int) -> Var:
    if ord in (None, "fro", "f"):
        return _sqrt_sum_squares(x, (row, col))
    if _is_number(ord) and ord in (1, -1, np.inf, -np.inf):
        # 1-norms: the largest (smallest) column sum of |x|; inf-norms: the same over rows
        summed, other = (row, col) if abs(ord) == 1 else (col, row)
        sums = P.reduce_sum(P.emit(P.abs_p, x), summed)
        other -= other > summed
        if ord > 0:
            if sums.shape[other] == 0:
                return P.const(0, tuple(d for i, d in enumerate(sums.shape) if i != other), x.dtype)
            return P.reduce(P.reduce_max_p, sums, other)
        return P.reduce(P.reduce_min_p, sums, other)
    if (_is_number(ord) or isinstance(ord, str)) and ord in _SVD_NORMS:
        from .linalg import svd_s_p  # the singular values (linalg imports this module)

        rest = [d for d in range(x.ndim) if d not in (row, col)]
        s = P.emit(svd_s_p, P.transpose(x, rest + [row, col]))
        if ord == "nuc":
            return P.reduce_sum(s, s.ndim - 1)
        k = s.shape[-1]
        lead = tuple((0, d, 1) for d in s.shape[:-1])
        pick = (0, 1, 1) if ord == 2 else (k - 1, k, 1)  # NumPy's singular values descend
        return P.reshape(P.slice_(s, lead + (pick,)), s.shape[:-1])
    raise ValueError(f"Invalid norm order {ord!r} for matrices.{_src()}")


# ----------------------------------------------------------------------------------------------
# Selection and clipping


def _where(condition, x=None, y=None):
    if x is None or y is None:
        raise TracingError(
            f"np.where(condition) with one argument returns data-dependent indices and cannot be "
            f"traced{_src()}; use np.where(condition, a, b)"
        )
    x, y = _o(x), _o(y)
    dtype = P._result_dtype([x, y])
    if dtype.kind in "iu":  # NumPy casts an out-of-range Python int into the integer dtype
        x, y = (_wrapped(v, dtype) for v in (x, y))
    return P.where(_o(condition), x, y)


def _wrapped(v, dtype: np.dtype):
    """A Python int as NumPy's C cast puts it into `dtype` (300 -> 44 in int8); others as they are."""
    if not _is_int(v) or np.iinfo(dtype).min <= v <= np.iinfo(dtype).max:
        return v
    if not -(2**63) <= v < 2**64:
        raise OverflowError(f"Python int too large to convert to C long{_src()}")
    return int(np.array(v).astype(dtype))


def _clip(a, a_min=None, a_max=None, out=None, *, min=None, max=None, **kwargs):
    _no_extra("clip", {**kwargs, "out": out})
    lo = a_min if a_min is not None else min
    hi = a_max if a_max is not None else max
    x = _v(a)
    if x.dtype.kind in "iu":  # a Python int bound beyond the dtype's range clips nothing
        info = np.iinfo(x.dtype)
        lo = None if _is_int(lo) and lo < info.min else lo
        hi = None if _is_int(hi) and hi > info.max else hi
    if lo is not None:
        lo = _o(lo)
        x = P.where(P.compare(P.lt_p, x, lo), lo, x)
    if hi is not None:
        hi = _o(hi)
        x = P.where(P.compare(P.gt_p, x, hi), hi, x)
    return x


def _filled(value):
    def handler(a, dtype=None, order="K", subok=True, shape=None, **kw):
        ref = _v(a)
        if shape is None:
            shape = ref.shape
        elif isinstance(shape, (int, np.integer)):
            shape = (int(shape),)
        return P.const(value, tuple(shape), dtype or ref.dtype)

    return handler


def _full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, **kw):
    if isinstance(fill_value, Var):  # a traced fill value: broadcast it
        ref = _v(a)
        shape = (
            ref.shape
            if shape is None
            else ((int(shape),) if isinstance(shape, (int, np.integer)) else tuple(shape))
        )
        if fill_value.ndim:
            raise TracingError(
                f"np.full_like: the fill value must be a scalar, got shape {fill_value.shape}{_src()}"
            )
        return _broadcast_value(P.convert(fill_value, dtype or ref.dtype), shape, "np.full_like")
    if not isinstance(fill_value, (int, float, bool, np.generic)):
        raise TracingError(f"np.full_like: the fill value must be a number{_src()}")
    return _filled(fill_value)(a, dtype, order, subok, shape)


# ----------------------------------------------------------------------------------------------
# Linear algebra


def _dot(a, b, out=None):
    """np.dot: a product with a scalar; the inner product of vectors; otherwise the sum over the
    last axis of `a` and the second-to-last of `b` (the last, for a vector), in the operands'
    promoted dtype."""
    if out is not None:
        raise TracingError(f"np.dot(..., out=...) is not supported on traced values{_src()}")
    a, b = _v(a), _v(b)
    if a.ndim == 0 or b.ndim == 0:
        return P.mul(a, b)
    k = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if a.shape[-1] != k:
        raise ShapeError(
            f"shapes {a.shape} and {b.shape} not aligned: {a.shape[-1]} (dim {a.ndim - 1}) != "
            f"{k} (dim {max(b.ndim - 2, 0)}){_src()}"
        )
    if b.ndim <= 2:
        return P.matmul(a, b)
    # b: (..., k, m) -> (k, ... * m), one matrix product, then the axes back in NumPy's order
    moved = P.transpose(b, [b.ndim - 2] + [i for i in range(b.ndim) if i != b.ndim - 2])
    a2 = P.reshape(a, (_prod(a.shape[:-1]), k))
    out = P.matmul(a2, P.reshape(moved, (k, _prod(moved.shape[1:]))))
    return P.reshape(out, a.shape[:-1] + b.shape[:-2] + b.shape[-1:])


def _prod(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _inner(a, b):
    """np.inner: contracts the last axis of `a` with the last axis of `b` (the result's shape is
    a.shape[:-1] + b.shape[:-1]); a scalar operand multiplies."""
    a, b = _v(a), _v(b)
    if a.ndim == 0 or b.ndim == 0:
        return P.mul(a, b)
    if a.shape[-1] != b.shape[-1]:
        raise ShapeError(
            f"shapes {a.shape} and {b.shape} not aligned: {a.shape[-1]} (dim {a.ndim - 1}) != "
            f"{b.shape[-1]} (dim {b.ndim - 1}){_src()}"
        )
    dtype = P._result_dtype([a, b])
    k = a.shape[-1]
    a2 = P.reshape(P.convert(a, dtype), (_prod(a.shape[:-1]), k))
    b2 = P.reshape(P.convert(b, dtype), (_prod(b.shape[:-1]), k))
    return P.reshape(P.matmul(a2, P.transpose(b2)), a.shape[:-1] + b.shape[:-1])


def _outer(a, b, out=None):
    a, b = _ravel(a), _ravel(b)
    return P.mul(P.reshape(a, (a.size, 1)), P.reshape(b, (1, b.size)))


def _einsum_from_sublists(args) -> tuple[str, list]:
    """np.einsum(a, [0, 1], b, [1, 2], [0, 2]): the operand / index-list form as a string."""
    letters = "abcdefghijklmnopqrstuvwxyz"

    def term(sub) -> str:
        return "".join("..." if i is Ellipsis else letters[int(i)] for i in sub)

    operands, terms = list(args[0::2]), [term(s) for s in args[1::2]]
    out = None
    if len(args) % 2 == 1:  # a trailing output list
        out = term(args[-1])
        operands = operands[:-1] if len(operands) > len(terms) else operands
    spec = ",".join(terms[: len(operands)])
    return (spec + "->" + out if out is not None else spec), operands


def _einsum(subscripts, *operands, **kwargs):
    """np.einsum in full: the string and the operand/index-list forms, '...', repeated indices
    (diagonals), any number of operands, contracted pairwise in a greedy order (the pair whose
    result is smallest first), each pair as one batched matrix product."""
    if kwargs.get("out") is not None:
        raise TracingError(f"np.einsum(..., out=...) is not supported on traced values{_src()}")
    if not isinstance(subscripts, str):
        subscripts, operands = _einsum_from_sublists((subscripts, *operands))
    spec = subscripts.replace(" ", "")
    lhs, out = spec.split("->") if "->" in spec else (spec, None)
    terms = lhs.split(",")
    xs = [_v(x) for x in operands]
    if len(terms) != len(xs):
        raise ValueError(f"np.einsum: {len(terms)} subscripts for {len(xs)} operands{_src()}")
    # '...': as many fresh capital letters as the operand has dimensions beyond its letters
    spare = iter("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    widest = max(
        (x.ndim - (len(t) - 3) for t, x in zip(terms, xs, strict=True) if "..." in t), default=0
    )
    ellipsis = "".join(next(spare) for _ in range(widest))
    for k, (t, x) in enumerate(zip(terms, xs, strict=True)):
        if "..." in t:
            n = x.ndim - (len(t) - 3)
            terms[k] = t.replace("...", ellipsis[widest - n :])
        if len(terms[k]) != x.ndim:
            raise ValueError(f"np.einsum: subscripts {t!r} do not fit a {x.ndim}-d operand{_src()}")
    if out is None:
        letters = "".join(terms)
        out = ellipsis + "".join(
            sorted(c for c in set(letters) if letters.count(c) == 1 and c.islower())
        )
    else:
        out = out.replace("...", ellipsis)
    if len(set(out)) != len(out):
        raise ValueError(f"np.einsum: an output index appears twice in {out!r}{_src()}")
    # repeated indices within one operand: take its diagonal first
    for k in range(len(xs)):
        t, x = terms[k], xs[k]
        while len(set(t)) != len(t):
            c = next(c for c in t if t.count(c) > 1)
            first, second = t.index(c), t.index(c, t.index(c) + 1)
            from .numpy_arrays import _diagonal  # with the other diagonal helpers

            x = _diagonal(x, 0, first, second)  # that axis moves to the end
            t = "".join(ch for i, ch in enumerate(t) if i not in (first, second)) + c
        terms[k], xs[k] = t, x
    dtype = P._result_dtype(xs)
    xs = [P.convert(x, dtype) for x in xs]
    while len(xs) > 1:
        best = None
        for i in range(len(xs)):
            for j in range(i + 1, len(xs)):
                rest = "".join(t for k, t in enumerate(terms) if k not in (i, j)) + out
                keep = "".join(c for c in dict.fromkeys(terms[i] + terms[j]) if c in rest)
                sizes = {
                    c: d
                    for t, x in zip(terms, xs, strict=True)
                    for c, d in zip(t, x.shape, strict=True)
                }
                cost = int(np.prod([sizes[c] for c in keep], dtype=np.int64))
                if best is None or cost < best[0]:
                    best = (cost, i, j, keep)
        _, i, j, keep = best
        merged = _einsum2(terms[i], terms[j], keep, xs[i], xs[j])
        terms = [t for k, t in enumerate(terms) if k not in (i, j)] + [keep]
        xs = [x for k, x in enumerate(xs) if k not in (i, j)] + [merged]
    (term,), (x,) = terms, xs
    missing = [c for c in out if c not in term]
    if missing:
        raise ValueError(f"np.einsum: output index {missing[0]!r} appears in no operand{_src()}")
    x = P.reduce_sum(x, tuple(i for i, c in enumerate(term) if c not in out))
    kept = [c for c in term if c in out]
    # NumPy's einsum keeps the operands' type (np.sum would widen small integers)
    return P.convert(P.transpose(x, [kept.index(c) for c in out]), dtype)


def _einsum2(ta: str, tb: str, out: str, a: Var, b: Var) -> Var:
    """Two-operand einsum as one batched matrix product: a -> [batch, free_a, contracted]."""
    dtype = P._result_dtype([a, b])
    a, b = P.convert(a, dtype), P.convert(b, dtype)
    # indices summed in one operand only are summed first
    a = P.reduce_sum(a, tuple(i for i, c in enumerate(ta) if c not in tb and c not in out))
    ta = "".join(c for c in ta if c in tb or c in out)
    b = P.reduce_sum(b, tuple(i for i, c in enumerate(tb) if c not in ta and c not in out))
    tb = "".join(c for c in tb if c in ta or c in out)
    size: dict[str, int] = {}
    for term, x in ((ta, a), (tb, b)):
        for c, d in zip(term, x.shape, strict=True):
            if size.get(c, 1) == 1:
                size[c] = d
            elif d not in (1, size[c]):
                raise ShapeError(f"np.einsum: index {c!r} has sizes {size[c]} and {d}{_src()}")
    # a size-1 axis broadcasts against the other operand's, as in NumPy
    a, b = (
        x if x.shape == tuple(size[c] for c in t) else P.broadcast_to(x, tuple(size[c] for c in t))
        for t, x in ((ta, a), (tb, b))
    )
    batch = [c for c in ta if c in tb and c in out]
    contracted = [c for c in ta if c in tb and c not in out]
    free_a = [c for c in ta if c not in tb]
    free_b = [c for c in tb if c not in ta]
    n = lambda cs: int(np.prod([size[c] for c in cs], dtype=np.int64))
    a3 = P.reshape(
        P.transpose(a, [ta.index(c) for c in batch + free_a + contracted]),
        (n(batch), n(free_a), n(contracted)),
    )
    b3 = P.reshape(
        P.transpose(b, [tb.index(c) for c in batch + contracted + free_b]),
        (n(batch), n(contracted), n(free_b)),
    )
    r = P.matmul_(a3, b3)
    order = batch + free_a + free_b
    r = P.reshape(r, tuple(size[c] for c in order))
    return P.transpose(r, [order.index(c) for c in out])


# ----------------------------------------------------------------------------------------------
# Shapes


def _order(order, what: str, x: Var, allowed: str = "CFAK") -> str:
    """NumPy's memory order argument, as 'C' or 'F'. None means 'C'; case is ignored, as NumPy
    does. 'A' and 'K' follow the memory layout of the array, which a traced value does not have:
    they are refused where the layout would matter (two or more axes longer than 1)."""
    if order is None:
        return "C"
    if not isinstance(order, str):
        raise TypeError(f"order must be str, not {type(order).__name__}")
    key = order.upper()
    if key not in allowed:
        if key == "K":
            raise ValueError(f"order 'K' is not permitted for {what}{_src()}")
        raise ValueError(f"order must be one of 'C', 'F', 'A', or 'K' (got {order!r}){_src()}")
    if key in "AK" and sum(d > 1 for d in x.shape) > 1:
        raise TracingError(
            f"{what} with order={order!r} follows the memory layout of the array, which "
            f"tracegrad does not trace{_src()}; write order='C' (row by row) or order='F' "
            "(column by column)"
        )
    return "F" if key == "F" else "C"


def _reshape_in_order(x: Var, shape: tuple[int, ...], order: str) -> Var:
    """Reshape reading and writing elements in C (last index fastest) or F (first index fastest)
    order: F order is C order on the transposed value, transposed back."""
    if order == "C":
        return P.reshape(x, shape)
    return P.transpose(P.reshape(P.transpose(x), tuple(reversed(shape))))


def _ravel(a, order="C"):
    x = _v(a)
    return _reshape_in_order(x, (x.size,), _order(order, "ravel", x))


def _reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    x = _v(a)
    order = _order(order, "reshaping", x, "CFA")
    shape = newshape if shape is None else shape
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
    if shape.count(-1) > 1:
        raise ValueError(f"reshape: can only specify one unknown dimension{_src()}")
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        if known == 0 or x.size % known:
            raise ShapeError(f"cannot reshape {x.shape} into {shape}{_src()}")
        shape = tuple(x.size // known if d == -1 else d for d in shape)
    if int(np.prod(shape, dtype=np.int64)) != x.size:
        raise ShapeError(
            f"cannot reshape a value of shape {x.shape} (size {x.size}) into {shape}{_src()}"
        )
    return _reshape_in_order(x, shape, order)


def _transpose(a, axes=None):
    return P.transpose(_v(a), axes)


def _swapaxes(a, axis1, axis2):
    x = _v(a)
    perm = list(range(x.ndim))
    i, j = P.normalize_axes(axis1, x.ndim)[0], P.normalize_axes(axis2, x.ndim)[0]
    perm[i], perm[j] = perm[j], perm[i]
    return P.transpose(x, perm)


def _moveaxis(a, source, destination):
    x = _v(a)
    src = [P.normalize_axes(s, x.ndim)[0] for s in np.atleast_1d(source)]
    dst = [P.normalize_axes(d, x.ndim)[0] for d in np.atleast_1d(destination)]
    if len(src) != len(dst):
        raise ValueError(
            f"`source` and `destination` arguments must have the same number of elements{_src()}"
        )
    order = [i for i in range(x.ndim) if i not in src]
    for d, s in sorted(zip(dst, src, strict=True)):
        order.insert(d, s)
    return P.transpose(x, order)


def _expand_dims(a, axis):
    x = _v(a)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    ndim = x.ndim + len(axes)
    axes = P.normalize_axes(axes, ndim)
    dims = iter(x.shape)
    return P.reshape(x, tuple(1 if i in axes else next(dims) for i in range(ndim)))


def _squeeze(a, axis=None):
    x = _v(a)
    if axis is None:
        axes = tuple(i for i, d in enumerate(x.shape) if d == 1)
    else:
        axes = P.normalize_axes(axis, x.ndim)
        for i in axes:
            if x.shape[i] != 1:
                raise ValueError(
                    f"cannot select an axis to squeeze out which has size not equal to one{_src()}"
                )
    return P.reshape(x, tuple(d for i, d in enumerate(x.shape) if i not in axes))


def _broadcast_to(a, shape, subok=False):
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    return P.broadcast_to(_v(a), shape)


def _arrays(arrays) -> list[Var]:
    """The values of a sequence of arrays; one traced array is a sequence along its first axis,
    as NumPy iterates it."""
    if isinstance(arrays, Var):
        if arrays.ndim == 0:
            raise TypeError(f"iteration over a 0-d array{_src()}")
        return [_getitem(arrays, i) for i in range(arrays.shape[0])]
    return [_v(x) for x in arrays]


def _at_least(x: Var, ndim: int) -> Var:
    """np.atleast_1d / 2d / 3d: (N,) -> (1, N) -> (1, N, 1); (M, N) -> (M, N, 1)."""
    if x.ndim >= ndim:
        return x
    if ndim == 3 and x.ndim == 2:
        return P.reshape(x, x.shape + (1,))
    if ndim == 3:
        return P.reshape(x, (1, x.size, 1))
    return P.reshape(x, (1,) * (ndim - x.ndim) + x.shape)


def _concatenate(arrays, axis=0, out=None, dtype=None, **kw):
    xs = _arrays(arrays)
    if not xs:
        raise ValueError("need at least one array to concatenate")
    if axis is None:
        xs, axis = [P.reshape(x, (x.size,)) for x in xs], 0
    ndim = xs[0].ndim
    if ndim == 0:
        raise ValueError(f"zero-dimensional arrays cannot be concatenated{_src()}")
    axis = P.normalize_axes(axis, ndim)[0]
    for x in xs:
        if x.ndim != ndim or any(
            d != e for i, (d, e) in enumerate(zip(x.shape, xs[0].shape, strict=True)) if i != axis
        ):
            raise ShapeError(
                f"concatenate: shapes {[v.shape for v in xs]} differ outside axis {axis}{_src()}"
            )
    if dtype is not None:
        xs = [P.convert(x, dtype) for x in xs]
    return P.concatenate(xs, axis)


def _stack(arrays, axis=0, out=None, **kw):
    xs = _arrays(arrays)
    if not xs:
        raise ValueError("need at least one array to stack")
    if len({x.shape for x in xs}) != 1:
        raise ShapeError(
            f"stack: all input arrays must have the same shape, got {[x.shape for x in xs]}{_src()}"
        )
    axis = P.normalize_axes(axis, xs[0].ndim + 1)[0]
    return _concatenate([_expand_dims(x, axis) for x in xs], axis, **kw)


def _hstack(arrays, **kw):
    xs = [_at_least(x, 1) for x in _arrays(arrays)]
    return _concatenate(xs, axis=0 if xs and xs[0].ndim == 1 else 1, **kw)


def _vstack(arrays, **kw):
    return _concatenate([_at_least(x, 2) for x in _arrays(arrays)], axis=0, **kw)


def _dstack(arrays, **kw):
    return _concatenate([_at_least(x, 3) for x in _arrays(arrays)], axis=2, **kw)


def _column_stack(arrays):
    xs = [P.reshape(x, (x.size, 1)) if x.ndim < 2 else x for x in _arrays(arrays)]
    return _concatenate(xs, axis=1)


def _basic_index(x: Var, index) -> tuple[list[tuple[int, int, int]], list[int]]:
    """A static basic index (ints, slices, None, Ellipsis) of `x`: the normalised range of each
    axis and the shape of the result (ints remove their axis, None adds one)."""
    if not isinstance(index, tuple):
        index = (index,)
    for item in index:
        if not (item is None or item is Ellipsis or isinstance(item, (int, np.integer, slice))):
            kind = (
                "an array"
                if isinstance(item, (Var, list, np.ndarray))
                else f"a {type(item).__name__}"
            )
            raise TracingError(
                f"indexing a traced value with {kind} is not supported{_src()}; "
                "only static ints, slices, None and ... (no arrays or traced indices)"
            )
        if isinstance(item, slice) and any(
            p is not None and not isinstance(p, (int, np.integer))
            for p in (item.start, item.stop, item.step)
        ):
            raise TracingError(f"slice bounds must be static ints{_src()}")
    used = sum(1 for i in index if i is not None and i is not Ellipsis)
    if index.count(Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if used > x.ndim:
        raise IndexError(f"too many indices for a traced value of {x.ndim} dimensions{_src()}")
    if Ellipsis in index:
        k = index.index(Ellipsis)
        index = index[:k] + (slice(None),) * (x.ndim - used) + index[k + 1 :]
    else:
        index = index + (slice(None),) * (x.ndim - used)
    ranges, out_shape, axis = [], [], 0
    for item in index:
        if item is None:
            out_shape.append(1)
            continue
        n = x.shape[axis]
        if isinstance(item, slice):
            start, stop, step = item.indices(n)
            ranges.append((start, stop, step))
            out_shape.append(len(range(start, stop, step)))
        else:
            i = int(item)
            if not -n <= i < n:
                raise IndexError(
                    f"index {i} is out of bounds for axis {axis} with size {n}{_src()}"
                )
            i %= n
            ranges.append((i, i + 1, 1))
        axis += 1
    return ranges, out_shape


def is_basic_index(index) -> bool:
    """Only static ints, slices, None and Ellipsis (NumPy's basic indexing: the result is a
    view); anything else (arrays, lists, traced values) is advanced indexing (a copy)."""
    items = index if isinstance(index, tuple) else (index,)
    return all(i is None or i is Ellipsis or isinstance(i, (int, np.integer, slice)) for i in items)


def _getitem(x: Var, index) -> Var:
    """Basic indexing (static ints, slices, None, Ellipsis), and integer-array or static boolean
    indexing (numpy_arrays.advanced_getitem)."""
    if not is_basic_index(index):
        from .numpy_arrays import advanced_getitem  # defined with the other gathers

        return advanced_getitem(x, index)
    ranges, out_shape = _basic_index(x, index)
    return P.reshape(P.slice_(x, tuple(ranges)), tuple(out_shape))


def _broadcast_value(v: Var, shape: tuple[int, ...], what: str) -> Var:
    if v.shape == tuple(shape):
        return v
    try:
        np.broadcast_shapes(v.shape, tuple(shape))
        if len(v.shape) > len(shape) or np.broadcast_shapes(v.shape, tuple(shape)) != tuple(shape):
            raise ValueError
    except ValueError:
        raise ValueError(
            f"could not broadcast input array from shape {v.shape} into shape {tuple(shape)} "
            f"({what}){_src()}"
        ) from None
    lead = len(shape) - v.ndim
    return P.broadcast_to(P.reshape(v, (1,) * lead + v.shape), tuple(shape))


def written_value(value, dtype) -> Var:
    """A value written into an array of `dtype` (`x[...] = value`), cast as NumPy casts it."""
    if isinstance(value, (Var, np.ndarray)) or not isinstance(
        value, (bool, int, float, np.generic)
    ):
        v = _v(value)
    else:
        v = P.const(np.asarray(value).astype(dtype), (), dtype)
    return P.convert(v, dtype)


def _setitem(x: Var, index, value) -> Var:
    """`x` with `x[index] = value` done, as a new value (NumPy's in-place assignment, made
    functional): static basic indices write a region (`unslice` and a select), a boolean mask
    (static or traced) selects where to write. The value is cast to x's dtype, as NumPy does."""
    v = written_value(value, x.dtype)
    mask = index if not isinstance(index, tuple) or len(index) != 1 else index[0]
    if (
        isinstance(mask, (list, np.ndarray, Var))
        and np.dtype(getattr(mask, "dtype", None) or np.asarray(mask).dtype) == np.bool_
    ):
        m = _v(mask)
        if m.shape != x.shape[: m.ndim]:
            raise IndexError(
                f"boolean index of shape {m.shape} does not match the indexed array of shape "
                f"{x.shape}{_src()}"
            )
        tail = x.shape[m.ndim :]
        fits = v.ndim <= len(tail) and np.broadcast_shapes(v.shape, tail) == tail
        if not fits and not isinstance(mask, Var):  # a mask known while tracing: its positions
            from .numpy_arrays import setitem_advanced

            return setitem_advanced(x, tuple(np.nonzero(np.asarray(mask))), v)
        if not fits:
            raise TracingError(
                f"x[mask] = value with a value of shape {v.shape} is not supported{_src()}: the "
                "number of selected elements depends on the mask. Assign a scalar (or a value "
                f"for each row, shape {tail}), or write np.where(mask, values, x) with values "
                "shaped like x."
            )
        full_mask = P.broadcast_to(P.reshape(m, m.shape + (1,) * len(tail)), x.shape)
        return P.where(full_mask, _broadcast_value(v, x.shape, "x[mask] = value"), x)
    if not is_basic_index(index):  # integer arrays: a scatter (numpy_arrays.setitem_advanced)
        from .numpy_arrays import setitem_advanced

        return setitem_advanced(x, index, v)
    ranges, out_shape = _basic_index(x, index)
    region = tuple(len(range(*r)) for r in ranges)
    v = P.reshape(_broadcast_value(v, tuple(out_shape), "x[index] = value"), region)
    if region == x.shape:
        return v
    placed = P.emit(P.unslice_p, v, shape=x.shape, index=tuple(ranges))
    selected = np.zeros(x.shape, dtype=bool)
    selected[tuple(slice(a, None if b < 0 else b, c) for a, b, c in ranges)] = True
    return P.where(P.const(selected), placed, x)


def _shape(a):
    return _v(a).shape


def _ndim(a):
    return _v(a).ndim


def _size(a, axis=None):
    x = _v(a)
    return x.size if axis is None else x.shape[axis]


FUNCTIONS = {
    "real": lambda val: _real_part(val, "np.real"),
    "imag": lambda val: _imag_part(val),
    "sum": _reduction(P.reduce_sum_p, "sum"),
    "prod": _reduction(P.reduce_prod_p, "prod"),
    "max": _reduction(P.reduce_max_p, "max"),
    "amax": _reduction(P.reduce_max_p, "amax"),
    "min": _reduction(P.reduce_min_p, "min"),
    "amin": _reduction(P.reduce_min_p, "amin"),
    "mean": _mean,
    "var": _var,
    "std": _std,
    "linalg.norm": _norm,
    "where": _where,
    "clip": _clip,
    "zeros_like": _filled(0),
    "ones_like": _filled(1),
    "full_like": _full_like,
    "dot": _dot,
    "vdot": lambda a, b: _dot(_ravel(a), _ravel(b)),
    "inner": _inner,
    "outer": _outer,
    "einsum": _einsum,
    "reshape": _reshape,
    "ravel": _ravel,
    "transpose": _transpose,
    "swapaxes": _swapaxes,
    "moveaxis": _moveaxis,
    "expand_dims": _expand_dims,
    "squeeze": _squeeze,
    "broadcast_to": _broadcast_to,
    "concatenate": _concatenate,
    "stack": _stack,
    "hstack": _hstack,
    "vstack": _vstack,
    "row_stack": _vstack,
    "column_stack": _column_stack,
    "dstack": _dstack,
    "shape": _shape,
    "ndim": _ndim,
    "size": _size,
    "copy": lambda a, **kw: _v(a),
    "round": _round,
    "around": _round,
    "fix": lambda x, out=None: _rounding(P.trunc_p)(x),
    "nan_to_num": _nan_to_num,
    "sinc": _sinc,
}

# The names users may look up (docs/api.md lists them).
# array manipulation (flip, roll, tile, split, diagonals, scans...): written with these helpers
from .numpy_arrays import FUNCTIONS as _ARRAY_FUNCTIONS  # noqa: E402

FUNCTIONS.update(_ARRAY_FUNCTIONS)

# np.linalg's factorisations and solves: primitives of their own, with their rules
from .linalg import FUNCTIONS as _LINALG_FUNCTIONS  # noqa: E402

FUNCTIONS.update(_LINALG_FUNCTIONS)

# scipy.special's ufuncs reach the same table (NumPy dispatches them by name: digamma's ufunc is
# named psi); its Python functions logsumexp, softmax and log_softmax are redirected while tracing
# (constructors.py)
SCIPY_SPECIAL = (
    "digamma",
    "erf",
    "erfc",
    "expit",
    "gammaln",
    "log_ndtr",
    "log_softmax",
    "logit",
    "logsumexp",
    "ndtr",
    "psi",
    "softmax",
    "xlog1py",
    "xlogy",
)
SUPPORTED = sorted((set(UFUNCS) | set(FUNCTIONS)) - set(SCIPY_SPECIAL))
