"""tracegrad: exact derivatives of plain NumPy code, compiled to fused kernels.

    import numpy as np
    import tracegrad as tg

    @tg.grad
    def loss(w, x, b):
        return (w * x + b - 5.0) ** 2

    loss(2.0, 3.0, 1.0)   # -> array(12.)
"""

from . import numpy  # noqa: F401  (the explicit namespace: tracegrad.numpy.sin, ...)
from . import tree_util
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
from .api_transforms import hvp, jacfwd, jacrev, jvp, linearize, vjp, vmap
from .backends import available_backends, default_backend_name
from .checking import check_grad
from .control_flow import cond, fori_loop, scan, while_loop
from .custom import custom_vjp
from .debugging import debug_print
from .transforms.custom_jvp import custom_jvp
from .transforms.remat import checkpoint
from .errors import BackendError, GradientCheckError, ShapeError, TracingError
from .ir import Graph
from .tiered import wait_compiled
from .tree_util import (
    register_pytree_node,
    tree_flatten,
    tree_leaves,
    tree_map,
    tree_structure,
    tree_unflatten,
)

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
    "checkpoint",
    "clear_cache",
    "clear_programs",
    "cond",
    "custom_jvp",
    "custom_vjp",
    "debug_print",
    "default_backend_name",
    "fori_loop",
    "grad",
    "hessian",
    "hvp",
    "jacfwd",
    "jacobian",
    "jacrev",
    "jit",
    "jvp",
    "linearize",
    "make_ir",
    "make_kernels",
    "register_pytree_node",
    "scan",
    "stop_gradient",
    "tap",
    "tree_flatten",
    "tree_leaves",
    "tree_map",
    "tree_structure",
    "tree_unflatten",
    "tree_util",
    "value_and_grad",
    "vjp",
    "vmap",
    "wait_compiled",
    "while_loop",
]
