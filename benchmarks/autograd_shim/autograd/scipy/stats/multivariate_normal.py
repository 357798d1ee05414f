"""autograd.scipy.stats.multivariate_normal: tracegrad.scipy.stats.multivariate_normal's functions (and SciPy's for the rest)."""

import scipy.stats as _stats
import tracegrad.scipy.stats as _tstats

from ..._forward import forward as _forward

_forward(globals(), _tstats.multivariate_normal)
_forward(globals(), _stats.multivariate_normal)
