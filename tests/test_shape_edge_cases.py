"""Edge cases of shapes that NumPy handles: empty arrays, 0-d values, size-1 axes in einsum."""

import numpy as np
import pytest

import tracegrad as tg


@pytest.mark.parametrize("reduce", [np.max, np.min])
def test_max_and_min_over_a_non_empty_axis_of_an_empty_array(backend, reduce):
    x = np.zeros((3, 0))
    out = tg.jit(lambda x: reduce(x, axis=0), backend=backend)(x)
    assert out.shape == reduce(x, axis=0).shape == (0,) and out.dtype == x.dtype
    assert tg.jit(lambda x: reduce(x, axis=1), backend=backend)(np.zeros((0, 3))).shape == (0,)
    g = tg.grad(lambda x: np.sum(reduce(x, axis=0)), backend=backend)(x)
    assert g.shape == (3, 0)
    with pytest.raises(ValueError, match="zero-size array"):
        tg.jit(lambda x: reduce(x, axis=1), backend=backend)(x)


def test_reductions_over_axis_0_or_minus_1_of_a_0d_value(backend):
    for reduce in (np.sum, np.max, np.min, np.prod):
        for axis in (0, -1):
            f = lambda x: reduce(x, axis=axis, keepdims=True)  # noqa: B023 (called at once)
            out = tg.jit(f, backend=backend)(0.5)
            assert out == reduce(np.array(0.5), axis=axis, keepdims=True)
    with pytest.raises(ValueError):
        tg.jit(lambda x: np.sum(x, axis=1), backend=backend)(0.5)


def test_einsum_broadcasts_a_size_1_axis(backend):
    a, b = np.full((2, 1), 2.0), np.arange(6.0).reshape(2, 3)
    f = lambda a, b: np.einsum("ij,ij->i", a, b)
    np.testing.assert_array_equal(tg.jit(f, backend=backend)(a, b), f(a, b))
    ga = tg.grad(lambda a, b: np.sum(f(a, b)), backend=backend)(a, b)
    np.testing.assert_array_equal(ga, b.sum(axis=1, keepdims=True))


_EINSUM_CASES = [
    ("Ab,bC", [(2, 3), (3, 4)]),  # capital letters: kept in an implicit output, as NumPy does
    ("bA,Ac", [(2, 3), (3, 4)]),
    ("iJ", [(2, 3)]),
    ("...A->...", [(2, 3, 4)]),  # the user's capitals next to an ellipsis
    ("...Bj", [(2, 3, 4)]),
    ("...ij,jA->...iA", [(2, 3, 4), (4, 5)]),
]


@pytest.mark.parametrize("spec,shapes", _EINSUM_CASES)
def test_einsum_with_capital_letters(backend, spec, shapes):
    ops = [np.arange(float(np.prod(s))).reshape(s) - 3.0 for s in shapes]
    got = tg.jit(lambda *o: np.einsum(spec, *o), backend=backend)(*ops)
    want = np.einsum(spec, *ops)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want)


def test_einsum_dtype_casting_and_sublist_labels(backend):
    small = np.full((2, 2), 100, np.int8)
    got = tg.jit(lambda a: np.einsum("ij,jk->ik", a, a, dtype=np.int64), backend=backend)(small)
    assert got.dtype == np.int64 and got[0, 0] == 20000
    a = np.arange(6.0).reshape(2, 3)
    f32 = lambda a: np.einsum("ij->j", a, dtype=np.float32, casting="unsafe")
    assert tg.jit(f32, backend=backend)(a).dtype == np.float32
    with pytest.raises(TypeError, match="casting='unsafe'"):
        tg.jit(lambda a: np.einsum("ij->j", a, dtype=np.float32), backend=backend)(a)
    # index lists use NumPy's 52 labels, in numeric order in an implicit output
    for sub in ([30, 2], [2, 30], [51, 0]):
        got = tg.jit(lambda a: np.einsum(a, sub), backend=backend)(a)  # noqa: B023
        np.testing.assert_array_equal(got, np.einsum(a, sub))
    with pytest.raises(ValueError, match="not in"):
        tg.jit(lambda a: np.einsum(a, [0, 52]), backend=backend)(a)


def test_einsum_refuses_an_explicit_output_that_drops_the_ellipsis(backend):
    a = np.ones((2, 3, 3))
    with pytest.raises(ValueError, match="ellipsis"):
        np.einsum("...ij,...ji->", a, a)
    with pytest.raises(ValueError, match="ellipsis"):
        tg.jit(lambda a: np.einsum("...ij,...ji->", a, a), backend=backend)(a)
    m = np.arange(9.0).reshape(3, 3)  # an ellipsis of no dimensions may be dropped
    assert tg.jit(lambda m: np.einsum("...ij,...ji->", m, m), backend=backend)(m) == np.einsum(
        "...ij,...ji->", m, m
    )


def test_arrays_in_the_other_byte_order_compute_as_native_ones(backend):
    # '>f8' flowed into the trace: results came back '>f8' and the cpu backend's scatter-add
    # (the gradient of np.take) could not type it
    x = np.linspace(0.0, 1.0, 5).astype(">f8")
    keep = x.copy()

    def f(x):
        return np.sum(np.take(x, [0, 0, 3]) * x[:3]) + np.sum(np.sort(x) * x)

    native = x.astype(np.float64)
    want = tg.grad(f, backend="numpy")(native)
    for _ in range(2):  # the first call, then the cached one
        got = tg.grad(f, backend=backend)(x)
        assert got.dtype == np.float64 and got.dtype.isnative
        np.testing.assert_allclose(got, want, rtol=1e-13)
        out = tg.jit(lambda x: (np.tanh(x), np.sum(x)), backend=backend)(x)
        assert all(o.dtype == np.tanh(x).dtype for o in out)
    np.testing.assert_array_equal(x, keep)
    assert x.dtype == np.dtype(">f8")
