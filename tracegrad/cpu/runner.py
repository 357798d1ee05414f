"""A whole program as one compiled function that every thread runs: no Python between steps.

The Python driver (program.py) calls each kernel and each product chunk through Python, so every
step hands the GIL and a wake-up between threads: 30-50 us each on a 2-core machine, ten or more
per step of a thin network's gradient, next to steps of 100-600 us. For a program of fused loops,
small 2-D float products and transposes (what a pooled program is, see products.py), this module
writes one more module, cached on disk like the kernels: an `njit(nogil=True)` function `run`
that walks the program's steps in order. The calling thread and the pool's workers all call it
with the same arguments and release the GIL for the whole run:

- a step is split into chunks (a loop's chunks, a product's row or inner-dimension chunks); a
  thread takes the next chunk with an atomic counter, and a second counter says how many are
  done. Before a step, a thread waits (spinning, then yielding its core) for the earlier steps
  whose arrays the step reads or writes, and only for those;
- steps that split the same rows run as one pipeline, chunk by chunk (pipelines.py);
- consecutive steps of one chunk each (serial kernels, a loop's combining call, an unsplit
  product) form one group that the first thread to arrive runs;
- products call NumPy's own OpenBLAS (`cblas_?gemm`, on one thread for the whole call) from the
  compiled code (native.py).

Chunks are handed out dynamically, and a wait is for chunks, not for threads: a thread another
process holds up does fewer chunks, and a worker that wakes late finds every counter exhausted
and returns. The chunks are fixed by the shapes and the thread count, so each call computes the
same numbers. A call the run cannot take as it is (a view that would copy, an operand cblas
cannot read in place, inputs in a layout `run` was not compiled for) runs on the Python driver.
"""

from __future__ import annotations

import logging
import re
import time

import numpy as np

from ..fusion import FusedLoop, MatmulStep, ViewStep
from ..base import cache, progress
from . import pipelines, pool, products


class _Native:
    """native.py, imported when first used: it imports Numba, which a warm first call of the
    cpu backend's native kernels does without."""

    def __getattr__(self, name):
        from . import native

        return getattr(native, name)


native = _Native()

log = logging.getLogger("tracegrad")

# A product is split into chunks of at least this many multiply-adds: a chunk costs about a
# microsecond to hand out here (against 30-50 us through Python), so smaller ones pay.
CHUNK_WORK = 1 << 17
MIN_ROWS = 32
MIN_INNER = 128
# A program with less work than this (multiply-adds, and loop elements times their inline cost)
# keeps the Python driver, which runs it on the calling thread: waking a worker and waiting for
# it to report back costs 50-70 us on a 2-core machine. The thin network at 64 rows (about
# 0.9 M) took 0.205 ms with the compiled run on two threads, 0.138 ms on one, 0.128 ms on the
# driver; at 256 rows (3.4 M) 0.54 ms against the driver's 0.82 ms.
MIN_WORK = 1 << 21
# Whether steps that split the same rows run depth first, chunk by chunk (pipelines.py).
PIPELINES = True
# A product joins a pipeline along its inner dimension only if its partial products (one per
# chunk) take at most this many bytes.
MAX_PARTS = 1 << 24


def _split(step: MatmulStep, threads: int) -> products.Split:
    return products.plan(
        step.a.shape, step.b.shape, step.out.dtype, threads, CHUNK_WORK, MIN_ROWS, MIN_INNER
    )


def eligible(program) -> bool:
    """Whether `program` (a pooled CpuProgram) can run as one compiled function."""
    if native.gemm_addresses() is None:
        return False
    roots = _view_roots(program.plan)
    for step in program.plan.steps:
        if isinstance(step, FusedLoop):
            if "raise" in program.calls[id(step)].source.module:
                return False  # a kernel that raises would leave the other threads waiting
        elif isinstance(step, MatmulStep):
            dtypes = {np.dtype(b.dtype) for b in (step.a, step.b, step.out)}
            if step.a.ndim != 2 or step.b.ndim != 2 or len(dtypes) != 1:
                return False
            if dtypes.pop() not in (np.dtype(np.float64), np.dtype(np.float32)):
                return False
            if step.out.name in {roots.get(b.name, b.name) for b in (step.a, step.b)}:
                return False  # a product written over its own operand
        elif not isinstance(step, ViewStep):
            return False
    return True


def _view_roots(plan) -> dict[str, str]:
    """A view's name -> the name of the array it views (through views of views)."""
    root: dict[str, str] = {}
    for step in plan.steps:
        if isinstance(step, ViewStep):
            root[step.out.name] = root.get(step.src.name, step.src.name)
    return root


class Runner:
    """The compiled run of a program: its generated source (`source`), the compiled function
    (`load`), and a call (`__call__`) that declines, returning None, when the Python driver
    must run it instead."""

    def __init__(self, program, threads: int):
        plan = program.plan
        self.threads = threads
        self.views = [s for s in plan.steps if isinstance(s, ViewStep)]
        names: list[str] = []  # the compiled function's array arguments, in order

        def arg(name: str) -> str:
            if name not in names:
                names.append(name)
            return name

        # arguments with a value fixed for the program (constants, I and F), and scratch of its
        # own (the partial products of an inner-dimension split): name -> (shape, dtype)
        self.fixed: dict[str, np.ndarray] = {
            b.name: b.value for b in plan.buffers if b.role == "const"
        }
        self.scratch: dict[str, tuple] = {}
        self.root = _view_roots(plan)
        self.buffers = {b.name: b for b in plan.buffers}
        kernels: list[str] = []
        view_steps = {s.out.name: s for s in self.views}
        items: list[pipelines.Item] = []

        # arrays whose layout the caller (or the trace, for a captured constant) chose
        outside = {b.name for b in plan.inputs} | {s.out.name for s in self.views}
        outside |= {b.name for b in plan.buffers if b.role == "const"}
        self.operands: list[str] = []  # product operands laid out by the caller: checked per call
        for j, step in enumerate(plan.steps):
            if isinstance(step, ViewStep):
                arg(step.out.name)
                continue
            if isinstance(step, MatmulStep):
                self.operands += [b.name for b in (step.a, step.b) if b.name in outside]
                items.append(self._product(step, _split(step, threads), arg, view_steps))
                continue
            call = program.calls[id(step)]
            kernel = f"_k{len(kernels)}"
            kernels.append(cache.module_key(call.source.module))
            items.append(self._loop(j, step, call, kernel, arg))
        groups = _groups(pipelines.schedule(items, threads) if PIPELINES else _alone(items))
        body: list[str] = []
        pending: list[int] = []  # groups this thread has not waited for
        for g, group in enumerate(groups):
            for h in list(pending):
                if groups[h].conflicts(group.reads, group.writes):
                    body.append(f"    wait_for(sync, {2 * h + 1}, {groups[h].chunks})")
                    pending.remove(h)
            take, done = 2 * g, 2 * g + 1
            if group.chunks == 1:
                body.append(f"    if fetch_add(sync, {take}, 1) == 0:")
                if any(re.search(r"\bc\b", line) for line in group.lines):
                    body.append("        c = 0  # a loop of one chunk")
                body += [f"        {line}" for line in group.lines]
                body.append(f"        fetch_add(sync, {done}, 1)")
            else:
                body.append("    while True:")
                body.append(f"        c = fetch_add(sync, {take}, 1)")
                body.append(f"        if c >= {group.chunks}:")
                body.append("            break")
                body += [f"        {line}" for line in group.lines]
                body.append(f"        fetch_add(sync, {done}, 1)")
            pending.append(g)
        body += [f"    wait_for(sync, {2 * h + 1}, {groups[h].chunks})" for h in pending]
        self.cells = 2 * len(groups)
        # the arguments the body uses (how a step runs alone, or in a pipeline, not both)
        used = set(re.findall(r"\w+", "\n".join(body)))
        self.names = names = [name for name in names if name in used]
        self.scratch = {name: spec for name, spec in self.scratch.items() if name in used}
        header = [
            "# A tracegrad program run: every thread calls `run`; chunks are taken with atomic",
            "# counters, and a group of steps waits for the earlier groups whose arrays it uses.",
            f"# native.py {cache.source_hash([native.__file__])}",
            "from numba import njit",
            "from tracegrad.cpu.native import fetch_add, gemm, sum_parts, wait_for",
            "from tracegrad.base import cache as _cache",
            "",
        ]
        header += [f"_k{i} = _cache.loaded({key!r}).kernel" for i, key in enumerate(kernels)]
        header += [
            "",
            '@njit(nogil=True, error_model="numpy", cache=globals().get("_TG_CACHE", False))',
            f"def run(sync, dgemm, sgemm, {', '.join(names)}):",
        ]
        self.source = "\n".join(header + body) + "\n"
        self.fn = None
        self.layouts: set[tuple] = set()  # the inputs' layouts `run` was compiled for
        # every call runs on the Python driver: `run` failed, or a view copies on every call
        self.declined = False
        self.plan = plan
        self.inputs = [b.name for b in plan.inputs]
        views = {id(s.out) for s in self.views}
        self.fresh = [
            b
            for b in plan.buffers
            if b.role == "output" and id(b) not in views and b.name not in self.inputs
        ]
        self.dgemm, self.sgemm = native.gemm_addresses()

    def _roots(self, names) -> set[str]:
        """The arrays `names` are, views by the array they view."""
        return {self.root.get(n, n) for n in names}

    def _unit(self, chunks: int, lines: list[str], reads, writes) -> pipelines.Unit:
        return pipelines.Unit(chunks, lines, self._roots(reads), self._roots(writes))

    def _product(self, step: MatmulStep, split, arg, views) -> pipelines.Item:
        """A product as the run's lines: split as `split` says on its own, and by rows or along
        its inner dimension in a pipeline."""
        a, b, out = arg(step.a.name), arg(step.b.name), arg(step.out.name)
        fn = "dgemm" if np.dtype(step.out.dtype) == np.float64 else "sgemm"
        (m, k), n = step.a.shape, step.b.shape[1]

        def rows(nch: int) -> list[str]:
            return [
                f"# {out} = {a} @ {b}, chunk c of {nch} of its rows",
                f"lo, hi = c * {m} // {nch}, (c + 1) * {m} // {nch}",
                f"gemm({fn}, {a}[lo:hi], {b}, {out}[lo:hi], False)",
            ]

        def inner(nch: int, parts: str) -> list[str]:
            self.scratch[arg(parts)] = ((nch, m, n), np.dtype(step.out.dtype))
            return [
                f"# {out} = {a} @ {b}, chunk c of {nch} of its inner dimension",
                f"lo, hi = c * {k} // {nch}, (c + 1) * {k} // {nch}",
                f"gemm({fn}, {a}[:, lo:hi], {b}[lo:hi], {parts}[c], False)",
            ]

        if split.kind == "whole":
            lines = [f"# {out} = {a} @ {b}", f"gemm({fn}, {a}, {b}, {out}, False)"]
            units = [self._unit(1, lines, {a, b}, {out})]
        elif split.kind == "rows":
            units = [self._unit(split.chunks, rows(split.chunks), {a, b}, {out})]
        else:
            parts = f"_{out}_rparts"
            units = [
                self._unit(split.chunks, inner(split.chunks, parts), {a, b}, {parts}),
                self._unit(1, [f"sum_parts({parts}, {out})"], {parts}, {out}),
            ]
        reads = self._roots({a, b})
        forms = []
        if m >= pipelines.MIN_ROWS:
            local = pipelines.product_local(step, "rows", views, self.root)
            by_rows = pipelines.Form(
                m, reads, {out}, local, lambda nch: (rows(nch), None), self._row_bytes(local, m)
            )
            forms.append(by_rows)
        if k >= pipelines.MIN_ROWS:
            parts = f"_{out}_pparts"
            local = pipelines.product_local(step, "inner", views, self.root)
            row_bytes = self._row_bytes(local, k)
            # at most this many chunks: the pipeline's rows take at least this product's bytes
            most = pipelines.chunks(k, self.threads, sum(row_bytes.values()))
            if m * n * np.dtype(step.out.dtype).itemsize * most <= MAX_PARTS:
                after = self._unit(1, [], {parts}, {out})

                def render(nch: int):
                    return inner(nch, parts), [f"sum_parts({parts}, {out})"]

                local |= {parts}
                forms.append(pipelines.Form(k, reads, {parts}, local, render, row_bytes, after))
        return pipelines.Item(units, forms)

    def _row_bytes(self, names, rows: int) -> dict[str, int]:
        """The bytes of a row of each of the arrays `names` that have `rows` rows."""
        out = {}
        for name in names:
            b = self.buffers.get(name)
            if b is not None and b.shape[:1] == (rows,):
                out[name] = int(np.prod(b.shape[1:], dtype=np.int64)) * np.dtype(b.dtype).itemsize
        return out

    def _loop(self, j: int, step: FusedLoop, call, kernel: str, arg) -> pipelines.Item:
        """A fused loop's calls: its chunks on all threads (or one call of all of them) and the
        call that combines their partial results, on its own or in a pipeline."""
        self.fixed[f"I{j}"], self.fixed[f"F{j}"] = call.ints, call.floats
        suffix = {p.name: p.name.split("_")[-1] for p in call.partials}

        def arguments(ints: str, partials: dict[str, str]) -> str:
            named = {"I": ints, "F": f"F{j}"} | {suffix[p]: q for p, q in partials.items()}
            params = [named[p] for p in call.source.params if p not in ("first", "last", "finish")]
            return ", ".join([arg(b.name) for b in call.source.arrays] + [arg(p) for p in params])

        args = arguments(f"I{j}", {p.name: p.name for p in call.partials})
        reads = {b.name for b in step.reads} | {b.name for b in call.source.arrays}
        writes = {b.name for b in step.writes} | {p.name for p in call.partials}
        if not step.shape:
            return pipelines.Item([self._unit(1, [f"{kernel}({args})"], reads, writes)])
        if call.parallel:
            nch = int(call.ints[call.source.int_slots["nch"]])
            units = [self._unit(nch, [f"{kernel}({args}, c, c + 1, 0)"], reads, writes)]
            if call.partials or step.scans:  # the call that combines the chunks' results
                units.append(self._unit(1, [f"{kernel}({args}, {nch}, {nch}, 1)"], reads, writes))
        else:
            units = [self._unit(1, [f"{kernel}({args}, 0, 1, 1)"], reads, writes)]
        if step.shape[0] < pipelines.MIN_ROWS or (step.scans and len(step.shape) == 1):
            return pipelines.Item(units)  # a scan along axis 0 runs in order
        # in a pipeline: chunks of its own count, with partial results of their own
        partials = {p.name: f"{p.name}_pipe" for p in call.partials}
        reduced = pipelines.reduced_over_rows(step)

        after = None
        if call.partials or step.scans:  # the call that combines the chunks' results
            if step.scans:  # not analysed: as the whole loop
                after = self._unit(1, [], reads | set(partials.values()), writes)
            else:
                after = self._unit(1, [], set(partials.values()), reduced)

        def render(nch: int):
            ints = call.ints.copy()
            ints[call.source.int_slots["nch"]] = nch
            self.fixed[arg(f"I{j}_pipe")] = ints
            for p in call.partials:
                self.scratch[arg(partials[p.name])] = ((nch, *p.shape[1:]), np.dtype(p.dtype))
            args = arguments(f"I{j}_pipe", partials)
            finish = [f"{kernel}({args}, {nch}, {nch}, 1)"] if after is not None else None
            return [f"{kernel}({args}, c, c + 1, 0)"], finish

        rows = step.shape[0]
        local = pipelines.loop_local(step, self.root)
        chunk_reads = self._roots(b.name for b in step.reads)
        chunk_writes = self._roots({b.name for b in step.writes} - reduced)
        chunk_writes |= set(partials.values())
        row_bytes = self._row_bytes(local, rows)
        local |= set(partials.values())
        form = pipelines.Form(rows, chunk_reads, chunk_writes, local, render, row_bytes, after)
        return pipelines.Item(units, [form])

    def load(self) -> None:
        self.module = cache.load_module(self.source)
        self.fn = self.module.run

    def _compiles_for(self, layout: tuple) -> bool:
        """Whether to compile `run` for a new layout of the inputs (seconds each): for the first
        layout seen, and then for plain C arrays; any other layout runs on the driver."""
        return not self.layouts or (len(self.layouts) < 2 and all(map(_plain, layout)))

    def _first(self, sync, values) -> bool:
        """A call with a new layout, on this thread; False (and every later call declined) if it
        fails. Machine code from the disk cache that fails to load is compiled again first."""
        for attempt in range(2):
            try:
                had, start = progress.has_code(self.fn), time.perf_counter()
                self.fn(sync, self.dgemm, self.sgemm, *values)
                # one compiled function calls every kernel: Numba compiled (or loaded) them all
                kernels = sum(isinstance(step, FusedLoop) for step in self.plan.steps)
                progress.functions_compiled(
                    "run", time.perf_counter() - start, progress.how_made(self.fn, had), kernels
                )
                return True
            except Exception as exc:
                if attempt == 0 and getattr(self.module, "_TG_CACHE", False):
                    self.module = cache.reload_without_compiled(self.module, self.source)
                    self.fn = self.module.run
                    sync[:] = 0
                    continue
                log.warning(
                    "tracegrad: the compiled run of a program failed (%s: %s); its calls run "
                    "step by step instead",
                    type(exc).__name__,
                    exc,
                )
        self.declined = True
        return False

    def __call__(self, args, temps: dict[str, np.ndarray]) -> list | None:
        """The program's outputs for the inputs `args`, `temps` its scratch arrays by name; None,
        having run nothing, when the call is the Python driver's: a view would copy, an operand
        is laid out as cblas cannot read it, the inputs are laid out as no compiled `run`
        expects, or the compiled run failed to compile."""
        if self.declined:
            return None
        layout = tuple(_layout_key(a) for a in args)
        new = layout not in self.layouts
        if new and not self._compiles_for(layout):
            return None
        plan = self.plan
        arrays = self.fixed | temps
        arrays.update(zip(self.inputs, args, strict=True))
        for b in self.fresh:
            arrays[b.name] = np.empty(b.shape, b.dtype)
        for step in self.views:
            src = arrays[step.src.name]
            view = step.node.prim.impl(src, **step.node.params)
            if view.size and not np.may_share_memory(view, src):  # NumPy copied
                if self.root.get(step.src.name, step.src.name) not in self.inputs:
                    self.declined = True  # an array laid out the same on every call
                return None
            arrays[step.out.name] = view
        if not all(_cblas_reads(arrays[name]) for name in self.operands):
            return None  # an operand BLAS cannot read as it is: NumPy copies it
        values = [arrays[name] for name in self.names]
        sync = np.zeros(self.cells, np.int64)
        fn, d, s = self.fn, self.dgemm, self.sgemm
        if new:
            # a new layout compiles or loads `run` for its argument types: on this thread
            # alone (Numba's dispatcher must not be entered for that from two threads at once)
            if not self._first(sync, values):
                return None
            self.layouts.add(layout)
        else:
            pool.run_chunks(lambda c: fn(sync, d, s, *values), self.threads, self.threads)
        return [arrays[b.name] for b in plan.outputs]


def _alone(items: list[pipelines.Item]) -> list[pipelines.Unit]:
    return [unit for item in items for unit in item.units]


def _groups(units: list[pipelines.Unit]) -> list[pipelines.Unit]:
    """The run's groups: its units in order, a unit of one chunk joined to the group of one
    chunk before it when it would wait for that group anyway (one thread runs both)."""
    groups: list[pipelines.Unit] = []
    for unit in units:
        last = groups[-1] if groups else None
        joins = unit.chunks == 1 and last is not None and last.chunks == 1
        if joins and last.conflicts(unit.reads, unit.writes):
            last.lines += unit.lines
            last.reads |= unit.reads
            last.writes |= unit.writes
            continue
        groups.append(
            pipelines.Unit(unit.chunks, list(unit.lines), set(unit.reads), set(unit.writes))
        )
    return groups


def _layout_key(a: np.ndarray) -> tuple[bool, bool, bool, bool]:
    """What of an array's layout Numba compiles for (its layout and whether it is writeable)."""
    f = a.flags
    return (f.c_contiguous, f.f_contiguous, f.writeable, f.aligned)


def _plain(key: tuple[bool, bool, bool, bool]) -> bool:
    c, _, writeable, aligned = key
    return c and writeable and aligned


def _cblas_reads(x: np.ndarray) -> bool:
    """Whether cblas reads `x` in place (native.py copies any other layout in the compiled run,
    where an allocation that failed would leave the other threads waiting)."""
    flags = x.flags
    if flags.c_contiguous or flags.f_contiguous:
        return True
    return native.layout(*x.shape, *x.strides, x.itemsize)[0] != 0


def work(program) -> int:
    """A program's work: its products' multiply-adds and its loops' elements times their cost."""
    total = 0
    for step in program.plan.steps:
        if isinstance(step, MatmulStep):
            total += products.multiply_adds(step.a.shape, step.b.shape)
        elif isinstance(step, FusedLoop):
            cost = max(1, program.calls[id(step)].source.cost)
            total += int(np.prod(step.shape, dtype=np.int64)) * cost
    return total


def build(program, threads: int) -> Runner | None:
    """The compiled run of `program` on `threads` threads, or None when it cannot have one or
    is too small to gain from one."""
    if threads < 2 or not eligible(program) or work(program) < MIN_WORK:
        return None
    return Runner(program, threads)
