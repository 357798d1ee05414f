"""autograd.extend: derivative rules for primitives (`defvjp`, `defjvp` and their variants)."""

from __future__ import annotations

from .core import JVPNode as JVPNode
from .core import VJPNode as VJPNode
from .core import VSpace as VSpace
from .core import _Internal
from .core import vspace as vspace
from .tracer import Primitive
from .tracer import notrace_primitive as notrace_primitive
from .tracer import primitive as primitive

Box = _Internal("Box")
SparseObject = _Internal("SparseObject")
register_notrace = _Internal("register_notrace")


def _check(fun):
    if not isinstance(fun, Primitive):
        raise TypeError(f"{fun!r} is not a primitive: wrap it with autograd.extend.primitive first")


def defvjp(fun, *vjpmakers, argnums=None):
    _check(fun)
    for argnum, maker in zip(argnums or range(len(vjpmakers)), vjpmakers, strict=True):
        if maker is None:
            fun.zero_vjps.add(argnum)
        else:
            fun.vjps[argnum] = maker
            fun.zero_vjps.discard(argnum)


def defvjp_argnum(fun, vjpmaker):
    _check(fun)
    fun.vjp_argnum = vjpmaker


def defvjp_argnums(fun, vjpmaker):
    _check(fun)

    def one(argnum, ans, args, kwargs):
        return lambda g: vjpmaker([argnum], ans, args, kwargs)(g)[0]

    fun.vjp_argnum = one


def defjvp(fun, *jvpfuns, argnums=None):
    _check(fun)
    for argnum, jvp in zip(argnums or range(len(jvpfuns)), jvpfuns, strict=True):
        if jvp is not None:
            fun.jvps[argnum] = jvp


def defjvp_argnum(fun, jvpmaker):
    _check(fun)
    fun.jvp_argnum = jvpmaker


def def_linear(fun):
    _check(fun)

    def jvp(argnum, g, ans, args, kwargs):
        args = list(args)
        args[argnum] = g
        return fun.fun(*args, **kwargs)

    fun.jvp_argnum = jvp
