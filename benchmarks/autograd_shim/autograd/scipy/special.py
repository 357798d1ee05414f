"""autograd.scipy.special: tracegrad.scipy.special's functions (SciPy's on plain arrays, traced on
traced values), and SciPy's own for the rest."""

import scipy.special as _sp
import tracegrad.scipy.special as _tsp

from .._forward import forward as _forward

_forward(globals(), _tsp, skip=("annotations",))
_forward(globals(), _sp)
