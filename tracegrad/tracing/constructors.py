"""NumPy's array constructors and SciPy's softmax family on traced values, while a function is
traced.

`np.array([a, b])`, `np.asarray(...)`, `np.full(shape, a)` and `np.r_[...]`/`np.c_[...]` take no
array argument that NumPy would dispatch on, and scipy.special's `logsumexp`, `softmax` and
`log_softmax` are Python functions that convert their argument with `np.asarray`. For the duration
of a trace (`traced_constructors`, the registry's hook that trace.trace enters) these names are
redirected to a dispatcher that builds a traced value when a traced value is among the arguments
and calls the original otherwise: code outside the trace, and other threads, get NumPy's and
SciPy's own results. The redirection is undone when the outermost trace ends.

SciPy's functions are redirected in place (the function object runs a trampoline to the
dispatcher while tracing), so a reference taken before the trace (`from scipy.special import
logsumexp`) reaches the traced version too. SciPy stays optional: nothing is imported from it
here, and only functions of an already imported scipy.special are redirected.

NumPy dispatches `np.sum([a, b * b])` to no one: its dispatcher does not look inside a list, and
its implementation converts the list, asking each traced value for an array. So the Python
implementations of the traced NumPy functions are redirected in place too (`_list_redirects`):
given a list or tuple that holds a traced value, they answer as `Tracer.__array_function__` would
have, had NumPy dispatched to it; every other call runs NumPy's own code. Functions written in C
(np.dot, np.where, np.inner) and ufuncs (np.exp) cannot be redirected in place: a list of traced
values reaches them only beside a traced argument (`np.dot([a, b], x)`), and is refused otherwise
with the hint to build the array first (tracing/messages.py).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
import types
from typing import Any

import numpy as np

from .. import primitives as P
from ..ir import Var
from ..numpy_namespace.operands import as_var
from ..trace import Tracer, traced_call
from .dispatch import FUNCTIONS, provides
from .fillable import CONSTRUCTORS, Fillable, fillable_constructor, holds_traced
from .source import at_source

_lock = threading.Lock()
_depth = 0
_restore: list[Any] = []


def _has_tracer(obj: Any) -> bool:
    """Whether `obj` is or holds a traced value (a promoted Fillable counts)."""
    return holds_traced(obj)


# ---- np.array, np.asarray, np.full, np.r_, np.c_


def _array_value(obj, dtype=None, ndmin=0) -> Var:
    if dtype is not None and np.dtype(dtype).kind not in "biuf":
        raise TypeError(
            f"cannot use a value of dtype {np.dtype(dtype)} in a traced computation{at_source()}"
        )
    x = as_var(obj)  # a nested list of values (traced, arrays, numbers) is stacked
    if dtype is not None:
        x = P.convert(x, dtype)
    if x.ndim < ndmin:
        x = P.reshape(x, (1,) * (ndmin - x.ndim) + x.shape)
    return x


def _array(original):
    def array(object, dtype=None, *args, copy=True, order="K", subok=False, ndmin=0, like=None):
        if not _has_tracer(object) or args or like is not None:
            return original(
                object, dtype, *args, copy=copy, order=order, subok=subok, ndmin=ndmin, like=like
            )
        return traced_call(_array_value, object, dtype, ndmin)  # a new tracer: a copy, as NumPy's

    return array


def _asarray(original):
    def asarray(a, dtype=None, order=None, **kwargs):
        if isinstance(a, Fillable) and not _has_tracer(a) and dtype in (None, a.dtype):
            return a  # the array itself (NumPy's would be a plain view, blind to later writes)
        if not _has_tracer(a) or kwargs.get("like") is not None:
            return original(a, dtype, order, **kwargs)
        if isinstance(a, Tracer) and (dtype is None or np.dtype(dtype) == a.dtype):
            return a  # the array itself, as NumPy's asarray returns it
        return traced_call(_array_value, a, dtype)

    return asarray


def _full(original):
    def full(shape, fill_value, dtype=None, order="C", **kwargs):
        if not isinstance(fill_value, Tracer) or kwargs.get("like") is not None:
            return original(shape, fill_value, dtype, order, **kwargs)
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)

        def fill(v):
            v = P.convert(v, dtype) if dtype is not None else v
            if v.ndim > len(shape) or np.broadcast_shapes(v.shape, shape) != shape:
                raise ValueError(
                    f"could not broadcast fill value of shape {v.shape} into {shape}{at_source()}"
                )
            return P.broadcast_to(P.reshape(v, (1,) * (len(shape) - v.ndim) + v.shape), shape)

        return traced_call(fill, fill_value)

    return full


# ---- scipy.special.logsumexp, softmax, log_softmax


def _axes(x: Var, axis) -> tuple[int, ...]:
    return P.normalize_axes(axis, x.ndim)


def _shifted(x: Var, axes) -> tuple[Var, Var]:
    """x - m with m the (finite) maximum over `axes`, kept with size-1 axes; m carries no
    derivative (the result does not depend on it), so every order stays exact."""
    m = P.reduce(P.reduce_max_p, x, axes, keepdims=True)
    m = P.where(P.emit(P.isfinite_p, m), m, P.const(0, m.shape, m.dtype))
    m = P.emit(P.stop_gradient_p, m)
    return P.sub(x, P.broadcast_to(m, x.shape)), m


def _float(a) -> Var:
    x = as_var(a)
    return P.convert(x, P.float_dtype(x.dtype))


def _logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    x = _float(a)
    if b is not None:
        w = as_var(b)
        dtype = P.result_dtype([x, w]) if P.is_float(w.dtype) else x.dtype
        shape = P.broadcast_shapes(x.shape, w.shape, op="logsumexp")
        x = P.broadcast_to(P.convert(x, dtype), shape)
        w = P.broadcast_to(P.convert(w, dtype), shape)
    axes = _axes(x, axis)
    shifted, m = _shifted(x, axes)
    terms = P.unary(P.exp_p, shifted)
    if b is not None:
        terms = P.mul(terms, w)
    total = P.reduce_sum(terms, axes, keepdims=True)
    sign = None
    if return_sign:
        sign = P.emit(P.sign_p, total)
        total = P.emit(P.abs_p, total)
    out = P.add(P.unary(P.log_p, total), m)
    if not keepdims:
        kept = tuple(d for i, d in enumerate(out.shape) if i not in axes)
        out = P.reshape(out, kept)
        sign = None if sign is None else P.reshape(sign, kept)
    return (out, sign) if return_sign else out


def _softmax(x, axis=None):
    x = _float(x)
    axes = _axes(x, axis)
    e = P.unary(P.exp_p, _shifted(x, axes)[0])
    return P.div(e, P.broadcast_to(P.reduce_sum(e, axes, keepdims=True), e.shape))


def _log_softmax(x, axis=None):
    x = _float(x)
    axes = _axes(x, axis)
    shifted = _shifted(x, axes)[0]
    total = P.reduce_sum(P.unary(P.exp_p, shifted), axes, keepdims=True)
    return P.sub(shifted, P.broadcast_to(P.unary(P.log_p, total), shifted.shape))


SCIPY_FUNCTIONS = {"logsumexp": _logsumexp, "softmax": _softmax, "log_softmax": _log_softmax}


def _trampoline(*args, __tracegrad_dispatch__=None, **kwargs):
    return __tracegrad_dispatch__(*args, **kwargs)


class _InPlace:
    """A redirection of the function object `fn`: it calls `traced(*args, **kwargs)` when a traced
    value is among its arguments, its original code otherwise. Built once, installed per trace."""

    __slots__ = ("fn", "redirected", "saved")

    def __init__(self, fn, traced):
        self.fn = fn
        self.saved = (fn.__code__, fn.__defaults__, fn.__kwdefaults__)
        original = type(fn)(
            fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
        )
        original.__kwdefaults__ = fn.__kwdefaults__

        def dispatch(*args, **kwargs):
            if _has_tracer(args) or _has_tracer(tuple(kwargs.values())):
                return traced(*args, **kwargs)
            return original(*args, **kwargs)

        self.redirected = (_trampoline.__code__, None, {"__tracegrad_dispatch__": dispatch})

    def install(self):
        """Redirect `fn`; returns what undoes it."""
        fn = self.fn
        fn.__code__, fn.__defaults__, fn.__kwdefaults__ = self.redirected
        return self.undo

    def undo(self):
        fn = self.fn
        fn.__code__, fn.__defaults__, fn.__kwdefaults__ = self.saved


def _redirectable(fn) -> bool:
    return isinstance(fn, types.FunctionType) and not fn.__code__.co_freevars


def _scipy_redirects() -> list:
    module = sys.modules.get("scipy.special")
    undo = []
    if module is None:
        return undo
    for name, traced in SCIPY_FUNCTIONS.items():
        fn = getattr(module, name, None)
        if _redirectable(fn):  # else not a plain Python function here: left as it is
            undo.append(_InPlace(fn, functools.partial(traced_call, traced)).install())
    return undo


# ---- np.sum([a, b * b]): NumPy functions given a list of traced values


def _first_tracer(obj: Any) -> Tracer | None:
    """The first traced value in `obj`, also inside lists and tuples (a promoted Fillable's)."""
    if isinstance(obj, Fillable):
        obj = obj._tracegrad_current()
    if isinstance(obj, Tracer):
        return obj
    for item in obj if isinstance(obj, (list, tuple)) else ():
        found = _first_tracer(item)
        if found is not None:
            return found
    return None


def _as_dispatched(public):
    """What NumPy's function `public` answers for arguments that hold traced values in lists:
    what NumPy would have called, had its dispatcher looked inside them."""

    def traced(*args, **kwargs):
        tracer = _first_tracer((args, tuple(kwargs.values())))
        return tracer.__array_function__(public, (Tracer,), args, kwargs)

    return traced


@functools.cache
def _list_functions() -> tuple:
    """The NumPy functions with a traced version (the registry's FUNCTIONS) whose implementation is a
    plain Python function, with how each answers for traced values in lists (found once)."""
    found = {}  # by implementation: np.amax and np.max share one
    for name in FUNCTIONS:
        public = functools.reduce(lambda obj, part: getattr(obj, part, None), name.split("."), np)
        fn = getattr(public, "_implementation", None)
        if _redirectable(fn) and fn not in found:
            found[fn] = _InPlace(fn, _as_dispatched(public))
    return tuple(found.values())


def _list_redirects() -> list:
    return [redirect.install() for redirect in _list_functions()]


def _install() -> list:
    undo = _list_redirects()  # first: it finds np.zeros_like... before they are redirected below
    redirects = {name: fillable_constructor for name in CONSTRUCTORS}
    redirects.update(array=_array, asarray=_asarray, asanyarray=_asarray)
    redirects["full"] = lambda original: fillable_constructor(_full(original))
    for name, make in redirects.items():
        module, original = np, getattr(np, name)
        setattr(module, name, make(original))
        undo.append(
            lambda module=module, name=name, original=original: setattr(module, name, original)
        )
    # np.r_ and np.c_ build their result with the `array` of their own module
    tricks = sys.modules.get("numpy.lib._index_tricks_impl")
    if tricks is not None and hasattr(tricks, "array"):
        original = tricks.array
        tricks.array = _array(original)
        undo.append(lambda: setattr(tricks, "array", original))
    return undo + _scipy_redirects()


@provides("traced_constructors")
@contextlib.contextmanager
def traced_constructors():
    """NumPy's constructors and SciPy's softmax family accept traced values inside this block
    (the outermost of nested blocks installs and removes the redirections)."""
    global _depth, _restore
    with _lock:
        if _depth == 0:
            _restore = _install()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for undo in reversed(_restore):
                    undo()
                _restore = []
