"""`scan`: a loop over stacked inputs with carries, as one primitive holding its body's graph.

`consts, init, xs -> final carries, stacked ys`; the body maps `(consts, carries, x slices) ->
(carries, y slices)`. With `save`, the carry each step started from is stacked after the ys (what
the reverse pass needs). Its adjoint is a scan running the other way (see loops.py's docstring).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import ir
from .. import primitives as P
from ..autodiff import adjoint
from ..ir import Builder, Graph, Var
from ..primitives import Kind, Primitive
from .bodies import batch_axis_to, batched_body, carry_flags, floats, interpreted, repack_batched
from .packing import Aval, avals, check_avals, pack_dtype, pack_size, packed_views, unpack


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
    params = dict(
        body=body,
        length=int(length),
        reverse=bool(reverse),
        n_consts=len(consts),
        n_carry=len(init),
        save=bool(save),
    )
    packed = P.emit(scan_p, *consts, *init, *xs, **params)
    return unpack(packed, scan_layout(params))


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

    f_consts = floats(consts)
    f_carry = floats(init)
    f_xs = floats(xs)
    f_ys = floats(body.outputs[n_carry:])
    rev_body = _reverse_body(body, n_consts, n_carry, f_consts, f_carry, f_xs, f_ys)
    rev = scan(
        consts,
        [ct_final[i] for i in f_carry] + [P.zeros_like(consts[i]) for i in f_consts],
        xs + saved + [ct_ys[i] for i in f_ys],
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
        P._batched(v, b, size) if f else v
        for v, f, b in zip(init, b_carry, batched[n_consts : n_consts + n_carry], strict=True)
    ]
    xs = [batch_axis_to(x, 1) if b else x for x, b in zip(xs, b_xs, strict=True)]
    flags = b_consts + b_carry + b_xs
    out_flags = b_carry + [True] * n_ys
    new_body = batched_body(body, flags, size, out_flags)
    results = scan(consts, init, xs, body=new_body, length=length, reverse=reverse)
    results = [
        r if f else P._batched(r, False, size)
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
        return lambda *args: run_scan(run_body, args, **params)
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


scan_p = P._register(
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
