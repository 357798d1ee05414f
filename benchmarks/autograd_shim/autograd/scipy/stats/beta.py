"""autograd.scipy.stats.beta: tracegrad.scipy.stats.beta's functions (and SciPy's for the rest)."""

import scipy.stats as _stats
import tracegrad.scipy.stats as _tstats

from ..._forward import forward as _forward

_forward(globals(), _tstats.beta)
_forward(globals(), _stats.beta)
