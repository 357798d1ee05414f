"""Shared fixtures: the backend parameterisation every execution test runs under.

`BACKENDS` lists the backends the suite runs on. A test that takes the `backend` fixture runs once
per backend; TRACEGRAD_TEST_BACKENDS=numpy,cpu narrows the list.

The cuda backend runs for real everywhere: on a machine without an NVIDIA GPU, Numba's CUDA
simulator is switched on here, before anything imports numba, and the cuda tests use small shapes.

The suite keeps the kernels it compiles in a folder of its own (`SUITE_CACHE_DIR`), never in the
user's TRACEGRAD_CACHE_DIR: a second run loads them from there (the warm run), and deleting it gives
a cold run. TRACEGRAD_TEST_CACHE_DIR names another folder. A failure is named as it happens, not
only in the summary at the end.
"""

import ctypes.util
import importlib.util
import os
import sys


def _nvidia_gpu_present() -> bool:
    """An NVIDIA driver is installed (checked without importing numba.cuda)."""
    return os.path.exists("/proc/driver/nvidia") or ctypes.util.find_library("cuda") is not None


if "NUMBA_ENABLE_CUDASIM" not in os.environ and not _nvidia_gpu_present():
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    if "numba" in sys.modules:  # pytest's warning filters (pyproject.toml) import numba.core first
        from numba.core import config

        config.reload_config()
CUDA_SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
# Tests run each backend for real from the first call: no tiered execution (whose first calls
# run on the interpreter), no programs persisted between runs (trace counts stay exact).
# tests/test_first_call.py turns them on where it tests them.
os.environ.setdefault("TRACEGRAD_TIERED", "0")
os.environ.setdefault("TRACEGRAD_PROGRAM_CACHE", "0")
# Set before anything reads it (every xdist worker inherits it from the controller).
SUITE_CACHE_DIR = os.path.abspath(
    os.environ.get("TRACEGRAD_TEST_CACHE_DIR")
    or os.path.join(os.path.dirname(os.path.dirname(__file__)), ".pytest_cache", "tracegrad-cache")
)
os.environ["TRACEGRAD_CACHE_DIR"] = SUITE_CACHE_DIR

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from tracegrad import ir, passes  # noqa: E402

# Tests enumerate the primitive table while they are collected: load every module that adds to
# it (`import tracegrad` leaves them for the first trace), so the table is whole from the start.
from tracegrad.linalg import factorisations  # noqa: E402, F401
from tracegrad.transforms import loops, scan  # noqa: E402, F401

BACKENDS = ["numpy", "cpu"]
if importlib.util.find_spec("numba_cuda") is not None:
    BACKENDS.append("cuda")
_selected = os.environ.get("TRACEGRAD_TEST_BACKENDS")
if _selected:
    BACKENDS = [b for b in _selected.split(",") if b]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def pytest_report_header(config):
    if "cuda" not in BACKENDS:
        cuda = "cuda backend: not tested (numba-cuda is not installed)"
    else:
        where = "Numba's CUDA simulator (no GPU here)" if CUDA_SIMULATED else "the GPU"
        cuda = f"cuda backend: on {where}"
    warm = False
    if os.path.isdir(SUITE_CACHE_DIR):
        with os.scandir(SUITE_CACHE_DIR) as entries:  # closed: an open one warns, and warnings fail
            warm = any(entries)
    run = "warm: kernels from the last run" if warm else "cold: every kernel is compiled"
    return [
        cuda,
        f"kernel cache: {SUITE_CACHE_DIR} ({run}; "
        "on 2 cores a cold run takes 11-20 minutes, a warm one about 5-7)",
    ]


def pytest_runtest_logreport(report):
    """Name a failing test on its own line as soon as it fails (in the process that prints: the
    xdist controller, or the only process), so a long run is not dots until the summary."""
    if not report.failed or _PLUGINS is None:
        return
    reporter = _PLUGINS.get_plugin("terminalreporter")
    if reporter is None:
        return
    stage = "" if report.when == "call" else f" (in {report.when})"
    reporter.ensure_newline()
    reporter.write_line(f"FAILED {report.nodeid}{stage}", red=True, bold=True)


_PLUGINS = None


def pytest_configure(config):
    global _PLUGINS
    if not hasattr(config, "workerinput"):  # an xdist worker prints nothing itself
        _PLUGINS = config.pluginmanager


@pytest.fixture
def numba_compiler(monkeypatch):
    """The cpu backend compiling its kernels with Numba (TRACEGRAD_CPU_COMPILER=numba), for the
    tests of what only that compiler has: the Python source Numba compiles, Numba's module
    cache, the compiled run of pooled programs (cpu/runner.py) and its row pipelines.
    tests/test_llvm_kernels.py checks that both compilers give the same numbers."""
    monkeypatch.setenv("TRACEGRAD_CPU_COMPILER", "numba")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(autouse=True)
def _verify_every_graph(monkeypatch):
    """Run the IR verifier on every graph any test builds (after every transform)."""
    original = ir.Builder.graph

    def checked(self, outputs):
        return ir.verify(original(self, outputs))

    monkeypatch.setattr(ir.Builder, "graph", checked)
    optimize = passes.optimize
    monkeypatch.setattr(
        passes, "optimize", lambda g, *a, **k: ir.verify(optimize(ir.verify(g), *a, **k))
    )
