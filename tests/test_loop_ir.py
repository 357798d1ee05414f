"""The loop IR between the fusion plan and the code generators (tracegrad/fusion/loop_ir.py).

Both targets lower the plan's fused loops into the same statement types (`cpu/lowering.py`: chunks of
axis 0 and partial results; `cuda/lowering.py`: grid-stride loops, blocks and trees in shared memory),
and both generators are printers of those statements that share one `render.Printer`. Nothing
here compiles: these are checks of the IR's structure and of what the printers write.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import codegen_cpu, fusion, ir, passes
from tracegrad.cuda import kernels as cuda_kernels
from tracegrad.fusion import render
from tracegrad.api import make_ir
from tracegrad.fusion import loop_ir as L
from tracegrad.cpu import lowering as lower_cpu
from tracegrad.cuda import lowering as lower_gpu
from tracegrad.fusion.steps import Buffer, Compute, Index, Load

PACKAGE = Path(tg.__file__).resolve().parent


def _plan(fun, *args):
    graph, _ = passes.extract_hooks(passes.optimize(make_ir(fun, optimize=False)(*args)))
    return graph, fusion.plan(graph, codegen_cpu.supports)


def _loop_with_reductions():
    def f(x):
        return np.sum(x, axis=0) + np.max(x), np.sum(np.exp(x), axis=1)

    graph, plan = _plan(tg.jit(f), np.ones((6, 5)))
    loops = [s for s in plan.loops if s.reductions]
    return graph, loops[0]


class _Config:  # a small device: the GPU lowering reads only these
    threads, blocks, warp, shared_bytes = 64, 4, 32, 48 * 1024


def _kinds(body) -> set[str]:
    return {type(s).__name__ for s in L.walk(body)}


def test_cpu_lowering_chunks_axis_0_and_combines_partials_after_the_last_chunk():
    graph, loop = _loop_with_reductions()
    kernel = lower_cpu.lower(loop, render.Notes(ir.value_names(graph)))
    chunks = [s for s in kernel.body if isinstance(s, L.For) and s.var == "c"]
    assert len(chunks) == 1 and (chunks[0].start, chunks[0].stop) == ("first", "last")
    finish = [s for s in kernel.body if isinstance(s, L.If)]
    assert [s.cond for s in finish] == ["finish"]
    over_axis_0 = [r for r in loop.reductions if 0 in r.axes]
    assert len(kernel.info["partials"]) == len(over_axis_0) > 0
    # every reduction step may be reassociated (fastmath helpers); identities seed each one
    steps = [s.value for s in L.walk(kernel.body) if isinstance(s, L.Assign)]
    assert any(isinstance(v, L.Combine) and v.reassociate for v in steps)
    assert any(isinstance(v, L.Identity) for v in steps)


def test_gpu_lowering_writes_block_trees_in_shared_memory():
    graph, loop = _loop_with_reductions()
    scratch: list = []
    kernels = lower_gpu.lower(loop, _Config, render.Notes(ir.value_names(graph)), scratch)
    assert kernels
    for k in kernels:
        assert {"Shared", "Sync", "While"} <= _kinds(k.body), k
        _grid, block, _comment, layout = k.info["launch"]
        assert block == (_Config.threads,) and layout is not None
        specials = {
            s.value.name
            for s in L.walk(k.body)
            if isinstance(s, L.Assign) and isinstance(s.value, L.Special)
        }
        assert {"thread_in_block", "block_x", "block_y"} <= specials
    # each split reduction's partial results have a kernel that combines them
    assert len([k for k in kernels if "_combine" in k.name]) == len(scratch)


def test_gpu_elementwise_kernel_is_a_grid_stride_loop_over_the_flat_index():
    x = np.ones((3, 4))
    graph, plan = _plan(tg.jit(lambda x: np.sin(x) * 2.0), x)
    (loop,) = plan.loops
    (kernel,) = lower_gpu.lower(loop, _Config, render.Notes(ir.value_names(graph)), [])
    text = L.text(kernel)
    assert "_t = <thread>" in text and "while _t < 12:" in text
    assert "i1 = _t % 4" in text and "_t += _step" in text
    assert kernel.info["launch"][0] == (1,)  # 12 elements: one block of 64 threads


def test_needed_keeps_only_what_the_values_depend_on_in_program_order():
    buf = Buffer("a0", (4,), np.dtype(np.float64), "input", 0)
    _graph, plan = _plan(tg.jit(lambda x: (np.sin(x), np.cos(x))), np.ones(4))
    ops = plan.loops[0].ops
    computes = [op for op in ops if isinstance(op, Compute)]
    first = L.needed(ops, [computes[0].id])
    assert [op.id for op in first] == [op.id for op in ops if op in first]
    assert computes[1] not in first and any(isinstance(op, Load) for op in first)
    assert L.needed([Load("v0", buf, (Index("i0"),), 1)], ["v0"])[0].id == "v0"


def _every_statement() -> list:
    buf = Buffer("a0", (4,), np.dtype(np.float64), "input", 0)
    load = Load("v0", buf, (Index("i0", 1, 2),), 1)
    body = [L.Let(load), L.Assign("v1", L.Cast(np.dtype(np.float32), "v0"), "a note")]
    step = L.Combine("sum", np.dtype(np.float64), "s0", "v0", True)
    return [
        L.Note("the whole kernel"),
        L.Shared("_sh0", 32, np.dtype(np.float64)),
        L.Assign("s0", L.Identity("sum", np.dtype(np.float64))),
        L.For("i0", "n0", body + [L.Assign("s0", step)], start="lo"),
        L.While("_t < 4", [L.Assign("_t", "_step", update="+"), L.Sync()]),
        L.If("finish", [L.Assign(L.Elem(buf, ()), "s0"), L.Call("_k0", ["a0", "0"])]),
    ]


def test_every_statement_prints_in_the_neutral_text_and_as_source():
    kernel = L.Kernel("k", [], _every_statement(), "doc")
    text = str(kernel)
    for piece in (
        "# the whole kernel",
        "shared float64[32]",
        "identity(sum, float64)",
        "for i0 in lo..n0:",
        "v0 = load a0[i0+2]",
        "while _t < 4:",
        "_t += _step",
        "sync",
        "if finish:",
        "call _k0(a0, 0)",
        "sum(s0, v0)  (float64, any order)",
    ):
        assert piece in text, (piece, text)
    lines = render.Lines()
    cuda_kernels.CudaPrinter(render.Notes({})).statements(kernel.body, 1, lines)
    source = lines.render()
    ast.parse("def k():\n" + source)  # valid Python
    for piece in (
        "cuda.shared.array(32, np.float64)",
        "cuda.syncthreads()",
        "v0 = a0[i0 + 2]",
        "for i0 in range(lo, n0):",
        "a0[0] = s0",
        "_k0(a0, 0)",
        "v1 = np.float32(v0)",
    ):
        assert piece in source, (piece, source)


def test_the_cpu_printer_passes_offsets_and_sizes_as_arguments():
    buf = Buffer("a0", (8,), np.dtype(np.float64), "input", 0)
    body = [L.For("i0", "hi", [L.Let(Load("v0", buf, (Index("i0", -1, 7),), 1))], start="lo")]
    kernel = L.Kernel("kernel", [buf], body, info={"sizes": ["n0"]})
    printer = codegen_cpu.CpuPrinter(kernel, (8,), "libm", {}, bake_sizes=False)
    source = printer.write().render()
    assert "v0 = b0[-i0 + o2]" in source  # the offset is I[2], after n0 and nch
    assert printer.ints == [8, 1, 7]
    assert "o2 = I[2]" in printer.header.render()


def test_the_cpu_pairs_sin_and_cos_of_one_argument_into_one_call():
    x = np.ones(5)
    graph, plan = _plan(tg.jit(lambda x: np.sin(x) * np.cos(x)), x)
    (loop,) = plan.loops
    kernel = lower_cpu.lower(loop, render.Notes(ir.value_names(graph)))
    codegen_cpu.pair_math(kernel, loop.op_types(), "vector")
    pairs = [s for s in L.walk(kernel.body) if isinstance(s, L.LetPair)]
    assert len(pairs) == 1 and pairs[0].call == "sincos"
    computes = [
        s for s in L.walk(kernel.body) if isinstance(s, L.Let) and isinstance(s.op, Compute)
    ]
    assert {s.op.node.prim.name for s in computes} == {"mul"}
    codegen_cpu.pair_math(
        kernel2 := lower_cpu.lower(loop, render.Notes({})), loop.op_types(), "libm"
    )
    assert not [s for s in L.walk(kernel2.body) if isinstance(s, L.LetPair)]  # libm has none


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_make_kernels_shows_the_loop_ir(backend):
    def f(x):
        return np.sum(np.tanh(x) ** 2, axis=1)

    text = tg.make_kernels(tg.grad(lambda x: f(x).sum()), backend=backend, loop_ir=True)(
        np.ones((4, 3))
    )
    assert text.startswith("kernel ")
    assert "load " in text and "tanh(" in text
    # the cpu's chunks of axis 0, here one range of rows (no partial results: ONE_RANGE)
    assert ("lo = first * n0 // nch" in text) == (backend == "cpu")
    assert ("<thread" in text) == (backend == "cuda")


def test_printers_override_renderings_only():
    """The generators are printers of the IR: neither writes its own statement walk, loop or
    reduction structure (that is the lowering passes' and `render.Printer`'s)."""
    for printer in (codegen_cpu.CpuPrinter, cuda_kernels.CudaPrinter):
        assert issubclass(printer, render.Printer)
        assert "statements" not in vars(printer)
    for module in (codegen_cpu, cuda_kernels):
        source = inspect.getsource(module)
        for structure in ("def _nest", "def reduction(", "def scan(", "def elementwise("):
            assert structure not in source
    cuda_tree = ast.parse((PACKAGE / "codegen_cuda.py").read_text())
    imported = {n.module for n in ast.walk(cuda_tree) if isinstance(n, ast.ImportFrom)}
    assert "codegen_cpu" not in imported


class _MatmulConfig:  # the fields of a launch configuration the matrix product reads
    threads, blocks, warp, shared_bytes = 64, 4, 32, 48 * 1024
    mm_threads, mm_micro, mm_depth, mm_blocks = 4, 2, 8, 16


@pytest.mark.parametrize("k", [6, 700])
def test_gpu_matmul_is_lowered_to_tiles_in_shared_memory_and_split_k_parts(k):
    a, b = np.ones((8, k)), np.ones((k, 8))
    graph, plan = _plan(tg.jit(lambda a, b: a @ b), a, b)
    (step,) = [s for s in plan.steps if isinstance(s, fusion.MatmulStep)]
    scratch: list = []
    kernels = lower_gpu.matmul(
        step, "mm", _MatmulConfig, render.Notes(ir.value_names(graph)), scratch
    )
    tiled = kernels[0]
    assert {"Shared", "Local", "Sync", "While", "If"} <= _kinds(tiled.body)
    branches = [s for s in L.walk(tiled.body) if isinstance(s, L.If) and s.orelse is not None]
    assert len(branches) == 2  # each tile's load, zero outside the matrix
    steps = [s for s in L.walk(tiled.body) if isinstance(s, L.For) and s.step is not None]
    assert [s.var for s in steps] == ["_k0", "_e", "_e"]
    split = k == 700
    assert (len(scratch) == 1) == split and len(kernels) == 1 + split
    lines = render.Lines()
    cuda_kernels.CudaPrinter(render.Notes({})).statements(tiled.body, 1, lines)
    source = lines.render()
    ast.parse("def k():\n" + source)
    assert "cuda.local.array((2, 2), np.float64)" in source
    assert "_row0 = cuda.blockIdx.y * 8" in source
    assert ("_o[_split, _r, _c] = _acc[_i, _j]" in source) == split
