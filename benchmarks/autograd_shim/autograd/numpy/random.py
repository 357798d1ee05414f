"""autograd.numpy.random is numpy.random (names looked up at each use, as in autograd.numpy)."""

import numpy as _np


def __getattr__(name):
    return getattr(_np.random, name)
