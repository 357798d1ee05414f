"""NumPy's array-manipulation functions on traced values (stage: tracing): `FUNCTIONS`, flipping,
rolling, tiling, splitting, padding, diagonals and triangles, scans and differences,
index-of-extremum and NaN-aware reductions, gathers, sorting and the statistics built on it. Each is
written with the primitives the table already has (slices, concatenation, broadcasting, selects,
reductions), so each is differentiable at every order and fuses into the kernels like any other
node. Part of the traced NumPy namespace: `numpy_api.FUNCTIONS` includes `FUNCTIONS` below.

The functions live in tracegrad/numpy_namespace/: `manipulation.py`, `diagonals.py`, `scans.py`,
`gathers.py`, `scatters.py`, `sorting.py`; the writes through integer-array indices that tracing
calls are re-exported here.
"""

from __future__ import annotations

from . import primitives as P
from .numpy_namespace.diagonals import (
    _cross,
    _diag,
    _diagflat,
    _diagonal,
    _kron,
    _tensordot,
    _trace,
    _triangle,
)
from .numpy_namespace.elementwise import _linspace, _select
from .numpy_namespace.gathers import _np_take, _take_along_axis, add_at, advanced_getitem
from .numpy_namespace.manipulation import (
    _append,
    _array_split,
    _atleast,
    _broadcast_arrays,
    _dsplit,
    _flip,
    _fliplr,
    _flipud,
    _hsplit,
    _meshgrid,
    _pad,
    _repeat,
    _roll,
    _rot90,
    _split,
    _tile,
    _vsplit,
)
from .numpy_namespace.scans import (
    _all,
    _any,
    _arg_extremum,
    _average,
    _count_nonzero,
    _diff,
    _gradient,
    _nanmean,
    _nansum,
    _ptp,
    _scan,
)
from .numpy_namespace.scatters import put_along_axis, scatter_set, set_regions, setitem_advanced
from .numpy_namespace.sorting import (
    _argpartition,
    _argsort,
    _median,
    _partition,
    _percentile,
    _quantile,
    _rollaxis,
    _sort,
)

FUNCTIONS = {
    "flip": _flip,
    "fliplr": _fliplr,
    "flipud": _flipud,
    "roll": _roll,
    "rot90": _rot90,
    "tile": _tile,
    "repeat": _repeat,
    "split": _split,
    "array_split": _array_split,
    "hsplit": _hsplit,
    "vsplit": _vsplit,
    "dsplit": _dsplit,
    "append": _append,
    "broadcast_arrays": _broadcast_arrays,
    "meshgrid": _meshgrid,
    "atleast_1d": _atleast(1),
    "atleast_2d": _atleast(2),
    "atleast_3d": _atleast(3),
    "diagonal": _diagonal,
    "diag": _diag,
    "diagflat": _diagflat,
    "trace": _trace,
    "triu": _triangle(upper=True),
    "tril": _triangle(upper=False),
    "kron": _kron,
    "cross": _cross,
    "tensordot": _tensordot,
    "diff": _diff,
    "cumsum": _scan(P.cumsum_p, "cumsum"),
    "cumprod": _scan(P.mul_p, "cumprod"),
    "ptp": _ptp,
    "nansum": _nansum,
    "nanmean": _nanmean,
    "count_nonzero": _count_nonzero,
    "any": _any,
    "all": _all,
    "argmax": _arg_extremum(P.reduce_max_p),
    "argmin": _arg_extremum(P.reduce_min_p),
    "average": _average,
    "linspace": _linspace,
    "select": _select,
    "gradient": _gradient,
    "pad": _pad,
}

FUNCTIONS["take"] = _np_take
FUNCTIONS["take_along_axis"] = _take_along_axis

FUNCTIONS["argsort"] = _argsort
FUNCTIONS["sort"] = _sort
FUNCTIONS["quantile"] = _quantile
FUNCTIONS["percentile"] = _percentile
FUNCTIONS["median"] = _median
FUNCTIONS["partition"] = _partition
FUNCTIONS["argpartition"] = _argpartition
FUNCTIONS["rollaxis"] = _rollaxis

__all__ = [
    "FUNCTIONS",
    "add_at",
    "advanced_getitem",
    "put_along_axis",
    "scatter_set",
    "set_regions",
    "setitem_advanced",
]
