"""The NumPy reference executor: runs any graph node by node with each primitive's `impl`.

It is the oracle every fused backend is tested against, so it stays simple and obviously right.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .ir import Graph, Var


def evaluate(graph: Graph, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    if len(args) != len(graph.inputs):
        raise ValueError(f"graph takes {len(graph.inputs)} inputs, got {len(args)}")
    env: dict[Var, np.ndarray] = {}
    for v, a in zip(graph.inputs, args):
        env[v] = np.asarray(a, dtype=v.dtype)
    # Untaken branches of np.where may compute log(0) or sqrt(-1): that is expected, not an error.
    with np.errstate(all="ignore"):
        for node in graph.nodes:
            value = node.prim.impl(*[env[v] for v in node.inputs], **node.params)
            env[node.out] = np.asarray(value, dtype=node.out.dtype)
    return [env[v] for v in graph.outputs]


def _has_nan(value: np.ndarray) -> bool:
    return value.dtype.kind == "f" and bool(np.isnan(value).any())


def nan_origin(graph: Graph, args: Sequence[np.ndarray]):
    """The node where a NaN in the outputs was born: its output has a NaN, its inputs none.

    Walks back from the first output holding a NaN along inputs that hold NaNs, so a NaN computed
    in the untaken branch of a `where` is not blamed. Returns None when no output has a NaN.
    """
    env: dict[Var, np.ndarray] = {v: np.asarray(a, dtype=v.dtype) for v, a in zip(graph.inputs, args)}
    producer = {}
    with np.errstate(all="ignore"):
        for node in graph.nodes:
            env[node.out] = np.asarray(node.prim.impl(*[env[v] for v in node.inputs], **node.params))
            producer[node.out] = node
    bad = next((v for v in graph.outputs if _has_nan(env[v])), None)
    while bad is not None and bad in producer:
        node = producer[bad]
        upstream = next((v for v in node.inputs if _has_nan(env[v])), None)
        if upstream is None:
            return node
        bad = upstream
    return None
