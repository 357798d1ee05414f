"""Reductions of empty arrays follow NumPy: max/min refuse only an empty *reduced* axis."""

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
