"""Linear algebra: np.linalg.solve, inv, det, slogdet, cholesky, eigh, eigvalsh, matrix_power.

Each factorisation is a primitive of the table (registered here, beside its rules) whose
reference implementation is NumPy's LAPACK-backed `np.linalg` function, batched over leading
axes as NumPy's is. They have no kernel template: every backend runs them as a step of its own
(on the host for the cuda backend), between the fused kernels. Their adjoint rules are written
with these primitives and the basic ones, so second and higher derivatives exist (the Hessian of
a Gaussian log-likelihood in its kernel's hyper-parameters, for example).

Conventions, as NumPy's functions define them: `cholesky` and `eigh` read the lower triangle of
their input only, so the derivative with respect to the strict upper triangle is zero (pass a
symmetric matrix, as one does). `eigh`'s eigenvector derivative divides by eigenvalue gaps: it is
infinite for repeated eigenvalues (as in every framework); eigenvalues alone are fine.

The primitives and their rules are in factorisations.py, which this package loads (a persisted
program that holds one of them imports it); the NumPy functions are in functions.py, which
registers them when the traced NumPy namespace (tracegrad/numpy_namespace/) is imported.
"""

from __future__ import annotations

from .factorisations import (
    cholesky_p as cholesky_p,
)
from .factorisations import (
    det_p as det_p,
)
from .factorisations import (
    eigh_values_p as eigh_values_p,
)
from .factorisations import (
    eigh_vectors_p as eigh_vectors_p,
)
from .factorisations import (
    inv_p as inv_p,
)
from .factorisations import (
    logabsdet_p as logabsdet_p,
)
from .factorisations import (
    qr_q_p as qr_q_p,
)
from .factorisations import (
    qr_r_p as qr_r_p,
)
from .factorisations import (
    signdet_p as signdet_p,
)
from .factorisations import (
    solve as solve,
)
from .factorisations import (
    solve_p as solve_p,
)
from .factorisations import (
    svd_s_p as svd_s_p,
)
from .factorisations import (
    svd_u_p as svd_u_p,
)
from .factorisations import (
    svd_vt_p as svd_vt_p,
)
