"""Integer-array (fancy) and static boolean indexing, np.take, np.take_along_axis and np.add.at
on traced values: values equal to NumPy's on every backend; gradients (a scatter-add: repeated
indices accumulate) against finite differences; batching; what is refused."""

import numpy as np
import pytest

import tracegrad as tg

X = np.arange(24.0).reshape(4, 6) / 10 - 1.1
IDX = np.array([2, 0, 2, -1])
MASK = np.array([True, False, True, False])


def forms(x, i):
    """Every indexing form, with a traced index array `i` and static ones."""
    return (
        x[i],
        x[:, i],
        x[1:3, [0, 5]],
        x[[0, 1], [2, 3]],
        x[MASK],
        x[i[:2], 1],
        x[None][0, :, [1, 2]],
        x[..., i[:3]],
        x[0, :, None][[1, 2]],
        x[MASK[:, None] & (np.arange(6) > 2)],
        np.take(x, i),
        np.take(x, [1, 4], axis=1),
        np.take(x, i, axis=0),
        np.take_along_axis(x, np.array([[0, 1], [2, 3], [4, 5], [5, 0]]), axis=1),
        np.take_along_axis(x, np.array([[3], [0], [1], [2], [3], [0]]).T, axis=0),
    )


@pytest.fixture(params=[np.float64, np.float32], ids=["f64", "f32"])
def dtype(request):
    return request.param


def test_values_equal_numpys(backend, dtype):
    x = X.astype(dtype)
    got = tg.jit(forms, backend=backend)(x, IDX)
    for k, (g, e) in enumerate(zip(got, forms(x, IDX), strict=True)):
        assert g.shape == e.shape and g.dtype == e.dtype, (k, g.shape, e.shape)
        np.testing.assert_array_equal(g, e, err_msg=f"form {k}")


def pair_energy(x, i, j):
    """A Lennard-Jones-like sum over a neighbour list: gathers with repeated indices."""
    d = x[i] - x[j]
    r2 = np.sum(d**2, axis=-1)
    return np.sum(1 / r2**3 - 1 / r2**2)


def accumulate(x, i):
    y = np.zeros_like(x)
    np.add.at(y, i, np.tanh(x[: len(i)]))
    return np.sum(y * np.linspace(0.5, 1.5, 6))


def test_gradients_accumulate_over_repeated_indices(backend):
    i, j = np.array([0, 0, 1, 2, 0]), np.array([1, 2, 3, 3, 3])
    for f, args in ((pair_energy, (i, j)), (accumulate, (np.array([1, 1, 3, 0]),))):
        g = tg.grad(f, backend=backend)(X, *args)
        eps = 1e-6
        fd = np.zeros_like(X)
        for k in np.ndindex(X.shape):
            d = np.zeros_like(X)
            d[k] = eps
            fd[k] = (f(X + d, *args) - f(X - d, *args)) / (2 * eps)
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_hessian_through_gathers():
    i, j = np.array([0, 0, 1]), np.array([1, 2, 3])
    f = lambda v: pair_energy(v.reshape(4, 6), i, j)
    x = X.ravel()
    h = tg.hessian(f, backend="numpy")(x)
    g = tg.grad(f, backend="numpy")
    eps = 1e-6
    fd = np.array([(g(x + eps * e) - g(x - eps * e)) / (2 * eps) for e in np.eye(24)])
    np.testing.assert_allclose(h, fd, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h, h.T, rtol=1e-12, atol=1e-12)


def test_batched_indices_and_data(backend):
    idx = np.array([[0, 3], [2, 2], [1, 0]])
    data = np.stack([X, X * 2, -X])
    both = tg.vmap(lambda x, i: x[i], backend=backend)(data, idx)
    np.testing.assert_array_equal(both, np.stack([data[b][idx[b]] for b in range(3)]))
    shared = tg.vmap(
        lambda x, i: np.take(x, i, axis=0)[:, 1:3], in_axes=(None, 0), backend=backend
    )(X, idx)
    np.testing.assert_array_equal(shared, np.stack([X[i, 1:3] for i in idx]))
    per_example = tg.vmap(tg.grad(lambda x, i: np.sum(np.sin(x[i]))), backend=backend)(data, idx)
    for b in range(3):
        expected = np.zeros_like(X)
        np.add.at(expected, idx[b], np.cos(data[b][idx[b]]))
        np.testing.assert_allclose(per_example[b], expected, rtol=1e-12)


def test_what_is_refused_and_why():
    with pytest.raises(tg.TracingError, match=r"np.where"):
        tg.jit(lambda x: x[x > 0], backend="numpy")(X)
    # a NumPy global indexed by a traced value is stood in for (tests/test_indexed_captures.py)
    np.testing.assert_array_equal(tg.jit(lambda i: X[i], backend="numpy")(IDX), X[IDX])
    with pytest.raises(IndexError, match="integer"):
        tg.jit(lambda x: x[np.array([0.5])], backend="numpy")(X)
    with pytest.raises(IndexError, match="out of bounds"):
        tg.jit(lambda x: x[[0, 7]], backend="numpy")(X)
    with pytest.raises(IndexError):  # a traced index out of range: NumPy's error when it runs
        tg.jit(lambda x, i: x[i], backend="cpu")(X, np.array([9]))
    with pytest.raises(tg.TracingError, match="several integer arrays"):
        tg.jit(lambda x: x[[0, 1], :, [1, 2]], backend="numpy")(X[None])


def test_scatter_add_matches_numpys_add_at():
    """The scatter-add step (one np.bincount over flat positions) against np.add.at: any axis,
    repeated and negative indices, float32 and float64, integers, and NumPy's IndexError."""
    from tracegrad.primitives import scatter_add_impl

    rng = np.random.default_rng(3)
    for shape, axis, index_shape in [
        ((5, 3), 0, (7,)),
        ((2, 6, 3), 1, (4, 2)),
        ((4,), 0, (9,)),
        ((3, 4), 1, (5,)),
    ]:
        idx = rng.integers(-shape[axis], shape[axis], index_shape)
        for dtype in (np.float64, np.float32, np.int64):
            v = (rng.normal(size=shape[:axis] + index_shape + shape[axis + 1 :]) * 10).astype(dtype)
            want = np.zeros(shape, dtype)
            np.add.at(want, (slice(None),) * axis + (idx,), v)
            got = scatter_add_impl(v, idx, axis, shape)
            assert got.dtype == dtype
            np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-13)
    with pytest.raises(IndexError):
        scatter_add_impl(np.ones(2), np.array([0, 3]), 0, (3,))


def test_compiled_scatter_add_equals_the_reference_bit_for_bit():
    """The compiled backends' scatter-add (a Numba loop) against the interpreter's (bincount):
    the same float64 sums in the same order, for strided (broadcast) values too."""
    from tracegrad.base import host_kernels
    from tracegrad.primitives import scatter_add_impl

    rng = np.random.default_rng(4)
    for shape, axis, index_shape in [
        ((60, 16), 0, (600, 8)),
        ((2, 6, 3), 1, (4, 2)),
        ((4,), 0, (9,)),
        ((3, 4), 1, (5,)),
        ((5, 2), 0, ()),
    ]:
        idx = rng.integers(-shape[axis], shape[axis], index_shape)
        for dtype in (np.float64, np.float32):
            v = rng.normal(size=shape[:axis] + index_shape + shape[axis + 1 :]).astype(dtype)
            np.testing.assert_array_equal(
                host_kernels.scatter_add(v, idx, axis, shape),
                scatter_add_impl(v, idx, axis, shape),
            )
    ct = np.broadcast_to(rng.normal(size=(600, 1, 16)), (600, 8, 16))  # a broadcast cotangent
    idx = rng.integers(0, 60, (600, 8))
    np.testing.assert_array_equal(
        host_kernels.scatter_add(ct, idx, 0, (60, 16)), scatter_add_impl(ct, idx, 0, (60, 16))
    )


@pytest.mark.parametrize(
    "index",
    [
        np.array([True, False]),  # shorter than the axis
        np.array([True, False, True, True]),  # longer
        (slice(None), np.array([False, True])),
        (Ellipsis, np.array([True, False, True])),
        np.ones((3, 2), bool),
    ],
)
def test_a_static_mask_of_the_wrong_shape_is_refused_as_numpy_refuses_it(backend, index):
    x = np.arange(12.0).reshape(3, 4)
    with pytest.raises(IndexError):
        x[index]
    with pytest.raises(IndexError, match="boolean index did not match"):
        tg.jit(lambda x: x[index], backend=backend)(x)


def test_boolean_and_float_scalar_indices(backend):
    x = np.arange(12.0).reshape(3, 4)
    for index in (True, False, np.True_, np.array(True)):
        with pytest.raises(tg.TracingError, match="boolean scalar"):
            tg.jit(lambda x: x[index], backend=backend)(x)  # noqa: B023
    with pytest.raises(IndexError, match="only integers"):
        tg.jit(lambda x: x[1.0], backend=backend)(x)
    good = np.array([True, False, True])
    np.testing.assert_array_equal(tg.jit(lambda x: x[good], backend=backend)(x), x[good])
    np.testing.assert_array_equal(
        tg.jit(lambda x: x[..., good[:2].repeat(2)], backend=backend)(x), x[..., good[:2].repeat(2)]
    )


@pytest.mark.parametrize(
    "fun",
    [
        lambda x: np.take(x, 3),
        lambda x: np.take(x, -1),
        lambda x: x.take(2, axis=1),
        lambda x: np.take(x, np.int64(1), axis=0),
        lambda x: x[[]],
        lambda x: x[:, []],
        lambda x: np.take(x, []),
    ],
)
def test_scalar_and_empty_integer_indices(backend, fun):
    x = np.arange(12.0).reshape(3, 4)
    got = tg.jit(fun, backend=backend)(x)
    assert got.shape == fun(x).shape
    np.testing.assert_array_equal(got, fun(x))
    g = tg.grad(lambda x: np.sum(fun(x) * 2.0), backend=backend)(x)
    want = np.zeros_like(x)
    np.add.at(want.reshape(-1), fun(np.arange(12).reshape(3, 4)).reshape(-1), 2.0)
    np.testing.assert_array_equal(g, want)


def _put_along(x, i):
    y = x.copy()
    np.put_along_axis(y, i, -1.0, axis=1)
    return y


def _set_pairs(x, i, j):
    y = x.copy()
    y[i, j] = -1.0
    y[i, j] += 2.0
    return y


def _add_at_pairs(x, i, j):
    y = x.copy()
    np.add.at(y, (i, j), 1.0)
    return y


@pytest.mark.parametrize(
    "fun, indices",
    [
        (lambda x, i: np.take_along_axis(x, i, axis=1), ([[5], [0], [0], [0]],)),
        (lambda x, i: np.take_along_axis(x, i, axis=1), ([[-1], [-5], [-6], [0]],)),
        (lambda x, i, j: x[i, j], ([0], [7])),
        (_put_along, ([[5], [0], [0], [0]],)),
        (_set_pairs, ([0, 1], [7, -6])),
        (_add_at_pairs, ([0, 1], [7, -6])),
    ],
    ids=["take_along", "take_along_negative", "x[i, j]", "put_along", "y[i, j] =", "add.at"],
)
def test_traced_indices_outside_their_own_axis_raise(fun, indices, backend):
    # an index outside its axis but inside the flattened array read (or wrote) another row's
    # element: x[0, 7] of a 4 x 5 array gave x[1, 2]
    x = np.arange(20.0).reshape(4, 5)
    args = (x, *(np.array(i) for i in indices))
    with pytest.raises(IndexError):
        fun(*args)
    with pytest.raises(IndexError):
        tg.jit(fun, backend=backend)(*args)


def test_traced_indices_inside_their_axes_still_gather_and_scatter(backend):
    x = np.arange(20.0).reshape(4, 5)
    i, j, k = np.array([0, 3, -1]), np.array([4, -5, 2]), np.array([[4], [-5], [0], [2]])

    def f(x, i, j, k):
        return x[i, j], np.take_along_axis(x, k, axis=1), _set_pairs(x, i, j)

    for got, want in zip(tg.jit(f, backend=backend)(x, i, j, k), f(x, i, j, k), strict=True):
        np.testing.assert_array_equal(got, want)
    grad = tg.grad(lambda x: np.sum(x[i, j] ** 2), backend=backend)(x)
    want = np.zeros_like(x)
    np.add.at(want, (i, j), 2 * x[i, j])
    np.testing.assert_array_equal(grad, want)


def test_tuples_inside_an_index_are_index_sequences_as_in_numpy(backend):
    """x[(0, 1, 0), (2, 2, 1)] indexes like x[[0, 1, 0], [2, 2, 1]] (a tuple inside the index
    tuple is a sequence of indices), for reads, gradients and writes."""
    x = np.arange(24.0).reshape(2, 3, 4)

    def f(x):
        return x[(0, 1, 0), (2, 2, 1)]

    np.testing.assert_array_equal(tg.jit(f, backend=backend)(x), f(x))
    g = tg.grad(lambda x: np.sum(f(x) ** 2), backend=backend)(x)
    want = np.zeros_like(x)
    np.add.at(want, ((0, 1, 0), (2, 2, 1)), 2 * f(x))
    np.testing.assert_array_equal(g, want)

    def h(x):
        y = x.copy()
        y[(0, 1), (2, 0)] = -1.0
        return y

    np.testing.assert_array_equal(tg.jit(h, backend=backend)(x), h(x))
