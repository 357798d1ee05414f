"""autograd.scipy.linalg: tracegrad.scipy.linalg's functions where tracegrad has them (they trace;
SciPy's own on plain arrays), scipy.linalg's for the rest."""

import importlib

import scipy.linalg as _mod

from .._forward import forward as _forward

try:  # tracegrad.scipy.linalg is recent: older commits measured with --tracegrad-rev lack it
    _tlinalg = importlib.import_module("tracegrad.scipy.linalg")
except ImportError:
    _tlinalg = None
for _name in getattr(_tlinalg, "__all__", ()):
    globals()[_name] = getattr(_tlinalg, _name)
_forward(globals(), _mod)
