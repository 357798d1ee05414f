"""How large a program may grow before planning it (stage: fusion): a graph of too many nodes, or
generated code too long, would take minutes to plan and compile; stop and say why instead,
naming the user's line most of the nodes come from."""

from __future__ import annotations

import collections

from ..base.errors import TracingError
from ..ir import Graph

# Far above any program the fusion planner makes for a graph of a few thousand nodes (a kernel is
# a few kilobytes), far below what makes Numba run out of memory.
MAX_SOURCE_CHARS = 8_000_000
# Planning and compiling a graph of this many nodes takes minutes: stop and say why instead.
MAX_GRAPH_NODES = 25_000


class ProgramTooLarge(TracingError):
    """The generated code of a program would be too large to compile."""


def check_graph(graph: Graph, backend: str) -> None:
    """Before planning: a graph beyond `MAX_GRAPH_NODES` would take minutes to plan and compile."""
    if len(graph.nodes) > MAX_GRAPH_NODES:
        _too_large(graph, backend, f"{len(graph.nodes)} nodes, over the {MAX_GRAPH_NODES} limit")


def check_size(chars: int, graph: Graph, backend: str) -> None:
    if chars > MAX_SOURCE_CHARS:
        _too_large(
            graph,
            backend,
            f"{chars / 1e6:.1f} MB of source, over the {MAX_SOURCE_CHARS / 1e6:.0f} MB limit",
        )


def _too_large(graph: Graph, backend: str, what: str) -> None:
    # the user's line, without the mark of the transform that made the node ("grad file:line")
    lines = collections.Counter(
        node.source.rsplit(" ", 1)[-1] for node in graph.nodes if node.source
    )
    culprit = ""
    if lines:
        source, count = lines.most_common(1)[0]
        culprit = f" {count} of its {len(graph.nodes)} nodes come from {source}."
    raise ProgramTooLarge(
        f"tracegrad: the {backend} program would be too large to compile ({what}).{culprit} A "
        "Python loop that tracegrad cannot roll (see docs/limitations.md) is the usual cause: "
        "write it with tg.fori_loop or tg.scan, or run this function on backend='numpy'."
    )
