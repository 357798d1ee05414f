"""autograd.scipy.linalg is scipy.linalg (tracegrad has no traced version of it)."""

import scipy.linalg as _mod

from .._forward import forward as _forward

_forward(globals(), _mod)
