"""Loops and conditionals on the device: a control-flow node's step of a cuda program, run with its
carries in device arrays.

A `scan`, `loop`, `while`, `while_count` or `cond` node holds graphs, each compiled as a program
of its own (`CudaProgram`). The step that runs the node calls the body program step after step
on device arrays (`CudaProgram.run_on_device`): the carries a step returns are the next step's
inputs as they are, an x slice is a view of its row of the stacked array, and each y slice, saved
carry and final carry is written (by the body's kernels, or a device copy) into its place in the
node's packed result. No carry crosses to the host inside a loop (a step of the body that has no
kernel, a sort say, still copies its own operands there and its result back, each step: the
runner says so once, in the `cuda` log). What the host must know to go on, it reads as one
scalar:

- `scan` (and `fori_loop`, a scan over the index; and a rolled Python loop): nothing.
- `loop`, a loop whose trip count is a run-time value: the trip count, once per loop.
- `while` and `while_count`: the predicate is computed on the device, and the host reads that
  one boolean once per *round* of steps run ahead (1, 2, 4, ... up to `MAX_AHEAD` steps): each
  step is masked (`carry = where(p, body(carry), carry)`, `p = cond(carry)`, and a trip counter),
  so the steps after the last change nothing, and a loop of n trips reads about log2(n) + n / 64
  booleans. A body or predicate that is not safe to run on a carry past the last (a step of it
  runs on the host, where it may raise; or it holds a loop of run-time length, which may not end)
  is not run ahead: then the host reads the predicate every step, which is unavoidable there:
  the host launches every step and must know whether to launch the next, and numba offers
  neither device-side launches nor conditional graph nodes.
- `cond`: inside a loop's body, where a read would stall every step, both branches run and a
  select on the device keeps the taken one's results (no read), when both are safe to run on
  values they were not meant for (as above). Otherwise the host reads the predicate, once, and
  runs the taken branch only.

This is the cuda backend's table of how each control-flow primitive runs, keyed by primitive
(like a printer's table of scalar templates); the primitives' own `run_compiled` facet, which
runs them on host arrays, is what the cpu backend uses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np

from .. import ir
from .. import primitives as P
from ..base import config
from ..ir import Builder, Graph, Node
from ..transforms import loops, scan
from ..transforms.bodies import truth
from ..transforms.packing import Aval, avals
from . import device as dev

# runner(out, args): the node's packed result written into the device array `out`
Runner = Callable[[object, Sequence], None]

MAX_AHEAD = 64  # the most steps of a while loop launched between two reads of its predicate

log = logging.getLogger("tracegrad")


def runner(node: Node, compile: Callable[..., object], rt) -> Runner | None:
    """How the cuda backend runs `node` on the device, or None when it is not a loop or
    conditional. `compile(graph, in_loop=...)` makes a `CudaProgram` of a graph the node holds
    (`in_loop`: it runs step after step, as a loop's body); `rt` is the enclosing program's
    runtime (its copy and fill kernels, its scalar reads, whether it is a loop's body)."""
    make = _RUNNERS.get(node.prim)
    return None if make is None else make(node, compile, rt)


def runs_on_device(node: Node) -> bool:
    return node.prim in _RUNNERS


def held_graphs(node: Node) -> tuple[Graph, ...]:
    """The graphs a loop or conditional holds."""
    p = node.params
    if node.prim is loops.cond_p:
        return tuple(p["branches"])
    if node.prim in (loops.while_p, loops.while_count_p):
        return (p["cond"], p["body"])
    return (p["body"],)


def ends(node: Node) -> bool:
    """Whether the node's trip count is fixed when the program is built (a scan's, a cond's):
    it ends whatever values it runs on."""
    return node.prim in (scan.scan_p, loops.cond_p)


def _log(message: str, *args) -> None:
    if config.log_enabled("cuda"):
        log.info(message, *args)


def _log_host_steps(what: str, programs: Sequence) -> None:
    """Say which steps of a loop's graphs run on the host: their operands cross every step."""
    names = sorted({name for program in programs for name in program.host_steps()})
    if names:
        _log(
            "tracegrad: cuda: %s: %s of its body runs on the host, a copy each way per step; "
            "the carries stay on the device",
            what,
            ", ".join(names),
        )


# ----------------------------------------------------------------------------------------------
# Device views of packed results and stacked arrays


def packed_views(out, layout: Sequence[Aval]) -> list:
    """Views of the packed result `out` (a contiguous 1-D device array), one per result in its
    internal shape and in `out`'s dtype; None for a result with no elements."""
    itemsize = out.dtype.itemsize
    views, offset = [], 0
    for shape, _ in layout:
        n = int(np.prod(shape, dtype=np.int64))
        if n == 0:
            views.append(None)
        else:
            inner = dev.internal_shape(shape)
            views.append(dev.view(out, inner, dev.c_strides(inner, itemsize), offset * itemsize))
        offset += n
    return views


def row(stacked, t: int):
    """Row t of a stacked device array (axis 0), as a device array of the row's internal shape:
    a view, nothing is copied; None when the row has no elements."""
    if stacked is None:
        return None
    shape, strides, _ = dev.layout(stacked)
    inner, inner_strides = shape[1:], strides[1:]
    if not inner:
        inner, inner_strides = (1,), (stacked.dtype.itemsize,)
    if int(np.prod(inner, dtype=np.int64)) == 0:
        return None
    return dev.view(stacked, inner, inner_strides, t * strides[0])


def _x_row(x, t: int):
    """Row t of an xs input; a row with no elements is still an (empty) device array."""
    r = row(x, t)
    if r is None:
        shape, _, _ = dev.layout(x)
        return dev.empty(shape[1:], x.dtype)
    return r


def _put(rt, src, dst) -> None:
    """dst[...] = src[...] on the device (converted to dst's dtype, as packing does)."""
    if dst is not None:
        rt.copy_into(src, dst)


def _write_results(rt, views: Sequence, values: Sequence) -> None:
    for view, v in zip(views, values, strict=True):
        if v is not view:
            _put(rt, v, view)


def read_scalar(rt, arr) -> np.ndarray:
    """A 0-d device value on the host: the one device->host read a decision takes."""
    return rt.to_host(arr, ())


class _CarryBuffers:
    """Two device buffers per carry, used in turn: a step writes each carry into the buffer of
    its pair that it does not read, so a loop allocates nothing per step."""

    def __init__(self, layout: Sequence[Aval]):
        self.layout = layout
        self.pairs: list | None = None

    def other(self, carry: Sequence) -> list:
        """For each carry, the buffer of its pair that is not `carry` itself."""
        if self.pairs is None:  # on the first run (a loop of no steps allocates nothing)
            self.pairs = [(dev.empty(s, d), dev.empty(s, d)) for s, d in self.layout]
        return [b if c is a else a for c, (a, b) in zip(carry, self.pairs, strict=True)]


# ----------------------------------------------------------------------------------------------
# scan and loop: a trip count the host knows


def _scan_runner(node: Node, compile, rt) -> Runner:
    params = node.params
    body = compile(params["body"], in_loop=True)
    _log_host_steps("scan", [body])
    layout = scan.scan_layout(params)
    length, reverse, save = params["length"], params["reverse"], params["save"]
    n_consts, n_carry = params["n_consts"], params["n_carry"]
    n_ys = len(params["body"].outputs) - n_carry
    buffers = _CarryBuffers(avals(params["body"].outputs[:n_carry]))

    def run(out, args) -> None:
        views = packed_views(out, layout)
        final, ys = views[:n_carry], views[n_carry : n_carry + n_ys]
        saved = views[n_carry + n_ys :]
        consts = list(args[:n_consts])
        carry = list(args[n_consts : n_consts + n_carry])
        xs = args[n_consts + n_carry :]
        order = range(length - 1, -1, -1) if reverse else range(length)
        saved_rows = [row(view, order[0]) for view in saved] if length else []
        for step, t in enumerate(order):
            last = step == length - 1
            for r, c in zip(saved_rows, carry, strict=False):
                if c is not r:  # (a carry the last step wrote into this row is there already)
                    _put(rt, c, r)
            # each carry is written where it is wanted next: the next step's saved row, the
            # final result after the last step, else the carry buffer this step does not read
            if last:
                targets = final
            elif save:
                saved_rows = [row(view, order[step + 1]) for view in saved]
                targets = saved_rows
            else:
                targets = buffers.other(carry)
            y_rows = [row(view, t) for view in ys]
            into = dict(enumerate(targets)) | {n_carry + k: r for k, r in enumerate(y_rows)}
            outs = body.run_on_device(consts + carry + [_x_row(x, t) for x in xs], into)
            carry = outs[:n_carry]
            for r, y in zip(y_rows, outs[n_carry:], strict=True):
                if y is not r:  # (a y of another dtype than the packed result's)
                    _put(rt, y, r)
            del outs  # the ys that came back fresh are let go: their buffers are reused
        _write_results(rt, final, carry)

    return run


def _loop_runner(node: Node, compile, rt) -> Runner:
    params = node.params
    body = compile(params["body"], in_loop=True)
    _log_host_steps("loop", [body])
    layout = avals(params["body"].outputs)
    n_consts = params["n_consts"]
    buffers = _CarryBuffers(layout)

    def run(out, args) -> None:
        n = int(read_scalar(rt, args[0]))  # the trip count: once per loop
        final = packed_views(out, layout)
        consts, carry = list(args[1 : 1 + n_consts]), list(args[1 + n_consts :])
        for step in range(max(n, 0)):
            targets = final if step == n - 1 else buffers.other(carry)
            carry = body.run_on_device(consts + carry, dict(enumerate(targets)))
        _write_results(rt, final, carry)

    return run


# ----------------------------------------------------------------------------------------------
# while: steps run ahead of the predicate's read


def _masked_step(params: dict) -> tuple[Graph, Graph]:
    """(the first predicate, the masked step) of a while loop, as graphs.

    first: (cond consts, carries) -> p, the predicate as a bool.
    step: (cond consts, body consts, carries, trips, p) -> (carries', trips', p'): the body's
    carries where p holds, else the carries as they were; trips + p; the predicate of carries'.
    """
    cond, body = params["cond"], params["body"]
    n_cc, n_bc = params["n_cond_consts"], params["n_body_consts"]

    builder = Builder()
    ins = [builder.new_input(v.shape, v.dtype) for v in cond.inputs]
    with ir.building(builder):
        (p,) = ir.inline(builder, cond, ins)
        first = builder.graph([truth(p)])

    builder = Builder()
    new = lambda v: builder.new_input(v.shape, v.dtype)
    cc = [new(v) for v in cond.inputs[:n_cc]]
    bc = [new(v) for v in body.inputs[:n_bc]]
    carry = [new(v) for v in body.inputs[n_bc:]]
    trips = builder.new_input((), np.int64)
    p = builder.new_input((), np.bool_)
    with ir.building(builder):
        stepped = ir.inline(builder, body, bc + carry)
        kept = [P.where(p, s, c) for s, c in zip(stepped, carry, strict=True)]
        trips1 = P.add(trips, P.convert(p, np.int64))
        (p1,) = ir.inline(builder, cond, cc + kept)
        step = builder.graph(kept + [trips1, truth(p1)])
    return first, step


def _while_runner(node: Node, compile, rt) -> Runner:
    params, count = node.params, node.prim is loops.while_count_p
    name = node.prim.name
    first_graph, step_graph = _masked_step(params)
    step = compile(step_graph, in_loop=True)
    hazards = step.hazards()
    if hazards:
        _log(
            "tracegrad: cuda: %s: not run ahead (%s in its body or predicate): its predicate "
            "is read every step",
            name,
            ", ".join(sorted(set(hazards))),
        )
        return _while_stepwise(params, compile, rt, count, name)
    first = compile(first_graph, in_loop=True)
    layout = avals(params["body"].outputs)
    n_cc, n_bc = params["n_cond_consts"], params["n_body_consts"]
    buffers = _CarryBuffers(layout + [((), np.int64), ((), np.bool_)])
    zero: list = []  # the trip counter's start, on the device (made on the first run)

    def run(out, args) -> None:
        cc, bc, carry = list(args[:n_cc]), list(args[n_cc : n_cc + n_bc]), args[n_cc + n_bc :]
        if not zero:
            zero.append(dev.empty((), np.int64))
            rt.fill(zero[0], 0)
        state = list(carry) + [zero[0], first.run_on_device(cc + list(carry))[0]]
        ahead = 1
        while True:  # a round: `ahead` masked steps, then the one read of the predicate
            for _ in range(ahead):
                state = step.run_on_device(cc + bc + state, dict(enumerate(buffers.other(state))))
            if not bool(read_scalar(rt, state[-1])):
                break
            ahead = min(2 * ahead, MAX_AHEAD)
        if count:
            rt.copy_into(state[-2], out)
        else:
            _write_results(rt, packed_views(out, layout), state[:-2])

    return run


def _while_stepwise(params: dict, compile, rt, count: bool, name: str) -> Runner:
    """A while loop that reads its predicate (computed on the device) before every step: for a
    body or predicate that must not run past the last step, this one read per step is
    unavoidable (the host decides whether to launch the next step)."""
    cond = compile(params["cond"], in_loop=True)
    body = compile(params["body"], in_loop=True)
    _log_host_steps(name, [cond, body])
    layout = avals(params["body"].outputs)
    n_cc, n_bc = params["n_cond_consts"], params["n_body_consts"]
    buffers = _CarryBuffers(layout)

    def run(out, args) -> None:
        cc, bc = list(args[:n_cc]), list(args[n_cc : n_cc + n_bc])
        carry = list(args[n_cc + n_bc :])
        trips = 0
        while bool(read_scalar(rt, cond.run_on_device(cc + carry)[0])):
            carry = body.run_on_device(bc + carry, dict(enumerate(buffers.other(carry))))
            trips += 1
        if count:
            rt.fill(out, trips)
        else:
            _write_results(rt, packed_views(out, layout), carry)

    return run


# ----------------------------------------------------------------------------------------------
# cond: a select on the device inside loops, else the predicate read once


def _selected(pred: ir.Var, branches: Sequence[Graph]) -> Graph:
    """(pred, operands) -> both branches' results, the second's where pred holds."""
    builder = Builder()
    p = builder.new_input(pred.shape, pred.dtype)
    operands = [builder.new_input(v.shape, v.dtype) for v in branches[0].inputs]
    with ir.building(builder):
        no, yes = (ir.inline(builder, g, operands) for g in branches)
        p = truth(p)
        return builder.graph([P.where(p, y, n) for n, y in zip(no, yes, strict=True)])


def _cond_runner(node: Node, compile, rt) -> Runner:
    branches: tuple[Graph, ...] = node.params["branches"]
    layout = avals(branches[0].outputs)
    if rt.in_loop and len(branches) == 2:
        both = compile(_selected(node.inputs[0], branches), in_loop=True)
        hazards = both.hazards()
        if not hazards:
            return _cond_selecting(both, layout, rt)
        _log(
            "tracegrad: cuda: cond: its predicate is read every step (%s in a branch, which "
            "must not run on values not meant for it)",
            ", ".join(sorted(set(hazards))),
        )
    programs: dict[int, object] = {}  # compiled when first taken

    def run(out, args) -> None:
        k = loops.branch_index(read_scalar(rt, args[0]))  # the predicate: once
        if k not in programs:
            programs[k] = compile(branches[k], in_loop=rt.in_loop)
        views = packed_views(out, layout)  # the branch writes into the packed result
        _write_results(rt, views, programs[k].run_on_device(list(args[1:]), dict(enumerate(views))))

    return run


def _cond_selecting(both, layout: Sequence[Aval], rt) -> Runner:
    """Both branches and the select, in one program: nothing is read."""

    def run(out, args) -> None:
        views = packed_views(out, layout)
        _write_results(rt, views, both.run_on_device(list(args), dict(enumerate(views))))

    return run


_RUNNERS = {
    scan.scan_p: _scan_runner,
    loops.loop_p: _loop_runner,
    loops.while_p: _while_runner,
    loops.while_count_p: _while_runner,
    loops.cond_p: _cond_runner,
}
