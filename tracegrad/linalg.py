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
"""

from __future__ import annotations

import numpy as np

from . import primitives as P
from .errors import TracingError
from .ir import Var
from .numpy_api import _src, _v
from .primitives import Kind, Primitive


def _check_square(shape, what: str) -> None:
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise np.linalg.LinAlgError(
            f"Last 2 dimensions of the array must be square (np.linalg.{what} of shape {shape}){_src()}"
        )


def _square_infer(out_shape):
    def infer(shapes, dtypes, params):
        return out_shape(shapes[0]), dtypes[0]

    return infer


def _register(name, impl, infer, adjoint, differentiable=True) -> Primitive:
    prim = Primitive(name, Kind.SHAPE, impl, infer, adjoint, None, None, differentiable)
    # a leading batch axis is one more stacked matrix: the same primitive on the batch
    object.__setattr__(prim, "batch", P.batch_every_operand(prim))
    return P._register(prim)


def _t(x: Var) -> Var:
    return P.swap_last(x)


def _mm(a: Var, b: Var) -> Var:
    return P.matmul_(a, b)


def _expand(v: Var, like: Var) -> Var:
    """A per-matrix value (shape like[:-2]) broadcast over the matrices' two last axes."""
    return P.broadcast_to(P.reshape(v, v.shape + (1, 1)), like.shape)


def _lower_only(sym_ct: Var) -> Var:
    """The cotangent of the input of a function that reads the lower triangle of A as the
    symmetric matrix S = tril(A) + tril(A, -1)^T, from the cotangent of S."""
    n = sym_ct.shape[-1]
    both = P.add(sym_ct, _t(sym_ct))
    strict = P.broadcast_to(P.const(np.tril(np.ones((n, n), bool), -1)), sym_ct.shape)
    diag = P.broadcast_to(P.const(np.eye(n, dtype=bool)), sym_ct.shape)
    zero = P.const(0, sym_ct.shape, sym_ct.dtype)
    return P.where(strict, both, P.where(diag, sym_ct, zero))


# ---- inv, solve, det, log|det|


inv_p = _register(
    "inv", np.linalg.inv, _square_infer(lambda s: s),
    lambda ct, out, a: (P.neg(_mm(_t(out), _mm(ct, _t(out)))),),
)


def _solve_rule(ct, out, a, b):
    ct_b = P.emit(solve_p, _t(a), ct)
    return P.neg(_mm(ct_b, _t(out))), ct_b


solve_p = _register(
    "solve", lambda a, b: np.linalg.solve(a, b), lambda shapes, dtypes, p: (shapes[1], dtypes[1]),
    _solve_rule,
)
det_p = _register(
    "det", np.linalg.det, _square_infer(lambda s: s[:-2]),
    lambda ct, out, a: (P.mul(_expand(P.mul(ct, out), a), _t(P.emit(inv_p, a))),),
)
logabsdet_p = _register(
    "logabsdet", lambda a: np.linalg.slogdet(a)[1], _square_infer(lambda s: s[:-2]),
    lambda ct, out, a: (P.mul(_expand(ct, a), _t(P.emit(inv_p, a))),),
)
signdet_p = _register(
    "signdet", lambda a: np.linalg.slogdet(a)[0], _square_infer(lambda s: s[:-2]),
    lambda ct, out, a: (None,), differentiable=False,
)


# ---- cholesky and eigh


def _cholesky_rule(ct, out, a):
    """A = L L^T: with P = Phi(L^T ct) (the lower triangle, its diagonal halved), the cotangent
    of the symmetric matrix is sym(L^-T P L^-1); NumPy reads A's lower triangle."""
    n = out.shape[-1]
    phi = _mm(_t(out), ct)
    halved = (np.tril(np.ones((n, n)), -1) + 0.5 * np.eye(n)).astype(out.dtype)
    phi = P.mul(phi, P.broadcast_to(P.const(halved), phi.shape))
    y = P.emit(solve_p, _t(out), phi)  # L^-T P
    m = _t(P.emit(solve_p, _t(out), _t(y)))  # L^-T P L^-1
    return (_lower_only(P.mul(P.add(m, _t(m)), 0.5)),)


cholesky_p = _register("cholesky", np.linalg.cholesky, _square_infer(lambda s: s), _cholesky_rule)


def _eigh_values_rule(ct, out, a):
    v = P.emit(eigh_vectors_p, a)
    n = a.shape[-1]
    scaled = P.mul(v, P.broadcast_to(P.reshape(ct, ct.shape[:-1] + (1, n)), v.shape))
    return (_lower_only(_mm(scaled, _t(v))),)


def _eigh_vectors_rule(ct, out, a):
    w = P.emit(eigh_values_p, a)
    n = a.shape[-1]
    shape = a.shape
    gaps = P.sub(P.broadcast_to(P.reshape(w, w.shape[:-1] + (1, n)), shape),
                 P.broadcast_to(P.reshape(w, w.shape[:-1] + (n, 1)), shape))  # w_j - w_i
    off = P.broadcast_to(P.const(~np.eye(n, dtype=bool)), shape)
    safe = P.where(off, gaps, P.const(1, shape, gaps.dtype))
    f = P.where(off, P.div(1.0, safe), P.const(0, shape, gaps.dtype))
    inner = P.mul(f, _mm(_t(out), ct))
    s = _mm(out, _mm(inner, _t(out)))
    return (_lower_only(P.mul(P.add(s, _t(s)), 0.5)),)


eigh_values_p = _register(
    "eigh_values", lambda a: np.linalg.eigh(a)[0], _square_infer(lambda s: s[:-1]), _eigh_values_rule
)
eigh_vectors_p = _register(
    "eigh_vectors", lambda a: np.linalg.eigh(a)[1], _square_infer(lambda s: s), _eigh_vectors_rule
)


# ---- the NumPy functions


def _square_float(a, what: str) -> Var:
    x = _v(a)
    _check_square(x.shape, what)
    if not P.is_float(x.dtype):
        x = P.convert(x, np.float64)
    return x


def _inv(a):
    return P.emit(inv_p, _square_float(a, "inv"))


def _solve(a, b):
    x = _square_float(a, "solve")
    y = _v(b)
    y = P.convert(y, P._result_dtype([x, y]) if P.is_float(y.dtype) else x.dtype)
    x = P.convert(x, y.dtype)
    vector = y.ndim == 1  # NumPy 2: b is a vector only when it is 1-D
    if vector:
        y = P.reshape(y, y.shape + (1,))
    if y.shape[-2] != x.shape[-1]:
        raise ValueError(f"np.linalg.solve: shapes {x.shape} and {_v(b).shape} do not match{_src()}")
    lead = np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    x = P.broadcast_to(x, lead + x.shape[-2:])
    y = P.broadcast_to(y, lead + y.shape[-2:])
    out = P.emit(solve_p, x, y)
    return P.reshape(out, out.shape[:-1]) if vector else out


def _det(a):
    return P.emit(det_p, _square_float(a, "det"))


def _slogdet(a):
    x = _square_float(a, "slogdet")
    return P.emit(signdet_p, x), P.emit(logabsdet_p, x)


def _cholesky(a, upper=False):
    x = _square_float(a, "cholesky")
    lower = P.emit(cholesky_p, x)
    return _t(lower) if upper else lower


def _eigh(a, UPLO="L"):
    if UPLO != "L":
        raise TracingError(f"np.linalg.eigh: only UPLO='L' is supported on traced values{_src()}")
    x = _square_float(a, "eigh")
    return P.emit(eigh_values_p, x), P.emit(eigh_vectors_p, x)


def _eigvalsh(a, UPLO="L"):
    return _eigh(a, UPLO)[0]


def _matrix_power(a, n):
    x = _v(a)
    _check_square(x.shape, "matrix_power")
    if not isinstance(n, (int, np.integer)):
        raise TypeError(f"exponent must be an integer{_src()}")
    if n == 0:
        eye = P.const(np.broadcast_to(np.eye(x.shape[-1], dtype=x.dtype), x.shape).copy())
        return eye
    if n < 0:
        x, n = P.emit(inv_p, _square_float(x, "matrix_power")), -n
    result, power = None, x
    while n:
        if n & 1:
            result = power if result is None else _mm(result, power)
        n >>= 1
        if n:
            power = _mm(power, power)
    return result


FUNCTIONS = {
    "linalg.inv": _inv,
    "linalg.solve": _solve,
    "linalg.det": _det,
    "linalg.slogdet": _slogdet,
    "linalg.cholesky": _cholesky,
    "linalg.eigh": _eigh,
    "linalg.eigvalsh": _eigvalsh,
    "linalg.matrix_power": _matrix_power,
}
