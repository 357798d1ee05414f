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
    for v, a in zip(graph.inputs, args, strict=True):
        env[v] = np.asarray(a, dtype=v.dtype)
    dead = _dead_after(graph)
    # Untaken branches of np.where may compute log(0) or sqrt(-1): that is expected, not an error.
    with np.errstate(all="ignore"):
        for node, done in zip(graph.nodes, dead, strict=True):
            value = node.prim.impl(*[env[v] for v in node.inputs], **node.params)
            env[node.out] = np.asarray(value, dtype=node.out.dtype)
            for v in done:  # values no later node reads: memory is what is live, not all values
                del env[v]
    return [env[v] for v in graph.outputs]


def _dead_after(graph: Graph) -> list[tuple[Var, ...]]:
    """For each node, the values whose last reader it is (outputs are never dead)."""
    if "dead_after" not in graph._cache:
        last: dict[Var, int] = {}
        for i, node in enumerate(graph.nodes):
            for v in node.inputs:
                last[v] = i
        keep = set(graph.outputs)
        dead: list[list[Var]] = [[] for _ in graph.nodes]
        for v, i in last.items():
            if v not in keep:
                dead[i].append(v)
        graph._cache["dead_after"] = [tuple(d) for d in dead]
    return graph._cache["dead_after"]


def _has_nan(value: np.ndarray) -> bool:
    return value.dtype.kind == "f" and bool(np.isnan(value).any())


def nan_origin(graph: Graph, args: Sequence[np.ndarray]):
    """The node where a NaN in the outputs was born: its output has a NaN, its inputs none.

    Walks back from the first output holding a NaN along inputs that hold NaNs, so a NaN computed
    in the untaken branch of a `where` is not blamed. Returns None when no output has a NaN.
    """
    env: dict[Var, np.ndarray] = {
        v: np.asarray(a, dtype=v.dtype) for v, a in zip(graph.inputs, args, strict=True)
    }
    producer = {}
    with np.errstate(all="ignore"):
        for node in graph.nodes:
            env[node.out] = np.asarray(
                node.prim.impl(*[env[v] for v in node.inputs], **node.params)
            )
            producer[node.out] = node
    bad = next((v for v in graph.outputs if _has_nan(env[v])), None)
    while bad is not None and bad in producer:
        node = producer[bad]
        upstream = next((v for v in node.inputs if _has_nan(env[v])), None)
        if upstream is None:
            return node
        bad = upstream
    return None
