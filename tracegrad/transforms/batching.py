"""vmap as a graph-to-graph transform: a batch axis through every primitive's batching rule.

`vmap(graph, axes, size, out_axes)` takes the graph of the function on one example and returns
the graph on the whole batch: each mapped input has the batch axis at its position in `axes`,
which is moved to the front, every node is emitted through its primitive's `batch` rule (a
matrix product stays one product: see `primitive_table/matmul.py`), and each output's batch axis
is moved to its position in `out_axes` (an output that does not depend on a mapped input is
broadcast, unless its out_axis is None).
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import ir
from .. import primitives as P
from ..ir import Builder, Graph


def vmap(
    graph: Graph,
    in_axes: Sequence[int | None],
    size: int,
    out_axes: Sequence[int | None],
    what: str = "vmap",
) -> Graph:
    """`in_axes` has one entry per input of `graph` (None: not mapped); the returned graph's
    inputs carry the batch axis there. `out_axes` has one entry per output."""
    builder = Builder()
    args, flags = [], []
    for v, axis in zip(graph.inputs, in_axes, strict=True):
        if axis is None:
            builder.inputs.append(v)
            args.append(v)
            flags.append(False)
            continue
        shape = v.shape[:axis] + (size,) + v.shape[axis:]
        args.append(builder.new_input(shape, v.dtype))
        flags.append(True)
    with ir.building(builder):
        args = [
            P.transpose(a, (axis, *(i for i in range(a.ndim) if i != axis))) if b else a
            for a, b, axis in zip(args, flags, in_axes, strict=True)
        ]
        results = P.batch_inline(graph, args, flags, size)
        outputs = []
        for j, ((value, is_batched), axis) in enumerate(zip(results, out_axes, strict=True)):
            if axis is None:
                if is_batched:
                    raise ValueError(
                        f"{what}: out_axes is None for output {j}, but it depends on the mapped "
                        "inputs (it differs across the batch); give it an axis, e.g. out_axes=0"
                    )
                outputs.append(value)
                continue
            if not is_batched:
                value = P.broadcast_to(P.reshape(value, (1,) + value.shape), (size,) + value.shape)
            perm = list(range(1, value.ndim))
            perm.insert(axis, 0)
            outputs.append(P.transpose(value, perm))
    return builder.graph(outputs)
