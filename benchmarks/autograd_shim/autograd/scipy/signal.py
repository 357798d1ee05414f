"""autograd.scipy.signal is scipy.signal (tracegrad has no traced version of it)."""

import scipy.signal as _mod

from .._forward import forward as _forward

_forward(globals(), _mod)
