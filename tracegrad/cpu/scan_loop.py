"""A scan on the cpu backend as one compiled function: the loop over the steps runs inside Numba.

A loop node's body is compiled as a program of its own (`program.CpuProgram`). When that program is only
serial fused kernels writing fresh outputs (the common case: elementwise steps and reductions),
`scan_driver` writes one more module, cached on disk like the kernels: an `njit` function whose
loop calls the body's kernels step after step, with the carries in two buffers used in turn, the
x slices and y slices taken as views of the stacked arrays, and the saved carries copied into
the packed result. The loop is written in the loop IR (a `For` over the steps, a `Call` of each
kernel) and printed by `render.Printer`. Calling it once replaces one Python call of the body program per step (tens of
microseconds each). Bodies with matrix products, views or host steps keep the Python loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..fusion import render
from ..fusion import FusedLoop, ViewStep
from ..fusion import loop_ir as L
from ..fusion.render import Lines
from ..base import cache, progress


@dataclass
class ScanBody:
    """A scan body program the loop can drive: its kernels, what each buffer is called inside
    the loop (c: consts, ca/cb: the carries' two buffers, x/y: slices of the stacked xs and ys,
    o: constants, temporaries and scratch), and the buffers by role."""

    calls: list
    name: dict[int, str]  # id(buffer) -> name inside the loop
    carries: list
    xs: list
    ys: list
    others: list
    # (output's name, name of the buffer it is a view of, bytes): copied after the kernels
    copies: list


def scan_body(program, n_consts: int, n_carry: int, views: bool = False) -> ScanBody | None:
    """The body `program` as a loop drives it, or None when it is not only serial fused kernels
    writing outputs of their own (with only buffers the loop knows how to pass). With `views`
    (a loop of native kernels, which take data pointers), reshapes are also allowed: a reshape
    of a buffer (all are C-contiguous) is the same memory, so it takes its buffer's name, and
    an output that is one, or that is an input, is copied from that buffer after the step's
    kernels."""
    plan = program.plan
    loops = [s for s in plan.steps if isinstance(s, FusedLoop)]
    reshapes = [s for s in plan.steps if isinstance(s, ViewStep) and s.node.prim.name == "reshape"]
    if not loops or len(loops) + (len(reshapes) if views else 0) != len(plan.steps):
        return None
    calls = [program.calls[id(step)] for step in loops]
    if any(call.parallel for call in calls):
        return None
    outputs = list(plan.outputs)
    # with views, an output may also be a reshape, an input (a carry passed through) or
    # another output again
    copied = {id(s.out) for s in reshapes} | {id(b) for b in plan.inputs} if views else set()
    if any(
        (b.role != "output" and id(b) not in copied) or (outputs.count(b) != 1 and not views)
        for b in outputs
    ):
        return None
    name: dict[int, str] = {}
    for i, b in enumerate(plan.inputs):
        if i < n_consts:
            name[id(b)] = f"c{i}"
        elif i < n_consts + n_carry:
            name[id(b)] = f"ca{i - n_consts}"
        else:
            name[id(b)] = f"x{i - n_consts - n_carry}"
    copies, again = [], []
    for k, b in enumerate(outputs):
        slot = f"cb{k}" if k < n_carry else f"y{k - n_carry}"
        if b.role == "input":  # its own slot, filled from the input
            copies.append((slot, name[id(b)], nbytes(b)))
        elif id(b) in name:  # an output again: filled from its first slot, once that is
            again.append((slot, name[id(b)], nbytes(b)))
        else:
            name[id(b)] = slot
    others = [b for b in plan.buffers if b.role in ("const", "temp")] + list(program.scratch)
    for j, b in enumerate(others):
        name[id(b)] = f"o{j}"
    for step in reshapes if views else ():  # in plan order: a view of a view finds its name
        source = name.get(id(step.src))
        if source is None:
            return None
        if id(step.out) in name:  # an output: its own slot, filled from the buffer it views
            copies.append((name[id(step.out)], source, nbytes(step.out)))
        name[id(step.out)] = source
    copies += again
    if any(id(b) not in name for call in calls for b in call.source.arrays + call.partials):
        return None  # a buffer this loop does not know how to pass (a view)
    carries = list(plan.inputs[n_consts : n_consts + n_carry])
    xs = list(plan.inputs[n_consts + n_carry :])
    return ScanBody(calls, name, carries, xs, outputs[n_carry:], others, copies)


def nbytes(b) -> int:
    """The bytes of a buffer's array."""
    return int(np.prod(b.shape, dtype=np.int64)) * np.dtype(b.dtype).itemsize


def partial_names(call, name: dict[int, str]) -> dict[str, str]:
    """A kernel's partial-result parameters by the name of the loop's buffer for each."""
    return {p.name.split("_")[-1]: name[id(p)] for p in call.partials}


def scan_driver(program, n_consts: int, n_carry: int, save: bool) -> Callable | None:
    """`run(consts, init, xs, views, length, reverse)` for the body `program`, or None when the
    body is not only serial fused kernels writing outputs of their own."""
    body_info = scan_body(program, n_consts, n_carry)
    if body_info is None:
        return None
    calls, name, carries = body_info.calls, body_info.name, body_info.carries
    xs, ys, others = body_info.xs, body_info.ys, body_info.others
    n_xs = len(xs)

    def row(stacked: str, b) -> str:  # row t of a stacked array, as an array of b's shape
        return f"{stacked}[t]" if b.ndim else f"{stacked}[t:t + 1].reshape(())"

    params = [f"c{i}" for i in range(n_consts)] + [f"init{k}" for k in range(n_carry)]
    params += [f"xs{j}" for j in range(n_xs)] + [f"final{k}" for k in range(n_carry)]
    params += [f"ys{j}" for j in range(len(ys))] + (
        [f"saved{k}" for k in range(n_carry)] if save else []
    )
    params += [f"o{j}" for j in range(len(others))]
    params += [f"I{j}" for j in range(len(calls))] + [f"F{j}" for j in range(len(calls))]
    params += ["length", "reverse"]
    lines = [
        "# A tracegrad scan driver: the loop over the steps of a scan, calling the body's kernels.",
        "import numpy as np",
        "from numba import njit",
        "from tracegrad.base import cache as _cache",
        "",
    ]
    for j, call in enumerate(calls):
        lines.append(f"_k{j} = _cache.loaded({cache.module_key(call.source.module)!r}).kernel")
    lines += [
        "",
        '@njit(nogil=True, error_model="numpy", cache=globals().get("_TG_CACHE", False))',
        f"def scan_loop({', '.join(params)}):",
    ]
    body: list = []
    for k in range(len(carries)):
        body.append(L.Assign(f"ca{k}", f"init{k}.copy()"))
        body.append(L.Assign(f"cb{k}", f"np.empty_like(init{k})"))
    step: list = [L.Assign("t", "length - 1 - s if reverse else s")]
    if save:
        for k, b in enumerate(carries):
            step += _copy(f"saved{k}", ("t",), f"ca{k}", b.shape)
    for j, b in enumerate(xs):
        step.append(L.Assign(f"x{j}", row(f"xs{j}", b)))
    for j, b in enumerate(ys):
        step.append(L.Assign(f"y{j}", row(f"ys{j}", b)))
    for j, call in enumerate(calls):
        named = {"I": f"I{j}", "F": f"F{j}"} | partial_names(call, name)
        extra = [named[p] for p in call.source.params if p not in ("first", "last", "finish")]
        args = [name[id(b)] for b in call.source.arrays] + extra
        if call.loop.shape:  # a 0-d loop takes no chunk range
            args += ["0", "1", "1"]
        step.append(L.Call(f"_k{j}", args))
    for k in range(n_carry):
        step.append(L.Assign(f"ca{k}, cb{k}", f"cb{k}, ca{k}"))
    body.append(L.For("s", "length", step))
    for k, b in enumerate(carries):
        body += _copy(f"final{k}", (), f"ca{k}", b.shape)
    text = Lines()
    render.Printer(render.Notes({})).statements(body, 1, text)
    lines.append(text.render())
    source = "\n".join(lines) + "\n"
    module = cache.load_module(source)
    loop_fn = module.scan_loop
    # constants once; scratch per call (calls from several threads must not share it)
    fixed = {j: np.array(b.value, order="C") for j, b in enumerate(others) if b.role == "const"}
    scratch = [(j, b.shape, b.dtype) for j, b in enumerate(others) if b.role != "const"]
    ints = [call.ints for call in calls]
    floats = [call.floats for call in calls]

    first = [True]

    def run(consts, init, xs_arrays, views, length, reverse):
        extra = dict(fixed)
        for j, shape, dtype in scratch:
            extra[j] = np.empty(shape, dtype)
        had, start = progress.has_code(loop_fn), time.perf_counter()
        loop_fn(
            *consts,
            *init,
            *xs_arrays,
            *views,
            *(extra[j] for j in range(len(others))),
            *ints,
            *floats,
            int(length),
            bool(reverse),
        )
        if first and first.pop():  # compiled (or loaded) with the body's kernels it calls
            seconds = time.perf_counter() - start
            progress.functions_compiled(
                "scan loop", seconds, progress.how_made(loop_fn, had), len(calls)
            )

    run.source = source
    return run


def _copy(dst: str, lead: tuple[str, ...], src: str, shape: tuple[int, ...]) -> list:
    """`dst[lead] = src` for an array `src` of `shape`, element by element: Numba compiles an
    array assigned to a slice with a shape check whose error message takes it 4-6 s (once per
    process and array type), against 0.1 s for the loop."""
    if not shape:
        return [L.Assign(L.Elem(dst, lead), f"{src}[()]")]
    index = tuple(f"j{a}" for a in range(len(shape)))
    stmt = L.Assign(L.Elem(dst, lead + index), L.Elem(src, index))
    for a in reversed(range(len(shape))):
        stmt = L.For(index[a], str(shape[a]), [stmt])
    return [stmt]
