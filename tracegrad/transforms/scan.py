"""`scan`: a loop over stacked inputs with carries, as one primitive holding its body's graph.

`consts, init, xs -> final carries, stacked ys`; the body maps `(consts, carries, x slices) ->
(carries, y slices)`. With `save`, the carry each step started from is stacked after the ys. Its
adjoint is a scan running the other way, reading residuals that the forward scan stacks (see
loops.py's docstring).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import ir
from .. import primitives as P
from ..autodiff import adjoint
from ..ir import Builder, Graph, Node, Var
from ..primitives import Kind, Primitive
from . import partial_eval
from .bodies import (
    batch_axis_to,
    batched_body,
    carry_flags,
    floats,
    interpreted,
    owned_results,
    repack_batched,
)
from .packing import Aval, avals, check_avals, pack_dtype, pack_size, packed_views, unpack
from .remat import remat_barrier_p


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
    check_avals("scan body inputs", avals(body.inputs), given[: n_consts + n_carry] + slices)
    check_avals(
        "scan body carries", avals(body.outputs[:n_carry]), given[n_consts : n_consts + n_carry]
    )
    layout = scan_layout(p)
    return (pack_size(layout),), pack_dtype(layout)


def run_scan(
    run_body: Callable,
    args: Sequence,
    *,
    body: Graph,
    length: int,
    reverse: bool,
    n_consts: int,
    n_carry: int,
    save: bool,
    packed: np.ndarray | None = None,
):
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


def _scan_impl(*args, **params):
    return run_scan(interpreted(params["body"]), args, **params)


def with_saved_outputs(body: Graph, n_consts: int, n_carry: int) -> Graph:
    """The body whose extra y outputs are the carries each step starts from (what `save` adds)."""
    return Graph(body.inputs, body.nodes, body.outputs + body.inputs[n_consts : n_consts + n_carry])


def scan(
    consts, init, xs, *, body: Graph, length: int, reverse: bool = False, save: bool = False
) -> list[Var]:
    """Emit a scan node; returns its results (final carries, stacked ys, saved carries)."""
    params = _params(body, length, reverse, len(consts), len(init), save)
    packed = P.emit(scan_p, *consts, *init, *xs, **params)
    return unpack(packed, scan_layout(params))


def _params(body: Graph, length: int, reverse: bool, n_consts: int, n_carry: int, save: bool):
    return dict(
        body=body,
        length=int(length),
        reverse=bool(reverse),
        n_consts=n_consts,
        n_carry=n_carry,
        save=bool(save),
    )


def _scan_adjoint(ct, out, *inputs, body, length, reverse, n_consts, n_carry, save):
    """A forward scan whose body also returns the residuals (what the reverse step reads of the
    step's values) as stacked ys, in place of the primal scan, then a reverse scan whose body
    is the rest of the step's vector-Jacobian product: it reads the residuals, recomputes
    nothing of the forward step, and is linear in the cotangents."""
    consts = list(inputs[:n_consts])
    init = list(inputs[n_consts : n_consts + n_carry])
    xs = list(inputs[n_consts + n_carry :])
    if save:  # saved carries are ys like the others
        body = with_saved_outputs(body, n_consts, n_carry)
    n_ys = len(body.outputs) - n_carry
    cts = unpack(ct, _scan_layout(body, length, n_carry, False, n_consts))
    ct_final, ct_ys = cts[:n_carry], cts[n_carry:]

    f_consts, f_carry, f_xs = floats(consts), floats(init), floats(xs)
    f_ys = floats(body.outputs[n_carry:])
    n_in = len(body.inputs)
    wrt = [i for i in f_consts] + [n_consts + i for i in f_carry]
    wrt += [n_consts + n_carry + i for i in f_xs]
    of = [i for i in f_carry] + [n_carry + i for i in f_ys]
    vjp = adjoint(body, wrt, of, seed_ones=False, label=None)
    # what the reverse step reads as it is: the consts (and what they alone make) and the xs
    shared = list(range(n_consts)) + list(range(n_consts + n_carry, n_in))
    step = partial_eval.split(
        vjp, n_in, len(body.outputs), shared, range(n_consts), (remat_barrier_p,)
    )
    n_res = len(step.known.outputs) - len(body.outputs)

    fwd_params = _params(step.known, length, reverse, n_consts, n_carry, False)
    packed = P.emit(scan_p, *consts, *init, *xs, **fwd_params)
    _take_place_of(out, packed)
    residuals = unpack(packed, scan_layout(fwd_params))[n_carry + n_ys :]

    rev_body = _reverse_body(step.unknown, n_res, n_consts, len(xs), f_consts, f_carry, f_ys)
    rev = scan(
        consts,
        [ct_final[i] for i in f_carry] + [P.zeros_like(consts[i]) for i in f_consts],
        residuals + xs + [ct_ys[i] for i in f_ys],
        body=rev_body,
        length=length,
        reverse=not reverse,
    )
    ct_init = dict(zip(f_carry, rev[: len(f_carry)], strict=True))
    ct_consts = dict(zip(f_consts, rev[len(f_carry) : len(f_carry) + len(f_consts)], strict=True))
    ct_xs = dict(zip(f_xs, rev[len(f_carry) + len(f_consts) :], strict=True))
    return (
        tuple(ct_consts.get(i) for i in range(n_consts))
        + tuple(ct_init.get(i) for i in range(n_carry))
        + tuple(ct_xs.get(i) for i in range(len(xs)))
    )


def _take_place_of(primal: Var, packed: Var) -> None:
    """The scan just emitted (making `packed`) moves to the place of the scan node that makes
    `primal`, whose results are the first part of its own (same inputs, same steps), and
    `primal` becomes that part: the loop runs forward once, and the next derivative
    differentiates that one loop. (Where `primal` is not made in this graph, both run.)"""
    builder = ir.current_builder()
    new = builder.nodes[-1]
    i = next((i for i, n in enumerate(builder.nodes) if n.out is primal), None)
    if i is None or builder.nodes[i].prim is not scan_p:
        return
    node = builder.nodes[i]
    builder.nodes.pop()
    moved = Node(scan_p, new.inputs, new.params, packed, node.source)
    index = {"index": ((0, primal.shape[0], 1),)}
    if packed.dtype == primal.dtype:  # (residuals of another dtype may widen the packing)
        part = [Node(P.slice_p, (packed,), index, primal, node.source)]
    else:
        piece = Var(primal.shape, packed.dtype)
        part = [
            Node(P.slice_p, (packed,), index, piece, node.source),
            Node(P.convert_p, (piece,), {"dtype": primal.dtype}, primal, node.source),
        ]
    builder.nodes[i : i + 1] = [moved, *part]


def _reverse_body(
    unknown: Graph, n_res: int, n_consts: int, n_xs: int, f_consts, f_carry, f_ys
) -> Graph:
    """One step of the reverse scan, from the unknown part of the step's vector-Jacobian
    product (inputs: residuals, consts, xs, ct of the float carries, ct of the float ys).

    inputs: consts | carries: ct of the carries (floats), accumulated ct of the consts (floats) |
    xs: the residuals, x slices, ct of the y slices (floats);
    outputs: ct of the carries one step earlier, accumulated ct of the consts | ys: ct of x.
    """
    ins = list(unknown.inputs)
    res, consts = ins[:n_res], ins[n_res : n_res + n_consts]
    x_in = ins[n_res + n_consts : n_res + n_consts + n_xs]
    seeds = ins[n_res + n_consts + n_xs :]
    ct_carry, ct_y = seeds[: len(f_carry)], seeds[len(f_carry) :]
    assert len(ct_y) == len(f_ys)
    builder = Builder()
    builder.inputs = consts + ct_carry
    acc = [builder.new_input(consts[i].shape, consts[i].dtype) for i in f_consts]
    builder.inputs += res + x_in + ct_y
    builder.nodes = list(unknown.nodes)
    grads = list(unknown.outputs)
    g_consts = grads[: len(f_consts)]
    g_carry = grads[len(f_consts) : len(f_consts) + len(f_carry)]
    g_xs = grads[len(f_consts) + len(f_carry) :]
    with ir.building(builder):
        new_acc = [P.add(a, g) for a, g in zip(acc, g_consts, strict=True)]
    return builder.graph(g_carry + new_acc + g_xs)


def _scan_batch(size, inputs, batched, *, body, length, reverse, n_consts, n_carry, save):
    if save:
        body = with_saved_outputs(body, n_consts, n_carry)
    n_ys = len(body.outputs) - n_carry
    consts = list(inputs[:n_consts])
    init = list(inputs[n_consts : n_consts + n_carry])
    xs = list(inputs[n_consts + n_carry :])
    b_consts = list(batched[:n_consts])
    b_xs = list(batched[n_consts + n_carry :])
    b_carry = carry_flags(
        body, b_consts + [False] * n_carry + b_xs, batched[n_consts : n_consts + n_carry], n_consts
    )
    init = [
        P.with_batch_axis(v, b, size) if f else v
        for v, f, b in zip(init, b_carry, batched[n_consts : n_consts + n_carry], strict=True)
    ]
    xs = [batch_axis_to(x, 1) if b else x for x, b in zip(xs, b_xs, strict=True)]
    flags = b_consts + b_carry + b_xs
    out_flags = b_carry + [True] * n_ys
    new_body = batched_body(body, flags, size, out_flags)
    results = scan(consts, init, xs, body=new_body, length=length, reverse=reverse)
    results = [
        r if f else P.with_batch_axis(r, False, size)
        for r, f in zip(results[:n_carry], b_carry, strict=True)
    ] + results[n_carry:]
    layout = _scan_layout(body, length, n_carry, False, n_consts)
    return repack_batched(results, layout, size, [False] * n_carry + [True] * n_ys)


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
        owned = owned_results(run_body)
        return lambda *args: run_scan(owned, args, **params)
    n_consts, n_carry = params["n_consts"], params["n_carry"]

    def run(*args):  # the whole loop in one compiled call
        args = [
            a if a.flags.c_contiguous else np.array(a, order="C") for a in map(np.asarray, args)
        ]
        packed = np.empty(pack_size(layout), dtype)
        fast(
            args[:n_consts],
            args[n_consts : n_consts + n_carry],
            args[n_consts + n_carry :],
            packed_views(packed, layout),
            params["length"],
            params["reverse"],
        )
        return packed

    return run


scan_p = P.register(
    Primitive(
        "scan",
        Kind.CONTROL,
        _scan_impl,
        _scan_infer,
        _scan_adjoint,
        _scan_batch,
        run_compiled=_scan_compiled,
    )
)
