"""NumPy's own semantics, kept exactly: values (dtype, shape, NaN) equal NumPy's on every backend,
derivatives match finite differences, and what NumPy refuses is refused with NumPy's exception type.

Each group here pins a behaviour that once silently differed from NumPy: norms of every order,
fmax/fmin ignoring NaN, Fortran-order reshapes, bitwise integer operators, the dtype argument of
var/std/mean, integer reciprocals, np.inner of every rank, stacking one array, matmul by a scalar,
and integer comparisons with out-of-range Python ints.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.base.errors import TracingError
from helpers import finite_differences

X = np.array([[0.3, -1.2, 0.8], [1.5, 0.4, -0.6]])
X3 = np.random.default_rng(7).uniform(-2.0, 2.0, size=(2, 3, 4))  # no zeros, no ties


def _same(got, want):
    """Equal to NumPy's result in value (NaN where NumPy has NaN), dtype and shape."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


def _check_all(fun, args, backend, argnums=None, order=1):
    """Every result equal to NumPy's; then, for `argnums`, derivatives of a weighted sum of the
    results against finite differences (up to `order`)."""
    with np.errstate(all="ignore"):
        want = fun(*args)
    got = tg.jit(fun, backend=backend)(*args)
    several = isinstance(want, tuple)
    for g, w in zip(got if several else [got], want if several else [want], strict=True):
        _same(g, w)
    if argnums is None:
        return

    def weighted(*a):
        results = fun(*a) if several else (fun(*a),)
        return sum(
            np.sum(r * np.linspace(0.5, 1.5, np.size(r)).reshape(np.shape(r)) * (i + 1.0))
            for i, r in enumerate(results)
        )

    assert tg.check_grad(
        weighted, *args, argnums=argnums, backend=backend, order=order, rtol=1e-5, atol=1e-6
    )


# ----------------------------------------------------------------------------------------------
# np.linalg.norm: every order NumPy computes without an SVD; the SVD norms refused

VECTOR_ORDS = [None, 2, 1, np.inf, -np.inf, 3, 0.5, -1.5, 4.0]
MATRIX_ORDS = [None, "fro", "f", 1, -1, np.inf, -np.inf]


@pytest.mark.parametrize("ord", VECTOR_ORDS, ids=str)
def test_vector_norms_of_every_order(ord, backend):
    def f(x):
        return (
            np.linalg.norm(x[0], ord),
            np.linalg.norm(x, ord, axis=1),
            np.linalg.norm(x, ord, axis=0, keepdims=True),
            np.linalg.norm(x, ord, axis=(-1,)),
        )

    _check_all(f, (X3[0],), backend, argnums=(0,), order=2 if ord in (3, 0.5) else 1)


@pytest.mark.parametrize("ord", MATRIX_ORDS, ids=str)
def test_matrix_norms_of_every_order(ord, backend):
    def f(x):
        out = (
            np.linalg.norm(x, ord, axis=(1, 2)),
            np.linalg.norm(x, ord, axis=(2, 0)),
            np.linalg.norm(x, ord, axis=(0, -1), keepdims=True),
        )
        return out + (np.linalg.norm(x[0], ord),)

    _check_all(f, (X3,), backend, argnums=(0,))


def test_zero_order_norm_counts_nonzeros_and_has_no_gradient(backend):
    x = np.array([[0.0, 2.0, -1.0], [0.0, 0.0, 3.0]])
    _check_all(lambda v: (np.linalg.norm(v, 0, axis=1), np.linalg.norm(v[1], 0)), (x,), backend)
    grad = tg.grad(lambda v: np.linalg.norm(v, 0, axis=1).sum(), backend=backend)(x)
    assert np.all(grad == 0)


def test_integer_input_norms_are_float(backend):
    i = np.array([[3, -4], [1, 2]])
    _check_all(
        lambda v: (np.linalg.norm(v), np.linalg.norm(v, 1), np.linalg.norm(v, np.inf, axis=1)),
        (i,),
        backend,
    )


@pytest.mark.parametrize("ord", [2, -2, "nuc"], ids=str)
def test_norms_from_singular_values_equal_numpys(ord):
    for call in (
        lambda x: np.linalg.norm(x, ord),
        lambda x: np.linalg.norm(x, ord, axis=(1, 0)),
        lambda x: np.linalg.norm(x[None], ord, axis=(1, 2), keepdims=True),
    ):
        np.testing.assert_allclose(tg.jit(call, backend="numpy")(X), call(X), rtol=1e-13)


@pytest.mark.parametrize(
    "call",
    [
        lambda x: np.linalg.norm(x[0], "fro"),  # no string order for vectors
        lambda x: np.linalg.norm(x, "nuc", axis=1),
        lambda x: np.linalg.norm(x, 3, axis=(0, 1)),  # no such matrix norm
        lambda x: np.linalg.norm(x, 1, axis=(1, 1)),  # duplicate axes
        lambda x: np.linalg.norm(x[None], 1),  # three axes
    ],
)
def test_invalid_norms_fail_as_numpy_fails(call):
    with pytest.raises(ValueError) as numpy_error:
        call(X)
    with pytest.raises(type(numpy_error.value)):
        tg.jit(call)(X)


# ----------------------------------------------------------------------------------------------
# np.fmax / np.fmin ignore a NaN operand


A_NAN = np.array([1.0, np.nan, 3.0, -2.0, np.nan, 0.5])
B_NAN = np.array([np.nan, 2.0, 1.0, -1.0, np.nan, 0.25])


def test_fmax_fmin_ignore_nan_as_numpy_does(backend):
    def f(a, b, i):
        return (
            np.fmax(a, b),
            np.fmin(a, b),
            np.fmax(a, 0.0),
            np.fmin(b, np.nan),
            np.fmax(np.nan, a),
            np.fmax(a.astype(np.float32), b.astype(np.float32)),
            np.fmin(a, 2),
            np.fmax(i, i[::-1]),
            np.fmin(i, 2),
            np.fmax(i, 2.5),
        )

    _check_all(f, (A_NAN, B_NAN, np.array([3, 0, 5, 1, 9, 2])), backend)


@pytest.mark.parametrize("ufunc", [np.fmax, np.fmin], ids=lambda u: u.__name__)
def test_fmax_fmin_gradient_goes_to_the_operand_that_is_not_nan(ufunc, backend):
    a, b = A_NAN[:4], B_NAN[:4]  # no place where both are NaN
    w = np.array([1.0, 2.0, 3.0, 4.0])
    grads = tg.grad(lambda p, q: np.sum(ufunc(p, q) * w), argnums=(0, 1), backend=backend)(a, b)
    expected = finite_differences(
        lambda args: np.sum(ufunc(*args) * w), [a.copy(), b.copy()], [0, 1]
    )
    for g, e, operand in zip(grads, expected, (a, b), strict=True):
        e = np.where(np.isnan(operand), 0.0, e)  # a NaN operand gets nothing
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-8)
        assert np.all(np.isfinite(g))


# ----------------------------------------------------------------------------------------------
# order='F' in reshape, ravel and flatten


def test_fortran_order_reshape_ravel_flatten(backend):
    def f(x):
        return (
            np.reshape(x, (4, 6), order="F"),
            x.reshape(6, 4, order="F"),
            x.reshape((3, 8), order="f"),
            np.ravel(x, order="F"),
            x.ravel("F"),
            x.flatten("F"),
            x[0, 0].flatten(order="A"),
            np.ravel(x[0, 0], "K"),
            np.reshape(x, (-1, 2), order="F"),
            x[:1, :1].reshape((1, 4), order="A"),
            np.reshape(x.T, (4, 6), "F"),
        )

    _check_all(f, (X3,), backend, argnums=(0,))


@pytest.mark.parametrize("layout", ["C", "F"])
def test_orders_that_follow_the_memory_layout_are_refused(layout):
    """NumPy reads a Fortran-order array column by column under 'A' and 'K': a traced value has
    no layout, so those orders are refused where the layout would change the answer."""
    x = np.asarray(X3[0], order=layout)
    for call in (
        lambda x: x.flatten(order="A"),
        lambda x: np.ravel(x, "K"),
        lambda x: x.reshape((4, 3), order="A"),
    ):
        with pytest.raises(TracingError, match="memory layout"):
            tg.jit(call)(x)


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda x: np.reshape(x, (4, 6), order="K"), ValueError),
        (lambda x: x.reshape(24, order="X"), ValueError),
        (lambda x: np.ravel(x, order="Z"), ValueError),
        (lambda x: np.reshape(x, (4, 6), order=1), TypeError),
    ],
)
def test_orders_numpy_refuses_are_refused(call, error):
    with pytest.raises(error):
        call(X3)
    with pytest.raises(error):
        tg.jit(call)(X3)


# ----------------------------------------------------------------------------------------------
# & | ^ ~ : bitwise on integers, logical on bools


INT_DTYPES = [np.int8, np.uint8, np.int16, np.int32, np.int64, np.uint32, np.uint64]


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: np.dtype(d).name)
def test_bitwise_operators_on_integers(dtype, backend):
    p = np.array([5, 3, 12, 0, 127, 64], dtype)
    q = np.array([3, 6, 10, 7, 1, 127], dtype)
    if np.dtype(dtype).kind == "i":
        p[1], q[2] = -3, -1

    def f(a, b):
        return (
            a & b,
            a | b,
            a ^ b,
            ~a,
            a & 6,
            6 | b,
            a ^ 1,
            np.bitwise_and(a, b),
            np.bitwise_or(a, b),
            np.bitwise_xor(a, b),
            np.invert(b),
            np.bitwise_not(a),
            np.logical_and(a, b),
            np.logical_or(a, b),
            np.logical_xor(a, b),
            np.logical_not(a),
        )

    _check_all(f, (p, q), backend)


def test_bitwise_operators_on_bools_are_logical(backend):
    p = np.array([True, False, True, False])
    q = np.array([True, True, False, False])

    def f(a, b):
        return (
            a & b,
            a | b,
            a ^ b,
            ~a,
            a & True,
            False | b,
            np.bitwise_xor(a, b),
            np.invert(b),
            np.logical_xor(a, b),
            a & 3,
        )

    _check_all(f, (p, q), backend)


def test_bitwise_ops_mixed_with_float_gradients(backend):
    x = np.array([0.5, -1.0, 2.0, -0.25])
    n = np.array([1, 2, 3, 4])
    f = lambda v, k: np.sum(np.where((k & 1) == 1, v * v, -v) + (k ^ 6) * v)
    _check_all(f, (x, n), backend, argnums=(0,))


@pytest.mark.parametrize(
    "call", [lambda x: x & x, lambda x: ~x, lambda x: x ^ 1, lambda x: np.bitwise_or(x, x)]
)
def test_bitwise_ops_on_floats_fail_as_numpy_fails(call):
    with pytest.raises(TypeError):
        call(np.ones(3))
    with pytest.raises(TypeError, match=r"integers and bools.*astype"):
        tg.jit(call)(np.ones(3))


# ----------------------------------------------------------------------------------------------
# var / std / mean with dtype=, and integer reciprocal


def test_var_std_mean_honour_dtype(backend):
    x = X * 10

    def f(v):
        i = (v * 3).astype(np.int64)
        return (
            np.var(v, dtype=np.float32),
            np.std(v, axis=0, dtype=np.float32),
            np.var(v, axis=1, ddof=1, dtype=np.float32, keepdims=True),
            np.var(v.astype(np.float32), dtype=np.float64),
            np.std(i),
            np.var(i, dtype=np.int64),
            np.std(i, dtype=np.int64),
            np.mean(v, dtype=np.int64),
            np.mean(i, axis=0, dtype=np.int32),
            np.mean(v, axis=1, dtype=np.float32),
            v.var(dtype=np.float32),
            v.std(axis=1, dtype=np.float32),
        )

    _check_all(f, (x,), backend)


def test_var_std_with_dtype_differentiate(backend):
    _check_all(
        lambda v: (np.var(v, axis=0, dtype=np.float64), np.std(v, dtype=np.float64, ddof=1)),
        (X,),
        backend,
        argnums=(0,),
        order=2,
    )


def test_std_with_integer_dtype_over_an_axis_fails_as_numpy_fails():
    i = np.arange(6).reshape(2, 3)
    with pytest.raises(TypeError):
        np.std(i, axis=0, dtype=np.int64)
    with pytest.raises(TypeError, match="float dtype"):
        tg.jit(lambda v: np.std(v, axis=0, dtype=np.int64))(i)


@pytest.mark.parametrize(
    "dtype",
    [np.int8, np.uint8, np.int32, np.int64, np.uint64, np.bool_],
    ids=lambda d: np.dtype(d).name,
)
def test_integer_reciprocal_is_numpys(dtype, backend):
    x = np.array([1, 2, 0, 7, 1, 100], dtype=dtype)
    if np.dtype(dtype).kind == "i":
        x[[1, 3]] = -1, -2
    _check_all(lambda v: (np.reciprocal(v), np.reciprocal(v[:2])), (x,), backend)


# ----------------------------------------------------------------------------------------------
# np.inner of every rank, and the stacking functions on one traced array


SHAPES = {0: (), 1: (3,), 2: (2, 3), 3: (4, 2, 3)}


@pytest.mark.parametrize(
    "ranks",
    [(0, 0), (0, 2), (2, 0), (1, 0), (0, 1), (1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (2, 3)],
    ids=str,
)
def test_inner_of_every_rank(ranks, backend, rng):
    a = rng.uniform(-1, 1, size=SHAPES[ranks[0]])
    b = rng.uniform(-1, 1, size=SHAPES[ranks[1]])
    _check_all(np.inner, (a, b), backend, argnums=(0, 1))


def test_inner_of_a_square_matrix_and_a_scalar_is_not_transposed(backend):
    m = np.array([[1.0, 2.0], [3.0, 4.0]])
    _check_all(lambda v: (np.inner(2.0, v), np.inner(v, 2.0)), (m,), backend, argnums=(0,))


def test_inner_with_mismatched_last_axes_fails_as_numpy_fails():
    with pytest.raises(ValueError, match="not aligned"):
        np.inner(np.ones((2, 3)), np.ones((3, 2)))
    with pytest.raises(ValueError, match=r"\(2, 3\) and \(3, 2\) not aligned"):
        tg.jit(np.inner)(np.ones((2, 3)), np.ones((3, 2)))


@pytest.mark.parametrize(
    "name", ["vstack", "hstack", "column_stack", "dstack", "stack", "concatenate"]
)
def test_stacking_one_traced_array_iterates_its_first_axis(name, backend):
    stack = getattr(np, name)
    if name == "concatenate":  # of a vector: its 0-d rows cannot be concatenated
        _check_all(lambda a, m: (stack(a), stack(m)), (X3, X), backend, argnums=(0, 1))
    else:
        _check_all(
            lambda a, m, v: (stack(a), stack(m), stack(v)),
            (X3, X, X[0]),
            backend,
            argnums=(0, 1, 2),
        )


def test_row_stack_of_one_traced_array(backend):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # NumPy's own, for its alias
        _check_all(lambda a: np.row_stack(a), (X,), backend, argnums=(0,))


def test_stacking_mixes_scalars_vectors_and_matrices(backend):
    def f(v, m):
        return (
            np.hstack([1.0, v, v[0]]),
            np.vstack([v, m, 2.0 * v]),
            np.column_stack([v[:2], m]),
            np.dstack([m, m]),
            np.dstack([v, v]),
            np.column_stack((v, v)),
        )

    _check_all(f, (X[0], X), backend, argnums=(0, 1))


def test_stacking_a_zero_d_value_fails_as_numpy_fails():
    with pytest.raises(TypeError, match="iteration over a 0-d array"):
        np.vstack(np.array(1.0))
    with pytest.raises(TypeError, match="iteration over a 0-d array"):
        tg.jit(np.vstack)(np.array(1.0))


# ----------------------------------------------------------------------------------------------
# matmul with scalars and lists; comparisons with Python ints outside the dtype's range


@pytest.mark.parametrize(
    "call",
    [
        lambda x: x @ 2.0,
        lambda x: 2.0 @ x,
        lambda x: np.matmul(x, 2.0),
        lambda x: x @ np.float64(2.0),
        lambda x: x @ np.array(2.0),
    ],
)
def test_matmul_by_a_scalar_fails_as_numpy_fails(call):
    with pytest.raises(ValueError) as numpy_error:
        call(np.ones(3))
    numpy_message = str(numpy_error.value)
    with pytest.raises(ValueError) as traced:
        tg.jit(call)(np.ones(3))
    assert str(traced.value).startswith(numpy_message) and "use *" in str(traced.value)


def test_matmul_with_a_list(backend):
    _check_all(
        lambda x: (x @ [1.0, 2.0, 3.0], [[1.0, 2.0]] @ x, np.matmul(x, [1, 0, 2])),
        (X,),
        backend,
        argnums=(0,),
    )


@pytest.mark.parametrize(
    "dtype",
    [np.int8, np.uint8, np.int16, np.uint32, np.int64, np.uint64],
    ids=lambda d: np.dtype(d).name,
)
def test_comparisons_with_python_ints_outside_the_range(dtype, backend):
    x = np.array([0, 1, 100, 7], dtype)
    info = np.iinfo(dtype)
    big, small = int(info.max) + 1, int(info.min) - 1

    def f(v):
        return tuple(
            op(v, n)
            for n in (big, small, 10**30, -(10**30), 100)
            for op in (np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal)
        ) + (v == big, big > v, small <= v, v != small)

    _check_all(f, (x,), backend)


def test_arithmetic_with_out_of_range_python_ints_fails_as_numpy_fails():
    x = np.array([1, 2], np.int8)
    with pytest.raises(OverflowError):
        x + 300
    with pytest.raises(OverflowError):
        tg.jit(lambda v: v + 300)(x)


# ----------------------------------------------------------------------------------------------
# NumPy scalars as static parameters, lists as operands


def test_numpy_integers_as_axes_shapes_and_indices(backend):
    one, zero = np.int64(1), np.int32(0)

    def f(v):
        return (
            np.transpose(v, [one, zero]),
            np.sum(v, one),
            v[one],
            v[one, np.int16(2)],
            np.reshape(v, (np.int64(3), 2)),
            v.reshape(np.int64(3), 2),
            np.transpose(v, np.array([1, 0])),
            np.expand_dims(v, one),
            np.stack([v, v], one),
            np.concatenate([v, v], one),
            np.moveaxis(v, one, 0),
            np.swapaxes(v, one, 0),
            np.mean(v, one),
            np.squeeze(v[None], zero),
            np.broadcast_to(v, (np.int64(2), 2, 3)),
            np.linalg.norm(v, np.int64(1), one),
            np.full_like(v, np.float64(2.0)),
        )

    _check_all(f, (X,), backend, argnums=(0,))


def test_lists_and_numpy_scalars_as_operands(backend):
    def f(v):
        return (
            v + [1.0, 2.0, 3.0],
            [1.0, 2.0, 3.0] - v,
            v * [[1.0], [2.0]],
            [2.0, 1.0, 4.0] / v,
            v ** [1, 2, 3],
            (v > 0) & [True, False, True],
        )

    def float32(w):  # NumPy scalars are strongly typed, Python lists and numbers weakly
        return w + [1.0, 2.0, 3.0], w * np.float64(2.0), w + np.float32(1.0), w * 2.0

    _check_all(f, (X,), backend, argnums=(0,))
    _check_all(float32, (X.astype(np.float32),), backend)


def test_abs_of_an_integer_stays_an_integer(backend):
    i = np.array([-3, 0, 2], np.int16)
    _check_all(lambda v: (abs(v), np.abs(v), -v, +v), (i,), backend)


@pytest.mark.parametrize(
    "call",
    [
        lambda x: np.moveaxis(x, 0, 5),  # once taken modulo the rank: a silent wrong transpose
        lambda x: np.moveaxis(x, [0, 1], [1]),
        lambda x: np.sum(x, axis=2),
        lambda x: np.linalg.norm(x[0], 1, axis=(1, 0)),
        lambda x: np.swapaxes(x, 0, -3),
    ],
)
def test_bad_axes_fail_as_numpy_fails(call):
    with pytest.raises(ValueError) as numpy_error:
        call(X)
    with pytest.raises(type(numpy_error.value)):
        tg.jit(call)(X)


# ----------------------------------------------------------------------------------------------
# np.dot of every rank, and other corners found by comparing with NumPy


def test_dot_of_every_rank_and_its_dtype(backend, rng):
    a3 = rng.uniform(-1, 1, size=(2, 3, 4))
    b3 = rng.uniform(-1, 1, size=(5, 4, 2))

    def f(a, b, v):
        return (
            np.dot(a, b),
            np.dot(a, v),
            np.dot(v, b),
            np.dot(a[0], b),
            np.dot(a, b[0]),
            np.dot(v, v),
            np.dot(2.0, a),
            np.vdot(a[0], a[1]),
        )

    _check_all(f, (a3, b3, b3[0, :, 0]), backend, argnums=(0, 1, 2))
    i = np.array([[1, -2, 3], [0, 5, -7]], np.int32)
    _check_all(
        lambda m: (np.dot(m[0], m[1]), np.dot(m, m[0]), np.dot(m > 0, m[1] > 0)), (i,), backend
    )


def test_dot_with_misaligned_shapes_fails_as_numpy_fails():
    with pytest.raises(ValueError, match="not aligned"):
        np.dot(np.ones((2, 3, 4)), np.ones((5, 3, 2)))
    with pytest.raises(ValueError, match=r"\(2, 3, 4\) and \(5, 3, 2\) not aligned"):
        tg.jit(np.dot)(np.ones((2, 3, 4)), np.ones((5, 3, 2)))


def test_max_of_an_empty_array_over_a_nonempty_axis(backend):
    _check_all(lambda v: (np.max(v[:0], axis=1), np.min(v[:, :0], axis=0)), (X,), backend)
    with pytest.raises(ValueError, match="zero-size array"):
        tg.jit(lambda v: np.max(v[:, :0], axis=1), backend=backend)(X)


def test_integer_to_a_negative_power_fails_as_numpy_fails():
    i = np.array([1, 2, 3])
    with pytest.raises(ValueError, match="Integers to negative integer powers are not allowed"):
        i**-2
    with pytest.raises(
        ValueError, match=r"Integers to negative integer powers are not allowed.*astype"
    ):
        tg.jit(lambda v: v**-2)(i)


def test_clip_method_takes_numpys_keywords(backend):
    _check_all(
        lambda v: (v.clip(min=-0.5), v.clip(max=0.5), v.clip(-0.5, 0.5)),
        (X,),
        backend,
        argnums=(0,),
    )


def test_where_and_clip_with_python_ints_outside_the_range(backend):
    i8 = np.array([1, -2, 3], np.int8)
    u8 = np.array([1, 2, 250], np.uint8)

    def f(a, u):
        return (
            np.where(a > 0, a, 300),
            np.where(a > 0, -129, a),
            np.where(u > 1, u, -1),
            np.where(a > 0, 300, 1000),
            np.clip(a, -300, 300),
            np.clip(a, None, 300),
            np.clip(a, 0, 300),
            np.clip(u, -1, 3),
        )

    _check_all(f, (i8, u8), backend)
    for call in (lambda a: np.clip(a, 300, 400), lambda a: np.where(a > 0, a, 2**70)):
        with pytest.raises(OverflowError):
            call(i8)
        with pytest.raises(OverflowError):
            tg.jit(call, backend=backend)(i8)


def test_empty_like_of_a_traced_value_can_be_filled(backend):
    def f(x):
        y = np.empty_like(x)
        y[:] = x * 2.0
        y[0] = 5.0
        return y

    x = np.arange(4.0)
    np.testing.assert_array_equal(tg.jit(f, backend=backend)(x), f(x))
    np.testing.assert_array_equal(tg.grad(lambda x: np.sum(f(x)), backend=backend)(x), [0, 2, 2, 2])


def test_diff_of_a_negative_order_is_refused_as_numpy_refuses_it(backend):
    with pytest.raises(ValueError, match="non-negative"):
        tg.jit(lambda x: np.diff(x, n=-1), backend=backend)(np.arange(4.0))


def test_the_derivative_of_a_norm_at_zero_is_zero_as_for_abs_and_std(backend):
    for norm in (np.linalg.norm, lambda x: np.linalg.norm(x, "fro")):
        g = tg.grad(norm, backend=backend)(np.zeros((2, 2)))
        np.testing.assert_array_equal(g, np.zeros((2, 2)))
    x = np.array([3.0, 4.0])
    np.testing.assert_allclose(tg.grad(np.linalg.norm, backend=backend)(x), x / 5.0)


def test_sign_of_unsigned_integers(backend):
    for dtype in (np.uint8, np.uint16, np.uint32, np.uint64):
        u = np.array([0, 1, 200, np.iinfo(dtype).max], dtype)
        got = tg.jit(np.sign, backend=backend)(u)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, np.sign(u))


def test_clip_with_a_nan_bound_gives_nan_as_numpy(backend):
    x = np.array([1.0, -1.0, 0.5])
    bounds = np.array([np.nan, 0.0, np.nan])
    np.testing.assert_array_equal(
        tg.jit(np.clip, backend=backend)(x, bounds, 1.0), np.clip(x, bounds, 1.0)
    )
    f = lambda x: np.clip(x, np.nan, 1.0)
    np.testing.assert_array_equal(tg.jit(f, backend=backend)(x), f(x))


def test_boolean_subtraction_and_negation_are_refused_as_numpy_refuses_them(backend):
    b = np.array([True, False])
    with pytest.raises(TypeError, match="boolean subtract"):
        tg.jit(lambda a, c: a - c, backend=backend)(b, b)
    with pytest.raises(TypeError):
        tg.jit(lambda a: -a, backend=backend)(b)


def test_power_one_half_is_numpys_square_root(backend):
    x = np.array([-np.inf, -0.0, 0.0, 4.0, np.nan])
    with np.errstate(invalid="ignore"):
        want = x**0.5
        got = tg.jit(lambda x: x**0.5, backend=backend)(x)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_hypot_has_derivative_zero_at_the_origin(backend):
    g = tg.grad(lambda x, y: np.hypot(x, y), argnums=(0, 1), backend=backend)
    assert g(0.0, 0.0) == (0.0, 0.0)
    np.testing.assert_allclose(g(3.0, 4.0), (0.6, 0.8))


def test_reductions_accumulate_in_the_dtype_asked_for(backend):
    # dtype= of a small integer or bool type was dropped: sums in int64 came back as int64
    x, b = np.array([100, 100, 100], np.int8), np.array([True, True, False])

    def f(x, b):
        return (
            np.sum(x, dtype=np.int8),  # wraps, as NumPy's
            x.sum(dtype=np.int32),
            np.prod(x, dtype=np.int16),
            np.mean(x, dtype=np.int8),  # the wrapped sum, divided
            np.sum(b, dtype=bool),  # logical or
            np.prod(b, dtype=bool),  # logical and
            np.sum(x, axis=0, dtype=np.uint8),
            np.mean(x, dtype=np.float32),
            np.sum(x),
        )

    _check_all(f, (x, b), backend)


def test_uint64_compares_exactly_with_signed_integers(backend):
    # both were promoted to float64: 2**53 + 1 == 2**53, and 2**63 + 1 < 2**63 - 1
    u = np.array([2**53 + 1, 2**63 + 1, 0, 5, 2**64 - 1], np.uint64)
    i = np.array([2**53, 2**63 - 1, -1, 5, -(2**63)], np.int64)
    small = np.array([-1, 3, 0, 5, 127], np.int8)
    ops = (np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal)

    def f(u, i, small):
        return (
            tuple(op(u, i) for op in ops)
            + tuple(op(i, u) for op in ops)
            + tuple(op(u, small) for op in ops)
            + (u == np.int64(5), np.int32(-3) < u, u > -1)
        )

    _check_all(f, (u, i, small), backend)


def test_ufuncs_without_a_boolean_loop(backend):
    # np.sign of booleans raised on the interpreter, when it ran, and gave booleans on cpu;
    # np.square of booleans is int8 in NumPy
    b = np.array([True, False, True])
    _check_all(lambda b: (np.square(b), b * b, np.abs(b)), (b,), backend)
    for fn in (np.sign, np.positive):
        with pytest.raises(TypeError):
            fn(b)
        with pytest.raises(TypeError, match="did not contain a loop"):
            tg.jit(fn, backend=backend)(b)
