"""scipy.special's functions on traced values (stage: tracing).

On a traced value each function records its traced version (tracegrad/numpy_namespace/
scipy_special.py and tracing/constructors.py), so SciPy is not needed while tracing; on plain
arrays it calls SciPy's own function. SciPy's ufuncs (`scipy.special.gammaln(x)`) reach the
same traced versions through NumPy's dispatch; `polygamma` and `multigammaln` are Python
functions in SciPy that convert their arguments with np.asarray, so only these versions trace.
"""

from __future__ import annotations

import operator
from typing import Any

from .. import numpy_namespace  # noqa: F401 (completes the dispatch registry)
from ..base.errors import TracingError
from ..numpy_namespace import scipy_special as traced
from ..trace import Tracer, traced_call
from ..tracing.constructors import SCIPY_FUNCTIONS
from ..tracing.dispatch import SCIPY_SPECIAL, UFUNCS

# scipy.special's traced names, and the three that only this module has
__all__ = sorted({*SCIPY_SPECIAL, "jn", "multigammaln", "ndtri", "polygamma"})


def _has_tracer(values) -> bool:
    return any(isinstance(v, Tracer) for v in values)


def _scipy(name: str):
    try:
        import scipy.special
    except ImportError as error:  # pragma: no cover (the tests run with SciPy)
        raise ImportError(
            f"tracegrad.scipy.special.{name} of a plain array calls scipy.special.{name}: "
            'install SciPy (pip install "tracegrad[scipy]"); traced values need no SciPy'
        ) from error
    return getattr(scipy.special, name)


def _ufunc(name: str, traced_name: str | None = None):
    def function(*args):
        if _has_tracer(args):
            return traced_call(UFUNCS[traced_name or name], *args)
        return _scipy(name)(*args)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"scipy.special.{name}, traced on traced values."
    return function


def _python_function(name: str):
    def function(*args, **kwargs):
        if _has_tracer(args) or _has_tracer(kwargs.values()):
            return traced_call(SCIPY_FUNCTIONS[name], *args, **kwargs)
        return _scipy(name)(*args, **kwargs)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"scipy.special.{name}, traced on traced values."
    return function


beta = _ufunc("beta")
betainc = _ufunc("betainc")
betaln = _ufunc("betaln")
digamma = _ufunc("digamma", "psi")  # scipy.special.digamma's ufunc is named psi
psi = _ufunc("psi")
erf = _ufunc("erf")
erfc = _ufunc("erfc")
erfcinv = _ufunc("erfcinv")
erfinv = _ufunc("erfinv")
expit = _ufunc("expit")
gamma = _ufunc("gamma")
gammainc = _ufunc("gammainc")
gammaincc = _ufunc("gammaincc")
gammaln = _ufunc("gammaln")
gammasgn = _ufunc("gammasgn")
i0 = _ufunc("i0")
i1 = _ufunc("i1")
j0 = _ufunc("j0")
j1 = _ufunc("j1")
y0 = _ufunc("y0")
y1 = _ufunc("y1")
iv = _ufunc("iv")
ive = _ufunc("ive")
jv = _ufunc("jv")
jn = _ufunc("jv")  # SciPy's jn is jv
kv = _ufunc("kv")
yn = _ufunc("yn")
yv = _ufunc("yv")
rgamma = _ufunc("rgamma")
log_ndtr = _ufunc("log_ndtr")
logit = _ufunc("logit")
ndtr = _ufunc("ndtr")
xlog1py = _ufunc("xlog1py")
xlogy = _ufunc("xlogy")
logsumexp = _python_function("logsumexp")
softmax = _python_function("softmax")
log_softmax = _python_function("log_softmax")


def _static_int(value: Any, what: str, function: str) -> int:
    if isinstance(value, Tracer):
        raise TracingError(
            f"tracegrad.scipy.special.{function}: {what} must be a Python int, not a traced "
            f"value (pass it as a static argument: static_argnums)"
        )
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(
            f"tracegrad.scipy.special.{function}: {what} must be an int, got {value!r}"
        ) from None


def polygamma(n: int, x):
    """The n-th derivative of digamma; `n` is a static int (0 gives digamma).

    >>> import numpy as np, tracegrad as tg
    >>> from tracegrad.scipy import special
    >>> float(tg.jit(lambda x: special.polygamma(1, x))(np.float64(1.0)))  # pi^2 / 6
    1.6449340668482264
    """
    n = _static_int(n, "n", "polygamma")
    if n < 0:
        raise ValueError(f"tracegrad.scipy.special.polygamma: n must be >= 0, got {n}")
    if isinstance(x, Tracer):
        return traced_call(lambda v: traced.polygamma(n, v), x)
    return _scipy("polygamma")(n, x)


def multigammaln(a, d: int):
    """log of the multivariate gamma function of dimension `d` (a static int >= 1). SciPy
    raises for a <= (d - 1) / 2; on traced values the sum of gammaln is returned as it is there.
    """
    d = _static_int(d, "d", "multigammaln")
    if d < 1:
        raise ValueError(f"tracegrad.scipy.special.multigammaln: d must be >= 1, got {d}")
    if isinstance(a, Tracer):
        return traced_call(lambda v: traced.multigammaln(v, d), a)
    return _scipy("multigammaln")(a, d)


def ndtri(p):
    """The inverse of the standard normal CDF: -sqrt(2) erfcinv(2 p)."""
    if isinstance(p, Tracer):
        return erfcinv(p * 2) * -(2**0.5)
    return _scipy("ndtri")(p)
