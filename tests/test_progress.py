"""What a compilation tells the user (runtime/progress.py): the progress line of a foreground
compilation ends with what it did (kernels compiled, loaded from disk or already in memory, or
the first call answered on the interpreter), a background compilation ends with one line, a slow
interpreted call says so once, and `TRACEGRAD_LOG=compile` names every kernel."""

from __future__ import annotations

import contextlib
import logging
import re
import threading

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.runtime.backends import get_backend
from tracegrad.base.errors import BackendError
from tracegrad.base import progress
from tracegrad.runtime import tiered


@pytest.fixture
def shown(monkeypatch, tmp_path):
    """Every compilation shows its line at once, with a kernel cache of its own."""
    monkeypatch.setattr(progress, "SHOW_AFTER_S", 0.0)
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", str(tmp_path / "cache"))
    tg.clear_programs()
    yield
    with contextlib.suppress(BackendError):
        tiered.wait_compiled(timeout=120)
    tg.clear_programs()


@pytest.fixture
def tiering(monkeypatch, shown):
    monkeypatch.setenv("TRACEGRAD_TIERED", "1")
    yield


def _lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("tracegrad:")]


def _count(line: str, how: str) -> int:
    found = re.search(rf"(\d+)(?: kernels?)? {how}", line)
    return int(found.group(1)) if found else 0


def _kernels(fun, *args) -> int:
    """How many kernels the cpu program of `fun` has (its plan, as make_kernels shows it)."""
    return tg.make_kernels(fun, backend="cpu")(*args).count("def k")


def _new_function(n: int):
    """A function whose kernel no other test makes: `n` alternating expm1/arcsinh, so that its
    kernels are in no cache yet (constants are kernel arguments: only the structure counts)."""
    body = "x"
    for k in range(n):
        body = f"np.{'expm1' if k % 2 else 'arcsinh'}({body})"
    namespace = {"np": np}
    exec(compile(f"def f(x):\n    return np.sum({body})\n", f"<progress {n}>", "exec"), namespace)
    return namespace["f"]


def test_a_foreground_compile_counts_its_kernels_compiled_then_loaded(shown, capsys):
    f = _new_function(11)
    x = np.linspace(0.0, 1.0, 5)
    tg.grad(f, backend="cpu")(x)
    (line,) = _lines(capsys.readouterr().err)
    assert line.startswith("tracegrad: compiling grad(f) (cpu): ")
    assert re.search(r"done in \d+\.\d s: \d+ kernels? compiled", line), line
    compiled = _count(line, "compiled")
    assert compiled >= 1 and "0 kernels" not in line
    # a new process (nothing in memory) finds the kernels on disk
    from tracegrad.base import cache

    cache.clear(disk=False)
    tg.clear_programs()
    tg.grad(_new_function(11), backend="cpu")(x)
    (again,) = _lines(capsys.readouterr().err)
    assert _count(again, "loaded from disk") == compiled, again
    assert "compiled" not in again.split("done", 1)[1]


def test_kernels_already_in_memory_are_said_so(shown, capsys):
    x = np.linspace(0.0, 1.0, 5)
    tg.grad(_new_function(12), backend="cpu")(x)
    first = _lines(capsys.readouterr().err)[0]
    tg.clear_programs()  # the program is traced again; its kernels are loaded in this process
    tg.grad(_new_function(12), backend="cpu")(x)
    (line,) = _lines(capsys.readouterr().err)
    assert _count(line, "already in memory") == _count(first, "compiled") >= 1, line


def test_programs_that_run_kernels_from_one_compiled_function_count_them(shown, capsys, rng):
    """A program with products runs all its kernels from one compiled `run` (cpu/runner.py),
    and a scan's steps from one compiled loop (cpu/scan_loop.py): their kernels are counted."""
    # 4,000 rows: the pool runs chunks of the loops on its threads, whose kernels count too
    w1, w2, x = rng.normal(size=(6, 8)), rng.normal(size=(8, 1)), rng.normal(size=(4000, 6))

    def mlp(w1, w2, x):
        return np.sum(np.tanh(np.tanh(x @ w1) @ w2) ** 2)

    def rnn(h, xs):
        c, _ = tg.scan(lambda c, xi: (np.tanh(c * 0.9 + xi), c), h, xs)
        return np.sum(c * c)

    for fun, args in ((mlp, (w1, w2, x)), (rnn, (np.ones(4), rng.normal(size=(7, 4))))):
        tg.grad(fun, backend="cpu")(*args)
        line = _lines(capsys.readouterr().err)[-1]
        assert "0 kernels" not in line and "more when first run" not in line, line
        assert _count(line, "compiled") >= 1, line


def test_the_numpy_backend_says_it_compiles_no_kernels(shown, capsys):
    tg.grad(lambda x: np.sum(x * x), backend="numpy")(np.ones(3))
    (line,) = _lines(capsys.readouterr().err)
    assert "(numpy)" in line and "the numpy backend compiles no kernels" in line
    assert "0 kernels" not in line


def test_a_tiered_first_call_says_it_was_interpreted_and_the_end_of_its_compile(tiering, capsys):
    g = tg.grad(_new_function(13), backend="cpu")
    g(np.linspace(0.0, 1.0, 5))
    (first,) = _lines(capsys.readouterr().err)
    assert "on the NumPy interpreter" in first and "tg.wait_compiled()" in first
    assert tg.wait_compiled(timeout=120)
    (done,) = _lines(capsys.readouterr().err)
    assert done.startswith("tracegrad: grad(f) (cpu) is compiled, in the background in ")
    assert _count(done, "compiled") >= 1 and "its calls run compiled now" in done
    g(np.linspace(0.0, 1.0, 5))
    assert _lines(capsys.readouterr().err) == []  # nothing more


def test_a_slow_interpreted_call_says_so_once(tiering, capsys, monkeypatch):
    monkeypatch.setattr(progress, "SHOW_AFTER_S", 60.0)  # no line for the first call
    monkeypatch.setattr(progress, "SLOW_INTERPRETED_S", 0.0)
    release = threading.Event()
    backend = get_backend("cpu")
    compile_program = backend.compile

    def slow_compile(graph):
        release.wait(60)
        return compile_program(graph)

    monkeypatch.setattr(backend, "compile", slow_compile)
    g = tg.grad(_new_function(14), backend="cpu")
    x = np.linspace(0.0, 1.0, 5)
    try:
        g(x)
        assert _lines(capsys.readouterr().err) == []
        g(x)
        g(x)
        (line,) = _lines(capsys.readouterr().err)
        assert "ran on the NumPy interpreter" in line and "tg.wait_compiled()" in line
    finally:
        release.set()
    assert tg.wait_compiled(timeout=120)
    (done,) = _lines(capsys.readouterr().err)  # announced: its end is said too
    assert "is compiled, in the background" in done


def test_a_failed_background_compile_says_so(tiering, capsys, monkeypatch):
    monkeypatch.setattr(progress, "SHOW_AFTER_S", 60.0)

    def broken(graph):
        raise RuntimeError("no compiler today")

    monkeypatch.setattr(get_backend("cpu"), "compile", broken)
    tg.grad(_new_function(15), backend="cpu")(np.ones(3))
    with pytest.raises(BackendError):
        tg.wait_compiled(timeout=120)
    (line,) = _lines(capsys.readouterr().err)
    assert "in the background failed" in line and "no compiler today" in line


def test_a_call_that_waits_for_its_kernels_says_why(tiering, capsys, monkeypatch):
    monkeypatch.setattr(tiered, "MAX_WORK", 0)
    tg.grad(_new_function(16), backend="cpu")(np.ones(3))
    (line,) = _lines(capsys.readouterr().err)
    assert "too large for the NumPy interpreter to answer first" in line, line
    assert _count(line, "compiled") >= 1


def test_the_compile_log_names_every_kernel_on_lines_of_its_own(shown, monkeypatch, caplog):
    monkeypatch.setenv("TRACEGRAD_LOG", "compile")
    with caplog.at_level(logging.INFO, logger="tracegrad"):
        tg.grad(_new_function(17), backend="cpu")(np.ones(3))
    kernels = [r.getMessage() for r in caplog.records if "kernel k" in r.getMessage()]
    assert kernels and all(" compiled in " in m for m in kernels), kernels


def test_the_compile_log_ends_the_progress_line_before_its_own_lines(shown, monkeypatch, capsys):
    monkeypatch.setenv("TRACEGRAD_LOG", "compile")
    monkeypatch.setattr(progress, "SHOW_AFTER_S", 60.0)
    job = progress.CompileJob("grad(f)", "cpu")
    job._show()
    job.add_kernels(1)
    job.kernel_done(progress.COMPILED)
    job.finish()
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "tracegrad: compiling grad(f) (cpu): tracing, differentiating and planning after 0 s ...",
        err.splitlines()[1],
    ]
    assert err.splitlines()[1].startswith("tracegrad: compiling grad(f) (cpu): done in ")
    assert err.splitlines()[1].endswith(": 1 kernel compiled")


@pytest.mark.parametrize(
    "counts, text",
    [
        ((3, 3, 0, 0), "3 kernels compiled"),
        ((2, 0, 2, 0), "2 kernels loaded from disk"),
        ((3, 1, 1, 1), "1 kernel compiled, 1 loaded from disk, 1 already in memory"),
        ((4, 1, 0, 0), "1 kernel compiled, 3 more when first run"),
        ((1, 0, 0, 0), "0 kernels compiled, 1 more when first run"),
        ((0, 0, 0, 0), ""),
    ],
)
def test_kernel_counts_in_words(counts, text):
    job = progress.CompileJob("f", "cpu", background=True)
    job.planned, job.compiled, job.loaded, job.reused = counts
    assert job.kernels_text() == text


def _newton_sqrt(x):
    def cond(s):
        return np.abs(s[0] * s[0] - x) > 1e-12

    def body(s):
        return (0.5 * (s[0] + x / s[0]), s[1] + 1)

    root, _ = tg.while_loop(cond, body, (x, 0))
    return root


def _energy(v):
    return np.sum(np.tanh(np.outer(v, v))) + np.sum(v**3)


@pytest.mark.parametrize(
    "make, args, want",
    [
        (lambda: tg.grad(_newton_sqrt), (2.0,), lambda x: 0.5 / np.sqrt(x)),
        (lambda: tg.hessian(_energy), (np.linspace(0.1, 0.5, 4),), None),
        (lambda: tg.jacobian(lambda v: np.tanh(np.outer(v, v))), (np.ones(3),), None),
        (lambda: tg.vmap(tg.grad(_energy)), (np.ones((3, 4)),), None),
    ],
    ids=["while_loop grad", "hessian", "jacobian", "vmap(grad)"],
)
def test_every_transform_answers_its_first_call_on_the_interpreter(tiering, make, args, want):
    from tracegrad.runtime.program_store import _programs

    fun = make()
    first = fun(*args)
    runs = [p.run for p in _programs.values()]
    assert any(isinstance(run, tiered.Tiered) for run in runs), runs
    assert tg.wait_compiled(timeout=120)
    np.testing.assert_allclose(fun(*args), first, rtol=1e-12, atol=1e-14)
    if want is not None:
        np.testing.assert_allclose(first, want(*args), rtol=1e-12)


def test_an_example_never_reports_interpreted_steps_as_compiled(tiering, monkeypatch):
    """The examples' summary (examples/_common.py) counts the steps answered on the interpreter
    while the kernels compile apart from those that ran compiled programs."""
    from tracegrad.examples._common import Progress

    release = threading.Event()
    backend = get_backend("cpu")
    compile_program = backend.compile
    monkeypatch.setattr(
        backend, "compile", lambda graph: release.wait(60) and compile_program(graph)
    )
    g = tg.grad(_new_function(18), backend="cpu")
    lines: list[str] = []
    progress_ = Progress(lines.append, "demo", total=6, every=3, watch=[g])
    try:
        for i in range(1, 4):
            progress_.step(i, float(np.sum(g(np.ones(3) * i))))
    finally:
        release.set()
    assert tg.wait_compiled(timeout=120)
    for i in range(4, 7):
        progress_.step(i, float(np.sum(g(np.ones(3) * i))))
    progress_.done()
    assert "on the NumPy interpreter" in lines[1], lines
    summary = lines[-1]
    assert "2 steps on the NumPy interpreter" in summary, summary
    assert "over the 3 that ran compiled programs" in summary, summary
