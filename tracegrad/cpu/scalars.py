"""Scalars of a fusion plan: many 0-d values in few buffers (a step of the plan, after planning;
cpu).

An unrolled Python loop over the elements of an array (`y[i] = f(x[i], x[j(i)])` for each `i`)
traces to many scalar computations, which the planner puts in one scalar loop with a 0-d buffer
per value it stores: a kernel with a hundred array arguments, whose compilation by Numba grows
with the square of their number (8 s at 77 arguments, 37 s at 142). Two rewrites of the plan
give such kernels a handful of arguments:

- **Assembled vectors.** A concatenation of values of one element each, every one computed by a
  scalar loop and used by nothing else, is not a step of its own: each loop stores its value at
  its position in the concatenation's buffer (`y[i] = ...` becomes a store at `i`).
- **A pool of scalars.** The other 0-d values that scalar loops store and only loops read share
  one buffer per dtype, each at its own position.

The values, the order of the steps and the arithmetic are unchanged: only where values are kept.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .. import primitives as P
from ..fusion.steps import Buffer, EvalStep, FusedLoop, Index, Load, Plan, Step, Store, ViewStep

# Fewer 0-d values than this are left in buffers of their own.
POOL_AT_LEAST = 8


def pack_scalars(plan: Plan) -> Plan:
    return _pool(_assemble(plan))


def _readers(plan: Plan) -> dict[int, list[Step]]:
    readers: dict[int, list[Step]] = {}
    for step in plan.steps:
        for b in step.reads:
            readers.setdefault(id(b), []).append(step)
    return readers


def _scalar_stores(plan: Plan) -> dict[int, Buffer]:
    """The 0-d buffers stored by scalar loops (not by reductions), by id."""
    return {
        id(s.buffer): s.buffer
        for step in plan.steps
        if isinstance(step, FusedLoop) and not step.shape
        for s in step.stores
    }


def _assemble(plan: Plan) -> Plan:
    readers = _readers(plan)
    stored = _scalar_stores(plan)
    view_of = {id(s.out): s for s in plan.steps if isinstance(s, ViewStep)}
    outputs = {id(b) for b in plan.outputs}
    moved: dict[int, tuple[Buffer, tuple[Index, ...]]] = {}  # scalar -> (target, its index)
    dropped: set[int] = set()
    for step in plan.steps:
        if not (isinstance(step, EvalStep) and step.node.prim is P.concatenate_p):
            continue
        out = step.out
        if int(np.prod(out.shape)) != len(step.args) or out.role not in ("temp", "output"):
            continue
        axis = step.node.params["axis"]
        sources = []
        for arg in step.args:
            views = []
            while id(arg) in view_of and len(readers.get(id(arg), [])) == 1:
                views.append(view_of[id(arg)])
                arg = view_of[id(arg)].src
            ok = (
                id(arg) in stored
                and arg.shape == ()
                and id(arg) not in outputs
                and len(readers.get(id(arg), [])) == 1
                and readers[id(arg)][0] is (views[-1] if views else step)
            )
            if not ok:
                break
            sources.append((arg, views))
        else:
            for k, (arg, views) in enumerate(sources):
                index = tuple(Index(None, 0, k if a == axis else 0) for a in range(out.ndim))
                moved[id(arg)] = (out, index)
                dropped.update(id(v) for v in views)
            dropped.add(id(step))
    if not moved:
        return plan
    steps = []
    for step in plan.steps:
        if id(step) in dropped:
            continue
        if isinstance(step, FusedLoop) and any(id(s.buffer) in moved for s in step.stores):
            stores = [
                Store(s.value, *moved[id(s.buffer)]) if id(s.buffer) in moved else s
                for s in step.stores
            ]
            step = replace(step, stores=stores)
        steps.append(step)
    # the scalars and their views go; each concatenation's buffer stays, written by the loops
    views = {id(s.out) for s in plan.steps if id(s) in dropped and isinstance(s, ViewStep)}
    buffers = [b for b in plan.buffers if id(b) not in moved and id(b) not in views]
    return Plan(plan.graph, buffers, plan.inputs, plan.outputs, steps)


def _pool(plan: Plan) -> Plan:
    readers = _readers(plan)
    outputs = {id(b) for b in plan.outputs}
    by_dtype: dict[str, list[Buffer]] = {}
    for b_id, b in _scalar_stores(plan).items():
        if (
            b.shape == ()
            and b.role == "temp"
            and b_id not in outputs
            and all(isinstance(r, FusedLoop) for r in readers.get(b_id, []))
        ):
            by_dtype.setdefault(np.dtype(b.dtype).str, []).append(b)
    slot: dict[int, tuple[Buffer, tuple[Index, ...]]] = {}
    pools = []
    for dtype, members in by_dtype.items():
        if len(members) < POOL_AT_LEAST:
            continue
        pool = Buffer(
            f"s{len(pools)}_{np.dtype(dtype).name}", (len(members),), np.dtype(dtype), "temp"
        )
        pools.append(pool)
        for k, b in enumerate(members):
            slot[id(b)] = (pool, (Index(None, 0, k),))
    if not slot:
        return plan
    steps = []
    for step in plan.steps:
        if isinstance(step, FusedLoop):
            ops = [
                replace(op, buffer=slot[id(op.buffer)][0], index=slot[id(op.buffer)][1])
                if isinstance(op, Load) and id(op.buffer) in slot
                else op
                for op in step.ops
            ]
            stores = [
                Store(s.value, *slot[id(s.buffer)]) if id(s.buffer) in slot else s
                for s in step.stores
            ]
            step = replace(step, ops=ops, stores=stores)
        steps.append(step)
    buffers = [b for b in plan.buffers if id(b) not in slot] + pools
    return Plan(plan.graph, buffers, plan.inputs, plan.outputs, steps)
