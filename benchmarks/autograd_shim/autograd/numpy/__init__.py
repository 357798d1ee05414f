"""autograd.numpy is NumPy itself: tracegrad traces NumPy's own functions (its handlers register
on import of tracegrad.numpy). Names are looked up in NumPy at each use, not copied at import:
while a function is traced, tracegrad redirects NumPy's constructors (`np.array` of a list of
traced values), and a copy taken earlier would miss the redirection."""

import numpy as _np
import tracegrad.numpy as _tnp  # noqa: F401 (completes tracegrad's registry of NumPy handlers)

from . import fft, linalg, random

__version__ = _np.__version__


def __getattr__(name):
    return getattr(_np, name)


def __dir__():
    return sorted(set(dir(_np)) | set(globals()))


def make_diagonal(D, offset=0, axis1=0, axis2=1):
    """autograd.numpy.make_diagonal: the inverse of np.diagonal (offset 0), in NumPy calls."""
    if offset != 0:
        raise NotImplementedError("make_diagonal: only offset 0 is written in this shim")
    n = _np.shape(D)[-1]
    full = _np.expand_dims(D, -1) * _np.eye(n)
    return _np.moveaxis(full, (-2, -1), (axis1, axis2))


def where(condition, x=None, y=None):
    """autograd.numpy.where: NumPy's, with keywords accepted, and a Python bool condition choosing
    between two Python values (numbers, lists) as they are, as autograd's does."""
    if x is None and y is None:
        return _np.where(condition)
    if isinstance(condition, bool) and all(isinstance(v, (int, float, list)) for v in (x, y)):
        return x if condition else y
    return _np.where(condition, x, y)


numpy_boxes = numpy_vspaces = numpy_vjps = numpy_jvps = None


__all__ = ["fft", "linalg", "make_diagonal", "random", "where"]
