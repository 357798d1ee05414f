"""Random user-level programs (tests/fuzz_programs.py, checked by tests/fuzz_checks.py) through
every transform on every backend.

Each program is plain NumPy code over a pytree of parameters, a data array, a static argument and
captured values (globals, a closure cell, a default argument, Python numbers). The checks compare
tg.jit / value_and_grad / grad / jacobian / hessian / grad-of-grad with plain NumPy, with central
finite differences in float64 (orders 1 to 3) and with the reference interpreter, and check that
results are fresh arrays, inputs are never modified, captured values changed between calls are
seen, threads agree and inputs of every layout and dtype give NumPy's answer.

The programs are fixed (seeded), small, and shared by the checks of one backend; the long campaign
is benchmarks/hunt.py.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import BACKENDS

import fuzz_checks as fc
import fuzz_programs as fp
import tracegrad as tg
from tracegrad.base.tree import flatten

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

# Programs checked on the reference interpreter with every check, at orders 1-3.
NUMPY_SEEDS = list(range(10))
# Fewer on the compiled backends: each program compiles a dozen kernels there.
COMPILED_SEEDS = {"cpu": [3, 7], "cuda": [7]}

VALUE_CHECKS = {
    "value",
    "vs-interpreter",
    "inputs",
    "static",
    "threads",
    "threads-cold",
    "grad",
    "grad-aux",
    "nested",
    "grad-float32",
    "jacobian",
    "hessian",
    "order3",
    "layout-device",
} | {f"layout-{n}" for n in fc.LAYOUTS}


def _assert_passes(seed: int, backend: str, checks: set[str], orders=(1, 2, 3)) -> None:
    spec = fp.generate(seed, n_stmts=6)
    failures, stats = fc.check_program(
        spec, ["numpy", backend] if backend != "numpy" else ["numpy"], orders, checks
    )
    ran = sum(n for k, n in stats.items() if k in checks)
    assert ran, f"no check applied to program {seed}"
    assert not failures, "\n".join(map(str, failures)) + "\n\n" + spec.source()


def _seeds(backend: str) -> list[int]:
    return NUMPY_SEEDS if backend == "numpy" else COMPILED_SEEDS[backend]


@pytest.mark.parametrize(("backend", "seed"), [(b, s) for b in BACKENDS for s in _seeds(b)])
def test_random_programs_values_and_derivatives(backend, seed):
    _assert_passes(seed, backend, VALUE_CHECKS)


@pytest.mark.parametrize(("backend", "seed"), [(b, s) for b in BACKENDS for s in _seeds(b)])
def test_random_programs_results_are_fresh(backend, seed):
    """No result shares memory with another, an input or an earlier call's result (device arrays
    included); changing a result in place changes no later result."""
    spec = fp.generate(seed, n_stmts=4, duplicate=True)
    failures, stats = fc.check_program(spec, [backend], (1,), {"fresh", "mutate", "fresh-device"})
    assert stats.get("fresh") and stats.get("mutate")
    assert not failures, "\n".join(map(str, failures)) + "\n\n" + spec.source()


CAPTURE_CHECKS = {
    "capture-global",
    "capture-inplace",
    "capture-number",
    "capture-closure",
    "capture-default",
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_programs_read_captured_values_at_call_time(backend):
    """A rebound global, an array changed in place, a Python number, a closure cell and a default
    argument changed after the first call give the new answer (value and gradient)."""
    checked: set[str] = set()
    for seed in _seeds(backend)[:3]:
        spec = fp.generate(seed, n_stmts=4, captures=True)
        failures, stats = fc.check_program(spec, [backend], (1,), CAPTURE_CHECKS)
        assert not failures, "\n".join(map(str, failures)) + "\n\n" + spec.source()
        checked |= {k for k in stats if k in CAPTURE_CHECKS}
    assert checked == CAPTURE_CHECKS


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_programs_jacobian_with_aux(backend):
    seed = _seeds(backend)[0]
    _assert_passes(seed, backend, {"jacobian-aux"}, orders=(1,))


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_programs_static_argument_type(backend):
    """A static 2 and 2.0 are different arguments: int parameters times 2.0 are floats."""
    specs = [fp.generate(seed, n_stmts=4) for seed in range(40)]
    specs = [s for s in specs if re.search(r"\bs\b", s.source().split("def f_loss")[0])]
    checked = 0
    for spec in specs[: 3 if backend == "numpy" else 1]:
        failures, stats = fc.check_program(spec, [backend], (1,), {"static-type"})
        assert not failures, "\n".join(map(str, failures)) + "\n\n" + spec.source()
        checked += stats.get("static-type", 0)
    assert checked


def test_large_arrays_agree_with_numpy():
    """A program over arrays of 10^5 elements: values and gradients on the cpu backend equal the
    interpreter's and NumPy's (large sizes take the chunked, multi-threaded kernel paths)."""
    backends = [b for b in BACKENDS if b != "cuda"] or ["numpy"]
    spec = fp.generate(6, n_stmts=5, large=True)
    assert max(np.size(x) for x in flatten(spec.params())[0]) >= 10**5
    failures, stats = fc.check_program(
        spec, backends, (1,), {"value", "vs-interpreter", "grad", "fresh", "inputs"}
    )
    assert stats.get("grad"), "the gradient was not checked"
    assert not failures, "\n".join(map(str, failures)) + "\n\n" + spec.source()


def test_the_checker_catches_a_wrong_gradient(monkeypatch):
    """The harness fails on a deliberately wrong derivative (so a green run means something)."""
    spec = fp.generate(1, n_stmts=4)
    real = tg.value_and_grad

    def wrong(*args, **kwargs):
        inner = real(*args, **kwargs)

        def call(*a):
            v, g = inner(*a)
            return v, fp._map_tree(g, lambda x: x * 1.001)

        return call

    monkeypatch.setattr(tg, "value_and_grad", wrong)
    failures, _ = fc.check_program(spec, ["numpy"], (1,), {"grad"})
    assert any(f.check == "grad" for f in failures)


def test_the_checker_catches_a_shared_result():
    spec = fp.generate(1, n_stmts=4)
    runner = fc.Runner(spec, "numpy")
    out = np.ones(3)
    assert runner._fresh(lambda *a: (out, out), 1.0) is not None
    assert runner._fresh(lambda *a: (np.ones(3), np.ones(3)), 1.0) is None
