"""NumPy's products on traced values (stage: tracing): dot, vdot, inner, outer and einsum, lowered to
the matrix product primitive and elementwise products.
"""

from __future__ import annotations

import numpy as np

from .. import primitives as P
from ..base.errors import ShapeError, TracingError
from ..ir import Var
from .diagonals import diagonal
from ..tracing.dispatch import implements, register_ufunc
from ..tracing.source import at_source
from .operands import as_var
from .shapes import ravel

# ----------------------------------------------------------------------------------------------
# Linear algebra


@implements("dot")
def dot(a, b, out=None):
    """np.dot: a product with a scalar; the inner product of vectors; otherwise the sum over the
    last axis of `a` and the second-to-last of `b` (the last, for a vector), in the operands'
    promoted dtype."""
    if out is not None:
        raise TracingError(f"np.dot(..., out=...) is not supported on traced values{at_source()}")
    a, b = as_var(a), as_var(b)
    if a.ndim == 0 or b.ndim == 0:
        return P.mul(a, b)
    k = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if a.shape[-1] != k:
        raise ShapeError(
            f"shapes {a.shape} and {b.shape} not aligned: {a.shape[-1]} (dim {a.ndim - 1}) != "
            f"{k} (dim {max(b.ndim - 2, 0)}){at_source()}"
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


@implements("vdot")
def vdot(a, b):
    """np.vdot: the dot product of the flattened operands, the first conjugated (as NumPy's)."""
    return dot(P.conj(ravel(a)), ravel(b))


@implements("inner")
def inner(a, b):
    """np.inner: contracts the last axis of `a` with the last axis of `b` (the result's shape is
    a.shape[:-1] + b.shape[:-1]); a scalar operand multiplies."""
    a, b = as_var(a), as_var(b)
    if a.ndim == 0 or b.ndim == 0:
        return P.mul(a, b)
    if a.shape[-1] != b.shape[-1]:
        raise ShapeError(
            f"shapes {a.shape} and {b.shape} not aligned: {a.shape[-1]} (dim {a.ndim - 1}) != "
            f"{b.shape[-1]} (dim {b.ndim - 1}){at_source()}"
        )
    dtype = P.result_dtype([a, b])
    k = a.shape[-1]
    a2 = P.reshape(P.convert(a, dtype), (_prod(a.shape[:-1]), k))
    b2 = P.reshape(P.convert(b, dtype), (_prod(b.shape[:-1]), k))
    return P.reshape(P.matmul(a2, P.transpose(b2)), a.shape[:-1] + b.shape[:-1])


@implements("outer")
def outer(a, b, out=None):
    a, b = ravel(a), ravel(b)
    return P.mul(P.reshape(a, (a.size, 1)), P.reshape(b, (1, b.size)))


def _einsum_from_sublists(args) -> tuple[str, list]:
    """np.einsum(a, [0, 1], b, [1, 2], [0, 2]): the operand / index-list form as a string."""
    # NumPy's labels: 0-25 are A-Z and 26-51 are a-z, so an implicit output is in numeric order
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

    def label(i) -> str:
        if not 0 <= int(i) < len(letters):
            raise ValueError(f"np.einsum: subscript {i} is not in [0, 52){at_source()}")
        return letters[int(i)]

    def term(sub) -> str:
        return "".join("..." if i is Ellipsis else label(i) for i in sub)

    operands, terms = list(args[0::2]), [term(s) for s in args[1::2]]
    out = None
    if len(args) % 2 == 1:  # a trailing output list
        out = term(args[-1])
        operands = operands[:-1] if len(operands) > len(terms) else operands
    spec = ",".join(terms[: len(operands)])
    return (spec + "->" + out if out is not None else spec), operands


@implements("einsum")
def einsum(subscripts, *operands, **kwargs):
    """np.einsum in full: the string and the operand/index-list forms, '...', repeated indices
    (diagonals), any number of operands, contracted pairwise in a greedy order (the pair whose
    result is smallest first), each pair as one batched matrix product."""
    if kwargs.pop("out", None) is not None:
        raise TracingError(
            f"np.einsum(..., out=...) is not supported on traced values{at_source()}"
        )
    wanted, casting = kwargs.pop("dtype", None), kwargs.pop("casting", "safe")
    kwargs.pop("order", None)  # the memory layout of the result: values are the same
    kwargs.pop("optimize", None)  # the contraction order is chosen here
    if kwargs:
        raise TypeError(f"np.einsum() got an unexpected keyword argument {next(iter(kwargs))!r}")
    if not isinstance(subscripts, str):
        subscripts, operands = _einsum_from_sublists((subscripts, *operands))
    spec = subscripts.replace(" ", "")
    lhs, out = spec.split("->") if "->" in spec else (spec, None)
    terms = lhs.split(",")
    xs = [as_var(x) for x in operands]
    if len(terms) != len(xs):
        raise ValueError(f"np.einsum: {len(terms)} subscripts for {len(xs)} operands{at_source()}")
    for t in terms:
        if any(not (c.isascii() and c.isalpha()) for c in t.replace("...", "")):
            raise ValueError(
                f"np.einsum: invalid subscript in {t!r}: use letters a-z, A-Z{at_source()}"
            )
    # '...': as many fresh labels as the operand has dimensions beyond its letters (characters
    # no subscript can use, so they never meet the user's own letters)
    spare = (chr(0x100 + k) for k in range(64))
    widest = max(
        (x.ndim - (len(t) - 3) for t, x in zip(terms, xs, strict=True) if "..." in t), default=0
    )
    ellipsis = "".join(next(spare) for _ in range(widest))
    for k, (t, x) in enumerate(zip(terms, xs, strict=True)):
        if "..." in t:
            n = x.ndim - (len(t) - 3)
            terms[k] = t.replace("...", ellipsis[widest - n :])
        if len(terms[k]) != x.ndim:
            raise ValueError(
                f"np.einsum: subscripts {t!r} do not fit a {x.ndim}-d operand{at_source()}"
            )
    if out is None:
        letters = "".join(terms)
        # NumPy: the broadcast dimensions, then each letter used once, in order (A-Z, a-z)
        out = ellipsis + "".join(
            sorted(c for c in set(letters) if letters.count(c) == 1 and c not in ellipsis)
        )
    else:
        if ellipsis and "..." not in out:
            raise ValueError(
                "np.einsum: output has more dimensions than subscripts given in einstein sum, but "
                f"no '...' ellipsis provided to broadcast the extra dimensions{at_source()}"
            )
        out = out.replace("...", ellipsis)
    if len(set(out)) != len(out):
        raise ValueError(f"np.einsum: an output index appears twice in {out!r}{at_source()}")
    # repeated indices within one operand: take its diagonal first
    for k in range(len(xs)):
        t, x = terms[k], xs[k]
        while len(set(t)) != len(t):
            c = next(c for c in t if t.count(c) > 1)
            first, second = t.index(c), t.index(c, t.index(c) + 1)
            x = diagonal(x, 0, first, second)  # that axis moves to the end
            t = "".join(ch for i, ch in enumerate(t) if i not in (first, second)) + c
        terms[k], xs[k] = t, x
    dtype = P.result_dtype(xs) if wanted is None else np.dtype(wanted)
    for x in xs:
        if wanted is not None and not np.can_cast(x.dtype, dtype, casting):
            raise TypeError(
                f"np.einsum: cannot cast array data from {x.dtype} to {dtype} according to the "
                f"rule {casting!r}{at_source()}; pass casting='unsafe' (or 'same_kind') to allow it"
            )
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
        raise ValueError(
            f"np.einsum: output index {missing[0]!r} appears in no operand{at_source()}"
        )
    x = P.reduce_sum(x, tuple(i for i, c in enumerate(term) if c not in out))
    kept = [c for c in term if c in out]
    # NumPy's einsum keeps the operands' type (np.sum would widen small integers)
    return P.convert(P.transpose(x, [kept.index(c) for c in out]), dtype)


def _einsum2(ta: str, tb: str, out: str, a: Var, b: Var) -> Var:
    """Two-operand einsum as one batched matrix product: a -> [batch, free_a, contracted]."""
    dtype = P.result_dtype([a, b])
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
                raise ShapeError(f"np.einsum: index {c!r} has sizes {size[c]} and {d}{at_source()}")
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


# ---- NumPy 2's vector gufuncs: vecdot, matvec, vecmat (core dimensions must agree exactly;
# vecdot and vecmat conjugate their vector, as NumPy's do)


def _core(a: Var, b: Var, name: str, n_a: int, n_b: int) -> None:
    """The contracted lengths: a's last with b's last (b's next to last for vecmat)."""
    contracted = b.shape[-2] if name == "vecmat" and b.ndim >= 2 else b.shape[-1:]
    if a.ndim < n_a or b.ndim < n_b or (a.shape[-1],) != tuple(np.atleast_1d(contracted)):
        raise ValueError(
            f"np.{name}: core dimensions do not match: shapes {a.shape} and {b.shape}{at_source()}"
        )


def vecdot(a, b):
    """sum(conj(a) * b) over the last axis."""
    a, b = as_var(a), as_var(b)
    _core(a, b, "vecdot", 1, 1)
    return _sum_last(P.mul(P.conj(a), b))


def _sum_last(x: Var) -> Var:
    return P.reduce_sum(x, (x.ndim - 1,))


def matvec(m, v):
    """m @ v over the last two axes of m and the last of v (no conjugate)."""
    m, v = as_var(m), as_var(v)
    _core(m, v, "matvec", 2, 1)
    return _sum_last(P.mul(m, P.reshape(v, v.shape[:-1] + (1, v.shape[-1]))))


def vecmat(v, m):
    """conj(v) @ m over the last axis of v and the last two of m."""
    v, m = as_var(v), as_var(m)
    _core(v, m, "vecmat", 1, 2)
    column = P.reshape(P.conj(v), v.shape[:-1] + (v.shape[-1], 1))
    product = P.mul(column, m)
    return P.reduce_sum(product, (product.ndim - 2,))


register_ufunc("vecdot", vecdot)
register_ufunc("matvec", matvec)
register_ufunc("vecmat", vecmat)
