"""The random-number entry of the table (stage: primitives): a draw from a NumPy generator.

`random(draw=..., shape=..., dtype=...)` has no inputs. Its `draw` parameter holds the generator
itself (by reference: the program draws from the very object the traced function reached, so it
advances exactly as the plain NumPy function would advance it), the method and its constant
arguments. The node runs as a step of its own on every backend (on the host: the planner gives it
an evaluation step, `index_map=OWN_STEP`), before the kernels that read its value.

The node is effectful (kept when nothing reads its value: the generator still advances, as it
would in NumPy), never shared with another draw (each `Draw` equals only itself) and not
differentiable: its value is a constant for derivatives, so `mu + sigma * rng.normal(size=n)`
differentiates in `mu` and `sigma` as written. Its batching rule is never asked for (the node
has no inputs, so batching emits it as it is: jacobians and hessians draw once); tg.vmap refuses
draws while tracing (tracing/random_draws.py), since the plain function would draw per example.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import ir
from .facets import OWN_STEP, Kind, Primitive, register


class Draw:
    """One draw: `getattr(generator, method)(*args, **kwargs)`, with the arguments copied when it
    was traced. Equal only to itself: two draws with the same arguments are two draws."""

    __slots__ = ("args", "generator", "kwargs", "method")

    def __init__(self, generator: Any, method: str, args: tuple, kwargs: dict):
        self.generator = generator
        self.method = method
        self.args = args
        self.kwargs = kwargs

    def __repr__(self) -> str:
        parts = [_short(a) for a in self.args]
        parts += [f"{k}={_short(v)}" for k, v in sorted(self.kwargs.items())]
        owner = type(self.generator).__name__
        return f"{owner}@{id(self.generator):x}.{self.method}({', '.join(parts)})"

    def __reduce__(self):
        # a generator's state is not the program's: a program that draws is never persisted
        raise TypeError("a random draw holds its generator by reference and is not pickled")

    def run(self) -> np.ndarray:
        return np.asarray(getattr(self.generator, self.method)(*self.args, **self.kwargs))


def draws_in(nodes: Any) -> bool:
    """Whether any of `nodes`, or of the graphs they hold (loop bodies, branches), draws."""
    for node in nodes:
        if node.prim is random_p:
            return True
        for value in node.params.values():
            held = value if isinstance(value, tuple) else (value,)
            if any(isinstance(g, ir.Graph) and draws_in(g.nodes) for g in held):
                return True
    return False


def _short(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"<{value.dtype}{list(value.shape)}>" if value.size > 4 else repr(value.tolist())
    return repr(value)


def _draw_impl(draw: Draw, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    if ir.active_builder() is not None:
        # only the control-flow answerer (tracing/branches.py) runs nodes while tracing; the
        # draw it would make here is not one the plain function makes
        from ..base.errors import TracingError

        raise TracingError(
            "Python control flow (if, while, bool(), int()) on a traced value in a function that "
            "draws random numbers: answering it while tracing would draw numbers the plain NumPy "
            "function does not draw. Use np.where(...) or tg.cond/tg.while_loop instead."
        )
    value = draw.run()
    if value.shape != tuple(shape):
        raise ValueError(
            f"the random draw {draw!r} returned shape {value.shape}, but it was traced with shape "
            f"{tuple(shape)}; its arguments must not change between calls"
        )
    return value.astype(dtype, copy=False)


def _no_batch(size, inputs, batched, draw, shape, dtype):
    # a node without inputs is never batched (batching emits it as it is); tg.vmap refuses a
    # draw while it traces (tracing/random_draws.py)
    raise ir.IRError("a random draw has no inputs and is not batched")


random_p = register(
    Primitive(
        "random",
        Kind.SHAPE,
        _draw_impl,
        lambda shapes, dtypes, p: (tuple(p["shape"]), np.dtype(p["dtype"])),
        lambda ct, out, draw, shape, dtype: (),  # no inputs: nothing to differentiate
        _no_batch,
        differentiable=False,
        effectful=True,
        index_map=OWN_STEP,
    )
)
