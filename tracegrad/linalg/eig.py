"""The eigendecomposition of a general (non-symmetric) square matrix: np.linalg.eig and eigvals
(stage: primitives, as factorisations.py).

The eigenvalues and eigenvectors are complex, always: NumPy gives real arrays when every
eigenvalue of the input happens to be real, a dtype that depends on the values, which a traced
program cannot know in advance (JAX's eig is complex always too). The values are NumPy's
(LAPACK's geev: unit eigenvectors, in its order and phase).

The rules (docs/complex.md's convention: cotangents pair with tangents through Re(sum(c t))):
with A = V diag(w) V^-1, M = V^-1 dA V and F[i, j] = 1 / (w[j] - w[i]) off the diagonal,

    dw = diag(M)
    dV = V (F * M) - V diag(Re(sum(conj(V) * V (F * M), axis=0)))   (unit columns stay unit)

so the cotangent of A is V^-T (diag(ct_w) + (V^T G) * F) V^T, with
G = ct_V - conj(V) diag(Re(sum(ct_V * V, axis=0))): its real part for a real A. As for every
framework, the eigenvector derivative divides by eigenvalue gaps (infinite for a repeated one),
and each eigenvector's phase is LAPACK's choice, so a loss should not depend on it.
"""

from __future__ import annotations

import numpy as np

from .. import primitives as P
from ..base import blas_threads
from ..ir import Var
from ..primitives import Kind, Primitive
from .factorisations import inv_p


def _complex_dtype(dtype) -> np.dtype:
    return np.result_type(dtype, np.complex64)


def _values_impl(a):
    return np.linalg.eig(a)[0].astype(_complex_dtype(a.dtype), copy=False)


def _vectors_impl(a):
    return np.linalg.eig(a)[1].astype(_complex_dtype(a.dtype), copy=False)


def _work(a) -> int:
    return int(a.size) * int(a.shape[-1])


def _t(x: Var) -> Var:
    return P.swap_last(x)


def _mm(a: Var, b: Var) -> Var:
    return P.matmul_(a, b)


def _eye(n: int, shape: tuple, dtype) -> Var:
    return P.broadcast_to(P.const(np.eye(n, dtype=dtype)), shape)


def _gaps(w: Var) -> Var:
    """F[..., i, j] = 1 / (w[j] - w[i]) off the diagonal, 0 on it."""
    n = w.shape[-1]
    shape = w.shape[:-1] + (n, n)
    rows = P.broadcast_to(P.reshape(w, w.shape[:-1] + (1, n)), shape)
    cols = P.broadcast_to(P.reshape(w, w.shape[:-1] + (n, 1)), shape)
    eye = _eye(n, shape, w.dtype)
    return P.sub(P.reciprocal(P.add(P.sub(rows, cols), eye)), eye)


def _to_a(inner: Var, v: Var, a: Var) -> Var:
    """V^-T inner V^T, as the cotangent of `a` (its real part for a real `a`)."""
    v_inv_t = _t(P.emit(inv_p, v))
    ct = _mm(v_inv_t, _mm(inner, _t(v)))
    return ct if P.is_complex(a.dtype) else P.real(ct)


def _values_rule(ct, out, a):
    v = P.emit(eig_vectors_p, a)
    n = a.shape[-1]
    column = P.broadcast_to(P.reshape(ct, ct.shape + (1,)), ct.shape + (n,))
    inner = P.mul(column, _eye(n, column.shape, column.dtype))  # diag(ct_w)
    return (_to_a(inner, v, a),)


def _vectors_rule(ct, out, a):
    v, w = out, P.emit(eig_values_p, a)
    # the normalisation's part: G = ct - conj(V) diag(Re(sum(ct * V, axis=-2)))
    s = P.real(P.reduce_sum(P.mul(ct, v), (v.ndim - 2,)))
    s = P.broadcast_to(P.reshape(s, s.shape[:-1] + (1, s.shape[-1])), v.shape)
    g = P.sub(ct, P.mul(P.conj(v), s))
    inner = P.mul(_mm(_t(v), g), _gaps(w))
    return (_to_a(inner, v, a),)


def _infer(shapes, dtypes, params, values: bool):
    shape = shapes[0][:-1] if values else shapes[0]
    return shape, _complex_dtype(dtypes[0])


def _register(name: str, impl, adjoint, values: bool) -> Primitive:
    return P.register(
        Primitive(
            name,
            Kind.SHAPE,
            blas_threads.small_on_one_thread(impl, _work),
            lambda shapes, dtypes, params: _infer(shapes, dtypes, params, values),
            adjoint,
            P.every_operand(),
            index_map=P.OWN_STEP,
            complex_operands=True,
        )
    )


eig_values_p = _register("eig_values", _values_impl, _values_rule, True)
eig_vectors_p = _register("eig_vectors", _vectors_impl, _vectors_rule, False)
