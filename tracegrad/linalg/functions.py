"""np.linalg's functions on traced values (stage: tracing): each lowered to the factorisation
primitives (factorisations.py) and the basic ones, and registered in the dispatch registry as
"linalg.<name>" (np.linalg.norm is with the reductions, numpy_namespace/reductions.py).
"""

from __future__ import annotations

import numpy as np

from .. import ir
from .. import primitives as P
from ..base.errors import TracingError
from ..ir import Var
from ..numpy_namespace.operands import as_var
from ..numpy_namespace.reductions import abs_squared, norm
from ..tracing.dispatch import implements
from ..tracing.source import at_source
from .factorisations import (
    check_square,
    cholesky_p,
    det_p,
    eigh_values_p,
    eigh_vectors_p,
    inv_or_nan_p,
    inv_p,
    logabsdet_p,
    qr_q_p,
    qr_r_p,
    signdet_p,
    solve,
    svd_s_p,
    svd_u_p,
    svd_vt_p,
)

# ---- the NumPy functions


def _square_float(a, what: str) -> Var:
    x = as_var(a)
    check_square(x.shape, what)
    if not P.is_float(x.dtype):
        x = P.convert(x, np.float64)
    return x


@implements("linalg.inv")
def inv(a):
    return P.emit(inv_p, _square_float(a, "inv"))


@implements("linalg.solve")
def linear_solve(a, b):
    x = _square_float(a, "solve")
    y = as_var(b)
    y = P.convert(y, P.result_dtype([x, y]) if P.is_float(y.dtype) else np.float64)  # NumPy's
    x = P.convert(x, y.dtype)
    vector = y.ndim == 1  # NumPy 2: b is a vector only when it is 1-D
    if vector:
        y = P.reshape(y, y.shape + (1,))
    if y.shape[-2] != x.shape[-1]:
        raise ValueError(
            f"np.linalg.solve: shapes {x.shape} and {as_var(b).shape} do not match{at_source()}"
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


# Elementwise functions by what they do to an antisymmetric argument: odd ones keep it
# antisymmetric (f(-x) = -f(x)), even ones make it symmetric; any of them keeps a symmetric one so.
_ODD = frozenset({"neg", "sin", "tan", "tanh", "sinh", "arctan", "arcsin", "arcsinh", "cbrt"})
_EVEN = frozenset({"abs", "cos", "cosh"})
_ELEMENTWISE = (
    _ODD
    | _EVEN
    | frozenset(
        {"exp", "expm1", "log", "log1p", "sqrt", "sigmoid", "softplus", "erf", "erfc", "convert"}
    )
)


def _parity(x: Var, producers: dict, depth: int = 0) -> int:
    """1 when the graph makes `x` symmetric in its last two axes whatever the inputs are, -1 when
    antisymmetric, 0 when that is not known. Follows the forms kernel matrices are written in:
    elementwise functions, sums and products of such matrices, x[:, None] - x[None, :], A @ A.T,
    eye and constant matrices."""
    if x.ndim < 2 or x.shape[-1] != x.shape[-2] or depth > 64:
        return 0
    node = producers.get(id(x))
    if node is None:
        return 0
    name, params, ins = node.prim.name, node.params, node.inputs
    rec = lambda v: _parity(v, producers, depth + 1)
    if name == "const":
        value = np.broadcast_to(params["value"], params["shape"])
        swapped = np.swapaxes(value, -1, -2)
        if np.array_equal(value, swapped):
            return 1
        return -1 if np.array_equal(value, -swapped) else 0
    if name == "broadcast_to":
        src = ins[0]
        trailing = (1,) * max(0, 2 - src.ndim) + tuple(src.shape[-2:])
        return 1 if trailing[-2:] == (1, 1) else 0
    if name in ("add", "sub"):
        outer = _outer_pair(ins[0], ins[1], producers)
        if outer:
            return 1 if name == "add" else -1
        p, q = rec(ins[0]), rec(ins[1])
        return p if p == q else 0
    if name in ("mul", "div"):
        return rec(ins[0]) * rec(ins[1])
    if name in ("maximum", "minimum"):
        return 1 if rec(ins[0]) == rec(ins[1]) == 1 else 0
    if name == "integer_pow":
        p = rec(ins[0])
        return p if params["n"] % 2 else abs(p)
    if name in _ELEMENTWISE:
        p = rec(ins[0])
        return p if p == 1 or name in _ODD else (1 if name in _EVEN else 0) * abs(p)
    if name == "transpose":
        swap = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
        keep = tuple(range(x.ndim))
        return rec(ins[0]) if tuple(params["perm"]) in (swap, keep) else 0
    if name == "matmul":
        a, b = ins
        return 1 if _transposed(a, b, producers) or _transposed(b, a, producers) else 0
    return 0


def _transposed(a: Var, b: Var, producers: dict) -> bool:
    """Whether `b` is `a` with its last two axes swapped (A @ A.T)."""
    node = producers.get(id(b))
    swap = tuple(range(b.ndim - 2)) + (b.ndim - 1, b.ndim - 2)
    return (
        node is not None
        and node.prim.name == "transpose"
        and node.inputs[0] is a
        and (tuple(node.params["perm"]) == swap)
    )


def _outer_pair(a: Var, b: Var, producers: dict) -> bool:
    """Whether a and b are one vector broadcast as a column and as a row (v[:, None] and
    v[None, :]), in either order, over an n x n matrix."""
    parts = [_outer_part(v, producers) for v in (a, b)]
    if None in parts or a.ndim != 2:
        return False
    (ka, va), (kb, vb) = parts
    return va is vb and {ka, kb} == {"column", "row"}


def _outer_part(x: Var, producers: dict):
    node = producers.get(id(x))
    if node is None or node.prim.name != "broadcast_to":
        return None
    src = producers.get(id(node.inputs[0]))
    if src is None or src.prim.name != "reshape" or src.inputs[0].ndim != 1:
        return None
    shape = tuple(src.params["shape"])
    n = src.inputs[0].shape[0]
    if shape == (n, 1):
        return "column", src.inputs[0]
    if shape == (1, n):
        return "row", src.inputs[0]
    return None


def _symmetric(x: Var) -> bool:
    """Whether the graph being built makes `x` symmetric (see `_parity`)."""
    producers = {id(node.out): node for node in ir.current_builder().nodes}
    return _parity(x, producers) == 1


def _result(name: str, *values):
    """NumPy's named result (np.linalg.slogdet(a).logabsdet), a plain tuple before NumPy 2."""
    named = getattr(getattr(np.linalg, "_linalg", None), name, None)
    return named(*values) if named is not None else tuple(values)


@implements("linalg.det")
def det(a):
    return P.emit(det_p, _square_float(a, "det"))


@implements("linalg.slogdet")
def slogdet(a):
    x = _square_float(a, "slogdet")
    lower = _factor_of(x)
    # (not for complex x: the factor is of the Hermitian matrix read from x's lower triangle,
    # and a symmetric complex x is not Hermitian)
    if lower is not None and not P.is_complex(x.dtype) and _symmetric(x):
        # the program factors x = L L^T already, and x is symmetric by construction (so x is
        # positive definite, or the program fails there, as NumPy's would): log|det x| =
        # 2 sum(log(diag L)), and the derivative goes through the Cholesky rule (triangular
        # solves) instead of forming inv(x). Cholesky reads only x's lower triangle: for an x
        # not known to be symmetric, that would be the log-determinant of another matrix.
        n = x.shape[-1]
        diagonal = P.slice_(
            P.reshape(lower, lower.shape[:-2] + (n * n,)),
            tuple((0, d, 1) for d in lower.shape[:-2]) + ((0, n * n, n + 1),),
        )
        logdet = P.mul(P.reduce_sum(P.unary(P.log_p, diagonal), (x.ndim - 2,)), 2.0)
        return _result("SlogdetResult", P.const(1, logdet.shape, logdet.dtype), logdet)
    if P.is_complex(x.dtype):
        # the complex log-determinant (logabsdet_p): its real part, and the sign exp(i arg det)
        logdet = P.emit(logabsdet_p, x)
        logabsdet = P.real(logdet)
        phase = P.mul(P.convert(P.imag(logdet), x.dtype), 1j)
        singular = P.compare(P.eq_p, logabsdet, -np.inf)  # NumPy's sign is 0 there
        sign = P.where(singular, P.const(0, logdet.shape, x.dtype), P.unary(P.exp_p, phase))
        return _result("SlogdetResult", sign, logabsdet)
    return _result("SlogdetResult", P.emit(signdet_p, x), P.emit(logabsdet_p, x))


@implements("linalg.cholesky")
def cholesky(a, upper=False):
    x = _square_float(a, "cholesky")  # complex: Hermitian positive definite
    if not upper:
        return P.emit(cholesky_p, x)
    # NumPy's upper=True reads x's upper triangle and returns U with U^H U = that matrix: the
    # lower triangle of x^H holds the same matrix, and U = L^H for its lower factor L
    lower = P.emit(cholesky_p, P.conj(P.swap_last(x)))
    return P.swap_last(P.conj(lower))


@implements("linalg.eigh")
def eigh(a, UPLO="L", what="eigh"):
    if UPLO not in ("L", "U"):
        raise ValueError(f"np.linalg.{what}: UPLO argument must be 'L' or 'U'{at_source()}")
    x = _square_float(a, what)  # complex: Hermitian (first derivatives of the eigenvalues)
    vals, vecs = (P.emit(p, x, upper=UPLO == "U") for p in (eigh_values_p, eigh_vectors_p))
    return _result("EighResult", vals, vecs)


@implements("linalg.eigvalsh")
def eigvalsh(a, UPLO="L"):
    return eigh(a, UPLO, "eigvalsh")[0]


@implements("linalg.matrix_power")
def matrix_power(a, n):
    x = as_var(a)
    check_square(x.shape, "matrix_power")
    if not isinstance(n, (int, np.integer)):
        raise TypeError(f"exponent must be an integer{at_source()}")
    if n == 0:
        return P.const(np.broadcast_to(np.eye(x.shape[-1], dtype=x.dtype), x.shape).copy())
    if n < 0:
        x, n = P.emit(inv_p, _square_float(x, "matrix_power")), -n
    result, power = None, x
    while n:
        if n & 1:
            result = power if result is None else P.matmul_(result, power)
        n >>= 1
        if n:
            power = P.matmul_(power, power)
    return result


def _matrix_float(a, what: str) -> Var:
    x = as_var(a)
    if x.ndim < 2:
        raise np.linalg.LinAlgError(
            f"{x.ndim}-dimensional array given. Array must be at least two-dimensional "
            f"(np.linalg.{what}){at_source()}"
        )
    return x if P.is_float(x.dtype) else P.convert(x, np.float64)


@implements("linalg.svd")
def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    x = _matrix_float(a, "svd")  # complex: d(singular values) only
    if hermitian:
        raise TracingError(
            f"np.linalg.svd(..., hermitian=True) is not supported on traced values{at_source()}; "
            "use the default hermitian=False (same values)"
        )
    if not compute_uv:
        return P.emit(svd_s_p, x)
    m, n = x.shape[-2:]
    if full_matrices and m != n:
        raise TracingError(
            f"np.linalg.svd of a {m}x{n} matrix with full_matrices=True (NumPy's default) returns "
            f"{'U' if m > n else 'V^T'} completed by an arbitrary orthonormal basis, which has no "
            f"derivative{at_source()}; pass full_matrices=False (the reduced factors: the same "
            "singular values and the same leading singular vectors)"
        )
    return _result("SVDResult", P.emit(svd_u_p, x), P.emit(svd_s_p, x), P.emit(svd_vt_p, x))


@implements("linalg.svdvals")
def svdvals(x):
    return P.emit(svd_s_p, _matrix_float(x, "svdvals"))


@implements("linalg.qr")
def qr(a, mode="reduced"):
    x = _matrix_float(a, "qr")
    m, n = x.shape[-2:]
    if mode == "complete" and m > n:
        raise TracingError(
            f"np.linalg.qr(..., mode='complete') of a {m}x{n} matrix completes Q by an arbitrary "
            f"orthonormal basis, which has no derivative{at_source()}; use mode='reduced' (the default)"
        )
    if mode in ("reduced", "complete"):
        return _result("QRResult", P.emit(qr_q_p, x), P.emit(qr_r_p, x))
    if mode == "r":
        return P.emit(qr_r_p, x)
    raise TracingError(
        f"np.linalg.qr: mode {mode!r} is not supported on traced values{at_source()}; "
        "use 'reduced', 'complete' or 'r'"
    )


@implements("linalg.lstsq")
def lstsq(a, b, rcond=None):
    """np.linalg.lstsq by the SVD, as NumPy's (LAPACK gelsd): singular values below
    rcond * s_max are treated as zero. Returns (x, residuals, rank, s). NumPy's residuals are
    empty unless the matrix is tall and of full rank; here a tall matrix always gets them (the
    shape must be known while tracing): the same values when the rank is full. Where NumPy
    raises because the SVD failed (an inf in a), the solution is NaN. Complex: V diag(1/s) U^H b
    and real residuals sum(|r|^2); derivatives go through the singular vectors (refused)."""
    x = _matrix_float(a, "lstsq")
    if x.ndim != 2:
        raise np.linalg.LinAlgError(f"np.linalg.lstsq: a must be two-dimensional{at_source()}")
    y = as_var(b)
    y = P.convert(y, P.result_dtype([x, y]) if P.is_float(y.dtype) else np.float64)  # NumPy's
    x = P.convert(x, y.dtype)
    m, n = x.shape
    if y.shape[0] != m or y.ndim > 2:
        raise np.linalg.LinAlgError(
            f"Incompatible dimensions: a {x.shape}, b {y.shape}{at_source()}"
        )
    vector = y.ndim == 1
    y2 = P.reshape(y, (m, 1)) if vector else y
    k = min(m, n)
    u, s, vt = P.emit(svd_u_p, x), P.emit(svd_s_p, x), P.emit(svd_vt_p, x)
    if rcond is None:
        rcond = float(np.finfo(x.dtype).eps) * max(m, n)
    kept, inv_s = _cutoff_inverse(s, float(rcond))
    coeffs = P.mul(
        P.matmul_(P.swap_last(P.conj(u)), y2),
        P.broadcast_to(P.reshape(inv_s, (k, 1)), (k, y2.shape[1])),
    )
    sol = P.matmul_(P.swap_last(P.conj(vt)), coeffs)
    # inf in a: NaN singular values, which the cutoff drops as zeros; NumPy raises. Give NaN.
    if k:
        s_max = P.slice_(s, ((0, 1, 1),))
        failed = P.broadcast_to(P.reshape(P.compare(P.ne_p, s_max, s_max), (1, 1)), sol.shape)
        sol = P.where(failed, P.const(np.nan, sol.shape, sol.dtype), sol)
    rank = P.convert(P.reduce_sum(P.convert(kept, np.int64)), np.intc)  # NumPy's C int
    if m > n:
        r = P.sub(y2, P.matmul_(x, sol))
        residuals = P.reduce_sum(abs_squared(r), 0)  # real, for complex values too
    else:
        residuals = P.const(np.zeros((0,), P.real_dtype(y.dtype)))
    return (P.reshape(sol, (n,)) if vector else sol), residuals, rank, s


def _cutoff_inverse(s: Var, rtol: float) -> tuple[Var, Var]:
    """Which singular values exceed rtol times the largest (per matrix), and 1 / s there (0
    elsewhere)."""
    lead = tuple((0, d, 1) for d in s.shape[:-1])
    top = P.broadcast_to(P.slice_(s, lead + ((0, 1, 1),)), s.shape)
    kept = P.compare(P.gt_p, s, P.mul(top, rtol))
    one = P.const(1, s.shape, s.dtype)
    return kept, P.where(kept, P.div(1.0, P.where(kept, s, one)), P.const(0, s.shape, s.dtype))


@implements("linalg.pinv")
def pinv(a, rcond=None, hermitian=False, *, rtol=None):
    """The pseudo-inverse V diag(1/s) U^H, singular values below rtol * s_max dropped (NumPy's
    default rtol: max(m, n) * eps). Complex: derivatives go through the singular vectors
    (refused)."""
    x = _matrix_float(a, "pinv")
    m, n = x.shape[-2:]
    tol = rcond if rcond is not None else rtol
    if tol is None:
        tol = max(m, n) * float(np.finfo(x.dtype).eps)
    if not isinstance(tol, (int, float, np.integer, np.floating)):
        raise TracingError(
            f"np.linalg.pinv: only a scalar rcond/rtol is supported on traced values{at_source()}"
        )
    u, s, vt = P.emit(svd_u_p, x), P.emit(svd_s_p, x), P.emit(svd_vt_p, x)
    inv_s = _cutoff_inverse(s, float(tol))[1]
    v = P.swap_last(P.conj(vt))
    scaled = P.mul(
        v, P.broadcast_to(P.reshape(inv_s, inv_s.shape[:-1] + (1, inv_s.shape[-1])), v.shape)
    )
    return P.matmul_(scaled, P.swap_last(P.conj(u)))


@implements("linalg.matrix_rank")
def matrix_rank(A, tol=None, hermitian=False, *, rtol=None):
    """The number of singular values above the tolerance (NumPy's default: s_max * max(m, n) *
    eps); an integer, no derivative."""
    x = as_var(A)
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
                f"np.linalg.matrix_rank: only a scalar tol is supported on traced values{at_source()}"
            )
        kept = P.compare(P.gt_p, s, float(tol))
    else:
        r = rtol if rtol is not None else max(m, n) * float(np.finfo(x.dtype).eps)
        kept = _cutoff_inverse(s, float(r))[0]
    return P.reduce_sum(P.convert(kept, np.int64), s.ndim - 1)


@implements("linalg.cond")
def cond(x, p=None):
    a = _matrix_float(x, "cond")
    if a.shape[-1] == 0 or a.shape[-2] == 0:
        raise np.linalg.LinAlgError(f"cond is not defined on empty arrays{at_source()}")
    if p is None or p in (2, -2):
        s = P.emit(svd_s_p, a)
        k = s.shape[-1]
        lead = tuple((0, d, 1) for d in s.shape[:-1])
        first = P.reshape(P.slice_(s, lead + ((0, 1, 1),)), s.shape[:-1])
        last = P.reshape(P.slice_(s, lead + ((k - 1, k, 1),)), s.shape[:-1])
        r = P.div(last, first) if p == -2 else P.div(first, last)
    else:
        check_square(a.shape, "cond")
        inverse = P.emit(inv_or_nan_p, a)  # a singular matrix: NaN, reported as inf below
        r = P.mul(norm(a, p, axis=(-2, -1)), norm(inverse, p, axis=(-2, -1)))
    # NumPy: NaN (a singular matrix: 0/0, or a NaN inverse) is inf, unless a has NaN entries
    axes = (a.ndim - 2, a.ndim - 1)
    nan_in_a = P.reduce(P.reduce_max_p, P.convert(P.emit(P.isnan_p, a), np.int8), axes)
    inf = P.where(P.compare(P.eq_p, nan_in_a, 0), P.const(np.inf, r.shape, r.dtype), r)
    return P.where(P.emit(P.isnan_p, r), inf, r)


@implements("linalg.multi_dot")
def multi_dot(arrays, *, out=None):
    """A chain of products, in NumPy's order of least work (the classic dynamic programme)."""
    if out is not None:
        raise TracingError(
            f"np.linalg.multi_dot(..., out=...) is not supported on traced values{at_source()}"
        )
    xs = [as_var(a) for a in arrays]
    if len(xs) < 2:
        raise ValueError(f"Expecting at least two arrays.{at_source()}")
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
