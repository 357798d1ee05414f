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

from . import ir
from .runtime import blas_threads
from . import primitives as P
from .errors import TracingError
from .ir import Var
from .numpy_namespace.operands import _src, _v
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


def _work(*arrays) -> int:
    """About the multiply-adds of a factorisation or solve of these operands."""
    return sum(int(x.size) * int(x.shape[-1]) for x in arrays if getattr(x, "ndim", 0) >= 2)


def _register(name, impl, infer, adjoint, differentiable=True) -> Primitive:
    # small matrices on one BLAS thread: several threads on a few hundred rows wait for each
    # other far longer than they save (and on a busy machine, for a descheduled one)
    impl = blas_threads.small_on_one_thread(impl, _work)
    prim = Primitive(
        name, Kind.SHAPE, impl, infer, adjoint, None, None, differentiable, index_map=P.OWN_STEP
    )
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
    "inv",
    np.linalg.inv,
    _square_infer(lambda s: s),
    lambda ct, out, a: (P.neg(_mm(_t(out), _mm(ct, _t(out)))),),
)


# A solve's `structure`: None (a general matrix: LU), or "lower" / "upper" when the matrix is a
# Cholesky factor or its transpose (known from the graph; see `_structure_of`): a triangular
# solve, O(n^2) per right-hand side instead of an O(n^3) factorisation.
_TRANSPOSED = {None: None, "lower": "upper", "upper": "lower"}


def solve(a: Var, b: Var, structure: str | None = None) -> Var:
    """a^-1 b (a general or, with `structure`, a triangular solve)."""
    return P.emit(solve_p, a, b, **({"structure": structure} if structure else {}))


def _solve_rule(ct, out, a, b, structure=None):
    ct_b = solve(_t(a), ct, _TRANSPOSED[structure])
    return P.neg(_mm(ct_b, _t(out))), ct_b


def _solve_impl(a, b, structure=None):
    if structure is None:
        return np.linalg.solve(a, b)
    try:
        from scipy.linalg import solve_triangular
    except ImportError:  # SciPy is optional: NumPy's LU solve gives the same answer, slower
        return np.linalg.solve(a, b)
    lower = structure == "lower"
    if a.ndim == 2:
        return solve_triangular(a, b, lower=lower, check_finite=False)
    out = np.empty(
        np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + b.shape[-2:], np.result_type(a, b)
    )
    for i in np.ndindex(out.shape[:-2]):
        out[i] = solve_triangular(a[i], b[i], lower=lower, check_finite=False)
    return out


solve_p = _register(
    "solve",
    _solve_impl,
    lambda shapes, dtypes, p: (shapes[1], dtypes[1]),
    _solve_rule,
)
det_p = _register(
    "det",
    np.linalg.det,
    _square_infer(lambda s: s[:-2]),
    lambda ct, out, a: (P.mul(_expand(P.mul(ct, out), a), _t(P.emit(inv_p, a))),),
)
logabsdet_p = _register(
    "logabsdet",
    lambda a: np.linalg.slogdet(a)[1],
    _square_infer(lambda s: s[:-2]),
    lambda ct, out, a: (P.mul(_expand(ct, a), _t(P.emit(inv_p, a))),),
)
signdet_p = _register(
    "signdet",
    lambda a: np.linalg.slogdet(a)[0],
    _square_infer(lambda s: s[:-2]),
    lambda ct, out, a: (None,),
    differentiable=False,
)


# ---- cholesky and eigh


def _cholesky_rule(ct, out, a):
    """A = L L^T: with P = Phi(L^T ct) (the lower triangle, its diagonal halved), the cotangent
    of the symmetric matrix is sym(L^-T P L^-1); NumPy reads A's lower triangle."""
    n = out.shape[-1]
    phi = _mm(_t(out), ct)
    halved = (np.tril(np.ones((n, n)), -1) + 0.5 * np.eye(n)).astype(out.dtype)
    phi = P.mul(phi, P.broadcast_to(P.const(halved), phi.shape))
    y = solve(_t(out), phi, "upper")  # L^-T P
    m = _t(solve(_t(out), _t(y), "upper"))  # L^-T P L^-1
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
    gaps = P.sub(
        P.broadcast_to(P.reshape(w, w.shape[:-1] + (1, n)), shape),
        P.broadcast_to(P.reshape(w, w.shape[:-1] + (n, 1)), shape),
    )  # w_j - w_i
    off = P.broadcast_to(P.const(~np.eye(n, dtype=bool)), shape)
    safe = P.where(off, gaps, P.const(1, shape, gaps.dtype))
    f = P.where(off, P.div(1.0, safe), P.const(0, shape, gaps.dtype))
    inner = P.mul(f, _mm(_t(out), ct))
    s = _mm(out, _mm(inner, _t(out)))
    return (_lower_only(P.mul(P.add(s, _t(s)), 0.5)),)


eigh_values_p = _register(
    "eigh_values",
    lambda a: np.linalg.eigh(a)[0],
    _square_infer(lambda s: s[:-1]),
    _eigh_values_rule,
)
eigh_vectors_p = _register(
    "eigh_vectors", lambda a: np.linalg.eigh(a)[1], _square_infer(lambda s: s), _eigh_vectors_rule
)


# ---- svd and qr (reduced: U (..., m, k), s (..., k), Vt (..., k, n) with k = min(m, n); Q and R)


def _eye(n: int, like: Var) -> Var:
    return P.broadcast_to(P.const(np.eye(n, dtype=like.dtype)), like.shape[:-2] + (n, n))


def _svd_cotangent(a: Var, ct_u, ct_s, ct_vt) -> Var:
    """The cotangent of A = U diag(s) V^T from those of U, s and V^T (None: zero), for distinct
    nonzero singular values (Townsend, "Differentiating the singular value decomposition"):
    A_ct = U [(F o (U^T U_ct - U_ct^T U)) S + diag(s_ct) + S (F o (V^T V_ct - V_ct^T V))] V^T
           + (I - U U^T) U_ct S^-1 V^T + U S^-1 V_ct^T (I - V V^T),  F_ij = 1 / (s_j^2 - s_i^2)."""
    m, n = a.shape[-2:]
    k = min(m, n)
    u, s, vt = P.emit(svd_u_p, a), P.emit(svd_s_p, a), P.emit(svd_vt_p, a)
    lead = a.shape[:-2]
    sq = (*lead, k, k)
    s_j = P.broadcast_to(P.reshape(s, (*lead, 1, k)), sq)  # s of the column
    s_i = P.broadcast_to(P.reshape(s, (*lead, k, 1)), sq)  # s of the row
    inner = None  # the k x k matrix between U and V^T
    if ct_s is not None:
        inner = P.mul(_eye(k, a), P.broadcast_to(P.reshape(ct_s, (*lead, 1, k)), sq))
    if ct_u is not None or ct_vt is not None:
        off = P.broadcast_to(P.const(~np.eye(k, dtype=bool)), sq)
        gap = P.sub(P.mul(s_j, s_j), P.mul(s_i, s_i))
        f = P.where(
            off, P.div(1.0, P.where(off, gap, P.const(1, sq, gap.dtype))), P.const(0, sq, gap.dtype)
        )
    extra = None  # the terms outside U's and V's span
    if ct_u is not None:
        utg = _mm(_t(u), ct_u)
        term = P.mul(P.mul(f, P.sub(utg, _t(utg))), s_j)
        inner = term if inner is None else P.add(inner, term)
        if m > k:
            scaled = P.div(ct_u, P.broadcast_to(P.reshape(s, (*lead, 1, k)), ct_u.shape))
            extra = _mm(P.sub(scaled, _mm(u, _mm(_t(u), scaled))), vt)
    if ct_vt is not None:
        v, ct_v = _t(vt), _t(ct_vt)
        vtg = _mm(vt, ct_v)
        term = P.mul(s_i, P.mul(f, P.sub(vtg, _t(vtg))))
        inner = term if inner is None else P.add(inner, term)
        if n > k:
            rows = P.sub(ct_vt, _mm(_mm(ct_vt, v), vt))  # V_ct^T (I - V V^T)
            scaled = P.div(rows, P.broadcast_to(P.reshape(s, (*lead, k, 1)), rows.shape))
            term = _mm(u, scaled)
            extra = term if extra is None else P.add(extra, term)
    out = _mm(u, _mm(inner, vt))
    return out if extra is None else P.add(out, extra)


def _svd_impl(which: int):
    return lambda a: np.linalg.svd(a, full_matrices=False)[which]


def _svd_infer(which: int):
    def infer(shapes, dtypes, params):
        *lead, m, n = shapes[0]
        k = min(m, n)
        return (tuple(lead) + ((m, k), (k,), (k, n))[which]), dtypes[0]

    return infer


svd_u_p = _register(
    "svd_u", _svd_impl(0), _svd_infer(0), lambda ct, out, a: (_svd_cotangent(a, ct, None, None),)
)
svd_s_p = _register(
    "svd_s",
    lambda a: np.linalg.svd(a, compute_uv=False),
    _svd_infer(1),
    lambda ct, out, a: (_svd_cotangent(a, None, ct, None),),
)
svd_vt_p = _register(
    "svd_vt", _svd_impl(2), _svd_infer(2), lambda ct, out, a: (_svd_cotangent(a, None, None, ct),)
)


def _copyltu(x: Var) -> Var:
    """tril(x) + tril(x, -1)^T: the symmetric matrix with x's lower triangle."""
    n = x.shape[-1]
    lower = P.broadcast_to(P.const(np.tril(np.ones((n, n), bool))), x.shape)
    return P.where(lower, x, _t(x))


def _qr_square_cotangent(q: Var, r: Var, ct_q: Var, ct_r: Var) -> Var:
    """A = QR with A m x n, m >= n: A_ct = (Q_ct + Q copyltu(M)) R^-T, M = R R_ct^T - Q_ct^T Q."""
    mm = P.sub(_mm(r, _t(ct_r)), _mm(_t(ct_q), q))
    b = P.add(ct_q, _mm(q, _copyltu(mm)))
    return _t(solve(r, _t(b), "upper"))  # B R^-T (R is upper triangular)


def _qr_cotangent(a: Var, ct_q, ct_r) -> Var:
    m, n = a.shape[-2:]
    q, r = P.emit(qr_q_p, a), P.emit(qr_r_p, a)
    ct_q = P.zeros_like(q) if ct_q is None else ct_q
    ct_r = P.zeros_like(r) if ct_r is None else ct_r
    if m >= n:
        return _qr_square_cotangent(q, r, ct_q, ct_r)
    # wide: A = Q [R1 R2] with X = A[..., :m] = Q R1 and Y = A[..., m:] = Q R2
    lead = tuple((0, d, 1) for d in a.shape[:-2])
    r1 = P.slice_(r, lead + ((0, m, 1), (0, m, 1)))
    ct_r1 = P.slice_(ct_r, lead + ((0, m, 1), (0, m, 1)))
    ct_r2 = P.slice_(ct_r, lead + ((0, m, 1), (m, n, 1)))
    y = P.slice_(a, lead + ((0, m, 1), (m, n, 1)))
    ct_x = _qr_square_cotangent(q, r1, P.add(ct_q, _mm(y, _t(ct_r2))), ct_r1)
    ct_y = _mm(q, ct_r2)
    return P.concatenate([ct_x, ct_y], a.ndim - 1)


def _qr_impl(which: int):
    return lambda a: np.linalg.qr(a, mode="reduced")[which]


def _qr_infer(which: int):
    def infer(shapes, dtypes, params):
        *lead, m, n = shapes[0]
        k = min(m, n)
        return tuple(lead) + ((m, k), (k, n))[which], dtypes[0]

    return infer


qr_q_p = _register(
    "qr_q", _qr_impl(0), _qr_infer(0), lambda ct, out, a: (_qr_cotangent(a, ct, None),)
)
qr_r_p = _register(
    "qr_r", _qr_impl(1), _qr_infer(1), lambda ct, out, a: (_qr_cotangent(a, None, ct),)
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
        raise ValueError(
            f"np.linalg.solve: shapes {x.shape} and {_v(b).shape} do not match{_src()}"
        )
    lead = np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    x = P.broadcast_to(x, lead + x.shape[-2:])
    y = P.broadcast_to(y, lead + y.shape[-2:])
    out = solve(x, y, _structure_of(x))
    return P.reshape(out, out.shape[:-1]) if vector else out


def _producer(x: Var):
    """The node of the graph being built that computes `x` (None for an input)."""
    for node in reversed(ir.current_builder().nodes):
        if node.out is x:
            return node
    return None


def _structure_of(x: Var) -> str | None:
    """ "lower" when `x` is a Cholesky factor, "upper" when it is one's transpose, else None."""
    node = _producer(x)
    if node is not None and node.prim is cholesky_p:
        return "lower"
    swap = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
    if node is not None and node.prim is P.transpose_p and tuple(node.params["perm"]) == swap:
        inner = _producer(node.inputs[0])
        if inner is not None and inner.prim is cholesky_p:
            return "upper"
    return None


def _factor_of(x: Var) -> Var | None:
    """The Cholesky factor of `x` when the graph being built already computes one."""
    for node in ir.current_builder().nodes:
        if node.prim is cholesky_p and node.inputs[0] is x:
            return node.out
    return None


def _det(a):
    return P.emit(det_p, _square_float(a, "det"))


def _slogdet(a):
    x = _square_float(a, "slogdet")
    lower = _factor_of(x)
    if lower is not None:
        # the program factors x = L L^T already (so x is positive definite, or the program fails
        # there, as NumPy's would): log|det x| = 2 sum(log(diag L)), and the derivative goes
        # through the Cholesky rule (triangular solves) instead of forming inv(x)
        n = x.shape[-1]
        diagonal = P.slice_(
            P.reshape(lower, lower.shape[:-2] + (n * n,)),
            tuple((0, d, 1) for d in lower.shape[:-2]) + ((0, n * n, n + 1),),
        )
        logdet = P.mul(P.reduce_sum(P.unary(P.log_p, diagonal), (x.ndim - 2,)), 2.0)
        return P.const(1, logdet.shape, logdet.dtype), logdet
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


def _matrix_float(a, what: str) -> Var:
    x = _v(a)
    if x.ndim < 2:
        raise np.linalg.LinAlgError(
            f"{x.ndim}-dimensional array given. Array must be at least two-dimensional "
            f"(np.linalg.{what}){_src()}"
        )
    return x if P.is_float(x.dtype) else P.convert(x, np.float64)


def _svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    x = _matrix_float(a, "svd")
    if hermitian:
        raise TracingError(
            f"np.linalg.svd(..., hermitian=True) is not supported on traced values{_src()}; "
            "use the default hermitian=False (same values)"
        )
    if not compute_uv:
        return P.emit(svd_s_p, x)
    m, n = x.shape[-2:]
    if full_matrices and m != n:
        raise TracingError(
            f"np.linalg.svd of a {m}x{n} matrix with full_matrices=True (NumPy's default) returns "
            f"{'U' if m > n else 'V^T'} completed by an arbitrary orthonormal basis, which has no "
            f"derivative{_src()}; pass full_matrices=False (the reduced factors: the same "
            "singular values and the same leading singular vectors)"
        )
    return P.emit(svd_u_p, x), P.emit(svd_s_p, x), P.emit(svd_vt_p, x)


def _svdvals(x):
    return P.emit(svd_s_p, _matrix_float(x, "svdvals"))


def _qr(a, mode="reduced"):
    x = _matrix_float(a, "qr")
    m, n = x.shape[-2:]
    if mode == "complete" and m > n:
        raise TracingError(
            f"np.linalg.qr(..., mode='complete') of a {m}x{n} matrix completes Q by an arbitrary "
            f"orthonormal basis, which has no derivative{_src()}; use mode='reduced' (the default)"
        )
    if mode in ("reduced", "complete"):
        return P.emit(qr_q_p, x), P.emit(qr_r_p, x)
    if mode == "r":
        return P.emit(qr_r_p, x)
    raise TracingError(
        f"np.linalg.qr: mode {mode!r} is not supported on traced values{_src()}; "
        "use 'reduced', 'complete' or 'r'"
    )


def _lstsq(a, b, rcond=None):
    """np.linalg.lstsq by the SVD, as NumPy's (LAPACK gelsd): singular values below
    rcond * s_max are treated as zero. Returns (x, residuals, rank, s). NumPy's residuals are
    empty unless the matrix is tall and of full rank; here a tall matrix always gets them (the
    shape must be known while tracing): the same values when the rank is full."""
    x = _matrix_float(a, "lstsq")
    if x.ndim != 2:
        raise np.linalg.LinAlgError(f"np.linalg.lstsq: a must be two-dimensional{_src()}")
    y = _v(b)
    y = P.convert(y, P._result_dtype([x, y]) if P.is_float(y.dtype) else x.dtype)
    x = P.convert(x, y.dtype)
    m, n = x.shape
    if y.shape[0] != m or y.ndim > 2:
        raise np.linalg.LinAlgError(f"Incompatible dimensions: a {x.shape}, b {y.shape}{_src()}")
    vector = y.ndim == 1
    y2 = P.reshape(y, (m, 1)) if vector else y
    k = min(m, n)
    u, s, vt = P.emit(svd_u_p, x), P.emit(svd_s_p, x), P.emit(svd_vt_p, x)
    if rcond is None:
        rcond = float(np.finfo(x.dtype).eps) * max(m, n)
    kept, inv_s = _cutoff_inverse(s, float(rcond))
    coeffs = P.mul(_mm(_t(u), y2), P.broadcast_to(P.reshape(inv_s, (k, 1)), (k, y2.shape[1])))
    sol = _mm(_t(vt), coeffs)
    rank = P.convert(P.reduce_sum(P.convert(kept, np.int64)), np.intc)  # NumPy's C int
    if m > n:
        r = P.sub(y2, _mm(x, sol))
        residuals = P.reduce_sum(P.mul(r, r), 0)
    else:
        residuals = P.const(np.zeros((0,), y.dtype))
    return (P.reshape(sol, (n,)) if vector else sol), residuals, rank, s


def _cutoff_inverse(s: Var, rtol: float) -> tuple[Var, Var]:
    """Which singular values exceed rtol times the largest (per matrix), and 1 / s there (0
    elsewhere)."""
    lead = tuple((0, d, 1) for d in s.shape[:-1])
    top = P.broadcast_to(P.slice_(s, lead + ((0, 1, 1),)), s.shape)
    kept = P.compare(P.gt_p, s, P.mul(top, rtol))
    one = P.const(1, s.shape, s.dtype)
    return kept, P.where(kept, P.div(1.0, P.where(kept, s, one)), P.const(0, s.shape, s.dtype))


def _pinv(a, rcond=None, hermitian=False, *, rtol=None):
    """The pseudo-inverse V diag(1/s) U^T, singular values below rtol * s_max dropped (NumPy's
    default rtol: max(m, n) * eps)."""
    x = _matrix_float(a, "pinv")
    m, n = x.shape[-2:]
    tol = rcond if rcond is not None else rtol
    if tol is None:
        tol = max(m, n) * float(np.finfo(x.dtype).eps)
    if not isinstance(tol, (int, float, np.integer, np.floating)):
        raise TracingError(
            f"np.linalg.pinv: only a scalar rcond/rtol is supported on traced values{_src()}"
        )
    u, s, vt = P.emit(svd_u_p, x), P.emit(svd_s_p, x), P.emit(svd_vt_p, x)
    inv_s = _cutoff_inverse(s, float(tol))[1]
    scaled = P.mul(
        _t(vt),
        P.broadcast_to(P.reshape(inv_s, inv_s.shape[:-1] + (1, inv_s.shape[-1])), _t(vt).shape),
    )
    return _mm(scaled, _t(u))


def _matrix_rank(A, tol=None, hermitian=False, *, rtol=None):
    """The number of singular values above the tolerance (NumPy's default: s_max * max(m, n) *
    eps); an integer, no derivative."""
    x = _v(A)
    if x.ndim < 2:
        return P.convert(
            P.reduce(P.reduce_max_p, P.convert(P.compare(P.ne_p, x, 0), np.int64), None), np.int64
        )
    x = _matrix_float(x, "matrix_rank")
    s = P.emit(svd_s_p, x)
    m, n = x.shape[-2:]
    if tol is not None:
        if not isinstance(tol, (int, float, np.integer, np.floating)):
            raise TracingError(
                f"np.linalg.matrix_rank: only a scalar tol is supported on traced values{_src()}"
            )
        kept = P.compare(P.gt_p, s, float(tol))
    else:
        r = rtol if rtol is not None else max(m, n) * float(np.finfo(x.dtype).eps)
        kept = _cutoff_inverse(s, float(r))[0]
    return P.reduce_sum(P.convert(kept, np.int64), s.ndim - 1)


def _cond(x, p=None):
    a = _matrix_float(x, "cond")
    if p is None or p in (2, -2):
        s = P.emit(svd_s_p, a)
        k = s.shape[-1]
        lead = tuple((0, d, 1) for d in s.shape[:-1])
        first = P.reshape(P.slice_(s, lead + ((0, 1, 1),)), s.shape[:-1])
        last = P.reshape(P.slice_(s, lead + ((k - 1, k, 1),)), s.shape[:-1])
        return P.div(last, first) if p == -2 else P.div(first, last)
    from .numpy_namespace.reductions import _norm

    _check_square(a.shape, "cond")
    return P.mul(_norm(a, p, axis=(-2, -1)), _norm(P.emit(inv_p, a), p, axis=(-2, -1)))


def _multi_dot(arrays, *, out=None):
    """A chain of products, in NumPy's order of least work (the classic dynamic programme)."""
    if out is not None:
        raise TracingError(
            f"np.linalg.multi_dot(..., out=...) is not supported on traced values{_src()}"
        )
    xs = [_v(a) for a in arrays]
    if len(xs) < 2:
        raise ValueError(f"Expecting at least two arrays.{_src()}")
    first_vec, last_vec = xs[0].ndim == 1, xs[-1].ndim == 1
    if first_vec:
        xs[0] = P.reshape(xs[0], (1,) + xs[0].shape)
    if last_vec:
        xs[-1] = P.reshape(xs[-1], xs[-1].shape + (1,))
    dims = [x.shape[0] for x in xs] + [xs[-1].shape[1]]
    n = len(xs)
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = None
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if cost[i][j] is None or c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k

    def chain(i, j):
        if i == j:
            return xs[i]
        k = split[i][j]
        return P.matmul(chain(i, k), chain(k + 1, j))

    result = chain(0, n - 1)  # (rows, columns): drop the axes that the vectors added
    return P.reshape(
        result,
        tuple(
            d
            for i, d in enumerate(result.shape)
            if not ((i == 0 and first_vec) or (i == 1 and last_vec))
        ),
    )


FUNCTIONS = {
    "linalg.pinv": _pinv,
    "linalg.matrix_rank": _matrix_rank,
    "linalg.cond": _cond,
    "linalg.multi_dot": _multi_dot,
    "linalg.svd": _svd,
    "linalg.svdvals": _svdvals,
    "linalg.qr": _qr,
    "linalg.lstsq": _lstsq,
    "linalg.inv": _inv,
    "linalg.solve": _solve,
    "linalg.det": _det,
    "linalg.slogdet": _slogdet,
    "linalg.cholesky": _cholesky,
    "linalg.eigh": _eigh,
    "linalg.eigvalsh": _eigvalsh,
    "linalg.matrix_power": _matrix_power,
}
