"""`const_graph(fun, *args, **kwargs)`: `fun` with some arguments bound, traced once and reused
(tg.jit), as autograd's records its graph once."""

from __future__ import annotations

import functools

import tracegrad as tg


def const_graph(fun, *args, **kwargs):
    bound = functools.partial(fun, *args, **kwargs)
    return tg.jit(bound)
