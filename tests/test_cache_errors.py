"""An error while running a cpu kernel is the call's own error, not a damaged cache entry: it is
raised as it is, nothing is compiled again and the disk cache keeps its healthy entry. (A damaged
entry, which is compiled again, is tests/test_cache.py's
`test_damaged_compiled_code_is_compiled_again`.)"""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

from helpers import build
from tracegrad import codegen_cpu, passes
from tracegrad.base import cache
from tracegrad import primitives as P

F64 = np.dtype(np.float64)


@pytest.fixture(autouse=True)
def _numba(numba_compiler):
    """These are tests of Numba's cached machine code (see conftest.numba_compiler)."""


@pytest.fixture
def cached_program(tmp_path, monkeypatch):
    """A cpu program whose kernel module comes from a warm disk cache, not called yet (its first
    call loads Numba's cached machine code), and the cache's compiled files as they were."""
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "_modules", {})
    graph = passes.optimize(
        build([((5,), F64)], lambda x: P.reduce_sum(P.mul(P.unary(P.cos_p, x), x)))
    )
    codegen_cpu.build(graph)([np.ones(5)])  # compiles and writes the cache entry
    monkeypatch.setattr(cache, "_modules", {})  # a new process, as far as the cache can tell
    program = codegen_cpu.build(graph)
    assert all(call.module._TG_CACHE for call in program.calls.values())
    pycache = tmp_path / "cache" / "kernels" / "__pycache__"
    files = {p.name: p.read_bytes() for p in pycache.iterdir()}
    assert any(name.endswith(".nbc") for name in files)

    def no_recompile(*args, **kwargs):
        raise AssertionError("a healthy cache entry was compiled again")

    monkeypatch.setattr(cache, "reload_without_compiled", no_recompile)
    return program, pycache, files


def _entries(pycache) -> dict:
    return {p.name: p.read_bytes() for p in pycache.iterdir()}


def test_a_memory_error_while_running_stays_a_memory_error(cached_program, caplog):
    program, pycache, files = cached_program

    def out_of_memory(*args, **kwargs):
        raise MemoryError("no room for the result")

    program._namespace["_empty"] = out_of_memory  # the driver's allocation of the result
    program._bind()
    with (
        caplog.at_level(logging.WARNING, logger="tracegrad"),
        pytest.raises(MemoryError, match="no room for the result"),
    ):
        program([np.ones(5)])
    assert "compiling it again" not in caplog.text
    assert _entries(pycache) == files


def test_an_argument_numba_cannot_type_is_not_a_damaged_cache_entry(cached_program, caplog):
    from numba.core.errors import TypingError

    program, pycache, files = cached_program
    with caplog.at_level(logging.WARNING, logger="tracegrad"), pytest.raises(TypingError):
        program([np.array([1.0, 2.0, 3.0, 4.0, 5.0], dtype=object)])
    assert "compiling it again" not in caplog.text
    assert _entries(pycache) == files
    # the program still works on a good argument, from the same cache entry
    (value,) = program([np.ones(5)])
    np.testing.assert_allclose(value, 5 * np.cos(1.0))


def test_trimming_skips_a_file_another_process_just_removed(tmp_path, monkeypatch):
    """Numba writes `k_<key>...nbi.tmp.<id>` files in __pycache__ and renames them: one that is
    gone between listing the directory and reading its size is skipped, not a crash."""
    directory = tmp_path / "kernels"
    (directory / "__pycache__").mkdir(parents=True)
    (directory / "k_1.py").write_text("x" * 1000)
    vanishing = directory / "__pycache__" / "k_1.kernel-1.py311.nbi.tmp.0123"
    vanishing.write_bytes(b"y" * 10)
    real_scandir = os.scandir

    def scandir(path):
        entries = list(real_scandir(path))
        if os.path.basename(path) == "__pycache__" and vanishing.exists():
            vanishing.unlink()  # after the listing, before the stat
        return iter(entries)

    monkeypatch.setattr(cache.os, "scandir", scandir)
    monkeypatch.setenv("TRACEGRAD_CACHE_MAX_MB", "0")
    assert cache.trim(str(directory), now=1e12) == 1  # the module is still evicted
    assert not (directory / "k_1.py").exists()
