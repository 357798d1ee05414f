"""CUDA kernel source, written from the fusion plan: one `numba.cuda.jit` kernel per launch.

- A fused loop is lowered to the loop IR by `fusion.lower_gpu` (grid-stride loops, blocks of
  threads, trees in shared memory: its docstring says how) and printed by `CudaPrinter`, which
  shares `render.Printer` with the CPU's printer and overrides only what CUDA spells its own way.
- A matrix product is a tiled kernel: each block computes a `BM x BN` tile of the result from
  shared-memory tiles of both operands, each thread a `U x U` block of it held in registers.

The source is readable: every op names its IR value, and every node its user's source line.
Sizes, strides and the launch configuration are baked in (a graph is traced for one signature;
the kernel cache is keyed on the source). Math calls, casts, literals, reductions' identities and
steps, comments and the line writer come from `tracegrad.render`, shared with the CPU generator
(libm mode: `math.*`, which numba.cuda maps to libdevice).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import render
from .cuda_device import LaunchConfig
from .fusion import Buffer, FusedLoop, Index, MatmulStep, loop_ir, lower_gpu
from .render import Lines

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
# Text helpers


def literal(value) -> str:
    """Source text for a typed constant (nan and infinities from `math`)."""
    return render.literal(value, "math")


def subscript(name: str, index: tuple[Index, ...]) -> str:
    return _TEXT.subscript(name, index)


def identity(op: str, dtype) -> str:
    """The identity of the reduction `op` in `dtype` (partial results stay in the result's dtype)."""
    return render.reduction_identity(op, dtype, "math")


_ceil_div = lower_gpu.ceil_div


def _prod(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


# ----------------------------------------------------------------------------------------------
# Fused loops


class CudaPrinter(render.Printer):
    """Prints GPU kernels of the loop IR (`fusion.lower_gpu`) for `numba.cuda.jit`.

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
        "blocks_x": "cuda.gridDim.x",
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
        if isinstance(s, loop_ir.Shared):
            return f"{s.name} = cuda.shared.array({s.size}, np.{np.dtype(s.dtype).name})"
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


_TEXT = CudaPrinter(render.Notes({}))


def write_kernels(kernels: list[loop_ir.Kernel], printer: CudaPrinter, out: Kernels) -> None:
    """Print lowered kernels into `out`, with their launches."""
    for k in kernels:
        out.sources.append(printer.kernel(k))
        grid, block, comment, layout = k.info["launch"]
        out.launches.append(Launch(k.name, grid, block, k.args, comment, layout))


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
    """A tiled kernel for `out = a @ b`. When its tiles are too few to fill the device, the
    k-range is split across blocks too (split-K), and a reduction kernel sums the parts.
    `transposed` says which operand is a transposed view (as in every adjoint of a product):
    its tile is then read along its other axis, so that neighbouring threads read neighbouring
    memory."""
    a, b, o = step.a, step.b, step.out
    batch = tuple(o.shape[:-2])
    M, N = o.shape[-2], o.shape[-1]
    K = a.shape[-1]
    nb = _prod(batch)
    if nb * M * N == 0:
        return
    TS, U, BK = cfg.mm_threads, cfg.mm_micro, cfg.mm_depth
    BM = BN = TS * U
    tiles = _ceil_div(N, BN) * _ceil_div(M, BM) * nb
    splits = max(1, min(_ceil_div(cfg.mm_blocks, tiles), _ceil_div(K, 4 * BK)))
    kc = _ceil_div(_ceil_div(K, splits), BK) * BK if K else BK  # each part's k-range
    splits = max(1, _ceil_div(K, kc))
    part = None
    if splits > 1:
        part = Buffer(f"p{len(out.scratch)}", (splits,) + tuple(o.shape), o.dtype, "temp")
        out.scratch.append(part)
    dt = f"np.{np.dtype(o.dtype).name}"
    zero = literal(np.zeros((), o.dtype))
    pre = "".join(f"_b{j}, " for j in range(len(batch)))
    lines = Lines()
    where = f"   [{step.node.source}]" if step.node.source else ""
    comment = (
        f"{names.get(o.var, '?')} = {names.get(a.var, '?')} @ {names.get(b.var, '?')}: "
        f"{list(batch)} x [{M}, {K}] @ [{K}, {N}]{where}"
    )
    how = f"tiles {BM}x{BN}x{BK}, {U}x{U} results per thread"
    if part is not None:
        how += f", k split in {splits} parts of {kc}"
    lines.add(0, "@cuda.jit(cache=_CACHE)")
    lines.add(0, f"def {name}(_a, _b, _o):")
    lines.add(1, f'"""{comment}; {how}"""')
    lines.add(1, f"_as = cuda.shared.array(({BK}, {BM}), {dt})")
    lines.add(1, f"_bs = cuda.shared.array(({BK}, {BN}), {dt})")
    lines.add(1, f"_acc = cuda.local.array(({U}, {U}), {dt})")
    lines.add(1, f"_ar = cuda.local.array({U}, {dt})")
    lines.add(1, f"_br = cuda.local.array({U}, {dt})")
    lines.add(1, "_tx = cuda.threadIdx.x")
    lines.add(1, "_ty = cuda.threadIdx.y")
    lines.add(1, f"_tid = _ty * {TS} + _tx")
    lines.add(1, f"_row0 = cuda.blockIdx.y * {BM}")
    lines.add(1, f"_col0 = cuda.blockIdx.x * {BN}")
    lines.add(1, "_z = cuda.blockIdx.z")
    lines.add(1, f"while _z < {nb * splits}:", "one (batch entry, part of k) per step")
    lines.add(2, f"_split = _z % {splits}")
    lines.add(2, f"_kbeg = _split * {kc}")
    lines.add(2, f"_kend = min({K}, _kbeg + {kc})")
    rest = f"_z // {splits}"
    for j in range(len(batch) - 1, -1, -1):
        if j == 0:
            lines.add(2, f"_b0 = {rest}")
        else:
            lines.add(2, f"_b{j} = {rest} % {batch[j]}")
            lines.add(2, f"_q = {rest} // {batch[j]}")
            rest = "_q"
    lines.add(2, f"for _i in range({U}):")
    lines.add(3, f"for _j in range({U}):")
    lines.add(4, f"_acc[_i, _j] = {zero}")
    lines.add(2, f"for _k0 in range(_kbeg, _kend, {BK}):")
    lines.add(3, f"for _e in range(_tid, {BM * BK}, {TS * TS}):", "both tiles into shared memory")
    if transposed[0]:  # a is a transposed view: its rows are contiguous in memory
        lines.add(4, f"_r = _e % {BM}")
        lines.add(4, f"_c = _e // {BM}")
    else:
        lines.add(4, f"_r = _e // {BK}")
        lines.add(4, f"_c = _e % {BK}")
    lines.add(4, f"if _row0 + _r < {M} and _k0 + _c < _kend:")
    lines.add(5, f"_as[_c, _r] = _a[{pre}_row0 + _r, _k0 + _c]")
    lines.add(4, "else:")
    lines.add(5, f"_as[_c, _r] = {zero}")
    lines.add(3, f"for _e in range(_tid, {BK * BN}, {TS * TS}):")
    if transposed[1]:  # b is a transposed view: its columns are contiguous in memory
        lines.add(4, f"_r = _e % {BK}")
        lines.add(4, f"_c = _e // {BK}")
    else:
        lines.add(4, f"_r = _e // {BN}")
        lines.add(4, f"_c = _e % {BN}")
    lines.add(4, f"if _k0 + _r < _kend and _col0 + _c < {N}:")
    lines.add(5, f"_bs[_r, _c] = _b[{pre}_k0 + _r, _col0 + _c]")
    lines.add(4, "else:")
    lines.add(5, f"_bs[_r, _c] = {zero}")
    lines.add(3, "cuda.syncthreads()")
    lines.add(3, f"for _kk in range({BK}):")
    lines.add(4, f"for _i in range({U}):")
    lines.add(5, f"_ar[_i] = _as[_kk, _ty + _i * {TS}]")
    lines.add(4, f"for _j in range({U}):")
    lines.add(5, f"_br[_j] = _bs[_kk, _tx + _j * {TS}]")
    lines.add(4, f"for _i in range({U}):")
    lines.add(5, f"for _j in range({U}):")
    lines.add(6, "_acc[_i, _j] += _ar[_i] * _br[_j]")
    lines.add(3, "cuda.syncthreads()")
    lines.add(2, f"for _i in range({U}):")
    lines.add(3, f"_r = _row0 + _ty + _i * {TS}")
    lines.add(3, f"for _j in range({U}):")
    lines.add(4, f"_c = _col0 + _tx + _j * {TS}")
    lines.add(4, f"if _r < {M} and _c < {N}:")
    target = f"_o[_split, {pre}_r, _c]" if part is not None else f"_o[{pre}_r, _c]"
    lines.add(5, f"{target} = _acc[_i, _j]")
    lines.add(2, "_z += cuda.gridDim.z")
    grid = (_ceil_div(N, BN), _ceil_div(M, BM), min(nb * splits, 65535))
    out.sources.append(lines.render())
    dest = part if part is not None else o
    out.launches.append(Launch(name, grid, (TS, TS), [a.name, b.name, dest.name], comment))
    if part is not None:  # sum the parts: a reduction over the first axis of the partials
        notes = render.Notes(names, "partial results")
        kernels = lower_gpu.combine(
            f"{name}_combine", part, o, "sum", step.node, cfg, notes, out.scratch
        )
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
