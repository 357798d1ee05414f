"""A loop body's nodes that would run on the host, written out as work its kernels do.

A loop runs all its steps in one native call (llvm/loops.py) only when its body is kernels
alone. Two kinds of node kept bodies on the Python driver: small dense linear algebra, and the
adjoint of a strided slice (`np.diag(L)`'s: an `unslice` with a step).

Small dense linear algebra, written out as elementwise arithmetic.

A loop whose body holds a `cholesky` or a `solve` (a Kalman filter: a 2 x 2 innovation
covariance per step) runs its steps from a Python driver, because LAPACK is called from Python:
tens of microseconds a step. For matrices of at most `MAX_ORDER` rows, `unrolled` rewrites those
nodes of a body into arithmetic on the matrices' entries (slices, +, *, /, sqrt, where), which the
planner fuses into the body's kernels like any other elementwise work, so that the loop runs
natively (llvm/loops.py) with no Python between steps.

The factorisations are the textbook ones, entry by entry, in a fixed order:
- cholesky: the column-by-column Cholesky-Banachiewicz recurrence, reading the lower triangle
  as NumPy does, zeros above the diagonal;
- a triangular solve (`structure` "lower" or "upper": the graph knows the matrix is a Cholesky
  factor or its transpose): forward or back substitution, row by row;
- a general solve: Gaussian elimination with partial pivoting (the first row of largest
  magnitude, as LAPACK's idamax picks it), then back substitution.
They round differently from LAPACK (not bitwise equal to NumPy's results; within a few ulps of
them times the condition number), and identically on both cpu compilers.

Where LAPACK reports a failure (a matrix that is not positive definite, an exactly singular
one), the rewritten node gives a matrix of NaN instead of raising. The program then re-runs the
call on the reference interpreter when an output holds a NaN (cpu/program.py), so that NumPy's
LinAlgError is raised as before, and returns its own results when the interpreter raises nothing.
"""

from __future__ import annotations

import numpy as np

from .. import ir
from .. import primitives as P
from ..ir import Graph, Node, Var
from ..linalg import cholesky_p, solve_p

# Matrices of at most this many rows are written out (the work grows as the cube of it).
MAX_ORDER = 4


def unrolled(graph: Graph) -> tuple[Graph, bool]:
    """`graph` with its small cholesky and solve nodes and its short strided unslices written
    out, and whether a factorisation or solve was (its results need the NaN check). The nodes of
    loops it holds are left alone (their bodies are compiled, and rewritten, when the loop is)."""
    if not any(_small(node) or _strided_unslice(node) for node in graph.nodes):
        return graph, False
    builder = ir.Builder()
    env: dict[Var, Var] = {}
    linalg = False
    for node in graph.nodes:
        inputs = tuple(env.get(v, v) for v in node.inputs)
        small, strided = _small(node), _strided_unslice(node)
        if not (small or strided):
            builder.nodes.append(Node(node.prim, inputs, node.params, node.out, node.source))
            continue
        linalg = linalg or small
        with ir.building(builder), ir.source_location(node.source):
            if strided:
                made = _unslice(inputs[0], node.params["shape"], node.params["index"])
            elif node.prim is cholesky_p:
                made = _cholesky(inputs[0])
            else:
                made = _solve(*inputs, node.params.get("structure"))
        env[node.out] = made
    outputs = tuple(env.get(v, v) for v in graph.outputs)
    return Graph(graph.inputs, tuple(builder.nodes), outputs), linalg


# An unslice with a step (which no kernel computes) along an axis at most this long becomes a
# concatenation of its rows and zeros, which one does.
MAX_SPREAD = 64


def _strided_unslice(node: Node) -> bool:
    if node.prim is not P.unslice_p or node.inputs[0].size == 0:
        return False
    steps = [
        (step, n) for (_, _, step), n in zip(node.params["index"], node.out.shape, strict=True)
    ]
    return any(abs(step) > 1 for step, _ in steps) and all(
        n <= MAX_SPREAD for step, n in steps if abs(step) > 1
    )


def _unslice(x: Var, shape: tuple[int, ...], index) -> Var:
    """unslice(x) with each stepped axis spread out to its full length first (x's rows at
    their places, zeros between), then the unit-step unslice that is left, which kernels do."""
    rest = []
    for axis, ((start, stop, step), n) in enumerate(zip(index, shape, strict=True)):
        if abs(step) <= 1:
            rest.append((start, stop, step))
            continue
        places = sorted((start + i * step, i) for i in range(x.shape[axis]))
        pieces, at = [], 0
        for place, i in places:
            if place > at:
                pieces.append(_zeros_along(x, axis, place - at))
            window = tuple((i, i + 1, 1) if a == axis else (0, d, 1) for a, d in enumerate(x.shape))
            pieces.append(P.slice_(x, window))
            at = place + 1
        if at < n:
            pieces.append(_zeros_along(x, axis, n - at))
        x = P.concatenate(pieces, axis)
        rest.append((0, n, 1))
    if x.shape == tuple(shape):
        return x
    return P.emit(P.unslice_p, x, shape=tuple(shape), index=tuple(rest))


def _zeros_along(x: Var, axis: int, length: int) -> Var:
    shape = tuple(length if a == axis else d for a, d in enumerate(x.shape))
    return P.const(np.zeros(shape, x.dtype))


def _small(node: Node) -> bool:
    if node.prim is not cholesky_p and node.prim is not solve_p:
        return False
    a = node.inputs[0]
    if a.ndim != 2 or a.dtype.kind != "f" or not 1 <= a.shape[0] <= MAX_ORDER:
        return False
    if node.out.dtype.kind != "f" or a.shape[0] != a.shape[1]:
        return False
    return node.prim is cholesky_p or (node.inputs[1].ndim in (1, 2) and node.inputs[1].size > 0)


def _entry(a: Var, i: int, j: int) -> Var:
    return P.reshape(P.slice_(a, ((i, i + 1, 1), (j, j + 1, 1))), ())


def _row(b: Var, i: int) -> Var:
    """Row i of a matrix (a vector), or element i of a vector (a scalar)."""
    if b.ndim == 1:
        return P.reshape(P.slice_(b, ((i, i + 1, 1),)), ())
    return P.reshape(P.slice_(b, ((i, i + 1, 1), (0, b.shape[1], 1))), (b.shape[1],))


def _stack(rows: list[Var], shape: tuple[int, ...]) -> Var:
    """The rows (scalars or vectors) as one array of `shape`."""
    flat = [P.reshape(r, (max(1, r.size),)) for r in rows]
    return P.reshape(P.concatenate(flat, 0), shape)


def _failed_as_nan(value: Var, ok: Var) -> Var:
    """`value` where `ok` (a scalar bool), else NaN everywhere: LAPACK's failure, in a loop."""
    nan = P.const(np.full(value.shape, np.nan, value.dtype))
    return P.where(P.broadcast_to(ok, value.shape), value, nan)


def _all(flags: list[Var]) -> Var:
    ok = flags[0]
    for flag in flags[1:]:
        ok = P.logical(P.and_p, ok, flag)
    return ok


def _cholesky(a: Var) -> Var:
    n = a.shape[0]
    zero = P.const(np.zeros((), a.dtype))
    low = [[zero] * n for _ in range(n)]
    flags = []
    for j in range(n):
        s = _entry(a, j, j)
        for k in range(j):
            s = P.sub(s, P.mul(low[j][k], low[j][k]))
        flags.append(P.compare(P.gt_p, s, zero))  # False for NaN too: LAPACK's test
        low[j][j] = P.unary(P.sqrt_p, s)
        for i in range(j + 1, n):
            t = _entry(a, i, j)
            for k in range(j):
                t = P.sub(t, P.mul(low[i][k], low[j][k]))
            low[i][j] = P.div(t, low[j][j])
    entries = [low[i][j] for i in range(n) for j in range(n)]
    return _failed_as_nan(_stack(entries, (n, n)), _all(flags))


def _solve(a: Var, b: Var, structure: str | None) -> Var:
    n = a.shape[0]
    dtype = b.dtype  # the primitive's result type
    if a.dtype != dtype:
        a = P.convert(a, dtype)
    rhs = [_row(b, i) for i in range(n)]
    if structure == "lower":
        return _substitute([[_entry(a, i, j) for j in range(n)] for i in range(n)], rhs, b, True)
    if structure == "upper":
        return _substitute([[_entry(a, i, j) for j in range(n)] for i in range(n)], rhs, b, False)
    rows = [[_entry(a, i, j) for j in range(n)] for i in range(n)]
    zero = P.const(np.zeros((), dtype))
    flags = []
    for j in range(n):
        # the pivot: the first row from j on of the largest magnitude in column j
        best = P.unary(P.abs_p, rows[j][j])
        picks = []
        for r in range(j + 1, n):
            size = P.unary(P.abs_p, rows[r][j])
            take = P.compare(P.gt_p, size, best)
            best = P.where(take, size, best)
            picks.append((r, take))
        # which row was picked, as one flag per candidate row (the last `take` that held)
        chosen: dict[int, Var] = {}
        later = None
        for r, take in reversed(picks):
            if later is None:
                chosen[r], later = take, take
            else:
                chosen[r] = P.logical(P.and_p, take, P.logical(P.not_p, later))
                later = P.logical(P.or_p, later, take)
        pivot_row, pivot_rhs = rows[j], rhs[j]
        for r in range(j + 1, n):  # row j becomes the picked row, the picked row becomes row j
            c = chosen[r]
            new_j = [P.where(c, rows[r][q], pivot_row[q]) for q in range(n)]
            rows[r] = [P.where(c, pivot_row[q], rows[r][q]) for q in range(n)]
            new_rhs = P.where(_wide(c, rhs[r]), rhs[r], pivot_rhs)
            rhs[r] = P.where(_wide(c, rhs[r]), pivot_rhs, rhs[r])
            pivot_row, pivot_rhs = new_j, new_rhs
        rows[j], rhs[j] = pivot_row, pivot_rhs
        pivot = rows[j][j]
        flags.append(P.compare(P.ne_p, pivot, zero))
        for r in range(j + 1, n):
            factor = P.div(rows[r][j], pivot)
            rows[r] = [
                rows[r][q] if q <= j else P.sub(rows[r][q], P.mul(factor, rows[j][q]))
                for q in range(n)
            ]
            rhs[r] = P.sub(rhs[r], P.mul(factor, rhs[j]))
    x = _substitute(rows, rhs, b, False)
    return _failed_as_nan(x, _all(flags))


def _wide(flag: Var, like: Var) -> Var:
    return flag if like.ndim == 0 else P.broadcast_to(flag, like.shape)


def _substitute(m: list[list[Var]], rhs: list[Var], b: Var, lower: bool) -> Var:
    """x with m x = rhs for a triangular m (its entries; the other triangle is not read)."""
    n = len(rhs)
    x: list[Var | None] = [None] * n
    order = range(n) if lower else range(n - 1, -1, -1)
    for i in order:
        t = rhs[i]
        others = range(i) if lower else range(i + 1, n)
        for k in others:
            t = P.sub(t, P.mul(m[i][k], x[k]))
        x[i] = P.div(t, m[i][i])
    return _stack(x, b.shape)
