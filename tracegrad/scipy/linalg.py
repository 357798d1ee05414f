"""scipy.linalg's solvers that SciPy does not dispatch to traced values, written with NumPy calls
that trace (stage: tracing): `solve_banded` and `solve_sylvester`. On plain arrays each calls
SciPy's own function.

Both are dense under the hood, as derivatives need them to be: `solve_banded` solves with the
full matrix its bands describe (O(n^3) where SciPy's banded LU is O(n l u)), `solve_sylvester`
solves the Kronecker form (I (x) A + B^T (x) I) vec(X) = vec(Q), O((n m)^3): for the small
systems derivatives are taken of. Every order of derivative exists, in every argument.
"""

from __future__ import annotations

import numpy as np

from ..trace import Tracer

__all__ = ["solve_banded", "solve_sylvester"]


def _traced(*values) -> bool:
    return any(isinstance(v, Tracer) for v in values)


def _scipy(name: str):
    import scipy.linalg  # plain arrays: SciPy's own function

    return getattr(scipy.linalg, name)


def solve_banded(l_and_u, ab, b, overwrite_ab=False, overwrite_b=False, check_finite=True):
    """x with A x = b, A given by its bands as scipy.linalg.solve_banded takes them:
    `ab[u + i - j, j] == A[i, j]` for the `l` bands below the diagonal and `u` above.

    >>> import numpy as np, tracegrad as tg
    >>> from tracegrad.scipy import linalg
    >>> ab = np.array([[0.0, 1.0, 1.0], [4.0, 4.0, 4.0], [1.0, 1.0, 0.0]])
    >>> tg.jit(lambda ab, b: linalg.solve_banded((1, 1), ab, b))(ab, np.ones(3)).round(4)
    array([0.2143, 0.1429, 0.2143])
    """
    if not _traced(ab, b):
        return _scipy("solve_banded")(l_and_u, ab, b, overwrite_ab, overwrite_b, check_finite)
    lower, upper = (int(v) for v in l_and_u)
    rows, n = np.shape(ab)
    if rows != lower + upper + 1:
        raise ValueError(
            f"solve_banded: ab has {rows} rows; (l, u) = ({lower}, {upper}) needs l + u + 1 = "
            f"{lower + upper + 1}"
        )
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    band = (i - j <= lower) & (j - i <= upper)
    # A[i, j] = ab[u + i - j, j] inside the bands, 0 outside: one gather of ab's elements
    where_from = np.where(band, (upper + i - j) * n + j, 0)
    dense = np.where(band, np.reshape(ab, (-1,))[where_from], 0.0)
    return np.linalg.solve(dense, b)


def solve_sylvester(a, b, q):
    """X with A X + X B = Q (scipy.linalg.solve_sylvester).

    >>> import numpy as np, tracegrad as tg
    >>> from tracegrad.scipy import linalg
    >>> a, b = np.array([[2.0, 1.0], [0.0, 3.0]]), np.array([[1.0]])
    >>> tg.jit(linalg.solve_sylvester)(a, b, np.ones((2, 1))).round(4)
    array([[0.25],
           [0.25]])
    """
    if not _traced(a, b, q):
        return _scipy("solve_sylvester")(a, b, q)
    n, m = np.shape(a)[0], np.shape(b)[0]
    # column-major vec: vec(A X) = (I_m (x) A) vec(X), vec(X B) = (B^T (x) I_n) vec(X)
    system = np.kron(np.eye(m), a) + np.kron(np.transpose(b), np.eye(n))
    vec_q = np.reshape(np.transpose(q), (-1,))
    return np.transpose(np.reshape(np.linalg.solve(system, vec_q), (m, n)))
