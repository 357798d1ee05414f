"""`flatten(value)`: a container of arrays and numbers as one vector, and the inverse."""

from __future__ import annotations

import numbers

import numpy as np
import tracegrad as tg


def flatten(value):
    leaves, tree = tg.tree_flatten(value)
    shapes = [np.shape(a) for a in leaves]
    scalars = [isinstance(a, numbers.Number) for a in leaves]
    if leaves:
        vector = np.concatenate([np.ravel(a) for a in leaves])
    else:
        vector = np.zeros(0)

    def unflatten(vector):
        out, start = [], 0
        for shape, scalar in zip(shapes, scalars, strict=True):
            n = int(np.prod(shape))
            piece = vector[start : start + n]
            out.append(piece[0] if scalar else np.reshape(piece, shape))
            start += n
        return tg.tree_unflatten(tree, out)

    return vector, unflatten
