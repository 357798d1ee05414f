"""Fused CPU kernels: Python source for `numba.njit`, written from the fusion plan.

The entry point of the CPU's code generation: `build` plans a graph, lowers each fused loop into
the loop IR (`cpu/lowering.py`), prints it as a kernel module (`cpu/kernels.py`) and links the
kernels into a program (`cpu/program.py`), which runs the plan's steps from a small generated
driver. Each kernel module is cached on disk (see `tracegrad.base.cache`). The readable source
of a program (with a comment per IR node naming its values and the user's line) is what
`tg.make_kernels` returns and `TRACEGRAD_DUMP_KERNELS=<dir>` writes.

A kernel loops over chunks of axis 0 of its iteration space, so that large loops can share their
chunks among threads (`cpu/program.py` says when). Sums and products of float32 values
accumulate in float64; a reduction's step calls one of the helpers defined here (`_radd`...),
compiled once with reassociation and imported by the kernel modules.

Math functions, casts, literals, comments and the line writer are `tracegrad.fusion.render`'s, shared
with the CUDA generator: in the "vector" math mode (the default) the primitives that
`tracegrad.vmath` implements call its vectorisable versions, everything else (and the "libm"
mode, TRACEGRAD_MATH=libm) calls Python's `math` module, which Numba maps to libm.
"""

from __future__ import annotations

import logging


from . import ir
from .fusion import render
from .cpu.kernels import CpuPrinter, KernelSource, pair_math, render_loop  # noqa: F401
from .cpu import cpu_available, cpu_variant
from .cpu.program import CpuProgram, build
from .cpu import lowering as lower_cpu
from .fusion import loop_ir
from .ir import Graph, Node
from .fusion.render import math_mode, render_math  # noqa: F401 (render_math: tests patch it here)

log = logging.getLogger("tracegrad")

SUPPORTED_DTYPES = render.SUPPORTED_DTYPES


def supports(node: Node) -> bool:
    """Whether a kernel (or a matmul step) can compute this node."""
    return render.supports(node)


# ----------------------------------------------------------------------------------------------
# One loop -> one kernel module


# Combining two partial results of a reduction. The addition and the multiplication may be
# reassociated (what lets LLVM vectorise a sum): `fastmath` flags belong to each instruction, so
# the kernels' other operations keep strict IEEE semantics after these are inlined. They live here,
# compiled once and cached by Numba, and the kernel modules import them.
_HELPER_NAMES = ("_radd", "_rmul", "_rmax", "_rmin")


def _make_helpers(cache: bool = True) -> dict:
    from numba import njit

    if cache:
        try:
            return _make_helpers_with(njit, dict(error_model="numpy", nogil=True, cache=True))
        except RuntimeError:  # nowhere to cache (a read-only install without a home directory)
            pass
    return _make_helpers_with(njit, dict(error_model="numpy", nogil=True))


def _make_helpers_with(njit, opts: dict) -> dict:

    @njit(fastmath={"reassoc"}, **opts)
    def _radd(a, b):
        return a + b

    @njit(fastmath={"reassoc"}, **opts)
    def _rmul(a, b):
        return a * b

    @njit(**opts)
    def _rmax(a, b):
        return a if (a >= b) | (a != a) else b

    @njit(**opts)
    def _rmin(a, b):
        return a if (a <= b) | (a != a) else b

    return {"_radd": _radd, "_rmul": _rmul, "_rmax": _rmax, "_rmin": _rmin}


_helpers: dict = {}


def __getattr__(name: str):
    """The reduction helpers, made on first use (they need Numba)."""
    if name in _HELPER_NAMES:
        if not _helpers:
            _helpers.update(_make_helpers())
        return _helpers[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class CpuBackend:
    """Fused Numba kernels on the CPU (see the module docstring)."""

    name = "cpu"

    def available(self) -> tuple[bool, str]:
        return cpu_available()

    def variant(self) -> tuple:
        """Compiled programs depend on the math mode: a change of TRACEGRAD_MATH (or of
        vmath.set_math_mode) recompiles. This runs on every cached call, so it returns what the
        mode is decided from, cheaply, rather than deciding it (cpu.cpu_variant)."""
        return cpu_variant()

    def compile(self, graph: Graph) -> CpuProgram:
        return render.dumped(build(graph), "program")


def program_source(graph: Graph) -> str:
    """The readable source of the program the cpu backend makes of an optimised graph."""
    return build(graph, load=False).source()


def program_loop_ir(graph: Graph) -> str:
    """The fused loops of the program the cpu backend makes of an optimised graph, as kernels of
    the loop IR (lowered for the CPU, before printing)."""
    program = build(graph, load=False)
    notes = render.Notes(ir.value_names(graph))
    out = []
    for step in program.plan.loops:
        kernel = lower_cpu.lower(step, notes)
        kernel.name = step.name
        pair_math(kernel, step.op_types(), program.mode)
        out.append(loop_ir.text(kernel))
    return "\n\n".join(out) + "\n"


def program_llvm_ir(graph: Graph) -> str:
    """The fused loops of the program the cpu backend makes of an optimised graph, as the LLVM
    IR the llvmlite compiler is given (before LLVM optimises it), or why a loop's kernel is
    Numba's."""
    from .cpu.llvm import kernels as llvm_kernels
    from .cpu.llvm.printer import print_kernel
    from .cpu.llvm.scalars import Unsupported

    program = build(graph, load=False)
    notes = render.Notes(ir.value_names(graph))
    out = []
    for step in program.plan.loops:
        call = program.calls[id(step)]
        kernel = lower_cpu.lower(step, notes)
        pair_math(kernel, step.op_types(), program.mode)
        nch = int(call.ints[call.source.int_slots["nch"]]) if step.shape else 1
        try:
            text = print_kernel(
                kernel, step.shape, nch, program.mode, llvm_kernels.declare_vmath
            ).text
        except Unsupported as exc:
            text = f"; compiled by Numba: the LLVM printer does not write {exc}"
        out.append(f"; ---- kernel {step.name}\n{text}")
    return "\n\n".join(out) + "\n"


BACKEND = CpuBackend()
