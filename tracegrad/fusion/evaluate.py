"""A plan run with NumPy, each loop over its whole iteration space at once: the executable
definition of the plan's ops, which every code generator's kernels must agree with."""

from __future__ import annotations

import numpy as np

from .. import primitives as P
from .steps import (
    Buffer,
    Clamp,
    Compute,
    Equal,
    FusedLoop,
    Index,
    Inside,
    Literal,
    Load,
    MatmulStep,
    Plan,
    ViewStep,
)


def evaluate(plan: Plan, args: list[np.ndarray]) -> list[np.ndarray]:
    """Run a plan with NumPy, each loop evaluated over its whole iteration space at once.

    This is the executable definition of the ops: a generator's kernel must compute what this
    computes (up to rounding and the order of reductions)."""
    arrays: dict[int, np.ndarray] = {}
    for buf, a in zip(plan.inputs, args, strict=True):
        arrays[id(buf)] = np.asarray(a, dtype=buf.dtype)
    for buf in plan.buffers:
        if buf.role == "const":
            arrays[id(buf)] = np.broadcast_to(buf.value, buf.shape)
    with np.errstate(all="ignore"):
        for step in plan.steps:
            if isinstance(step, FusedLoop):
                _evaluate_loop(step, arrays)
            elif isinstance(step, MatmulStep):
                arrays[id(step.out)] = np.matmul(arrays[id(step.a)], arrays[id(step.b)])
            elif isinstance(step, ViewStep):
                arrays[id(step.out)] = step.node.prim.impl(arrays[id(step.src)], **step.node.params)
            elif hasattr(step, "evaluate"):  # a backend's own step runs itself
                step.evaluate(arrays)
            else:
                value = step.node.prim.impl(*[arrays[id(b)] for b in step.args], **step.node.params)
                arrays[id(step.out)] = np.asarray(value, dtype=step.out.dtype)
    return [arrays[id(b)] for b in plan.outputs]


def _evaluate_loop(loop: FusedLoop, arrays: dict[int, np.ndarray]) -> None:
    grid = np.indices(loop.shape, dtype=np.int64) if loop.shape else np.zeros((0,), np.int64)
    env: dict[str, np.ndarray] = {f"i{a}": grid[a] for a in range(len(loop.shape))}

    def index_value(ix: Index) -> np.ndarray:
        if ix.var is None:
            return np.full(loop.shape, ix.offset, np.int64)
        return ix.offset + ix.stride * env[ix.var]

    def at(buf: Buffer, index: tuple[Index, ...]) -> np.ndarray:
        a = arrays[id(buf)]
        return (
            a[tuple(index_value(ix) for ix in index)] if index else np.broadcast_to(a, loop.shape)
        )

    for op in loop.ops:
        if isinstance(op, Load):
            value = at(op.buffer, op.index)
        elif isinstance(op, Literal):
            value = np.broadcast_to(op.value, loop.shape)
        elif isinstance(op, Compute):
            value = np.asarray(op.node.prim.impl(*[env[a] for a in op.args], **op.node.params))
            value = value.astype(op.node.out.dtype, copy=False)
        elif isinstance(op, Clamp):
            value = np.clip(index_value(op.base), 0, max(op.length - 1, 0))
        elif isinstance(op, Inside):
            base = index_value(op.base)
            value = (base >= 0) & (base < op.length)
        elif isinstance(op, Equal):
            value = index_value(op.a) == index_value(op.b)
        else:
            value = np.where(env[op.cond], env[op.then], env[op.other]).astype(op.dtype)
        env[op.id] = np.broadcast_to(value, loop.shape)
    for st in loop.stores:
        out = arrays.setdefault(id(st.buffer), np.empty(st.buffer.shape, st.buffer.dtype))
        out[...] = env[st.value]
    for scan in loop.scans:
        out = arrays.setdefault(id(scan.buffer), np.empty(scan.buffer.shape, scan.buffer.dtype))
        running = P.MONOIDS[scan.op].accumulate(env[scan.value], axis=len(loop.shape) - 1)
        out[tuple(index_value(ix) for ix in scan.index)] = running
    for red in loop.reductions:
        value = P.MONOIDS[red.op].reduce(env[red.value], axis=red.axes)
        arrays[id(red.buffer)] = np.asarray(value, dtype=red.buffer.dtype)
