"""tracegrad: exact derivatives of plain NumPy code, compiled to fused kernels.

import numpy as np
import tracegrad as tg

@tg.grad
def loss(w, x, b):
    return (w * x + b - 5.0) ** 2

loss(2.0, 3.0, 1.0)   # -> array(12.)
"""

from . import tree_util
from .base import __version__ as __version__
from .api import (
    Transformed,
    cache_info,
    clear_cache,
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
from .runtime.backends import available_backends, default_backend_name
from .base.errors import BackendError, GradientCheckError, ShapeError, TracingError
from .ir import Graph
from .runtime.program_store import clear_programs
from .runtime.tiered import wait_compiled
from .tree_util import (
    register_pytree_node,
    tree_flatten,
    tree_leaves,
    tree_map,
    tree_structure,
    tree_unflatten,
)


# Imported on first use (`tg.vmap`, `from tracegrad import scan`): a gradient's first call needs
# none of them, and `import tracegrad` is part of every first call (benchmarks/RESULTS.md).
_LAZY = {
    "hvp": "api_transforms",
    "jacfwd": "api_transforms",
    "jacrev": "api_transforms",
    "jvp": "api_transforms",
    "linearize": "api_transforms",
    "vjp": "api_transforms",
    "vmap": "api_transforms",
    "check_grad": "checking",
    "cond": "transforms.control_flow",
    "fori_loop": "transforms.control_flow",
    "scan": "transforms.control_flow",
    "while_loop": "transforms.control_flow",
    "custom_vjp": "transforms.custom",
    "debug_print": "tracing.debugging",
    "custom_jvp": "transforms.custom_jvp",
    "checkpoint": "transforms.remat",
}
# Subpackages imported on first use: the explicit namespace (`tg.numpy.sin`) and the traced
# linear algebra. Tracing loads them anyway; a call whose program is in the store does not.
_LAZY_MODULES = ("numpy", "linalg")


def __getattr__(name: str):
    import importlib

    if name in _LAZY_MODULES:
        return importlib.import_module(f"{__name__}.{name}")  # the import sets the attribute
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tracegrad' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_LAZY_MODULES))


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
