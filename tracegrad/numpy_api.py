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
    return P.const(_array(x))


def _o(x: Any):
    """An operand: a value, or a Python number kept weakly typed for NumPy's promotion."""
    if isinstance(x, Var) or (isinstance(x, (bool, int, float)) and not isinstance(x, np.generic)):
        return x
    return P.const(_array(x))


def _array(x: Any) -> np.ndarray:
    arr = np.asarray(x)
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise TypeError(f"cannot use a value of dtype {arr.dtype} in a traced computation{_src()}")
    return arr


def _unary(prim):
    return lambda x: P.unary(prim, _v(x))


def _cmp(prim):
    return lambda a, b: P.compare(prim, _o(a), _o(b))


def _logic(prim):
    return lambda *xs: P.logical(prim, *[_o(x) for x in xs])


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
    "reciprocal": lambda x: P.reciprocal(_v(x)),
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
    "fmax": lambda a, b: P.maximum(_o(a), _o(b)),
    "fmin": lambda a, b: P.minimum(_o(a), _o(b)),
    "less": _cmp(P.lt_p),
    "less_equal": _cmp(P.le_p),
    "greater": _cmp(P.gt_p),
    "greater_equal": _cmp(P.ge_p),
    "equal": _cmp(P.eq_p),
    "not_equal": _cmp(P.ne_p),
    "logical_and": _logic(P.and_p),
    "logical_or": _logic(P.or_p),
    "logical_not": _logic(P.not_p),
    "matmul": lambda a, b: P.matmul(_v(a), _v(b)),
}


# ----------------------------------------------------------------------------------------------
# Reductions


def _no_extra(name: str, kwargs: dict, allowed=()):
    extra = [k for k, v in kwargs.items() if k not in allowed and v is not None and k != "out"]
    if kwargs.get("out") is not None:
        extra.append("out")
    if extra:
        raise TracingError(f"np.{name}: argument(s) {extra} are not supported on traced values{_src()}")


def _reduction(prim, name):
    def handler(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
        _no_extra(name, {**kwargs, "out": out})
        x = _v(a)
        if dtype is not None:
            x = P.convert(x, dtype)
        return P.reduce(prim, x, axis, keepdims)

    return handler


def _mean(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    _no_extra("mean", {**kwargs, "out": out})
    x = _v(a)
    x = P.convert(x, dtype if dtype is not None else P.float_dtype(x.dtype))
    axes = P.normalize_axes(axis, x.ndim)
    count = int(np.prod([x.shape[i] for i in axes], dtype=np.int64))
    total = P.reduce(P.reduce_sum_p, x, axes, keepdims)
    return P.div(total, float(count)) if count else P.mul(total, float("nan"))


def _var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
    _no_extra("var", {**kwargs, "out": out})
    x = P.convert(_v(a), P.float_dtype(_v(a).dtype))
    axes = P.normalize_axes(axis, x.ndim)
    count = int(np.prod([x.shape[i] for i in axes], dtype=np.int64))
    centred = P.sub(x, _mean(x, axes, keepdims=True))
    total = P.reduce(P.reduce_sum_p, P.mul(centred, centred), axes, keepdims)
    return P.div(total, float(max(count - ddof, 0)))


def _std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
    # Where the variance is 0 (one element, or constant data) the standard deviation has a kink,
    # like |t| at 0: its derivative there is 0 at every order (as np.abs's), not 0 * inf = NaN.
    var = _var(a, axis, dtype, out, ddof, keepdims, **kwargs)
    return P.where(P.compare(P.eq_p, var, 0.0), 0.0, P.unary(P.sqrt_p, var))


def _norm(x, ord=None, axis=None, keepdims=False):
    if ord not in (None, 2, "fro") or (ord == 2 and axis is None and _v(x).ndim > 1):
        raise TracingError(f"np.linalg.norm: only the 2-norm / Frobenius norm is supported{_src()}")
    x = _v(x)
    x = P.convert(x, P.float_dtype(x.dtype))
    return P.unary(P.sqrt_p, P.reduce(P.reduce_sum_p, P.mul(x, x), axis, keepdims))


# ----------------------------------------------------------------------------------------------
# Selection and clipping


def _where(condition, x=None, y=None):
    if x is None or y is None:
        raise TracingError(
            f"np.where(condition) with one argument returns data-dependent indices and cannot be "
            f"traced{_src()}; use np.where(condition, a, b)"
        )
    return P.where(_o(condition), _o(x), _o(y))


def _clip(a, a_min=None, a_max=None, out=None, *, min=None, max=None, **kwargs):
    _no_extra("clip", {**kwargs, "out": out})
    lo = a_min if a_min is not None else min
    hi = a_max if a_max is not None else max
    x = _v(a)
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
        return P.const(value, ref.shape if shape is None else tuple(shape), dtype or ref.dtype)

    return handler


def _full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, **kw):
    if not isinstance(fill_value, (int, float, bool, np.generic)):
        raise TracingError(f"np.full_like: the fill value must be a number{_src()}")
    return _filled(fill_value)(a, dtype, order, subok, shape)


# ----------------------------------------------------------------------------------------------
# Linear algebra


def _dot(a, b, out=None):
    a, b = _v(a), _v(b)
    if a.ndim == 0 or b.ndim == 0:
        return P.mul(a, b)
    if a.ndim > 2 or b.ndim > 2:
        raise TracingError(f"np.dot of {a.ndim}-d and {b.ndim}-d values is not supported{_src()}; use np.matmul or np.einsum")
    if a.ndim == 1 and b.ndim == 1:
        if a.shape != b.shape:
            raise ShapeError(f"np.dot: shapes {a.shape} and {b.shape} not aligned{_src()}")
        return P.reduce_sum(P.mul(a, b))
    return P.matmul(a, b)


def _outer(a, b, out=None):
    a, b = _ravel(a), _ravel(b)
    return P.mul(P.reshape(a, (a.size, 1)), P.reshape(b, (1, b.size)))


def _einsum(subscripts, *operands, **kwargs):
    if kwargs.get("out") is not None or not isinstance(subscripts, str):
        raise TracingError(f"np.einsum: only the 'ij,jk->ik' string form is supported{_src()}")
    spec = subscripts.replace(" ", "")
    if "..." in spec:
        raise TracingError(f"np.einsum: '...' is not supported{_src()}; spell out the indices")
    if "->" in spec:
        lhs, out = spec.split("->")
    else:
        lhs = spec
        letters = lhs.replace(",", "")
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    terms = lhs.split(",")
    xs = [_v(x) for x in operands]
    if len(terms) != len(xs) or len(xs) not in (1, 2):
        raise TracingError(f"np.einsum: one or two operands are supported, got {len(xs)}{_src()}")
    for term, x in zip(terms, xs):
        if len(term) != x.ndim or len(set(term)) != len(term):
            raise TracingError(
                f"np.einsum: subscripts {term!r} do not fit a {x.ndim}-d operand, or repeat an "
                f"index (diagonals are not supported){_src()}"
            )
    if len(xs) == 1:
        (term,), (x,) = terms, xs
        x = P.reduce_sum(x, tuple(i for i, c in enumerate(term) if c not in out))
        kept = [c for c in term if c in out]
        return P.transpose(x, [kept.index(c) for c in out])
    return _einsum2(terms[0], terms[1], out, *xs)


def _einsum2(ta: str, tb: str, out: str, a: Var, b: Var) -> Var:
    """Two-operand einsum as one batched matrix product: a -> [batch, free_a, contracted]."""
    dtype = P._result_dtype([a, b])
    a, b = P.convert(a, dtype), P.convert(b, dtype)
    # indices summed in one operand only are summed first
    a = P.reduce_sum(a, tuple(i for i, c in enumerate(ta) if c not in tb and c not in out))
    ta = "".join(c for c in ta if c in tb or c in out)
    b = P.reduce_sum(b, tuple(i for i, c in enumerate(tb) if c not in ta and c not in out))
    tb = "".join(c for c in tb if c in ta or c in out)
    size = {}
    for term, x in ((ta, a), (tb, b)):
        for c, d in zip(term, x.shape):
            if size.setdefault(c, d) != d:
                raise ShapeError(f"np.einsum: index {c!r} has sizes {size[c]} and {d}{_src()}")
    batch = [c for c in ta if c in tb and c in out]
    contracted = [c for c in ta if c in tb and c not in out]
    free_a = [c for c in ta if c not in tb]
    free_b = [c for c in tb if c not in ta]
    n = lambda cs: int(np.prod([size[c] for c in cs], dtype=np.int64))
    a3 = P.reshape(P.transpose(a, [ta.index(c) for c in batch + free_a + contracted]),
                   (n(batch), n(free_a), n(contracted)))
    b3 = P.reshape(P.transpose(b, [tb.index(c) for c in batch + contracted + free_b]),
                   (n(batch), n(contracted), n(free_b)))
    r = P.emit(P.matmul_p, a3, b3)
    order = batch + free_a + free_b
    r = P.reshape(r, tuple(size[c] for c in order))
    return P.transpose(r, [order.index(c) for c in out])


# ----------------------------------------------------------------------------------------------
# Shapes


def _ravel(a, order="C"):
    x = _v(a)
    return P.reshape(x, (x.size,))


def _reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    x = _v(a)
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
        raise ShapeError(f"cannot reshape a value of shape {x.shape} (size {x.size}) into {shape}{_src()}")
    return P.reshape(x, shape)


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
    dst = [d % x.ndim for d in np.atleast_1d(destination)]
    order = [i for i in range(x.ndim) if i not in src]
    for d, s in sorted(zip(dst, src)):
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
                raise ValueError(f"cannot select an axis to squeeze out which has size not equal to one{_src()}")
    return P.reshape(x, tuple(d for i, d in enumerate(x.shape) if i not in axes))


def _broadcast_to(a, shape, subok=False):
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    return P.broadcast_to(_v(a), shape)


def _concatenate(arrays, axis=0, out=None, dtype=None, **kw):
    xs = [_v(x) for x in arrays]
    if not xs:
        raise ValueError("need at least one array to concatenate")
    if axis is None:
        xs, axis = [P.reshape(x, (x.size,)) for x in xs], 0
    ndim = xs[0].ndim
    if ndim == 0:
        raise ValueError(f"zero-dimensional arrays cannot be concatenated{_src()}")
    axis = P.normalize_axes(axis, ndim)[0]
    for x in xs:
        if x.ndim != ndim or any(d != e for i, (d, e) in enumerate(zip(x.shape, xs[0].shape)) if i != axis):
            raise ShapeError(
                f"concatenate: shapes {[v.shape for v in xs]} differ outside axis {axis}{_src()}"
            )
    if dtype is not None:
        xs = [P.convert(x, dtype) for x in xs]
    return P.concatenate(xs, axis)


def _stack(arrays, axis=0, out=None, **kw):
    xs = [_v(x) for x in arrays]
    if not xs:
        raise ValueError("need at least one array to stack")
    if len({x.shape for x in xs}) != 1:
        raise ShapeError(f"stack: all input arrays must have the same shape, got {[x.shape for x in xs]}{_src()}")
    axis = P.normalize_axes(axis, xs[0].ndim + 1)[0]
    return P.concatenate([_expand_dims(x, axis) for x in xs], axis)


def _hstack(arrays, **kw):
    xs = [_v(x) for x in arrays]
    return _concatenate(xs, axis=0 if xs[0].ndim == 1 else 1)


def _vstack(arrays, **kw):
    xs = [_v(x) for x in arrays]
    xs = [P.reshape(x, (1, x.size)) if x.ndim < 2 else x for x in xs]
    return _concatenate(xs, axis=0)


def _getitem(x: Var, index) -> Var:
    """Basic indexing: ints, slices, None and Ellipsis, all static."""
    if not isinstance(index, tuple):
        index = (index,)
    for item in index:
        if not (item is None or item is Ellipsis or isinstance(item, (int, np.integer, slice))):
            kind = "an array" if isinstance(item, (Var, list)) else f"a {type(item).__name__}"
            raise TracingError(
                f"indexing a traced value with {kind} is not supported{_src()}; "
                "only static ints, slices, None and ... (no arrays or traced indices)"
            )
        if isinstance(item, slice) and any(
            p is not None and not isinstance(p, (int, np.integer)) for p in (item.start, item.stop, item.step)
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
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}{_src()}")
            i %= n
            ranges.append((i, i + 1, 1))
        axis += 1
    return P.reshape(P.slice_(x, tuple(ranges)), tuple(out_shape))


def _shape(a):
    return _v(a).shape


def _ndim(a):
    return _v(a).ndim


def _size(a, axis=None):
    x = _v(a)
    return x.size if axis is None else x.shape[axis]


FUNCTIONS = {
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
    "inner": lambda a, b: _einsum("i,i->", a, b) if _v(a).ndim == 1 else _dot(a, P.transpose(_v(b))),
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
    "shape": _shape,
    "ndim": _ndim,
    "size": _size,
    "copy": lambda a, **kw: _v(a),
    "real": lambda a: _v(a),
}

# The names users may look up (docs/api.md lists them).
SUPPORTED = sorted(set(UFUNCS) | set(FUNCTIONS))
