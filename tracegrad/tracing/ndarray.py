"""ndarray's operators and methods on a tracer (stage: tracing): Python's operators as NumPy's
ufuncs (x + y is np.add(x, y)), comparisons, bitwise and logical operators, each the registry's
ufunc handler (dispatch.UFUNCS, looked up when called), and the methods of ndarray through the
NumPy functions of the same names. `Tracer` (trace.py) inherits them and supplies `_apply`, which
runs a handler on traced arguments.
"""

from __future__ import annotations

import numpy as np

from .dispatch import UFUNCS


class NdarrayInterface:
    """The operators and methods; the class using it defines `_apply(fn, *args, **kwargs)`."""

    __slots__ = ()

    # ---- operators: NumPy's ufuncs (x + y is np.add(x, y))
    def __add__(self, o):
        return self._apply(UFUNCS["add"], self, o)

    def __radd__(self, o):
        return self._apply(UFUNCS["add"], o, self)

    def __sub__(self, o):
        return self._apply(UFUNCS["subtract"], self, o)

    def __rsub__(self, o):
        return self._apply(UFUNCS["subtract"], o, self)

    def __mul__(self, o):
        return self._apply(UFUNCS["multiply"], self, o)

    def __rmul__(self, o):
        return self._apply(UFUNCS["multiply"], o, self)

    def __truediv__(self, o):
        return self._apply(UFUNCS["divide"], self, o)

    def __rtruediv__(self, o):
        return self._apply(UFUNCS["divide"], o, self)

    def __pow__(self, o):
        return self._apply(UFUNCS["power"], self, o)

    def __rpow__(self, o):
        return self._apply(UFUNCS["power"], o, self)

    def __matmul__(self, o):
        return self._apply(UFUNCS["matmul"], self, o)

    def __rmatmul__(self, o):
        return self._apply(UFUNCS["matmul"], o, self)

    def __neg__(self):
        return self._apply(UFUNCS["negative"], self)

    def __abs__(self):
        return self._apply(UFUNCS["absolute"], self)

    def __lt__(self, o):
        return self._apply(UFUNCS["less"], self, o)

    def __le__(self, o):
        return self._apply(UFUNCS["less_equal"], self, o)

    def __gt__(self, o):
        return self._apply(UFUNCS["greater"], self, o)

    def __ge__(self, o):
        return self._apply(UFUNCS["greater_equal"], self, o)

    def __eq__(self, o):
        return self._apply(UFUNCS["equal"], self, o)  # type: ignore[override]

    def __ne__(self, o):
        return self._apply(UFUNCS["not_equal"], self, o)  # type: ignore[override]

    # bitwise on integers, logical on bools, as NumPy's & | ^ ~
    def __and__(self, o):
        return self._apply(UFUNCS["bitwise_and"], self, o)

    def __rand__(self, o):
        return self._apply(UFUNCS["bitwise_and"], o, self)

    def __or__(self, o):
        return self._apply(UFUNCS["bitwise_or"], self, o)

    def __ror__(self, o):
        return self._apply(UFUNCS["bitwise_or"], o, self)

    def __xor__(self, o):
        return self._apply(UFUNCS["bitwise_xor"], self, o)

    def __rxor__(self, o):
        return self._apply(UFUNCS["bitwise_xor"], o, self)

    def __invert__(self):
        return self._apply(UFUNCS["invert"], self)

    def __floordiv__(self, o):
        return self._apply(UFUNCS["floor_divide"], self, o)

    def __rfloordiv__(self, o):
        return self._apply(UFUNCS["floor_divide"], o, self)

    def __mod__(self, o):
        return self._apply(UFUNCS["remainder"], self, o)

    def __rmod__(self, o):
        return self._apply(UFUNCS["remainder"], o, self)

    def __divmod__(self, o):
        return self._apply(UFUNCS["divmod"], self, o)

    def __rdivmod__(self, o):
        return self._apply(UFUNCS["divmod"], o, self)

    def __ifloordiv__(self, o):
        return self._inplace("__floordiv__", o)

    def __imod__(self, o):
        return self._inplace("__mod__", o)

    # ---- methods
    def sum(self, axis=None, keepdims=False, **kw):
        return np.sum(self, axis=axis, keepdims=keepdims, **kw)

    def mean(self, axis=None, keepdims=False, **kw):
        return np.mean(self, axis=axis, keepdims=keepdims, **kw)

    def max(self, axis=None, keepdims=False, **kw):
        return np.max(self, axis=axis, keepdims=keepdims, **kw)

    def min(self, axis=None, keepdims=False, **kw):
        return np.min(self, axis=axis, keepdims=keepdims, **kw)

    def prod(self, axis=None, keepdims=False, **kw):
        return np.prod(self, axis=axis, keepdims=keepdims, **kw)

    def var(self, axis=None, keepdims=False, **kw):
        return np.var(self, axis=axis, keepdims=keepdims, **kw)

    def std(self, axis=None, keepdims=False, **kw):
        return np.std(self, axis=axis, keepdims=keepdims, **kw)

    def dot(self, other):
        return np.dot(self, other)

    def ravel(self, order="C"):
        return np.ravel(self, order=order)

    def flatten(self, order="C"):
        return np.ravel(self, order=order).copy()  # a copy, not a view

    def squeeze(self, axis=None):
        return np.squeeze(self, axis=axis)

    def swapaxes(self, a, b):
        return np.swapaxes(self, a, b)

    def clip(self, min=None, max=None, **kw):
        return np.clip(self, min, max, **kw)

    def reshape(self, *shape, order="C"):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return np.reshape(self, shape, order=order)

    def transpose(self, *axes):
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return np.transpose(self, axes or None)

    # the rest of ndarray's methods, through the NumPy functions of the same names
    def all(self, axis=None, keepdims=False, **kw):
        return np.all(self, axis=axis, keepdims=keepdims, **kw)

    def any(self, axis=None, keepdims=False, **kw):
        return np.any(self, axis=axis, keepdims=keepdims, **kw)

    def argmax(self, axis=None, **kw):
        return np.argmax(self, axis=axis, **kw)

    def argmin(self, axis=None, **kw):
        return np.argmin(self, axis=axis, **kw)

    def argsort(self, axis=-1, kind=None, order=None):
        return np.argsort(self, axis, kind, order)

    def searchsorted(self, v, side="left", sorter=None):
        return np.searchsorted(self, v, side, sorter)

    def argpartition(self, kth, axis=-1, **kw):
        return np.argpartition(self, kth, axis, **kw)

    def cumsum(self, axis=None, dtype=None):
        return np.cumsum(self, axis=axis, dtype=dtype)

    def cumprod(self, axis=None, dtype=None):
        return np.cumprod(self, axis=axis, dtype=dtype)

    def diagonal(self, offset=0, axis1=0, axis2=1):
        return np.diagonal(self, offset, axis1, axis2)

    def trace(self, offset=0, axis1=0, axis2=1, dtype=None):
        return np.trace(self, offset, axis1, axis2, dtype)

    def repeat(self, repeats, axis=None):
        return np.repeat(self, repeats, axis)

    def round(self, decimals=0):
        return np.round(self, decimals)

    def take(self, indices, axis=None, **kw):
        return np.take(self, indices, axis, **kw)

    def nonzero(self):
        return np.nonzero(self)

    def conj(self):
        return np.conj(self)

    conjugate = conj
    real = property(lambda self: np.real(self))
    imag = property(lambda self: np.imag(self))
    itemsize = property(lambda self: self.dtype.itemsize)
    nbytes = property(lambda self: self.size * self.dtype.itemsize)

    def sort(self, axis=-1, kind=None, order=None):  # in place, as ndarray.sort
        self[...] = np.sort(self, axis, kind, order)

    def partition(self, kth, axis=-1, kind="introselect", order=None):  # in place
        self[...] = np.partition(self, kth, axis, kind, order)

    def fill(self, value):  # in place
        self[...] = value
