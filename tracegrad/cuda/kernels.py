"""CUDA kernel source, written from the fusion plan: one `numba.cuda.jit` kernel per launch.

- A fused loop is lowered to the loop IR by `cuda/lowering.py` (grid-stride loops, blocks of
  threads, trees in shared memory: its docstring says how) and printed by `CudaPrinter`, which
  shares `render.Printer` with the CPU's printer and overrides only what CUDA spells its own way.
- A matrix product is a tiled kernel, lowered by `cuda/lowering.py`'s `matmul` into the same IR: each
  block computes a `BM x BN` tile of the result from shared-memory tiles of both operands, each
  thread a `U x U` block of it held in registers.

The source is readable: every op names its IR value, and every node its user's source line.
Sizes, strides and the launch configuration are baked in (a graph is traced for one signature;
the kernel cache is keyed on the source). Math calls, casts, literals, reductions' identities and
steps, comments and the line writer come from `tracegrad.fusion.render`, shared with the CPU generator
(libm mode: `math.*`, which numba.cuda maps to libdevice).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..fusion import render
from .device import LaunchConfig
from ..fusion import Buffer, FusedLoop, MatmulStep, loop_ir
from . import lowering as lower_gpu
from ..fusion.render import Lines

# NumPy functions the shared scalar templates use that numba.cuda lacks: CUDA device functions.
DEVICE_FUNCTIONS = {
    "np.sign(": (
        "_sign(",
        """@cuda.jit(device=True, inline=True)
def _sign(x):
    if x > 0:
        return x - x + 1
    if x < 0:
        return x - x - 1
    return x - x  # 0 stays 0, nan stays nan
""",
    ),
}


@dataclass
class Launch:
    """One kernel launch of a program, as the driver writes it."""

    kernel: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    args: list[str]
    comment: str
    # reductions: rows per block, threads per row, blocks per row (splits)
    layout: tuple[int, int, int] | None = None


@dataclass
class Kernels:
    """What the generator produced for one step: kernel sources, launches, scratch buffers."""

    sources: list[str] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    scratch: list[Buffer] = field(default_factory=list)
    helpers: set[str] = field(default_factory=set)


# ----------------------------------------------------------------------------------------------
# Fused loops


class CudaPrinter(render.Printer):
    """Prints GPU kernels of the loop IR (`cuda/lowering.py`) for `numba.cuda.jit`.

    What it spells its own way: sizes and offsets are literals; a 0-d array's element is `[0]`;
    math calls are `math.*` (libdevice), with device functions for the NumPy calls numba.cuda
    lacks (`DEVICE_FUNCTIONS`); thread intrinsics are `cuda.*`."""

    lib = "math"
    zero_d = "0"
    SPECIALS = {
        "thread": "cuda.grid(1)",
        "threads": "cuda.gridsize(1)",
        "thread_in_block": "cuda.threadIdx.x",
        "block_x": "cuda.blockIdx.x",
        "block_y": "cuda.blockIdx.y",
        "block_z": "cuda.blockIdx.z",
        "blocks_x": "cuda.gridDim.x",
        "blocks_z": "cuda.gridDim.z",
        "thread_x": "cuda.threadIdx.x",
        "thread_y": "cuda.threadIdx.y",
    }

    def __init__(self, notes: render.Notes, render_scalar=None):
        super().__init__(notes)
        self.render_scalar = render_scalar
        self.helpers: set[str] = set()

    def special(self, name: str) -> str:
        return self.SPECIALS[name]

    def compute(self, op) -> str:
        text = self.render_scalar(op.node, op.args)
        for name, (replacement, helper) in DEVICE_FUNCTIONS.items():
            if name in text:
                text = text.replace(name, replacement)
                self.helpers.add(helper)
        return text

    def let_clamp(self, op):
        return f"{op.id} = min(max({self.index(op.base)}, 0), {op.length - 1})", None

    def target_statement(self, s) -> str:
        if isinstance(s, (loop_ir.Shared, loop_ir.Local)):
            where = "shared" if isinstance(s, loop_ir.Shared) else "local"
            return f"{s.name} = cuda.{where}.array({s.size}, np.{np.dtype(s.dtype).name})"
        if isinstance(s, loop_ir.Sync):
            return "cuda.syncthreads()"
        return super().target_statement(s)

    def kernel(self, k: loop_ir.Kernel) -> str:
        lines = Lines()
        lines.add(0, "@cuda.jit(cache=_CACHE)")
        lines.add(0, f"def {k.name}({', '.join(k.args)}):")
        lines.add(1, f'"""{k.doc}"""')
        for b in k.info["described"]:
            lines.add(1, f"# {b.name}: {self.notes.buffer(b)}")
        self.statements(k.body, 1, lines)
        return lines.render()


def write_kernels(kernels: list[loop_ir.Kernel], printer: CudaPrinter, out: Kernels) -> None:
    """Print lowered kernels into `out`, with their launches."""
    for k in kernels:
        out.sources.append(printer.kernel(k))
        grid, block, comment, layout = k.info["launch"]
        args = k.info.get("launch_args", k.args)
        out.launches.append(Launch(k.name, grid, block, args, comment, layout))


def loop_kernels(loop: FusedLoop, cfg: LaunchConfig, names: dict, render_scalar, out: Kernels):
    """The kernels of one fused loop, into `out`; returns the device functions they call."""
    notes = render.Notes(names, "partial results")
    printer = CudaPrinter(notes, render_scalar)
    write_kernels(lower_gpu.lower(loop, cfg, notes, out.scratch), printer, out)
    return printer.helpers


# ----------------------------------------------------------------------------------------------
# Matrix products


def matmul_kernel(
    step: MatmulStep,
    name: str,
    cfg: LaunchConfig,
    names: dict,
    out: Kernels,
    render_scalar,
    transposed: tuple[bool, bool] = (False, False),
) -> None:
    """The tiled kernel of a matrix product (and the kernel summing its split-K parts), into
    `out` (`cuda/lowering.py`'s `matmul` says how it is laid out)."""
    notes = render.Notes(names, "partial results")
    kernels = lower_gpu.matmul(step, name, cfg, notes, out.scratch, transposed)
    write_kernels(kernels, CudaPrinter(notes, render_scalar), out)


# ----------------------------------------------------------------------------------------------
# Library kernels: copies and fills of arrays of any shape and strides (sizes at run time)

MAX_RANK = 8


def library_source(salt: str) -> str:
    parts = [
        "# tracegrad: copy and fill kernels for the cuda backend (sizes are run-time values)",
        f"# salt {salt}",
        "from numba import cuda",
        "",
        '_CACHE = globals().get("_TG_CACHE", False)',
        "",
    ]
    for rank in range(1, MAX_RANK + 1):
        lines = Lines()
        lines.add(0, "@cuda.jit(cache=_CACHE)")
        lines.add(0, f"def copy{rank}(src, dst):")
        lines.add(1, f'"""dst[...] = src[...] for {rank}-d arrays of any strides"""')
        for a in range(1, rank):
            lines.add(1, f"n{a} = dst.shape[{a}]")
        lines.add(1, "t = cuda.grid(1)")
        lines.add(1, "while t < dst.size:")
        rest = "t"
        for a in range(rank - 1, 0, -1):
            lines.add(2, f"i{a} = {rest} % n{a}")
            lines.add(2, f"q = {rest} // n{a}")
            rest = "q"
        lines.add(2, f"i0 = {rest}")
        idx = ", ".join(f"i{a}" for a in range(rank))
        lines.add(2, f"dst[{idx}] = src[{idx}]")
        lines.add(2, "t += cuda.gridsize(1)")
        parts += [lines.render(), "", ""]
    parts += [
        "@cuda.jit(cache=_CACHE)",
        "def fill1(dst, value):",
        '    """dst[:] = value for a contiguous 1-d array"""',
        "    t = cuda.grid(1)",
        "    while t < dst.size:",
        "        dst[t] = value",
        "        t += cuda.gridsize(1)",
        "",
    ]
    return "\n".join(parts)
