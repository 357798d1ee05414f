"""The ODE solver's entries (stage: primitives): `odeint`, the solution of dy/dt = func(y, t, *args)
at the times `t` (scipy.integrate.odeint on the host), and `odeint_vjp`, its reverse-mode
cotangents by the adjoint method.

Both are host steps of their own on every backend (`index_map=OWN_STEP`). Their operands are
`y0` (a scalar or a vector of D values), `t` (T times) and the array leaves of `args`; the
parameter `system` holds what the node runs: the user's `func`, the solver's keyword arguments
and the static leaves of `args` (tracegrad/scipy/integrate.py builds it). This module only asks
it for two things:

- `system.solve(y0, t, leaves)`: the (T, D) solution, scipy's own values;
- `system.cotangents(g, yt, y0, t, leaves)`: for a cotangent g of the solution yt, the
  cotangents of those of y0, t and the leaves that are floats, raveled and concatenated in that
  order into one float64 vector.

`odeint`'s adjoint rule emits `odeint_vjp` and cuts its vector into the operands' cotangents.
`odeint_vjp` is linear in g, but its own adjoint (forward mode, second derivatives) would need
the sensitivity equations of the adjoint system, which are not built: its rule refuses with a
TracingError. With `batch` = B > 0 every operand has a leading axis of B examples and the node
solves them one after another (vmap, jacobians): that is the batching rule of both entries.
"""

from __future__ import annotations

import math

import numpy as np

from ..base.errors import TracingError
from .batching import with_batch_axis
from .facets import OWN_STEP, Kind, OfItsEntry, Primitive, register
from .ops import convert, emit, is_float, reshape, slice_

F64 = np.dtype(np.float64)


def _examples(batch: int, operands) -> list:
    """The operands of each example (all of them when the node is not batched)."""
    if not batch:
        return [list(operands)]
    return [[x[i] for x in operands] for i in range(batch)]


def _stacked(batch: int, results: list) -> np.ndarray:
    return np.stack(results) if batch else results[0]


def _example_shape(shape: tuple[int, ...], batch: int) -> tuple[int, ...]:
    return tuple(shape[1:]) if batch else tuple(shape)


def _lead(batch: int) -> tuple[int, ...]:
    return (batch,) if batch else ()


# ---- odeint(y0, t, *leaves): the solution, (T, D) float64


def _solve_impl(y0, t, *leaves, system, batch):
    results = [
        np.asarray(system.solve(e[0], e[1], e[2:]), F64) for e in _examples(batch, (y0, t, *leaves))
    ]
    return _stacked(batch, results)


def _solve_infer(shapes, dtypes, params):
    batch = params["batch"]
    y0, t = _example_shape(shapes[0], batch), _example_shape(shapes[1], batch)
    if len(y0) > 1 or len(t) != 1:
        raise TracingError(
            f"odeint takes a scalar or 1-D y0 and 1-D times t, got y0 of shape {y0} and t of "
            f"shape {t}"
        )
    return _lead(batch) + (t[0], math.prod(y0)), F64


def _solve_rule(ct, out, y0, t, *leaves, system, batch):
    flat = emit(odeint_vjp_p, ct, out, y0, t, *leaves, system=system, batch=batch)
    cts, start = [], 0
    for x in (y0, t, *leaves):
        shape = _example_shape(x.shape, batch)
        size = math.prod(shape)
        if is_float(x.dtype):
            lead = tuple((0, d, 1) for d in _lead(batch))
            piece = slice_(flat, lead + ((start, start + size, 1),))
            cts.append(convert(reshape(piece, x.shape), x.dtype))
        else:
            cts.append(None)  # an integer leaf: no cotangent, and none in the vector
        start += size if is_float(x.dtype) else 0
    return tuple(cts)


# ---- odeint_vjp(g, yt, y0, t, *leaves): the cotangents of those of y0, t and the leaves that
# are floats, raveled and concatenated (y0 is read for its dtype only)


def _vjp_impl(g, yt, y0, t, *leaves, system, batch):
    results = [
        np.asarray(system.cotangents(e[0], e[1], e[2], e[3], e[4:]), F64)
        for e in _examples(batch, (g, yt, y0, t, *leaves))
    ]
    return _stacked(batch, results)


def _vjp_infer(shapes, dtypes, params):
    batch = params["batch"]
    sizes = [math.prod(_example_shape(s, batch)) for s in shapes[2:]]
    floats = [n for n, d in zip(sizes, dtypes[2:], strict=True) if is_float(d)]
    return _lead(batch) + (sum(floats),), F64


def _vjp_rule(ct, out, *operands, system, batch):
    raise TracingError(
        "odeint: forward mode (tg.jvp, tg.jacfwd, tg.linearize) and second or higher derivatives "
        "(tg.hessian, tg.hvp, grad of grad) through odeint are not supported: its adjoint method "
        "gives first-order reverse mode only (tg.grad, tg.value_and_grad, tg.vjp, tg.jacobian). "
        "For second derivatives, take finite differences of tg.grad."
    )


# ---- batching: every operand given the batch axis, the examples solved one after another


def _batch(prim: Primitive):
    def rule(size, inputs, batched, system, batch):
        xs = [with_batch_axis(x, b, size) for x, b in zip(inputs, batched, strict=True)]
        if not batch:
            return emit(prim, *xs, system=system, batch=size)
        # batched again (vmap of vmap): the two batch axes as one, split again after
        merged = [reshape(x, (size * batch,) + x.shape[2:]) for x in xs]
        out = emit(prim, *merged, system=system, batch=size * batch)
        return reshape(out, (size, batch) + out.shape[1:])

    return rule


odeint_p = register(
    Primitive(
        "odeint",
        Kind.SHAPE,
        _solve_impl,
        _solve_infer,
        _solve_rule,
        OfItsEntry(_batch),
        index_map=OWN_STEP,
        fresh_result=True,
    )
)

odeint_vjp_p = register(
    Primitive(
        "odeint_vjp",
        Kind.SHAPE,
        _vjp_impl,
        _vjp_infer,
        _vjp_rule,
        OfItsEntry(_batch),
        index_map=OWN_STEP,
        fresh_result=True,
    )
)
