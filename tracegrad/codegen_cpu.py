"""Fused CPU kernels: Python source for `numba.njit`, written from the fusion plan.

Each `FusedLoop` of the plan becomes one kernel module (see `tracegrad.runtime.cache`); a program runs its
steps in order from a small generated Python driver, which allocates result arrays per call and
reuses scratch arrays across calls. The readable source of a program (with a comment per IR node
naming its values and the user's line) is what `tg.make_kernels` returns and
`TRACEGRAD_DUMP_KERNELS=<dir>` writes.

A kernel loops over chunks of axis 0 of its iteration space. Small loops run all chunks in one
call; a loop with enough work (`PARALLEL_WORK`) has its chunks shared by `numba.get_num_threads()`
threads, each calling the same compiled kernel (which releases the GIL), and a last call combines
the chunks' partial reductions. This is instead of `prange`: a parallel=True kernel took 1.9 s to
compile against 0.4 s for the serial one (W1's gradient), which is most of a cold first call, and
its OpenMP threads keep spinning after each loop, next to BLAS's. Programs with matrix products run
their loops on one thread (`BLAS_NEIGHBOURS`): OpenBLAS's threads spin after each product.

Kernels take sizes, slice offsets and most constants as run-time arguments (two small arrays, `I`
for integers and `F` for floats), so a new shape with the same structure reuses the compiled
kernel; only constants that come from the code (small integers, halves, infinities) are written
into the source. Sums and products of float32 values accumulate in float64.

Math functions, casts, literals, comments and the line writer are `tracegrad.render`'s, shared
with the CUDA generator: in the "vector" math mode (the default) the primitives that
`tracegrad.vmath` implements call its vectorisable versions, everything else (and the "libm"
mode, TRACEGRAD_MATH=libm) calls Python's `math` module, which Numba maps to libm.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import threading
from dataclasses import dataclass
from collections.abc import Callable

import numpy as np

from . import backends, cpu_loops, fusion, ir, passes, render
from .fusion import donation, loop_ir, lower_cpu, scalars
from .runtime import blas_threads, cache, progress
from . import primitives as P
from .fusion import (
    Buffer,
    Compute,
    EvalStep,
    FusedLoop,
    MatmulStep,
    Plan,
    ViewStep,
)
from .ir import Graph, Node
from .render import Lines, cast, math_mode, render_math, render_node

log = logging.getLogger("tracegrad")

# A loop runs on all cores when (elements x inline cost) reaches this much work.
PARALLEL_WORK = 1 << 17
CHUNKS_PER_THREAD = 4
# "serial": loops of programs that call BLAS run on one core; "parallel": as any other loop.
BLAS_NEIGHBOURS = "serial"
# Opt-in specialisation: sizes written into the kernel source (a compile per shape).
BAKE_SIZES = False

SUPPORTED_DTYPES = render.SUPPORTED_DTYPES


def supports(node: Node) -> bool:
    """Whether a kernel (or a matmul step) can compute this node."""
    return render.supports(node)


# ----------------------------------------------------------------------------------------------
# One loop -> one kernel module


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


def _simple_number(value: np.ndarray) -> bool:
    """Constants written into the source: the ones that come from the code rather than from the
    shapes (small integers, halves, infinities). The rest are run-time arguments, so that `x / n`
    compiles once for every n."""
    v = value.item()
    if isinstance(v, bool):
        return True
    if isinstance(v, int):
        return abs(v) <= 16 or value.dtype == np.uint64
    if not np.isfinite(v):
        return True
    return (float(v).is_integer() and abs(v) <= 8) or abs(v) == 0.5


class CpuPrinter(render.Printer):
    """Prints a CPU kernel of the loop IR (`fusion.lower_cpu`) for `numba.njit`.

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
        body = Lines()
        self.statements(self.kernel.body, 1, body)
        return body


def pair_math(kernel: loop_ir.Kernel, types: dict, mode: str) -> None:
    """A CPU pass over the loop IR: two values computed by one call (sin and cos of the same
    argument: the primitive's `pairing`), where the math library has that call, become one
    `LetPair` in the place of whichever of the two comes first."""
    bodies = [kernel.body] + [s.body for s in loop_ir.walk(kernel.body) if hasattr(s, "body")]
    for body in bodies:
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
    w = CpuPrinter(kernel, loop.shape, mode, names, bake_sizes)
    lines = w.write()
    partials = kernel.info["partials"]
    params = (["I"] if w.ints else []) + (
        ["F"] if w.floats else []
    )  # fewer arguments, faster calls
    if loop.shape:
        params += [name for name, _, _ in partials] + ["first", "last", "finish"]
    args = ", ".join([w.arg[id(b)] for b in w.arrays] + params)

    def module(comments: bool) -> str:
        parts = [
            "# A tracegrad kernel, generated by tracegrad.codegen_cpu from the fusion plan.",
            f"# salt {salt} (tracegrad, numba and python versions, vmath source, math mode {mode})",
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


def _salt(mode: str) -> str:
    vm = render._vmath()
    parts = ["mode=" + mode]
    if vm is not None and mode == "vector":
        folder = os.path.dirname(vm.__file__)
        files = [os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".py")]
        parts.append("vmath=" + _vmath_hash(tuple(files)))
    parts.append("codegen=" + _vmath_hash((__file__, render.__file__)))
    return cache.salt(tuple(parts))


@functools.lru_cache(maxsize=8)
def _vmath_hash(files: tuple[str, ...]) -> str:
    return cache.source_hash(list(files))


def _threads() -> int:
    import numba

    return numba.get_num_threads()


@dataclass
class _KernelCall:
    loop: FusedLoop
    source: KernelSource
    module: object
    parallel: bool
    ints: np.ndarray
    floats: np.ndarray
    partials: list[Buffer]  # scratch for per-chunk partial results
    threads: int


_pool_lock = threading.Lock()
_pools: dict[int, object] = {}
if hasattr(os, "register_at_fork"):  # a forked child has none of its parent's pool threads
    os.register_at_fork(after_in_child=_pools.clear)


def _thread_pool(workers: int):
    from concurrent.futures import ThreadPoolExecutor

    with _pool_lock:
        if workers not in _pools:
            _pools[workers] = ThreadPoolExecutor(workers, thread_name_prefix="tracegrad")
        return _pools[workers]


def _in_parallel(kernel, args: tuple, nch: int, threads: int) -> None:
    """Run a kernel's `nch` chunks on `threads` threads (this one and a pool), then combine.

    Chunks are handed out one by one, so a thread slowed down by another process does less."""
    next_chunk = itertools.count().__next__

    def work():
        while True:
            c = next_chunk()
            if c >= nch:
                return
            kernel(*args, c, c + 1, 0)

    pool = _thread_pool(threads - 1)
    futures = [pool.submit(work) for _ in range(threads - 1)]
    try:
        work()
    finally:
        for future in futures:
            future.result()
    kernel(*args, nch, nch, 1)


class CpuProgram:
    """A compiled graph: call it with the input arrays, get the output arrays."""

    def __init__(
        self,
        graph: Graph,
        plan: Plan,
        mode: str,
        names: dict,
        salt: str,
        load: bool = True,
        bake_sizes: bool = False,
    ):
        self.graph, self.plan, self.mode = graph, plan, mode
        self.load = load
        self.calls: dict[int, _KernelCall] = {}
        self.held: list[CpuProgram] = []  # the programs of the graphs its loops hold
        threads = _threads()
        # Next to BLAS calls, parallel loops fight OpenBLAS's spinning threads for the cores
        # (PERF-NOTES): programs with matrix products run their loops serially.
        with_blas = any(isinstance(step, MatmulStep) for step in plan.steps)
        if with_blas and BLAS_NEIGHBOURS == "serial":
            threads = 1
        self.scratch: list[Buffer] = []  # partial results of reductions, per chunk
        for step in plan.steps:
            if not isinstance(step, FusedLoop):
                continue
            src = render_loop(step, mode, names, salt, bake_sizes)
            size = int(np.prod(step.shape, dtype=np.int64)) if step.shape else 1
            parallel = bool(step.shape) and threads > 1 and size * max(1, src.cost) >= PARALLEL_WORK
            # a scan along axis 0 (its last) runs in order: one chunk
            parallel = parallel and not (step.scans and len(step.shape) == 1)
            ints = list(src.ints)
            partials = []
            if step.shape:
                nch = max(1, min(step.shape[0], threads * CHUNKS_PER_THREAD)) if parallel else 1
                ints[src.int_slots["nch"]] = nch
                sizes = {f"n{a}": d for a, d in enumerate(step.shape)} | {"nch": nch}
                for name, dims, dtype in src.partials:
                    buf = Buffer(
                        f"_{step.name}_{name}", tuple(sizes[d] for d in dims), dtype, "temp"
                    )
                    self.scratch.append(buf)
                    partials.append(buf)
            module = cache.load_module(src.module) if load else None
            self.calls[id(step)] = _KernelCall(
                step,
                src,
                module,
                parallel,
                np.array(ints, np.int64),
                np.array(src.floats, np.float64),
                partials,
                threads if parallel else 1,
            )
        progress.check_size(sum(len(c.source.module) for c in self.calls.values()), graph, "cpu")
        progress.kernels_planned(len(self.calls))
        self.driver_source, self._namespace, self._temps = self._driver()
        # results allocated by the driver (or a matmul) on every call: no caller must copy them
        fresh = {id(b) for b in plan.buffers if b.role == "output" and not self._from_eval(b)}
        self.fresh_outputs = tuple(
            id(b) in fresh and plan.outputs.count(b) == 1 for b in plan.outputs
        )
        self._lock = threading.Lock()
        if load:
            self._bind()
            self._run = self._first_call

    # ---- the driver
    def _driver(self):
        plan = self.plan
        ns: dict = {
            "_empty": np.empty,
            "_matmul": np.matmul,
            "_asarray": np.asarray,
            "_in_parallel": _in_parallel,
        }
        temps = [b for b in plan.buffers if b.role == "temp" and self._allocated_by_us(b)]
        temps += self.scratch
        lines = [
            f"def _run(args, {', '.join(b.name for b in temps)}):" if temps else "def _run(args):"
        ]
        names = [b.name for b in plan.inputs]
        if names:
            lines.append(f"    {', '.join(names)}{',' if len(names) == 1 else ''} = args")
        for b in plan.buffers:
            if b.role == "const":
                ns[b.name] = b.value
        for b in plan.buffers:
            if b.role == "output" and self._allocated_by_us(b):
                ns[f"_dt_{b.name}"] = np.dtype(b.dtype)
                lines.append(f"    {b.name} = _empty({tuple(b.shape)!r}, _dt_{b.name})")
        for j, step in enumerate(plan.steps):
            if isinstance(step, FusedLoop):
                call = self.calls[id(step)]
                ns[f"_I{j}"], ns[f"_F{j}"] = call.ints, call.floats
                ns[f"_{step.name}"] = None  # bound to the kernel in _bind
                named = {"I": f"_I{j}", "F": f"_F{j}"} | {
                    p.name.split("_")[-1]: p.name for p in call.partials
                }
                params = [
                    named[p] for p in call.source.params if p not in ("first", "last", "finish")
                ]
                args = ", ".join([b.name for b in call.source.arrays] + params)
                if not step.shape:
                    lines.append(f"    _{step.name}({args})")
                elif call.parallel:
                    nch = int(call.ints[call.source.int_slots["nch"]])
                    lines.append(
                        f"    _in_parallel(_{step.name}, ({args},), {nch}, {call.threads})"
                    )
                else:
                    lines.append(f"    _{step.name}({args}, 0, 1, 1)")
            elif isinstance(step, MatmulStep):
                mm = "_matmul"
                if _multiply_adds(step) < blas_threads.SMALL_PRODUCT:  # see blas_threads.py
                    mm = "_matmul1"
                    ns["_matmul1"] = blas_threads.single_threaded()
                if step.out.role == "temp":
                    lines.append(f"    {mm}({step.a.name}, {step.b.name}, out={step.out.name})")
                else:
                    lines.append(f"    {step.out.name} = {mm}({step.a.name}, {step.b.name})")
            elif isinstance(step, ViewStep):
                ns[f"_view{j}"] = functools.partial(step.node.prim.impl, **step.node.params)
                lines.append(f"    {step.out.name} = _view{j}({step.src.name})")
            elif isinstance(step, EvalStep):
                ns[f"_eval{j}"] = _evaluator(step.node, self._compile_held)
                ns[f"_dt_{step.out.name}"] = np.dtype(step.out.dtype)
                args = ", ".join(b.name for b in step.args)
                lines.append(
                    f"    {step.out.name} = _asarray(_eval{j}({args}), _dt_{step.out.name})"
                )
        outs = ", ".join(b.name for b in plan.outputs)
        lines.append(f"    return [{outs}]")
        return "\n".join(lines) + "\n", ns, temps

    def scan_driver(self, n_consts: int, n_carry: int, save: bool):
        """This program as the body of a scan, looped inside one compiled function (or None:
        the scan calls the program once per step). See cpu_loops.py."""
        if not self.load:
            return None
        return cpu_loops.scan_driver(self, n_consts, n_carry, save)

    def _compile_held(self, graph: Graph) -> CpuProgram:
        """A graph a node holds (a loop body), optimised and compiled like a program of its own."""
        program = build(passes.optimize(graph), load=self.load)
        self.held.append(program)
        return program

    def _from_eval(self, b: Buffer) -> bool:
        return any(isinstance(step, EvalStep) and step.out is b for step in self.plan.steps)

    def _allocated_by_us(self, b: Buffer) -> bool:
        """Buffers the driver allocates (the others come from a matmul or an evaluation)."""
        for step in self.plan.steps:
            if isinstance(step, EvalStep) and step.out is b:
                return False
            if isinstance(step, MatmulStep) and step.out is b:
                return b.role == "temp"
        return b.role in ("temp", "output")

    def _bind(self) -> None:
        ns = self._namespace
        for step in self.plan.steps:
            if isinstance(step, FusedLoop):
                call = self.calls[id(step)]
                ns[f"_{step.name}"] = progress.timed_first_call(
                    ns,
                    f"_{step.name}",
                    call.module.kernel,
                    f"{step.name} of a {len(self.graph.nodes)}-node program",
                )
        exec(compile(self.driver_source, "<tracegrad driver>", "exec"), ns)
        body = ns["_run"]
        temps = self._temps
        if not temps:
            self._fast = body
            return
        buffers = [np.empty(b.shape, b.dtype) for b in temps]
        lock = self._lock

        def run(args):
            if lock.acquire(False):
                try:
                    return body(args, *buffers)
                finally:
                    lock.release()
            return body(args, *[np.empty(b.shape, b.dtype) for b in temps])  # a concurrent call

        self._fast = run

    def _first_call(self, args):
        try:
            out = self._fast(args)
        except Exception as exc:
            # Numba's cached machine code may be damaged: compile from source and try again. Any
            # other error (a MemoryError, an argument Numba cannot type) is the call's own: it is
            # raised as it is, and the healthy cache entry stays.
            on_disk = any(getattr(c.module, "_TG_CACHE", False) for c in self.calls.values())
            if not (on_disk and _failed_loading_cached_code(exc)):
                raise
            log.warning(
                "tracegrad: Numba could not load a cached kernel's machine code (%s: %s); "
                "compiling it again",
                type(exc).__name__,
                exc,
            )
            for call in self.calls.values():
                call.module = cache.reload_without_compiled(call.module, call.source.module)
            self._bind()
            out = self._fast(args)
        self._run = self._fast
        return out

    def __call__(self, args):
        return self._run(args)

    # ---- showing it
    def source(self) -> str:
        """The readable program: the plan, each kernel with comments, and the driver."""
        parts = [
            f"# tracegrad program for a graph of {len(self.graph.nodes)} nodes "
            f"(math mode {self.mode})",
            "#",
            *("# " + line for line in self.plan.describe().splitlines()),
            "",
        ]
        for step in self.plan.steps:
            if isinstance(step, FusedLoop):
                call = self.calls[id(step)]
                kind = "parallel" if call.parallel else "serial"
                parts.append(
                    f"# ---- kernel {step.name} (runs {kind}; module k_{cache.module_key(call.source.module)})"
                )
                parts.append(call.source.readable)
        parts.append("# ---- driver")
        parts.append(self.driver_source)
        for k, program in enumerate(self.held):
            parts.append(f"# ==== held program {k} (a loop body or branch, run by an _eval step)")
            parts.append(program.source())
        return "\n".join(parts)


def _multiply_adds(step: MatmulStep) -> int:
    """The multiply-adds of a (batched) matrix product: batch x m x k x n."""
    a, b = step.a.shape, step.b.shape
    return int(np.prod(a, dtype=np.int64)) * int(b[-1])


def _failed_loading_cached_code(exc: BaseException) -> bool:
    """Whether `exc` was raised while Numba loaded cached machine code (a damaged disk-cache
    entry), as opposed to while typing, compiling or running a kernel."""
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename.endswith(_NUMBA_CACHING) and code.co_name in _NUMBA_LOADERS:
            return True
        tb = tb.tb_next
    return False


_NUMBA_CACHING = os.path.join("numba", "core", "caching.py")
# the functions of numba.core.caching that read and rebuild a cached overload
_NUMBA_LOADERS = frozenset({"load_overload", "_load_overload", "load", "_load_index", "_load_data"})


def _evaluator(node: Node, compile_held: Callable) -> Callable:
    if node.prim.run_compiled is not None:  # a loop or conditional: its graphs compiled here too
        impl, params = node.prim.run_compiled(node, compile_held), {}
    else:
        impl, params = node.prim.impl, node.params

    def evaluate(*args):
        with np.errstate(all="ignore"):
            return impl(*args, **params)

    return evaluate


def _names(graph: Graph) -> dict:
    return ir._names(graph)


def build(graph: Graph, load: bool = True, bake_sizes: bool | None = None) -> CpuProgram:
    """Plan, write, load (compiling or from the disk cache) and link the kernels of a graph.

    `bake_sizes` (default `BAKE_SIZES`) writes the iteration sizes into the kernels: a
    specialisation (compiled again for every shape) that lets LLVM see the trip counts."""
    mode = math_mode()
    progress.check_graph(graph, "cpu")
    plan = fusion.plan(graph, supports, computed_identity=True)
    plan = donation.donate(scalars.pack_scalars(plan))
    bake = BAKE_SIZES if bake_sizes is None else bake_sizes
    return CpuProgram(graph, plan, mode, _names(graph), _salt(mode), load=load, bake_sizes=bake)


class CpuBackend:
    """Fused Numba kernels on the CPU (see the module docstring)."""

    name = "cpu"

    def available(self) -> tuple[bool, str]:
        return backends.cpu_available()

    def variant(self) -> tuple:
        """Compiled programs depend on the math mode: a change of TRACEGRAD_MATH (or of
        vmath.set_math_mode) recompiles. This runs on every cached call, so it returns what the
        mode is decided from, cheaply, rather than deciding it (backends.cpu_variant)."""
        return backends.cpu_variant()

    def compile(self, graph: Graph) -> CpuProgram:
        return render.dumped(build(graph), "program")


def program_source(graph: Graph) -> str:
    """The readable source of the program the cpu backend makes of an optimised graph."""
    return build(graph, load=False).source()


def program_loop_ir(graph: Graph) -> str:
    """The fused loops of the program the cpu backend makes of an optimised graph, as kernels of
    the loop IR (lowered for the CPU, before printing)."""
    program = build(graph, load=False)
    notes = render.Notes(_names(graph))
    out = []
    for step in program.plan.loops:
        kernel = lower_cpu.lower(step, notes)
        kernel.name = step.name
        pair_math(kernel, step.op_types(), program.mode)
        out.append(loop_ir.text(kernel))
    return "\n\n".join(out) + "\n"


BACKEND = CpuBackend()
