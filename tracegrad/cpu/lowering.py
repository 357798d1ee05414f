"""The CPU's lowering pass: a fused loop as a loop nest over chunks of axis 0, in the loop IR.

A kernel computes the chunks `first..last-1` of axis 0 (of `nch` chunks); a program calls it
once for all the chunks, or from several threads with a share of the chunks each. So every
reduction that runs over axis 0 keeps one partial result per chunk (`p<k>`, a kernel argument),
and the call made with `finish` combines them after the last chunk; a kernel with no such
reduction loops over the rows of its chunks as one range (ONE_RANGE). A reduction over a suffix
of the axes that starts later keeps its running value in a scalar (`s<k>`); a scan keeps its
running value in `acc<k>` along the last axis.

Sizes are the names `n0`, `n1`, ... and `nch`; the printer decides how the kernel receives them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import primitives as P
from ..fusion.loop_ir import Assign, Cast, Combine, Elem, For, Identity, If, Kernel, Let, Note, Stmt
from ..fusion.steps import FusedLoop, Reduction, unique


@dataclass(frozen=True)
class ReductionLayout:
    """Where a reduction of a chunked loop keeps its running value."""

    first: int  # its first reduced axis
    suffix: bool  # it reduces every axis from `first` on (a scalar accumulator)
    kept: list[int]  # the axes it keeps
    acc: np.dtype  # the accumulator's dtype (float32 sums accumulate in float64)
    partial: bool  # it keeps one partial result per chunk of axis 0

    @property
    def scalar_per_chunk(self) -> bool:
        return self.suffix and self.first == 0


def layout(red: Reduction, r: int) -> ReductionLayout:
    axes = red.axes
    first = min(axes)
    suffix = axes == tuple(range(first, r))
    acc = P.MONOIDS[red.op].accumulator(red.buffer.dtype)
    partial = (suffix and first == 0) or (not suffix and 0 in axes)
    kept = [a for a in range(r) if a not in axes]
    return ReductionLayout(first, suffix, kept, acc, partial)


def buffers(loop: FusedLoop) -> list:
    """The arrays a kernel of `loop` takes, in argument order: what it reads, then writes."""
    return unique(loop.reads + loop.writes)


def partials(loop: FusedLoop) -> list[tuple[str, tuple[str, ...], np.dtype]]:
    """(name, shape in terms of `nch` and `n<a>`, dtype) of each partial-results argument."""
    out = []
    r = len(loop.shape)
    for k, red in enumerate(loop.reductions):
        lay = layout(red, r)
        if lay.partial:
            dims = ("nch",) + (() if lay.suffix else tuple(f"n{a}" for a in lay.kept))
            out.append((f"p{k}", dims, lay.acc))
    return out


# ONE_RANGE: a kernel with no partial results computes the chunks first..last-1 as the one range
# of rows they cover, without a loop over the chunks. Inside a loop nest LLVM re-materialises a math
# function's polynomial constants in every round of the innermost loop instead of keeping them in
# registers or on the stack (Numba's large code model makes each an address load and a broadcast);
# as the outermost loop of its function the element loop keeps them. W1's gradient kernel: 198
# instructions a round against 291, 47 of them broadcasts (benchmarks/RESULTS.md, "Ninth pass").


class _Lowering:
    def __init__(self, loop: FusedLoop, notes):
        self.loop, self.r = loop, len(loop.shape)
        self.describe, self.comment = notes.buffer, notes.node  # what comments say
        self.value_name = notes.value
        self.by_depth: dict[int, list] = {}
        for op in loop.ops:
            self.by_depth.setdefault(op.depth, []).append(op)
        self.reds = [(k, red, layout(red, self.r)) for k, red in enumerate(loop.reductions)]

    def lets(self, depth: int) -> list[Stmt]:
        return [Let(op) for op in self.by_depth.get(depth, [])]

    def stores(self) -> list[Stmt]:
        return [
            Assign(Elem(st.buffer, st.index), st.value, f"-> {self.describe(st.buffer)}")
            for st in self.loop.stores
        ]

    def target(self, k: int, red, lay, idx: list[str], with_chunk: bool) -> Elem:
        if lay.partial:
            return Elem(f"p{k}", tuple((["c"] if with_chunk else []) + idx))
        return Elem(red.buffer, tuple(idx))

    def kernel(self) -> list[Stmt]:
        body = self.lets(0)
        if self.r == 0:
            return body + self.stores()
        for k, red, lay in self.reds:
            if lay.partial:
                body.append(Note(f"p{k}: partial results per chunk of {self.comment(red.node)}"))
        per_chunk = any(lay.partial for _, _, lay in self.reds)
        if per_chunk:
            chunk: list[Stmt] = [Assign("lo", "c * n0 // nch"), Assign("hi", "(c + 1) * n0 // nch")]
        else:  # see ONE_RANGE
            note = "the chunks first..last-1 of axis 0: one range of rows"
            chunk = [Assign("lo", "first * n0 // nch", note), Assign("hi", "last * n0 // nch")]
        for k, red, lay in self.reds:
            if lay.scalar_per_chunk:
                chunk.append(Assign(f"s{k}", Identity(red.op, lay.acc)))
            elif not lay.suffix:
                chunk.append(self.init_array(k, red, lay))
        chunk += self.nest(0)
        for k, _, lay in self.reds:
            if lay.scalar_per_chunk:
                chunk.append(Assign(Elem(f"p{k}", ("c",)), f"s{k}"))
        if per_chunk:
            body.append(For("c", "last", chunk, "first", "the chunks of axis 0 this call computes"))
        else:
            body += chunk
        finish = [self.combine_partials(k, red, lay) for k, red, lay in self.reds if lay.partial]
        if finish:
            note = "after the last chunk: combine the chunks' partial results"
            body.append(If("finish", [s for part in finish for s in part], note))
        return body

    def init_array(self, k: int, red, lay) -> Stmt:
        idx = [f"q{a}" for a in lay.kept]
        stmt: Stmt = Assign(self.target(k, red, lay, idx, True), Identity(red.op, lay.acc))
        for a in reversed(lay.kept):
            stmt = For(f"q{a}", "hi", [stmt], "lo") if a == 0 else For(f"q{a}", f"n{a}", [stmt])
        return stmt

    def nest(self, a: int) -> list[Stmt]:
        """The loop over axis a and everything inside it."""
        out: list[Stmt] = []
        if a + 1 == self.r:  # scans run along the last axis, from its start
            for k, scan in enumerate(self.loop.scans):
                note = f"running {scan.op}: {self.comment(scan.node)}"
                out.append(Assign(f"acc{k}", Identity(scan.op, scan.buffer.dtype), note))
        inner = self.lets(a + 1)
        loop = For(f"i{a}", "hi", inner, "lo") if a == 0 else For(f"i{a}", f"n{a}", inner)
        out.append(loop)
        if a + 1 < self.r:
            starting = [(k, red, lay) for k, red, lay in self.reds if lay.suffix]
            starting = [(k, red, lay) for k, red, lay in starting if lay.first == a + 1]
            for k, red, lay in starting:
                inner.append(Assign(f"s{k}", Identity(red.op, lay.acc)))
            inner += self.nest(a + 1)
            for k, red, lay in starting:
                idx = [f"i{j}" for j in range(a + 1)]
                value = Cast(red.buffer.dtype, f"s{k}")
                note = f"-> {self.describe(red.buffer)}"
                inner.append(Assign(self.target(k, red, lay, idx, False), value, note))
            return out
        inner += self.stores()
        for k, scan in enumerate(self.loop.scans):
            dtype = scan.buffer.dtype
            inner.append(Assign(f"acc{k}", Combine(scan.op, dtype, f"acc{k}", scan.value)))
            note = f"-> {self.describe(scan.buffer)}"
            inner.append(Assign(Elem(scan.buffer, scan.index), f"acc{k}", note))
        for k, red, lay in self.reds:
            note = self.comment(red.node)
            if lay.suffix:
                step = Combine(red.op, lay.acc, f"s{k}", red.value, True)
                inner.append(Assign(f"s{k}", step, note))
            else:
                target = self.target(k, red, lay, [f"i{j}" for j in lay.kept], True)
                step = Combine(red.op, lay.acc, target, red.value, True)
                inner.append(Assign(target, step, note))
        return out

    def combine_partials(self, k: int, red, lay) -> list[Stmt]:
        idx = [] if lay.suffix else [f"q{a}" for a in lay.kept]
        name = self.value_name(red.node.out)
        part = Elem(f"p{k}", tuple(["c"] + idx))
        body: list[Stmt] = [
            Assign(f"s{k}", Identity(red.op, lay.acc), f"combine the chunks of {name}"),
            For("c", "nch", [Assign(f"s{k}", Combine(red.op, lay.acc, f"s{k}", part, True))]),
            Assign(
                Elem(red.buffer, tuple(idx)),
                Cast(red.buffer.dtype, f"s{k}"),
                f"-> {self.describe(red.buffer)}",
            ),
        ]
        for a in reversed(idx):
            body = [For(a, f"n{a[1:]}", body)]
        return body


def lower(loop: FusedLoop, notes) -> Kernel:
    """The kernel of `loop` for the CPU. `notes` writes the comments that name buffers, nodes
    and values (`render.Notes`)."""
    body = _Lowering(loop, notes).kernel()
    info = {"sizes": [f"n{a}" for a in range(len(loop.shape))], "partials": partials(loop)}
    return Kernel("kernel", buffers(loop), body, None, info)
