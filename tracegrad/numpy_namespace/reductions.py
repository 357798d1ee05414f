"""NumPy's reductions on traced values (stage: tracing): sum, prod, max, min, mean, var, std and
np.linalg.norm.
"""

from __future__ import annotations

import numpy as np

from .. import primitives as P
from ..base.errors import TracingError
from ..ir import Var
from ..linalg.factorisations import svd_s_p
from ..tracing.dispatch import implements, register
from ..tracing.source import at_source
from .operands import as_var

# ----------------------------------------------------------------------------------------------
# Reductions


def refuse_extra_arguments(name: str, kwargs: dict, allowed=()):
    extra = [k for k, v in kwargs.items() if k not in allowed and v is not None and k != "out"]
    if kwargs.get("out") is not None:
        extra.append("out")
    if extra:
        raise TracingError(
            f"np.{name}: argument(s) {extra} are not supported on traced values{at_source()}"
        )


def refuse_complex_order(x: Var, name: str) -> None:
    """The functions that order values (max, argmax, sort...) refuse complex ones."""
    if P.is_complex(x.dtype):
        raise TypeError(
            f"np.{name} of complex values is not supported on traced values{at_source()}: NumPy "
            "orders complex numbers lexicographically (by the real part, then the imaginary "
            "part); order them by np.abs(z), np.real(z) or np.imag(z) instead"
        )


def lexicographic_extremum(prim, z: Var, axis, keepdims: bool) -> Var:
    """np.max / np.min of complex values, ordered as NumPy orders them: by the real part, then
    the imaginary part among the elements whose real part is the extreme one. Each part's
    derivative goes to the element(s) that give it."""
    re, im = P.real(z), P.imag(z)
    top = P.reduce(prim, re, axis, keepdims=True)
    ties = P.compare(P.eq_p, re, P.broadcast_to(top, re.shape))
    worst = -np.inf if prim is P.reduce_max_p else np.inf
    among = P.reduce(prim, P.where(ties, im, worst), axis, keepdims=True)
    # the element(s) the order picks: both parts (and their derivatives) are theirs, shared
    # equally by equal elements, as a real maximum's ties share it
    chosen = P.logical(P.and_p, ties, P.compare(P.eq_p, im, P.broadcast_to(among, im.shape)))
    axes = P.normalize_axes(axis, z.ndim)

    def over_chosen(values: Var) -> Var:
        return P.reshape(P.reduce_sum(values, axes), top.shape)

    count = over_chosen(P.convert(chosen, re.dtype))
    picked = [P.div(over_chosen(P.where(chosen, part, 0.0)), count) for part in (re, im)]
    out = P.make_complex(*picked)
    if not keepdims:
        out = P.reshape(out, tuple(d for i, d in enumerate(z.shape) if i not in axes))
    return out


def reduction(prim, name):
    ordered = prim in (P.reduce_max_p, P.reduce_min_p)

    def handler(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
        refuse_extra_arguments(name, {**kwargs, "out": out})
        x = as_var(a)
        if dtype is not None:
            x = P.convert(x, dtype)
        if x.ndim == 0 and isinstance(axis, (int, np.integer)) and axis in (0, -1):
            axis = ()  # NumPy's reduce takes axis 0 or -1 of a 0-d value as no axis
        if ordered and P.is_complex(x.dtype):
            return lexicographic_extremum(prim, x, axis, keepdims)
        out = P.reduce(prim, x, axis, keepdims)
        # A small integer or bool dtype= accumulates in int64 (P.reduce): the same value modulo
        # its width, and for bools nonzero is NumPy's logical or (sum) and and (prod).
        return out if dtype is None else P.convert(out, dtype)

    return handler


register("sum", reduction(P.reduce_sum_p, "sum"))
register("prod", reduction(P.reduce_prod_p, "prod"))
register("max", reduction(P.reduce_max_p, "max"))
register("amax", reduction(P.reduce_max_p, "amax"))
register("min", reduction(P.reduce_min_p, "min"))
register("amin", reduction(P.reduce_min_p, "amin"))


@implements("mean")
def arithmetic_mean(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    refuse_extra_arguments("mean", {**kwargs, "out": out})
    x = as_var(a)
    if dtype is None:
        dtype = P.float_dtype(x.dtype)
    axes = P.normalize_axes(axis, x.ndim)
    total = P.convert(P.reduce(P.reduce_sum_p, P.convert(x, dtype), axes, keepdims), dtype)
    return _divide_count(total, _count(x, axes), np.dtype(dtype))


def _count(x: Var, axes) -> int:
    return int(np.prod([x.shape[i] for i in axes], dtype=np.int64))


def _divide_count(total: Var, count: int, dtype: np.dtype) -> Var:
    """total / count, cast back to `dtype` as NumPy's mean and var do (truncating integers)."""
    if not count:
        return P.convert(P.mul(total, float("nan")), P.float_dtype(dtype))
    return P.convert(P.div(total, count if P.is_float(dtype) else float(count)), dtype)


@implements("var")
def variance(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
    """NumPy's var: the mean and the sum of squares are accumulated in `dtype` (float64 for
    integer input by default), the deviations in the promoted dtype of the input and the mean."""
    refuse_extra_arguments("var", {**kwargs, "out": out})
    x = as_var(a)
    given = dtype
    if dtype is None:
        dtype = P.float_dtype(x.dtype)
    dtype = np.dtype(dtype)
    axes = P.normalize_axes(axis, x.ndim)
    mean = _divide_count(P.reduce_sum(P.convert(x, dtype), axes, True), _count(x, axes), dtype)
    centred = P.sub(x, mean)
    # complex deviations: |x - mean|^2, real (NumPy's var of complex numbers is real, in the
    # parts' dtype unless dtype= says otherwise)
    sum_dtype = P.real_dtype(dtype) if given is None else dtype
    squares = P.reduce_sum(P.convert(abs_squared(centred), sum_dtype), axes, keepdims)
    count = max(_count(x, axes) - ddof, 0)
    if not count:
        return P.div(squares, 0.0)
    return _divide_count(squares, count, sum_dtype)


def abs_squared(x: Var) -> Var:
    """|x|^2: x * x for real values, re^2 + im^2 (real) for complex ones; smooth at 0, unlike
    np.abs."""
    if not P.is_complex(x.dtype):
        return P.mul(x, x)
    re, im = P.real(x), P.imag(x)
    return P.add(P.mul(re, re), P.mul(im, im))


@implements("std")
def standard_deviation(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
    # Where the variance is 0 (one element, or constant data) the standard deviation has a kink,
    # like |t| at 0: its derivative there is 0 at every order (as np.abs's), not 0 * inf = NaN.
    var = variance(a, axis, dtype, out, ddof, keepdims, **kwargs)
    root = _kinked_sqrt(var)
    if P.is_float(var.dtype):
        return root
    if var.ndim:
        raise TypeError(
            f"np.std with the integer dtype {var.dtype} over an axis cannot store its float square "
            f"roots (NumPy raises the same){at_source()}; use a float dtype"
        )
    return P.convert(root, var.dtype)


_SVD_NORMS = (2, -2, "nuc")  # the matrix norms read from the singular values


@implements("linalg.norm")
def norm(x, ord=None, axis=None, keepdims=False):
    """np.linalg.norm: vector norms of every order, and matrix norms of every order (2, -2 and
    'nuc' from the singular values, linalg.svd_s_p)."""
    x = as_var(x)
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
        return P.reshape(out, P.keepdims_shape(x.shape, (ax,))) if keepdims else out
    if len(axis) == 2:
        row, col = [P.normalize_axes(a, x.ndim)[0] for a in axis]
        if row == col:
            raise ValueError(f"Duplicate axes given.{at_source()}")
        out = _matrix_norm(x, ord, row, col)
        return P.reshape(out, P.keepdims_shape(x.shape, (row, col))) if keepdims else out
    raise ValueError(f"Improper number of dimensions to norm.{at_source()}")


def _is_number(ord) -> bool:
    return isinstance(ord, (int, float, np.integer, np.floating)) and not isinstance(ord, bool)


def _kinked_sqrt(v: Var) -> Var:
    """sqrt(v) for a v >= 0 that is a sum of squares (a variance, a norm's square): where v is 0
    the result has a kink like |t|, and its derivative there is 0, not 0 * inf."""
    return P.where(P.compare(P.eq_p, v, 0.0), 0.0, P.unary(P.sqrt_p, v))


def _sqrt_sum_squares(x: Var, axes) -> Var:
    return _kinked_sqrt(P.reduce_sum(abs_squared(x), axes))


def _abs_extremum(prim, x: Var, axis: int) -> Var:
    """max/min of |x| over `axis`; NumPy's max starts at 0, so an empty axis gives 0."""
    if x.shape[axis] == 0 and prim is P.reduce_max_p:
        shape = tuple(d for i, d in enumerate(x.shape) if i != axis)
        return P.const(0, shape, P.real_dtype(x.dtype))
    return P.reduce(prim, P.emit(P.abs_p, x), axis)


def _vector_norm(x: Var, ord, axis: int) -> Var:
    if ord is None:
        return _sqrt_sum_squares(x, axis)
    if not _is_number(ord):
        raise ValueError(f"Invalid norm order {ord!r} for vectors{at_source()}")
    if ord == np.inf:
        return _abs_extremum(P.reduce_max_p, x, axis)
    if ord == -np.inf:
        return _abs_extremum(P.reduce_min_p, x, axis)
    if ord == 0:  # the number of nonzero entries
        return P.reduce_sum(P.convert(P.compare(P.ne_p, x, 0.0), P.real_dtype(x.dtype)), axis)
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
                shape = tuple(d for i, d in enumerate(sums.shape) if i != other)
                return P.const(0, shape, sums.dtype)
            return P.reduce(P.reduce_max_p, sums, other)
        return P.reduce(P.reduce_min_p, sums, other)
    if (_is_number(ord) or isinstance(ord, str)) and ord in _SVD_NORMS:
        rest = [d for d in range(x.ndim) if d not in (row, col)]
        s = P.emit(svd_s_p, P.transpose(x, rest + [row, col]))
        if ord == "nuc":
            return P.reduce_sum(s, s.ndim - 1)
        k = s.shape[-1]
        if k == 0:  # an empty matrix: NumPy's 2-norm is 0 and its -2-norm an error
            if ord == 2:
                return P.const(0, s.shape[:-1], s.dtype)
            raise ValueError(
                f"zero-size array to reduction operation minimum which has no identity{at_source()}"
            )
        lead = tuple((0, d, 1) for d in s.shape[:-1])
        pick = (0, 1, 1) if ord == 2 else (k - 1, k, 1)  # NumPy's singular values descend
        return P.reshape(P.slice_(s, lead + (pick,)), s.shape[:-1])
    raise ValueError(f"Invalid norm order {ord!r} for matrices.{at_source()}")
