"""Row pipelines: the steps of a compiled run that split the same rows, run chunk by chunk.

The compiled run (runner.py) splits each step into chunks, and a step starts when the earlier
steps whose arrays it uses have finished all their chunks: breadth first. Every intermediate
array then goes through the memory hierarchy once per step that writes or reads it. A thin
network's gradient at 16,384 rows has 8 MB intermediates and a working set of about 40 MB,
against 512 KB of L2 per core and a 32 MB L3; measured in NumPy on one core, the same products
took 50 ms over whole arrays and 17 ms over blocks of 1,024 rows (benchmarks/RESULTS.md,
"Eleventh pass").

Most of such a program's steps split one axis, the batch: a chunk of rows of a product's result
needs the same rows of its left operand, an elementwise loop reads and writes the rows of its
chunk, and a weight gradient sums over the rows (an inner-dimension split, one partial product
per chunk). Those steps can run depth first: a thread takes chunk c and runs every step of the
pipeline on it while its rows are in the core's cache. What combines the chunks' partial results
(a loop's `finish` call, the sum of a product's partials) runs after the pipeline.

A step joins the open pipeline when it splits the same number of rows, every array it shares with
the pipeline's steps (written by either) is touched by both only at the rows of the chunk (or,
for partial results, at the chunk's slot), and it does not depend on a step the pipeline has set
aside to run after it. Steps of one chunk that arrive while a pipeline is open are set aside
(they run after it, in order); any other step closes the pipeline. A pipeline of one step runs as
the step would on its own. The chunks are fixed by the number of rows and threads, so every call
computes the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable

from ..fusion import FusedLoop, Index, MatmulStep, ViewStep
from ..fusion.steps import Load

# A pipeline's chunk holds about this many bytes of the arrays its steps touch at its rows, half
# of a core's 512 KB of L2: 122 rows of the thin network's gradient in float64 (267 columns of
# its arrays), about 1,300 of a logistic regression's 20 features (RESULTS.md, "Eleventh pass").
CHUNK_BYTES = 1 << 18
MIN_ROWS_PER_CHUNK = 16
# Steps over fewer rows than this stay out of pipelines.
MIN_ROWS = 512


def chunks(rows: int, threads: int, row_bytes: int) -> int:
    """The number of chunks of a pipeline over `rows` rows whose arrays take `row_bytes` bytes
    a row: chunks of about CHUNK_BYTES, and at least 4 per thread."""
    per_chunk = max(MIN_ROWS_PER_CHUNK, CHUNK_BYTES // max(1, row_bytes))
    want = max(threads * 4, rows // per_chunk)
    return max(1, min(want, rows // MIN_ROWS_PER_CHUNK))


class Unit:
    """Lines of the run that one thread runs (`chunks` 1) or that all threads run chunk by chunk
    (`c`), with the arrays they read and write (views named by the array they view)."""

    __slots__ = ("chunks", "lines", "reads", "writes")

    def __init__(self, chunks: int, lines: list[str], reads: set[str], writes: set[str]):
        self.chunks = chunks
        self.lines = lines
        self.reads = reads
        self.writes = writes

    def conflicts(self, reads: set[str], writes: set[str]) -> bool:
        """Whether a later unit with these reads and writes must wait for this one."""
        return bool(self.writes & (reads | writes) or self.reads & writes)


class Form:
    """A step as a member of a pipeline over `rows` rows. `render(nch)` gives the lines of its
    chunk `c` of `nch`, and the lines of `after` (the unit that runs after the pipeline, or
    None). `local` names the arrays the chunk touches only at its rows, and `row_bytes` the
    bytes a row of each of them takes."""

    __slots__ = ("after", "local", "reads", "render", "row_bytes", "rows", "writes")

    def __init__(
        self,
        rows: int,
        reads: set[str],
        writes: set[str],
        local: set[str],
        render: Callable[[int], tuple[list[str], list[str] | None]],
        row_bytes: dict[str, int] | None = None,
        after: Unit | None = None,
    ):
        self.rows = rows
        self.reads = reads
        self.writes = writes
        self.local = local
        self.render = render
        self.row_bytes = row_bytes or {}
        self.after = after


class Item:
    """A step of the run: `units`, how it runs on its own, and `forms`, how it can run in a
    pipeline (in order of preference)."""

    __slots__ = ("forms", "units")

    def __init__(self, units: list[Unit], forms: list[Form] | None = None):
        self.units = units
        self.forms = forms or []


def schedule(items: list[Item], threads: int) -> list[Unit]:
    """The run's units in order, with the steps that can run depth first in pipelines."""
    out: list[Unit] = []
    members: list[tuple[Item, Form]] = []
    reads: set[str] = set()
    writes: set[str] = set()
    local: dict[str, bool] = {}  # array -> whether every member touches it only at its rows
    row_bytes: dict[str, int] = {}
    later: list[Unit] = []  # to run after the pipeline, in order
    rows = 0

    def join(item: Item, form: Form) -> None:
        members.append((item, form))
        reads.update(form.reads)
        writes.update(form.writes)
        for name in form.reads | form.writes:
            local[name] = local.get(name, True) and name in form.local
        row_bytes.update(form.row_bytes)
        if form.after is not None:
            later.append(form.after)

    def fits(form: Form) -> bool:
        if form.rows != rows:
            return False
        touched = form.reads | form.writes
        shared = (writes & touched) | (form.writes & (reads | writes))
        if not all(local[name] and name in form.local for name in shared):
            return False
        return not any(unit.conflicts(form.reads, form.writes) for unit in later)

    def close() -> None:
        if len(members) > 1:
            nch = chunks(rows, threads, sum(row_bytes.values()))
            lines: list[str] = []
            for _, form in members:
                chunk_lines, after_lines = form.render(nch)
                lines += chunk_lines
                if form.after is not None:
                    form.after.lines = after_lines
            out.append(Unit(nch, lines, set(reads), set(writes)))
            out.extend(later)
        elif members:
            item, form = members[0]
            out.extend(item.units)  # as it runs on its own
            out.extend(unit for unit in later if unit is not form.after)
        members.clear()
        reads.clear()
        writes.clear()
        local.clear()
        row_bytes.clear()
        later.clear()

    for item in items:
        if members:
            form = next((f for f in item.forms if fits(f)), None)
            if form is not None:
                join(item, form)
                continue
            if all(unit.chunks == 1 for unit in item.units):
                later.extend(item.units)  # it runs after the pipeline, as it would have
                continue
            close()
        if item.forms:
            rows = item.forms[0].rows
            join(item, item.forms[0])
        else:
            out.extend(item.units)
    close()
    return out


# ---- which arrays a step touches only at the rows of its chunk


def _is_rows(index: Index) -> bool:
    return index.var == "i0" and index.stride == 1 and index.offset == 0


def loop_local(loop: FusedLoop, root: dict[str, str]) -> set[str]:
    """The arrays (by root name) the loop's chunks touch only at their rows; the outputs of its
    reductions over axis 0, written after the last chunk, are not among them."""
    rows = loop.shape[0]
    local: set[str] = set()
    other: set[str] = set()

    def see(buffer, at_rows: bool) -> None:
        at_rows = at_rows and buffer.name not in root and buffer.shape[:1] == (rows,)
        (local if at_rows else other).add(root.get(buffer.name, buffer.name))

    for op in loop.ops:
        if isinstance(op, Load):
            see(op.buffer, bool(op.index) and _is_rows(op.index[0]))
    for store in loop.stores:
        see(store.buffer, bool(store.index) and _is_rows(store.index[0]))
    for scan in loop.scans:
        see(scan.buffer, len(loop.shape) > 1 and bool(scan.index) and _is_rows(scan.index[0]))
    for red in loop.reductions:
        if 0 not in red.axes:  # kept axis 0: written at the chunk's rows
            see(red.buffer, True)
    return local - other


def reduced_over_rows(loop: FusedLoop) -> set[str]:
    """The arrays a loop's call with `finish` writes: the results of its reductions over axis 0."""
    return {red.buffer.name for red in loop.reductions if 0 in red.axes}


def transposed_root(name: str, views: dict[str, ViewStep], root: dict[str, str]) -> str | None:
    """The 2-D array `name` is the plain transpose of (not a view itself), or None."""
    step = views.get(name)
    if step is None or step.src.name in root or step.src.ndim != 2:
        return None
    if step.node.prim.name != "transpose" or tuple(step.node.params.get("perm", ())) != (1, 0):
        return None
    return step.src.name


def product_local(
    step: MatmulStep, kind: str, views: dict[str, ViewStep], root: dict[str, str]
) -> set[str]:
    """The arrays a product's chunk touches only at its rows: for "rows" chunks, the rows of its
    left operand and result; for "inner" chunks, the rows of its right operand and the columns
    of its left one when that is a transpose (the rows of the array it transposes)."""
    a, b, out = step.a.name, step.b.name, step.out.name
    local: set[str] = set()
    other: set[str] = set()

    def see(name: str, at_rows: bool) -> None:
        (local if at_rows else other).add(root.get(name, name))

    if kind == "rows":  # a[lo:hi] @ b -> out[lo:hi]; b is read whole
        see(a, a not in root)
        see(b, False)
        see(out, True)
    else:  # a[:, lo:hi] @ b[lo:hi] -> the chunk's partial product
        t = transposed_root(a, views, root)
        see(a if t is None else t, t is not None)
        see(b, b not in root)
    return local - other
