"""autograd's `primitive` (a function with hand-written derivative rules), on tracegrad's
`tg.custom_vjp`: outside a trace it is the function itself; inside, its rules give the cotangents.
`isbox` and `getval` answer for tracegrad's traced values."""

from __future__ import annotations

import builtins
import functools
import warnings

import numpy as np
import tracegrad as tg


def traced_type():
    from tracegrad.trace import Tracer

    return Tracer


def isbox(x) -> bool:
    return isinstance(x, traced_type())


def getval(x):
    return x


def _is_dynamic(a) -> bool:
    """Whether an argument of a primitive is a value that may be differentiated."""
    if isinstance(a, (traced_type(), np.ndarray, np.inexact, builtins.float, builtins.complex)):
        return True
    if isinstance(a, (builtins.tuple, builtins.list)) and a:
        return all(_is_dynamic(b) for b in a)
    return False


class Primitive:
    """A function whose derivatives come from rules given with defvjp/defjvp."""

    def __init__(self, fun):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.vjps: dict = {}
        self.vjp_argnum = None
        self.jvps: dict = {}
        self.jvp_argnum = None
        self.zero_vjps: set = set()

    def __repr__(self):
        return f"primitive({getattr(self.fun, '__name__', self.fun)!r})"

    def __get__(self, obj, objtype=None):
        return self if obj is None else functools.partial(self, obj)

    # -- rules

    def vjp_maker(self, argnum):
        if argnum in self.zero_vjps:
            return None
        if argnum in self.vjps:
            return self.vjps[argnum]
        if self.vjp_argnum is not None:
            rule = self.vjp_argnum
            return lambda ans, *args, **kw: rule(argnum, ans, args, kw)
        if argnum in self.jvps or self.jvp_argnum is not None:
            return None
        name = getattr(self.fun, "__name__", repr(self.fun))
        raise NotImplementedError(f"VJP of {name} wrt argnum {argnum} not defined")

    # -- autograd's deprecated spellings

    def defgrad(self, gradmaker, argnum=0):
        warnings.warn("defgrad is deprecated; use defvjp", stacklevel=2)
        self.vjps[argnum] = gradmaker

    def defvjp(self, vjpfun, argnum=0):
        warnings.warn("primitive.defvjp is deprecated; use extend.defvjp", stacklevel=2)
        self.vjps[argnum] = lambda ans, *a, **kw: lambda g: vjpfun(g, ans, None, None, *a, **kw)

    def defvjp_is_zero(self, argnums=(0,)):
        warnings.warn("defvjp_is_zero is deprecated", stacklevel=2)
        self.zero_vjps.update(argnums)

    # -- calls

    def __call__(self, *args, **kwargs):
        dynamic = [i for i, a in enumerate(args) if _is_dynamic(a)]
        if not any(isbox(leaf) for i in dynamic for leaf in tg.tree_leaves(args[i])):
            return self.fun(*args, **kwargs)
        fun, primitive_self = self.fun, self
        statics = [None if i in dynamic else a for i, a in enumerate(args)]

        def full(dyn):
            out = builtins.list(statics)
            for i, value in zip(dynamic, dyn, strict=True):
                out[i] = value
            return out

        def value(*dyn):
            return fun(*full(dyn), **kwargs)

        if not self.vjps and self.vjp_argnum is None and not self.zero_vjps and self.jvps:
            return _jvp_call(self, value, full, dynamic, args, kwargs)

        def fwd(*dyn):
            ans = fun(*full(dyn), **kwargs)
            return ans, (ans, dyn)

        def bwd(res, g):
            ans, dyn = res
            every = full(dyn)
            cts = []
            for i in dynamic:
                maker = primitive_self.vjp_maker(i)
                cts.append(None if maker is None else maker(ans, *every, **kwargs)(g))
            return builtins.tuple(cts)

        rule = tg.custom_vjp(value)
        rule.defvjp(fwd, bwd)
        return rule(*(args[i] for i in dynamic))


def _jvp_call(prim, value, full, dynamic, args, kwargs):
    rule = tg.custom_jvp(value)

    def jvp(primals, tangents):
        every = full(primals)
        ans = prim.fun(*every, **kwargs)
        out = None
        for i, t in zip(dynamic, tangents, strict=True):
            maker = prim.jvps.get(i)
            if maker is None and prim.jvp_argnum is not None:
                term = prim.jvp_argnum(i, t, ans, every, kwargs)
            elif maker is None:
                continue
            else:
                term = maker(t, ans, *every, **kwargs)
            out = term if out is None else out + term
        return ans, (np.zeros_like(ans) if out is None else out)

    rule.defjvp(jvp)
    return rule(*(args[i] for i in dynamic))


def primitive(fun):
    return Primitive(fun)


def notrace_primitive(fun):
    """A function whose result is never differentiated (its inputs are read as values)."""

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        return fun(*(tg.stop_gradient(a) if isbox(a) else a for a in args), **kwargs)

    return wrapped
