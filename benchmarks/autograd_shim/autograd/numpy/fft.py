"""autograd.numpy.fft is numpy.fft (names looked up at each use, as in autograd.numpy)."""

import numpy as _np


def __getattr__(name):
    return getattr(_np.fft, name)
