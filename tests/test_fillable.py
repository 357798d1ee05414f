"""Arrays made inside a traced function by NumPy's constructors (np.zeros, np.ones, np.empty,
np.full, the *_like forms, np.eye, np.arange, np.linspace, np.copy) can hold traced values:
`y = np.zeros(n); y[0] = a` works as in NumPy. Each function runs under NumPy itself (the oracle)
and under tracegrad: values, first and second derivatives against finite differences."""

import threading

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.tracing.fillable import Fillable

MASK = np.array([True, False, True, False, False, True])


def issue_pattern(x):
    # the pattern from research code: preallocate, then fill piece by piece
    n = x.shape[0]
    y = np.zeros(n)
    y[0] = x[0] * 2
    y[1:] = x[1:] ** 2 * 2
    idx = np.array([0, 2, 2, 5])
    y[idx] += np.sin(x[:4])  # repeated index: the last write wins, as in NumPy
    y[MASK] = 0.0
    y[3] = y[3] * x[4]
    y += 1
    return np.sum(y * x)


def constructors(x):
    a = np.ones((2, 3))
    a[1] = x[:3]
    b = np.empty(3)
    b[:] = np.exp(x[3:])  # every element written: np.empty's garbage never shows
    c = np.full((3,), 0.5)
    c[1] *= x[0]
    d = np.eye(3)
    d[0, 2] = x[1] * x[2]
    e = np.arange(3.0)
    e[2] += x[5]
    f = np.linspace(0.0, 1.0, 3)
    f[0] = np.tanh(x[4])
    g = np.zeros_like(MASK, dtype=float)
    g[MASK] = x[MASK] ** 3
    return np.sum(a @ d) + b @ c + e @ f + np.sum(g) + np.sum(d @ b)


def accumulate(x):
    # a running sum written row by row, read back while it is filled
    out = np.zeros((4, 2))
    out[0] = x[:2]
    for i in range(1, 4):
        out[i] = out[i - 1] * np.cos(x[i]) + x[i + 2]
    total = np.zeros(2)
    np.add.at(total, np.array([0, 1, 1, 0]), out[:, 0] * out[:, 1])
    return np.sum(out**2) + total @ total


def bookkeeping(x):
    # constructor arrays that never hold a traced value stay ordinary NumPy arrays
    counts = np.zeros(3, dtype=int)
    counts[1] += 2
    steps = int(counts.sum())  # a Python int: known while tracing
    chosen = np.zeros(6, dtype=bool)
    chosen[::2] = True
    weights = np.arange(6.0)
    weights[weights > 3] = 3.0
    if weights.max() > 2:  # Python control flow on plain values
        weights = weights / weights.max()
    y = x * weights
    for _ in range(steps):
        y = np.sin(y)
    return np.sum(y[chosen])


FUNCTIONS = [issue_pattern, constructors, accumulate, bookkeeping]
X = np.array([0.45, 1.5, -0.3, 0.8, 2.0, 0.1])


def finite_differences(f, x, eps=1e-6):
    return np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(len(x))])


@pytest.mark.parametrize("fun", FUNCTIONS, ids=lambda f: f.__name__)
def test_values_and_gradients_match_numpy(fun, backend):
    x = X.copy()
    value, grad = tg.value_and_grad(fun, backend=backend)(x)
    np.testing.assert_array_equal(x, X)  # never the caller's array
    np.testing.assert_allclose(value, fun(X.copy()), rtol=1e-12)
    np.testing.assert_allclose(grad, finite_differences(fun, X), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("fun", FUNCTIONS, ids=lambda f: f.__name__)
def test_hessians_match_finite_differences(fun):
    h = tg.hessian(fun, backend="numpy")(X)
    np.testing.assert_allclose(
        h, finite_differences(tg.grad(fun, backend="numpy"), X, 1e-5), rtol=1e-5, atol=1e-6
    )


def test_returned_arrays_are_the_traced_values():
    def f(x):
        y = np.zeros(3)
        y[1] = x[0]
        z = np.ones(2)  # never written with a traced value: a constant result
        z[0] = 4.0
        return y, z

    y, z = tg.jit(f, backend="numpy")(np.array([2.5]))
    assert type(y) is np.ndarray and type(z) is np.ndarray
    np.testing.assert_array_equal(y, [0.0, 2.5, 0.0])
    np.testing.assert_array_equal(z, [4.0, 1.0])
    jac = tg.jacobian(lambda x: f(x)[0], backend="numpy")(np.array([2.5]))
    np.testing.assert_array_equal(jac, [[0.0], [1.0], [0.0]])


def test_a_traced_index_into_a_constructed_array():
    def f(x, i):
        table = np.arange(5.0) ** 2  # computed from a constructed array: fillable too
        return table[i] * x

    assert tg.jit(f, backend="numpy")(2.0, np.int64(3)) == 18.0


def test_stale_views_are_refused_not_read():
    def view_then_write(x):
        y = np.zeros(3)
        row = y[1:]
        y[1] = x[0]  # NumPy's view would see this write; a stale copy would not
        return row.sum()

    with pytest.raises(tg.TracingError, match=r"view .* after the view was taken"):
        tg.jit(view_then_write, backend="numpy")(np.array([1.0]))

    def write_into_a_view(x):
        y = np.zeros((2, 3))
        row = y[1]
        row[0] = x[0]
        return y

    with pytest.raises(tg.TracingError, match="Write into the array itself"):
        tg.jit(write_into_a_view, backend="numpy")(np.array([1.0]))

    def add_into_a_view(x):
        y = np.zeros(3)
        tail = y[1:]
        tail += x[0]
        return y

    with pytest.raises(tg.TracingError, match="Write into the array itself"):
        tg.jit(add_into_a_view, backend="numpy")(np.array([1.0]))


def test_views_taken_after_the_write_see_later_writes():
    def f(x):
        y = np.zeros(4)
        y[0] = x[0]
        tail = y[2:]  # a view of the traced value now
        y[3] = x[0] * 3
        return tail

    np.testing.assert_array_equal(tg.jit(f, backend="numpy")(np.array([2.0])), [0.0, 6.0])


def test_numpy_is_untouched_outside_the_trace_and_in_other_threads():
    original = np.zeros
    seen = {}
    release, tracing = threading.Event(), threading.Event()

    def other_thread():
        tracing.wait(10)
        seen["type"] = type(np.zeros(2))  # while the main thread traces
        release.set()

    def f(x):
        tracing.set()
        release.wait(10)
        seen["inside"] = type(np.zeros(2))
        return x * 2

    worker = threading.Thread(target=other_thread)
    worker.start()
    tg.jit(f, backend="numpy")(np.ones(2))
    worker.join()
    assert seen == {"type": np.ndarray, "inside": Fillable}
    assert np.zeros is original and type(np.zeros(2)) is np.ndarray


def test_an_escaped_array_refuses_later_use():
    kept = []

    def f(x):
        y = np.zeros(2)
        y[0] = x[0]
        kept.append(y)
        return y

    tg.jit(f, backend="numpy")(np.ones(1))
    with pytest.raises(tg.TracingError, match="after its function returned"):
        np.sum(kept[0])


def test_views_made_by_numpy_functions_refuse_stale_contents():
    def reshaped_before_the_write(x):
        y = np.zeros(4)
        r = np.reshape(y, (2, 2))  # NumPy returns a view: it would see the write below
        y[0] = x[0]
        return r.sum()

    with pytest.raises(tg.TracingError, match="after the view was taken"):
        tg.jit(reshaped_before_the_write, backend="numpy")(np.array([1.0]))

    def as_array_before_the_write(x):
        y = np.zeros(2)
        a = np.asarray(y)  # the array itself, as in NumPy
        y[0] = x[0]
        return a

    np.testing.assert_array_equal(
        tg.jit(as_array_before_the_write, backend="numpy")(np.array([3.0])), [3.0, 0.0]
    )


def test_results_of_constructed_arrays_can_hold_traced_values():
    def f(x):
        y = np.zeros(3) + 1.0  # a new array computed from one: also fillable, as in NumPy
        y[0] = x[0]
        z = np.concatenate([np.ones(1), np.zeros(2)])
        z *= x[0]
        return y * z

    np.testing.assert_array_equal(tg.jit(f, backend="numpy")(np.array([3.0])), [9.0, 0.0, 0.0])


def test_traced_bounds_and_sizes():
    # np.linspace takes traced bounds (its length is num); arange's length would depend on them
    f = tg.grad(lambda a: np.sum(np.linspace(a, 2 * a, 5) ** 2), backend="numpy")
    ts = np.linspace(1.0, 2.0, 5)
    np.testing.assert_allclose(f(1.0), np.sum(2 * ts**2), rtol=1e-12)
    g = tg.grad(lambda a: np.sum((a + 0.5 * np.arange(4)) ** 2), backend="numpy")
    np.testing.assert_allclose(g(1.0), 2 * np.sum(1.0 + 0.5 * np.arange(4)), rtol=1e-12)
    with pytest.raises(tg.TracingError, match=r"start \+ step \* np.arange\(n\)"):
        tg.grad(lambda a: np.sum(np.arange(0.0, a)), backend="numpy")(3.0)
    # a traced integer size is answered on the traced call and guarded (tests/test_branches.py);
    # with guards off it is refused
    np.testing.assert_array_equal(tg.jit(lambda x: np.zeros(x[0]))(np.array([3])), np.zeros(3))
    with pytest.raises(
        tg.TracingError, match=r"(?s)np.zeros cannot take a traced value.*static_argnums"
    ):
        tg.jit(lambda x: np.zeros(x[0]), guards=False, backend="numpy")(np.array([3]))


def test_augmented_writes_into_subscripts_on_a_line_of_several_statements(backend):
    ns = {"np": np}
    exec(
        "def f1(v):\n    y = np.zeros(5); y[1:4] += v; return y\n"
        "def f2(v):\n    y = np.ones((2, 3)); y[0] *= v; return y\n"
        "def f3(v):\n    y = np.arange(5.0); y[[0, 2, 4]] -= v; return y\n"
        "def f4(v):\n    y = np.zeros(5); row = y[1:4]; row += v; return y\n",
        ns,
    )
    v = np.array([1.0, 2.0, 3.0])
    for name in ("f1", "f2", "f3"):
        np.testing.assert_array_equal(tg.jit(ns[name], backend=backend)(v), ns[name](v))
    with pytest.raises(tg.TracingError, match="written into a view"):
        tg.jit(ns["f4"], backend=backend)(v)  # y changes through the view: not followed
