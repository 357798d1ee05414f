"""A fused loop's kernel module for `numba.njit`, printed from the loop IR.

The CPU's lowering pass (`cpu/lowering.py`) writes a fused loop as a loop nest over chunks of
axis 0; `CpuPrinter` prints it with the CPU's renderings, and `render_loop` wraps it in a module
(imports, options, the `kernel` function and its arguments). Kernels take sizes, slice offsets
and most constants as run-time arguments (two small arrays, `I` for integers and `F` for floats),
so a new shape with the same structure reuses the compiled kernel; only constants that come from
the code (small integers, halves, infinities) are written into the source.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass

import numpy as np

from .. import fusion
from ..fusion import render
from .. import primitives as P
from ..fusion import Compute, FusedLoop, loop_ir
from . import lowering as lower_cpu
from ..fusion.steps import Buffer
from ..fusion.render import Lines, cast, render_math, render_node


class LayoutRefused(Exception):
    """A native kernel was given an array of a layout it was not compiled for (strided,
    unaligned): the program that ran it copies its inputs and runs again (cpu/program.py)."""


@dataclass
class KernelSource:
    module: str  # the module's text, as written to the cache (no per-graph comments)
    readable: str  # the same kernel with a comment per node
    arrays: list[Buffer]  # the kernel's array arguments, in order
    ints: list[int]  # the values of I (sizes, chunks, offsets, integer constants)
    int_slots: dict[str, int]  # which entry of I is the number of chunks ("nch")
    floats: list[float]  # the values of F
    uses_vmath: bool
    cost: int  # inline cost of one iteration
    params: list[str]  # the kernel's arguments after the arrays
    partials: list  # (name, shape in symbols, dtype) of its partial-results arguments


def _simple_number(value: np.ndarray) -> bool:
    """Constants written into the source: the ones that come from the code rather than from the
    shapes (small integers, halves, infinities). The rest are run-time arguments, so that `x / n`
    compiles once for every n."""
    v = value.item()
    if isinstance(v, (bool, complex)):  # complex constants are few: written in, as they are
        return True
    if isinstance(v, int):
        return abs(v) <= 16 or value.dtype == np.uint64
    if not np.isfinite(v):
        return True
    return (float(v).is_integer() and abs(v) <= 8) or abs(v) == 0.5


# The innermost loop of a loop nest that calls a vmath function is written as a function of its
# own, called once per row, when its rows have at least this many elements. Inside a loop nest,
# LLVM reloads the polynomial's constants in every round of the inner loop (62 instructions a
# round for tanh, 25 of them constant loads under Numba's large code model); as the only loop of
# its function it keeps them in registers (36 instructions). Measured on rows of 512, the
# kernels took 0.67-1.05x their time inlined (tanh 0.76x, sin 0.67x, sigmoid 0.74x); on rows of
# 64 the call per row ate the gain for some (a row sum of log1p: 1.28x), hence the bound
# (benchmarks/RESULTS.md, "Sixth pass"). A row that only stores (no running sum or scan, so the
# call returns nothing) gains from rows of 64: tanh(x + b) over rows of 64 took 2.3-2.7 ns an
# element against 3.4-3.5 inlined, where a row that also sums did not (2.7-2.8 either way;
# "Ninth pass").
OUTLINE_MIN_ROW = 128
OUTLINE_MIN_STORING_ROW = 64
_MODULE_NAMES = frozenset({"cmath", "math", "np", "_vm"}) | frozenset(dir(builtins))


class CpuPrinter(render.Printer):
    """Prints a CPU kernel of the loop IR (`cpu/lowering.py`) for `numba.njit`.

    What it spells its own way: buffers are the arguments `b<k>`; sizes, slice offsets and
    constants that do not come from the code are run-time arguments (`I` for integers, `F` for
    floats), so that one compiled kernel serves every shape with the same structure; math calls
    may be `tracegrad.vmath`'s; a reduction's step calls a helper compiled with fastmath
    reassociation (`_r<helper>`)."""

    def __init__(self, kernel: loop_ir.Kernel, shape, mode: str, names: dict, bake_sizes: bool):
        super().__init__(render.Notes(names))
        self.kernel, self.shape, self.mode = kernel, tuple(shape), mode
        self.r = len(self.shape)
        self.ints: list[int] = list(self.shape)
        self.floats: list[float] = []
        self.helpers: set[str] = set()
        self.uses_vmath = False
        self.rows: list[tuple[loop_ir.Call, Lines]] = []  # outlined inner loops, printed
        self.arrays = [a for a in kernel.args if not isinstance(a, str)]
        self.arg = {id(b): f"b{k}" for k, b in enumerate(self.arrays)}
        self.header = Lines()
        if self.r:
            sizes = ", ".join(kernel.info["sizes"])
            if bake_sizes:  # a specialisation: this kernel serves these sizes only
                values = ", ".join(str(d) for d in self.shape)
                note = f"iteration space {list(self.shape)} (sizes written in)"
            else:
                values = ", ".join(f"I[{a}]" for a in range(self.r))
                note = f"iteration space {list(self.shape)} (sizes are arguments)"
            self.header.add(1, f"{sizes} = {values}", note)
        self.nch_slot = None
        if self.r:
            self.nch_slot = self._int(1)
            self.header.add(1, f"nch = I[{self.nch_slot}]", "chunks of axis 0 (one per task)")

    def _int(self, value: int) -> int:
        self.ints.append(int(value))
        return len(self.ints) - 1

    def size(self, n: int, prefix: str) -> str:
        slot = self._int(n)
        name = f"{prefix}{slot}"
        self.header.add(1, f"{name} = I[{slot}]")
        return name

    # ---- the renderings that differ
    def array(self, a) -> str:
        return a if isinstance(a, str) else self.arg[id(a)]

    def subscript(self, array, index) -> str:
        """A loop's own index (`i<a>`, stride 1, no offset) is written unsigned: it is never
        negative, and a signed one makes Numba wrap negative indices around, a select that
        keeps LLVM from vectorising the loop (it gathered and scattered instead: a sine over
        10^6 elements took 5.0 ms against 1.1 ms with the index unsigned)."""
        if not index:
            return super().subscript(array, index)
        parts = [f"np.uint64({ix.var})" if _own_axis(ix) else self.index(ix) for ix in index]
        return f"{self.array(array)}[{', '.join(parts)}]"

    def index(self, ix) -> str:
        """The stride is written in; a non-zero offset is an argument (a literal in a scalar
        loop, where it is a position in an assembled vector or a pool)."""
        if isinstance(ix, str):
            return ix
        if ix.var is None:
            if not self.r:
                return str(ix.offset)
            return "0" if ix.offset == 0 else self.size(ix.offset, "o")
        var = ix.var
        term = var if ix.stride == 1 else (f"-{var}" if ix.stride == -1 else f"{ix.stride} * {var}")
        if ix.offset == 0:
            return term
        return f"{term} + {self.size(ix.offset, 'o')}"

    def combine(self, c) -> str:
        if not c.reassociate:
            return super().combine(c)
        monoid = P.MONOIDS[c.op]
        a, b = self.expr(c.a), self.expr(c.b)
        # A reassociable step on integers is written inline; any other calls its helper
        # (`_r<helper>`, with fastmath reassociation for floats).
        if monoid.reassociate and np.dtype(c.dtype).kind != "f":
            return render.combine_text(c.op, a, b)
        fn = f"_r{monoid.helper}"
        self.helpers.add(fn)
        return f"{fn}({a}, {b})"

    def let_literal(self, op):
        if _simple_number(op.value):
            return super().let_literal(op)
        dtype = op.value.dtype
        if dtype.kind == "f":
            self.floats.append(float(op.value))
            return (
                f"{op.id} = {cast(dtype, f'F[{len(self.floats) - 1}]')}",
                f"constant {op.value.item()!r}",
            )
        slot = self._int(int(op.value))
        return f"{op.id} = {cast(dtype, f'I[{slot}]')}", f"constant {op.value.item()!r}"

    def compute(self, op) -> str:
        text = render_node(op.node, op.args, self.mode)
        if "_vm." in text:
            self.uses_vmath = True
        return text

    def let_pair(self, s):
        self.uses_vmath = True
        fn = render_math(s.call, s.dtype, self.mode)
        names = f"{s.first.node.prim.name} and {s.second.node.prim.name}"
        return (
            f"{s.first.id}, {s.second.id} = {fn}({s.arg})",
            f"{names} of {s.arg}: {self.notes.node(s.where.node)}",
        )

    def write(self) -> Lines:
        for call, loop in self.kernel.info.get("rows", []):
            # The row function's arguments are the names its loop reads from outside, known once
            # it is printed (an offset's name is the slot of I it is read from).
            text = Lines()
            self.statements([loop], 1, text)
            reads, writes = _free_names(text.render(False))
            call.args, call.results = reads, [n for n in reads if n in writes]
            self.rows.append((call, text))
        body = Lines()
        self.statements(self.kernel.body, 1, body)
        return body


def _own_axis(ix) -> bool:
    """Whether an index is a loop's own variable over an axis, as it is."""
    return (
        not isinstance(ix, str)
        and ix.var is not None
        and ix.stride == 1
        and ix.offset == 0
        and ix.var[:1] == "i"
        and ix.var[1:].isdigit()
    )


def _free_names(source: str) -> tuple[list[str], set[str]]:
    """The names a loop's source reads before assigning them (in order of first use), and the
    names it assigns; module names (math, np, _vm, the reduction helpers) are not counted."""
    reads: list[str] = []
    assigned: set[str] = set()
    (loop,) = ast.parse(source.strip()).body
    assigned.add(loop.target.id)

    def read(node) -> None:
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                known = n.id in assigned or n.id in reads
                if not known and n.id not in _MODULE_NAMES and not n.id.startswith("_r"):
                    reads.append(n.id)

    read(loop.iter)
    for stmt in loop.body:
        if isinstance(stmt, ast.Assign):
            read(stmt.value)
            for target in stmt.targets:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                        assigned.add(n.id)
                    elif isinstance(n, ast.Subscript):
                        read(n)
        elif isinstance(stmt, ast.AugAssign):
            read(stmt.value)
            read(stmt.target)
            if isinstance(stmt.target, ast.Name):
                assigned.add(stmt.target.id)
        else:
            raise NotImplementedError(f"an inner loop statement {ast.dump(stmt)}")
    return reads, assigned


def outline_rows(kernel: loop_ir.Kernel, shape: tuple, mode: str) -> None:
    """A CPU pass over the loop IR: the innermost loop of a loop nest, over rows of at least
    `OUTLINE_MIN_ROW` elements (`OUTLINE_MIN_STORING_ROW` for a row with no running value), that
    calls a vmath function becomes a call of a function of its own (`_row<k>`, see
    OUTLINE_MIN_ROW); so does an innermost loop over axis 0 inside the loop over the chunks (a
    one-axis kernel with partial results), of any length: it is called once per chunk. The
    calls' arguments and results are filled in when the printer has written the functions
    (`CpuPrinter.write`); the functions are in `kernel.info["rows"]` as (call, loop) pairs."""
    rows: list[tuple[loop_ir.Call, loop_ir.For]] = []

    def calls_vmath(s) -> bool:
        if isinstance(s, loop_ir.LetPair):
            return True  # pair_math makes a pair only where vmath has the call
        op = s.op if isinstance(s, loop_ir.Let) else None
        return isinstance(op, Compute) and "_vm." in render_node(op.node, op.args, mode)

    def wanted(s) -> bool:
        if not isinstance(s, loop_ir.For) or s.var[:1] != "i" or not s.var[1:].isdigit():
            return False
        axis = int(s.var[1:])
        inner = list(loop_ir.walk(s.body))
        if axis == 0:
            # the loop over a chunk's rows, inside the loop over the chunks of a kernel with
            # partial results (without them the rows are the kernel's outermost loop)
            if not kernel.info["partials"]:
                return False
        else:
            # a running value (a reduction's s<k>, a scan's acc<k>) is a name the loop assigns
            runs = any(isinstance(t, loop_ir.Assign) and isinstance(t.target, str) for t in inner)
            least = OUTLINE_MIN_ROW if runs else OUTLINE_MIN_STORING_ROW
            if axis >= len(shape) or shape[axis] < least:
                return False
        if any(isinstance(t, (loop_ir.For, loop_ir.While)) for t in inner):
            return False
        return any(calls_vmath(t) for t in inner)

    for body in list(loop_ir.blocks(kernel.body)):
        out: list = []
        for s in body:
            if wanted(s):
                call = loop_ir.Call(f"_row{len(rows)}", [])
                rows.append((call, s))
                note = f"the loop over axis {s.var[1:]} as a function of its own (OUTLINE_MIN_ROW)"
                out += [loop_ir.Note(note), call]
            else:
                out.append(s)
        body[:] = out
    if rows:
        kernel.info["rows"] = rows


def pair_math(kernel: loop_ir.Kernel, types: dict, mode: str) -> None:
    """A CPU pass over the loop IR: two values computed by one call (sin and cos of the same
    argument: the primitive's `pairing`), where the math library has that call, become one
    `LetPair` in the place of whichever of the two comes first."""
    for body in list(loop_ir.blocks(kernel.body)):
        lets = [s.op for s in body if isinstance(s, loop_ir.Let) and isinstance(s.op, Compute)]
        by_arg: dict[tuple[str, str], Compute] = {}
        for op in lets:
            if len(op.args) == 1:
                by_arg.setdefault((op.node.prim.name, op.args[0]), op)
        pairs: dict[str, tuple[Compute, Compute]] = {}
        for op in lets:
            pairing = op.node.prim.pairing
            if pairing is None or by_arg.get((op.node.prim.name, op.args[0])) is not op:
                continue
            partner = by_arg.get((pairing.partner, op.args[0]))
            if partner is None:
                continue
            if render_math(pairing.call, types[op.args[0]], mode).startswith("_vm."):
                pairs[op.id] = pairs[partner.id] = (op, partner)
        if not pairs:
            continue
        out, done = [], set()
        for s in body:
            pair = pairs.get(s.op.id) if isinstance(s, loop_ir.Let) else None
            if pair is None:
                out.append(s)
            elif id(pair) not in done:
                done.add(id(pair))
                first, second = pair
                call = first.node.prim.pairing.call
                arg = first.args[0]
                out.append(loop_ir.LetPair(first, second, arg, call, types[arg], s.op))
        body[:] = out


def render_loop(
    loop: FusedLoop, mode: str, names: dict, salt: str, bake_sizes: bool = False
) -> KernelSource:
    """The kernel module for one fused loop.

    `kernel(arrays..., [I], [F], [partials..., first, last, finish])`: a loop nest over the axis-0
    chunks first..last-1 of the iteration space (of `I[nch]` chunks); with `finish`, the per-chunk partial
    results of the reductions are then combined. A program calls it once for all the chunks, or
    from several threads with a share of the chunks each (the kernel releases the GIL)."""
    kernel = lower_cpu.lower(loop, render.Notes(names))
    pair_math(kernel, loop.op_types(), mode)
    outline_rows(kernel, loop.shape, mode)
    w = CpuPrinter(kernel, loop.shape, mode, names, bake_sizes)
    lines = w.write()
    partials = kernel.info["partials"]
    params = (["I"] if w.ints else []) + (
        ["F"] if w.floats else []
    )  # fewer arguments, faster calls
    if loop.shape:
        params += [name for name, _, _ in partials] + ["first", "last", "finish"]
    args = ", ".join([w.arg[id(b)] for b in w.arrays] + params)

    uses_cmath = any("cmath." in text.render(False) for _, text in w.rows) or (
        "cmath." in lines.render(False)
    )

    def module(comments: bool) -> str:
        parts = [
            "# A tracegrad kernel, generated by tracegrad.codegen_cpu from the fusion plan.",
            f"# salt {salt} (tracegrad, numba and python versions, vmath source, math mode {mode})",
            "import cmath" if uses_cmath else None,
            "import math",
            "",
            "import numpy as np",
            "from numba import njit",
        ]
        if w.uses_vmath:
            parts.append("from tracegrad import vmath as _vm")
        parts += [
            "",
            '_OPTS = dict(error_model="numpy", nogil=True, cache=globals().get("_TG_CACHE", False))',
            "",
        ]
        if w.helpers:
            parts.append(f"from tracegrad.codegen_cpu import {', '.join(sorted(w.helpers))}")
        parts.append("")
        for call, text in w.rows:
            parts.append("@njit(**_OPTS)")
            parts.append(f"def {call.function}({', '.join(call.args)}):")
            parts.append(text.render(comments))
            if call.results:
                parts.append(f"    return {', '.join(call.results)},")
            parts += ["", ""]
        parts.append("@njit(**_OPTS)")
        parts.append(f"def kernel({args}):")
        if comments:
            for k, b in enumerate(w.arrays):
                parts.append(f"    # b{k}: {w.notes.buffer(b)}")
        parts.append(w.header.render(comments))
        parts.append(lines.render(comments))
        return "\n".join(p for p in parts if p is not None) + "\n"

    cost = sum(fusion.node_cost(op.node) for op in loop.ops if isinstance(op, Compute))
    return KernelSource(
        module(False),
        module(True),
        w.arrays,
        w.ints,
        {"nch": w.nch_slot},
        w.floats,
        w.uses_vmath,
        cost,
        params,
        partials,
    )


# ----------------------------------------------------------------------------------------------
# Programs
