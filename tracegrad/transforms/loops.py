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

This module holds `loop`, `while` and `cond`; `scan` is in scan.py, the packing in packing.py,
what the rules share about bodies in bodies.py.

- `scan`: `consts, init, xs -> final carries, stacked ys`; the body maps
  `(consts, carries, x slices) -> (carries, y slices)`. With `save`, the carry each step started
  from is stacked after the ys (what the reverse pass needs). `fori_loop` is a scan over the index.
- `loop`: a carry-only loop whose trip count is a run-time operand (`n, consts, init -> carries`).
- `while`: `loop` with the trip count decided by a predicate graph.
- `cond`: one of two graphs of the same signature, chosen by a scalar predicate at run time.

Reverse mode. The adjoint of a scan is a scan running the other way. The vector-Jacobian product
of the body is split (partial_eval.split) into what depends only on the step's inputs and what
depends on the cotangents: the first part, with the values the second reads (the residuals) as
more stacked ys, becomes the forward scan and takes the place of the primal scan (one forward
loop); the second becomes the reverse scan's body, which reads the residuals and recomputes
nothing (memory O(steps x residuals); `tg.checkpoint` inside the body recomputes its part from
its inputs instead). The cotangents of the loop-invariant values accumulate in extra carries.
The derivative of the reverse scan is built the same way, so every order adds a forward and a
reverse scan per scan, and `pruning.py` removes the results, carries and inputs that the
derivatives leave unread. The adjoint of a `loop` with
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
from .bodies import (
    batched_body,
    carry_flags,
    floats,
    interpreted,
    owned_results,
    repack_batched,
    select_rows,
    truth,
)
from .packing import Aval, avals, check_avals, pack, pack_dtype, pack_into, pack_size, unpack
from .scan import scan_p


# ----------------------------------------------------------------------------------------------
# loop: a carry-only loop whose trip count is a run-time value


def _loop_infer(shapes, dtypes, p):
    body, n_consts = p["body"], p["n_consts"]
    if shapes[0] != () or not np.issubdtype(dtypes[0], np.integer):
        raise ir.IRError(
            f"loop: the trip count must be an integer scalar, got {dtypes[0]}{shapes[0]}"
        )
    given = list(zip(shapes[1:], dtypes[1:], strict=True))
    check_avals("loop body inputs", avals(body.inputs), given)
    check_avals("loop body outputs", avals(body.outputs), given[n_consts:])
    layout = avals(body.outputs)
    return (pack_size(layout),), pack_dtype(layout)


def run_loop(
    run_body: Callable,
    args: Sequence,
    *,
    body: Graph,
    n_consts: int,
    packed: np.ndarray | None = None,
):
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
    f_consts, f_carry = floats(consts), floats(init)
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
    rev = loop(
        n,
        consts + init,
        [n] + [ct_final[i] for i in f_carry] + [P.zeros_like(consts[i]) for i in f_consts],
        body=rev_body,
    )
    ct_init = dict(zip(f_carry, rev[1 : 1 + len(f_carry)], strict=True))
    ct_consts = dict(zip(f_consts, rev[1 + len(f_carry) :], strict=True))
    return tuple(ct_consts.get(i) for i in range(n_consts)) + tuple(
        ct_init.get(i) for i in range(n_carry)
    )


def _loop_impl(*args, body, n_consts):
    return run_loop(interpreted(body), args, body=body, n_consts=n_consts)


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
        init = [P.with_batch_axis(v, b, size) for v, b in zip(init, b_init, strict=True)]
        step_body = _counted_body(body, n_consts, b_consts, size, n.dtype)
        total = P.emit(P.reduce_max_p, n, axes=(0,))
        res = loop(total, consts + [n], [P.const(0, (), n.dtype)] + init, body=step_body)[1:]
    else:
        init = [
            P.with_batch_axis(v, b, size) if f else v
            for v, f, b in zip(init, b_carry, b_init, strict=True)
        ]
        new_body = batched_body(body, b_consts + b_carry, size, b_carry)
        res = loop(n, consts, init, body=new_body)
        res = [
            r if f else P.with_batch_axis(r, False, size) for r, f in zip(res, b_carry, strict=True)
        ]
    return repack_batched(res, avals(body.outputs), size, [False] * n_carry)


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
    run_body = owned_results(compile(node.params["body"]))
    return lambda *args: run_loop(run_body, args, **node.params)


loop_p = P.register(
    Primitive(
        "loop",
        Kind.CONTROL,
        _loop_impl,
        _loop_infer,
        _loop_adjoint,
        _loop_batch,
        run_compiled=_loop_compiled,
    )
)


# ----------------------------------------------------------------------------------------------
# while: a loop whose trip count a predicate decides


def _while_infer(shapes, dtypes, p):
    cond, body, n_cc, n_bc = p["cond"], p["body"], p["n_cond_consts"], p["n_body_consts"]
    given = list(zip(shapes, dtypes, strict=True))
    carry = given[n_cc + n_bc :]
    check_avals("while predicate inputs", avals(cond.inputs), given[:n_cc] + carry)
    check_avals("while body inputs", avals(body.inputs), given[n_cc:])
    check_avals("while body outputs", avals(body.outputs), carry)
    if cond.outputs[0].shape != ():
        raise ir.IRError(f"while: the predicate must be a scalar, got {cond.outputs[0].type}")
    layout = avals(body.outputs)
    return (pack_size(layout),), pack_dtype(layout)


def run_while(
    run_cond: Callable,
    run_body: Callable,
    args: Sequence,
    *,
    cond: Graph,
    body: Graph,
    n_cond_consts: int,
    n_body_consts: int,
    count: bool = False,
    packed: np.ndarray | None = None,
):
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
    return run_while(
        interpreted(cond),
        interpreted(body),
        args,
        cond=cond,
        body=body,
        n_cond_consts=n_cond_consts,
        n_body_consts=n_body_consts,
    )


def _count_impl(*args, cond, body, n_cond_consts, n_body_consts):
    return run_while(
        interpreted(cond),
        interpreted(body),
        args,
        cond=cond,
        body=body,
        n_cond_consts=n_cond_consts,
        n_body_consts=n_body_consts,
        count=True,
    )


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
    init = [
        P.with_batch_axis(v, b, size) for v, b in zip(init, batched[n_cc + n_bc :], strict=True)
    ]
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
    packed = P.emit(
        while_p,
        *cc,
        *cc,
        *bc,
        *init,
        cond=any_cond,
        body=masked_body,
        n_cond_consts=n_cc,
        n_body_consts=n_cc + n_bc,
    )
    res = unpack(packed, avals(masked_body.outputs))
    return repack_batched(res, avals(body.outputs), size, [False] * n_carry)


def _while_compiled(node, compile, count=False):
    run_cond, run_body = compile(node.params["cond"]), owned_results(compile(node.params["body"]))
    return lambda *args: run_while(run_cond, run_body, args, count=count, **node.params)


while_p = P.register(
    Primitive(
        "while",
        Kind.CONTROL,
        _while_impl,
        _while_infer,
        _while_adjoint,
        _while_batch,
        run_compiled=_while_compiled,
    )
)


def _count_batch(size, inputs, batched, **params):
    raise NotImplementedError(
        "batching the derivative of tg.while_loop over a batched input is not supported; "
        "use tg.fori_loop with a fixed trip count inside vmap"
    )


while_count_p = P.register(
    Primitive(
        "while_count",
        Kind.CONTROL,
        _count_impl,
        lambda shapes, dtypes, p: ((), np.dtype(np.int64)),
        None,
        _count_batch,
        differentiable=False,
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
        check_avals("cond branch inputs", avals(g.inputs), given)
    first = avals(p["branches"][0].outputs)
    for g in p["branches"][1:]:
        check_avals("cond branch outputs", avals(g.outputs), first)
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
    f_in = floats(operands)
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
        return repack_batched(res, layout, size, [False] * len(layout))
    # a predicate per example: both branches run, and each example selects its own result
    results = []
    for g in branches:
        outs = P.batch_inline(g, operands, flags, size)
        results.append([P.with_batch_axis(v, b, size) for v, b in outs])
    chosen = [select_rows(truth(pred), t, f) for f, t in zip(results[0], results[1], strict=True)]
    return repack_batched(chosen, layout, size, [False] * len(layout))


def _cond_compiled(node, compile):
    programs: dict[int, Callable] = {}  # compiled when first taken

    def run_branch(g: Graph, args):
        if id(g) not in programs:
            programs[id(g)] = compile(g)
        return programs[id(g)](args)

    return lambda *args: run_cond(run_branch, args, **node.params)


cond_p = P.register(
    Primitive(
        "cond",
        Kind.CONTROL,
        _cond_impl,
        _cond_infer,
        _cond_adjoint,
        _cond_batch,
        run_compiled=_cond_compiled,
    )
)


def cond(pred: Var, operands: Sequence[Var], branches: tuple[Graph, ...]) -> list[Var]:
    packed = P.emit(cond_p, pred, *operands, branches=tuple(branches))
    return unpack(packed, avals(branches[0].outputs))


CONTROL_PRIMITIVES = (scan_p, loop_p, while_p, while_count_p, cond_p)
