"""CUDA kernel source, written from the fusion plan: one `numba.cuda.jit` kernel per launch.

- A fused loop without reductions is an elementwise kernel: a grid-stride loop, one thread per
  element of its iteration space.
- A fused loop with reductions splits its space into kept axes ("rows") and reduced axes
  ("columns"). A block holds `TK x TR` threads: TK rows at a time, TR threads on each row. Each
  thread accumulates a strided part of its row in a register, then the block combines the TR
  partial values of each row by a tree in shared memory. When the rows are too few to fill the
  device, the columns are also split across blocks (grid axis y); each block then writes a
  partial result and a second, small kernel (the same generator, on the partials) combines them.
  The threads of a warp run along the innermost axis of the space (rows or columns, whichever
  it is), so that loads are coalesced in both `sum(x, axis=0)` and `sum(x, axis=1)`.
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
from .fusion import (
    Buffer,
    Clamp,
    Compute,
    FusedLoop,
    Index,
    Inside,
    Literal,
    Load,
    MatmulStep,
    Reduction,
    Select,
)
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


def index_text(ix: Index) -> str:
    if ix.var is None:
        return str(ix.offset)
    term = ix.var if ix.stride == 1 else f"{ix.stride} * {ix.var}"
    if ix.offset > 0:
        return f"{term} + {ix.offset}"
    if ix.offset < 0:
        return f"{term} - {-ix.offset}"
    return term


def subscript(name: str, index: tuple[Index, ...]) -> str:
    if not index:
        return f"{name}[0]"
    return f"{name}[{', '.join(index_text(ix) for ix in index)}]"


def identity(op: str, dtype) -> str:
    """The identity of the reduction `op` in `dtype` (partial results stay in the result's dtype)."""
    return render.reduction_identity(op, dtype, "math")


combine = render.combine_step


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _prod(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def _decompose(lines: Lines, indent: int, flat: str, axes: list[int], shape) -> None:
    """Assign `i<a>` for each axis in `axes` (row-major) from the flat index `flat`."""
    if not axes:
        return
    rest = flat
    for pos in range(len(axes) - 1, -1, -1):
        a, n = axes[pos], shape[axes[pos]]
        if pos == 0:
            lines.add(indent, f"i{a} = {rest}")
        elif n == 1:
            lines.add(indent, f"i{a} = 0")
        else:
            lines.add(indent, f"i{a} = {rest} % {n}")
            lines.add(indent, f"_q = {rest} // {n}")
            rest = "_q"


# ----------------------------------------------------------------------------------------------
# Fused loops


class LoopWriter:
    """Writes the kernels of one fused loop."""

    def __init__(self, loop: FusedLoop, cfg: LaunchConfig, names: dict, render):
        self.loop, self.cfg, self.names, self.render = loop, cfg, names, render
        self.helpers: set[str] = set()
        self.ops = {op.id: op for op in loop.ops}

    # ---- comments
    def describe_buffer(self, b: Buffer) -> str:
        return render.describe_buffer(b, self.names, "partial results")

    def node_comment(self, node) -> str:
        return render.node_comment(node, self.names)

    # ---- ops
    def op_line(self, op) -> tuple[str, str | None]:
        if isinstance(op, Load):
            return (
                f"{op.id} = {subscript(op.buffer.name, op.index)}",
                f"load {self.describe_buffer(op.buffer)}",
            )
        if isinstance(op, Literal):
            return f"{op.id} = {literal(op.value)}", None
        if isinstance(op, Compute):
            text = self.render(op.node, op.args)
            for name, (replacement, helper) in DEVICE_FUNCTIONS.items():
                if name in text:
                    text = text.replace(name, replacement)
                    self.helpers.add(helper)
            return f"{op.id} = {text}", self.node_comment(op.node)
        if isinstance(op, Clamp):
            return f"{op.id} = min(max({index_text(op.base)}, 0), {op.length - 1})", None
        if isinstance(op, Inside):
            base = index_text(op.base)
            return f"{op.id} = ({base} >= 0) & ({base} < {op.length})", None
        if isinstance(op, Select):
            return f"{op.id} = {op.then} if {op.cond} else {op.other}", None
        raise AssertionError(op)  # pragma: no cover

    def needed(self, values: list[str]) -> list:
        """The ops that `values` depend on, in program order."""
        need: set[str] = set()
        stack = list(values)
        while stack:
            name = stack.pop()
            op = self.ops.get(name)
            if op is None or name in need:
                continue
            need.add(name)
            if isinstance(op, Compute):
                stack += op.args
            elif isinstance(op, Select):
                stack += [op.cond, op.then, op.other]
            elif isinstance(op, Load):
                stack += [ix.var for ix in op.index if ix.var is not None]
            elif isinstance(op, (Clamp, Inside)) and op.base.var is not None:
                stack.append(op.base.var)
        return [op for op in self.loop.ops if op.id in need]

    def emit_ops(self, lines: Lines, indent: int, ops: list, depth0: bool) -> None:
        for op in ops:
            if (op.depth == 0) == depth0:
                code, comment = self.op_line(op)
                lines.add(indent, code, comment)

    def emit_stores(self, lines: Lines, indent: int, stores) -> None:
        for st in stores:
            lines.add(
                indent,
                f"{subscript(st.buffer.name, st.index)} = {st.value}",
                f"-> {self.describe_buffer(st.buffer)}",
            )

    # ---- kernels
    def kernels(self, out: Kernels) -> None:
        loop = self.loop
        if loop.scans:
            self.scan(out, loop.name)
            return
        groups: dict[tuple[int, ...], list[Reduction]] = {}
        for red in loop.reductions:
            groups.setdefault(tuple(red.axes), []).append(red)
        per_kernel = max(1, self.cfg.shared_bytes // (self.cfg.threads * 8))
        batches = [
            (axes, reds[i : i + per_kernel])
            for axes, reds in groups.items()
            for i in range(0, len(reds), per_kernel)
        ]
        if not batches:
            self.elementwise(out, loop.name, loop.stores)
            return
        for n, (axes, reds) in enumerate(batches):
            name = loop.name if len(batches) == 1 else f"{loop.name}_{n}"
            self.reduction(out, name, loop.stores if n == 0 else [], axes, reds)

    def _header(self, name: str, args: list[str], what: str) -> Lines:
        lines = Lines()
        lines.add(0, "@cuda.jit(cache=_CACHE)")
        lines.add(0, f"def {name}({', '.join(args)}):")
        lines.add(1, f'"""{what}"""')
        for b in self._buffers(args):
            lines.add(1, f"# {b.name}: {self.describe_buffer(b)}")
        return lines

    def _buffers(self, args: list[str]) -> list[Buffer]:
        found = {}
        for op in self.loop.ops:
            if isinstance(op, Load):
                found[op.buffer.name] = op.buffer
        for st in self.loop.stores:
            found[st.buffer.name] = st.buffer
        for red in self.loop.reductions:
            found[red.buffer.name] = red.buffer
        for scan in self.loop.scans:
            found[scan.buffer.name] = scan.buffer
        return [found[a] for a in args if a in found]

    def _args(self, ops: list, stores, reds, extra: list[Buffer] = ()) -> list[str]:
        names = []
        for op in ops:
            if isinstance(op, Load) and op.buffer.name not in names:
                names.append(op.buffer.name)
        for b in [st.buffer for st in stores] + [r.buffer for r in reds] + list(extra):
            if b.name not in names:
                names.append(b.name)
        return names

    def scan(self, out: Kernels, name: str) -> None:
        """Scans along the loop's last axis: one thread per row (the other axes), each running
        along its row in order."""
        loop, cfg = self.loop, self.cfg
        shape, r = loop.shape, len(loop.shape)
        rows, n = _prod(shape[:-1]), shape[-1]
        if rows * n == 0:
            return
        ops = self.needed([scan.value for scan in loop.scans])
        args = self._args(ops, [], [], [scan.buffer for scan in loop.scans])
        what = f"running {', '.join(s.op for s in loop.scans)} along the last axis of {list(shape)}"
        lines = self._header(name, args, f"{what}: a thread per row")
        self.emit_ops(lines, 1, ops, depth0=True)
        lines.add(1, "_t = cuda.grid(1)")
        lines.add(1, "_step = cuda.gridsize(1)")
        lines.add(1, f"while _t < {rows}:")
        _decompose(lines, 2, "_t", list(range(r - 1)), shape)
        for k, scan in enumerate(loop.scans):
            lines.add(
                2, f"_acc{k} = {identity(scan.op, scan.buffer.dtype)}", self.node_comment(scan.node)
            )
        lines.add(2, f"for i{r - 1} in range({n}):")
        self.emit_ops(lines, 3, ops, depth0=False)
        for k, scan in enumerate(loop.scans):
            lines.add(3, f"_acc{k} = {combine(scan.op, scan.buffer.dtype, f'_acc{k}', scan.value)}")
            lines.add(
                3,
                f"{subscript(scan.buffer.name, scan.index)} = _acc{k}",
                f"-> {self.describe_buffer(scan.buffer)}",
            )
        lines.add(2, "_t += _step")
        blocks = max(1, min(_ceil_div(rows, cfg.threads), cfg.blocks))
        out.sources.append(lines.render())
        out.launches.append(
            Launch(name, (blocks,), (cfg.threads,), args, f"{name}: {what}, {rows} rows")
        )

    def elementwise(self, out: Kernels, name: str, stores) -> None:
        loop, cfg = self.loop, self.cfg
        size = _prod(loop.shape)
        if size == 0 or not stores:
            return
        ops = self.needed([st.value for st in stores])
        args = self._args(ops, stores, [])
        lines = self._header(name, args, f"{list(loop.shape)}: elementwise, a grid-stride loop")
        self.emit_ops(lines, 1, ops, depth0=True)
        lines.add(1, "_t = cuda.grid(1)")
        lines.add(1, "_step = cuda.gridsize(1)")
        lines.add(1, f"while _t < {size}:")
        _decompose(lines, 2, "_t", list(range(len(loop.shape))), loop.shape)
        self.emit_ops(lines, 2, ops, depth0=False)
        self.emit_stores(lines, 2, stores)
        lines.add(2, "_t += _step")
        blocks = max(1, min(_ceil_div(size, cfg.threads), cfg.blocks))
        out.sources.append(lines.render())
        out.launches.append(
            Launch(
                name,
                (blocks,),
                (cfg.threads,),
                args,
                f"{name}: {len(ops)} ops over {size} elements",
            )
        )

    def reduction(
        self,
        out: Kernels,
        name: str,
        stores,
        axes: tuple[int, ...],
        reds: list[Reduction],
        nsplit: int | None = None,
    ) -> None:
        loop, cfg = self.loop, self.cfg
        shape, r = loop.shape, len(loop.shape)
        kept = [a for a in range(r) if a not in axes]
        rows, cols = _prod([shape[a] for a in kept]), _prod([shape[a] for a in axes])
        if rows == 0:
            return
        T = cfg.threads
        reduced_inner = (r - 1) in axes
        if reduced_inner:
            TR = min(T, _pow2_ceil(cols))
            TK = T // TR
        else:
            TK = min(T, cfg.warp, _pow2_ceil(rows))
            TR = T // TK
        groups = _ceil_div(rows, TK)  # groups of TK rows; each block does one at a time
        blocks_x = min(groups, cfg.blocks)
        if nsplit is None:
            nsplit = min(_ceil_div(cfg.blocks, blocks_x), max(1, _ceil_div(cols, TR)), 65535)
        chunk = max(TR, _ceil_div(_ceil_div(cols, max(nsplit, 1)), TR) * TR)
        nsplit = max(1, _ceil_div(cols, chunk))
        partials = []
        if nsplit > 1:
            for red in reds:
                kshape = tuple(shape[a] for a in kept)
                partials.append(
                    Buffer(f"p{len(out.scratch)}", (nsplit,) + kshape, red.buffer.dtype, "temp")
                )
                out.scratch.append(partials[-1])
        ops = self.needed([st.value for st in stores] + [red.value for red in reds])
        args = self._args(ops, stores, [] if partials else reds, partials)
        what = (
            f"reduce axes {list(axes)} of {list(shape)}: {rows} rows of {cols}; blocks of "
            f"{TK} rows x {TR} threads" + (f", columns split in {nsplit}" if nsplit > 1 else "")
        )
        lines = self._header(name, args, what)
        for k, red in enumerate(reds):
            lines.add(1, f"_sh{k} = cuda.shared.array({T}, np.{np.dtype(red.buffer.dtype).name})")
        lines.add(1, "_tid = cuda.threadIdx.x")
        if reduced_inner:
            lines.add(1, f"_lane = _tid % {TR}", "this thread's place along its row")
            lines.add(1, f"_row = _tid // {TR}")
        else:
            lines.add(1, f"_lane = _tid // {TK}", "this thread's place along its row")
            lines.add(1, f"_row = _tid % {TK}")
        lines.add(1, "_split = cuda.blockIdx.y")
        self.emit_ops(lines, 1, ops, depth0=True)
        lines.add(1, "_group = cuda.blockIdx.x")
        lines.add(1, f"while _group < {groups}:", f"{TK} rows at a time")
        lines.add(2, f"_k = _group * {TK} + _row", "this thread's row")
        for k, red in enumerate(reds):
            lines.add(2, f"_acc{k} = {identity(red.op, red.buffer.dtype)}")
        _decompose(lines, 2, "_k", kept, shape)
        lines.add(2, f"if _k < {rows}:")
        lines.add(3, f"_r = _split * {chunk} + _lane")
        lines.add(3, f"_end = min({cols}, _split * {chunk} + {chunk})")
        lines.add(3, "while _r < _end:")
        _decompose(lines, 4, "_r", list(axes), shape)
        self.emit_ops(lines, 4, ops, depth0=False)
        self.emit_stores(lines, 4, stores)
        for k, red in enumerate(reds):
            dtype = red.buffer.dtype
            lines.add(
                4,
                f"_acc{k} = {combine(red.op, dtype, f'_acc{k}', red.value)}",
                self.node_comment(red.node),
            )
        lines.add(4, f"_r += {TR}")
        for k in range(len(reds)):
            lines.add(2, f"_sh{k}[_tid] = _acc{k}")
        lines.add(2, "cuda.syncthreads()")
        partner = "1" if reduced_inner else str(TK)
        lines.add(2, f"_s = {TR // 2}", "a tree over each row's threads")
        lines.add(2, "while _s > 0:")
        lines.add(3, "if _lane < _s:")
        for k, red in enumerate(reds):
            other = f"_sh{k}[_tid + _s * {partner}]" if partner != "1" else f"_sh{k}[_tid + _s]"
            lines.add(
                4, f"_sh{k}[_tid] = {combine(red.op, red.buffer.dtype, f'_sh{k}[_tid]', other)}"
            )
        lines.add(3, "cuda.syncthreads()")
        lines.add(3, "_s //= 2")
        lines.add(2, f"if _lane == 0 and _k < {rows}:")
        kept_index = tuple(Index(f"i{a}") for a in kept)
        for k, red in enumerate(reds):
            if partials:
                target = subscript(partials[k].name, (Index("_split"),) + kept_index)
                lines.add(3, f"{target} = _sh{k}[_tid]", "this block's partial result")
            else:
                lines.add(
                    3,
                    f"{subscript(red.buffer.name, kept_index)} = _sh{k}[_tid]",
                    f"-> {self.describe_buffer(red.buffer)}",
                )
        lines.add(2, "_group += cuda.gridDim.x")
        out.sources.append(lines.render())
        out.launches.append(
            Launch(name, (blocks_x, nsplit), (T,), args, f"{name}: {what}", (TK, TR, nsplit))
        )
        for k, red in enumerate(reds if partials else []):
            self._combine(
                out, f"{name}_combine{k}", partials[k], red, tuple(shape[a] for a in kept)
            )

    def _combine(self, out: Kernels, name: str, part: Buffer, red: Reduction, kshape) -> None:
        """A second kernel: reduce the partial results over their first axis."""
        space = part.shape
        index = tuple(Index(f"i{a}") for a in range(len(space)))
        load = Load("v0", part, index, len(space))
        loop = FusedLoop(
            name, space, [load], [], [Reduction("v0", red.buffer, (0,), red.op, red.node)]
        )
        writer = LoopWriter(loop, self.cfg, self.names, self.render)
        writer.reduction(out, name, [], (0,), loop.reductions, nsplit=1)
        self.helpers |= writer.helpers


# ----------------------------------------------------------------------------------------------
# Matrix products


def matmul_kernel(
    step: MatmulStep,
    name: str,
    cfg: LaunchConfig,
    names: dict,
    out: Kernels,
    render,
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
        space = part.shape
        load = Load("v0", part, tuple(Index(f"i{d}") for d in range(len(space))), len(space))
        loop = FusedLoop(
            f"{name}_combine", space, [load], [], [Reduction("v0", o, (0,), "sum", step.node)]
        )
        LoopWriter(loop, cfg, names, render).reduction(
            out, loop.name, [], (0,), loop.reductions, nsplit=1
        )


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
