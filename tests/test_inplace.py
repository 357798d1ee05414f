"""In-place writes on traced arrays, with NumPy's syntax and semantics made functional:
`y[0] = a`, `y[1:] += b`, `x *= 2`, boolean masks, views that see writes and write through.
Each function runs under NumPy itself (the oracle) and under tracegrad, values and gradients."""

import numpy as np
import pytest

import tracegrad as tg


def build(x):
    y = np.zeros_like(x, shape=(6,))
    y[0] = x[0] * 2
    y[1:3] = x[1:3] ** 2
    y[3:] += np.sin(x[2:5])
    y[-1] -= 1.0
    z = y[1:5]  # a view: sees later writes to y, and writes into y
    z[0] *= 3
    y[4] = x[4] * x[0]
    w = y[::-2]
    y[...] *= 1.5
    return np.sum(y * z.sum()) + z[3] + w[0]


def grid(x):
    m = np.zeros_like(x, shape=(3, 4))
    m[0] = x[:4]
    m[1:, ::2] = x[4:6, None]  # broadcast into a strided region
    m[:, 1] += np.tanh(x[:3])
    m[2, -1] = np.exp(x[0])
    m[m > 0.5] = 0.5  # a traced mask, a scalar value
    return np.sum(m**2) + m[1, 2]


def aliases(x):
    a = x[:3] + 0.0
    b = a  # another name for the same array
    b += 1.0
    c = a.copy()
    a *= a  # c is a copy: unchanged
    r = a.reshape(3, 1)  # a view through reshape sees the write below
    a[1] = 7.0
    return np.sum(b * c) + r[1, 0] + np.sum(a.T)


def update_argument(x):
    x[0] = 3.0  # the caller's array is not modified
    x += 1.0
    return np.sum(x**2)


def reversed_writes(x):
    # a reversed slice over a whole axis: the write used to land unreversed
    y = np.zeros_like(x, shape=(3,))
    y[::-1] = x[:3]
    m = np.zeros_like(x, shape=(2, 3))
    m[:, ::-1] = x.reshape(2, 3) ** 2
    m[::-1] += x[3:]
    v = y[::-1]  # a view through a reversed slice writes into y
    v[0] = x[5] * 4.0
    return np.sum(y * np.arange(1.0, 4.0)) + np.sum(m * np.arange(6.0).reshape(2, 3)) + v[2]


def masked_updates(x):
    # y[mask] op= c with a traced mask (read on its own, y[mask] has a value-dependent shape)
    y = x * 1.0
    y[x > 0.5] *= 3.0
    y[y < 0] += 0.25
    m = np.ones_like(x, shape=(2, 3))  # a row mask, into an array made in the function
    m[x[:2] > 0.4] /= x[4]
    row = m[1]  # through a view, with the mask in a tuple
    row[(x[3:] < 1.0,)] -= 0.5
    return np.sum(y**2) + np.sum(m * x.reshape(2, 3))


FUNCTIONS = [build, grid, aliases, update_argument, reversed_writes, masked_updates]


@pytest.fixture(params=[np.float64, np.float32], ids=["f64", "f32"])
def dtype(request):
    return request.param


@pytest.mark.parametrize("fun", FUNCTIONS, ids=lambda f: f.__name__)
def test_values_and_derivatives_match_numpy(fun, backend, dtype):
    x = np.array([0.45, 1.5, -0.3, 0.8, 2.0, 0.1], dtype=dtype)
    keep = x.copy()
    expected = fun(x.astype(np.float64).copy())
    value, grad = tg.value_and_grad(fun, backend=backend)(x)
    np.testing.assert_array_equal(x, keep)  # never the caller's array
    tol = 1e-12 if dtype == np.float64 else 1e-4
    np.testing.assert_allclose(value, expected, rtol=tol)
    eps = 1e-6
    x64 = x.astype(np.float64)
    fd = np.array([(fun(x64 + eps * e) - fun(x64 - eps * e)) / (2 * eps) for e in np.eye(6)])
    np.testing.assert_allclose(grad, fd, rtol=1e-5 if dtype == np.float64 else 2e-3, atol=1e-6)


@pytest.mark.parametrize("fun", [build, grid], ids=lambda f: f.__name__)
def test_hessians_match_finite_differences(fun):
    x = np.array([0.45, 1.5, -0.3, 0.8, 2.0, 0.1])
    h = tg.hessian(fun, backend="numpy")(x)
    g = tg.grad(fun, backend="numpy")
    eps = 1e-5
    fd = np.array([(g(x + eps * e) - g(x - eps * e)) / (2 * eps) for e in np.eye(6)])
    np.testing.assert_allclose(h, fd, rtol=1e-5, atol=1e-6)


def test_dtypes_follow_numpy():
    def f(x, n):
        n[0] = x[0]  # a float written into an integer array is truncated, as in NumPy
        y = x.astype(np.float32)
        y += x  # float32 += float64: stays float32 ('same_kind')
        return n, y

    n, y = tg.jit(f, backend="numpy")(np.array([1.7, 2.0]), np.array([5, 6]))
    assert n.dtype == np.int64 and list(n) == [1, 6]
    assert y.dtype == np.float32
    with pytest.raises(TypeError, match="same_kind"):
        tg.jit(lambda n: n.__iadd__(1.5), backend="numpy")(np.array([1, 2]))


def test_what_is_refused_and_why():
    x = np.linspace(0, 1, 4)

    outside = np.zeros(4)

    def into_numpy_array(x):
        outside[0] = x[0]  # an array made outside the traced function cannot hold a traced value
        return outside

    with pytest.raises(
        tg.TracingError, match=r"inside the function from a traced constructor: y = np.zeros\(n\)"
    ):
        tg.jit(into_numpy_array, backend="numpy")(x)

    def masked_array_value(x):
        y = x + 0
        y[x > 0.5] = x[:2]
        return y

    with pytest.raises(tg.TracingError, match=r"np.where"):
        tg.jit(masked_array_value, backend="numpy")(x)

    def masked_array_update(x):
        y = x + 0
        y[x > 0.5] *= x[:2]  # one number only: the masked elements' count is not known
        return y

    with pytest.raises(tg.TracingError, match=r"needs one number"):
        tg.jit(masked_array_update, backend="numpy")(x)

    def masked_read(x):
        y = x + 0
        return y[x > 0.5]  # not an update: its shape depends on the values

    with pytest.raises(tg.TracingError, match=r"traced boolean mask"):
        tg.jit(masked_read, backend="numpy")(x)

    # writes through a transpose of a reshape, a flip, a rot90 or a split part land on the
    # array's elements, as in NumPy (they were refused before; never lost)
    def through_transpose(x):
        m = x.copy().reshape(2, 2)
        m.T[0, 1] = 5.0
        return m

    for got, want in zip(tg.jit(through_transpose)(x), through_transpose(x.copy()), strict=True):
        np.testing.assert_array_equal(got, want)
    for view in (np.flip, lambda y: np.rot90(y.reshape(2, 2)), lambda y: np.split(y, 2)[1]):

        def through_view(x, view=view):
            y = x.copy()
            view(y)[0] = 5.0
            return y

        np.testing.assert_array_equal(tg.jit(through_view)(x), through_view(x.copy()))

    def outer(x):
        def inner(y):
            x[0] = y  # writes into the enclosing function's array
            return y

        return tg.grad(inner)(x[1])

    with pytest.raises(tg.TracingError, match="enclosing"):
        tg.jit(outer, backend="numpy")(x)

    with pytest.raises(ValueError, match="broadcast"):
        tg.jit(lambda x: x.__iadd__(np.ones((2, 4))), backend="numpy")(x)


def test_flipped_split_and_real_views_see_later_writes(backend):
    def f(x):
        y = x.copy()
        flipped, parts, real = np.flip(y), np.split(y, 4), y.real
        same = y.astype(y.dtype, copy=False)  # NumPy: the array itself
        y[0] = 100.0
        same[3] = 50.0
        return flipped, parts[0], parts[1], real, np.rot90(y.reshape(2, 4)), y

    x = np.arange(1.0, 9.0)
    for got, want in zip(tg.jit(f, backend=backend)(x), f(x.copy()), strict=True):
        np.testing.assert_array_equal(got, want)


def test_full_like_with_a_traced_fill_value(backend):
    f = tg.grad(lambda s: np.sum(np.full_like(s, s, shape=(3,)) * np.arange(3.0)), backend=backend)
    np.testing.assert_allclose(f(2.0), 3.0)


def test_many_small_writes_become_one_scatter():
    """A preallocated array filled element by element: one scatter of the written values, not a
    select per write (which made a kernel with an operand per write, and O(writes x size) work)."""

    def fill(x):
        y = x * 0
        for i in range(12):
            y[i] = x[i] * x[(i + 1) % 12]
        y[3] = 7.0  # the last write of a position wins
        return y

    x = np.linspace(0.5, 1.6, 12)
    ir_text = str(tg.make_ir(fill)(x))
    assert ir_text.count("where") <= 2 and "scatter_add" in ir_text
    y = x * 0
    for i in range(12):
        y[i] = x[i] * x[(i + 1) % 12]
    y[3] = 7.0
    np.testing.assert_array_equal(tg.jit(fill, backend="numpy")(x), y)
    jac = tg.jacobian(fill, backend="numpy")(x)
    fd = np.array([(fill(x + 1e-6 * e) - fill(x - 1e-6 * e)) / 2e-6 for e in np.eye(12)]).T
    np.testing.assert_allclose(jac, fd, rtol=1e-6, atol=1e-8)


def traced_writes(x, v, idx):
    y = np.exp(x)
    y[idx] = v  # idx is an argument: which write is last is found when the program runs
    return np.sum(y * np.arange(1.0, 7.0))


def test_writes_through_traced_indices_keep_the_last_value_of_a_repeated_position(backend):
    x = np.array([0.45, 1.5, -0.3, 0.8, 2.0, 0.1])
    v = np.array([10.0, 20.0, 30.0, 40.0, 50.0])
    fun = tg.value_and_grad(traced_writes, argnums=(0, 1), backend=backend)
    for idx in ([4, 1, 4, 0, 1], [0, 1, 2, 3, 5], [2, 2, 2, 2, 2], [-1, 5, 0, -6, 3]):
        idx = np.array(idx)
        y = np.exp(x)
        y[idx] = v
        expected = np.sum(y * np.arange(1.0, 7.0))
        value, (gx, gv) = fun(x, v, idx)
        np.testing.assert_allclose(value, expected, rtol=1e-13)
        # x's gradient survives where nothing was written; v's reaches its last writes only
        written = np.zeros(6, bool)
        written[idx] = True
        np.testing.assert_allclose(gx, np.where(written, 0.0, np.exp(x) * np.arange(1.0, 7.0)))
        winners = {}
        for k, i in enumerate(idx % 6):
            winners[i] = k
        want_gv = np.zeros(5)
        for i, k in winners.items():
            want_gv[k] = i + 1.0
        np.testing.assert_allclose(gv, want_gv)


@pytest.mark.parametrize(
    "value, dtype, error",
    [(300, np.int8, OverflowError), (-1, np.uint8, OverflowError), (np.nan, np.int64, ValueError)],
)
def test_writing_a_number_the_dtype_cannot_hold_fails_as_numpy_fails(value, dtype, error):
    # it was cast silently: 300 into int8 became 44
    def f(x):
        y = x.copy()
        y[0] = value
        return y

    x = np.array([1, 2, 3], dtype)
    with pytest.raises(error):
        f(x)
    with pytest.raises(error, match=r"test_inplace\.py"):
        tg.jit(f, backend="numpy")(x)
    assert tg.jit(lambda x: f(x.astype(np.float64)), backend="numpy")(x)[1] == 2.0
