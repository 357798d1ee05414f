"""The NumPy functions tracegrad can trace, under an explicit namespace.

`tracegrad.numpy.sin(x)` is `numpy.sin(x)`: on traced values NumPy dispatches to tracegrad, on
ordinary arrays it computes as usual. Only the supported functions are here, so a missing name is
a clear `AttributeError` at the point of use.
"""

import numpy as _np

from . import numpy_namespace as _numpy_namespace  # completes the registry read below
from .tracing.dispatch import supported as _supported

for _name in _supported():
    if _name.startswith("linalg."):
        continue
    if hasattr(_np, _name):
        globals()[_name] = getattr(_np, _name)
abs = _np.abs
pi, e, inf, nan = _np.pi, _np.e, _np.inf, _np.nan
float32, float64 = _np.float32, _np.float64


class linalg:
    norm = staticmethod(_np.linalg.norm)


del _name, _numpy_namespace
