"""A compiled CPU program: the plan's steps run in order from a small generated Python driver.

The driver allocates result arrays per call and reuses scratch arrays across calls. A fused
loop's kernel runs all its chunks in one call when it is small; a loop with enough work
(`PARALLEL_WORK`) has its chunks shared by `numba.get_num_threads()` threads (pool.py), each
calling the same compiled kernel (which releases the GIL), and a last call combines the chunks'
partial reductions. This is instead of `prange`: a parallel=True kernel took 1.9 s to compile
against 0.4 s for the serial one (W1's gradient), which is most of a cold first call, and its
OpenMP threads keep spinning after each loop, next to BLAS's.

Matrix products: a program whose products are all small runs with OpenBLAS on one thread and
shares each product out over the same threads as its loops (products.py). A program with a large
product leaves its products to OpenBLAS's threads and runs its loops on one thread
(`BLAS_NEIGHBOURS`): OpenBLAS's threads spin after each product.

A pooled program of loops, products and transposes does not use the driver at all, except for a
call the compiled run declines: runner.py writes it as one compiled function every thread runs,
with no Python (and no GIL hand-off) between its steps.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import fusion, ir, passes
from ..fusion import limits, render, split
from ..fusion import Buffer, EvalStep, FusedLoop, MatmulStep, Plan, ViewStep
from ..ir import Graph, Node
from ..primitives import draws_in
from ..base import blas_threads, cache, config, progress
from . import donation, loop_bodies, pool, products, runner, scalars, scan_loop, scatters
from .kernels import KernelSource, LayoutRefused, render_loop

log = logging.getLogger("tracegrad")

# A loop runs on all cores when (elements x inline cost) reaches this much work.
PARALLEL_WORK = 1 << 17
CHUNKS_PER_THREAD = 4
# "serial": loops of programs that leave products to OpenBLAS's threads run on one core;
# "parallel": as any other loop.
BLAS_NEIGHBOURS = "serial"
# Whether programs whose products are all small share them out over tracegrad's threads
# (products.py); if not, their products go through a `blas_threads.ThreadChoice`.
POOLED_PRODUCTS = True
# Whether such programs run as one compiled function on all threads (runner.py) rather than
# through the Python driver.
RUNNER = True


def _threads() -> int:
    return pool.threads()


class NativeModule:
    """A kernel compiled through llvmlite (cpu/llvm/), standing where a Numba kernel module
    would: `kernel` takes the same arguments."""

    native = True

    def __init__(self, kernel: Callable):
        self.kernel = kernel


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
        self.pooled = _pooled_products(plan)
        # Next to OpenBLAS's threads, parallel loops fight them for the cores as they spin
        # (PERF-NOTES): programs that leave their products to OpenBLAS run their loops serially.
        with_blas = any(isinstance(step, MatmulStep) for step in plan.steps)
        if with_blas and not self.pooled and BLAS_NEIGHBOURS == "serial":
            threads = 1
        self.scratch: list[Buffer] = []  # partial results of reductions and products, per chunk
        self.splits: dict[int, products.Split] = {}  # how each product is shared out
        for step in plan.steps:
            if isinstance(step, MatmulStep):
                split = (
                    products.plan(step.a.shape, step.b.shape, step.out.dtype, threads)
                    if self.pooled
                    else products.Split("whole")
                )
                self.splits[id(step)] = split
                if split.partials is not None:
                    name = f"_{step.out.name}_parts"
                    self.scratch.append(Buffer(name, split.partials, step.out.dtype, "temp"))
        fixups = scatters.fixups(plan)
        for step in plan.steps:
            if not isinstance(step, FusedLoop):
                continue
            src = render_loop(step, mode, names, salt, bake_sizes)
            size = int(np.prod(step.shape, dtype=np.int64)) if step.shape else 1
            parallel = bool(step.shape) and threads > 1 and size * max(1, src.cost) >= PARALLEL_WORK
            parallel = parallel and id(step) not in fixups
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
            self.calls[id(step)] = _KernelCall(
                step,
                src,
                None,  # loaded below
                parallel,
                np.array(ints, np.int64),
                np.array(src.floats, np.float64),
                partials,
                threads if parallel else 1,
            )
        # a pooled program of loops and products runs as one compiled function (runner.py)
        # (with Numba kernels only: native kernels run on the Python driver)
        numba_kernels = config.cpu_compiler() == "numba" or not load
        self.runner = (
            runner.build(self, threads) if self.pooled and RUNNER and numba_kernels else None
        )
        if load:
            self._load_kernels(mode, names)
        if self.runner is not None:
            for name, (shape, dtype) in self.runner.scratch.items():
                self.scratch.append(Buffer(name, shape, dtype, "temp"))
        limits.check_size(sum(len(c.source.module) for c in self.calls.values()), graph, "cpu")
        progress.kernels_planned(len(self.calls))
        # a program that leaves its small products to OpenBLAS chooses their threads by timing
        self.blas = None if self.pooled else blas_threads.thread_choice()
        self.blas_used = False
        self.driver_source, self._namespace, self._temps = self._driver()
        # results allocated by the driver (or a matmul) on every call: no caller must copy them
        fresh = {id(b) for b in plan.buffers if b.role == "output" and not self._from_eval(b)}
        made = {id(s.out): s for s in plan.steps if isinstance(s, (EvalStep, ViewStep))}
        roots = [self._fresh_root(b, made) for b in plan.outputs]
        self.fresh_outputs = tuple(
            plan.outputs.count(b) == 1
            and (id(b) in fresh or (root is not None and roots.count(root) == 1))
            for b, root in zip(plan.outputs, roots, strict=True)
        )
        self._lock = threading.Lock()
        self.top_level = True  # not a loop's body (set by _compile_held)
        self.linalg_written_out = False
        self._copy_inputs = False  # set by the first input a native kernel refused (__call__)
        if load:
            self._bind()
            self._run = self._first_call

    def _load_kernels(self, mode: str, names: dict) -> None:
        """Each kernel compiled through llvmlite (cpu/llvm/, TRACEGRAD_CPU_COMPILER=llvm) or, for
        one the LLVM printer cannot write, loaded as a Numba module. A program with a compiled
        run (runner.py) keeps Numba kernels, which that run calls from Numba."""
        native = config.cpu_compiler() == "llvm" and self.runner is None
        if native:
            from .llvm import kernels as llvm_kernels
        for call in self.calls.values():
            step, src = call.loop, call.source
            if native:
                label = f"{step.name} of a {len(self.graph.nodes)}-node program"
                nch = int(call.ints[src.int_slots["nch"]]) if step.shape else 1
                kernel = llvm_kernels.native_kernel(
                    step, src, nch, call.ints, call.floats, mode, names, label
                )
                if kernel is not None:
                    call.module = NativeModule(kernel)
                    continue
            call.module = cache.load_module(src.module)

    # ---- the driver
    def _driver(self):
        plan = self.plan
        ns: dict = {
            "_empty": np.empty,
            "_matmul": np.matmul,
            "_asarray": np.asarray,
            "_in_parallel": pool.in_parallel,
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
            elif isinstance(step, MatmulStep) and self.splits[id(step)].kind != "whole":
                split = self.splits[id(step)]
                ns[f"_mm{j}"] = functools.partial(products.matmul, split)
                a, b, out = step.a.name, step.b.name, step.out.name
                parts = f", _{out}_parts" if split.partials is not None else ""
                lines.append(f"    # {out} = {a} @ {b} in {split.describe()}")
                if step.out.role == "temp":
                    lines.append(f"    _mm{j}({a}, {b}, {out}{parts})")
                else:
                    lines.append(f"    {out} = _mm{j}({a}, {b}, None{parts})")
            elif isinstance(step, MatmulStep):
                mm = "_matmul"  # in a pooled program, on one OpenBLAS thread (the whole call is)
                if _multiply_adds(step) < blas_threads.SMALL_PRODUCT and self.blas is not None:
                    mm = "_matmul1"  # one BLAS thread or all, as timing says (blas_threads.py)
                    ns["_matmul1"] = self.blas.matmul
                    self.blas_used = True
                if step.out.role == "temp":
                    lines.append(f"    {mm}({step.a.name}, {step.b.name}, out={step.out.name})")
                else:
                    lines.append(f"    {step.out.name} = {mm}({step.a.name}, {step.b.name})")
            elif isinstance(step, ViewStep):
                ns[f"_view{j}"] = functools.partial(step.node.prim.impl, **step.node.params)
                lines.append(f"    {step.out.name} = _view{j}({step.src.name})")
            elif isinstance(step, scatters.HostStep):
                lines.append(step.line(ns, j))
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
        the scan calls the program once per step). See scan_loop.py."""
        if not self.load:
            return None
        native = [getattr(c.module, "native", False) for c in self.calls.values()]
        if any(native):
            if not all(native):
                return None  # (a loop calls kernels of one compiler)
            body = scan_loop.scan_body(self, n_consts, n_carry, views=True)
            if body is None:
                return None
            from .llvm import loops

            return loops.native_scan_driver(body, n_consts, n_carry, save)
        return scan_loop.scan_driver(self, n_consts, n_carry, save)

    def _compile_held(self, graph: Graph) -> CpuProgram:
        """A graph a node holds (a loop body), optimised and compiled like a program of its own,
        its small factorisations and solves written out as arithmetic (loop_bodies.py)."""
        graph, written_out = loop_bodies.unrolled(graph)
        program = build(passes.optimize(graph), load=self.load)
        program.top_level = False
        program.linalg_written_out = written_out
        self.held.append(program)
        return program

    def _writes_out_linalg(self) -> bool:
        """Whether a loop of this program (at any depth) runs a written-out factorisation."""
        return any(p.linalg_written_out or p._writes_out_linalg() for p in self.held)

    def _steady(self):
        """How calls after the first run: the driver, checked for NaN results when a loop of
        this program runs a written-out factorisation (loop_bodies.py gives NaN where LAPACK
        raises). A program that draws random numbers is not run twice, and a loop's body
        program is checked by the program that holds it."""
        if not self.top_level or draws_in(self.graph.nodes) or not self._writes_out_linalg():
            return self._fast
        return lambda args: self._checked(args, self._fast(args))

    def _checked(self, args, out):
        """`out`, unless it holds a NaN: then the reference interpreter computes the call again,
        which raises NumPy's LinAlgError where a factorisation failed or, when it raises
        nothing, leaves these results to be returned, and later calls unchecked."""
        if any(o.dtype.kind in "fc" and np.isnan(o).any() for o in map(np.asarray, out)):
            from .. import interpreter

            interpreter.evaluate(self.graph, args)
            self._run = self._fast
        return out

    def _from_eval(self, b: Buffer) -> bool:
        return any(isinstance(step, EvalStep) and step.out is b for step in self.plan.steps)

    def _fresh_root(self, b: Buffer, made: dict) -> Buffer | None:
        """The buffer an output is (a view of), where that is the result of an evaluation step
        whose primitive returns a new array on every call (`fresh_result`, a scatter-add's
        zeros), and nothing else writes into it: the caller may have it without a copy, if no
        other output shares it. None otherwise. `made`: the evaluation or view step that
        writes each buffer, by id."""
        while isinstance(made.get(id(b)), ViewStep):
            b = made[id(b)].src
        step = made.get(id(b))
        if not (isinstance(step, EvalStep) and step.node.prim.fresh_result):
            return None
        writers = [s for s in self.plan.steps if any(w is b for w in s.writes)]
        return b if writers == [step] else None

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
            if isinstance(step, FusedLoop) and getattr(
                self.calls[id(step)].module, "native", False
            ):
                ns[f"_{step.name}"] = self.calls[id(step)].module.kernel  # compiled already
            elif isinstance(step, FusedLoop):
                call = self.calls[id(step)]
                ns[f"_{step.name}"] = progress.timed_first_call(
                    ns,
                    f"_{step.name}",
                    call.module.kernel,
                    f"{step.name} of a {len(self.graph.nodes)}-node program",
                )
        exec(compile(self.driver_source, "<tracegrad driver>", "exec"), ns)
        body = ns["_run"]
        if self._copy_inputs:
            body = _contiguous_inputs(body)
        if self.runner is not None:
            self.runner.load()
            body = _runner_first(self.runner, [b.name for b in self._temps], body)
        if self.blas_used:
            body = self.blas.timed(body)
        if self.pooled:
            body = _on_one_blas_thread(body)
        temps = self._temps
        if not temps:
            self._fast = body
            return
        # scattered buffers hold zeros at the start of every call (scatters.py)
        zeroed = {id(b) for b in scatters.zeroed(self.plan)}
        kinds = [np.zeros if id(b) in zeroed else np.empty for b in temps]
        buffers = [make(b.shape, b.dtype) for make, b in zip(kinds, temps, strict=True)]
        kept_zeros = [buf for make, buf in zip(kinds, buffers, strict=True) if make is np.zeros]
        lock = self._lock

        def run(args):
            if lock.acquire(False):
                try:
                    return body(args, *buffers)
                except BaseException:
                    for buf in kept_zeros:  # a call that raised may have left values in them
                        buf.fill(0)
                    raise
                finally:
                    lock.release()
            fresh = [make(b.shape, b.dtype) for make, b in zip(kinds, temps, strict=True)]
            return body(args, *fresh)  # a concurrent call

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
                if not getattr(call.module, "native", False):
                    call.module = cache.reload_without_compiled(call.module, call.source.module)
            self._bind()
            out = self._fast(args)
        self._run = self._steady()
        return out if self._run is self._fast else self._checked(args, out)

    def __call__(self, args):
        try:
            return self._run(args)
        except LayoutRefused:
            return self._refused(args)

    def _refused(self, args):
        """A native kernel refused an input's layout (strided, unaligned). Rather than compile
        the kernel's Numba version (seconds), copy such inputs C-contiguous on every call from
        now on and run the call again from the start: its steps only write the program's own
        buffers. A program that draws random numbers is not run twice (the draws would advance
        the user's generator again): its kernels fall back to Numba."""
        if not self._copy_inputs and not draws_in(self.graph.nodes):
            self._copy_inputs = True
            self._bind()
            self._run = self._steady()
            try:
                return self._run(args)
            except LayoutRefused:  # an array of the program's own, not an input
                pass
        from .llvm import kernels as llvm_kernels

        with llvm_kernels.numba_fallback():
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
        if self.runner is not None:
            parts.append(
                f"# ---- run: the program as one function on {self.runner.threads} threads "
                "(the driver below runs the calls it declines)"
            )
            parts.append(self.runner.source)
        parts.append("# ---- driver")
        parts.append(self.driver_source)
        for k, program in enumerate(self.held):
            parts.append(f"# ==== held program {k} (a loop body or branch, run by an _eval step)")
            parts.append(program.source())
        return "\n".join(parts)


def _pooled_products(plan: Plan) -> bool:
    """Whether a program shares its products out over tracegrad's threads (products.py): when
    all of them are small, OpenBLAS is NumPy's own (its thread count can be set), and no step
    runs NumPy code that might want OpenBLAS's threads (a factorisation, a loop's body)."""
    steps = plan.steps
    matmuls = [step for step in steps if isinstance(step, MatmulStep)]
    return (
        POOLED_PRODUCTS
        and bool(matmuls)
        and all(_multiply_adds(step) < blas_threads.SMALL_PRODUCT for step in matmuls)
        and not any(isinstance(step, EvalStep | scatters.HostStep) for step in steps)
        and blas_threads.openblas_known()
    )


def _runner_first(run_compiled: runner.Runner, names: list[str], driver: Callable) -> Callable:
    """The program's body: the compiled run, or the Python driver when it declines a call."""

    def body(args, *buffers):
        out = run_compiled(args, dict(zip(names, buffers, strict=True)))
        return driver(args, *buffers) if out is None else out

    return body


def _contiguous_inputs(body):
    """Native kernels take C-contiguous, aligned arrays. Once one refused a strided input (a
    transposed argument, one channel of an image read afresh as a hidden input), the program's
    inputs are copied so on every call, which costs a pass over their bytes (and nothing for
    inputs laid out already): far less than a kernel compiled through Numba."""

    def run(args, *buffers):
        for a in args:
            if isinstance(a, np.ndarray) and not (a.flags.c_contiguous and a.flags.aligned):
                args = [_c_aligned(x) if isinstance(x, np.ndarray) else x for x in args]
                break
        return body(args, *buffers)

    return run


def _c_aligned(a: np.ndarray) -> np.ndarray:
    return a if a.flags.c_contiguous and a.flags.aligned else np.require(a, requirements="CA")


def _on_one_blas_thread(run: Callable) -> Callable:
    def call(*args):
        with blas_threads.one_thread():
            return run(*args)

    return call


def _multiply_adds(step: MatmulStep) -> int:
    return products.multiply_adds(step.a.shape, step.b.shape)


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


# ----------------------------------------------------------------------------------------------
# Building a program: plan, write, load, link

# Opt-in specialisation: sizes written into the kernel source (a compile per shape).
BAKE_SIZES = False


def _salt(mode: str) -> str:
    vm = render.vmath_module()
    parts = ["mode=" + mode]
    if vm is not None and mode == "vector":
        folder = os.path.dirname(vm.__file__)
        files = [os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".py")]
        parts.append("vmath=" + _vmath_hash(tuple(files)))
    # the entry point holds the reduction helpers the kernel modules import
    entry = os.path.join(os.path.dirname(os.path.dirname(__file__)), "codegen_cpu.py")
    parts.append("codegen=" + _vmath_hash((entry, render.__file__)))
    return cache.salt(tuple(parts))


@functools.lru_cache(maxsize=8)
def _vmath_hash(files: tuple[str, ...]) -> str:
    return cache.source_hash(list(files))


def build(graph: Graph, load: bool = True, bake_sizes: bool | None = None) -> CpuProgram:
    """Plan, write, load (compiling or from the disk cache) and link the kernels of a graph.

    `bake_sizes` (default `BAKE_SIZES`) writes the iteration sizes into the kernels: a
    specialisation (compiled again for every shape) that lets LLVM see the trip counts."""
    mode = render.math_mode()
    limits.check_graph(graph, "cpu")
    graph = passes.tiny_products(graph)
    plan = fusion.plan(graph, render.supports, computed_identity=True)
    plan = donation.donate(scalars.pack_scalars(split.split_loops(plan)))
    plan = scatters.scatter_in_place(plan)
    bake = BAKE_SIZES if bake_sizes is None else bake_sizes
    return CpuProgram(
        graph, plan, mode, ir.value_names(graph), _salt(mode), load=load, bake_sizes=bake
    )
