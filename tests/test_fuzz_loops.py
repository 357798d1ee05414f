"""Random loop programs (tests/fuzz_loops.py) on every backend: each loop form a user writes
(plain `for` loops rolled or left unrolled, tg.fori_loop, tg.scan, tg.while_loop, nested loops)
with a random body, its value against plain NumPy and its derivatives of orders 1-3 against
central differences. Fixed seeds here; the long campaign is benchmarks/hunt_loops.py."""

from __future__ import annotations

import pytest
from conftest import BACKENDS

import fuzz_loops as fl
from tracegrad import primitives as P

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

# every form on the interpreter at orders 1-3; a few programs on the compiled backends (each
# compiles some tens of kernels), at orders 1-2
NUMPY_CASES = [(form, seed) for form in fl.FORMS for seed in (0, 1)]
COMPILED_CASES = [("scan", 3), ("two_back", 4), ("while", 5)]


def _cases():
    for backend in BACKENDS:
        cases = NUMPY_CASES if backend == "numpy" else COMPILED_CASES
        for form, seed in cases:
            if backend == "cuda" and form != "scan":
                continue  # the simulator runs kernels slowly: one program there
            yield backend, form, seed


@pytest.mark.parametrize(("backend", "form", "seed"), list(_cases()))
def test_random_loop_programs(backend, form, seed):
    program = fl.generate(seed, form)
    failures = fl.check(program, backend, orders=3 if backend == "numpy" else 2)
    assert not failures, "\n".join(map(str, failures)) + "\n\n" + program.source()


def test_the_checker_catches_a_wrong_gradient(monkeypatch):
    # the check is able to fail: a loop whose derivative is scaled by 1.001
    from tracegrad.primitive_table import elementwise
    from tracegrad.runtime.program_store import clear_programs

    clear_programs()  # derive the program afresh, with the wrong rule
    rule = elementwise.tanh_p.adjoint
    monkeypatch.setattr(
        elementwise.tanh_p, "adjoint", lambda ct, out, x: (P.mul(rule(ct, out, x)[0], 1.001),)
    )
    failures = fl.check(fl.generate(0, "python"), "numpy", orders=1)
    assert failures and all(f.check.startswith("grad") for f in failures), failures
