"""The fusion plan: an optimised graph partitioned into the steps a fused backend runs (the fusion
stage of the pipeline, after the passes and before code generation).

The plan is backend-neutral (no Numba here): the CPU code generator and the CUDA code generator
consume the same plan. It is concrete: every shape, offset and constant is known, because a graph
is traced for one argument signature. A generator decides which of those numbers it bakes into
its source and which it passes at run time (the CPU generator passes sizes, offsets and most
constants, so that one compiled kernel serves every shape with the same structure).

Data structure
--------------
`Plan`
    `buffers`  every array the program touches (`Buffer`: name, shape, dtype, role)
    `inputs`   the buffer of each graph input;   `outputs`: the buffer of each graph output
    `steps`    in execution order, each one of:

`FusedLoop(name, shape, ops, stores, reductions)`
    One loop nest over the iteration space `shape` (axis 0 outermost; loop index `i<a>` for axis a).
    `ops` is a straight-line SSA program evaluated at each point of the space; every op has an
    `id` (its value's name) and a `depth`: the number of outer loop levels its value depends on
    (0: loop invariant, len(shape): innermost), so a generator may hoist it.
        `Load(id, buffer, index)`       read `buffer[index]`
        `Literal(id, value)`            a constant (a 0-d array; dtype = value.dtype)
        `Compute(id, node, args)`       an elementwise IR node applied to op ids `args`
        `Clamp(id, base, length)`       an index value: `base` clamped to [0, length)
        `Inside(id, base, length)`      a bool: 0 <= base < length
        `Select(id, cond, then, other)` `then if cond else other` (pieces of unslice/concatenate)
        `Equal(id, a, b)`               a bool: index a == index b (only with `computed_identity`:
                                        an identity-matrix constant, e.g. a jacobian's seed,
                                        is then computed, `1 if i == j else 0`, not read)
    An index is a tuple with one `Index(var, stride, offset)` per axis of the indexed buffer:
    `offset + stride * var`, where `var` is a loop index "i<a>", the id of a `Clamp` op, or None
    (the constant `offset`). Broadcasting, transposes, slices, unslices and concatenations are
    all expressed through indices: they never copy data.
    `stores`: `Store(value, buffer, index)` writes an op's value at every point.
    `scans`: `Scan(value, buffer, index, op, node)` combines an op's value along the last loop
    axis, storing each running result at `index` of `buffer` (the loop's space is the scanned
    array's, the scanned axis moved last; a loop with a scan computes nothing else).
    `reductions`: `Reduction(value, buffer, axes, op, node)` combines an op's value over the loop
    axes `axes` (op is "sum", "prod", "max" or "min"); `buffer` has the shape of the kept axes.
`MatmulStep(out, a, b)`     out = a @ b over buffers (batched over leading dims; BLAS on the CPU)
`ViewStep(out, src, node)`  out = a view of src through a shape node (reshape, transpose, slice,
                            broadcast); NumPy's semantics (a reshape of a non-contiguous array
                            copies)
`EvalStep(out, node, args)` out = node.prim.impl(*args) (the reference implementation): the
                            fallback for what a backend cannot fuse (`supports` says so)

Partitioning rules
------------------
- Values are *materialized* (get a buffer) when they must be: graph outputs, reduction results,
  matrix product operands and results, inputs of a general reshape or of an `EvalStep`. An
  expensive value (with a transcendental function in it) is also materialized when a broadcast
  would recompute it many times, or when several loops need it; a cheap one is recomputed where
  it is used, which moves fewer bytes than storing and reloading it.
- Every other elementwise or shape node is computed inline, in each loop that needs it, at the
  index that loop needs it at.
- A materialized value computed by a loop is that loop's *root*. Roots with the same iteration
  space share one loop (one pass over the data) unless a dependency forbids it: a root may read
  another root of its own loop only at the same point; anything else (a transposed read, a
  reduction's result) must come from an earlier step.
"""

from .evaluate import evaluate
from .inline import (
    MATH_COST,
    MAX_INLINE_DEPTH,
    MAX_POINTS,
    RECOMPUTE_LIMIT,
    inline_kind,
    node_cost,
    uniform_value,
)
from .planner import plan
from .steps import (
    Buffer,
    Clamp,
    Compute,
    Equal,
    EvalStep,
    FusedLoop,
    Index,
    Inside,
    Literal,
    Load,
    MatmulStep,
    Op,
    Plan,
    Reduction,
    Scan,
    Select,
    Step,
    Store,
    ViewStep,
    identity_index,
    unique,
)

__all__ = [
    "MATH_COST",
    "MAX_INLINE_DEPTH",
    "MAX_POINTS",
    "RECOMPUTE_LIMIT",
    "Buffer",
    "Clamp",
    "Compute",
    "Equal",
    "EvalStep",
    "FusedLoop",
    "Index",
    "Inside",
    "Literal",
    "Load",
    "MatmulStep",
    "Op",
    "Plan",
    "Reduction",
    "Scan",
    "Select",
    "Step",
    "Store",
    "ViewStep",
    "evaluate",
    "identity_index",
    "inline_kind",
    "node_cost",
    "plan",
    "uniform_value",
    "unique",
]
