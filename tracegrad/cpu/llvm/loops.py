"""A scan whose body's kernels are native, looped in one native function.

`scan_loop.py` writes the loop over a scan's steps as a Numba function calling the body's Numba
kernels. When the body's kernels were compiled through llvmlite (`kernels.py`), the same loop is
written here as LLVM IR: one function taking a table of pointers (the consts, the initial
carries, the stacked xs, the outputs, the body's other buffers, the carries' two buffers and the
kernels' entry points) that copies the initial carries in, calls each kernel step after step
with the x and y rows of step t, swaps the carries' buffers, copies each step's carries into
the saved rows when asked, and copies the last carries out. No Python runs between steps.

The function's text holds sizes, not addresses (the kernels are called through the table), so
it is the same for every scan of the same layout and its machine code is cached on disk as the
kernels' is.
"""

from __future__ import annotations

import ctypes
import hashlib
import time
from collections.abc import Callable

import numpy as np
from llvmlite import ir

from ...base import progress
from ..scan_loop import ScanBody, nbytes as _nbytes, partial_names

I8P = ir.IntType(8).as_pointer()
I64T = ir.IntType(64)


def _print(body: ScanBody, n_consts: int, n_carry: int, save: bool) -> tuple[str, str, dict]:
    """The loop's LLVM IR, its function's name and the table's slots by role."""
    n_xs, n_ys, n_o, n_k = len(body.xs), len(body.ys), len(body.others), len(body.calls)
    slots: dict[str, int] = {}
    order = (
        [f"c{i}" for i in range(n_consts)]
        + [f"init{k}" for k in range(n_carry)]
        + [f"xs{j}" for j in range(n_xs)]
        + [f"final{k}" for k in range(n_carry)]
        + [f"ys{j}" for j in range(n_ys)]
        + ([f"saved{k}" for k in range(n_carry)] if save else [])
        + [f"o{j}" for j in range(n_o)]
        + [f"bufa{k}" for k in range(n_carry)]
        + [f"bufb{k}" for k in range(n_carry)]
        + [f"kernel{j}" for j in range(n_k)]
    )
    slots = {name: i for i, name in enumerate(order)}
    module = ir.Module(name="tracegrad_scan")
    memcpy = module.declare_intrinsic("llvm.memcpy", [I8P, I8P, I64T])
    fnty = ir.FunctionType(ir.VoidType(), [I8P.as_pointer(), I64T, I64T])
    fn = ir.Function(module, fnty, name="SCAN")
    table, length, reverse = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def const(v: int) -> ir.Constant:
        return ir.Constant(I64T, v)

    def copy(dst, src, nbytes: int) -> None:
        if nbytes:
            b.call(memcpy, [dst, src, const(nbytes), ir.Constant(ir.IntType(1), 0)])

    base = {name: b.load(b.gep(table, [const(i)]), name=name) for name, i in slots.items()}
    kernel_type = ir.FunctionType(ir.VoidType(), [I8P.as_pointer(), I64T, I64T, I64T])
    kernels = [b.bitcast(base[f"kernel{j}"], kernel_type.as_pointer()) for j in range(n_k)]
    datas = [
        b.alloca(I8P, const(max(1, len(c.source.arrays) + len(c.partials))), name=f"data{j}")
        for j, c in enumerate(body.calls)
    ]
    current, spare = [], []  # the carries' buffers: this step's, and the one it writes
    for k, carry in enumerate(body.carries):
        current.append(b.alloca(I8P, name=f"ca{k}"))
        spare.append(b.alloca(I8P, name=f"cb{k}"))
        b.store(base[f"bufa{k}"], current[k])
        b.store(base[f"bufb{k}"], spare[k])
        copy(base[f"bufa{k}"], base[f"init{k}"], _nbytes(carry))
    counter = b.alloca(I64T, name="s")
    b.store(const(0), counter)
    test = fn.append_basic_block("test")
    step = fn.append_basic_block("step")
    done = fn.append_basic_block("done")
    b.branch(test)
    b.position_at_end(test)
    s = b.load(counter)
    b.cbranch(b.icmp_signed("<", s, length), step, done)

    b.position_at_end(step)
    backwards = b.icmp_signed("!=", reverse, const(0))
    t = b.select(backwards, b.sub(b.sub(length, const(1)), s), s, name="t")
    if save:
        for k, carry in enumerate(body.carries):
            n = _nbytes(carry)
            copy(b.gep(base[f"saved{k}"], [b.mul(t, const(n))]), b.load(current[k]), n)
    pointers: dict[str, ir.Value] = {f"c{i}": base[f"c{i}"] for i in range(n_consts)}
    pointers |= {f"o{j}": base[f"o{j}"] for j in range(n_o)}
    for k in range(n_carry):
        pointers[f"ca{k}"] = b.load(current[k])
        pointers[f"cb{k}"] = b.load(spare[k])
    for j, x in enumerate(body.xs):
        pointers[f"x{j}"] = b.gep(base[f"xs{j}"], [b.mul(t, const(_nbytes(x)))])
    for j, y in enumerate(body.ys):
        pointers[f"y{j}"] = b.gep(base[f"ys{j}"], [b.mul(t, const(_nbytes(y)))])
    for j, call in enumerate(body.calls):
        named = partial_names(call, body.name)
        args = [body.name[id(a)] for a in call.source.arrays]
        args += [named[p] for p, _, _ in call.source.partials]
        for i, arg in enumerate(args):
            b.store(pointers[arg], b.gep(datas[j], [const(i)]))
        b.call(kernels[j], [datas[j], const(0), const(1), const(1)])
    for out, source, nbytes in body.copies:  # outputs that are reshapes of other buffers
        copy(pointers[out], pointers[source], nbytes)
    for k in range(n_carry):  # this step's output is the next step's carry
        b.store(pointers[f"cb{k}"], current[k])
        b.store(pointers[f"ca{k}"], spare[k])
    b.store(b.add(s, const(1)), counter)
    b.branch(test)

    b.position_at_end(done)
    for k, carry in enumerate(body.carries):
        copy(base[f"final{k}"], b.load(current[k]), _nbytes(carry))
    b.ret_void()
    text = str(module)
    name = "tg_scan_" + hashlib.sha256(text.encode()).hexdigest()[:24]
    return text.replace('@"SCAN"', f'@"{name}"'), name, slots


def native_scan_driver(body: ScanBody, n_consts: int, n_carry: int, save: bool) -> Callable | None:
    """`run(consts, init, xs, views, length, reverse)` looping the body's native kernels in one
    native call (see scan_loop.scan_driver for the arguments), or None when a kernel of the body
    is not native."""
    kernels = [getattr(call.module, "kernel", None) for call in body.calls]
    if not all(hasattr(k, "c_entry") for k in kernels):
        return None
    from . import engine

    start = time.perf_counter()
    text, name, slots = _print(body, n_consts, n_carry, save)
    had = engine.in_memory(text)
    module = engine.compile_module(text, name)
    how = (
        progress.IN_MEMORY if had else progress.FROM_DISK if module.from_disk else progress.COMPILED
    )
    progress.functions_compiled("scan loop", time.perf_counter() - start, how, len(kernels))
    loop = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64, ctypes.c_int64)(
        module.address(name)
    )
    entries = [k.c_entry for k in kernels]
    fixed = {
        j: np.array(b.value, order="C") for j, b in enumerate(body.others) if b.role == "const"
    }
    scratch = [(j, b.shape, b.dtype) for j, b in enumerate(body.others) if b.role != "const"]
    carries = [(c.shape, c.dtype) for c in body.carries]
    sizes = [None] * n_consts + [_nbytes(c) for c in body.carries] + [None] * len(body.xs)
    table_type = ctypes.c_void_p * len(slots)

    def run(consts, init, xs_arrays, views, length, reverse):
        others = dict(fixed)
        for j, shape, dtype in scratch:  # per call: calls from several threads
            others[j] = np.empty(shape, dtype)
        buffers = [np.empty(shape, dtype) for shape, dtype in carries for _ in range(2)]
        arrays = [*consts, *init, *xs_arrays, *views, *(others[j] for j in range(len(others)))]
        arrays += buffers[0::2] + buffers[1::2]
        for a, n in zip(arrays, sizes, strict=False):
            if n is not None and a.nbytes != n:
                raise RuntimeError(f"a scan's carry has {a.nbytes} bytes where {n} were planned")
        table = table_type(*(a.ctypes.data for a in arrays), *entries)
        loop(table, int(length), int(bool(reverse)))

    run.source = text
    return run
