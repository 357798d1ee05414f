"""Structured control flow as primitives: `scan`, `loop`, `while` and `cond`, with their rules.

Each of these nodes holds the graph of its body (or branches) as a parameter, so the body is traced,
differentiated and compiled once, whatever the number of steps.

A node has one output value in the IR, and a loop has several results (every carry, every stacked
output). So a control-flow node's output is its results *packed*: flattened, converted to one
common dtype (NumPy's `result_type`, which holds each of them exactly) and concatenated into a
1-D array. `unpack` emits the slices, reshapes and conversions that take them apart. They are
ordinary primitives, so autodiff, batching and fusion need to know nothing about packing: the
cotangent of the packed value is assembled from the results' cotangents by the adjoints of those
slices, and the views cost nothing in the compiled backends.

- `scan`: `consts, init, xs -> final carries, stacked ys`; the body maps
  `(consts, carries, x slices) -> (carries, y slices)`. With `save`, the carry each step started
  from is stacked after the ys (what the reverse pass needs). `fori_loop` is a scan over the index.
- `loop`: a carry-only loop whose trip count is a run-time operand (`n, consts, init -> carries`).
- `while`: `loop` with the trip count decided by a predicate graph.
- `cond`: one of two graphs of the same signature, chosen by a scalar predicate at run time.

Reverse mode. The adjoint of a scan is a scan running the other way: a forward scan that saves the
carries (shared with the primal scan by `passes.share_saving_loops`, so the forward runs once),
then a reverse scan whose body is the vector-Jacobian product of the body, recomputing the body's
internals from the saved carry (memory O(steps x carries), as checkpointing each step). The
cotangents of the loop-invariant values accumulate in extra carries. The adjoint of a `loop` with
a run-time trip count has no saved carries to read (their number is known only at run time), so
its reverse loop recomputes the carry of step k from the initial carry with an inner `loop` of k
steps: O(n^2) body evaluations, fine for Newton iterations, documented in docs/limitations.md.
The adjoint of `while` counts the trips, then is that of a `loop`. The adjoint of `cond` is a
`cond` of the branches' adjoints. Every rule emits these same primitives, so derivatives of any
order follow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import ir
from .. import primitives as P
from ..autodiff import adjoint
from ..interpreter import evaluate
from ..ir import Builder, Graph, Var
from ..primitives import Kind, Primitive

Aval = tuple[tuple[int, ...], np.dtype]


# ----------------------------------------------------------------------------------------------
# Packing several results into one value


def avals(vars_: Sequence[Var]) -> list[Aval]:
    return [(v.shape, v.dtype) for v in vars_]


def pack_dtype(layout: Sequence[Aval]) -> np.dtype:
    return np.result_type(*[d for _, d in layout]) if layout else np.dtype(np.float64)


def pack_size(layout: Sequence[Aval]) -> int:
    return int(sum(int(np.prod(s, dtype=np.int64)) for s, _ in layout))


def unpack(packed: Var, layout: Sequence[Aval]) -> list[Var]:
    """The results packed into `packed`, as values of their own shapes and dtypes."""
    out, offset = [], 0
    for shape, dtype in layout:
        n = int(np.prod(shape, dtype=np.int64))
        piece = P.slice_(packed, ((offset, offset + n, 1),))
        out.append(P.convert(P.reshape(piece, shape), dtype))
        offset += n
    return out


def pack(values: Sequence[Var], dtype: np.dtype) -> Var:
    """The inverse of `unpack` (used by batching rules to lay results out per example)."""
    flat = [P.convert(P.reshape(v, (v.size,)), dtype) for v in values]
    if not flat:
        return P.const(0, (0,), dtype)
    return P.concatenate(flat, 0)


def packed_views(packed: np.ndarray, layout: Sequence[Aval]) -> list[np.ndarray]:
    """Views of a packed array, one per result (writable when `packed` is): not converted."""
    views, offset = [], 0
    for shape, _ in layout:
        n = int(np.prod(shape, dtype=np.int64))
        views.append(packed[offset : offset + n].reshape(shape))
        offset += n
    return views


def pack_into(values: Sequence, layout: Sequence[Aval], packed: np.ndarray | None = None):
    """`values` (host arrays of `layout`) written into `packed` (a new array if None)."""
    if packed is None:
        packed = np.empty(pack_size(layout), pack_dtype(layout))
    for view, v in zip(packed_views(packed, layout), values, strict=True):
        view[...] = v
    return packed


def unpack_arrays(packed: np.ndarray, layout: Sequence[Aval]) -> list[np.ndarray]:
    return [
        np.asarray(view, dtype=dtype)
        for view, (_, dtype) in zip(packed_views(packed, layout), layout, strict=True)
    ]


def _check_avals(what: str, got: Sequence[Aval], want: Sequence[Aval]) -> None:
    if len(got) != len(want) or any(
        tuple(gs) != tuple(ws) or np.dtype(gd) != np.dtype(wd)
        for (gs, gd), (ws, wd) in zip(got, want, strict=False)
    ):
        shown = lambda avs: ", ".join(ir.type_str(s, d) for s, d in avs)
        raise ir.IRError(f"{what}: expected ({shown(want)}), got ({shown(got)})")


# ----------------------------------------------------------------------------------------------
# scan


def _scan_layout(body: Graph, length: int, n_carry: int, save: bool, n_consts: int) -> list[Aval]:
    carries = avals(body.outputs[:n_carry])
    ys = [((length,) + s, d) for s, d in avals(body.outputs[n_carry:])]
    saved = [((length,) + s, d) for s, d in avals(body.inputs[n_consts : n_consts + n_carry])]
    return carries + ys + (saved if save else [])


def scan_layout(params: dict) -> list[Aval]:
    return _scan_layout(
        params["body"], params["length"], params["n_carry"], params["save"], params["n_consts"]
    )


def _scan_infer(shapes, dtypes, p):
    body, n_consts, n_carry, length = p["body"], p["n_consts"], p["n_carry"], p["length"]
    given = list(zip(shapes, dtypes, strict=True))
    xs = given[n_consts + n_carry :]
    if any(len(s) == 0 or s[0] != length for s, _ in xs):
        raise ir.IRError(f"scan: every xs must have {length} rows, got {[s for s, _ in xs]}")
    slices = [(s[1:], d) for s, d in xs]
    _check_avals("scan body inputs", avals(body.inputs), given[: n_consts + n_carry] + slices)
    _check_avals(
        "scan body carries", avals(body.outputs[:n_carry]), given[n_consts : n_consts + n_carry]
    )
    layout = scan_layout(p)
    return (pack_size(layout),), pack_dtype(layout)


def run_scan(run_body: Callable, args: Sequence, *, body: Graph, length: int, reverse: bool,
             n_consts: int, n_carry: int, save: bool, packed: np.ndarray | None = None):
    """The scan loop over host arrays, with `run_body(list of arrays) -> list of arrays` running
    one step (the interpreter, or a compiled program). Returns the packed results."""
    layout = _scan_layout(body, length, n_carry, save, n_consts)
    if packed is None:
        packed = np.empty(pack_size(layout), pack_dtype(layout))
    views = packed_views(packed, layout)
    n_ys = len(body.outputs) - n_carry
    final, ys, saved = views[:n_carry], views[n_carry : n_carry + n_ys], views[n_carry + n_ys :]
    consts = list(args[:n_consts])
    carry = list(args[n_consts : n_consts + n_carry])
    xs = args[n_consts + n_carry :]
    for t in range(length - 1, -1, -1) if reverse else range(length):
        for view, c in zip(saved, carry if save else (), strict=True):
            view[t] = c
        outs = run_body(consts + carry + [x[t, ...] for x in xs])
        carry = list(outs[:n_carry])
        for view, y in zip(ys, outs[n_carry:], strict=True):
            view[t] = y
    for view, c in zip(final, carry, strict=True):
        view[...] = c
    return packed


def _interpreted(graph: Graph) -> Callable:
    return lambda arrays: evaluate(graph, arrays)


def _scan_impl(*args, **params):
    return run_scan(_interpreted(params["body"]), args, **params)


def with_saved_outputs(body: Graph, n_consts: int, n_carry: int) -> Graph:
    """The body whose extra y outputs are the carries each step starts from (what `save` adds)."""
    return Graph(body.inputs, body.nodes, body.outputs + body.inputs[n_consts : n_consts + n_carry])


def scan(consts, init, xs, *, body: Graph, length: int, reverse: bool = False,
         save: bool = False) -> list[Var]:
    """Emit a scan node; returns its results (final carries, stacked ys, saved carries)."""
    params = dict(body=body, length=int(length), reverse=bool(reverse), n_consts=len(consts),
                  n_carry=len(init), save=bool(save))
    packed = P.emit(scan_p, *consts, *init, *xs, **params)
    return unpack(packed, scan_layout(params))


def _floats(vars_: Sequence[Var]) -> list[int]:
    return [i for i, v in enumerate(vars_) if P.is_float(v.dtype)]


def _scan_adjoint(ct, out, *inputs, body, length, reverse, n_consts, n_carry, save):
    consts = list(inputs[:n_consts])
    init = list(inputs[n_consts : n_consts + n_carry])
    xs = list(inputs[n_consts + n_carry :])
    if save:  # saved carries are ys like the others
        body, save = with_saved_outputs(body, n_consts, n_carry), False
    n_ys = len(body.outputs) - n_carry
    layout = _scan_layout(body, length, n_carry, False, n_consts)
    cts = unpack(ct, layout)
    ct_final, ct_ys = cts[:n_carry], cts[n_carry:]
    # the forward again, saving the carries: shared with the primal scan (one forward runs)
    fwd = scan(consts, init, xs, body=body, length=length, reverse=reverse, save=True)
    saved = fwd[n_carry + n_ys :]

    f_consts = _floats(consts)
    f_carry = _floats(init)
    f_xs = _floats(xs)
    f_ys = _floats(body.outputs[n_carry:])
    rev_body = _reverse_body(body, n_consts, n_carry, f_consts, f_carry, f_xs, f_ys)
    rev = scan(
        consts,
        [ct_final[i] for i in f_carry] + [P.zeros_like(consts[i]) for i in f_consts],
        xs + saved + [ct_ys[i] for i in f_ys],
        body=rev_body, length=length, reverse=not reverse,
    )
    ct_init = dict(zip(f_carry, rev[: len(f_carry)], strict=True))
    ct_consts = dict(zip(f_consts, rev[len(f_carry) : len(f_carry) + len(f_consts)], strict=True))
    ct_xs = dict(zip(f_xs, rev[len(f_carry) + len(f_consts) :], strict=True))
    return (
        tuple(ct_consts.get(i) for i in range(n_consts))
        + tuple(ct_init.get(i) for i in range(n_carry))
        + tuple(ct_xs.get(i) for i in range(len(xs)))
    )


def _reverse_body(body: Graph, n_consts: int, n_carry: int, f_consts, f_carry, f_xs, f_ys) -> Graph:
    """One step of the reverse scan.

    inputs: consts | carries: ct of the carries (floats), accumulated ct of the consts (floats) |
    xs: x slices, the carries this step started from, ct of the y slices (floats);
    outputs: ct of the carries one step earlier, accumulated ct of the consts | ys: ct of x.
    """
    b_consts = body.inputs[:n_consts]
    b_carry = body.inputs[n_consts : n_consts + n_carry]
    b_xs = body.inputs[n_consts + n_carry :]
    wrt = [i for i in f_consts] + [n_consts + i for i in f_carry]
    wrt += [n_consts + n_carry + i for i in f_xs]
    of = [i for i in f_carry] + [n_carry + i for i in f_ys]
    vjp = adjoint(body, wrt, of, seed_ones=False, label=None)

    builder = Builder()
    new = lambda v: builder.new_input(v.shape, v.dtype)
    consts = [new(v) for v in b_consts]
    ct_carry = [new(b_carry[i]) for i in f_carry]
    acc = [new(b_consts[i]) for i in f_consts]
    x_in = [new(v) for v in b_xs]
    carry_in = [new(v) for v in b_carry]
    ct_y = [new(body.outputs[n_carry + i]) for i in f_ys]
    with ir.building(builder):
        outs = ir.inline(builder, vjp, consts + carry_in + x_in + ct_carry + ct_y)
        grads = outs[len(body.outputs) :]
        g_consts = grads[: len(f_consts)]
        g_carry = grads[len(f_consts) : len(f_consts) + len(f_carry)]
        g_xs = grads[len(f_consts) + len(f_carry) :]
        new_acc = [P.add(a, g) for a, g in zip(acc, g_consts, strict=True)]
    return builder.graph(g_carry + new_acc + g_xs)


def _batch_axis_to(x: Var, axis: int) -> Var:
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


def batched_body(graph: Graph, flags: Sequence[bool], size: int, out_flags: Sequence[bool]) -> Graph:
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
                v = P._batched(v, False, size)
            outputs.append(v)
    return builder.graph(outputs)


def carry_flags(graph: Graph, fixed: Sequence[bool], carry: Sequence[bool], start: int) -> list[bool]:
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


def _repack_batched(pieces: Sequence[Var], layout: Sequence[Aval], size: int,
                    stacked: Sequence[bool]) -> Var:
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


def _scan_batch(size, inputs, batched, *, body, length, reverse, n_consts, n_carry, save):
    if save:
        body = with_saved_outputs(body, n_consts, n_carry)
    n_ys = len(body.outputs) - n_carry
    consts = list(inputs[:n_consts])
    init = list(inputs[n_consts : n_consts + n_carry])
    xs = list(inputs[n_consts + n_carry :])
    b_consts = list(batched[:n_consts])
    b_xs = list(batched[n_consts + n_carry :])
    b_carry = carry_flags(body, b_consts + [False] * n_carry + b_xs,
                          batched[n_consts : n_consts + n_carry], n_consts)
    init = [P._batched(v, b, size) if f else v
            for v, f, b in zip(init, b_carry, batched[n_consts : n_consts + n_carry], strict=True)]
    xs = [_batch_axis_to(x, 1) if b else x for x, b in zip(xs, b_xs, strict=True)]
    flags = b_consts + b_carry + b_xs
    out_flags = b_carry + [True] * n_ys
    new_body = batched_body(body, flags, size, out_flags)
    results = scan(consts, init, xs, body=new_body, length=length, reverse=reverse)
    results = [r if f else P._batched(r, False, size) for r, f in zip(results[:n_carry], b_carry,
                                                                      strict=True)] + results[n_carry:]
    layout = _scan_layout(body, length, n_carry, False, n_consts)
    return _repack_batched(results, layout, size, [False] * n_carry + [True] * n_ys)


def _scan_compiled(node, compile):
    params = node.params
    run_body = compile(params["body"])
    layout = scan_layout(params)
    dtype = pack_dtype(layout)
    driver = getattr(run_body, "scan_driver", None)
    fast = None
    if driver is not None and all(d == dtype for _, d in layout):
        fast = driver(params["n_consts"], params["n_carry"], params["save"])
    if fast is None:  # the body program called once per step
        return lambda *args: run_scan(run_body, args, **params)
    n_consts, n_carry = params["n_consts"], params["n_carry"]

    def run(*args):  # the whole loop in one compiled call
        args = [a if a.flags.c_contiguous else np.array(a, order="C") for a in map(np.asarray, args)]
        packed = np.empty(pack_size(layout), dtype)
        fast(args[:n_consts], args[n_consts : n_consts + n_carry], args[n_consts + n_carry :],
             packed_views(packed, layout), params["length"], params["reverse"])
        return packed

    return run


scan_p = P._register(
    Primitive("scan", Kind.CONTROL, _scan_impl, _scan_infer, _scan_adjoint, _scan_batch,
              run_compiled=_scan_compiled)
)


# ----------------------------------------------------------------------------------------------
# loop: a carry-only loop whose trip count is a run-time value


def _loop_infer(shapes, dtypes, p):
    body, n_consts = p["body"], p["n_consts"]
    if shapes[0] != () or not np.issubdtype(dtypes[0], np.integer):
        raise ir.IRError(f"loop: the trip count must be an integer scalar, got {dtypes[0]}{shapes[0]}")
    given = list(zip(shapes[1:], dtypes[1:], strict=True))
    _check_avals("loop body inputs", avals(body.inputs), given)
    _check_avals("loop body outputs", avals(body.outputs), given[n_consts:])
    layout = avals(body.outputs)
    return (pack_size(layout),), pack_dtype(layout)


def run_loop(run_body: Callable, args: Sequence, *, body: Graph, n_consts: int,
             packed: np.ndarray | None = None):
    n = int(args[0])
    consts, carry = list(args[1 : 1 + n_consts]), list(args[1 + n_consts :])
    for _ in range(max(n, 0)):
        carry = list(run_body(consts + carry))
    return pack_into(carry, avals(body.outputs), packed)


def loop(n: Var, consts, init, *, body: Graph) -> list[Var]:
    packed = P.emit(loop_p, n, *consts, *init, body=body, n_consts=len(consts))
    return unpack(packed, avals(body.outputs))


def _loop_adjoint(ct, out, n, *inputs, body, n_consts):
    return (None,) + loop_vjp(n, list(inputs[:n_consts]), list(inputs[n_consts:]), ct, body)


def loop_vjp(n: Var, consts, init, ct, body: Graph) -> tuple:
    """Cotangents of (consts, init) of `loop(n, consts, init)`, by a reverse loop that recomputes
    the carry of step k from `init` (k steps of an inner loop)."""
    n_consts, n_carry = len(consts), len(init)
    ct_final = unpack(ct, avals(body.outputs))
    f_consts, f_carry = _floats(consts), _floats(init)
    wrt = list(f_consts) + [n_consts + i for i in f_carry]
    vjp = adjoint(body, wrt, [i for i in f_carry], seed_ones=False, label=None)

    # reverse body: consts = (consts, init) | carries = (k, ct of the carries, acc of the consts)
    builder = Builder()
    new = lambda v: builder.new_input(v.shape, v.dtype)
    c_in = [new(v) for v in consts]
    init_in = [new(v) for v in init]
    k_in = builder.new_input((), n.dtype)
    ct_in = [new(init[i]) for i in f_carry]
    acc_in = [new(consts[i]) for i in f_consts]
    with ir.building(builder):
        k = P.sub(k_in, P.const(1, (), n.dtype))
        carry_k = loop(k, c_in, init_in, body=body)  # the carry step k starts from
        outs = ir.inline(builder, vjp, c_in + carry_k + ct_in)
        grads = outs[len(body.outputs) :]
        g_consts, g_carry = grads[: len(f_consts)], grads[len(f_consts) :]
        new_acc = [P.add(a, g) for a, g in zip(acc_in, g_consts, strict=True)]
    rev_body = builder.graph([k] + g_carry + new_acc)
    rev = loop(n, consts + init, [n] + [ct_final[i] for i in f_carry]
               + [P.zeros_like(consts[i]) for i in f_consts], body=rev_body)
    ct_init = dict(zip(f_carry, rev[1 : 1 + len(f_carry)], strict=True))
    ct_consts = dict(zip(f_consts, rev[1 + len(f_carry) :], strict=True))
    return tuple(ct_consts.get(i) for i in range(n_consts)) + tuple(
        ct_init.get(i) for i in range(n_carry)
    )


def _loop_impl(*args, body, n_consts):
    return run_loop(_interpreted(body), args, body=body, n_consts=n_consts)


def _loop_batch(size, inputs, batched, *, body, n_consts):
    n, consts, init = inputs[0], list(inputs[1 : 1 + n_consts]), list(inputs[1 + n_consts :])
    b_consts = list(batched[1 : 1 + n_consts])
    b_init = list(batched[1 + n_consts :])
    n_carry = len(init)
    b_carry = carry_flags(body, b_consts + [False] * n_carry, b_init, n_consts)
    if batched[0]:
        # each example runs its own number of steps: run the longest, and hold an example's
        # carries once its count is reached
        b_carry = [True] * n_carry
        init = [P._batched(v, b, size) for v, b in zip(init, b_init, strict=True)]
        step_body = _counted_body(body, n_consts, b_consts, size, n.dtype)
        total = P.emit(P.reduce_max_p, n, axes=(0,))
        res = loop(total, consts + [n], [P.const(0, (), n.dtype)] + init, body=step_body)[1:]
    else:
        init = [P._batched(v, b, size) if f else v
                for v, f, b in zip(init, b_carry, b_init, strict=True)]
        new_body = batched_body(body, b_consts + b_carry, size, b_carry)
        res = loop(n, consts, init, body=new_body)
        res = [r if f else P._batched(r, False, size) for r, f in zip(res, b_carry, strict=True)]
    return _repack_batched(res, avals(body.outputs), size, [False] * n_carry)


def _counted_body(body: Graph, n_consts: int, b_consts, size: int, int_dtype) -> Graph:
    """Batched body with a step counter: carries (j, *carries), consts (*consts, n per example);
    an example whose count n is reached keeps its carries."""
    n_carry = len(body.outputs)
    inner = batched_body(body, list(b_consts) + [True] * n_carry, size, [True] * n_carry)
    builder = Builder()
    c_in = [builder.new_input(v.shape, v.dtype) for v in inner.inputs[:n_consts]]
    counts = builder.new_input((size,), int_dtype)
    j = builder.new_input((), int_dtype)
    carry = [builder.new_input(v.shape, v.dtype) for v in inner.inputs[n_consts:]]
    with ir.building(builder):
        stepped = ir.inline(builder, inner, c_in + carry)
        active = P.compare(P.lt_p, P.broadcast_to(j, (size,)), counts)
        kept = [select_rows(active, new, old) for new, old in zip(stepped, carry, strict=True)]
        j1 = P.add(j, P.const(1, (), int_dtype))
    builder.inputs = c_in + [counts, j] + carry
    return builder.graph([j1] + kept)


def _loop_compiled(node, compile):
    run_body = compile(node.params["body"])
    return lambda *args: run_loop(run_body, args, **node.params)


loop_p = P._register(
    Primitive("loop", Kind.CONTROL, _loop_impl, _loop_infer, _loop_adjoint, _loop_batch,
              run_compiled=_loop_compiled)
)


# ----------------------------------------------------------------------------------------------
# while: a loop whose trip count a predicate decides


def _while_infer(shapes, dtypes, p):
    cond, body, n_cc, n_bc = p["cond"], p["body"], p["n_cond_consts"], p["n_body_consts"]
    given = list(zip(shapes, dtypes, strict=True))
    carry = given[n_cc + n_bc :]
    _check_avals("while predicate inputs", avals(cond.inputs), given[:n_cc] + carry)
    _check_avals("while body inputs", avals(body.inputs), given[n_cc:])
    _check_avals("while body outputs", avals(body.outputs), carry)
    if cond.outputs[0].shape != ():
        raise ir.IRError(f"while: the predicate must be a scalar, got {cond.outputs[0].type}")
    layout = avals(body.outputs)
    return (pack_size(layout),), pack_dtype(layout)


def run_while(run_cond: Callable, run_body: Callable, args: Sequence, *, cond: Graph, body: Graph,
              n_cond_consts: int, n_body_consts: int, count: bool = False,
              packed: np.ndarray | None = None):
    cc = list(args[:n_cond_consts])
    bc = list(args[n_cond_consts : n_cond_consts + n_body_consts])
    carry = list(args[n_cond_consts + n_body_consts :])
    trips = 0
    while bool(np.asarray(run_cond(cc + carry)[0])):
        carry = list(run_body(bc + carry))
        trips += 1
    if count:
        return np.asarray(trips, np.int64)
    return pack_into(carry, avals(body.outputs), packed)


def _while_impl(*args, cond, body, n_cond_consts, n_body_consts):
    return run_while(_interpreted(cond), _interpreted(body), args, cond=cond, body=body,
                     n_cond_consts=n_cond_consts, n_body_consts=n_body_consts)


def _count_impl(*args, cond, body, n_cond_consts, n_body_consts):
    return run_while(_interpreted(cond), _interpreted(body), args, cond=cond, body=body,
                     n_cond_consts=n_cond_consts, n_body_consts=n_body_consts, count=True)


def _while_adjoint(ct, out, *inputs, cond, body, n_cond_consts, n_body_consts):
    params = dict(cond=cond, body=body, n_cond_consts=n_cond_consts, n_body_consts=n_body_consts)
    n = P.emit(while_count_p, *inputs, **params)
    bc = list(inputs[n_cond_consts : n_cond_consts + n_body_consts])
    init = list(inputs[n_cond_consts + n_body_consts :])
    return (None,) * n_cond_consts + loop_vjp(n, bc, init, ct, body)


def _while_batch(size, inputs, batched, *, cond, body, n_cond_consts, n_body_consts):
    """Each example runs until its own predicate is false: the batch runs while any example's
    is true, and an example whose predicate is false keeps its carries."""
    n_cc, n_bc = n_cond_consts, n_body_consts
    cc, bc = list(inputs[:n_cc]), list(inputs[n_cc : n_cc + n_bc])
    init = list(inputs[n_cc + n_bc :])
    n_carry = len(init)
    init = [P._batched(v, b, size) for v, b in zip(init, batched[n_cc + n_bc :], strict=True)]
    b_cc, b_bc = list(batched[:n_cc]), list(batched[n_cc : n_cc + n_bc])
    pred = batched_body(cond, b_cc + [True] * n_carry, size, [True])
    step = batched_body(body, b_bc + [True] * n_carry, size, [True] * n_carry)

    # predicate of the batch: any example still running
    builder = Builder()
    ins = [builder.new_input(v.shape, v.dtype) for v in pred.inputs]
    with ir.building(builder):
        (p,) = ir.inline(builder, pred, ins)
        anyp = P.emit(P.reduce_max_p, P.convert(truth(p), np.int8), axes=(0,))
        anyp = P.compare(P.gt_p, anyp, P.const(0, (), np.int8))
    any_cond = builder.graph([anyp])
    # body of the batch: step the examples whose predicate holds
    builder = Builder()
    c_in = [builder.new_input(v.shape, v.dtype) for v in cc]
    b_in = [builder.new_input(v.shape, v.dtype) for v in step.inputs[:n_bc]]
    carry = [builder.new_input(v.shape, v.dtype) for v in step.inputs[n_bc:]]
    with ir.building(builder):
        (p,) = ir.inline(builder, pred, c_in + carry)
        stepped = ir.inline(builder, step, b_in + carry)
        kept = [select_rows(truth(p), new, old) for new, old in zip(stepped, carry, strict=True)]
    masked_body = builder.graph(kept)
    packed = P.emit(while_p, *cc, *cc, *bc, *init, cond=any_cond, body=masked_body,
                    n_cond_consts=n_cc, n_body_consts=n_cc + n_bc)
    res = unpack(packed, avals(masked_body.outputs))
    return _repack_batched(res, avals(body.outputs), size, [False] * n_carry)


def _while_compiled(node, compile, count=False):
    run_cond, run_body = compile(node.params["cond"]), compile(node.params["body"])
    return lambda *args: run_while(run_cond, run_body, args, count=count, **node.params)


while_p = P._register(
    Primitive("while", Kind.CONTROL, _while_impl, _while_infer, _while_adjoint, _while_batch,
              run_compiled=_while_compiled)
)


def _count_batch(size, inputs, batched, **params):
    raise NotImplementedError(
        "batching the derivative of tg.while_loop over a batched input is not supported; "
        "use tg.fori_loop with a fixed trip count inside vmap"
    )


while_count_p = P._register(
    Primitive(
        "while_count", Kind.CONTROL, _count_impl,
        lambda shapes, dtypes, p: ((), np.dtype(np.int64)),
        None, _count_batch, differentiable=False,
        run_compiled=lambda node, compile: _while_compiled(node, compile, count=True),
    )
)


# ----------------------------------------------------------------------------------------------
# cond


def _cond_infer(shapes, dtypes, p):
    if shapes[0] != ():
        raise ir.IRError(f"cond: the predicate must be a scalar, got shape {shapes[0]}")
    given = list(zip(shapes[1:], dtypes[1:], strict=True))
    for g in p["branches"]:
        _check_avals("cond branch inputs", avals(g.inputs), given)
    first = avals(p["branches"][0].outputs)
    for g in p["branches"][1:]:
        _check_avals("cond branch outputs", avals(g.outputs), first)
    return (pack_size(first),), pack_dtype(first)


def branch_index(pred: np.ndarray) -> int:
    """Branch 0 is taken when the predicate is false (or 0), branch 1 when it is true."""
    return 1 if bool(np.asarray(pred)) else 0


def run_cond(run_branch: Callable, args: Sequence, *, branches: tuple[Graph, ...]):
    g = branches[branch_index(args[0])]
    outs = run_branch(g, list(args[1:]))
    return pack_into(outs, avals(g.outputs))


def _cond_impl(*args, branches):
    return run_cond(lambda g, a: evaluate(g, a), args, branches=branches)


def _branch_vjp(g: Graph, ct_layout: Sequence[Aval], f_in: Sequence[int], f_out: Sequence[int]):
    """inputs: g's inputs, then the packed cotangent; outputs: the packed input cotangents."""
    vjp = adjoint(g, list(f_in), list(f_out), seed_ones=False, label=None)
    builder = Builder()
    ins = [builder.new_input(v.shape, v.dtype) for v in g.inputs]
    ct = builder.new_input((pack_size(ct_layout),), pack_dtype(ct_layout))
    with ir.building(builder):
        cts = unpack(ct, ct_layout)
        outs = ir.inline(builder, vjp, ins + [cts[j] for j in f_out])
        grads = outs[len(g.outputs) :]
        packed = pack(grads, pack_dtype(avals([g.inputs[i] for i in f_in])))
    return builder.graph([packed])


def _cond_adjoint(ct, out, pred, *operands, branches):
    layout = avals(branches[0].outputs)
    f_in = _floats(operands)
    f_out = [j for j, (_, d) in enumerate(layout) if P.is_float(d)]
    if not f_in:
        return (None,) * (1 + len(operands))
    vjps = tuple(_branch_vjp(g, layout, f_in, f_out) for g in branches)
    packed = P.emit(cond_p, pred, *operands, ct, branches=vjps)
    grads = unpack(packed, avals([operands[i] for i in f_in]))
    by_index = dict(zip(f_in, grads, strict=True))
    return (None,) + tuple(by_index.get(i) for i in range(len(operands)))


def _cond_batch(size, inputs, batched, *, branches):
    pred, operands = inputs[0], list(inputs[1:])
    flags = list(batched[1:])
    layout = avals(branches[0].outputs)
    if not batched[0]:  # one branch for the whole batch
        new = tuple(batched_body(g, flags, size, [True] * len(layout)) for g in branches)
        packed = P.emit(cond_p, pred, *operands, branches=new)
        res = unpack(packed, avals(new[0].outputs))
        return _repack_batched(res, layout, size, [False] * len(layout))
    # a predicate per example: both branches run, and each example selects its own result
    results = []
    for g in branches:
        outs = P.batch_inline(g, operands, flags, size)
        results.append([P._batched(v, b, size) for v, b in outs])
    chosen = [select_rows(truth(pred), t, f) for f, t in zip(results[0], results[1], strict=True)]
    return _repack_batched(chosen, layout, size, [False] * len(layout))


def _cond_compiled(node, compile):
    programs: dict[int, Callable] = {}  # compiled when first taken

    def run_branch(g: Graph, args):
        if id(g) not in programs:
            programs[id(g)] = compile(g)
        return programs[id(g)](args)

    return lambda *args: run_cond(run_branch, args, **node.params)


cond_p = P._register(
    Primitive("cond", Kind.CONTROL, _cond_impl, _cond_infer, _cond_adjoint, _cond_batch,
              run_compiled=_cond_compiled)
)


def cond(pred: Var, operands: Sequence[Var], branches: tuple[Graph, ...]) -> list[Var]:
    packed = P.emit(cond_p, pred, *operands, branches=tuple(branches))
    return unpack(packed, avals(branches[0].outputs))


CONTROL_PRIMITIVES = (scan_p, loop_p, while_p, while_count_p, cond_p)
