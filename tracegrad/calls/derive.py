"""Deriving a transform's graph: trace the function, differentiate, optimise.

A `Transformed` (calls/transformed.py) comes here only when it needs a graph: on a miss in the
program store, inside another trace (inlining), or for `make_ir`. This module is what brings in
the tracers, the traced NumPy namespace, autodiff and the simplifier, so `import tracegrad` and
a call whose program is found in the store (in memory, or persisted on disk by an earlier
process) load none of them: that is most of a warm first call's import (benchmarks/RESULTS.md).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from .. import autodiff, passes
from .. import numpy_namespace  # noqa: F401 (registers the handlers tracing dispatches to)
from .. import primitives as P
from ..ir import Graph
from ..runtime import program_cache, program_store, tiered
from ..runtime.program import CompiledCall, aval
from ..trace import CallArgs, Tracer, inline_graph, trace
from ..tracing import branches, indexed_arrays
from ..tracing.scope import Scope
from ..transforms import forward, loops, rolling, sparsity  # noqa: F401  (loops: its primitives register)
from ..base.tree import LEAF, TreeDef, replace_leaves, tuple_of, unflatten
from .arguments import as_array, int_tuple, leaf_names


class Transform(Protocol):
    """What this module reads of the transform it derives (a `calls.transformed.Transformed`)."""

    fun: Any
    kind: str
    argnums: Any
    has_aux: bool
    taps: bool
    guards: bool
    static_argnums: tuple[int, ...]
    self_shift: int
    name: str

    def split_arguments(self, args: tuple, kwargs: dict | None = None) -> tuple: ...

    # the graph of a call: `derive_graph` below, or a composite transform's own (api_transforms.py)
    def build(self, avals, treedef: TreeDef, static: tuple, positions: list[int], scope=None): ...


def trace_program(
    t: Transform,
    static: tuple,
    key,
    backend,
    name: str,
    arrays: list,
    treedef: TreeDef,
    positions,
) -> tuple[CompiledCall, list]:
    """The miss path: trace and transform `t` for one signature, on the call's `arrays` (Python
    control flow on traced values is answered for them and guarded: tracing/branches.py),
    optimise, compile, keep in the store and persist. Returns it with the hidden inputs (values read from
    outside the arguments) of this call."""
    avals = [aval(a) for a in arrays]

    def build(scope):
        with branches.given_inputs(arrays if t.guards else None) as guards:
            return (*t.build(avals, treedef, static, positions, scope), guards)

    # traced again for each array the function turns out to index with traced values
    scope, (graph, out_tree, captures, guards) = indexed_arrays.build_with_stand_ins(
        lambda: Scope.of(t, static), build
    )
    assert not captures, "a top-level trace cannot capture values"
    # optimise (one pass schedule), the hooks taken out to run on the host
    graph, hooks = passes.extract_hooks(passes.optimize(graph))
    captured = scope.finish(t, static, hooks=bool(hooks))
    # compile (tiered: the interpreter answers while the kernels compile), keep, persist
    run = tiered.compile(backend, graph, name)
    program = CompiledCall(
        graph, out_tree, run, backend.name, hooks, captured, tuple(guards), guards.reference
    )
    program_store.keep(key, program)
    if not guards:  # a program with guards is kept in memory only
        program_cache.save(t, static, key, graph, out_tree, hooks, captured)
    hidden = captured.read(t, static)
    if hidden is None:  # cannot happen unless a guard is flaky: use what was traced
        hidden = [v for _, v in scope.hidden]
    return program, hidden


def inline(t: Transform, args: tuple, kwargs: dict | None = None):
    """`t` called on tracers, inside another trace: its graph, inlined into that trace."""
    static, positions, leaves, treedef = t.split_arguments(args, kwargs)
    names = leaf_names(treedef, positions, t.self_shift)
    avals = []
    for leaf, name in zip(leaves, names, strict=True):
        if isinstance(leaf, Tracer):
            avals.append((leaf.shape, leaf.dtype))
        else:
            avals.append(aval(as_array(leaf, name, t.name)))
    with branches.given_inputs(leaves if t.guards and branches.can_answer() else None) as guards:
        graph, out_tree, captures = t.build(avals, treedef, static, positions)
    outs = inline_graph(graph, leaves, captures)
    if guards:  # the inner trace's answers are this trace's guards too
        outs, guard_values = outs[: -len(guards)], outs[-len(guards) :]
        branches.keep_inner_guards(guard_values, guards)
    return unflatten(out_tree, outs)


def wrap_args(t: Transform, static: tuple, positions: list[int]):
    """The traced arguments (a tuple, the keyword arguments' dict last if any) -> the call."""

    def wrap(dynamic: tuple) -> tuple | CallArgs:
        full: list[Any] = [None] * (len(static) + len(positions))
        for i, s in zip(t.static_argnums, static, strict=True):
            full[i] = s
        for i, d in zip(positions, dynamic, strict=False):  # + the kwargs dict
            full[i] = d
        if len(dynamic) > len(positions):
            return CallArgs(tuple(full), dynamic[-1])
        return tuple(full)

    return wrap


def derive_graph(
    t: Transform, avals, treedef: TreeDef, static: tuple, positions: list[int], scope=None
):
    """Trace and transform: (graph with flat outputs, their tree, captured tracers). With a
    `scope` (top-level calls), arrays read from outside the arguments become hidden inputs,
    after the arguments' leaves."""
    wrap = wrap_args(t, static, positions)
    fgraph, out_tree, captures = trace(t.fun, avals, treedef, wrap, scope, branching=True)
    fgraph = passes.smooth_idioms(fgraph)  # before autodiff: stable softplus idioms
    rolled = rolling.roll_loops(fgraph)  # repeated iterations of Python loops: one scan
    if rolled is not fgraph:  # the rows of stacked results read back one by one: merged
        fgraph = passes.simplify(rolled, lower=False)
    if t.kind == "jit":
        return fgraph, out_tree, captures  # its guards, if any, are its last outputs already
    # The guards (the last outputs of fgraph, after out_tree's) are carried through the
    # transform as values that are not differentiated, and returned last.
    n_guards = len(fgraph.outputs) - out_tree.num_leaves
    return _transform(t, fgraph, out_tree, treedef, positions, n_guards, captures)


def _transform(t, fgraph, out_tree, treedef, positions, n_guards, captures):
    """`build` for grad, value_and_grad, jacobian and jacfwd: the transformed graph, with the
    `n_guards` guards of fgraph (its last outputs) as its own last outputs."""
    wrt, wrt_tree = _wrt(t, treedef, positions, fgraph)
    value_tree, aux_tree, n_value = _split_output(t, out_tree, fgraph)
    if t.kind in ("grad", "value_and_grad"):
        # this differentiation owns the function's taps: their hooks fire with its cotangents
        graph = autodiff.adjoint(fgraph, wrt, [0], seed_ones=True, taps=True)
        n_out, n_wrt = len(fgraph.outputs), len(wrt)
        value, aux = graph.outputs[:1], graph.outputs[1 : n_out - n_guards]
        guards = list(graph.outputs[n_out - n_guards : n_out])
        grads = graph.outputs[n_out : n_out + n_wrt]
        if t.kind == "grad":
            outputs = list(grads) + list(aux)
            tree = tuple_of(wrt_tree, aux_tree) if t.has_aux else wrt_tree
        else:
            outputs = list(value) + list(aux) + list(grads)
            head = tuple_of(value_tree, aux_tree) if t.has_aux else value_tree
            tree = tuple_of(head, wrt_tree)
        if t.taps:
            names = [node.params["name"] for node in autodiff.tap_nodes(fgraph)]
            outputs += list(graph.outputs[n_out + n_wrt :])
            tree = tuple_of(tree, TreeDef("dict", tuple(LEAF for _ in names), tuple(names)))
        return Graph(graph.inputs, graph.nodes, tuple(outputs + guards)), tree, captures
    # jacobian: one jacobian per (value leaf, wrt leaf); aux outputs are not differentiated
    # (jacfwd: by forward mode, one batched tangent per input element; jacobian: from one
    # compressed seed per colour of its rows where the sparsity pattern allows, transforms/sparsity)
    derive = forward.jacfwd if t.kind == "jacfwd" else sparsity.jacobian
    graph = derive(fgraph, wrt, n_value)
    n_out = len(fgraph.outputs)
    jacs = list(graph.outputs[n_out:])
    outputs = jacs + list(graph.outputs[n_value:n_out])  # the aux values, then the guards
    tree = replace_leaves(value_tree, lambda: wrt_tree)
    if t.has_aux:
        tree = tuple_of(tree, aux_tree)
    return Graph(graph.inputs, graph.nodes, tuple(outputs)), tree, captures


def _wrt(t: Transform, treedef: TreeDef, positions: list[int], fgraph: Graph):
    """Flat input positions to differentiate, and the tree the gradients come back in."""
    arg_trees = treedef.children
    offsets = np.cumsum([0] + [a.num_leaves for a in arg_trees])
    argnums = int_tuple(t.argnums, "argnums")
    wrt, trees = [], []
    names = leaf_names(treedef, positions, t.self_shift)
    for i in argnums:
        k = positions.index(i)
        trees.append(arg_trees[k])
        for j in range(offsets[k], offsets[k + 1]):
            var = fgraph.inputs[j]
            if not P.is_float(var.dtype):
                raise TypeError(
                    f"{t.name}: cannot differentiate with respect to {names[j]}, "
                    f"which has dtype {var.dtype}; only float arrays have derivatives. "
                    "Convert it with .astype(np.float64), or leave it out of argnums."
                )
            holomorphic = getattr(t, "holomorphic", False)
            if holomorphic and not P.is_complex(var.dtype):
                raise TypeError(
                    f"{t.name} with holomorphic=True needs complex arguments, but {names[j]} has "
                    f"dtype {var.dtype}; convert it with .astype(np.complex128)"
                )
            if t.kind == "jacfwd" and not holomorphic and P.is_complex(var.dtype):
                raise TypeError(
                    f"{t.name}: {names[j]} is complex ({var.dtype}); jacfwd of a function of "
                    "complex arguments needs holomorphic=True (for a real function of them, "
                    "use tg.jacobian or tg.grad: docs/complex.md)"
                )
            wrt.append(j)
    tree = trees[0] if isinstance(t.argnums, int) else tuple_of(*trees)
    return wrt, tree


def _split_output(t: Transform, out_tree: TreeDef, fgraph: Graph):
    """(value tree, aux tree, number of value leaves), checking what the transform needs."""
    name = t.name
    if t.has_aux:
        if out_tree.kind not in ("tuple", "list") or len(out_tree.children) != 2:
            raise TypeError(
                f"{name} has has_aux=True, so the function must return a pair "
                f"(output, aux); it returned {out_tree}"
            )
        value_tree, aux_tree = out_tree.children
    else:
        value_tree, aux_tree = out_tree, TreeDef("tuple")
    n_value = value_tree.num_leaves
    if t.kind in ("grad", "value_and_grad"):
        out = fgraph.outputs[0] if n_value else None
        # one number: 0-d, or of any shape with one element (shape (1,) or (1, 1)), as PyTorch's
        # backward() and autograd's grad take it; the value keeps its shape
        if value_tree.kind != "leaf" or out is None or out.size != 1:
            shape = out.shape if value_tree.kind == "leaf" and out is not None else str(value_tree)
            raise TypeError(
                f"{name} needs a function that returns one number (0-d, or of size 1), but it returned "
                f"{shape}. Reduce it (e.g. .sum() or np.mean), or use tg.jacobian."
            )
        if not P.is_float(out.dtype):
            raise TypeError(
                f"{name}: the output has dtype {out.dtype}; only float outputs have derivatives"
            )
    holomorphic = getattr(t, "holomorphic", False)
    if t.kind in ("grad", "value_and_grad", "jacobian", "jacfwd"):
        for out in fgraph.outputs[:n_value]:
            _check_complex_output(name, out.dtype, holomorphic)
    return value_tree, aux_tree, n_value


def _check_complex_output(name: str, dtype: np.dtype, holomorphic: bool) -> None:
    """A real function's derivative (of a real output), or with `holomorphic` a complex one's
    (of a complex output), as JAX's grad and jacobian require (docs/complex.md)."""
    if P.is_complex(dtype) and not holomorphic:
        raise TypeError(
            f"{name}: the output is complex ({dtype}); differentiate a real value of it "
            "(np.real, np.abs, ...), or pass holomorphic=True for the complex derivative of a "
            "holomorphic function (docs/complex.md)"
        )
    if holomorphic and not P.is_complex(dtype):
        raise TypeError(
            f"{name} with holomorphic=True needs a complex output, but it has dtype {dtype}; "
            "convert it with .astype(np.complex128), or drop holomorphic=True"
        )
