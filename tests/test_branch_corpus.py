"""A corpus of user-style functions with Python control flow on traced floats (the patterns of
Google Tangent's test functions and HIPS autograd's tutorial, written afresh), and adversarial
cases of the guards of tracing/branches.py.

Each function is checked at points chosen so that consecutive calls take different branches
(some just beside a boundary): the value equals the plain function's, `grad` matches central
differences of the plain function in float64, the `jvp` tangent matches the directional
difference, `hvp` matches central differences of the gradient. The points are visited forth and
back by one transform object, and that object traces at most once per distinct path through the
function (the path is the plain function's sequence of bytecodes, recorded with sys.settrace),
and not at all on the way back.

The interpreter ("numpy") runs every function; the compiled "cpu" backend a representative
subset (each outcome compiles its own kernels).
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest
from helpers import finite_differences

import tracegrad as tg

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


# ---------------------------------------------------------------------------------------------
# The corpus: functions of a float


def sign_switch(x):  # if x > 0
    if x > 0:
        return x**3 + np.sin(x)
    return np.cos(x) * x


def three_way(x):  # if / elif / else
    if x > 1.0:
        return np.log(x) * x
    elif x > -1.0:
        return 0.5 * x**2 - x
    else:
        return np.exp(x) + 2.0 * x


def nested(x):  # nested ifs, the inner one on an intermediate value
    if x > 0:
        if x * x > 2.0:
            y = np.sqrt(x) * 3.0
        else:
            y = np.exp(-x)
    else:
        if np.sin(x) < -0.5:
            y = x**4
        else:
            y = np.tanh(x)
    return y * x


def early_return(x):  # returns from the middle
    if x < -2.0:
        return -x
    y = np.exp(0.5 * x)
    if y > 2.0:
        return y * y
    return y + x


def grow_until(x):  # while x < 10: the trip count depends on the value (x > 0)
    y = x
    while y < 10.0:
        y = y * 1.5 + np.sin(y)
    return y * np.cos(x)


def power_with_if(x):  # x ** n written as a for loop with an if inside
    y = 1.0
    for i in range(6):
        if x > 0.4 * i:
            y = y * x
        else:
            y = y + x**2
    return y


def break_when_large(x):  # break on a traced condition
    y = x
    for _ in range(12):
        y = y * x + 0.5
        if np.abs(y) > 4.0:
            break
    return y


def skip_with_continue(x):  # continue on a traced condition
    total = 0.0 * x
    for i in range(1, 7):
        if np.sin(i * x) > 0.3:
            continue
        total = total + np.cos(i * x) / i
    return total


def and_or_chain(x):  # and / or / not chains: short-circuits are outcomes too
    if (x > 0 and x < 2) or x < -3:
        return np.sin(3 * x)
    if not (x > 4) and x > -1:
        return x**2
    return np.exp(0.1 * x)


def pick_larger(x):  # a conditional expression between two intermediates
    a, b = np.sin(2 * x), np.cos(x)
    return a * x if a > b else b * x**2


def newton_cbrt(a):  # while on a residual (a > 0)
    y = a
    while np.abs(y**3 - a) > 1e-10 * a:
        y = y - (y**3 - a) / (3 * y**2)
    return y


def halve_recursively(x):  # recursion whose depth is the value's
    if x > 1.0:
        return halve_recursively(x / 2.0) * 1.5 + np.sqrt(x)
    return x**2


def collatz_like(x):  # while with an if inside
    y = x
    while y > 1.0:
        if y > 4.0:
            y = y / 3.0
        else:
            y = y - 0.75
    return y * x + y**2


# ---- functions of a vector (3 elements)


def reduce_branch(v):  # branches on np.max / np.sum
    if np.max(v) > 1.0:
        return np.sum(v**2)
    elif np.sum(v) < 0.0:
        return np.sum(np.exp(v))
    return np.prod(v + 2.0)


def elementwise_loop(v):  # a Python loop over the elements, a branch per element
    total = 0.0
    for i in range(v.shape[0]):
        if v[i] > 0:
            total = total + v[i] ** 2
        else:
            total = total - np.sin(v[i])
    return total


WEIGHTS = np.array([1.0, 2.0, 3.0])


def norm_clip(v):  # gradient-clipping style rescaling
    n = np.sqrt(np.sum(v * v))
    if n > 1.0:
        v = v / n
    return np.sum(v * WEIGHTS) + np.sum(v**3)


def softmax_guard(v):  # a branch on a comparison of two reductions
    m = np.max(v)
    if np.sum(np.exp(v - m)) > 2.0 and np.mean(v) > -0.5:
        return m + np.log(np.sum(np.exp(v - m)))
    return np.sum(np.sin(v)) * m


# name -> (function, points). Consecutive points take different branches; "b ± 1e-3" points sit
# just beside a boundary b (far enough for the differences of step 1e-6).
CORPUS = {
    "sign_switch": (sign_switch, [1.3, -0.7, 1e-3, -1e-3, 2.5, -2.0]),
    "three_way": (three_way, [2.0, 0.3, -2.0, 1.001, -0.999, -1.001, 0.999]),
    "nested": (nested, [2.0, 0.5, -1.0, -0.2, 1.415, 1.413, -0.5226, -0.5246, -3.0]),
    "early_return": (early_return, [-3.0, 0.5, 2.0, -1.999, -2.001, 1.3873, 1.3853]),
    "grow_until": (grow_until, [0.5, 3.0, 11.0, 1.0, 7.0, 20.0]),
    "power_with_if": (power_with_if, [0.3, 1.0, -0.5, 2.1, 0.401, 0.399, 1.7]),
    "break_when_large": (break_when_large, [0.5, 1.5, -2.0, 0.9, 3.0, 1.2]),
    "skip_with_continue": (skip_with_continue, [0.2, 1.0, 2.5, -0.8, 0.7]),
    "and_or_chain": (
        and_or_chain,
        [1.0, -4.0, -0.5, 5.0, 3.0, 0.001, 2.001, 1.999, -2.999, -3.001, -0.999],
    ),
    "pick_larger": (pick_larger, [0.3, 1.0, -1.0, 2.0, 0.6]),
    "newton_cbrt": (newton_cbrt, [2.0, 27.0, 0.5, 100.0, 8.5]),
    "halve_recursively": (halve_recursively, [0.5, 3.0, 1.5, 9.0, 0.9, 17.0]),
    "collatz_like": (collatz_like, [0.5, 3.0, 10.0, 1.7, 5.0]),
    "reduce_branch": (
        reduce_branch,
        [[2.0, 0.0, 0.0], [-1.0, -2.0, 0.5], [0.5, 0.2, 0.1], [1.001, -3.0, 0.0]]
        + [[0.999, -3.0, 0.0], [0.3, -0.2, -0.099], [0.3, -0.2, -0.101]],
    ),
    "elementwise_loop": (
        elementwise_loop,
        [[1.0, -1.0, 2.0], [-1.0, -1.0, -1.0], [0.5, 0.5, -0.3], [1e-3, -1e-3, 1.0]],
    ),
    "norm_clip": (
        norm_clip,
        [[0.1, 0.2, 0.3], [1.0, 2.0, 3.0], [0.578, 0.578, 0.578], [0.576, 0.576, 0.576]],
    ),
    "softmax_guard": (
        softmax_guard,
        [[0.0, 0.1, 0.2], [3.0, -1.0, -2.0], [-1.0, -1.2, -0.9], [0.5, 0.4, -2.0]],
    ),
}

# Run on the compiled backend too: one of each pattern (if/elif, while, break, and/or, a
# reduction, a loop over elements).
CPU_SUBSET = ["three_way", "grow_until", "break_when_large", "and_or_chain", "reduce_branch"]


# ---------------------------------------------------------------------------------------------
# Oracles


def path_of(f, x) -> tuple:
    """The plain function's path on x: the bytecodes it runs in this file's frames."""
    events = []

    def local(frame, event, arg):
        if event == "opcode":
            events.append((frame.f_code.co_name, frame.f_lasti))
        return local

    def tracer(frame, event, arg):
        if frame.f_code.co_filename != __file__:
            return None
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        return local

    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        f(x)
    finally:
        sys.settrace(old)
    return tuple(events)


def distinct_paths(f, points) -> int:
    return len({path_of(f, x) for x in points})


def as_point(x):
    return np.array(x, dtype=np.float64)


def fd_grad(f, x):
    x = as_point(x)
    return finite_differences(lambda a: f(a[0]), [x], [0])[0]


def fd_directional(f, x, v, eps=1e-6):
    h = eps * max(1.0, float(np.max(np.abs(x))))
    return (float(f(x + h * v)) - float(f(x - h * v))) / (2 * h)


def direction(x):
    return np.linspace(1.0, -0.5, x.size).reshape(x.shape) if x.ndim else np.array(0.7)


def forth_and_back(points):
    return [as_point(x) for x in points + points[::-1]]


# ---------------------------------------------------------------------------------------------
# The corpus on every backend


def _check_values_and_gradients(name, backend):
    f, points = CORPUS[name]
    jitted = tg.jit(f, backend=backend)
    value_and_grad = tg.value_and_grad(f, backend=backend)
    paths = distinct_paths(f, [as_point(x) for x in points])
    for i, x in enumerate(forth_and_back(points)):
        expected = f(x)
        np.testing.assert_allclose(jitted(x), expected, rtol=1e-12, atol=1e-14, err_msg=str(x))
        value, g = value_and_grad(x)
        np.testing.assert_allclose(value, expected, rtol=1e-12, atol=1e-14, err_msg=str(x))
        np.testing.assert_allclose(g, fd_grad(f, x), rtol=1e-6, atol=1e-7, err_msg=str(x))
        if i == len(points) - 1:  # every outcome traced once on the way forth...
            assert jitted.trace_count <= paths and value_and_grad.trace_count <= paths
            traced = (jitted.trace_count, value_and_grad.trace_count)
    # ...and none on the way back
    assert (jitted.trace_count, value_and_grad.trace_count) == traced


def _check_jvp_and_hvp(name, backend):
    f, points = CORPUS[name]
    hvp = tg.hvp(f, backend=backend)
    grad = tg.grad(f, backend="numpy")  # checked against differences of f above
    for x in forth_and_back(points):
        v = direction(x)
        value, tangent = tg.jvp(f, (x,), (v,), backend=backend)
        np.testing.assert_allclose(value, f(x), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(
            tangent, fd_directional(f, x, v), rtol=1e-6, atol=1e-7, err_msg=str(x)
        )
        h = 1e-6 * max(1.0, float(np.max(np.abs(x))))
        expected = (grad(x + h * v) - grad(x - h * v)) / (2 * h)
        np.testing.assert_allclose(hvp(x, v), expected, rtol=1e-5, atol=1e-6, err_msg=str(x))


@pytest.mark.parametrize("name", list(CORPUS))
def test_corpus_values_and_gradients_numpy(name):
    _check_values_and_gradients(name, "numpy")


@pytest.mark.parametrize("name", list(CORPUS))
def test_corpus_jvp_and_hvp_numpy(name):
    _check_jvp_and_hvp(name, "numpy")


@pytest.mark.parametrize("name", CPU_SUBSET)
def test_corpus_values_and_gradients_cpu(name):
    _check_values_and_gradients(name, "cpu")


@pytest.mark.parametrize("name", ["three_way", "reduce_branch"])
def test_corpus_jvp_and_hvp_cpu(name):
    _check_jvp_and_hvp(name, "cpu")


@pytest.mark.parametrize("name", ["nested", "grow_until", "reduce_branch"])
def test_corpus_hessian_numpy(name):
    f, points = CORPUS[name]
    hessian = tg.hessian(f, backend="numpy")
    grad = tg.grad(f, backend="numpy")
    for x in forth_and_back(points):
        if x.ndim:
            expected = np.stack([fd_grad(lambda a, i=i: grad(a)[i], x) for i in range(x.size)])
        else:
            expected = fd_grad(grad, x)
        np.testing.assert_allclose(hessian(x), expected, rtol=1e-5, atol=1e-6, err_msg=str(x))
    assert hessian.trace_count <= distinct_paths(f, [as_point(x) for x in points])


def test_the_path_oracle_tells_outcomes_apart():
    """The oracle itself: and/or short-circuits and trip counts are told apart."""
    assert distinct_paths(and_or_chain, [1.0, -4.0]) == 2  # the same body, other tests
    assert distinct_paths(grow_until, [0.5, 0.6]) == 1
    assert distinct_paths(grow_until, [0.5, 3.0]) == 2
    assert distinct_paths(sign_switch, [1.0, 2.0, -1.0]) == 2


# ---------------------------------------------------------------------------------------------
# Adversarial cases


def test_a_closure_value_that_changes_between_calls_changes_the_branch():
    state = {"scale": 1.0}
    limit = np.array(0.5)

    def f(x):
        if x * state["scale"] > limit:  # a captured number and a captured array
            return x**2
        return -3.0 * x

    grad = tg.grad(f, backend="numpy")
    cases = [(1.0, 0.5, 1.0), (-1.0, 0.5, 1.0), (1.0, 0.5, 1.0), (-1.0, 0.5, -1.0)]
    cases += [(1.0, 2.0, 1.0), (1.0, -5.0, -1.0), (1.0, 0.5, 1.0)]
    for scale, bound, x in cases:
        state["scale"] = scale
        limit[...] = bound  # changed in place: a hidden input, read afresh
        expected = 2.0 * x if x * scale > bound else -3.0
        assert grad(x) == expected, (scale, bound, x)


def loop_of_50(x):
    y = x
    for _ in range(50):
        y = np.sin(y) * 0.9 + x * 0.3 + np.cos(y) * 0.1 - y * y * 0.01
        if np.sum(y * y) > 0.5:
            y = y * 0.95
        else:
            y = y * 1.05 + 0.01
    return np.sum(y**2)


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_a_branch_in_a_python_loop_of_50_iterations(backend):
    """The loop rolls into a scan with the guard of every iteration among its outputs: the
    points below take the same branch at every iteration (rolled), or change it along the loop."""
    assert "scan" in str(tg.make_ir(loop_of_50)(np.array([1.0, 2.0])))
    value_and_grad = tg.value_and_grad(loop_of_50, backend=backend)
    points = [[1.0, 2.0], [0.01, -0.02], [-3.0, 0.5], [1.0, 2.0], [0.01, -0.02], [-3.0, 0.5]]
    for x in map(as_point, points):
        value, g = value_and_grad(x)
        np.testing.assert_allclose(value, loop_of_50(x), rtol=1e-12)
        expected = finite_differences(lambda a: loop_of_50(a[0]), [x], [0])[0]
        np.testing.assert_allclose(g, expected, rtol=1e-5, atol=1e-7)
    assert value_and_grad.trace_count <= distinct_paths(loop_of_50, [as_point(p) for p in points])


def test_threads_on_different_branches_agree():
    def f(x):
        if np.sum(x) > 0:
            if x[0] > x[1]:
                return np.sum(np.sin(x))
            return np.sum(x**2)
        return np.sum(np.exp(x))

    grad = tg.grad(f, backend="cpu")
    points = [as_point(p) for p in [[1.0, 0.5], [0.5, 1.0], [-1.0, -2.0]]]
    for x in points:  # warm: one program per outcome
        grad(x)
    traced = grad.trace_count
    xs = points * 8
    results, errors = [None] * len(xs), []

    def work(i):
        try:
            results[i] = grad(xs[i])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for x, g in zip(xs, results, strict=True):
        np.testing.assert_allclose(g, fd_grad(f, x), rtol=1e-6, atol=1e-8)
    assert grad.trace_count == traced == 3  # no outcome traced again


def test_a_branch_on_int_used_as_a_range_length():
    def f(x, n):
        acc = x
        for _ in range(int(n) if n > 0 else 0):
            acc = np.sin(acc) + x
        return acc

    grad = tg.grad(f, backend="numpy")
    for n in [3.7, 0.5, -2.0, 3.2, 5.0, 0.5, 3.9]:
        expected = fd_grad(lambda a, n=n: f(a, n), 1.3)
        np.testing.assert_allclose(grad(1.3, n), expected, rtol=1e-6)
    # outcomes: (n > 0, int(n)) = (T, 3), (T, 0), (F,), (T, 5)
    assert grad.trace_count == 4


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_a_branch_inside_a_grad_inside_a_jit(backend):
    def inner(z):
        if np.max(z) > 1.0:
            return np.sum(z**3)
        return np.sum(np.exp(z))

    def outer(x):
        g = tg.grad(inner)(x)
        if g[0] > 2.0:  # a branch of the outer trace on the inner gradient
            return g * 2.0
        return g - 1.0

    def expected(x):
        g = 3 * x**2 if np.max(x) > 1.0 else np.exp(x)
        return g * 2.0 if g[0] > 2.0 else g - 1.0

    f = tg.jit(outer, backend=backend)
    points = [[2.0, 0.0], [0.5, 0.1], [0.1, 1.5], [0.9, 0.2], [2.0, 0.0], [0.5, 0.1]]
    for x in map(as_point, points):
        np.testing.assert_allclose(f(x), expected(x), rtol=1e-12)
    assert f.trace_count == 4


def test_the_hessian_of_a_while_loop():
    def f(x):
        y = x
        while np.sum(y * y) < 10.0:
            y = y * 1.5 + 0.1 * np.sin(y)
        return np.sum(y**3)

    hessian = tg.hessian(f, backend="numpy")
    grad = tg.grad(f, backend="numpy")
    for x in map(as_point, [[0.5, 0.7], [2.0, 3.0], [0.1, 0.2], [0.5, 0.7]]):
        expected = np.stack([fd_grad(lambda a, i=i: grad(a)[i], x) for i in range(2)])
        np.testing.assert_allclose(hessian(x), expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(grad(x), fd_grad(f, x), rtol=1e-6)
    assert hessian.trace_count == 3


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_an_exception_in_the_branch_not_traced_is_raised_on_its_call(backend):
    def f(x):
        if x > 0:
            return np.log(x)
        raise ValueError("x must be positive")

    grad = tg.grad(f, backend=backend)
    assert grad(2.0) == 0.5
    for _ in range(2):
        with pytest.raises(ValueError, match="positive"):
            grad(-1.0)
        assert grad(4.0) == 0.25
    assert grad.trace_count == 1


def test_an_exception_on_the_first_call_leaves_the_transform_usable():
    def f(x):
        if x > 0:
            return np.log(x)
        raise ValueError("x must be positive")

    grad = tg.grad(f, backend="numpy")
    with pytest.raises(ValueError):
        grad(-1.0)
    assert grad(2.0) == 0.5
    with pytest.raises(ValueError):
        grad(-1.0)


def test_tiered_first_calls_on_cpu_then_the_compiled_programs(monkeypatch):
    monkeypatch.setenv("TRACEGRAD_TIERED", "1")

    def f(x):
        y = x
        while y < 10.0:
            y = y * 1.5 + np.sin(y)
        if y > 12.0:
            return y * np.cos(x)
        return y * x

    value_and_grad = tg.value_and_grad(f, backend="cpu")
    points = [0.5, 3.0, 11.0, 1.0, 7.0]
    for x in points + points[::-1]:
        value, g = value_and_grad(x)
        np.testing.assert_allclose(value, f(x), rtol=1e-12)
        np.testing.assert_allclose(g, fd_grad(f, x), rtol=1e-6, atol=1e-7)
    assert tg.wait_compiled(timeout=120)
    for x in points + points[::-1]:
        value, g = value_and_grad(x)
        np.testing.assert_allclose(value, f(x), rtol=1e-12)
        np.testing.assert_allclose(g, fd_grad(f, x), rtol=1e-6, atol=1e-7)
    assert value_and_grad.trace_count <= distinct_paths(f, points)


# ---- defects found here, fixed: each once traced again on every call, silently


def test_int_of_a_large_float_traces_once():
    """int() of a float past 2**63 (or of a uint64 past int64's range) is guarded as the
    integer it is, not cast to int64 (which never equalled the trace's answer)."""

    def f(x):
        if int(x) > 5:
            return x * 2.0
        return x * 3.0

    jitted = tg.jit(f, backend="numpy")
    for _ in range(5):
        assert jitted(1e19) == 2e19
    assert jitted.trace_count == 1

    def parity(x, n):
        return x * 2.0 if int(n) % 2 == 0 else x * 3.0

    jitted = tg.jit(parity, backend="numpy")
    for n in [2**63 + 2, 2**63 + 3, 2**63 + 2, 2**63 + 3]:
        assert jitted(1.0, np.uint64(n)) == parity(1.0, n)
    assert jitted.trace_count == 2


def test_a_predicate_the_optimiser_rounds_differently_traces_once():
    """The trace answers on its own graph (BLAS matmul); the program's guard is the optimised
    graph's (the matrix-vector rewrite sums in another order). At a predicate one rounding from
    its threshold the program's guard fails on the very inputs it was traced for: the trace's
    own computation of the guards (the program's reference) then decides, and no call traces
    again."""

    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 40))
    fused = tg.jit(lambda w: (a @ w)[:, 0], backend="numpy")  # the optimised product
    for _ in range(1000):
        w = rng.standard_normal((40, 1))
        if fused(w)[0] < (a @ w)[0, 0]:
            break
    threshold = (a @ w)[0, 0]

    def f(w):
        if (a @ w)[0, 0] >= threshold:
            return np.sum(w**2)
        return np.sum(w)

    jitted = tg.jit(f, backend="numpy")
    for _ in range(4):
        np.testing.assert_allclose(jitted(w), f(w))
    assert jitted.trace_count == 1
