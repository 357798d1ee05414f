"""Loops and conditionals on the cuda backend run on the device: values and gradients against the
reference interpreter, and the host transfers they make, counted where numba makes them (a scan,
fori_loop, rolled Python loop, cond or nested loop makes the same number in 3 steps as in 30).

Without a GPU they run on Numba's CUDA simulator (see conftest.py), so the shapes are small.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.cuda import device_loops
from tracegrad.transforms import scan as scans

cuda = pytest.importorskip("numba.cuda")

RTOL = 1e-12


@pytest.fixture
def transfers(monkeypatch):
    """Counts every copy between host and device that numba makes: a device array's
    `copy_to_host` and `copy_to_device`, and `cuda.to_device`."""
    counts = {"to_host": 0, "to_device": 0}
    array_type = type(cuda.device_array(1))
    copy_to_host, copy_to_device = array_type.copy_to_host, array_type.copy_to_device
    to_device = cuda.to_device

    def counted(key, fun):
        def wrapper(*args, **kwargs):
            counts[key] += 1
            return fun(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(array_type, "copy_to_host", counted("to_host", copy_to_host))
    monkeypatch.setattr(array_type, "copy_to_device", counted("to_device", copy_to_device))
    monkeypatch.setattr(cuda, "to_device", counted("to_device", to_device))
    return counts


def host(x) -> np.ndarray:
    return x.copy_to_host() if hasattr(x, "copy_to_host") else np.asarray(x)


def agree(fun, *args, argnums=0):
    """The value and gradient of `fun` on the cuda backend are the interpreter's."""
    got = tg.value_and_grad(fun, argnums=argnums, backend="cuda")(*args)
    want = tg.value_and_grad(fun, argnums=argnums, backend="numpy")(*args)
    np.testing.assert_allclose(host(got[0]), want[0], rtol=RTOL, atol=RTOL)
    for g, w in zip(
        got[1] if isinstance(argnums, tuple) else [got[1]],
        want[1] if isinstance(argnums, tuple) else [want[1]],
        strict=True,
    ):
        np.testing.assert_allclose(host(g), w, rtol=RTOL, atol=RTOL)


def warm_counts(transfers, fun, *args) -> dict:
    """The transfers of a call after the first (which compiles and copies constants in)."""
    fun(*args)
    transfers.update(to_host=0, to_device=0)
    fun(*args)
    return dict(transfers)


# ----------------------------------------------------------------------------------------------
# Functions with loops


def rnn(x, w, steps=4):
    """A scan whose body has a reduction, a pytree carry, stacked ys and an integer carry."""

    def step(carry, xt):
        h = np.tanh(carry["h"] * w + xt)
        s = carry["s"] + np.sum(h**2)
        return {"h": h, "s": s, "k": carry["k"] + 1}, np.sin(h) * carry["k"]

    init = {"h": x, "s": np.zeros(()), "k": np.zeros((), np.int64)}
    xs = np.linspace(-0.5, 0.5, 3 * steps).reshape(steps, 3)
    carry, ys = tg.scan(step, init, xs)
    return carry["s"] + np.sum(carry["h"] * ys.sum(axis=0)) + carry["k"]


def reversed_scan(x):
    carry, ys = tg.scan(
        lambda c, xt: (c * np.cos(xt) + xt, np.max(c)), x, np.eye(3)[:, :2].T, reverse=True
    )
    return np.sum(carry) + np.sum(ys**2)


def fori(x, steps=5):
    return np.sum(tg.fori_loop(0, steps, lambda i, v: np.sin(v) * 1.1 + 0.01 * i, x) ** 2)


def newton_sqrt(a):
    """A while loop whose trip count the values decide."""

    def body(state):
        y, k = state
        return 0.5 * (y + a / y), k + 1

    y, _ = tg.while_loop(lambda s: s[1] < 6, body, (a + 1.0, 0))
    return np.sum(y)


def branchy(x, t):
    return np.sum(tg.cond(t > 0, lambda x: np.sin(x) * t, lambda x: np.cos(x) - t, x) ** 2)


def python_loop(x):
    """A plain Python loop that rolls into one scan."""
    for _ in range(40):
        x = np.sin(x) * 1.01 + 0.1
    return np.sum(x**2)


def nested(x):
    def outer(c, xt):
        inner, _ = tg.scan(lambda d, z: (np.tanh(d + z * xt), None), c, np.linspace(0, 1, 3))
        return inner, np.sum(inner)

    carry, ys = tg.scan(outer, x, np.linspace(0.1, 0.3, 3))
    return np.sum(carry) + np.sum(ys)


def nested_loops(x, steps=3):
    """A fori_loop whose body holds a scan whose body holds a cond."""

    def inner(d, z):
        return tg.cond(np.sum(d) > z, lambda d: np.tanh(d * z), lambda d: d + 0.1, d), None

    def body(i, v):
        return tg.scan(inner, v, np.linspace(0.5, 1, 2))[0] + 0.01 * i

    return np.sum(tg.fori_loop(0, steps, body, x) ** 2)


def while_in_a_scan(x):
    """A scan whose body holds a while loop (its predicate is read each outer step)."""

    def body(c, xt):
        w, _ = tg.while_loop(lambda s: s[1] < 2, lambda s: (np.sin(s[0]) + xt, s[1] + 1), (c, 0))
        return w, np.sum(w)

    carry, ys = tg.scan(body, x, np.linspace(0.1, 0.3, 3))
    return np.sum(carry) + np.sum(ys)


def cond_in_a_loop(x, t, steps=4):
    """A cond in a loop's body: a select on the device, nothing read per step."""

    def body(i, v):
        return tg.cond(np.sum(v) * t > 0, lambda v: np.sin(v) * t, lambda v: v * v - t, v)

    return np.sum(tg.fori_loop(0, steps, body, x) ** 2)


def unrolled(x, steps=8):
    """A Python loop of 8 nodes an iteration: it rolls from 8 iterations on."""
    for _ in range(steps):
        x = np.sin(x) * 1.01 + 0.1 * np.cos(x) - 0.01 * x**2
    return np.sum(x**2)


def empty_scan(x, reverse=False):
    carry, ys = tg.scan(lambda c, xt: (c * xt, np.sin(c) + xt), x, np.ones((0, 3)), reverse=reverse)
    return np.sum(carry**2) + np.sum(ys)


def sorted_scan(x, steps=3):
    """A scan whose body sorts (argsort and gather have no kernel: they run on the host)."""
    carry, _ = tg.scan(lambda c, xt: (np.sort(c) * 0.9 + xt, None), x, np.linspace(0, 1, steps))
    return np.sum(carry * np.arange(1.0, 1.0 + x.size))


# ----------------------------------------------------------------------------------------------
# Values and gradients


def test_scan_with_a_reduction_in_its_body(rng):
    agree(rnn, rng.normal(size=3), 0.7, argnums=(0, 1))


def test_reversed_scan_and_its_adjoint(rng):
    agree(reversed_scan, rng.normal(size=3))


def test_fori_loop(rng):
    agree(fori, rng.normal(size=4))


def test_while_loop_and_its_counted_adjoint(rng):
    agree(newton_sqrt, rng.uniform(1.0, 3.0, size=3))


@pytest.mark.parametrize("t", [0.5, -0.5])
def test_cond_takes_either_branch(t, rng):
    agree(branchy, rng.normal(size=4), t, argnums=(0, 1))


def test_a_rolled_python_loop(rng):
    x = rng.normal(size=4)
    assert any(n.prim is scans.scan_p for n in tg.make_ir(python_loop)(x).nodes)
    agree(python_loop, x)


def test_nested_scans(rng):
    agree(nested, rng.normal(size=3))


def test_loops_nested_in_a_loop(rng):
    agree(nested_loops, rng.normal(size=3))
    agree(while_in_a_scan, rng.normal(size=3))


@pytest.mark.parametrize("t", [0.5, -0.5])
def test_cond_in_a_loop_selects_on_the_device(t, rng):
    agree(cond_in_a_loop, rng.normal(size=3), t, argnums=(0, 1))


@pytest.mark.parametrize("reverse", [False, True])
def test_a_scan_of_no_steps(reverse, rng):
    x = rng.normal(size=3)
    agree(lambda x: empty_scan(x, reverse), x)
    value = tg.jit(lambda x: tg.scan(lambda c, xt: (c + xt, c), x, np.ones((0, 3))), backend="cuda")
    carry, ys = value(x)
    np.testing.assert_array_equal(host(carry), x)
    assert host(ys).shape == (0, 3)


def test_a_host_step_in_a_loop_body_crosses_alone(monkeypatch, caplog, rng):
    """The body's sort runs on the host each step, said once; the loop stays on the device."""
    monkeypatch.setenv("TRACEGRAD_LOG", "cuda")
    with caplog.at_level(logging.INFO, logger="tracegrad"):
        agree(sorted_scan, rng.normal(size=3))
    said = [r.getMessage() for r in caplog.records]
    assert any("scan: argsort, gather of its body runs on the host" in m for m in said), said


def sorting_to(n):
    return lambda x: tg.while_loop(
        lambda s: s[1] < n, lambda s: (np.sort(s[0]) * 1.1, s[1] + 1), (x, 0)
    )[0]


def test_a_while_loop_with_a_host_step_reads_its_predicate_every_step(
    monkeypatch, caplog, transfers, rng
):
    """A body with a step on the host is not run past its last step (an index out of range
    would raise there): the host reads the predicate before each step, and says so."""
    monkeypatch.setenv("TRACEGRAD_LOG", "cuda")
    x = rng.normal(size=3)
    with caplog.at_level(logging.INFO, logger="tracegrad"):
        counts = [warm_counts(transfers, tg.jit(sorting_to(n), backend="cuda"), x) for n in (2, 4)]
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "while: not run ahead (argsort, gather in its body or predicate)" in said
    # n + 1 predicates; each step, argsort's operand and gather's two out and their results in;
    # the input in and the result out once
    assert counts == [{"to_host": n + 1 + 3 * n + 1, "to_device": 1 + 2 * n} for n in (2, 4)]
    got = tg.jit(sorting_to(4), backend="cuda")(x)
    np.testing.assert_allclose(host(got), np.sort(x) * 1.1**4, rtol=RTOL)


def test_a_cond_with_a_host_step_in_a_loop_reads_its_predicate(monkeypatch, caplog, rng):
    def f(x):
        body = lambda i, v: tg.cond(np.sum(v) > 0, lambda v: np.sort(v) * 0.5, lambda v: v + 1.0, v)
        return np.sum(tg.fori_loop(0, 3, body, x) * np.arange(1.0, 4.0))

    monkeypatch.setenv("TRACEGRAD_LOG", "cuda")
    with caplog.at_level(logging.INFO, logger="tracegrad"):
        agree(f, rng.normal(size=3))
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "cond: its predicate is read every step (argsort, gather in a branch" in said


def test_second_derivative_through_a_scan(rng):
    x = rng.normal(size=3)
    f = lambda x: np.sum(tg.grad(fori)(x) ** 2)
    np.testing.assert_allclose(
        tg.grad(f, backend="cuda")(x), tg.grad(f, backend="numpy")(x), rtol=1e-11, atol=1e-11
    )


def test_the_device_loop_gives_the_bits_of_the_host_loop(monkeypatch, rng):
    """The same kernels run, in the same order: only where the carries live changes."""
    x = rng.normal(size=3)
    on_device = tg.value_and_grad(rnn, argnums=(0, 1), backend="cuda")(x, 0.7)
    monkeypatch.setattr(device_loops, "runner", lambda node, compile, rt: None)
    on_host = tg.value_and_grad(lambda x, w: rnn(x, w) + 0.0, argnums=(0, 1), backend="cuda")(
        x, 0.7
    )
    assert host(on_device[0]).tobytes() == host(on_host[0]).tobytes()
    for a, b in zip(on_device[1], on_host[1], strict=True):
        assert host(a).tobytes() == host(b).tobytes()


def test_device_inputs_stay_on_the_device_through_loops(transfers, rng):
    x = cuda.to_device(rng.normal(size=4))
    f = tg.value_and_grad(fori, backend="cuda")
    assert warm_counts(transfers, f, x) == {"to_host": 0, "to_device": 0}
    value, grad = f(x)
    assert hasattr(value, "copy_to_host") and hasattr(grad, "copy_to_host")  # device arrays
    want = tg.value_and_grad(fori, backend="numpy")(host(x))
    np.testing.assert_allclose(host(value), want[0], rtol=RTOL)
    np.testing.assert_allclose(host(grad), want[1], rtol=RTOL)


def test_the_driver_says_the_loop_runs_on_the_device(rng):
    source = tg.make_kernels(fori, backend="cuda")(rng.normal(size=3))
    assert "scan: on the device" in source


# ----------------------------------------------------------------------------------------------
# Transfers do not grow with the number of steps


def with_steps(f, n):
    return lambda x: f(x, n)


LOOPS = {  # a function of (x, steps)
    "scan": lambda x, n: rnn(x, 0.7, steps=n),
    "fori_loop": lambda x, n: fori(x, steps=n),
    "rolled Python loop": lambda x, n: unrolled(x, steps=n),
    "cond in a loop": lambda x, n: cond_in_a_loop(x, 0.5, steps=n),
    "nested loops": lambda x, n: nested_loops(x, steps=n),
}


@pytest.mark.parametrize("name", list(LOOPS))
def test_loops_and_their_gradients_make_no_transfer_per_step(name, transfers, rng):
    x = rng.normal(size=3)
    short, long = (
        warm_counts(transfers, tg.value_and_grad(with_steps(LOOPS[name], n), backend="cuda"), x)
        for n in (8, 40)  # (a Python loop rolls from 8 iterations on)
    )
    # the input in, the value and the gradient out
    assert short == long == {"to_host": 2, "to_device": 1}


def test_the_rolled_loops_are_scans(rng):
    x = rng.normal(size=3)
    for n in (8, 40):
        nodes = tg.make_ir(with_steps(unrolled, n))(x).nodes
        assert nodes[0].prim is scans.scan_p


def rounds(trips: int) -> int:
    """The reads of a while loop's predicate: one per round of 1, 2, 4, ... steps run ahead."""
    done, ahead, reads = 0, 1, 0
    while True:
        done, reads = done + ahead, reads + 1
        if done >= trips:
            return reads
        ahead = min(2 * ahead, device_loops.MAX_AHEAD)


def count_to(n):
    return lambda x: tg.while_loop(lambda s: s[1] < n, lambda s: (s[0] * 1.1, s[1] + 1), (x, 0))[0]


def test_a_while_loop_reads_its_predicate_once_a_round(transfers, rng):
    """The predicate is computed on the device; the host reads it after each round of steps
    run ahead (the steps past the last change nothing)."""
    x = rng.normal(size=3)
    for n in (0, 1, 3, 30, 100):
        counts = warm_counts(transfers, tg.jit(count_to(n), backend="cuda"), x)
        assert counts == {"to_host": rounds(n) + 1, "to_device": 1}  # + the result
        np.testing.assert_allclose(
            host(tg.jit(count_to(n), backend="cuda")(x)), x * 1.1**n, rtol=RTOL
        )
    assert [rounds(n) for n in (0, 1, 3, 30, 100)] == [1, 1, 2, 5, 7]


def growing_to(n):
    """x -> sum of squares of a while loop's carry after n (nonlinear) steps."""

    def f(x):
        body = lambda s: (np.sin(s[0]) * 0.5 + s[0], s[1] + 1)
        return np.sum(tg.while_loop(lambda s: s[1] < n, body, (x, 0))[0] ** 2)

    return f


def test_a_while_loops_gradient_reads_a_trip_count_per_reverse_step(transfers, rng):
    """Its trips are counted on the device (a round's read each); the reverse pass, a loop of
    that count (read once), recomputes the carry of step k with an inner loop of k steps whose
    trip count is read once each: n of them (the adjoint of transforms/loops.py)."""
    x = rng.normal(size=3)
    for n in (3, 30):
        f = tg.value_and_grad(growing_to(n), backend="cuda")
        counts = warm_counts(transfers, f, x)
        assert counts == {"to_host": 2 + rounds(n) + 1 + n, "to_device": 1}
    agree(growing_to(5), x)
