"""The NumPy reference executor: runs any graph node by node with each primitive's `impl`.

It is the oracle every fused backend is tested against, so it stays simple and obviously right.
"""

from __future__ import annotations

from typing import Sequence

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
