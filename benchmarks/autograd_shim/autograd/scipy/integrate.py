"""autograd.scipy.integrate is scipy.integrate (tracegrad has no traced version of it)."""

import scipy.integrate as _mod

from .._forward import forward as _forward

_forward(globals(), _mod)
