"""The linear-algebra primitives of the table and their rules (stage: tracing, registered when this
module is imported: by the traced NumPy namespace, or by the loader of a persisted program that
holds one of them): inv, solve, det, log|det|, cholesky, eigh, svd and qr, each
referencing NumPy's LAPACK-backed function and batched over leading axes as NumPy's is.
"""

from __future__ import annotations

import numpy as np

from .. import primitives as P
from ..ir import Var
from ..primitives import Kind, Primitive
from ..base import blas_threads
from ..tracing.source import at_source


def check_square(shape, what: str) -> None:
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise np.linalg.LinAlgError(
            f"Last 2 dimensions of the array must be square (np.linalg.{what} of shape {shape}){at_source()}"
        )


def _square_infer(out_shape):
    def infer(shapes, dtypes, params):
        return out_shape(shapes[0]), dtypes[0]

    return infer


def _work(*arrays) -> int:
    """About the multiply-adds of a factorisation or solve of these operands."""
    return sum(int(x.size) * int(x.shape[-1]) for x in arrays if getattr(x, "ndim", 0) >= 2)


def _register(name, impl, infer, adjoint, differentiable=True, complex_operands=False) -> Primitive:
    # small matrices on one BLAS thread: several threads on a few hundred rows wait for each
    # other far longer than they save (and on a busy machine, for a descheduled one)
    impl = blas_threads.small_on_one_thread(impl, _work)
    # a leading batch axis is one more stacked matrix: the same primitive on the batch
    batch = P.every_operand()
    prim = Primitive(
        name,
        Kind.SHAPE,
        impl,
        infer,
        adjoint,
        batch,
        None,
        differentiable,
        index_map=P.OWN_STEP,
        complex_operands=complex_operands,
    )
    return P.register(prim)


def _t(x: Var) -> Var:
    return P.swap_last(x)


def _mm(a: Var, b: Var) -> Var:
    return P.matmul_(a, b)


def _expand(v: Var, like: Var) -> Var:
    """A per-matrix value (shape like[:-2]) broadcast over the matrices' two last axes."""
    return P.broadcast_to(P.reshape(v, v.shape + (1, 1)), like.shape)


def _lower_only(sym_ct: Var) -> Var:
    """The cotangent of the input of a function that reads the lower triangle of A as the
    symmetric matrix S = tril(A) + tril(A, -1)^T, from the cotangent of S. A complex A is read
    as the Hermitian S = tril(A) + tril(A, -1)^H with the real part of A's diagonal (LAPACK's
    Hermitian routines ignore its imaginary part): under docs/complex.md's pairing, the strict
    lower triangle's cotangent is G + conj(G)^T and the diagonal's Re(G)."""
    n = sym_ct.shape[-1]
    both = P.add(sym_ct, _t(P.conj(sym_ct)))
    strict = P.broadcast_to(P.const(np.tril(np.ones((n, n), bool), -1)), sym_ct.shape)
    diag = P.broadcast_to(P.const(np.eye(n, dtype=bool)), sym_ct.shape)
    zero = P.const(0, sym_ct.shape, sym_ct.dtype)
    on_diag = P.convert(P.real(sym_ct), sym_ct.dtype)
    return P.where(strict, both, P.where(diag, on_diag, zero))


# ---- inv, solve, det, log|det|
# Complex matrices: these functions are holomorphic, so their rules (docs/complex.md: a cotangent
# pairs with a tangent without a conjugate) are the real ones, with transposes, not conjugate
# transposes.


def _inv_rule(ct, out, a):
    return (P.neg(_mm(_t(out), _mm(ct, _t(out)))),)


inv_p = _register(
    "inv", np.linalg.inv, _square_infer(lambda s: s), _inv_rule, complex_operands=True
)


def _inv_or_nan(a):
    """inv(a), with NaN for each singular matrix instead of an error: what np.linalg.cond
    computes with (it then reports such a matrix's condition number as inf)."""
    try:
        return np.linalg.inv(a)
    except np.linalg.LinAlgError:
        pass
    out = np.empty(a.shape, np.result_type(a.dtype, np.float32))
    flat, into = a.reshape((-1,) + a.shape[-2:]), out.reshape((-1,) + a.shape[-2:])
    for k in range(flat.shape[0]):
        try:
            into[k] = np.linalg.inv(flat[k])
        except np.linalg.LinAlgError:
            into[k] = np.nan
    return out


inv_or_nan_p = _register(
    "inv_or_nan", _inv_or_nan, _square_infer(lambda s: s), _inv_rule, complex_operands=True
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
    complex_operands=True,
)


def _cofactors(a):
    """The cofactor matrix adj(a)^T, det's derivative: det(a) inv(a)^T, and for a singular
    matrix (where that fails) from the SVD a = U S V^H: det(U) det(V^H) conj(U) diag(c) conj(V^H)
    with c_i the product of the singular values other than s_i (conj: nothing, for real a)."""
    a = np.asarray(a)
    try:
        with np.errstate(all="ignore"):
            return np.linalg.det(a)[..., None, None] * np.swapaxes(np.linalg.inv(a), -1, -2)
    except np.linalg.LinAlgError:
        pass
    u, s, vt = np.linalg.svd(a)
    n = s.shape[-1]
    others = np.prod(np.where(np.eye(n, dtype=bool), 1.0, s[..., None, :]), axis=-1)
    sign = np.linalg.det(u) * np.linalg.det(vt)
    u, vt = np.conj(u), np.conj(vt)
    return (sign[..., None, None] * (u * others[..., None, :]) @ vt).astype(a.dtype)


def _cofactors_rule(ct, out, a):
    """d<ct, det(a) a^-T> = det(a) (<ct, a^-T> a^-T - a^-T ct^T a^-T) : da, with M = a^-1
    (second derivatives of det: they need an invertible matrix)."""
    m_t = _t(P.emit(inv_p, a))
    dot = P.reduce_sum(P.mul(ct, m_t), (a.ndim - 2, a.ndim - 1))
    det = P.emit(det_p, a)
    inner = P.sub(P.mul(_expand(dot, a), m_t), _mm(m_t, _mm(_t(ct), m_t)))
    return (P.mul(_expand(det, a), inner),)


cofactors_p = _register(
    "cofactors", _cofactors, _square_infer(lambda s: s), _cofactors_rule, complex_operands=True
)
# det's derivative is its cofactor matrix, which exists for singular matrices too
det_p = _register(
    "det",
    np.linalg.det,
    _square_infer(lambda s: s[:-2]),
    lambda ct, out, a: (P.mul(_expand(ct, a), P.emit(cofactors_p, a)),),
    complex_operands=True,
)


def _logabsdet(a):
    """log|det a|; for a complex matrix, the complex log-determinant log|det a| + i arg(det a),
    holomorphic (np.linalg.slogdet's logabsdet is its real part and its sign exp(i times its
    imaginary part)): one entry whose rule, d log det = tr(a^-1 da), holds for both."""
    sign, logabsdet = np.linalg.slogdet(a)
    if np.iscomplexobj(a):
        return (logabsdet + 1j * np.angle(sign)).astype(a.dtype)
    return logabsdet


logabsdet_p = _register(
    "logabsdet",
    _logabsdet,
    _square_infer(lambda s: s[:-2]),
    lambda ct, out, a: (P.mul(_expand(ct, a), _t(P.emit(inv_p, a))),),
    complex_operands=True,
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
    of the symmetric matrix is sym(L^-T P L^-1); NumPy reads A's lower triangle. A complex A =
    L L^H (Hermitian): under docs/complex.md's pairing (the conjugate of the usual gradient),
    Y = L^-T P conj(L)^-1 and the cotangent of the Hermitian matrix is (Y + conj(Y)^T) / 2."""
    n = out.shape[-1]
    phi = _mm(_t(out), ct)
    halved = (np.tril(np.ones((n, n)), -1) + 0.5 * np.eye(n)).astype(out.dtype)
    phi = P.mul(phi, P.broadcast_to(P.const(halved), phi.shape))
    y = solve(_t(out), phi, "upper")  # L^-T P
    right = P.conj(out)  # L itself when real
    m = _t(solve(_t(right), _t(y), "upper"))  # L^-T P conj(L)^-1
    return (_lower_only(P.mul(P.add(m, _t(P.conj(m))), 0.5)),)


cholesky_p = _register(
    "cholesky",
    np.linalg.cholesky,
    _square_infer(lambda s: s),
    _cholesky_rule,
    complex_operands=True,
)


def _upper_only(sym_ct: Var) -> Var:
    """As `_lower_only`, for a function that reads the upper triangle."""
    return _t(_lower_only(_t(sym_ct)))


def _triangle_only(sym_ct: Var, upper: bool) -> Var:
    return _upper_only(sym_ct) if upper else _lower_only(sym_ct)


# eigh reads one triangle of A, the lower (NumPy's UPLO="L") or the upper: `upper` says which.
# The primitive reads it itself (not the lower triangle of A^T): LAPACK's eigenvectors of the same
# symmetric matrix differ in sign between the two, and ours are NumPy's, column for column.
def _eigh_values_rule(ct, out, a, upper):
    """dw_i = v_i^H dS v_i: the cotangent of S is conj(V diag(ct) V^H) (V diag(ct) V^T when
    real), then that of the triangle read."""
    v = P.emit(eigh_vectors_p, a, upper=upper)
    n = a.shape[-1]
    scaled = P.mul(v, P.broadcast_to(P.reshape(ct, ct.shape[:-1] + (1, n)), v.shape))
    return (_triangle_only(P.conj(_mm(scaled, _t(P.conj(v)))), upper),)


def _eigh_vectors_rule(ct, out, a, upper):
    """dV = V (F o (V^H dS V)), F_ij = 1 / (w_j - w_i) off the diagonal: the cotangent of S is
    conj(V) (F o (V^T ct)) V^T (V (F o V^T ct) V^T when real), then that of the triangle read.

    A complex eigenvector is defined up to a phase e^(i t): the rule is exact for a function
    that does not see the phases (|v|, v v^H, ...), the only kind whose derivative exists. One
    that does see them (Im(diag(V^T ct)) != 0, what it would change along a phase) gets NaN,
    not a number in an arbitrary phase convention."""
    w = P.emit(eigh_values_p, a, upper=upper)
    n = a.shape[-1]
    shape = a.shape
    gaps = P.sub(
        P.broadcast_to(P.reshape(w, w.shape[:-1] + (1, n)), shape),
        P.broadcast_to(P.reshape(w, w.shape[:-1] + (n, 1)), shape),
    )  # w_j - w_i
    off = P.broadcast_to(P.const(~np.eye(n, dtype=bool)), shape)
    safe = P.where(off, gaps, P.const(1, shape, gaps.dtype))
    f = P.where(off, P.div(1.0, safe), P.const(0, shape, gaps.dtype))
    vt_ct = _mm(_t(out), ct)
    s = _mm(P.conj(out), _mm(P.mul(f, vt_ct), _t(out)))
    if P.is_complex(a.dtype):
        s = P.where(_phase_dependent(vt_ct), np.nan, s)
        return (_triangle_only(s, upper),)
    return (_triangle_only(P.mul(P.add(s, _t(s)), 0.5), upper),)


def _phase_dependent(vt_ct: Var) -> Var:
    """Whether a cotangent of unit complex vectors V (given as V^T ct) changes along their
    phases: Im(diag(V^T ct)) not zero, to rounding of its size (a bool, broadcast)."""
    n = vt_ct.shape[-1]
    diag = P.reduce_sum(P.mul(vt_ct, _eye(n, vt_ct)), (vt_ct.ndim - 1,))
    size = P.reduce(P.reduce_max_p, P.emit(P.abs_p, vt_ct), (vt_ct.ndim - 2, vt_ct.ndim - 1))
    worst = P.reduce(P.reduce_max_p, P.emit(P.abs_p, P.imag(diag)), (diag.ndim - 1,))
    bad = P.compare(P.gt_p, worst, P.add(P.mul(size, 1e-8), 1e-300))
    return P.broadcast_to(P.reshape(bad, bad.shape + (1, 1)), vt_ct.shape)


def _uplo(upper: bool) -> str:
    return "U" if upper else "L"


eigh_values_p = _register(
    "eigh_values",
    lambda a, upper: np.linalg.eigh(a, _uplo(upper))[0],
    lambda shapes, dtypes, p: (shapes[0][:-1], P.real_dtype(dtypes[0])),  # real for Hermitian
    _eigh_values_rule,
    complex_operands=True,
)
eigh_vectors_p = _register(
    "eigh_vectors",
    lambda a, upper: np.linalg.eigh(a, _uplo(upper))[1],
    _square_infer(lambda s: s),
    _eigh_vectors_rule,
    complex_operands=True,
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
    if P.is_complex(a.dtype) and (ct_u is not None or ct_vt is not None):
        return _complex_svd_cotangent(a, ct_u, ct_s, ct_vt)
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
    if P.is_complex(a.dtype):  # ds_i = Re(u_i^H da v_i): the cotangent conj(U diag(ct) V^H)
        return P.conj(out)
    return out if extra is None else P.add(out, extra)


def _complex_svd_cotangent(a: Var, ct_u, ct_s, ct_vt) -> Var:
    """The cotangent of a complex A = U diag(s) V^H. With the conjugate cotangents
    gU = conj(ct_U), gV = ct_Vh^T (the convention's cotangents conjugated: docs/complex.md),
    gA = U [(F o skew(U^H gU)) S + S (F o skew(V^H gV)) + diag(ct_s) + i diag(Im(diag(U^H gU)
    - diag(V^H gV)) / (2 s))] V^H + (I - U U^H) gU S^-1 V^H + U S^-1 gV^H (I - V V^H),
    skew(X) = X - X^H (the phase term split between U's rule and V's, which run apart), and
    the cotangent of A is conj(gA). A pair of singular vectors is defined up to a common phase
    e^(i t): the rule is exact for functions that do not see the phases (|u|, u v^H, the singular
    values at every order). One that sees them has no derivative, and this rule cannot tell (U's
    and V^H's cotangents reach it separately, and only their sum says): docs/complex.md."""
    m, n = a.shape[-2:]
    k = min(m, n)
    u, s, vt = P.emit(svd_u_p, a), P.emit(svd_s_p, a), P.emit(svd_vt_p, a)
    uh, v = P.conj(_t(u)), P.conj(_t(vt))
    lead = a.shape[:-2]
    sq = (*lead, k, k)
    cdt = a.dtype
    s_c = P.convert(s, cdt)
    s_j = P.broadcast_to(P.reshape(s_c, (*lead, 1, k)), sq)
    s_i = P.broadcast_to(P.reshape(s_c, (*lead, k, 1)), sq)
    off = P.broadcast_to(P.const(~np.eye(k, dtype=bool)), sq)
    gap = P.sub(P.mul(s_j, s_j), P.mul(s_i, s_i))
    f = P.where(off, P.div(1.0, P.where(off, gap, P.const(1, sq, cdt))), P.const(0, sq, cdt))
    eye = _eye(k, P.const(0, sq, cdt))

    def skew(x):
        return P.sub(x, P.conj(_t(x)))

    def diagonal(x):  # its diagonal, as a vector
        return P.reduce_sum(P.mul(x, eye), (x.ndim - 1,))

    inner = P.const(0, sq, cdt)
    if ct_s is not None:
        inner = P.add(
            inner, P.mul(eye, P.broadcast_to(P.reshape(P.convert(ct_s, cdt), (*lead, 1, k)), sq))
        )
    extra = None
    if ct_u is not None:
        g_u = P.conj(ct_u)
        uhg = _mm(uh, g_u)
        inner = P.add(inner, P.mul(P.mul(f, skew(uhg)), s_j))
        im = P.imag(diagonal(uhg))
        half = P.div(P.mul(P.convert(im, cdt), 0.5j), s_c)  # i Im(diag(U^H gU)) / (2 s)
        inner = P.add(inner, P.mul(eye, P.broadcast_to(P.reshape(half, (*lead, 1, k)), sq)))
        if m > k:
            scaled = P.div(g_u, P.broadcast_to(P.reshape(s_c, (*lead, 1, k)), g_u.shape))
            extra = _mm(P.sub(scaled, _mm(u, _mm(uh, scaled))), vt)
    if ct_vt is not None:
        g_v = _t(ct_vt)
        vhg = _mm(vt, g_v)
        inner = P.add(inner, P.mul(s_i, P.mul(f, skew(vhg))))
        im = P.imag(diagonal(vhg))
        half = P.div(P.mul(P.convert(im, cdt), -0.5j), s_c)  # -i Im(diag(V^H gV)) / (2 s)
        inner = P.add(inner, P.mul(eye, P.broadcast_to(P.reshape(half, (*lead, 1, k)), sq)))
        if n > k:
            rows = P.sub(g_v, _mm(v, vhg))  # (I - V V^H) gV
            scaled = P.div(rows, P.broadcast_to(P.reshape(s_c, (*lead, 1, k)), rows.shape))
            term = _mm(u, P.conj(_t(scaled)))
            extra = term if extra is None else P.add(extra, term)
    out = _mm(u, _mm(inner, vt))
    if extra is not None:
        out = P.add(out, extra)
    return P.conj(out)


def _svd_impl(which: int):
    return lambda a: np.linalg.svd(a, full_matrices=False)[which]


def _svd_infer(which: int):
    def infer(shapes, dtypes, params):
        *lead, m, n = shapes[0]
        k = min(m, n)
        dtype = P.real_dtype(dtypes[0]) if which == 1 else dtypes[0]  # real singular values
        return (tuple(lead) + ((m, k), (k,), (k, n))[which]), dtype

    return infer


# complex matrices: the values, and first derivatives of the singular values only
svd_u_p = _register(
    "svd_u",
    _svd_impl(0),
    _svd_infer(0),
    lambda ct, out, a: (_svd_cotangent(a, ct, None, None),),
    complex_operands=True,
)
svd_s_p = _register(
    "svd_s",
    lambda a: np.linalg.svd(a, compute_uv=False),
    _svd_infer(1),
    lambda ct, out, a: (_svd_cotangent(a, None, ct, None),),
    complex_operands=True,
)
svd_vt_p = _register(
    "svd_vt",
    _svd_impl(2),
    _svd_infer(2),
    lambda ct, out, a: (_svd_cotangent(a, None, None, ct),),
    complex_operands=True,
)


def _copyltu(x: Var) -> Var:
    """tril(x) + tril(x, -1)^T: the symmetric matrix with x's lower triangle (for complex x the
    Hermitian one, tril(x, -1) + tril(x, -1)^H + Re(diag x))."""
    n = x.shape[-1]
    lower = P.broadcast_to(P.const(np.tril(np.ones((n, n), bool), -1)), x.shape)
    diag = P.broadcast_to(P.const(np.eye(n, dtype=bool)), x.shape)
    return P.where(lower, x, P.where(diag, P.convert(P.real(x), x.dtype), _t(P.conj(x))))


def _qr_square_cotangent(q: Var, r: Var, ct_q: Var, ct_r: Var) -> Var:
    """A = QR with A m x n, m >= n: A_ct = (Q_ct + Q copyltu(M)) R^-T, M = R R_ct^T - Q_ct^T Q.
    Complex (Q^H Q = I, R's diagonal real, as LAPACK's): the conjugate of the usual gradient,
    A_ct = (Q_ct + conj(Q) copyltu(conj(M))) R^-T with the same M."""
    mm = P.conj(P.sub(_mm(r, _t(ct_r)), _mm(_t(ct_q), q)))
    b = P.add(ct_q, _mm(P.conj(q), _copyltu(mm)))
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
    # R2 = Q^H Y (Q^T Y when real)
    ct_x = _qr_square_cotangent(q, r1, P.add(ct_q, P.conj(_mm(y, _t(ct_r2)))), ct_r1)
    ct_y = _mm(P.conj(q), ct_r2)
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
    "qr_q",
    _qr_impl(0),
    _qr_infer(0),
    lambda ct, out, a: (_qr_cotangent(a, ct, None),),
    complex_operands=True,
)
qr_r_p = _register(
    "qr_r",
    _qr_impl(1),
    _qr_infer(1),
    lambda ct, out, a: (_qr_cotangent(a, None, ct),),
    complex_operands=True,
)
