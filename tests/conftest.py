"""Shared fixtures: the backend parameterisation every execution test runs under.

`BACKENDS` lists the backends the suite runs on. A test that takes the `backend` fixture runs once
per backend; TRACEGRAD_TEST_BACKENDS=numpy,cpu narrows the list.

The cuda backend runs for real everywhere: on a machine without an NVIDIA GPU, Numba's CUDA
simulator is switched on here, before anything imports numba, and the cuda tests use small shapes.
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
        return "cuda backend: not tested (numba-cuda is not installed)"
    where = "Numba's CUDA simulator (no GPU here)" if CUDA_SIMULATED else "the GPU"
    return f"cuda backend: on {where}"


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
