"""autograd.scipy.stats.chi2: tracegrad.scipy.stats.chi2's functions (and SciPy's for the rest)."""

import scipy.stats as _stats
import tracegrad.scipy.stats as _tstats

from ..._forward import forward as _forward

_forward(globals(), _tstats.chi2)
_forward(globals(), _stats.chi2)
