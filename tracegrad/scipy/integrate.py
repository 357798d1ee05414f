"""scipy.integrate.odeint on traced values, with reverse-mode derivatives by the adjoint method
(stage: the public API: it differentiates the user's `func` with tg.vjp).

On plain arrays `odeint` is SciPy's own function. When `y0`, `t` or any array leaf of the pytree
`args` is traced, the call becomes one node of the graph (primitive_table/odeint.py) that runs
SciPy's odeint on the host at run time, calling `func` on plain NumPy arrays: its values are
SciPy's, bit for bit. Its cotangents follow the adjoint method (Froehlich, Loos and Hasenauer,
2017, Sec. 2.4.2): the system augmented with the adjoint state,

    d/ds [y, a, a_t, a_args] = [f(y, s), -a^T df/dy, -a^T df/ds, -a^T df/dargs],

is integrated backwards from each time point to the one before it, with SciPy's odeint and the
same keyword arguments, starting from the solution there; the cotangent of the outputs at each
time is added on the way, and the time cotangents are g_i . f(y_i, t_i) (minus their sum for
t_0). The vector-Jacobian products of `func` come from tg.vjp on concrete arrays, compiled once
per shape and kept.

Refused: `full_output` on traced values; forward mode and second derivatives (the adjoint's own
adjoint is not built: primitive_table/odeint.py says so); a `func` that reads a traced value from
outside its arguments (pass it through `args`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

try:
    import scipy.integrate as _scipy_integrate
except ImportError as exc:  # tracegrad needs SciPy only here
    raise ImportError(
        "tracegrad.scipy.integrate runs SciPy's odeint, and SciPy is not installed: "
        "python3 -m pip install scipy (or the extra: python3 -m pip install 'tracegrad[scipy]')"
    ) from exc

from .. import ir
from .. import primitives as P
from ..api_transforms import vjp
from ..base.errors import TracingError, at
from ..base.tree import TreeDef, flatten, unflatten
from ..trace import Tracer, to_var, trace
from ..tracing.source import user_source

__all__ = ["odeint"]

F64 = np.dtype(np.float64)

#: scipy.integrate.odeint's keyword arguments
KEYWORDS = frozenset(
    (
        "Dfun",
        "col_deriv",
        "full_output",
        "ml",
        "mu",
        "rtol",
        "atol",
        "tcrit",
        "h0",
        "hmax",
        "hmin",
        "ixpr",
        "mxstep",
        "mxhnil",
        "mxordn",
        "mxords",
        "printmessg",
        "tfirst",
    )
)
#: what describes the Jacobian of `func` alone: not passed to the backward (augmented) solves
JACOBIAN_KEYWORDS = ("Dfun", "col_deriv", "ml", "mu")


def odeint(func: Callable, y0, t, args=(), **kwargs):
    """The solution of dy/dt = func(y, t, *args) at the times `t`, shape (len(t), len(y0)), as
    scipy.integrate.odeint computes it (same signature and keyword arguments). Traced `y0`, `t`
    and array leaves of `args` (any pytree: a list of (W, b) tuples) are differentiated in reverse
    mode; `func` must take every traced value it uses through `args`.

    >>> import numpy as np, tracegrad as tg
    >>> from tracegrad.scipy.integrate import odeint
    >>> def decay(y, t, k):
    ...     return -k * y
    >>> t = np.array([0.0, 1.0])
    >>> final = lambda k: odeint(decay, np.ones(1), t, (k,), rtol=1e-10, atol=1e-10)[-1, 0]
    >>> round(float(tg.grad(final)(0.5)), 6)  # d/dk exp(-k) at k = 0.5
    -0.606531
    """
    unknown = sorted(set(kwargs) - KEYWORDS)
    if unknown:
        raise TypeError(f"odeint() got an unexpected keyword argument {unknown[0]!r}")
    if not isinstance(args, tuple):
        args = (args,)  # as SciPy reads it
    leaves, tree = flatten(args)
    if isinstance(y0, (list, tuple)) and any(isinstance(v, Tracer) for v in flatten(y0)[0]):
        y0 = np.stack(y0)
    builder = ir.active_builder()
    traced = any(isinstance(v, Tracer) for v in (y0, t, *leaves))
    source = user_source() if builder is not None else None
    if traced and kwargs.get("full_output"):
        raise TracingError(
            f"odeint: full_output is not supported on traced values{at(source)}: the solver's "
            "diagnostics are not values of the graph. Call odeint without it (or call "
            "scipy.integrate.odeint with full_output on plain arrays, outside the transform)."
        )
    arrays = [v for v in leaves if _is_operand(v)]
    static = [None if _is_operand(v) else (v,) for v in leaves]
    system = OdeSystem(func, kwargs, tree, static)
    if builder is not None:  # inside a traced function: func must not read its traced values
        y0_shape = y0.shape if isinstance(y0, Tracer) else np.shape(y0)
        avals = [(y0_shape, None)] + [(a.shape, a.dtype) for a in arrays]
        _refuse_outer_values(system, avals, builder, source)
    if not traced:
        return _scipy_integrate.odeint(func, y0, t, args=args, **kwargs)
    with ir.source_location(source):
        operands = [to_var(v, builder) for v in (y0, t, *arrays)]
        out = P.emit(P.odeint_p, *operands, system=system, batch=0)
    return Tracer(out, builder)


def _is_operand(value: Any) -> bool:
    """A leaf of `args` that becomes an operand of the node (the others are held as they are)."""
    return isinstance(value, (Tracer, np.ndarray, np.generic))


def _refuse_outer_values(system: OdeSystem, avals: list, builder: ir.Builder, source):
    """Trace `func` on stand-ins of its arguments: a traced value it reaches otherwise (a closure
    variable of the function being traced) is captured from the enclosing trace, and refused,
    since the node would hold its value and its derivative would be lost. Arrays it reads from
    globals are read again at run time, by `func` itself. `avals`: (shape, dtype) of y0 (whose
    dtype is not read: func is given float64 values) and of the operand leaves of args."""
    size = int(np.prod(avals[0][0]))
    avals = [((size,), F64), ((), F64)] + avals[1:]
    _, treedef = flatten(tuple(range(len(avals))))
    try:
        _, _, captured = trace(system.rhs, avals, treedef)
    except TracingError:
        return  # Python control flow on y or t: tg.vjp answers it at run time, on values
    hidden = set(builder.root.hidden_vars)
    if any(c.ir_var not in hidden for c in captured):
        raise TracingError(
            f"odeint: {system.name}, the function it integrates, reads a traced value from "
            f"outside its arguments (a closure variable){at(source)}; odeint would hold that "
            "value as a constant and its derivative would be lost. Pass it through odeint's "
            "args instead: odeint(func, y0, t, args=(value,)) with func(y, t, value)."
        )


class OdeSystem:
    """What an odeint node runs (its `system` parameter): the user's `func`, SciPy's keyword
    arguments and the leaves of `args` that are not operands (`static`: a 1-tuple holding the
    value, or None where an operand goes). Held by reference, never persisted; equal only to
    itself."""

    __slots__ = ("func", "kwargs", "name", "rhs", "static", "tfirst", "tree")

    def __init__(self, func: Callable, kwargs: dict, tree: TreeDef, static: list):
        self.func = func
        self.kwargs = dict(kwargs)
        self.tree = tree
        self.static = static
        self.tfirst = bool(kwargs.get("tfirst", False))
        self.name = getattr(func, "__qualname__", None) or repr(func)
        self.rhs = _flat_rhs(func, tree, static, self.tfirst)

    def __repr__(self) -> str:
        options = "".join(f", {k}={v!r}" for k, v in sorted(self.kwargs.items()) if k != "Dfun")
        return f"odeint({self.name}@{id(self):x}{options})"

    def __reduce__(self):
        raise TypeError("an odeint node holds the user's function and is not pickled")

    def args(self, leaves: Sequence) -> tuple:
        return _args(self.tree, self.static, leaves)

    def solve(self, y0: np.ndarray, t: np.ndarray, leaves: Sequence) -> np.ndarray:
        """SciPy's solution, exactly as the plain call computes it."""
        return _scipy_integrate.odeint(self.func, y0, t, args=self.args(leaves), **self.kwargs)

    def cotangents(self, g, yt, y0, t, leaves: Sequence) -> np.ndarray:
        """The cotangents of y0, t and the float leaves (those of float dtype only, in that
        order, raveled and concatenated) for the cotangent `g` of the solution `yt`."""
        n_times, size = yt.shape
        g = np.asarray(g, F64)
        differentiable = [i for i, x in enumerate(leaves) if P.is_float(x.dtype)]
        n_args = sum(leaves[i].size for i in differentiable)
        args = self.args(leaves)

        # where the float operand leaves are among all leaves of args (flatten's order)
        operand_at = [j for j, s in enumerate(self.static) if s is None]
        wanted = [operand_at[k] for k in differentiable]

        def augmented(state, s):
            # [y, a, a_t, a_args] -> [f(y, s), -a^T df/dy, -a^T df/ds, -a^T df/dargs]
            y, adjoint = state[:size], state[size : 2 * size]
            s = np.float64(s)
            if self.tfirst:
                dy, pull = vjp(self.func, s, y, *args)
                ct_s, ct_y, *ct_args = pull(_like(dy, -adjoint))
            else:
                dy, pull = vjp(self.func, y, s, *args)
                ct_y, ct_s, *ct_args = pull(_like(dy, -adjoint))
            ct_leaves = flatten(tuple(ct_args))[0]
            parts = [np.ravel(dy), np.ravel(ct_y), np.reshape(ct_s, (1,))]
            parts += [np.ravel(ct_leaves[j]) for j in wanted]
            return np.concatenate(parts)

        options = self._backward_options(size, 2 * size + 1 + n_args)
        ct_y, ct_t0, ct_args = g[-1, :], 0.0, np.zeros(n_args)
        ct_times = np.zeros(n_times)
        for i in range(n_times - 1, 0, -1):
            # moving the time t_i moves the solution there by f(y_i, t_i)
            slope = np.ravel(self.call(yt[i, :], t[i], args))
            ct_times[i] = np.dot(slope, g[i, :])
            ct_t0 = ct_t0 - ct_times[i]
            state = np.concatenate((yt[i, :], ct_y, [ct_t0], ct_args))
            span = np.array([t[i], t[i - 1]], F64)
            end = _scipy_integrate.odeint(augmented, state, span, **options)[1]
            ct_y, ct_t0, ct_args = end[size : 2 * size], end[2 * size], end[2 * size + 1 :]
            ct_y = ct_y + g[i - 1, :]
        ct_times[0] = ct_t0
        parts = [ct_y] if P.is_float(y0.dtype) else []
        parts += [ct_times] if P.is_float(t.dtype) else []
        return np.concatenate(parts + [ct_args])

    def call(self, y, t, args: tuple):
        return self.func(t, y, *args) if self.tfirst else self.func(y, t, *args)

    def _backward_options(self, size: int, n_state: int) -> dict:
        """The keyword arguments of the backward solves: the forward's, without those that
        describe func's Jacobian, with per-component tolerances extended to the adjoint state
        (the y part's own, the smallest of them for the rest)."""
        options = {k: v for k, v in self.kwargs.items() if k not in JACOBIAN_KEYWORDS}
        options["tfirst"] = False  # `augmented` takes (state, s)
        for key in ("rtol", "atol"):
            tol = options.get(key)
            if tol is not None and np.ndim(tol) > 0:
                tol = np.ravel(np.asarray(tol, F64))
                rest = np.full(n_state - 2 * size, np.min(tol))
                options[key] = np.concatenate((tol, tol, rest))
        return options


def _like(value, vector: np.ndarray):
    """`vector` shaped as func's result `value` (an array, or a list of numbers)."""
    if isinstance(value, (list, tuple)):
        return type(value)(vector[i] for i in range(len(value)))
    return np.reshape(vector, np.shape(value))


def _args(tree: TreeDef, static: list, leaves: Sequence) -> tuple:
    """`args` again: the static leaves where they were, the operands' values in between."""
    values = iter(leaves)
    return unflatten(tree, [next(values) if s is None else s[0] for s in static])


def _flat_rhs(func: Callable, tree: TreeDef, static: list, tfirst: bool) -> Callable:
    """func as tg.vjp differentiates it: (y, t, *leaves) -> dy/dt, a vector like y."""

    def rhs(y, t, *leaves):
        args = _args(tree, static, leaves)
        out = func(t, y, *args) if tfirst else func(y, t, *args)
        if isinstance(out, (list, tuple)):
            out = np.stack([np.reshape(v, ()) for v in out])
        return np.reshape(out, (-1,))

    return rhs
