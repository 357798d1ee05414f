"""tracegrad: exact derivatives of plain NumPy code, compiled to fused kernels.

    import numpy as np
    import tracegrad as tg

    @tg.grad
    def loss(w, x, b):
        return (w * x + b - 5.0) ** 2

    loss(2.0, 3.0, 1.0)   # -> array(12.)
"""

from . import numpy  # noqa: F401  (the explicit namespace: tracegrad.numpy.sin, ...)
from .api import (
    Transformed,
    cache_info,
    clear_cache,
    clear_programs,
    grad,
    hessian,
    jacobian,
    jit,
    make_ir,
    make_kernels,
    stop_gradient,
    tap,
    value_and_grad,
)
from .backends import available_backends, default_backend_name
from .checking import check_grad
from .custom import custom_vjp
from .debugging import debug_print
from .errors import BackendError, GradientCheckError, ShapeError, TracingError
from .ir import Graph
from .tiered import wait_compiled

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "GradientCheckError",
    "Graph",
    "ShapeError",
    "TracingError",
    "Transformed",
    "available_backends",
    "cache_info",
    "check_grad",
    "clear_cache",
    "clear_programs",
    "custom_vjp",
    "debug_print",
    "default_backend_name",
    "grad",
    "hessian",
    "jacobian",
    "jit",
    "make_ir",
    "make_kernels",
    "stop_gradient",
    "tap",
    "value_and_grad",
    "wait_compiled",
]
