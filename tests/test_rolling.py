"""Rolling: repeated iterations of plain Python loops become one scan before differentiation.

Every rolled program is checked against the same program left unrolled (rolling switched off)
on the reference interpreter, and its derivatives against finite differences."""

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.fusion import limits
from tracegrad.transforms import rolling, scan


def scans(fun, *args):
    return [n for n in tg.make_ir(fun)(*args).nodes if n.prim is scan.scan_p]


def unrolled(fun, *args, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(rolling, "MIN_REPEATS", 10**9)
        assert not scans(fun, *args)
        return fun(*args)


def chain(x):
    for _ in range(40):
        x = np.sin(x) * 1.01 + 0.1
    return np.sum(x**2)


def test_a_plain_loop_rolls_and_gives_the_unrolled_answer(backend, monkeypatch):
    x = np.linspace(0, 1, 8)
    (node,) = scans(chain, x)
    assert node.params["length"] >= 36  # the iterations before the first full repeat stay
    expected = unrolled(tg.grad(chain, backend="numpy"), x, monkeypatch=monkeypatch)
    np.testing.assert_allclose(tg.grad(chain, backend=backend)(x), expected, rtol=1e-12)


def leapfrog(q, p, k):
    dt = 0.01
    for _ in range(60):
        f = -k * (q - np.roll(q, 1)) - k * (q - np.roll(q, -1))
        p = p + 0.5 * dt * f
        q = q + dt * p
        f = -k * (q - np.roll(q, 1)) - k * (q - np.roll(q, -1))
        p = p + 0.5 * dt * f
    return 0.5 * (p**2).sum() + q[0]


def test_a_leapfrog_with_loop_constants_rolls(backend, monkeypatch):
    q, p = np.linspace(0, 1, 6), np.cos(np.arange(6.0))
    assert scans(leapfrog, q, p, 1.3)
    g = tg.grad(leapfrog, argnums=(0, 2), backend=backend)(q, p, 1.3)
    expected = unrolled(
        tg.grad(leapfrog, argnums=(0, 2), backend="numpy"), q, p, 1.3, monkeypatch=monkeypatch
    )
    np.testing.assert_allclose(g[0], expected[0], rtol=1e-10)
    np.testing.assert_allclose(g[1], expected[1], rtol=1e-10)
    eps = 1e-6
    fd = (leapfrog(q, p, 1.3 + eps) - leapfrog(q, p, 1.3 - eps)) / (2 * eps)
    np.testing.assert_allclose(g[1], fd, rtol=1e-6)


def trajectory(x):
    """Values appended every step and stacked afterwards; a literal that changes each step."""
    states = []
    for i in range(30):
        x = np.cos(x) * 0.9 + (i * 0.01)
        states.append(x)
    return np.stack(states).sum(axis=1) @ np.linspace(1, 2, 30)


def test_stacked_states_and_changing_literals(backend, monkeypatch):
    x = np.linspace(-1, 1, 5)
    assert len(scans(trajectory, x)) == 1
    np.testing.assert_allclose(tg.jit(trajectory, backend=backend)(x), trajectory(x), rtol=1e-12)
    expected = unrolled(tg.grad(trajectory, backend="numpy"), x, monkeypatch=monkeypatch)
    np.testing.assert_allclose(tg.grad(trajectory, backend=backend)(x), expected, rtol=1e-11)


def nested(x):
    for _ in range(20):
        for _ in range(30):
            x = np.tanh(x) * 1.1
        x = x[::-1] + 0.01
    return x.sum()


def test_nested_loops_roll_from_the_inside_out(monkeypatch):
    x = np.linspace(-1, 1, 4)
    (outer,) = scans(nested, x)
    assert any(n.prim is scan.scan_p for n in outer.params["body"].nodes)
    np.testing.assert_allclose(
        tg.grad(nested, backend="numpy")(x),
        unrolled(tg.grad(nested, backend="numpy"), x, monkeypatch=monkeypatch),
        rtol=1e-12,
    )


def second_order_recurrence(x):
    prev, cur = x, x * 0.5
    for _ in range(40):
        prev, cur = cur, np.sin(cur) + 0.3 * prev
    return cur.sum()


def two_back(x):
    y = x * 0.5
    for _ in range(12):
        x, y = np.sin(x) * 0.9 + 0.1 * y, x
    return np.sum(x + y)  # reads the last two iterations


def test_a_value_read_two_iterations_later_is_carried_two_deep(backend, monkeypatch):
    """x[t] = sin(x[t-1]) + 0.3 x[t-2] reads two iterations back: one scan carrying the last two
    values, with the unrolled program's value and gradient."""
    x = np.linspace(0, 1, 4)
    for fun in (second_order_recurrence, two_back):
        (node,) = scans(fun, x)
        assert node.params["n_carry"] == 2, fun.__name__
        value, grad = tg.value_and_grad(fun, backend=backend)(x)
        want_value, want_grad = unrolled(
            tg.value_and_grad(fun, backend="numpy"), x, monkeypatch=monkeypatch
        )
        np.testing.assert_allclose(value, want_value, rtol=1e-13)
        np.testing.assert_allclose(grad, want_grad, rtol=1e-12)
        eps = 1e-6
        fd = [(fun(x + eps * e) - fun(x - eps * e)) / (2 * eps) for e in np.eye(4)]
        np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6 * np.abs(grad).max())


def three_back(x):
    a, b, c = x, x * 0.5, x * 0.25
    for _ in range(16):
        a, b, c = np.cos(a) * 0.5 + 0.2 * c, a, b
    return np.sum(a * b + c)


def far_back(x):
    history = [x * 0.1 * k for k in range(6)]
    for _ in range(20):
        history.append(np.sin(history[-1]) + 0.5 * history[-6])  # six iterations back
    return np.sum(history[-1])


def test_reads_up_to_the_lag_limit_roll_and_further_back_stays_unrolled(monkeypatch):
    x = np.linspace(0, 1, 4)
    (node,) = scans(three_back, x)
    assert node.params["n_carry"] == 3
    np.testing.assert_allclose(
        tg.grad(three_back, backend="numpy")(x),
        unrolled(tg.grad(three_back, backend="numpy"), x, monkeypatch=monkeypatch),
        rtol=1e-12,
    )
    assert rolling.MAX_LAG < 6
    assert not scans(far_back, x)


def test_a_long_plain_loop_compiles_like_a_short_one():
    """The kernels of a 1,000-step loop are those of a 100-step one (source, not compiled)."""

    def run(k):
        def f(q):
            for _ in range(k):
                q = np.sin(np.concatenate([q[1:], q[:1]]) + np.concatenate([q[-1:], q[:-1]]))
            return q

        return tg.make_kernels(tg.jit(f), backend="cpu")(np.linspace(0, 1, 64))

    assert len(run(1000)) == len(run(100))


def test_a_program_too_large_names_the_line(monkeypatch):
    monkeypatch.setattr(limits, "MAX_SOURCE_CHARS", 100)
    with pytest.raises(limits.ProgramTooLarge, match=r"come from .*test_rolling.py:\d+"):
        tg.jit(chain, backend="cpu")(np.ones(3))


def rnn(h, xs, w):
    """The loop counter indexes the inputs: xs[t] is a stacked xs of the scan."""
    for t in range(len(xs)):
        h = np.tanh(h * w + xs[t])
    return h.sum()


def every_other_column(h, xs, w):
    for t in range(10):
        h = np.tanh(h * w + xs[:, 2 * t + 1]) * 0.5
    return h.sum()


def irregular(h, xs, w):
    for t in range(10):  # windows at 0, 1, 4, 9, ..., 81: not a fixed step
        h = np.tanh(h * w + xs[t * t]) * 0.5
    return h.sum()


def test_indexing_by_the_loop_counter_rolls(backend, monkeypatch):
    h = np.linspace(-1, 1, 8)
    xs = np.linspace(0, 1, 160).reshape(20, 8)
    for fun, data in ((rnn, xs), (every_other_column, xs.T.copy())):
        assert scans(fun, h, data, 0.7), fun.__name__
        got = tg.grad(fun, argnums=(0, 1, 2), backend=backend)(h, data, 0.7)
        want = unrolled(
            tg.grad(fun, argnums=(0, 1, 2), backend="numpy"), h, data, 0.7, monkeypatch=monkeypatch
        )
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-14)


def test_windows_that_do_not_move_by_a_fixed_step_stay_unrolled(monkeypatch):
    h = np.linspace(-1, 1, 16)
    xs = np.linspace(0, 1, 82 * 16).reshape(82, 16)
    assert scans(lambda h, xs, w: every_other_column(h, xs.T, w), h, xs, 0.7)  # same size rolls
    assert not scans(irregular, h, xs, 0.7)
    np.testing.assert_allclose(
        tg.grad(irregular, backend="numpy")(h, xs, 0.7),
        unrolled(tg.grad(irregular, backend="numpy"), h, xs, 0.7, monkeypatch=monkeypatch),
        rtol=1e-12,
    )


def periodic_fill(x):
    n = x.shape[0]
    y = np.zeros(n)
    for i in range(n):  # the last iteration reads x[0]: a window off the fixed step
        y[i] = np.sin(x[i]) * x[(i + 1) % n]
    return np.sum(y**2)


def test_a_periodic_boundary_leaves_its_iteration_unrolled_and_the_rest_rolls(backend, monkeypatch):
    x = np.linspace(0.1, 1.0, 64)
    # one scan: not another one per round of rolling over the rows it wrote back one by one
    (node,) = scans(periodic_fill, x)
    assert node.params["length"] == 62  # the first (the array is made) and the last stay
    # the rows of the rolled results, written back one by one, are one window of them again
    graph = tg.make_ir(tg.value_and_grad(periodic_fill))(x)
    assert len(graph.nodes) < 100
    value, grad = tg.value_and_grad(periodic_fill, backend=backend)(x)
    want_value, want_grad = unrolled(
        tg.value_and_grad(periodic_fill, backend="numpy"), x, monkeypatch=monkeypatch
    )
    np.testing.assert_allclose(value, want_value, rtol=1e-13)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-12, atol=1e-15)


def test_a_loop_reading_a_view_of_a_captured_array_rolls_in_the_compiled_program(backend):
    """`H.T` of a captured H is a new view object in every iteration: each was a hidden input of
    its own, so the iterations read different values from before the loop and the program was
    compiled unrolled (a 100-step Kalman filter's gradient: 12,575 nodes). Views of the same
    memory are one input. tg.make_ir holds captured arrays as constants and showed it rolled."""
    from tracegrad.runtime import program_store

    rng = np.random.default_rng(3)
    H = rng.standard_normal((2, 4))
    ys = rng.standard_normal((30, 2))

    def loss(m):
        total = 0.0
        for t in range(30):
            m = np.tanh(m + 0.1 * (H.T @ (ys[t] - H @ m)))
            total = total + np.sum(m * m)
        return total

    m0 = rng.standard_normal(4)
    f = tg.grad(loss, backend=backend)
    program_store.clear_programs()
    got = f(m0)
    (program,) = program_store._programs.values()
    assert sum(n.prim is scan.scan_p for n in program.graph.nodes) >= 1
    assert len(program.graph.nodes) < 200
    # the captured array is read afresh on every call: a change of it is seen
    want = tg.grad(loss, backend="numpy")(m0)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    H[:] = rng.standard_normal((2, 4))
    np.testing.assert_allclose(f(m0), tg.grad(loss, backend="numpy")(m0), rtol=1e-12, atol=1e-14)
    eps = 1e-6
    fd = [(loss(m0 + eps * e) - loss(m0 - eps * e)) / (2 * eps) for e in np.eye(4)]
    np.testing.assert_allclose(f(m0), fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize(
    "make, sliced",
    [
        (lambda a: a[2], True),
        (lambda a: a.T, True),
        (lambda a: a[1:, ::2].T, True),
        (lambda a: a[:, 3], True),
        (lambda a: a[None, 1, :, None], True),
        (lambda a: a[::-1], True),
        (lambda a: a[4, ::-3], True),
        (lambda a: a[:, ::-2].T[1:], True),
        # held as views, as before: rows that wrap, another dtype
        (lambda a: a.reshape(-1)[5:17:3], False),
        (lambda a: a.view(np.int64), False),
    ],
)
def test_views_of_captured_arrays_read_the_array_afresh(make, sliced, backend):
    from tracegrad.tracing.scope import view_of

    data = np.arange(48.0).reshape(6, 8) * 0.5
    view = make(data)
    how = view_of(data, view)
    assert (how is not None) == sliced
    if how is not None:  # the ops the trace emits make the same view
        window, squeezed, perm = how
        window = tuple(slice(a, None if b < 0 else b, c) for a, b, c in window)
        made = data[window].reshape(squeezed).transpose(perm)
        np.testing.assert_array_equal(made.reshape(view.shape), view)
    if view.dtype != data.dtype:
        return

    def f(x):
        return np.sum(make(data) * x)

    x = np.linspace(-1.0, 1.0, view.size).reshape(view.shape)
    g = tg.jit(f, backend=backend)
    np.testing.assert_allclose(g(x), f(x), rtol=1e-14)
    data *= 3.0  # a change of the captured array is seen
    np.testing.assert_allclose(g(x), f(x), rtol=1e-14)
    np.testing.assert_allclose(tg.grad(f, backend=backend)(x), make(data))
