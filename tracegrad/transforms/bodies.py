"""The bodies of control-flow nodes: run on the interpreter, batched, and their batched carries.

What the rules of scan, loop, while and cond (scan.py, loops.py) share.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import ir
from .. import primitives as P
from ..interpreter import evaluate
from ..ir import Builder, Graph, Var
from .packing import Aval, pack_dtype


def interpreted(graph: Graph) -> Callable:
    return lambda arrays: evaluate(graph, arrays)


def owned_results(run_body: Callable) -> Callable:
    """`run_body` (a compiled body program) with results a loop may hold from one step to the
    next. A program may return views of its own buffers (a reshape of a temporary it writes
    again on its next call), or its inputs: a loop keeping them as carries would read them
    overwritten. Results the program does not vouch for (`fresh_outputs`) are copied."""
    fresh = getattr(run_body, "fresh_outputs", None)
    if fresh is None or all(fresh):
        return run_body
    fresh = tuple(fresh)

    def run(arrays):
        outs = run_body(arrays)
        return [o if f else np.array(o) for o, f in zip(outs, fresh, strict=True)]

    return run


def floats(vars_: Sequence[Var]) -> list[int]:
    return [i for i, v in enumerate(vars_) if P.is_float(v.dtype)]


def batch_axis_to(x: Var, axis: int) -> Var:
    """Move the batch axis (axis 0) of `x` to `axis`."""
    perm = list(range(1, x.ndim))
    perm.insert(axis, 0)
    return P.transpose(x, perm)


def _batched_flags(graph: Graph, flags: Sequence[bool]) -> list[bool]:
    """Which outputs of `graph` depend on the inputs marked in `flags` (what batching batches)."""
    batched = {v for v, f in zip(graph.inputs, flags, strict=True) if f}
    for node in graph.nodes:
        if any(v in batched for v in node.inputs):
            batched.add(node.out)
    return [v in batched for v in graph.outputs]


def batched_body(
    graph: Graph, flags: Sequence[bool], size: int, out_flags: Sequence[bool]
) -> Graph:
    """`graph` with a batch axis on the inputs in `flags`; the outputs in `out_flags` batched
    (broadcast if they do not depend on a batched input), the others as they are."""
    builder = Builder()
    for v, f in zip(graph.inputs, flags, strict=True):
        builder.new_input(((size,) if f else ()) + v.shape, v.dtype)
    with ir.building(builder):
        outs = P.batch_inline(graph, builder.inputs, list(flags), size)
        outputs = []
        for (v, b), want in zip(outs, out_flags, strict=True):
            if want and not b:
                v = P.with_batch_axis(v, False, size)
            outputs.append(v)
    return builder.graph(outputs)


def carry_flags(
    graph: Graph, fixed: Sequence[bool], carry: Sequence[bool], start: int
) -> list[bool]:
    """The carries (graph inputs and outputs `start`...) that are batched once the loop runs:
    batched initially, or made batched by a step (a fixed point)."""
    carry = list(carry)
    while True:
        flags = list(fixed[:start]) + carry + list(fixed[start + len(carry) :])
        out = _batched_flags(graph, flags)[: len(carry)]
        new = [a or b for a, b in zip(carry, out, strict=True)]
        if new == carry:
            return carry
        carry = new


def truth(p: Var) -> Var:
    """A predicate as a bool value (nonzero is true)."""
    return p if p.dtype == np.bool_ else P.compare(P.ne_p, p, P.const(0, (), p.dtype))


def select_rows(mask: Var, new: Var, old: Var) -> Var:
    """Per example (axis 0): `new` where the bool vector `mask` holds, else `old`."""
    size = mask.shape[0]
    wide = P.broadcast_to(P.reshape(mask, (size,) + (1,) * (old.ndim - 1)), old.shape)
    return P.where(wide, new, old)


def repack_batched(
    pieces: Sequence[Var], layout: Sequence[Aval], size: int, stacked: Sequence[bool]
) -> Var:
    """Pieces with their batch axis at 0 (or at 1 for stacked results) -> (size, packed)."""
    dtype = pack_dtype(layout)
    rows = []
    for v, is_stacked in zip(pieces, stacked, strict=True):
        if is_stacked:
            v = P.transpose(v, [1, 0] + list(range(2, v.ndim)))
        rows.append(P.convert(P.reshape(v, (size, v.size // size)), dtype))
    if not rows:
        return P.const(0, (size, 0), dtype)
    return P.concatenate(rows, 1)
