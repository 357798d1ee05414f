"""The GPU's lowering pass: a fused loop as kernels of threads and blocks, in the loop IR.

- A fused loop without reductions is an elementwise kernel: a grid-stride loop, one thread per
  element of its iteration space.
- A fused loop with scans runs one thread per row (every axis but the last), each along its row.
- A fused loop with reductions splits its space into kept axes ("rows") and reduced axes
  ("columns"). A block holds `TK x TR` threads: TK rows at a time, TR threads on each row. Each
  thread accumulates a strided part of its row in a register, then the block combines the TR
  partial values of each row by a tree in shared memory. When the rows are too few to fill the
  device, the columns are also split across blocks (grid axis y); each block then writes a
  partial result and a second, small kernel (the same lowering, on the partials) combines them.
  The threads of a warp run along the innermost axis of the space (rows or columns, whichever
  it is), so that loads are coalesced in both `sum(x, axis=0)` and `sum(x, axis=1)`.

Sizes and the launch layout are written in (a graph is traced for one signature). Each kernel's
`info["launch"]` holds its grid, block, and a comment for the driver; `cfg` is the device's
launch configuration (`cuda.device.LaunchConfig`: threads, blocks, warp, shared_bytes).
"""

from __future__ import annotations

import numpy as np

from ..fusion.loop_ir import (
    Assign,
    BinOp,
    Local,
    Combine,
    Elem,
    For,
    Identity,
    If,
    Kernel,
    Let,
    Shared,
    Special,
    Stmt,
    Sync,
    While,
    needed,
)
from ..fusion.steps import Buffer, FusedLoop, Index, Load, MatmulStep, Reduction


def _pow2_ceil(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _prod(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def decompose(flat: str, axes: list[int], shape) -> list[Stmt]:
    """Assign `i<a>` for each axis in `axes` (row-major) from the flat index `flat`."""
    out: list[Stmt] = []
    rest = flat
    for pos in range(len(axes) - 1, -1, -1):
        a, n = axes[pos], shape[axes[pos]]
        if pos == 0:
            out.append(Assign(f"i{a}", rest))
        elif n == 1:
            out.append(Assign(f"i{a}", "0"))
        else:
            out.append(Assign(f"i{a}", f"{rest} % {n}"))
            out.append(Assign("_q", f"{rest} // {n}"))
            rest = "_q"
    return out


class _Lowering:
    def __init__(self, loop: FusedLoop, cfg, notes, scratch: list[Buffer]):
        self.loop, self.cfg, self.notes, self.scratch = loop, cfg, notes, scratch

    def lets(self, ops, depth0: bool) -> list[Stmt]:
        return [Let(op) for op in ops if (op.depth == 0) == depth0]

    def stores(self, stores) -> list[Stmt]:
        return [
            Assign(Elem(st.buffer, st.index), st.value, f"-> {self.notes.buffer(st.buffer)}")
            for st in stores
        ]

    def kernel(self, name: str, ops, stores, reds, extra, doc, body, launch) -> Kernel:
        args: list[str] = []
        for op in ops:
            if isinstance(op, Load) and op.buffer.name not in args:
                args.append(op.buffer.name)
        for b in [st.buffer for st in stores] + [r.buffer for r in reds] + list(extra):
            if b.name not in args:
                args.append(b.name)
        found = {}
        for op in self.loop.ops:
            if isinstance(op, Load):
                found[op.buffer.name] = op.buffer
        for b in self.loop.writes:
            found[b.name] = b
        described = [found[a] for a in args if a in found]
        return Kernel(name, args, body, doc, {"described": described, "launch": launch})

    # ---- the kinds of kernel
    def kernels(self) -> list[Kernel]:
        loop = self.loop
        if loop.scans:
            return self.scan(loop.name)
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
            return self.elementwise(loop.name, loop.stores)
        out = []
        for n, (axes, reds) in enumerate(batches):
            name = loop.name if len(batches) == 1 else f"{loop.name}_{n}"
            out += self.reduction(name, loop.stores if n == 0 else [], axes, reds)
        return out

    def scan(self, name: str) -> list[Kernel]:
        """Scans along the loop's last axis: one thread per row (the other axes), each running
        along its row in order."""
        loop, cfg = self.loop, self.cfg
        shape, r = loop.shape, len(loop.shape)
        rows, n = _prod(shape[:-1]), shape[-1]
        if rows * n == 0:
            return []
        ops = needed(loop.ops, [scan.value for scan in loop.scans])
        row: list[Stmt] = decompose("_t", list(range(r - 1)), shape)
        along: list[Stmt] = self.lets(ops, depth0=False)
        for k, scan in enumerate(loop.scans):
            dtype = scan.buffer.dtype
            row.append(Assign(f"_acc{k}", Identity(scan.op, dtype), self.notes.node(scan.node)))
            along.append(Assign(f"_acc{k}", Combine(scan.op, dtype, f"_acc{k}", scan.value)))
            note = f"-> {self.notes.buffer(scan.buffer)}"
            along.append(Assign(Elem(scan.buffer, scan.index), f"_acc{k}", note))
        row += [For(f"i{r - 1}", str(n), along), Assign("_t", "_step", update="+")]
        body = self.lets(ops, depth0=True) + self.grid_stride(rows, row)
        what = f"running {', '.join(s.op for s in loop.scans)} along the last axis of {list(shape)}"
        blocks = max(1, min(ceil_div(rows, cfg.threads), cfg.blocks))
        launch = ((blocks,), (cfg.threads,), f"{name}: {what}, {rows} rows", None)
        scans = [scan.buffer for scan in loop.scans]
        return [self.kernel(name, ops, [], [], scans, f"{what}: a thread per row", body, launch)]

    def grid_stride(self, size: int, body: list[Stmt]) -> list[Stmt]:
        return [
            Assign("_t", Special("thread")),
            Assign("_step", Special("threads")),
            While(f"_t < {size}", body),
        ]

    def elementwise(self, name: str, stores) -> list[Kernel]:
        loop, cfg = self.loop, self.cfg
        size = _prod(loop.shape)
        if size == 0 or not stores:
            return []
        ops = needed(loop.ops, [st.value for st in stores])
        each = decompose("_t", list(range(len(loop.shape))), loop.shape)
        each += self.lets(ops, depth0=False) + self.stores(stores)
        each.append(Assign("_t", "_step", update="+"))
        body = self.lets(ops, depth0=True) + self.grid_stride(size, each)
        blocks = max(1, min(ceil_div(size, cfg.threads), cfg.blocks))
        launch = ((blocks,), (cfg.threads,), f"{name}: {len(ops)} ops over {size} elements", None)
        doc = f"{list(loop.shape)}: elementwise, a grid-stride loop"
        return [self.kernel(name, ops, stores, [], [], doc, body, launch)]

    def reduction(
        self, name: str, stores, axes: tuple[int, ...], reds: list[Reduction], nsplit=None
    ) -> list[Kernel]:
        loop, cfg = self.loop, self.cfg
        shape, r = loop.shape, len(loop.shape)
        kept = [a for a in range(r) if a not in axes]
        rows, cols = _prod([shape[a] for a in kept]), _prod([shape[a] for a in axes])
        if rows == 0:
            return []
        T = cfg.threads
        reduced_inner = (r - 1) in axes
        if reduced_inner:
            TR = min(T, _pow2_ceil(cols))
            TK = T // TR
        else:
            TK = min(T, cfg.warp, _pow2_ceil(rows))
            TR = T // TK
        groups = ceil_div(rows, TK)  # groups of TK rows; each block does one at a time
        blocks_x = min(groups, cfg.blocks)
        if nsplit is None:
            nsplit = min(ceil_div(cfg.blocks, blocks_x), max(1, ceil_div(cols, TR)), 65535)
        chunk = max(TR, ceil_div(ceil_div(cols, max(nsplit, 1)), TR) * TR)
        nsplit = max(1, ceil_div(cols, chunk))
        partials = []
        if nsplit > 1:
            for red in reds:
                kshape = tuple(shape[a] for a in kept)
                part = Buffer(f"p{len(self.scratch)}", (nsplit,) + kshape, red.buffer.dtype, "temp")
                partials.append(part)
                self.scratch.append(part)
        ops = needed(loop.ops, [st.value for st in stores] + [red.value for red in reds])
        what = (
            f"reduce axes {list(axes)} of {list(shape)}: {rows} rows of {cols}; blocks of "
            f"{TK} rows x {TR} threads" + (f", columns split in {nsplit}" if nsplit > 1 else "")
        )
        body: list[Stmt] = [Shared(f"_sh{k}", T, red.buffer.dtype) for k, red in enumerate(reds)]
        body.append(Assign("_tid", Special("thread_in_block")))
        place = "this thread's place along its row"
        if reduced_inner:
            body += [Assign("_lane", f"_tid % {TR}", place), Assign("_row", f"_tid // {TR}")]
        else:
            body += [Assign("_lane", f"_tid // {TK}", place), Assign("_row", f"_tid % {TK}")]
        body.append(Assign("_split", Special("block_y")))
        body += self.lets(ops, depth0=True)
        body.append(Assign("_group", Special("block_x")))
        group: list[Stmt] = [Assign("_k", f"_group * {TK} + _row", "this thread's row")]
        group += [
            Assign(f"_acc{k}", Identity(red.op, red.buffer.dtype)) for k, red in enumerate(reds)
        ]
        group += decompose("_k", kept, shape)
        column: list[Stmt] = decompose("_r", list(axes), shape)
        column += self.lets(ops, depth0=False) + self.stores(stores)
        for k, red in enumerate(reds):
            step = Combine(red.op, red.buffer.dtype, f"_acc{k}", red.value, True)
            column.append(Assign(f"_acc{k}", step, self.notes.node(red.node)))
        column.append(Assign("_r", str(TR), update="+"))
        group.append(
            If(
                f"_k < {rows}",
                [
                    Assign("_r", f"_split * {chunk} + _lane"),
                    Assign("_end", f"min({cols}, _split * {chunk} + {chunk})"),
                    While("_r < _end", column),
                ],
            )
        )
        group += [Assign(Elem(f"_sh{k}", ("_tid",)), f"_acc{k}") for k in range(len(reds))]
        group.append(Sync())
        partner = "_tid + _s" if reduced_inner or TK == 1 else f"_tid + _s * {TK}"
        tree = []
        for k, red in enumerate(reds):
            mine, other = Elem(f"_sh{k}", ("_tid",)), Elem(f"_sh{k}", (partner,))
            tree.append(Assign(mine, Combine(red.op, red.buffer.dtype, mine, other, True)))
        group.append(Assign("_s", str(TR // 2), "a tree over each row's threads"))
        group.append(
            While("_s > 0", [If("_lane < _s", tree), Sync(), Assign("_s", "2", update="//")])
        )
        kept_index = tuple(Index(f"i{a}") for a in kept)
        results = []
        for k, red in enumerate(reds):
            if partials:
                target = Elem(partials[k], (Index("_split"),) + kept_index)
                results.append(Assign(target, f"_sh{k}[_tid]", "this block's partial result"))
            else:
                note = f"-> {self.notes.buffer(red.buffer)}"
                results.append(Assign(Elem(red.buffer, kept_index), f"_sh{k}[_tid]", note))
        group.append(If(f"_lane == 0 and _k < {rows}", results))
        group.append(Assign("_group", Special("blocks_x"), update="+"))
        body.append(While(f"_group < {groups}", group, f"{TK} rows at a time"))
        launch = ((blocks_x, nsplit), (T,), f"{name}: {what}", (TK, TR, nsplit))
        out = [
            self.kernel(name, ops, stores, [] if partials else reds, partials, what, body, launch)
        ]
        for k, red in enumerate(reds if partials else []):
            cname = f"{name}_combine{k}"
            out += combine(
                cname, partials[k], red.buffer, red.op, red.node, cfg, self.notes, self.scratch
            )
        return out


def lower(loop: FusedLoop, cfg, notes, scratch: list[Buffer]) -> list[Kernel]:
    """The kernels of `loop` for a GPU with launch configuration `cfg`, in launch order.
    Partial-result buffers are appended to `scratch` (numbered across the program)."""
    return _Lowering(loop, cfg, notes, scratch).kernels()


def combine(
    name: str, part: Buffer, out: Buffer, op: str, node, cfg, notes, scratch
) -> list[Kernel]:
    """A second kernel: reduce the partial results `part` over their first axis into `out` (the
    monoid `op`, for the IR node `node`)."""
    space = part.shape
    load = Load("v0", part, tuple(Index(f"i{a}") for a in range(len(space))), len(space))
    loop = FusedLoop(name, space, [load], [], [Reduction("v0", out, (0,), op, node)])
    return _Lowering(loop, cfg, notes, scratch).reduction(name, [], (0,), loop.reductions, 1)


# ----------------------------------------------------------------------------------------------
# Matrix products


def matmul(
    step: MatmulStep, name: str, cfg, notes, scratch: list[Buffer], transposed=(False, False)
) -> list[Kernel]:
    """A tiled kernel for `out = a @ b`: each block computes a `BM x BN` tile of the result from
    shared-memory tiles of both operands, each thread a `U x U` block of it held in registers.
    When its tiles are too few to fill the device, the k-range is split across blocks too
    (split-K), and a reduction kernel sums the parts. `transposed` says which operand is a
    transposed view (as in every adjoint of a product): its tile is then read along its other
    axis, so that neighbouring threads read neighbouring memory."""
    a, b, o = step.a, step.b, step.out
    batch = tuple(o.shape[:-2])
    M, N = o.shape[-2], o.shape[-1]
    K = a.shape[-1]
    nb = _prod(batch)
    if nb * M * N == 0:
        return []
    TS, U, BK = cfg.mm_threads, cfg.mm_micro, cfg.mm_depth
    BM = BN = TS * U
    tiles = ceil_div(N, BN) * ceil_div(M, BM) * nb
    splits = max(1, min(ceil_div(cfg.mm_blocks, tiles), ceil_div(K, 4 * BK)))
    kc = ceil_div(ceil_div(K, splits), BK) * BK if K else BK  # each part's k-range
    splits = max(1, ceil_div(K, kc))
    part = None
    if splits > 1:
        part = Buffer(f"p{len(scratch)}", (splits,) + tuple(o.shape), o.dtype, "temp")
        scratch.append(part)
    zero = Identity("sum", o.dtype)
    pre = tuple(f"_b{j}" for j in range(len(batch)))
    where = f"   [{step.node.source}]" if step.node.source else ""
    comment = (
        f"{notes.value(o.var)} = {notes.value(a.var)} @ {notes.value(b.var)}: "
        f"{list(batch)} x [{M}, {K}] @ [{K}, {N}]{where}"
    )
    how = f"tiles {BM}x{BN}x{BK}, {U}x{U} results per thread"
    if part is not None:
        how += f", k split in {splits} parts of {kc}"
    body: list[Stmt] = [
        Shared("_as", (BK, BM), o.dtype),
        Shared("_bs", (BK, BN), o.dtype),
        Local("_acc", (U, U), o.dtype),
        Local("_ar", U, o.dtype),
        Local("_br", U, o.dtype),
        Assign("_tx", Special("thread_x")),
        Assign("_ty", Special("thread_y")),
        Assign("_tid", f"_ty * {TS} + _tx"),
        Assign("_row0", BinOp(Special("block_y"), "*", str(BM))),
        Assign("_col0", BinOp(Special("block_x"), "*", str(BN))),
        Assign("_z", Special("block_z")),
    ]
    each: list[Stmt] = [
        Assign("_split", f"_z % {splits}"),
        Assign("_kbeg", f"_split * {kc}"),
        Assign("_kend", f"min({K}, _kbeg + {kc})"),
    ]
    rest = f"_z // {splits}"
    for j in range(len(batch) - 1, -1, -1):
        if j == 0:
            each.append(Assign("_b0", rest))
        else:
            each += [
                Assign(f"_b{j}", f"{rest} % {batch[j]}"),
                Assign("_q", f"{rest} // {batch[j]}"),
            ]
            rest = "_q"
    acc = Elem("_acc", ("_i", "_j"))
    each.append(For("_i", str(U), [For("_j", str(U), [Assign(acc, zero)])]))

    def tile(dest: str, src: str, rows_first: bool, inner: int, outer: int, inside: str, read):
        if rows_first:  # a transposed view: the other axis is contiguous in memory
            at = [Assign("_r", f"_e % {outer}"), Assign("_c", f"_e // {outer}")]
        else:
            at = [Assign("_r", f"_e // {inner}"), Assign("_c", f"_e % {inner}")]
        store = Elem(dest, read[0])
        load = If(inside, [Assign(store, Elem(src, pre + read[1]))], orelse=[Assign(store, zero)])
        return at + [load]

    a_tile = tile(
        "_as",
        "_a",
        transposed[0],
        BK,
        BM,
        f"_row0 + _r < {M} and _k0 + _c < _kend",
        (("_c", "_r"), ("_row0 + _r", "_k0 + _c")),
    )
    b_tile = tile(
        "_bs",
        "_b",
        transposed[1],
        BN,
        BK,
        f"_k0 + _r < _kend and _col0 + _c < {N}",
        (("_r", "_c"), ("_k0 + _r", "_col0 + _c")),
    )
    products = [
        For("_i", str(U), [Assign(Elem("_ar", ("_i",)), f"_as[_kk, _ty + _i * {TS}]")]),
        For("_j", str(U), [Assign(Elem("_br", ("_j",)), f"_bs[_kk, _tx + _j * {TS}]")]),
        For("_i", str(U), [For("_j", str(U), [Assign(acc, "_ar[_i] * _br[_j]", update="+")])]),
    ]
    each.append(
        For(
            "_k0",
            "_kend",
            [
                For(
                    "_e",
                    str(BM * BK),
                    a_tile,
                    "_tid",
                    "both tiles into shared memory",
                    str(TS * TS),
                ),
                For("_e", str(BK * BN), b_tile, "_tid", None, str(TS * TS)),
                Sync(),
                For("_kk", str(BK), products),
                Sync(),
            ],
            "_kbeg",
            step=str(BK),
        )
    )
    target = Elem("_o", (("_split",) if part is not None else ()) + pre + ("_r", "_c"))
    each.append(
        For(
            "_i",
            str(U),
            [
                Assign("_r", f"_row0 + _ty + _i * {TS}"),
                For(
                    "_j",
                    str(U),
                    [
                        Assign("_c", f"_col0 + _tx + _j * {TS}"),
                        If(f"_r < {M} and _c < {N}", [Assign(target, "_acc[_i, _j]")]),
                    ],
                ),
            ],
        )
    )
    each.append(Assign("_z", Special("blocks_z"), update="+"))
    body.append(While(f"_z < {nb * splits}", each, "one (batch entry, part of k) per step"))
    grid = (ceil_div(N, BN), ceil_div(M, BM), min(nb * splits, 65535))
    dest = part if part is not None else o
    launch = (grid, (TS, TS), comment, None)
    info = {"described": [], "launch": launch, "launch_args": [a.name, b.name, dest.name]}
    out = [Kernel(name, ["_a", "_b", "_o"], body, f"{comment}; {how}", info)]
    if part is not None:  # sum the parts: a reduction over the first axis of the partials
        out += combine(f"{name}_combine", part, o, "sum", step.node, cfg, notes, scratch)
    return out
