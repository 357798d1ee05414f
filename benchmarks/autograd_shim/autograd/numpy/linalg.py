"""autograd.numpy.linalg is numpy.linalg (names looked up at each use, as in autograd.numpy)."""

import numpy as _np


def __getattr__(name):
    return getattr(_np.linalg, name)


def T(x):
    """autograd.numpy.linalg.T: the transpose of the last two axes."""
    return _np.swapaxes(x, -1, -2)


def _dot(a, b):
    """autograd.numpy.linalg._dot: matrix products over the last two axes."""
    return _np.einsum("...ij,...jk->...ik", a, b)
