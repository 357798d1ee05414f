"""The kernel cache on disk: private, atomic, never trusting a damaged or foreign entry, and what
lets a second process skip Numba's compilation."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.base import cache, cache_files


@pytest.fixture(autouse=True)
def _numba(numba_compiler):
    """These are tests of the Numba compiler's machinery (see conftest.numba_compiler)."""


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def f(x):
    return np.sum(np.cos(x) * x)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """A new cache directory, and no kernel modules remembered in memory."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", str(directory))
    monkeypatch.setattr(cache, "_modules", {})
    monkeypatch.setattr(cache, "_loaded_hooks", [])  # Numba modules only, as counted
    tg.clear_programs()
    yield directory
    tg.clear_programs()


def kernel_files(directory) -> list:
    return sorted((directory / "kernels").glob("k_*.py"))


def test_directory_and_entries_are_private(fresh_cache):
    np.testing.assert_allclose(tg.grad(f, backend="cpu")(np.ones(3)), np.cos(1) - np.sin(1))
    assert stat.S_IMODE(fresh_cache.stat().st_mode) == 0o700
    assert stat.S_IMODE((fresh_cache / "kernels").stat().st_mode) == 0o700
    (module,) = kernel_files(fresh_cache)
    assert stat.S_IMODE(module.stat().st_mode) == 0o600
    info = tg.cache_info()
    assert info.directory == str(fresh_cache) and info.entries == 1 and info.bytes > 0
    assert info.loaded == 1 and info.programs >= 1


def _gradient_with_cache_at(path, monkeypatch, caplog) -> None:
    """f's gradient with the kernel cache set to `path`, nothing loaded or refused before."""
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", str(path))
    monkeypatch.setattr(cache, "_modules", {})
    monkeypatch.setattr(cache_files, "refused", set())
    with caplog.at_level(logging.WARNING, logger="tracegrad"):
        out = tg.grad(f, backend="cpu")(np.ones(2))
    np.testing.assert_allclose(out, np.cos(1) - np.sin(1))


def test_a_directory_others_can_write_to_is_refused(tmp_path, monkeypatch, caplog):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    _gradient_with_cache_at(shared, monkeypatch, caplog)
    assert list(shared.iterdir()) == []  # nothing written there: kernels compiled in memory
    assert "not using the disk cache" in caplog.text
    assert tg.cache_info().directory is None


def test_a_damaged_module_is_rewritten_not_imported(fresh_cache, monkeypatch):
    tg.grad(f, backend="cpu")(np.ones(2))
    (module,) = kernel_files(fresh_cache)
    good = module.read_text()
    module.write_text(good + "\nraise SystemExit('this must never run')\n")
    monkeypatch.setattr(cache, "_modules", {})
    tg.clear_programs()
    np.testing.assert_allclose(tg.grad(f, backend="cpu")(np.ones(2)), np.cos(1) - np.sin(1))
    assert module.read_text() == good


def test_an_entry_others_can_write_to_is_replaced(fresh_cache, monkeypatch):
    tg.grad(f, backend="cpu")(np.ones(2))
    (module,) = kernel_files(fresh_cache)
    module.chmod(0o666)
    monkeypatch.setattr(cache, "_modules", {})
    tg.clear_programs()
    tg.grad(f, backend="cpu")(np.ones(2))
    assert stat.S_IMODE(module.stat().st_mode) == 0o600


def test_off_keeps_kernels_in_memory(monkeypatch):
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", "off")
    monkeypatch.setattr(cache, "_modules", {})
    monkeypatch.setattr(cache, "_loaded_hooks", [])  # Numba modules only, as counted
    tg.clear_programs()
    np.testing.assert_allclose(tg.grad(f, backend="cpu")(np.ones(2)), np.cos(1) - np.sin(1))
    assert tg.cache_info().directory is None and tg.cache_info().loaded == 1
    tg.clear_programs()


def test_clear_cache_empties_disk_and_memory(fresh_cache):
    tg.grad(f, backend="cpu")(np.ones(2))
    assert kernel_files(fresh_cache)
    tg.clear_cache()
    info = tg.cache_info()
    assert info.entries == 0 and info.loaded == 0 and info.programs == 0
    assert not list((fresh_cache / "kernels" / "__pycache__").glob("k_*"))


# ----------------------------------------------------------------------------------------------
# Several processes

CHILD = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    t0 = time.perf_counter()
    import tracegrad as tg
    from tracegrad.runtime.program_store import _programs
    def f(x):
        return np.sum(np.cos(x) * x)
    g = tg.grad(f, backend="cpu")
    out = g(np.ones(3))
    program = next(iter(_programs.values())).run
    hits = misses = 0
    for call in program.calls.values():
        hits += sum(call.module.kernel.stats.cache_hits.values())
        misses += sum(call.module.kernel.stats.cache_misses.values())
    print(json.dumps({"value": out.tolist(), "hits": hits, "misses": misses}))
    """
)


def run_child(directory, extra_env=None):
    env = dict(os.environ, TRACEGRAD_CACHE_DIR=str(directory), **(extra_env or {}))
    return subprocess.Popen(
        [sys.executable, "-c", CHILD],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def result(proc) -> dict:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_a_second_process_loads_compiled_kernels(tmp_path):
    directory = tmp_path / "cache"
    first = [run_child(directory), run_child(directory)]  # two processes compile at once
    for r in map(result, first):
        np.testing.assert_allclose(r["value"], [np.cos(1) - np.sin(1)] * 3)
    assert len(kernel_files(directory)) == 1
    second = result(run_child(directory))
    assert second["misses"] == 0 and second["hits"] >= 1  # Numba compiled nothing


def test_damaged_compiled_code_is_compiled_again(tmp_path):
    directory = tmp_path / "cache"
    result(run_child(directory))
    compiled = list((directory / "kernels" / "__pycache__").glob("k_*.nbc"))
    assert compiled
    for path in compiled:
        path.write_bytes(b"\x80\x04garbage")
    r = result(run_child(directory))
    np.testing.assert_allclose(r["value"], [np.cos(1) - np.sin(1)] * 3)


def test_the_disk_cache_is_trimmed_to_its_size_limit_least_recently_used_first(
    tmp_path, monkeypatch
):
    directory = tmp_path / "kernels"
    (directory / "__pycache__").mkdir(parents=True)
    now = 1_000_000.0
    for i, age_hours in enumerate([5, 4, 3, 2, 0.5]):  # k_0 is the least recently used
        module = directory / f"k_{i}.py"
        module.write_text("x" * 600_000)
        (directory / "__pycache__" / f"k_{i}.kernel-1.nbc").write_bytes(b"y" * 400_000)
        os.utime(module, (now - age_hours * 3600, now - age_hours * 3600))
    monkeypatch.setenv("TRACEGRAD_CACHE_MAX_MB", "2.5")  # 5 entries of ~1 MB each
    deleted = cache.trim(str(directory), now=now)
    left = sorted(p.name for p in directory.glob("k_*.py"))
    assert deleted == 3 and left == ["k_3.py", "k_4.py"]
    assert sorted(p.name for p in (directory / "__pycache__").iterdir()) == [
        "k_3.kernel-1.nbc",
        "k_4.kernel-1.nbc",
    ]
    # entries used within the hour are kept even above the limit
    monkeypatch.setenv("TRACEGRAD_CACHE_MAX_MB", "0.1")
    assert cache.trim(str(directory), now=now) == 1
    assert [p.name for p in directory.glob("k_*.py")] == ["k_4.py"]


def test_a_file_where_the_cache_folder_should_be_is_reported(tmp_path, monkeypatch, caplog):
    occupied = tmp_path / "a_file"
    occupied.write_text("not a folder")
    _gradient_with_cache_at(occupied, monkeypatch, caplog)
    assert "not using the disk cache" in caplog.text
    assert occupied.read_text() == "not a folder"


def test_a_process_trims_after_its_first_write_then_every_few_writes(tmp_path, monkeypatch):
    """Trimming lists the whole folder: once per write made compiling many kernels quadratic."""
    calls = []
    monkeypatch.setattr(cache, "trim", lambda directory, now=None: calls.append(directory) or 0)
    monkeypatch.setattr(cache, "_written", {})
    folder, other = str(tmp_path / "a"), str(tmp_path / "b")
    cache.trim_after_write(folder, 10)
    assert calls == [folder]  # the first write trims
    for _ in range(cache.TRIM_EVERY_WRITES - 1):
        cache.trim_after_write(folder, 10)
    assert calls == [folder]
    cache.trim_after_write(folder, 10)
    assert calls == [folder, folder]  # the 64th write since
    cache.trim_after_write(other, 10)
    assert calls[-1] == other  # folders are counted apart
    monkeypatch.setenv("TRACEGRAD_CACHE_MAX_MB", "1")
    cache.trim_after_write(folder, 2**20 // cache.TRIM_FRACTION)  # a large write trims at once
    assert calls[-1] == folder and len(calls) == 4
