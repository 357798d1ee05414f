"""Scatters in place: a scatter-add of a few values into a large array writes into zeros the
program keeps, and the loops that read it skip the zeros (a step of the fusion plan, after
donation; cpu).

NumPy code that writes through traced indices (`y[idx] = v`, `z[idx] += v`) traces to functional
updates built of scatter-adds into zeros and selects (numpy_namespace/scatters.py): `y[idx] = v`
is `where(scatter_add(kept, idx) > 0.5, scatter_add(v where kept, idx), y)`, and the gradient of a
gather is a scatter-add too. Run as written, each scatter of m values into n elements makes a
fresh array of n zeros every call (page faults over all of it: most of the scatter's time), and
each loop that reads it reads n elements of which at most m are not zero.

This pass changes both, for a scatter-add of float64 values into a 1-d array of at least
`MIN_SPARSITY` times as many elements, whose result the program does not return:
- `ScatterStep`: the scatter adds into a buffer the program keeps between calls, all zeros at the
  start of every call, and records the flat positions it wrote (negative indices wrapped). After
  the last step that reads the buffer (or a view of it), `ResetStep` writes zeros back at those
  positions: m writes instead of n. A call that raises refills the buffer with zeros
  (program.py), so the next call starts from zeros again. The sums are the host kernel's: the
  values added in their order into zeros, so the result is the same array, bit for bit.
- A fused elementwise loop that reads such buffers (`split_loop`) runs as two: the loop over all
  of its elements with the scattered buffers' loads replaced by zero (what they hold away from
  the written positions; they are not read at all), and a fix-up loop over the written positions
  only, the same ops on the values gathered there (`GatherStep`: every buffer the loop reads, at
  those positions, before the big loop runs, so that a loop that writes over its own operand,
  as donation makes it, still sees the old values), whose results are put back at those
  positions (`PutStep`). The fix-up computes every written element exactly as the big loop
  would have with the scattered values loaded, so the results are the same. A position written
  several times is fixed up several times with the same values.

A loop is split only when every load and store uses the loop's own index on an array of the
loop's shape (or reads a 0-d array), it has no reduction or running scan, no op that depends on
the position itself (clamps, bounds and equality of indices), and the positions to fix up are
few enough that gathering and putting back costs less than the reads it saves
(`RANDOM_ACCESS_COST`). Otherwise it reads the scattered buffers whole, which still saves the
fresh arrays every call.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .. import primitives as P
from ..fusion.steps import (
    Buffer,
    Clamp,
    Equal,
    EvalStep,
    FusedLoop,
    Inside,
    Literal,
    Load,
    Plan,
    Store,
    ViewStep,
    identity_index,
)

# A scatter of m values into n elements runs in place when n >= MIN_SPARSITY * m.
MIN_SPARSITY = 8
# A loop of n elements that reads k scattered buffers is split when k * n (the elements it no
# longer reads) is at least RANDOM_ACCESS_COST times the elements the fix-up gathers and puts
# back ((reads + stores) * positions): a gathered element costs about as much as this many
# streamed ones. Measured on the large update of benchmarks/bench_updates.py, vectorised loops:
# exp and sin with 2 scattered buffers of 10^6, 10^4 positions: 2.2 ms split against 3.6 ms
# whole; cos with 4 of them, 3 x 10^4 positions, 7 reads: 2.8 ms split against 2.5 ms whole.
RANDOM_ACCESS_COST = 16
# Whether elementwise loops that read scattered buffers are split (off: they read them whole)
SPLIT_LOOPS = True


# ----------------------------------------------------------------------------------------------
# The steps


@dataclass(eq=False)
class ScatterStep:
    """`out += scatter_add(v, idx)` into `out`, all zeros before; `positions` <- the flat
    positions written (int64, negative indices wrapped)."""

    out: Buffer
    v: Buffer
    idx: Buffer
    positions: Buffer
    node: object

    @property
    def reads(self) -> list[Buffer]:
        return [self.v, self.idx]

    @property
    def writes(self) -> list[Buffer]:
        return [self.out, self.positions]

    def describe(self) -> str:
        return (
            f"scatter {self.out!r} += scatter_add({self.v.name}, {self.idx.name}) in place "
            f"(positions -> {self.positions.name})"
        )

    def evaluate(self, arrays: dict) -> None:
        out = arrays.setdefault(id(self.out), np.zeros(self.out.shape, self.out.dtype))
        at = arrays.setdefault(id(self.positions), np.empty(self.positions.shape, np.int64))
        scatter_into(arrays[id(self.v)], arrays[id(self.idx)], out, at)

    def line(self, ns: dict, j: int) -> str:
        ns["_scatter_into"] = scatter_into
        return f"    _scatter_into({self.v.name}, {self.idx.name}, {self.out.name}, {self.positions.name})"


@dataclass(eq=False)
class ResetStep:
    """Zeros back into `out` at `positions`: the scattered buffer is all zeros again."""

    out: Buffer
    positions: Buffer

    @property
    def reads(self) -> list[Buffer]:
        return [self.positions]

    @property
    def writes(self) -> list[Buffer]:
        return [self.out]

    def describe(self) -> str:
        return f"reset {self.out.name}[{self.positions.name}] = 0"

    def evaluate(self, arrays: dict) -> None:
        reset(arrays[id(self.out)], arrays[id(self.positions)])

    def line(self, ns: dict, j: int) -> str:
        ns["_reset"] = reset
        return f"    _reset({self.out.name}, {self.positions.name})"


@dataclass(eq=False)
class GatherStep:
    """`pos` <- the concatenated `parts` (when there are several); then each `small` <- the
    flat `src` at `pos`."""

    parts: list[Buffer]
    pos: Buffer
    pairs: list[tuple[Buffer, Buffer]]  # (src, small)

    @property
    def reads(self) -> list[Buffer]:
        return list(self.parts) + [src for src, _ in self.pairs]

    @property
    def writes(self) -> list[Buffer]:
        made = [self.pos] if len(self.parts) > 1 else []
        return made + [small for _, small in self.pairs]

    def describe(self) -> str:
        pairs = ", ".join(f"{s.name}->{d.name}" for s, d in self.pairs)
        return f"gather at {self.pos.name}: {pairs}"

    def evaluate(self, arrays: dict) -> None:
        for b, _ in self.pairs:
            if b.role == "const":
                arrays[id(b)] = np.ascontiguousarray(arrays[id(b)])
        pos = arrays.setdefault(id(self.pos), np.empty(self.pos.shape, np.int64))
        smalls = [arrays.setdefault(id(d), np.empty(d.shape, d.dtype)) for _, d in self.pairs]
        parts = [arrays[id(b)] for b in self.parts]
        gather_at(parts, pos, [arrays[id(s)] for s, _ in self.pairs], smalls)

    def line(self, ns: dict, j: int) -> str:
        ns["_gather_at"] = gather_at
        parts = ", ".join(b.name for b in self.parts)
        srcs = ", ".join(s.name for s, _ in self.pairs)
        smalls = ", ".join(d.name for _, d in self.pairs)
        return f"    _gather_at(({parts},), {self.pos.name}, ({srcs},), ({smalls},))"


@dataclass(eq=False)
class PutStep:
    """Each flat `dst` at `pos` <- `small`: the fix-up loop's results in place."""

    pos: Buffer
    pairs: list[tuple[Buffer, Buffer]]  # (small, dst)
    loop: FusedLoop  # the fix-up loop that computes the `small` values (it runs serial)

    @property
    def reads(self) -> list[Buffer]:
        return [self.pos] + [small for small, _ in self.pairs]

    @property
    def writes(self) -> list[Buffer]:
        return [dst for _, dst in self.pairs]

    def describe(self) -> str:
        pairs = ", ".join(f"{s.name}->{d.name}" for s, d in self.pairs)
        return f"put at {self.pos.name}: {pairs}"

    def evaluate(self, arrays: dict) -> None:
        put_at(
            arrays[id(self.pos)],
            [arrays[id(s)] for s, _ in self.pairs],
            [arrays[id(d)] for _, d in self.pairs],
        )

    def line(self, ns: dict, j: int) -> str:
        ns["_put_at"] = put_at
        smalls = ", ".join(s.name for s, _ in self.pairs)
        dsts = ", ".join(d.name for _, d in self.pairs)
        return f"    _put_at({self.pos.name}, ({smalls},), ({dsts},))"


HostStep = ScatterStep | ResetStep | GatherStep | PutStep


def zeroed(plan: Plan) -> list[Buffer]:
    """The buffers of `plan` that must hold zeros at the start of every call."""
    return [s.out for s in plan.steps if isinstance(s, ScatterStep)]


def fixups(plan: Plan) -> set[int]:
    """The ids of the fix-up loops of `plan`: a few elements each, run serial."""
    return {id(s.loop) for s in plan.steps if isinstance(s, PutStep)}


# ----------------------------------------------------------------------------------------------
# What the steps run


def scatter_into(v: np.ndarray, idx: np.ndarray, out: np.ndarray, positions: np.ndarray) -> None:
    n = out.shape[0]
    flat = np.asarray(idx).reshape(-1)
    if flat.size and (flat.min() < -n or flat.max() >= n):
        # NumPy's IndexError, raised before anything is written (out stays all zeros)
        P.scatter_add_p.impl(v, idx, 0, (n,))
    np.add(flat, n, out=positions, where=flat < 0)
    np.copyto(positions, flat, where=flat >= 0)
    _add_at(np.ascontiguousarray(v).reshape(-1), positions, out)


def reset(out: np.ndarray, positions: np.ndarray) -> None:
    out[positions] = 0


def gather_at(parts, pos, srcs, smalls) -> None:
    if len(parts) > 1:
        np.concatenate(parts, out=pos)
    take = _loops()["take"]
    for src, small in zip(srcs, smalls, strict=True):
        take(src.reshape(-1), pos, small)  # half of np.take's time (measured, 7 x 30,000)


def put_at(pos, smalls, dsts) -> None:
    for small, dst in zip(smalls, dsts, strict=True):
        np.put(dst.reshape(-1), pos, small)  # dst is the program's own: reshape is a view


def _add_at(v: np.ndarray, positions: np.ndarray, out: np.ndarray) -> None:
    """out[positions[i]] += v[i] in order of i: the host kernel's scatter-add loop itself (the
    order of np.bincount too), so the sums are the same."""
    from ..base import host_kernels  # Numba, on first use

    host_kernels.add_at(v, positions, out)


_LOOPS: dict = {}


def _loops() -> dict:
    """The compiled loops of the steps, made on first use (they need Numba)."""
    if not _LOOPS:
        from numba import njit

        @njit(cache=True, nogil=True)
        def take(src, positions, out):
            for i in range(positions.shape[0]):
                out[i] = src[positions[i]]

        _LOOPS.update(take=take)
    return _LOOPS


# ----------------------------------------------------------------------------------------------
# The pass


def scatter_in_place(plan: Plan) -> Plan:
    """`plan` with its sparse scatter-adds written into kept zeros, and the elementwise loops
    that read them split into a loop that skips them and a fix-up over the written positions."""
    outputs = {id(b) for b in plan.outputs}
    views: dict[int, list[Buffer]] = {}  # buffer -> the views taken of it (and of those)
    for step in plan.steps:
        if isinstance(step, ViewStep):
            views.setdefault(id(step.src), []).append(step.out)
    producers: dict[int, int] = {}
    for step in plan.steps:
        for b in step.writes:
            producers[id(b)] = producers.get(id(b), 0) + 1

    def aliases(b: Buffer) -> list[Buffer]:
        out, todo = [], [b]
        while todo:
            x = todo.pop()
            out.append(x)
            todo += views.get(id(x), [])
        return out

    new_buffers: list[Buffer] = []
    steps: list = []
    sparse: dict[int, ScatterStep] = {}
    for step in plan.steps:
        if isinstance(step, EvalStep) and _eligible_scatter(step, outputs, producers, aliases):
            v, idx = step.args
            positions = Buffer(
                f"{step.out.name}_at", (int(np.prod(idx.shape, dtype=np.int64)),), np.int64, "temp"
            )
            new_buffers.append(positions)
            scatter = ScatterStep(step.out, v, idx, positions, step.node)
            sparse[id(step.out)] = scatter
            steps.append(scatter)
        else:
            steps.append(step)
    if not sparse:
        return plan

    split_steps: list = []
    for step in steps:
        parts = split_loop(step, sparse) if isinstance(step, FusedLoop) and SPLIT_LOOPS else None
        if parts is None:
            split_steps.append(step)
        else:
            made, buffers = parts
            split_steps += made
            new_buffers += buffers

    # zeros back after the last step that reads the scattered buffer or a view of it
    resets: dict[int, list[ResetStep]] = {}
    for scatter in sparse.values():
        names = {id(b) for b in aliases(scatter.out)}
        last = max(
            j
            for j, s in enumerate(split_steps)
            if s is scatter or any(id(b) in names for b in s.reads)
        )
        resets.setdefault(last, []).append(ResetStep(scatter.out, scatter.positions))
    final = []
    for j, s in enumerate(split_steps):
        final.append(s)
        final += resets.get(j, [])
    return Plan(plan.graph, list(plan.buffers) + new_buffers, plan.inputs, plan.outputs, final)


def _eligible_scatter(step: EvalStep, outputs, producers, aliases) -> bool:
    node = step.node
    if node.prim is not P.scatter_add_p or node.params["axis"] != 0 or len(step.args) != 2:
        return False
    out = step.out
    v, idx = step.args
    if out.role != "temp" or out.ndim != 1 or producers.get(id(out)) != 1:
        return False
    if np.dtype(out.dtype) != np.float64 or np.dtype(v.dtype) != np.float64:
        return False
    if np.dtype(idx.dtype).kind not in "iu" or any(id(b) in outputs for b in aliases(out)):
        return False
    m = int(np.prod(idx.shape, dtype=np.int64))
    return m > 0 and out.shape[0] >= MIN_SPARSITY * m


def split_loop(loop: FusedLoop, sparse: dict[int, ScatterStep]):
    """(steps, new buffers) that compute `loop` skipping the scattered buffers it reads, or None
    when the loop does not qualify (see the module docstring)."""
    if not loop.shape or loop.reductions or loop.scans:
        return None
    own = identity_index(len(loop.shape))
    size = int(np.prod(loop.shape, dtype=np.int64))
    read: list[Buffer] = []
    scattered: list[ScatterStep] = []
    for op in loop.ops:
        if isinstance(op, (Clamp, Inside, Equal)):
            return None
        if isinstance(op, Load):
            b = op.buffer
            if b.shape == () and op.index == ():
                continue
            if op.index != own or b.shape != loop.shape:
                return None
            if all(x is not b for x in read):
                read.append(b)
            hit = sparse.get(id(b))
            # scatters through the same indices write the same positions: fixed up once
            if hit is not None and all(s.idx is not hit.idx for s in scattered):
                scattered.append(hit)
    if not scattered:
        return None
    for st in loop.stores:
        if (
            st.index != own
            or st.buffer.shape != loop.shape
            or st.buffer.role
            not in (
                "temp",
                "output",
            )
        ):
            return None
    m = sum(s.positions.shape[0] for s in scattered)
    stored_buffers = len({id(st.buffer) for st in loop.stores})
    skipped = len({id(b) for b in read if id(b) in sparse})
    if skipped * size < RANDOM_ACCESS_COST * (len(read) + stored_buffers) * m:
        return None

    made: list[Buffer] = []
    if len(scattered) == 1:
        pos = scattered[0].positions
    else:
        pos = Buffer(f"_{loop.name}_at", (m,), np.int64, "temp")
        made.append(pos)
    small: dict[int, Buffer] = {}
    for k, b in enumerate(read):
        small[id(b)] = Buffer(f"_{loop.name}_g{k}", (m,), b.dtype, "temp")
    stored: dict[int, Buffer] = {}
    outs: list[Buffer] = []
    for st in loop.stores:
        if id(st.buffer) not in stored:
            stored[id(st.buffer)] = Buffer(
                f"_{loop.name}_p{len(outs)}", (m,), st.buffer.dtype, "temp"
            )
            outs.append(st.buffer)
    made += list(small.values()) + list(stored.values())

    # the big loop: the scattered buffers' loads are zeros
    dense_ops = []
    for op in loop.ops:
        if isinstance(op, Load) and id(op.buffer) in sparse:
            dense_ops.append(Literal(op.id, np.zeros((), op.buffer.dtype), 0))
        else:
            dense_ops.append(op)
    dense = replace(loop, ops=dense_ops)

    # the fix-up loop: the same ops over the gathered values, one element per position
    one = identity_index(1)
    fix_ops = []
    for op in loop.ops:
        depth = min(op.depth, 1)
        if isinstance(op, Load) and op.index == own:
            fix_ops.append(replace(op, buffer=small[id(op.buffer)], index=one, depth=depth))
        else:
            fix_ops.append(replace(op, depth=depth))
    fix_stores = [Store(st.value, stored[id(st.buffer)], one) for st in loop.stores]
    fix = FusedLoop(f"{loop.name}f", (m,), fix_ops, fix_stores, [], list(loop.roots))

    gather = GatherStep([s.positions for s in scattered], pos, [(b, small[id(b)]) for b in read])
    put = PutStep(pos, [(stored[id(b)], b) for b in outs], fix)
    return [gather, dense, fix, put], made
