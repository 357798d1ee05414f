"""Accumulators (tracing/accumulators.py): a list or dict that a function's code only writes
into (a tap hook's `seen.append`) never makes a program trace again, however much it holds; a
container the code reads is still guarded by what it holds."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.tracing.accumulators import write_only


def _calls(transform, f, n=4, backend="numpy"):
    g = transform(f, backend=backend)
    for i in range(n):
        g(np.full(3, 0.5 + i))
    return g.trace_count


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_a_hook_accumulator_that_holds_entries_is_not_guarded_by_them(backend):
    seen = []

    def f(x):
        return np.sum(tg.tap(x * x, "h", hook=lambda name, ct: seen.append(ct)))

    assert _calls(tg.grad, f, backend=backend) == 1
    assert len(seen) == 4
    # later transforms of the same function find the list full: still one trace each
    assert _calls(tg.value_and_grad, f, backend=backend) == 1
    assert _calls(tg.hessian, f, n=2, backend=backend) == 1
    assert len(seen) > 8
    np.testing.assert_allclose(seen[0], 2 * np.full(3, 0.5))


def test_a_global_accumulator_and_a_dict_accumulator():
    namespace = {"np": np, "tg": tg, "SEEN": [0.0], "BY_NAME": {"old": 1}}
    exec(
        "def f(x):\n"
        "    y = tg.tap(x * 3, 'y', hook=lambda n, ct: SEEN.append(float(ct.sum())))\n"
        "    z = tg.tap(y * y, 'z', hook=lambda n, ct: BY_NAME.update({n: ct}))\n"
        "    return np.sum(z)\n",
        namespace,
    )
    assert _calls(tg.grad, namespace["f"]) == 1
    assert len(namespace["SEEN"]) == 5 and "z" in namespace["BY_NAME"]


def test_another_list_of_the_same_code_gets_its_own_program():
    """Guarded by identity: a closure over another list must not append to the first one."""

    def make(into):
        def f(x):
            return np.sum(tg.tap(x * x, "h", hook=lambda name, ct: into.append(ct)))

        return f

    first, second = [1], [2]
    tg.grad(make(first), backend="numpy")(np.ones(2))
    tg.grad(make(second), backend="numpy")(np.ones(2))
    assert len(first) == 2 and len(second) == 2


def test_a_list_the_code_reads_is_still_guarded():
    scales = [2.0]

    def f(x):
        scales.append(0.0)  # a write ...
        return np.sum(x * scales[0])  # ... and a read: walked and guarded as any list

    g = tg.grad(f, backend="numpy")
    np.testing.assert_allclose(g(np.ones(2)), [2.0, 2.0])
    scales[0] = 5.0
    np.testing.assert_allclose(g(np.ones(2)), [5.0, 5.0])


@pytest.mark.parametrize(
    "source, expected",
    [
        ("def f():\n    acc.append(1)\n", True),
        ("def f():\n    h = acc.append\n    return h\n", True),
        ("def f():\n    return (lambda: acc.update({}))\n", True),
        ("def f():\n    acc.append(len(acc))\n", False),  # len reads it
        ("def f():\n    return acc[0]\n", False),
        ("def f():\n    for v in acc:\n        pass\n", False),
        ("def f():\n    g(acc)\n", False),  # handed on whole
        ("def f():\n    return acc.pop()\n", False),  # pop reads
        ("def f():\n    return acc.setdefault('k', 0.0)\n", False),  # returns what it holds
        ("def f():\n    return 1\n", False),  # not used at all
    ],
)
def test_what_counts_as_only_writing(source, expected):
    namespace: dict = {}
    exec(source, namespace)
    assert write_only(namespace["f"].__code__, "acc") is expected


def test_a_closure_cell_written_in_nested_code_only():
    def outer():
        acc = [1]

        def f():
            return lambda: acc.append(2)

        def g():
            return lambda: acc[0]

        return f, g

    f, g = outer()
    assert write_only(f.__code__, "acc") is True
    assert write_only(g.__code__, "acc") is False


def test_a_value_taken_back_out_of_a_dict_is_guarded():
    state = {"scale": 2.0}

    def f(x):
        return np.sum(x * state.setdefault("scale", 1.0))

    g = tg.grad(f, backend="numpy")
    np.testing.assert_allclose(g(np.ones(2)), [2.0, 2.0])
    state["scale"] = 3.0
    np.testing.assert_allclose(g(np.ones(2)), [3.0, 3.0])
