"""Forward mode as a graph-to-graph transform, derived from reverse mode by transposition.

The cotangents of the inputs, `J^T u`, are linear in the output seeds `u`. Differentiating the
adjoint graph once more, with respect to `u` and seeded with the tangents `t`, gives the
transpose of `u -> J^T u` applied to `t`: that is `J t`, the tangent of the outputs. Every
primitive's adjoint rule is written with primitives, and the adjoint of a linear map needs only
the map's coefficients, so no primitive needs a tangent rule of its own: the value of `u` never
matters, it is a zero the simplifier folds away, and what is left is the forward-mode program
(the primal values, then a tangent for each).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import ir
from .. import primitives as P
from ..autodiff import adjoint
from ..ir import Builder, Graph, Var


def jvp(graph: Graph, wrt: Sequence[int]) -> Graph:
    """A graph with inputs `graph.inputs` then one tangent for each input in `wrt` (its shape and
    dtype), and outputs `graph.outputs` then the tangent of each output (zeros for non-float
    outputs and for outputs that do not depend on `wrt`)."""
    n_in, n_out = len(graph.inputs), len(graph.outputs)
    floats = [j for j, v in enumerate(graph.outputs) if P.is_float(v.dtype)]
    # inputs: graph.inputs, u_j;  outputs: graph.outputs, J^T u (one per wrt)
    vjp = adjoint(graph, wrt, floats, seed_ones=False, label="jvp")
    seeds = list(range(n_in, n_in + len(floats)))
    cotangents = list(range(n_out, n_out + len(wrt)))
    # inputs: graph.inputs, u_j, t_i;  outputs: vjp.outputs, then J t (one per u_j)
    transposed = adjoint(vjp, seeds, cotangents, seed_ones=False, label=None)

    builder = Builder()
    builder.inputs = list(graph.inputs)
    tangents = [builder.new_input(graph.inputs[i].shape, graph.inputs[i].dtype) for i in wrt]
    with ir.building(builder):
        zeros = [P.zeros_like(vjp.inputs[i]) for i in seeds]
        outs = ir.inline(builder, transposed, list(graph.inputs) + zeros + tangents)
        primal = outs[:n_out]
        flat_tangents = iter(outs[len(vjp.outputs) :])
        out_tangents = [
            next(flat_tangents) if P.is_float(v.dtype) else P.zeros_like(v) for v in primal
        ]
    return builder.graph(primal + out_tangents)


def jacfwd(graph: Graph, wrt: Sequence[int], n_diff: int | None = None) -> Graph:
    """Outputs: `graph`'s outputs, then d output_j / d input_i for each of the first `n_diff`
    outputs j (default: all), each i in `wrt`, shaped `output_j.shape + input_i.shape` like
    `autodiff.jacobian`'s, computed by pushing every basis tangent through the jvp graph at
    once (one batched forward pass: no intermediate holds more than a batch of tangents)."""
    n_diff = len(graph.outputs) if n_diff is None else n_diff
    for j, out in enumerate(graph.outputs[:n_diff]):
        if not P.is_float(out.dtype):
            raise TypeError(
                f"jacfwd: output {j} has dtype {out.dtype}; only float outputs have derivatives"
            )
    tangent_graph = jvp(graph, wrt)
    builder = Builder()
    builder.inputs = list(graph.inputs)
    sizes = [graph.inputs[i].size for i in wrt]
    total = sum(sizes)
    with ir.building(builder):
        outputs: list[Var] = []
        basis = []  # the tangent of input i in each of the `total` directions
        start = 0
        for i, size in zip(wrt, sizes, strict=True):
            x = graph.inputs[i]
            block = np.zeros((total, size), dtype=x.dtype)
            block[start : start + size] = np.eye(size, dtype=x.dtype)
            basis.append(P.const(block.reshape((total,) + x.shape)))
            start += size
        flags = [False] * len(graph.inputs) + [True] * len(wrt)
        results = P.batch_inline(tangent_graph, list(graph.inputs) + basis, flags, total)
        n_out = len(graph.outputs)
        outputs += [v for v, _ in results[:n_out]]
        for (tangent, is_batched), out in zip(
            results[n_out : n_out + n_diff], graph.outputs[:n_diff], strict=True
        ):
            if not is_batched:  # an output that does not depend on the inputs
                tangent = P.broadcast_to(P.reshape(tangent, (1,) + out.shape), (total,) + out.shape)
            # (total, *out.shape) -> (*out.shape, total), then split per input
            moved = P.transpose(tangent, (*range(1, out.ndim + 1), 0))
            start = 0
            for i, size in zip(wrt, sizes, strict=True):
                x = graph.inputs[i]
                piece = P.slice_(
                    moved, tuple((0, d, 1) for d in out.shape) + ((start, start + size, 1),)
                )
                outputs.append(P.reshape(piece, out.shape + x.shape))
                start += size
    return builder.graph(outputs)
