"""np.linalg's functions of general (non-symmetric) square matrices on traced values (stage:
tracing): eig and eigvals, lowered to the primitives of eig.py and registered as "linalg.eig",
"linalg.eigvals". Their results are complex always (eig.py says why; docs/complex.md).
"""

from __future__ import annotations

import numpy as np

from .. import primitives as P
from ..numpy_namespace.operands import as_var
from ..tracing.dispatch import implements
from .eig import eig_values_p, eig_vectors_p
from .factorisations import check_square


def _square(a, what: str):
    x = as_var(a)
    check_square(x.shape, what)
    return x if P.is_float(x.dtype) else P.convert(x, np.float64)


@implements("linalg.eig")
def eig(a):
    x = _square(a, "eig")
    values, vectors = P.emit(eig_values_p, x), P.emit(eig_vectors_p, x)
    named = getattr(getattr(np.linalg, "_linalg", None), "EigResult", None)
    return named(values, vectors) if named is not None else (values, vectors)


@implements("linalg.eigvals")
def eigvals(a):
    return P.emit(eig_values_p, _square(a, "eigvals"))
