"""autograd.scipy.stats.norm: tracegrad.scipy.stats.norm's functions (and SciPy's for the rest)."""

import scipy.stats as _stats
import tracegrad.scipy.stats as _tstats

from ..._forward import forward as _forward

_forward(globals(), _tstats.norm)
_forward(globals(), _stats.norm)
