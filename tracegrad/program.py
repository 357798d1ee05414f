"""Compiled programs and where they are kept: one per (transform, backend, argument signature).

A `Program` runs a compiled graph and turns its flat outputs back into the user's result: fresh
arrays that never alias the inputs, hooks called with the cotangents they observe, NaNs traced
to their origin when `TRACEGRAD_DEBUG_NANS` is set. The store is global, so a transform written
inline in a loop (`tg.hessian(f)(x)`) finds the program of the previous iteration.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import backends, ir
from .ir import Graph
from .tree import TreeDef, unflatten

MAX_PROGRAMS = 512

log = logging.getLogger("tracegrad")


def _configure_logging() -> None:
    topics = os.environ.get("TRACEGRAD_LOG", "")
    if topics and not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("tracegrad: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)


def _log_enabled(topic: str) -> bool:
    topics = {t.strip() for t in os.environ.get("TRACEGRAD_LOG", "").split(",")}
    return topic in topics or "all" in topics



@dataclass(frozen=True)
class Signature:
    """What a compiled program is specialised on."""

    treedef: TreeDef
    avals: tuple[tuple[tuple[int, ...], str], ...]
    static: tuple

    def describe_change(self, old: Signature, names: list[str]) -> str:
        if old.static != self.static:
            return f"a static argument changed: {old.static} -> {self.static}"
        if old.treedef != self.treedef:
            return f"the argument structure changed: {old.treedef} -> {self.treedef}"
        changes = []
        for name, (s0, d0), (s1, d1) in zip(names, old.avals, self.avals):
            if s0 != s1:
                changes.append(f"{name} changed shape {s0} -> {s1}")
            if d0 != d1:
                changes.append(f"{name} changed dtype {np.dtype(d0)} -> {np.dtype(d1)}")
        return "; ".join(changes) or "the backend changed"


@dataclass
class Program:
    graph: Graph
    out_tree: TreeDef
    run: Callable[[Sequence[np.ndarray]], list[np.ndarray]]
    backend: str
    # (name, hook) for the last outputs of `run`: cotangents that hooks observe (tg.tap)
    hooks: list[tuple[str, Callable]]

    def __call__(self, arrays: list[np.ndarray]):
        outs = [_fresh(o, arrays) for o in self.run(arrays)]
        if _debug_nans() and any(
            isinstance(o, np.ndarray) and o.dtype.kind == "f" and np.isnan(o).any() for o in outs
        ):
            self._raise_nan(arrays)
        if self.hooks:
            outs, observed = outs[: -len(self.hooks)], outs[-len(self.hooks) :]
            for (name, hook), value in zip(self.hooks, observed):
                if hook(name, value) is not None:
                    raise TypeError(
                        f"the hook on tap {name!r} returned a value; hooks only observe "
                        "gradients. To change a gradient, use tg.custom_vjp."
                    )
        return unflatten(self.out_tree, outs)

    def _raise_nan(self, arrays: list[np.ndarray]):
        raise FloatingPointError(_nan_report(self.graph, arrays))


def _debug_nans() -> bool:
    return backends.env("TRACEGRAD_DEBUG_NANS") not in ("", "0")


def _nan_report(graph: Graph, arrays: list[np.ndarray]) -> str:
    from . import interpreter

    node = interpreter.nan_origin(graph, arrays)
    if node is None:
        return "a NaN appeared in the results (its origin could not be found in the graph)"
    where = f" at {node.source}" if node.source else ""
    return (
        f"a NaN was first produced by `{node.prim.name}`{where} from inputs without NaN "
        "(TRACEGRAD_DEBUG_NANS is set)"
    )


_programs: OrderedDict[tuple, Program] = OrderedDict()
_trace_counts: dict[Any, int] = {}
_last_signature: dict[Any, Signature] = {}


# ----------------------------------------------------------------------------------------------
# Host and device arrays


def is_device_array(x: Any) -> bool:
    """A GPU array (Numba device array, CuPy array, PyTorch CUDA tensor...), or a device array of
    Numba's CUDA simulator (which has no `__cuda_array_interface__`)."""
    return not isinstance(x, np.ndarray) and (
        hasattr(x, "__cuda_array_interface__") or getattr(x, "__cuda_ndarray__", False) is True
    )


def aval(x: Any) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of a host or device array."""
    if isinstance(x, np.ndarray):
        return x.shape, x.dtype
    if not hasattr(x, "__cuda_array_interface__"):  # a simulated device array
        return tuple(x.shape), np.dtype(x.dtype)
    interface = x.__cuda_array_interface__
    return tuple(interface["shape"]), np.dtype(interface["typestr"])


def _fresh(out: Any, inputs: list) -> Any:
    """Results never alias the user's arrays, and are ordinary writable arrays."""
    if not isinstance(out, np.ndarray):
        return out  # a device array made by the backend
    if not out.flags.writeable or out.base is not None or any(out is a for a in inputs):
        return np.array(out)
    return out


def variant(backend: Any) -> Any:
    """What else a backend's compiled code depends on (the cpu backend: its math mode)."""
    of = getattr(backend, "variant", None)
    return None if of is None else of()


def clear_programs() -> None:
    """Forget every compiled program held in memory (the next calls trace again)."""
    _generation[0] += 1
    _programs.clear()
    _last_signature.clear()


# ----------------------------------------------------------------------------------------------
# The cached-call fast path

_MISS = object()
_generation = [0]  # bumped by clear_programs: fast paths made before then are stale


def _cheap_signature(args: tuple) -> tuple | None:
    """(shape, dtype) per argument when every argument is a float, a plain array or a device
    array (with its type), else None."""
    key = []
    for a in args:
        t = type(a)
        if t is float:
            key.append(t)
        elif t is np.ndarray:
            key.append((a.shape, a.dtype))
        elif is_device_array(a):  # device arrays pass through untouched
            if getattr(a, "__cuda_ndarray__", False) is True:  # numba's: shape and dtype at hand
                key.append((t, a.shape, a.dtype))
            else:
                key.append((t, *aval(a)))
        else:
            return None
    return tuple(key)


def _fast_call(program: Program, backend: str | None, generation: int) -> Callable:
    """What Program.__call__ does, checked to still be the one that `_execute` would pick (same
    backend, not cleared, not inside a trace). A program with hooks runs them on every call."""
    run, tree, asarray = program.run, program.out_tree, np.asarray
    chosen = backends.env("TRACEGRAD_BACKEND")
    backend_object = backends.get_backend(backend)
    current_variant = getattr(backend_object, "variant", None)
    compiled_for = None if current_variant is None else current_variant()
    single = tree.kind == "leaf"
    hooked = bool(program.hooks)
    # outputs that the backend always allocates afresh need no _fresh check
    fresh = getattr(run, "fresh_outputs", None)
    checked = None if fresh is None else [i for i, f in enumerate(fresh) if not f]

    def call(args: tuple):
        if (
            _generation[0] != generation
            or ir.active_builder() is not None
            or (backend is None and backends.env("TRACEGRAD_BACKEND") != chosen)
            or _debug_nans()
            or (current_variant is not None and current_variant() != compiled_for)
        ):
            return _MISS
        arrays = [asarray(a) if type(a) is float else a for a in args]
        if hooked:  # tg.tap hooks and tg.debug_print: Program.__call__ runs them
            return program(arrays)
        outs = run(arrays)
        for i in range(len(outs)) if checked is None else checked:
            outs[i] = _fresh(outs[i], arrays)
        return outs[0] if single else unflatten(tree, outs)

    return call


