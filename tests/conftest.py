"""Shared fixtures: the backend parameterisation every execution test runs under.

`BACKENDS` lists the backends the suite runs on. A test that takes the `backend` fixture runs once
per backend; TRACEGRAD_TEST_BACKENDS=numpy,cpu narrows the list.
"""

import os

import numpy as np
import pytest

from tracegrad import ir, passes

BACKENDS = ["numpy"]
_selected = os.environ.get("TRACEGRAD_TEST_BACKENDS")
if _selected:
    BACKENDS = [b for b in _selected.split(",") if b]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


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
    monkeypatch.setattr(passes, "optimize", lambda g, *a, **k: ir.verify(optimize(ir.verify(g), *a, **k)))
