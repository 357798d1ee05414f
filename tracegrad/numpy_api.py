"""The traced NumPy namespace (stage: tracing): `UFUNCS` and `FUNCTIONS`, every supported ufunc and
function by name, each lowered to primitives; `SUPPORTED`, the names users may look up.

The handlers live in tracegrad/numpy_namespace/, by theme: `operands.py` (what a handler makes of
its arguments), `ufuncs.py` and `scipy_special.py`, `elementwise.py`, `reductions.py`,
`products.py`, `shapes.py`, `indexing.py`; numpy_arrays.py adds the array-manipulation functions
and linalg/ the factorisations and solves.
"""

from __future__ import annotations

from . import primitives as P
from .linalg import FUNCTIONS as _LINALG_FUNCTIONS
from .numpy_arrays import FUNCTIONS as _ARRAY_FUNCTIONS
from .numpy_namespace.elementwise import (
    _clip,
    _filled,
    _full_like,
    _nan_to_num,
    _round,
    _sinc,
    _where,
)
from .numpy_namespace.indexing import is_basic_index, written_value
from .numpy_namespace.operands import _v
from .numpy_namespace.products import _dot, _einsum, _inner, _outer
from .numpy_namespace.reductions import _mean, _norm, _reduction, _std, _var
from .numpy_namespace.shapes import (
    _broadcast_to,
    _column_stack,
    _concatenate,
    _dstack,
    _expand_dims,
    _hstack,
    _moveaxis,
    _ndim,
    _ravel,
    _reshape,
    _shape,
    _size,
    _squeeze,
    _stack,
    _swapaxes,
    _transpose,
    _vstack,
)
from .numpy_namespace.ufuncs import UFUNCS, _imag_part, _real_part, _rounding

FUNCTIONS = {
    "real": lambda val: _real_part(val, "np.real"),
    "imag": lambda val: _imag_part(val),
    "sum": _reduction(P.reduce_sum_p, "sum"),
    "prod": _reduction(P.reduce_prod_p, "prod"),
    "max": _reduction(P.reduce_max_p, "max"),
    "amax": _reduction(P.reduce_max_p, "amax"),
    "min": _reduction(P.reduce_min_p, "min"),
    "amin": _reduction(P.reduce_min_p, "amin"),
    "mean": _mean,
    "var": _var,
    "std": _std,
    "linalg.norm": _norm,
    "where": _where,
    "clip": _clip,
    "zeros_like": _filled(0),
    "empty_like": _filled(0),  # its contents are unspecified: zeros are as good as any
    "ones_like": _filled(1),
    "full_like": _full_like,
    "dot": _dot,
    "vdot": lambda a, b: _dot(_ravel(a), _ravel(b)),
    "inner": _inner,
    "outer": _outer,
    "einsum": _einsum,
    "reshape": _reshape,
    "ravel": _ravel,
    "transpose": _transpose,
    "swapaxes": _swapaxes,
    "moveaxis": _moveaxis,
    "expand_dims": _expand_dims,
    "squeeze": _squeeze,
    "broadcast_to": _broadcast_to,
    "concatenate": _concatenate,
    "stack": _stack,
    "hstack": _hstack,
    "vstack": _vstack,
    "row_stack": _vstack,
    "column_stack": _column_stack,
    "dstack": _dstack,
    "shape": _shape,
    "ndim": _ndim,
    "size": _size,
    "copy": lambda a, **kw: _v(a),
    "round": _round,
    "around": _round,
    "fix": lambda x, out=None: _rounding(P.trunc_p)(x),
    "nan_to_num": _nan_to_num,
    "sinc": _sinc,
}

# The names users may look up (docs/api.md lists them).
# array manipulation (flip, roll, tile, split, diagonals, scans...): numpy_arrays.py
FUNCTIONS.update(_ARRAY_FUNCTIONS)
# np.linalg's factorisations and solves: primitives of their own, with their rules
FUNCTIONS.update(_LINALG_FUNCTIONS)

# scipy.special's ufuncs reach the same table (NumPy dispatches them by name: digamma's ufunc is
# named psi); its Python functions logsumexp, softmax and log_softmax are redirected while tracing
# (constructors.py)
SCIPY_SPECIAL = (
    "digamma",
    "erf",
    "erfc",
    "expit",
    "gammaln",
    "log_ndtr",
    "log_softmax",
    "logit",
    "logsumexp",
    "ndtr",
    "psi",
    "softmax",
    "xlog1py",
    "xlogy",
)
SUPPORTED = sorted((set(UFUNCS) | set(FUNCTIONS)) - set(SCIPY_SPECIAL))


# what the rest of the package reads from here
__all__ = ["FUNCTIONS", "SCIPY_SPECIAL", "SUPPORTED", "UFUNCS", "is_basic_index", "written_value"]
