"""Graph-level test helpers: build small graphs, run them on a backend, finite differences."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tracegrad import autodiff, interpreter, ir, passes
from tracegrad.runtime import backends
from tracegrad import primitives as P

_compiled: dict[tuple[str, str], Callable] = {}


def run(graph: ir.Graph, args: Sequence[np.ndarray], backend: str = "numpy") -> list[np.ndarray]:
    """Optimise and execute `graph` on `backend`; compiled programs are shared across tests."""
    key = (graph.fingerprint(), backend)
    if key not in _compiled:
        _compiled[key] = backends.get_backend(backend).compile(passes.optimize(graph))
    return _compiled[key](
        [np.asarray(a, dtype=v.dtype) for a, v in zip(args, graph.inputs, strict=True)]
    )


def build(
    avals: Sequence[tuple[tuple[int, ...], np.dtype]], body: Callable[..., ir.Var]
) -> ir.Graph:
    """A graph whose inputs have the given shapes/dtypes and whose one output is `body(*inputs)`."""
    builder = ir.Builder()
    with ir.building(builder):
        inputs = [builder.new_input(shape, dtype) for shape, dtype in avals]
        out = body(*inputs)
    return ir.verify(builder.graph([out]))


def weighted_sum(v: ir.Var, weights: np.ndarray) -> ir.Var:
    """sum(v * weights): a scalar that depends on every element of v."""
    return P.reduce_sum(P.mul(v, P.const(weights.astype(v.dtype))))


def gradient_graph(graph: ir.Graph, wrt: Sequence[int]) -> ir.Graph:
    """Outputs: the gradients of the scalar output 0 with respect to inputs `wrt`."""
    adj = autodiff.adjoint(graph, wrt, [0], seed_ones=True)
    return ir.verify(ir.Graph(adj.inputs, adj.nodes, adj.outputs[len(graph.outputs) :]))


def directional(graph: ir.Graph, directions: Sequence[np.ndarray]) -> ir.Graph:
    """A scalar graph: sum over outputs of sum(output * direction)."""
    builder = ir.Builder()
    with ir.building(builder):
        inputs = [builder.new_input(v.shape, v.dtype) for v in graph.inputs]
        outs = ir.inline(builder, graph, inputs)
        total = None
        for out, d in zip(outs, directions, strict=True):
            term = weighted_sum(out, d)
            total = term if total is None else P.add(total, term)
    return ir.verify(builder.graph([total]))


def finite_differences(
    f: Callable[[list[np.ndarray]], float],
    args: list[np.ndarray],
    wrt: Sequence[int],
    eps: float = 1e-6,
) -> list[np.ndarray]:
    """Central differences of the scalar f with respect to args[wrt], in float64."""
    grads = []
    for i in wrt:
        x = args[i]
        g = np.zeros(x.shape)
        for idx in np.ndindex(x.shape):
            h = eps * max(1.0, abs(float(x[idx])))
            up = [a.copy() for a in args]
            down = [a.copy() for a in args]
            up[i][idx] += h
            down[i][idx] -= h
            g[idx] = (float(f(up)) - float(f(down))) / (2 * h)
        grads.append(g)
    return grads


def interpret_scalar(graph: ir.Graph) -> Callable[[list[np.ndarray]], float]:
    return lambda args: float(interpreter.evaluate(graph, args)[0])
