"""Row pipelines in the compiled run (tracegrad/cpu/pipelines.py): steps that split the same rows
run chunk by chunk, and steps that read other rows, or wait for every row, stay out."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.runtime import backends
from tracegrad import passes
from tracegrad.cpu import native, pipelines, runner
from tracegrad.cpu import program as cpu_program
from tracegrad.base import blas_threads


@pytest.fixture(autouse=True)
def _numba(numba_compiler):
    """These are tests of the Numba compiler's machinery (see conftest.numba_compiler)."""


pytestmark = pytest.mark.skipif(
    native.gemm_addresses() is None or not blas_threads.openblas_known(),
    reason="NumPy without its bundled OpenBLAS: programs run on the Python driver",
)


@pytest.fixture
def small_pipelines(monkeypatch):
    """Two threads, and pipelines (and compiled runs) for programs of a few hundred rows."""
    monkeypatch.setattr(cpu_program, "_threads", lambda: 2)
    monkeypatch.setattr(runner, "MIN_WORK", 0)
    monkeypatch.setattr(pipelines, "MIN_ROWS", 64)
    monkeypatch.setattr(pipelines, "CHUNK_BYTES", 1 << 12)


def _compile(fun, *args):
    graph = passes.optimize(tg.make_ir(fun, optimize=False)(*args))
    return backends.get_backend("cpu").compile(graph)


def _groups(source: str) -> list[list[str]]:
    """The groups of a compiled run's source: the lines of each `while True` (all threads, chunk
    by chunk) or `if fetch_add(...) == 0` (one thread) block."""
    run = source.split("def run(", 1)[1]
    groups: list[list[str]] = []
    for line in run.splitlines()[1:]:
        if line.startswith(("    while True:", "    if fetch_add(")):
            groups.append([line.strip()])
        elif line.startswith("        ") and groups:
            groups[-1].append(line.strip())
    return groups


def _steps(group: list[str]) -> list[str]:
    """The steps a group runs: kernel calls by kernel, products by result."""
    out = []
    for line in group:
        if (m := re.match(r"(_k\d+)\(", line)) or (m := re.match(r"# (\w+) = ", line)):
            out.append(m.group(1))
    return out


def _run_twice(program, fun, first, args, rtol=1e-10):
    """`program` called with `first`, then with `args`: the second call must give NumPy's
    numbers, so a chunk that read rows no chunk had written yet (left from the first call)
    shows."""
    program(list(first))
    got = program(list(args))
    want = fun(*args)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-12)
    return got


# ---- the schedule, on steps made up for it


def _item(name, rows=None, reads=(), writes=(), local=None, after=None, chunks=4):
    """A step `name` whose form (if `rows`) reads and writes only at its rows unless `local`
    says which arrays it touches that way; `after` names what its combining call writes."""
    reads, writes = set(reads), set(writes)
    units = [pipelines.Unit(chunks if rows else 1, [name], reads, writes)]
    if rows is None:
        return pipelines.Item(units)
    local = reads | writes if local is None else set(local)
    parts = {f"{name}_parts"} if after else set()
    later = pipelines.Unit(1, [], parts, {after}) if after else None

    def render(nch):
        return [f"{name} of {nch}"], [f"{name} finish"] if after else None

    row_bytes = dict.fromkeys(local, 8)  # a column of float64 each
    form = pipelines.Form(rows, reads, writes | parts, local | parts, render, row_bytes, later)
    return pipelines.Item(units, [form])


def _lines(units):
    return [(u.chunks, u.lines) for u in units]


def test_steps_over_the_same_rows_run_as_one_pipeline():
    items = [
        _item("mm", 1024, {"x", "w"}, {"h"}, local={"x", "h"}),
        _item("tanh", 1024, {"h"}, {"h"}, after="colsum"),
        _item("loss", None, {"colsum"}, {"l"}),  # one chunk: runs after the pipeline
        _item("back", 1024, {"h", "w"}, {"d"}, local={"h", "d"}),
    ]
    got = _lines(pipelines.schedule(items, 2))
    assert got == [
        (8, ["mm of 8", "tanh of 8", "back of 8"]),
        (1, ["tanh finish"]),
        (1, ["loss"]),
    ]


def test_what_keeps_a_step_out_of_the_pipeline():
    def first():
        return _item("a", 1024, {"x"}, {"h"})

    # it reads the pipeline's array at other rows
    got = _lines(pipelines.schedule([first(), _item("b", 1024, {"h"}, {"y"}, local={"y"})], 2))
    assert got == [(4, ["a"]), (4, ["b"])]
    # it writes, at other rows, an array the pipeline reads
    got = _lines(pipelines.schedule([first(), _item("b", 1024, {"q"}, {"x"}, local={"q"})], 2))
    assert got == [(4, ["a"]), (4, ["b"])]
    # it splits other rows
    got = _lines(pipelines.schedule([first(), _item("b", 512, {"h"}, {"y"})], 2))
    assert got == [(4, ["a"]), (4, ["b"])]
    # it reads what a step set aside to run after the pipeline writes
    items = [first(), _item("s", None, {"h"}, {"m"}), _item("b", 1024, {"h", "m"}, {"y"})]
    got = _lines(pipelines.schedule(items, 2))
    assert got == [(4, ["a"]), (1, ["s"]), (4, ["b"])]
    # the same arrays touched only at the rows, and read-only arrays read anywhere: it joins
    items = [first(), _item("b", 1024, {"h", "w"}, {"y"}, local={"h", "y"})]
    assert _lines(pipelines.schedule(items, 2)) == [(8, ["a of 8", "b of 8"])]


def test_a_step_with_no_partner_runs_as_on_its_own():
    items = [
        _item("a", 1024, {"x"}, {"h"}, after="s"),
        _item("one", None, {"q"}, {"r"}),
        _item("b", None, {"r"}, {"z"}, chunks=4),  # many chunks, no form: closes
    ]
    items[2].units[0].chunks = 4
    got = _lines(pipelines.schedule(items, 2))
    assert got == [(4, ["a"]), (1, ["one"]), (4, ["b"])]  # not "a of 8", no "a finish"


def test_chunks_of_a_pipeline():
    thin = 267 * 8  # the thin network's gradient: 267 float64 columns a row
    assert pipelines.chunks(2048, 2, thin) == 16  # 122 rows a chunk
    assert pipelines.chunks(16384, 2, thin) == 134
    assert pipelines.chunks(1_000_000, 2, 200) == 763  # 1,310 rows a chunk
    assert pipelines.chunks(2048, 2, 8) == 8  # at least 4 a thread
    assert pipelines.chunks(100, 2, thin) == 6  # at least 16 rows a chunk
    assert pipelines.chunks(10, 2, thin) == 1


# ---- programs


HAZARDS = {  # ways of reading rows of `h` other than the chunk's
    "mirrored": lambda h: h * h[::-1],
    "rolled": lambda h: np.roll(h, 3, axis=0),
    "last rows": lambda h: h @ h[-7:].T,
    "column means": lambda h: h - np.mean(h, axis=0),
    "running sums": lambda h: np.cumsum(h, axis=0),
    "their products": lambda h: h @ (h.T @ h) / 203,
    "columns": lambda h: (h.T @ h.T)[:, -12:],  # h square: h.T's rows are h's columns
}


@pytest.mark.parametrize("hazard", HAZARDS)
def test_steps_that_read_other_rows_stay_out_of_the_pipeline(small_pipelines, rng, hazard):
    """A step reads rows of the pipeline's array `h` other than its chunk's. Run with new inputs
    after other ones, a wrong join would read rows left from the first call (or not yet
    written)."""

    def f(w1, w2, x):
        h = np.tanh(x @ w1)
        return np.tanh(HAZARDS[hazard](h) @ w2) * h[:, :3] + np.sin(h[:, 3:6])

    def args():
        w1, w2 = rng.standard_normal((5, 12)) / 2, rng.standard_normal((12, 3)) / 3
        if hazard == "columns":
            w1 = rng.standard_normal((5, 203)) / 2
        if hazard == "last rows":
            w2 = rng.standard_normal((7, 3)) / 3
        return [w1, w2, rng.standard_normal((203, 5))]

    program = _compile(tg.jit(f), *args())
    assert program.runner is not None
    assert any(g[0] == "while True:" and len(_steps(g)) > 1 for g in _groups(program.runner.source))
    _run_twice(program, f, args(), args())


def test_a_network_gradient_in_a_pipeline_of_uneven_chunks(small_pipelines, rng):
    """value_and_grad of a network over 203 rows: one pipeline of 12 chunks of 16 or 17 rows."""

    def net(w1, w2, x):
        return np.mean(np.tanh(np.tanh(x @ w1) @ w2) ** 2)

    def args():
        return [
            rng.standard_normal((5, 12)) / 2,
            rng.standard_normal((12, 3)) / 3,
            rng.standard_normal((203, 5)),
        ]

    fun = tg.value_and_grad(net, argnums=(0, 1))
    program = _compile(fun, *args())
    groups = _groups(program.runner.source)
    chunked = [g for g in groups if g[0] == "while True:"]
    assert len(chunked) == 1 and "if c >= 12:" in chunked[0]
    assert len(_steps(chunked[0])) >= 6

    def want(*a):
        value, grads = tg.value_and_grad(net, argnums=(0, 1), backend="numpy")(*a)
        return (value, *grads)

    _run_twice(program, want, args(), args())
