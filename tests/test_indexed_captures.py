"""NumPy arrays the traced function reaches by name and indexes with traced values (`X[i]` with
`X` a global, a closure variable, an attribute, an item, and `i` computed from the arguments):
NumPy indexes a plain array itself, so the trace stands in for the array where it lives
(tracing/indexed_arrays.py). Checked against plain NumPy, with the array changed between calls,
and with the array back in its place after every trace."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tracegrad as tg

TABLE = np.arange(12.0).reshape(3, 4)
TUPLE_OF_TABLES = (TABLE,)


def _indices(x):
    return np.floor(x).astype(int) % 3, np.floor(2 * x).astype(int) % 4


def bilinear(x):
    """fluidsim's pattern: a table read at indices computed from the arguments, weighted."""
    i, j = _indices(x)
    w = x - np.floor(x)
    return np.sum((1 - w) * TABLE[i, j] + w * TABLE[(i + 1) % 3, j] ** 2)


def bilinear_numpy(x, table):
    i, j = _indices(x)
    w = x - np.floor(x)
    value = np.sum((1 - w) * table[i, j] + w * table[(i + 1) % 3, j] ** 2)
    gradient = table[(i + 1) % 3, j] ** 2 - table[i, j]  # the indices are piecewise constant
    return value, gradient


X = np.array([0.25, 1.7, 2.4, 0.9])


@pytest.fixture
def table():
    saved = TABLE.copy()
    yield TABLE
    TABLE[:] = saved


def test_a_global_indexed_by_traced_values(backend, table):
    f = tg.value_and_grad(bilinear, backend=backend)
    value, gradient = f(X)
    expected_value, expected_gradient = bilinear_numpy(X, table)
    np.testing.assert_allclose(value, expected_value, rtol=1e-15)
    np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-15)
    assert type(TABLE) is np.ndarray and TABLE is table  # put back where it lives
    # the program reads the array afresh: an in-place change is seen, with no new trace
    table *= 1.5
    value, gradient = f(X)
    expected_value, expected_gradient = bilinear_numpy(X, table)
    np.testing.assert_allclose(value, expected_value, rtol=1e-15)
    np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-15)
    assert f.trace_count == 1


def test_a_rebound_global_is_seen(backend):
    global TABLE
    original = TABLE
    try:
        f = tg.jit(bilinear, backend=backend)
        np.testing.assert_allclose(f(X), bilinear_numpy(X, TABLE)[0], rtol=1e-15)
        TABLE = original + 10.0
        np.testing.assert_allclose(f(X), bilinear_numpy(X, TABLE)[0], rtol=1e-15)
    finally:
        TABLE = original


def test_closure_attribute_item_and_view(backend):
    table = np.linspace(0.0, 1.0, 12).reshape(3, 4)

    class Model:
        def __init__(self):
            self.weights = table * 2.0
            self.params = {"bias": table + 1.0}

    model = Model()

    def f(x):
        i, j = _indices(x)
        return np.sum(
            x * table[i, j]  # closure variable
            + x**2 * model.weights[i, j]  # attribute
            + x**3 * model.params["bias"][i, 0]  # dict item
            + x * table[:, 1][i]  # a view of a reachable array, indexed
        )

    i, j = _indices(X)
    expected = (
        table[i, j] + 2 * X * (2 * table)[i, j] + 3 * X**2 * (table + 1)[i, 0] + table[:, 1][i]
    )
    np.testing.assert_allclose(tg.grad(f, backend=backend)(X), expected, rtol=1e-14)
    assert type(model.weights) is np.ndarray and type(model.params["bias"]) is np.ndarray


def test_the_user_arrays_are_not_modified_and_nothing_else_changes(backend, table):
    before = table.copy()

    def f(x):
        i, _ = _indices(x)
        total = table.sum()  # NumPy reads the array while tracing: a plain number
        return np.sum(TABLE[i] * x[:, None]) / total + np.mean(TABLE.T @ x[:3])

    g = tg.grad(f, backend=backend)(X)
    i, _ = _indices(X)
    expected = TABLE[i].sum(axis=1) / before.sum()
    expected[:3] += TABLE.T.sum(axis=0) / 4 * 0 + TABLE.sum(axis=1) / 4
    np.testing.assert_allclose(g, expected, rtol=1e-14)
    np.testing.assert_array_equal(table, before)


def test_an_exception_handler_in_the_users_code_does_not_swallow_the_restart(backend, table):
    def f(x):
        try:
            picked = TABLE[_indices(x)]
        except Exception:  # the user's own handler
            picked = np.zeros(x.shape)
        return np.sum(picked * x)

    np.testing.assert_array_equal(tg.grad(f, backend=backend)(X), TABLE[_indices(X)])


def test_make_ir_shows_the_array_as_a_constant(table):
    text = str(tg.make_ir(bilinear)(X))
    assert "gather" in text and "const[shape=(12,)" in text  # the table, flattened
    assert type(TABLE) is np.ndarray


def test_higher_orders_and_vmap(backend, table):
    def f(x):
        i, _ = _indices(x)
        return np.sum(TABLE[i, 0] * x**3)

    i, _ = _indices(X)
    np.testing.assert_allclose(
        tg.hessian(f, backend=backend)(X), np.diag(6 * X * TABLE[i, 0]), rtol=1e-14
    )
    batch = np.stack([X, X + 1.0])
    per_example = tg.vmap(tg.grad(f), backend=backend)(batch)
    for row, x in zip(per_example, batch, strict=True):
        k, _ = _indices(x)
        np.testing.assert_allclose(row, 3 * x**2 * TABLE[k, 0], rtol=1e-14)


def test_a_tuple_item_cannot_be_stood_in_for_and_says_what_to_do():
    def f(x):
        return np.sum(TUPLE_OF_TABLES[0][_indices(x)] * x)

    with pytest.raises(tg.TracingError, match=r"global 'TUPLE_OF_TABLES\[0\]', held where") as e:
        tg.grad(f)(X)
    assert "np.copy(A)[i] takes traced indices" in str(e.value)
    assert type(TUPLE_OF_TABLES[0]) is np.ndarray


def test_the_advised_copy_works(backend):
    def f(x):
        table = np.copy(TUPLE_OF_TABLES[0])  # the advice of the error above
        return np.sum(table[_indices(x)] * x)

    np.testing.assert_array_equal(tg.grad(f, backend=backend)(X), TABLE[_indices(X)])


def test_another_thread_sees_the_array_while_a_trace_stands_in_for_it(table):
    seen: list[float] = []
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            seen.append(float(np.sum(TABLE[1:, ::2] * 2.0)) + float(TABLE[2, 3]))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for _ in range(3):
            tg.clear_programs()
            tg.grad(bilinear, backend="numpy")(X)
    finally:
        stop.set()
        thread.join()
    expected = float(np.sum(table[1:, ::2] * 2.0)) + float(table[2, 3])
    assert seen and all(s == expected for s in seen)


def test_a_python_branch_before_the_indexing_is_answered_again(backend, table):
    def f(x):
        scale = 2.0 if np.sum(x) > 0 else -1.0  # a guard, answered on both traces
        return scale * np.sum(TABLE[_indices(x)] * x)

    g = tg.grad(f, backend=backend)
    np.testing.assert_array_equal(g(X), 2.0 * TABLE[_indices(X)])
    np.testing.assert_array_equal(g(-X), -1.0 * TABLE[_indices(-X)])
    assert g.trace_count == 2


def test_two_threads_trace_functions_indexing_the_same_array(table):
    def first(x):
        return np.sum(TABLE[_indices(x)] * x)

    def second(x):
        return np.sum(TABLE[_indices(x)[0], 0] * x**2) + np.sum(TABLE * 0.0)

    results: dict[str, list] = {"first": [], "second": []}

    def work(name, fun):
        for _ in range(3):
            tg.clear_programs()  # every round traces again, while the other thread may trace
            results[name].append(tg.grad(fun, backend="numpy")(X))

    threads = [
        threading.Thread(target=work, args=p) for p in (("first", first), ("second", second))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    i, j = _indices(X)
    for got in results["first"]:
        np.testing.assert_array_equal(got, TABLE[i, j])
    for got in results["second"]:
        np.testing.assert_array_equal(got, 2 * X * TABLE[i, 0])
    assert len(results["first"]) == len(results["second"]) == 3
    assert type(TABLE) is np.ndarray
