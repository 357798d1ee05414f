"""The first call: tiered execution (tiered.py) and persisted programs (program_cache.py).

The rest of the suite runs with both off (conftest.py); here they are turned on per test.
"""

from __future__ import annotations

import itertools

import contextlib
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.runtime import program_cache, tiered
from tracegrad.runtime.backends import get_backend
from tracegrad.base.errors import BackendError
from tracegrad.runtime.program_store import _programs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code: str, env: dict) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **env},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _program_of(fun) -> object:
    """The program in the store that `fun` (a transformed function) was compiled to."""
    found = [p for key, p in _programs._programs.items() if key[0] == fun.spec]
    assert len(found) == 1
    return found[0]


def test_import_does_not_import_numba():
    out = _run(
        """
        import sys
        import numpy as np
        import tracegrad as tg
        before = "numba" in sys.modules
        tg.grad(lambda x: np.sum(np.sin(x)), backend="numpy")(np.ones(3))
        print(before, "numba" in sys.modules)
        """,
        {"TRACEGRAD_TIERED": "1"},
    )
    assert out == "False False"


def test_import_defers_what_a_first_gradient_does_not_need():
    out = _run(
        """
        import sys
        import numpy as np
        import tracegrad as tg
        deferred = ("numpy.random", "sysconfig", "tracegrad.api_transforms",
                    "tracegrad.transforms.control_flow", "tracegrad.checking", "tracegrad.transforms.custom",
                    "tracegrad.tracing.debugging", "tracegrad.transforms.remat", "logging")
        print(*[name in sys.modules for name in deferred])
        tg.grad(lambda x: np.sum(np.sin(x)), backend="numpy")(np.ones(3))
        print("numpy.random" in sys.modules)
        from tracegrad import scan, vmap
        from tracegrad.transforms.control_flow import scan as scan_
        from tracegrad.api_transforms import vmap as vmap_
        print(scan is scan_, vmap is vmap_, tg.check_grad.__module__, "checkpoint" in dir(tg))
        """,
        {"TRACEGRAD_TIERED": "1"},
    )
    assert out.splitlines() == [
        " ".join(["False"] * 9),
        "False",
        "True True tracegrad.checking True",
    ]


# What tracing brings in; `import tracegrad` and a call whose program is persisted load none of it.
_TRACING = (
    "tracegrad.trace",
    "tracegrad.numpy",
    "tracegrad.tracing.dispatch",
    "tracegrad.numpy_namespace",
    "tracegrad.linalg",
    "tracegrad.autodiff",
    "tracegrad.passes",
    "tracegrad.transforms",
    "tracegrad.calls.derive",
)


def test_import_and_a_persisted_program_load_no_tracing(tmp_path):
    code = f"""
        import sys
        import numpy as np
        import tracegrad as tg
        tracing = {_TRACING!r}
        print(*[name in sys.modules for name in tracing])

        def f(x):
            return np.sum(np.sin(x) * np.exp(-x * x))

        print(float(tg.grad(f)(np.linspace(-1.0, 1.0, 7)).sum()))
        print(*[name in sys.modules for name in tracing])
    """
    env = {
        "TRACEGRAD_PROGRAM_CACHE": "1",
        "TRACEGRAD_CACHE_DIR": str(tmp_path),
        "TRACEGRAD_TIERED": "1",
    }
    no = " ".join(["False"] * len(_TRACING))
    traced = _run(code, env).splitlines()
    after_tracing = " ".join(
        str(name != "tracegrad.numpy") for name in _TRACING
    )  # tg.numpy: on use
    assert traced[0] == no and traced[2] == after_tracing
    loaded = _run(code, env).splitlines()
    assert loaded == [no, traced[1], no]  # the same gradient, with nothing of tracing loaded


def test_a_warm_start_loads_neither_openssl_nor_dataclasses(tmp_path):
    # hashlib loads OpenSSL (4-6 ms) and a dataclass costs about 1 ms to create: a process whose
    # program is persisted needs neither (what NumPy itself imports is not counted)
    code = """
        import sys
        import numpy as np
        numpy_only = set(sys.modules)
        import threading
        import tracegrad as tg
        slow = {"hashlib", "_hashlib", "dataclasses"}
        print(sorted(slow & (set(sys.modules) - numpy_only)))

        # the compilation tiering starts in the background (which loads the cpu backend, whose
        # plan types are dataclasses) waits until the first result is counted: the question is
        # what the call path itself loads, and the thread would otherwise race the count
        held = []
        start = threading.Thread.start
        threading.Thread.start = lambda t: held.append(t) if t.name == "tracegrad-compile" else start(t)

        def f(x):
            return np.sum(np.tanh(x) * x)

        g = tg.grad(f)
        print(float(g(np.linspace(-1.0, 1.0, 5)).sum()), g.trace_count)
        print(sorted(slow & (set(sys.modules) - numpy_only)))
        threading.Thread.start = start
        for t in held:
            start(t)
    """
    env = {
        "TRACEGRAD_PROGRAM_CACHE": "1",
        "TRACEGRAD_CACHE_DIR": str(tmp_path),
        "TRACEGRAD_TIERED": "1",
    }
    traced = _run(code, env).splitlines()
    loaded = _run(code, env).splitlines()
    assert traced[0] == "[]"
    assert loaded == ["[]", loaded[1], "[]"]
    assert loaded[1].split()[0] == traced[1].split()[0]  # the same gradient
    assert loaded[1].split()[1] == "0"  # loaded, not traced


def test_a_first_trace_imports_no_logging_dataclasses_or_openssl():
    # tracing, differentiating and interpreting a new function: none of these slow imports
    # (on the numpy backend, so that no background compilation imports Numba meanwhile)
    out = _run(
        """
        import sys
        import numpy as np
        numpy_only = set(sys.modules)
        import tracegrad as tg

        def f(x):
            return np.sum(np.sin(x) * np.exp(-x * x) + np.tanh(x) * x**3)

        print(float(tg.grad(f, backend="numpy")(np.linspace(-1.0, 1.0, 5)).sum()))
        slow = {"hashlib", "_hashlib", "dataclasses", "logging", "glob", "copy"}
        print(sorted(slow & (set(sys.modules) - numpy_only)))
        """,
        {"TRACEGRAD_PROGRAM_CACHE": "0"},
    )
    assert out.splitlines()[1] == "[]"


def test_a_long_array_read_while_tracing_has_one_digest_with_or_without_hashlib(tmp_path):
    # its guard's digest is OpenSSL's SHA-256 (2.4 MB is over hashing.LONG) in a process that
    # imported hashlib first, and in one that did not: the second loads the first's program,
    # and a change of the array's contents means a trace
    def code(import_hashlib: bool, changed: bool) -> str:
        return f"""
            import sys
            {"import hashlib" if import_hashlib else ""}
            import numpy as np
            import tracegrad as tg
            IDX = (np.arange(300_000) * 7) % 1000  # int64: 2.4 MB
            if {changed}:
                IDX[0] = 5

            def f(x):
                return np.sum(x[IDX] ** 2)

            g = tg.grad(f)
            print(repr(float(g(np.linspace(0.0, 1.0, 1000)) @ np.arange(1000.0))), g.trace_count)
        """

    env = {
        "TRACEGRAD_PROGRAM_CACHE": "1",
        "TRACEGRAD_CACHE_DIR": str(tmp_path),
        "TRACEGRAD_TIERED": "1",
    }
    first, count = _run(code(True, False), env).split()
    assert count == "1"
    assert _run(code(False, False), env).split() == [first, "0"]
    changed, count = _run(code(False, True), env).split()
    assert count == "1" and changed != first


def test_sha256_while_another_thread_is_still_importing_hashlib(monkeypatch):
    # the background compilation imports Numba, which imports hashlib: until its body has run,
    # sys.modules holds a module without `sha256` (a persisted program was once read as damaged)
    import hashlib
    import types

    from tracegrad.base import hashing

    monkeypatch.setitem(sys.modules, "hashlib", types.ModuleType("hashlib"))
    assert hashing.sha256(b"tracegrad").hexdigest() == hashlib.sha256(b"tracegrad").hexdigest()


def test_sha256_races_a_thread_importing_hashlib():
    # the real race, in a fresh process: before the fix it failed in 4 of 5 runs
    out = _run(
        """
        import threading
        from tracegrad.base import hashing

        def importing():
            import hashlib  # what the background compilation's import of Numba does

        thread, failed, long = threading.Thread(target=importing), [], bytes(hashing.LONG)
        thread.start()
        while thread.is_alive() and not failed:
            try:
                hashing.sha256(b"tracegrad").hexdigest()
            except Exception as error:
                failed.append(repr(error))
        thread.join()
        import hashlib
        print(failed, hashing.sha256(long).hexdigest() == hashlib.sha256(long).hexdigest())
        """,
        {},
    )
    assert out == "[] True"


@pytest.mark.parametrize("size", [0, 3, 64, 1000, 1 << 20])
def test_sha256_gives_hashlibs_digest(size, monkeypatch):
    import hashlib

    from tracegrad.base import hashing

    data = np.arange(size, dtype=np.uint8).reshape(-1, 1 if size < 64 else 8)
    expected = hashlib.sha256(data).hexdigest()
    # as in a process that has not imported hashlib: CPython's SHA-256 below LONG bytes
    monkeypatch.delitem(sys.modules, "hashlib")
    made = hashing.sha256(data)
    assert made.hexdigest() == expected
    assert (type(made) is type(hashlib.sha256())) == (size >= hashing.LONG)
    made = hashing.sha256()
    made.update(data.tobytes())
    assert made.hexdigest() == expected


def test_persisted_program_with_linear_algebra_loads_before_tracing(tmp_path):
    # inv and det are added to the primitive table by tracegrad.linalg, which a process that
    # only loads persisted programs has not imported: reading the entry imports it
    code = """
        import sys
        import numpy as np
        import tracegrad as tg

        def f(a):
            return np.linalg.det(a) + np.sum(np.linalg.inv(a))

        a = np.array([[2.0, 0.5, 0.1], [0.3, 3.0, 0.2], [0.1, 0.4, 1.5]])
        g = tg.grad(f, backend="numpy")
        print(repr(g(a).tolist()), g.trace_count, "tracegrad.autodiff" in sys.modules)
    """
    env = {"TRACEGRAD_PROGRAM_CACHE": "1", "TRACEGRAD_CACHE_DIR": str(tmp_path)}
    first, second = _run(code, env), _run(code, env)
    grads, count, traced = second.rsplit(" ", 2)
    assert first.endswith("1 True") and (count, traced) == ("0", "False")
    assert grads == first.rsplit(" ", 2)[0]


def test_the_program_loader_knows_every_module_that_adds_primitives():
    # a persisted entry may name any primitive: the loader must be able to register each one
    out = _run(
        """
        import importlib, pkgutil
        import tracegrad
        from tracegrad import primitives as P
        from tracegrad.runtime import program_data
        program_data.load_extensions("not a primitive")  # loads every one
        known = set(P.PRIMITIVES)
        for m in pkgutil.walk_packages(tracegrad.__path__, "tracegrad."):
            if not m.name.startswith(("tracegrad.cli", "tracegrad.examples", "tracegrad.dask",
                                      "tracegrad.__main__")):
                importlib.import_module(m.name)
        print(sorted(set(P.PRIMITIVES) - known), "remat_barrier" in known)
        """,
        {},
    )
    assert out == "[] True"


def test_persisted_program_with_a_checkpoint_loads_without_tracing(tmp_path):
    code = """
        import numpy as np
        import tracegrad as tg

        def f(x):
            return np.sum(tg.checkpoint(lambda y: np.sin(np.cos(y)) * y)(x))

        g = tg.grad(f, backend="numpy")
        print(repr(g(np.linspace(-1.0, 1.0, 5)).tolist()), g.trace_count)
    """
    env = {"TRACEGRAD_PROGRAM_CACHE": "1", "TRACEGRAD_CACHE_DIR": str(tmp_path)}
    first, second = _run(code, env), _run(code, env)
    assert first.endswith(" 1") and second == first[:-1] + "0"  # the same gradient, loaded


def test_lazy_subpackages():
    out = _run(
        """
        import sys
        import tracegrad as tg
        print("tracegrad.numpy" in sys.modules, "numpy" in dir(tg), "linalg" in dir(tg))
        import tracegrad.numpy as tnp
        print(tg.numpy is tnp, tg.numpy.sin is __import__("numpy").sin, tg.linalg.__name__)
        """,
        {},
    )
    assert out.splitlines() == ["False True True", "True True tracegrad.linalg"]


def test_lazy_names_are_the_public_api():
    for name in tg.__all__:
        assert getattr(tg, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        tg.not_a_name  # noqa: B018


def test_random_draw_while_tracing_is_recorded_when_numpy_random_is_imported_late():
    # numpy.random is not imported by `import tracegrad`: a function that names `np.random`
    # before anything imported it still draws from the global generator on every call
    out = _run(
        """
        import sys
        import numpy as np
        import tracegrad as tg
        assert "numpy.random" not in sys.modules
        def f(x):
            return np.sum(x * np.random.normal(size=3))
        g = tg.grad(f, backend="numpy")
        first = g(np.ones(3))
        np.random.seed(5)
        again = g(np.ones(3))
        np.random.seed(5)
        print(np.array_equal(again, np.random.normal(size=3)), g.trace_count)
        """,
        {"TRACEGRAD_TIERED": "1"},
    )
    assert out == "True 1"


# ----------------------------------------------------------------------------------------------
# Tiered execution


def _loss(x):
    return np.sum(np.sin(x) * x + 0.5 * x * x)


def _settle() -> None:
    """Wait for background compilations, and forget their errors."""
    with contextlib.suppress(BackendError):
        tiered.wait_compiled(timeout=120)


@pytest.fixture
def tiering(monkeypatch):
    monkeypatch.setenv("TRACEGRAD_TIERED", "1")
    _settle()
    tg.clear_programs()
    yield
    _settle()
    tg.clear_programs()


def test_tiered_first_call_interprets_then_switches(tiering, monkeypatch):
    x = np.linspace(-2.0, 2.0, 301)
    g = tg.grad(_loss, backend="cpu")
    first = g(x)
    program = _program_of(g)
    assert isinstance(program.run, tiered.Tiered)
    np.testing.assert_array_equal(first, tg.grad(_loss, backend="numpy")(x))  # the interpreter's
    assert tg.wait_compiled(timeout=120) is True
    x0 = x.copy()
    after = [g(x) for _ in range(3)]
    assert not isinstance(program.run, tiered.Tiered)  # switched to the compiled program
    np.testing.assert_array_equal(x, x0)  # inputs untouched
    assert after[0] is not after[1]  # fresh results
    # the compiled program's results are those of the cpu backend without tiering
    monkeypatch.setenv("TRACEGRAD_TIERED", "0")
    tg.clear_programs()
    direct = tg.grad(_loss, backend="cpu")
    want = direct(x)
    assert not isinstance(_program_of(direct).run, tiered.Tiered)
    for got in after:
        np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(first, want, rtol=1e-12, atol=1e-12)


def test_tiered_results_never_alias_inputs_or_each_other(tiering):
    f = tg.jit(lambda x: (x, x * 2.0, x), backend="cpu")
    x = np.arange(3.0)
    for _ in range(3):  # interpreted, then (after the wait) compiled
        outs = f(x)
        assert not any(np.shares_memory(o, x) for o in outs)
        assert not np.shares_memory(outs[0], outs[2])
        np.testing.assert_array_equal(outs[1], 2.0 * x)
        assert tg.wait_compiled(timeout=120)
    assert not isinstance(_program_of(f).run, tiered.Tiered)


def test_tiered_large_program_compiles_before_returning(tiering, monkeypatch):
    monkeypatch.setattr(tiered, "MAX_WORK", 0)
    g = tg.grad(_loss, backend="cpu")
    g(np.ones(7))
    assert not isinstance(_program_of(g).run, tiered.Tiered)


@pytest.mark.parametrize("quiet", [None, 0.0])
def test_process_exits_cleanly_while_compiling(tmp_path, quiet):
    """The process waits for the step of a compilation under way, and exits cleanly; past
    EXIT_QUIET_S (forced to 0 here) it says, in one line, that it waits."""
    code = f"""
        import numpy as np
        import tracegrad as tg
        from tracegrad.runtime import tiered
        tiered.EXIT_QUIET_S = {quiet if quiet is not None else tiered.EXIT_QUIET_S}

        out = tg.grad(lambda x: np.sum(np.sin(x) * x), backend="cpu")(np.ones(5))
        print(float(out.sum()))
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "TRACEGRAD_TIERED": "1", "TRACEGRAD_CACHE_DIR": str(tmp_path)},
        timeout=300,
    )
    assert done.returncode == 0
    said = "tracegrad: the process waits for the compilation of grad("
    if quiet == 0.0 or done.stderr:  # by default, only when the step takes over a second
        assert done.stderr.startswith(said) and len(done.stderr.splitlines()) == 1, done.stderr
    assert float(done.stdout) == pytest.approx(5 * (np.sin(1.0) + np.cos(1.0)), rel=1e-12)


def test_tiered_off_by_environment(monkeypatch):
    monkeypatch.setenv("TRACEGRAD_TIERED", "0")
    assert not tiered.enabled()
    monkeypatch.setenv("TRACEGRAD_TIERED", "1")
    assert tiered.enabled()


def test_background_compile_error_surfaces(tiering, monkeypatch):
    backend = get_backend("cpu")

    def broken(graph):
        raise RuntimeError("kernel compiler exploded")

    monkeypatch.setattr(backend, "compile", broken)
    x = np.linspace(-1.0, 1.0, 11)
    g = tg.value_and_grad(_loss, backend="cpu")
    value, grad = g(x)  # the interpreter answers
    want_value, want_grad = tg.value_and_grad(_loss, backend="numpy")(x)
    assert value == want_value
    np.testing.assert_array_equal(grad, want_grad)
    with pytest.raises(BackendError, match="kernel compiler exploded") as info:
        tiered.wait_compiled(timeout=120)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert "value_and_grad(_loss)" in str(info.value) and "TRACEGRAD_TIERED=0" in str(info.value)
    for _ in range(2):  # every later call says so, never a result
        with pytest.raises(BackendError, match="failed in the background"):
            g(x)


def test_tiered_error_in_first_compiled_run_surfaces(tiering, monkeypatch):
    backend = get_backend("cpu")

    def compile_to_failing(graph):
        def run(arrays):
            raise MemoryError("no room for the kernels")

        return run

    monkeypatch.setattr(backend, "compile", compile_to_failing)
    g = tg.grad(_loss, backend="cpu")
    g(np.ones(5))
    assert _program_of(g).run.wait(timeout=120)
    with pytest.raises(BackendError, match="MemoryError: no room for the kernels"):
        g(np.ones(5))
    with pytest.raises(BackendError, match="no room"):  # reported once by wait_compiled
        tiered.wait_compiled(timeout=120)
    assert tiered.wait_compiled(timeout=120) is True


def test_tiered_arguments_changed_after_the_call_do_not_break_the_program(tiering):
    # the background run used the caller's own index array, changed once the call had
    # returned: its IndexError was taken for a failed compilation, raised by every later call
    f = tg.jit(lambda x, i: x[i] * 2.0, backend="cpu")
    x, idx = np.linspace(0.0, 1.0, 5), np.array([0, 1])
    np.testing.assert_array_equal(f(x, idx), [0.0, 0.5])
    idx[0] = 10  # the caller reuses its buffer
    assert tg.wait_compiled(timeout=120) is True
    np.testing.assert_array_equal(f(x, np.array([3, 1])), [1.5, 0.5])
    assert not isinstance(_program_of(f).run, tiered.Tiered)
    with pytest.raises(IndexError):  # a bad index of a later call is its own error
        f(x, np.array([0, 9]))


def test_tiered_background_run_meeting_a_data_error_still_switches(tiering, monkeypatch):
    backend = get_backend("cpu")
    real = backend.compile

    def compile_then_fail_once(graph):
        run, calls = real(graph), []

        def first_fails(arrays):
            calls.append(1)
            if len(calls) == 1:
                raise np.linalg.LinAlgError("Singular matrix")  # what changed data can do
            return run(arrays)

        return first_fails

    monkeypatch.setattr(backend, "compile", compile_then_fail_once)
    g = tg.grad(_loss, backend="cpu")
    want = tg.grad(lambda x: _loss(x), backend="numpy")(np.ones(5))
    g(np.ones(5))
    assert tg.wait_compiled(timeout=120) is True
    np.testing.assert_allclose(g(np.ones(5)), want, rtol=1e-12)
    assert not isinstance(_program_of(g).run, tiered.Tiered)


# ----------------------------------------------------------------------------------------------
# Persisted programs


@pytest.fixture
def persisted(monkeypatch, tmp_path):
    monkeypatch.setenv("TRACEGRAD_PROGRAM_CACHE", "1")
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", str(tmp_path / "cache"))
    tg.clear_programs()
    yield tmp_path / "cache" / "programs"
    tg.clear_programs()


def _entries(folder) -> list:
    return sorted(p for p in folder.iterdir() if p.suffix == ".tgp") if folder.exists() else []


def _make(source: str, namespace: dict | None = None):
    """A function `f` made from source, always at the same file and line: two versions differ
    only in their body."""
    ns = {"np": np} if namespace is None else namespace
    exec(compile(textwrap.dedent(source), "<user code>", "exec"), ns)
    return ns["f"]


def _calls(fun, x, backend="numpy"):
    """(result, traces) of a transformed call in a new process's state (the store emptied)."""
    tg.clear_programs()
    g = tg.grad(fun, backend=backend)
    before = g.trace_count
    out = g(x)
    return out, g.trace_count - before


def test_program_is_loaded_instead_of_traced(persisted):
    f = _make("def f(x):\n    return np.sum(np.sin(x) * x)\n")
    x = np.linspace(0.0, 1.0, 5)
    first, traces = _calls(f, x)
    assert traces == 1 and len(_entries(persisted)) == 1
    again, traces = _calls(f, x)
    assert traces == 0
    np.testing.assert_array_equal(again, first)
    # another signature is another entry
    _, traces = _calls(f, np.linspace(0.0, 1.0, 6))
    assert traces == 1 and len(_entries(persisted)) == 2


def test_changed_body_is_never_stale(persisted):
    x = np.linspace(0.5, 1.5, 4)
    f2 = _make("def f(x):\n    return np.sum(x * x)\n")
    f3 = _make("def f(x):\n    return np.sum(x * x * x)\n")
    got2, _ = _calls(f2, x)
    got3, traces = _calls(f3, x)
    assert traces == 1
    np.testing.assert_allclose(got2, 2 * x)
    np.testing.assert_allclose(got3, 3 * x * x)


def test_changed_closure_is_never_stale(persisted):
    def make(scale):
        def f(x):
            return np.sum(scale * x * x)

        return f

    x = np.linspace(0.5, 1.5, 4)
    got, traces = _calls(make(2.0), x)
    assert traces == 1
    np.testing.assert_allclose(got, 4 * x)
    got, traces = _calls(make(3.0), x)
    assert traces == 1
    np.testing.assert_allclose(got, 6 * x)
    got, traces = _calls(make(2.0), x)  # back to the first value: its entry is still good
    assert traces == 0
    np.testing.assert_allclose(got, 4 * x)


def test_changed_global_and_helper_are_never_stale(persisted):
    ns = {"np": np, "K": 2.0}
    exec("def helper(x):\n    return x * x\n", ns)
    f = _make("def f(x):\n    return np.sum(K * helper(x))\n", ns)
    x = np.linspace(0.5, 1.5, 4)
    got, _ = _calls(f, x)
    np.testing.assert_allclose(got, 4 * x)
    ns["K"] = 5.0
    got, traces = _calls(f, x)
    assert traces == 1
    np.testing.assert_allclose(got, 10 * x)
    exec("def helper(x):\n    return x * x * x\n", ns)  # same name, another body
    got, traces = _calls(f, x)
    assert traces == 1
    np.testing.assert_allclose(got, 15 * x * x)


def test_array_read_while_tracing_is_never_stale(persisted):
    ns = {"np": np, "A": np.array([1.0, 2.0])}
    f = _make("def f(x):\n    return np.sum(x * float(A.sum()))\n", ns)
    x = np.ones(3)
    got, _ = _calls(f, x)
    np.testing.assert_allclose(got, 3.0)
    ns["A"][:] = [4.0, 5.0]  # in place: the same object, new contents
    got, traces = _calls(f, x)
    assert traces == 1
    np.testing.assert_allclose(got, 9.0)


def test_damaged_entry_is_rebuilt(persisted):
    f = _make("def f(x):\n    return np.sum(np.exp(x))\n")
    x = np.linspace(0.0, 1.0, 4)
    want, _ = _calls(f, x)
    (entry,) = _entries(persisted)
    data = entry.read_bytes()
    for damage in (data[: len(data) // 2], data[:-3] + b"xyz", b"garbage"):
        entry.write_bytes(damage)
        got, traces = _calls(f, x)
        assert traces == 1  # not loaded: traced again
        np.testing.assert_array_equal(got, want)
        assert entry.read_bytes() == data  # and written anew
        _, traces = _calls(f, x)
        assert traces == 0


def test_program_cache_off(persisted, monkeypatch):
    monkeypatch.setenv("TRACEGRAD_PROGRAM_CACHE", "0")
    f = _make("def f(x):\n    return np.sum(x)\n")
    _calls(f, np.ones(2))
    assert _entries(persisted) == []
    _, traces = _calls(f, np.ones(2))
    assert traces == 1


def test_unsafe_programs_are_not_persisted(persisted):
    seen = []
    f = _make(
        "def f(x):\n    return np.sum(tg.tap(x * x, 'h', lambda n, c: seen.append(c)))\n",
        {"np": np, "tg": tg, "seen": seen},
    )
    _calls(f, np.ones(2))
    assert seen and _entries(persisted) == []  # a hook is code the entry could not hold


def test_program_persists_across_processes(tmp_path):
    code = """
        import sys
        import numpy as np
        import tracegrad as tg

        def f(x):
            return np.sum(np.tanh(x) * x)

        g = tg.grad(f, backend="numpy")
        print(float(g(np.linspace(0.0, 1.0, 5)).sum()), g.trace_count)
        print("tracegrad.base.cache" in sys.modules)
    """
    env = {"TRACEGRAD_PROGRAM_CACHE": "1", "TRACEGRAD_CACHE_DIR": str(tmp_path)}
    first, second = _run(code, env).split(), _run(code, env).split()
    assert first[1] == "1" and second[1] == "0"
    assert first[0] == second[0]
    assert len(list((tmp_path / "programs").glob("*.tgp"))) == 1
    assert second[2] == "False"  # a loaded program needs nothing of the kernel cache


def test_package_sources_are_every_source_file_in_order_of_path():
    from tracegrad.runtime import digests

    root = os.path.dirname(os.path.abspath(tg.__file__))
    expected = sorted(
        os.path.join(folder, name)
        for folder, _, names in os.walk(root)
        if not {"examples", "__pycache__"} & set(os.path.relpath(folder, root).split(os.sep))
        for name in names
        if name.endswith(".py")
    )
    found = digests.package_sources()
    assert [path for path, _, _ in found] == expected
    assert os.path.join(root, "runtime", "digests.py") in expected
    for path, size, mtime in found:
        st = os.stat(path)
        assert (size, mtime) == (st.st_size, st.st_mtime_ns)


def test_the_package_hash_is_kept_under_the_sources_sizes_and_times(tmp_path, monkeypatch):
    sources = [("/pkg/a.py", 10, 1), ("/pkg/b.py", 20, 2)]
    hashed = []

    def package_hash(paths):
        hashed.append(paths)
        return f"{len(hashed):032d}"

    monkeypatch.setattr(program_cache, "package_sources", lambda: list(sources))
    monkeypatch.setattr(program_cache, "package_hash", package_hash)
    monkeypatch.setattr(program_cache, "_package", [])

    def in_a_new_process() -> str:
        program_cache._package.clear()
        return program_cache._package_hash(str(tmp_path))

    first = in_a_new_process()
    assert hashed == [["/pkg/a.py", "/pkg/b.py"]]
    memo = tmp_path / program_cache.SOURCES_MEMO
    assert stat.S_IMODE(memo.stat().st_mode) == 0o600
    assert in_a_new_process() == first and len(hashed) == 1  # read, not hashed again
    sources[1] = ("/pkg/b.py", 20, 3)  # an edit: a new time
    second = in_a_new_process()
    assert len(hashed) == 2 and second != first
    sources.append(("/pkg/c.py", 5, 3))  # a new file
    assert in_a_new_process() != second and len(hashed) == 3
    for damage in ("garbage", memo.read_text()[:-1]):
        memo.write_text(damage)
        in_a_new_process()  # not believed: hashed again and written anew
        assert memo.read_text() != damage
    assert len(hashed) == 5
    memo.chmod(0o666)  # another user could have written it
    in_a_new_process()
    assert len(hashed) == 6
    monkeypatch.setattr(np, "__version__", "0.0-another")  # the same sources, another NumPy
    assert in_a_new_process() != first and len(hashed) == 7
    # a source newer than the import: what this process runs may not be what is on disk
    sources.append(("/pkg/d.py", 1, time.time_ns() + 10**12))
    assert in_a_new_process() is None and len(hashed) == 7


def test_an_edit_of_tracegrad_never_loads_a_stale_program(tmp_path):
    # a copy of the package whose sources change between processes, as in a developer's checkout
    shutil.copytree(
        os.path.join(ROOT, "tracegrad"),
        tmp_path / "tracegrad",
        ignore=shutil.ignore_patterns("__pycache__", "examples"),
    )
    code = """
        import numpy as np
        import tracegrad as tg

        def f(x):
            return np.sum(np.sin(x) * x)

        g = tg.grad(f, backend="numpy")
        print(float(g(np.linspace(0.0, 1.0, 5)).sum()), g.trace_count, tg.__file__)
    """
    env = {
        "TRACEGRAD_PROGRAM_CACHE": "1",
        "TRACEGRAD_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": str(tmp_path),
    }

    def run() -> tuple[str, str]:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            cwd=tmp_path,  # `-c` puts the working folder first on the path: the copy
            env={**os.environ, **env},
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        value, traces, where = done.stdout.split()
        assert where == str(tmp_path / "tracegrad" / "__init__.py")
        return value, traces

    first = run()
    assert first[1] == "1" and run() == (first[0], "0")
    source = tmp_path / "tracegrad" / "interpreter.py"
    source.write_text(source.read_text() + "\n# an edit\n")
    assert run() == (first[0], "1")  # another source: traced again
    stamp = source.stat().st_mtime_ns
    os.utime(source, ns=(stamp - 10**9, stamp - 10**9))  # another time, the same text
    assert run() == (first[0], "0")
    # a process that edits tracegrad after importing it persists nothing: its code is not the
    # code on disk, under whose hash the program would be filed
    code_before = code
    code = code.replace(
        "        g = tg.grad(",
        "        open(tg.__file__, 'a').write('# edited while running\\n')\n        g = tg.grad(",
    )
    assert run() == (first[0], "1")
    code = code_before
    assert run() == (first[0], "1")  # the edited package: traced, not loaded from that process
    assert run() == (first[0], "0")


def test_arguments_of_a_class_of_their_own_never_load_another_program(persisted):
    # the key on disk held a tree's kind and fields, not its class or static fields: a program
    # traced for Layer(w, "tanh") was loaded for Layer(w, "lin"), in the same process too
    import dataclasses
    from collections import namedtuple

    @dataclasses.dataclass(frozen=True)
    class Layer:
        w: np.ndarray
        activation: str = dataclasses.field(default="tanh", metadata={"static": True})

    def f(layer):
        return np.sum(np.tanh(layer.w)) if layer.activation == "tanh" else np.sum(layer.w * 100.0)

    jf = tg.jit(f, backend="numpy")
    assert jf(Layer(np.ones(2), "tanh")) == pytest.approx(2 * np.tanh(1.0))
    assert jf(Layer(np.ones(2), "lin")) == 200.0
    first, second = namedtuple("First", "w"), namedtuple("Second", "w")
    same = tg.jit(lambda p: p, backend="numpy")
    assert type(same(first(1.0))) is first and type(same(second(1.0))) is second
    assert _entries(persisted) == []  # such programs are not persisted
    plain = tg.jit(lambda d: d["a"] * 2.0, backend="numpy")
    plain({"a": np.ones(2)})
    assert len(_entries(persisted)) == 1  # a dict of arrays still is


def test_namedtuple_and_dataclass_results_persist_across_processes(tmp_path):
    # the output tree was persisted without its class: every later process failed to build the
    # result (np.linalg.slogdet's and eigh's results are namedtuples)
    code = """
        import dataclasses
        from collections import namedtuple

        import numpy as np
        import tracegrad as tg

        Pair = namedtuple("Pair", "a b")

        @dataclasses.dataclass
        class Both:
            x: np.ndarray
            y: np.ndarray

        def local_class(x):
            Local = namedtuple("Local", "u")
            return tg.jit(lambda x: Local(x + 1.0), backend="numpy")(x)

        x = np.linspace(1.0, 2.0, 3)
        fs = [
            tg.jit(lambda x: Pair(x * 2.0, np.sum(x)), backend="numpy"),
            tg.jit(lambda x: Both(x * 2.0, np.sum(x)), backend="numpy"),
            tg.jit(lambda x: np.linalg.slogdet(np.diag(x)), backend="numpy"),
        ]
        outs = [f(x) for f in fs] + [local_class(x)]
        print(repr(outs).replace(chr(10), ""), sum(f.trace_count for f in fs))
    """
    env = {"TRACEGRAD_PROGRAM_CACHE": "1", "TRACEGRAD_CACHE_DIR": str(tmp_path)}
    first, second = _run(code, env), _run(code, env)
    assert first.split()[-1] == "3" and second.split()[-1] == "0"  # loaded, not traced
    assert first.rsplit(" ", 1)[0] == second.rsplit(" ", 1)[0]
    assert "Pair(a=array" in second and "Both(x=array" in second and "SlogdetResult(" in second
    assert "Local(u=" in second  # a local class: traced again, never persisted
    assert len(list((tmp_path / "programs").glob("*.tgp"))) == 3


# ----------------------------------------------------------------------------------------------
# The thin MLP's outer product


def test_outer_product_is_an_exact_fused_product(backend):
    from tracegrad import passes

    def f(d, w):
        return d @ w.T  # (n, 1) @ (1, m): what the adjoint of `h @ w` for a column w computes

    d, w = np.linspace(-0.3, 1.0, 6)[:, None], np.linspace(0.5, 2.0, 4)[:, None]
    graph = passes.optimize(tg.make_ir(f, optimize=False)(d, w))
    assert not any(node.prim.name == "matmul" for node in graph.nodes)
    np.testing.assert_array_equal(tg.jit(f, backend=backend)(d, w), d @ w.T)
    loss = lambda d, w: np.sum(np.tanh(f(d, w)))
    want = tg.grad(loss, argnums=(0, 1), backend="numpy")(d, w)
    for got, ref in zip(tg.grad(loss, argnums=(0, 1), backend=backend)(d, w), want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-14)


def _thin_mlp(params, x, y):
    w1, b1, w2, b2, w3, b3 = params
    h = np.tanh(x @ w1 + b1)
    h = np.tanh(h @ w2 + b2)
    return np.mean(((h @ w3 + b3)[:, 0] - y) ** 2)


def test_thin_mlp_matrix_vector_products_are_fused_sums(backend, rng):
    shapes = [(3, 8), (8,), (8, 8), (8,), (8, 1), (1,)]
    params = tuple(rng.standard_normal(s) / 2 for s in shapes)
    x, y = rng.standard_normal((37, 3)), rng.standard_normal(37)
    g = tg.value_and_grad(_thin_mlp, backend=backend)
    if backend == "cpu":
        source = tg.make_kernels(tg.value_and_grad(_thin_mlp), backend="cpu")(params, x, y)
        plan = source.split("\n\n")[0]
        # h @ w2 and two adjoints; h @ w3 and h.T @ ct are sums in loops, and so are x @ w1 and
        # x.T @ ct (888 multiply-adds: passes.tiny_products)
        assert plan.count("# matmul ") == 3
    value, grads = g(params, x, y)
    want_value, want = tg.value_and_grad(_thin_mlp, backend="numpy")(params, x, y)
    np.testing.assert_allclose(value, want_value, rtol=1e-13)
    for got, ref in zip(grads, want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-13)
    # against finite differences of plain NumPy, for the last layer's weights
    eps, w3 = 1e-6, params[4]
    for i in range(w3.shape[0]):
        up, down = w3.copy(), w3.copy()
        up[i, 0] += eps
        down[i, 0] -= eps
        plus = _thin_mlp((*params[:4], up, params[5]), x, y)
        minus = _thin_mlp((*params[:4], down, params[5]), x, y)
        np.testing.assert_allclose(grads[4][i, 0], (plus - minus) / (2 * eps), rtol=1e-6, atol=1e-9)


def test_small_products_run_on_one_blas_thread(monkeypatch, rng):
    """With pooled products off (tests/test_products.py has them on), a program's small products
    go through its ThreadChoice."""
    from tracegrad.cpu import program as cpu_program
    from tracegrad.base import blas_threads

    monkeypatch.setattr(cpu_program, "POOLED_PRODUCTS", False)

    a, b = rng.standard_normal((33, 7)), rng.standard_normal((7, 5))
    single = blas_threads.single_threaded()
    np.testing.assert_array_equal(single(a, b), a @ b)
    out = np.empty((33, 5))
    single(a, b, out=out)
    np.testing.assert_array_equal(out, a @ b)
    blas = blas_threads._openblas()
    if blas is not None:  # NumPy's own OpenBLAS: the thread count is restored
        before = blas[0]()
        single(a, b)
        assert blas[0]() == before
    # a small product (5,120 multiply-adds: above the tiny ones written as sums) on one thread
    source = tg.make_kernels(tg.grad(lambda w, x: np.sum(np.tanh(x @ w))), backend="cpu")(
        rng.standard_normal((16, 8)), rng.standard_normal((40, 16))
    )
    assert "_matmul1(" in source


class _FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _program_of_settings(choice, clock, one_s: float, all_s: float, log: list):
    """A stand-in program whose calls take `one_s` or `all_s` on the fake clock, by setting."""

    def run(args):
        log.append(choice.one)
        clock.now += one_s if choice.one else all_s
        return args

    return choice.timed(run)


@pytest.mark.parametrize("one_faster", [True, False])
def test_blas_thread_choice_follows_the_faster_setting(one_faster):
    from tracegrad.base import blas_threads

    clock = _FakeClock()
    choice = blas_threads.ThreadChoice(clock)
    log: list = []
    fast, slow = 0.001, 0.011
    run = _program_of_settings(choice, clock, *((fast, slow) if one_faster else (slow, fast)), log)
    for k in range(1 + 2 * choice.EXPLORE):  # the untimed first call, then both settings
        assert run(k) == k
    assert choice.choices == [one_faster] and choice.one == one_faster
    assert log[0] is True and sorted(log[1:]) == [False] * 3 + [True] * 3  # alternated
    for _ in range(choice.KEEP_CALLS):  # kept: no call tries the other setting
        run(0)
    assert set(log[1 + 2 * choice.EXPLORE :]) == {one_faster}


def test_blas_thread_choice_is_checked_again_when_the_machine_changes():
    from tracegrad.base import blas_threads

    clock = _FakeClock()
    choice = blas_threads.ThreadChoice(clock)
    times = {True: 0.001, False: 0.005}  # loaded: one thread wins

    def run(args):
        clock.now += times[choice.one]

    timed = choice.timed(run)
    for _ in range(1 + 2 * choice.EXPLORE):
        timed(None)
    assert choice.choices == [True]
    times[True], times[False] = 0.004, 0.002  # the machine is idle now: all threads win
    calls = 0
    while len(choice.choices) < 2:
        timed(None)
        calls += 1
        assert calls < 10_000, "never checked again"
    assert choice.choices == [True, False] and choice.one is False
    assert calls >= choice.KEEP_CALLS and clock.now >= choice.KEEP_S


def test_blas_thread_choice_checks_less_often_while_it_holds():
    from tracegrad.base import blas_threads

    clock = _FakeClock()
    choice = blas_threads.ThreadChoice(clock)
    timed = choice.timed(lambda args: setattr(clock, "now", clock.now + 0.001))
    checked_at = []
    while len(choice.choices) < 6:
        before = len(choice.choices)
        timed(None)
        if len(choice.choices) > before:
            checked_at.append(clock.now)
    gaps = [b - a for a, b in itertools.pairwise(checked_at)]
    assert all(g2 > 1.5 * g1 for g1, g2 in itertools.pairwise(gaps)), gaps
    assert gaps[-1] <= choice.MAX_KEEP_S + 1


def test_blas_thread_choice_gives_the_same_products_either_way(rng):
    from tracegrad.base import blas_threads

    choice = blas_threads.ThreadChoice()
    a, b = rng.standard_normal((300, 64)), rng.standard_normal((64, 64))
    results = []
    for one in (True, False):
        choice.one = one
        out = np.empty((300, 64))
        choice.matmul(a, b, out=out)
        results += [out, choice.matmul(a, b)]
    for r in results:
        np.testing.assert_allclose(r, a @ b, rtol=1e-13, atol=1e-13)
    blas = blas_threads._openblas()
    if blas is not None:
        before = blas[0]()
        choice.one = True
        choice.matmul(a, b)
        assert blas[0]() == before  # one thread only for the call


def test_compiled_program_makes_its_blas_choice_from_its_calls(monkeypatch, rng):
    from tracegrad.cpu import program as cpu_program
    from tracegrad.base import blas_threads

    monkeypatch.setattr(cpu_program, "POOLED_PRODUCTS", False)

    if blas_threads._openblas() is None:
        pytest.skip("NumPy without its bundled OpenBLAS: products run as NumPy runs them")
    monkeypatch.setenv("TRACEGRAD_TIERED", "0")
    made: list = []
    real = blas_threads.ThreadChoice

    class Recorded(real):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            made.append(self)

    monkeypatch.setattr(blas_threads, "ThreadChoice", Recorded)
    w, x = rng.standard_normal((16, 8)), rng.standard_normal((40, 16))  # above TINY_PRODUCT
    g = tg.grad(lambda w, x: np.sum(np.tanh(x @ w)), backend="cpu")
    want = tg.grad(lambda w, x: np.sum(np.tanh(x @ w)), backend="numpy")(w, x)
    for _ in range(1 + 2 * real.EXPLORE):
        np.testing.assert_allclose(g(w, x), want, rtol=1e-12)
    assert made and made[-1].choices  # it timed its calls and chose


def test_blas_thread_choice_under_concurrent_calls(monkeypatch, rng):
    """Calls from several threads while the program is still timing its settings: every result
    right, and the OpenBLAS thread count restored afterwards."""
    from concurrent.futures import ThreadPoolExecutor

    from tracegrad.cpu import program as cpu_program
    from tracegrad.base import blas_threads

    monkeypatch.setattr(cpu_program, "POOLED_PRODUCTS", False)

    monkeypatch.setenv("TRACEGRAD_TIERED", "0")
    w, x = rng.standard_normal((16, 8)), rng.standard_normal((64, 16))
    g = tg.grad(lambda w, x: np.sum(np.tanh(x @ w) ** 2), backend="cpu")
    want = tg.grad(lambda w, x: np.sum(np.tanh(x @ w) ** 2), backend="numpy")(w, x)
    blas = blas_threads._openblas()
    before = blas[0]() if blas is not None else None
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: g(w, x), range(40)))
    for got in results:
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    if blas is not None:
        assert blas[0]() == before


def test_same_function_under_two_names_is_never_stale(persisted):
    def make(scale):
        def inner(x):
            return scale * x

        return inner

    ns = {"np": np}
    f = _make("def f(x):\n    return np.sum(a(x) * b(x))\n", ns)
    ns["a"] = ns["b"] = make(2.0)  # one object under two names: the second is an identity guard
    x = np.linspace(0.5, 1.5, 4)
    got, _ = _calls(f, x)
    np.testing.assert_allclose(got, 8 * x)
    ns["b"] = make(3.0)  # same code, another closure
    got, traces = _calls(f, x)
    assert traces == 1
    np.testing.assert_allclose(got, 12 * x)


def test_entries_per_function_are_bounded(persisted, monkeypatch):

    monkeypatch.setattr(program_cache, "PER_KEY", 2)
    ns = {"np": np, "K": 0.0}
    f = _make("def f(x):\n    return np.sum(K * x)\n", ns)
    for k in range(4):  # one entry per value of K, under one prefix
        ns["K"] = float(k)
        got, _ = _calls(f, np.ones(2))
        np.testing.assert_allclose(got, [k, k])
    assert len(_entries(persisted)) == 2


def test_tiered_programs_that_draw_keep_numpys_sequence_across_the_switch(tiering):
    """The background compile must not run a program that draws: that run would take one draw
    from the user's generator, and every later call would get the numbers one draw late."""
    rs = np.random.RandomState(0)

    def f(x):
        return np.mean(np.sum(x * rs.randn(50, 3), axis=1))

    g = tg.grad(f, backend="cpu")
    ref = np.random.RandomState(0)
    got = [g(np.ones(3))]
    assert tg.wait_compiled(timeout=120) is True
    got += [g(np.ones(3)) for _ in range(3)]
    for value in got:  # each call draws once, in order, exactly as the plain function would
        np.testing.assert_allclose(value, ref.randn(50, 3).mean(axis=0), rtol=1e-12)
