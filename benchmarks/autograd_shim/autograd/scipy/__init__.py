"""autograd.scipy: tracegrad.scipy where it traces SciPy's functions, SciPy itself elsewhere."""

from . import integrate, linalg, signal, special, stats

__all__ = ["integrate", "linalg", "signal", "special", "stats"]
