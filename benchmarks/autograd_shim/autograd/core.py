"""autograd's unary `make_vjp` and `make_jvp`, on tracegrad's `tg.vjp` and `tg.jvp`.

A traced function's cotangents follow tracegrad's complex convention (JAX's, and autograd's):
the VJP is the transpose of the JVP under the bilinear pairing <a, b> = Re(sum(a * b)).
"""

from __future__ import annotations

import numpy as np
import tracegrad as tg

from .tracer import primitive as primitive
from .tracer import traced_type


class _Internal:
    """A name of autograd's machinery that tracegrad has no counterpart for."""

    def __init__(self, name: str):
        self._name = name

    def _refuse(self, *args, **kwargs):
        raise NotImplementedError(
            f"autograd internals: {self._name} is part of autograd's own machinery "
            "(vector spaces, boxes, its tracer's graph), which tracegrad does not have"
        )

    __call__ = _refuse
    __getitem__ = _refuse
    __setitem__ = _refuse
    __contains__ = _refuse

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        self._refuse()


vspace = _Internal("vspace")
primitive_vjps = _Internal("primitive_vjps")
primitive_jvps = _Internal("primitive_jvps")
VSpace = _Internal("VSpace")
VJPNode = _Internal("VJPNode")
JVPNode = _Internal("JVPNode")


def dtype_of(value):
    dtype = getattr(value, "dtype", None)
    return np.dtype(dtype) if dtype is not None else np.result_type(value)


def like(value, fill):
    """An array of `fill` (a number) shaped and typed like each leaf of `value`."""
    return tg.tree_map(lambda a: np.full(np.shape(a), fill, dtype_of(a)), value)


def _as_cotangent(g, ans):
    """A cotangent given as Python numbers or lists, as arrays shaped and typed like `ans`."""

    def one(gl, al):
        if isinstance(gl, traced_type()):
            return gl
        gl = np.asarray(gl)
        shape = np.shape(al)
        if gl.shape != shape and gl.size == int(np.prod(shape)):
            gl = gl.reshape(shape)
        dtype = dtype_of(al)
        if np.iscomplexobj(gl) and not np.issubdtype(dtype, np.complexfloating):
            return gl
        return gl.astype(dtype, copy=False)

    g_leaves, g_tree = tg.tree_flatten(g)
    a_leaves, a_tree = tg.tree_flatten(ans)
    if g_tree != a_tree:
        return g
    return tg.tree_unflatten(
        a_tree, [one(gl, al) for gl, al in zip(g_leaves, a_leaves, strict=True)]
    )


def make_vjp(fun, x):
    """(vjp, fun(x)): vjp(g) is the cotangent of x for the cotangent g of fun(x)."""
    ans, f_vjp = tg.vjp(fun, x)

    def vjp(g):
        g = _as_cotangent(g, ans)
        if any(isinstance(leaf, traced_type()) for leaf in tg.tree_leaves(g)):
            # Applied inside another trace (a vjp of this vjp): tracegrad's f_vjp holds the
            # residuals of the call above, so the vjp at x is traced afresh in this trace.
            return tg.vjp(fun, x)[1](g)[0]
        return f_vjp(g)[0]

    return vjp, ans


def make_jvp(fun, x):
    """jvp(v) -> (fun(x), the tangent of fun(x) for the tangent v of x)."""

    def jvp(v):
        return tg.jvp(fun, (x,), (_as_cotangent(v, x),))

    return jvp
