"""Structured control flow for traced code: `scan`, `fori_loop`, `while_loop` and `cond`.

The signatures and semantics are JAX's (`jax.lax.scan`, ...). Inside a traced function each call
traces its body once into a graph and emits one node (transforms/loops.py) that runs the body
as many times as needed: tracing, differentiation and compilation do not grow with the trip
count. Outside a trace they run as ordinary Python loops over NumPy values.

Unlike JAX, `while_loop` is differentiable in reverse mode: the trip count is counted at run
time (see transforms/loops.py for the cost).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import ir
from .. import numpy_namespace  # noqa: F401 (registers the handlers tracing dispatches to)
from .. import primitives as P
from ..base.errors import TracingError
from ..ir import Graph, Var
from ..trace import Tracer, lift, to_var, trace
from ..tracing.source import user_source
from . import loops, packing
from . import scan as scans
from ..base.tree import flatten, leaf_paths, unflatten

__all__ = ["cond", "fori_loop", "scan", "while_loop"]


class _Traced:
    """A user function traced into a graph, inputs ordered (captured values, leaves)."""

    def __init__(self, fun: Callable, avals: list, treedef):
        graph, self.out_tree, self.captures = trace(fun, avals, treedef)
        _refuse_hooks(graph)
        n = len(avals)
        self.graph = Graph(graph.inputs[n:] + graph.inputs[:n], graph.nodes, graph.outputs)

    def capture_vars(self, builder) -> list[Var]:
        return [lift(t, builder) for t in self.captures]


def _refuse_hooks(graph: Graph) -> None:
    """A debug_print or tap inside a loop or cond body would be dropped with the body's unused
    results: refused, with what to do instead."""
    for node in graph.nodes:
        if node.prim.name in ("hook", "tap"):
            what = "tg.debug_print" if node.params.get("name") == "debug_print" else "tg.tap"
            raise TracingError(
                f"{what} inside the body of fori_loop, while_loop, scan or cond is not supported "
                f"yet: it would never run{_at()}. Call it on the loop's results after the loop, "
                "or write the loop as a Python for loop (traced as written)."
            )


def _avals_of(vars_: list[Var]) -> list:
    return [(v.shape, v.dtype) for v in vars_]


def _check_carry(what: str, treedef, init_vars: list[Var], tree_out, out_vars: list[Var]) -> None:
    if tree_out != treedef:
        raise TypeError(
            f"{what}: the carry it returns has a different structure from the initial carry "
            f"({tree_out} vs {treedef}); return the same structure (the same containers and "
            "number of arrays)"
        )
    paths = leaf_paths(treedef, "carry")
    for path, a, b in zip(paths, init_vars, out_vars, strict=True):
        if a.shape != b.shape or a.dtype != b.dtype:
            index = ""
            if what == "fori_loop" and a.dtype == np.float32 and b.dtype == np.float64:
                index = (
                    "; the loop index i is an int64 value, and float32 with int64 is float64 "
                    "in NumPy: use i.astype(np.float32)"
                )
            raise TypeError(
                f"{what}: {path} starts as {a.type} but one step makes it {b.type}{_at()}. A "
                "carry keeps its shape and dtype from step to step: make the initial value "
                f"match (for example `np.zeros(shape, dtype)` or `x.astype(...)`){index}"
            )


def _at() -> str:
    source = user_source()
    return f" (at {source})" if source else ""


def _wrap(vars_: list[Var], builder) -> list[Tracer]:
    return [Tracer(v, builder) for v in vars_]


# ----------------------------------------------------------------------------------------------
# scan


def scan(
    f: Callable,
    init: Any,
    xs: Any = None,
    length: int | None = None,
    reverse: bool = False,
    *,
    _what: str = "scan",
) -> tuple[Any, Any]:
    """Loop `carry, y = f(carry, x)` over the leading axis of `xs` (JAX's `lax.scan`).

    Returns `(final carry, ys)`, where `ys` stacks every step's `y` along a new leading axis.
    `init` and `xs` may be pytrees of arrays; with `xs=None`, give `length`. With `reverse`,
    the steps run from the last row of `xs` to the first (ys stay in `xs`'s order).
    """
    x_leaves, x_tree = flatten(xs)
    length = _scan_length(x_leaves, length)
    builder = ir.active_builder()
    if builder is None:
        return _scan_python(f, init, xs, x_leaves, x_tree, length, reverse)
    init_leaves, init_tree = flatten(init)
    with ir.source_location(user_source()):
        init_vars = [to_var(leaf, builder) for leaf in init_leaves]
        x_vars = [to_var(leaf, builder) for leaf in x_leaves]
    _, arg_tree = flatten((init, xs))
    avals = _avals_of(init_vars) + [(v.shape[1:], v.dtype) for v in x_vars]
    carry_tree = {}

    def body(carry, x):
        result = f(carry, x)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(
                f"scan: f must return a pair (new carry, y), got {type(result).__name__}{_at()}"
            )
        leaves, carry_tree["tree"] = flatten(result[0])
        carry_tree["n"] = len(leaves)
        return result

    traced = _Traced(body, avals, arg_tree)
    n_carry = carry_tree["n"]
    graph = traced.graph
    n_consts = len(traced.captures)
    _check_carry(_what, init_tree, init_vars, carry_tree["tree"], list(graph.outputs[:n_carry]))
    y_tree = _second_child(traced.out_tree)
    with ir.source_location(user_source()):
        consts = traced.capture_vars(builder)
        results = scans.scan(consts, init_vars, x_vars, body=graph, length=length, reverse=reverse)
    assert len(consts) == n_consts
    carry = unflatten(init_tree, _wrap(results[:n_carry], builder))
    ys = unflatten(y_tree, _wrap(results[n_carry:], builder))
    return carry, ys


def _second_child(tree):
    """The tree of the second element of a pair's tree."""
    return tree.children[1]


def _scan_length(x_leaves: list, length: int | None) -> int:
    lengths = {int(np.shape(x)[0]) for x in x_leaves if np.ndim(x) > 0}
    if any(np.ndim(x) == 0 for x in x_leaves):
        raise ValueError("scan: every leaf of xs must have a leading axis to scan over")
    if length is not None:
        lengths.add(int(length))
    if not lengths:
        raise ValueError("scan: give xs or length (how many steps to run)")
    if len(lengths) > 1:
        raise ValueError(
            f"scan: the leaves of xs (and length) disagree on the number of steps: "
            f"{sorted(lengths)}"
        )
    return lengths.pop()


def _scan_python(f, init, xs, x_leaves, x_tree, length, reverse):
    carry, ys = init, []
    order = range(length - 1, -1, -1) if reverse else range(length)
    for t in order:
        x = None if xs is None else unflatten(x_tree, [leaf[t] for leaf in x_leaves])
        carry, y = f(carry, x)
        ys.append(y)
    if reverse:
        ys.reverse()
    if not ys:  # no step ran: the body traced (not run) gives ys' structure, with 0 rows
        return carry, _empty_ys(f, init, x_leaves, x_tree, xs is None)
    y_leaves = [flatten(y)[0] for y in ys]
    _, y_tree = flatten(ys[0])
    stacked = [
        np.stack([np.asarray(step[j]) for step in y_leaves]) for j in range(len(y_leaves[0]))
    ]
    return carry, unflatten(y_tree, stacked)


def _empty_ys(f, init, x_leaves, x_tree, no_xs: bool):
    """The ys of a scan of length 0, as the traced scan returns them: each leaf of the body's
    second output with a leading axis of 0."""
    step = (
        None
        if no_xs
        else unflatten(x_tree, [np.zeros(np.shape(v)[1:], np.asarray(v).dtype) for v in x_leaves])
    )
    leaves, treedef = flatten((init, step))
    body = _Traced(f, [(np.shape(v), np.asarray(v).dtype) for v in leaves], treedef)
    if body.out_tree.kind not in ("tuple", "list") or len(body.out_tree.children) != 2:
        raise TypeError("scan: the body must return a pair (carry, y)")
    carry_tree, y_tree = body.out_tree.children
    outs = body.graph.outputs[carry_tree.num_leaves :]
    return unflatten(y_tree, [np.zeros((0,) + v.shape, v.dtype) for v in outs])


# ----------------------------------------------------------------------------------------------
# fori_loop


def fori_loop(lower: int, upper: int, body_fun: Callable, init_val: Any) -> Any:
    """`val = body_fun(i, val)` for i in range(lower, upper) (JAX's `lax.fori_loop`).

    With bounds known when tracing (Python or NumPy integers), it is a `scan` over the index:
    differentiable at every order, compiled once whatever the trip count. Traced bounds make it a
    `while_loop`."""
    traced_bounds = isinstance(lower, Tracer) or isinstance(upper, Tracer)
    if ir.active_builder() is None and not traced_bounds:
        val = init_val
        for i in range(int(lower), int(upper)):
            val = body_fun(i, val)
        return val
    if traced_bounds:

        def cond_fun(state):
            return state[0] < state[1]

        def step(state):
            i, stop, val = state
            return i + 1, stop, body_fun(i, val)

        return while_loop(cond_fun, step, (lower, upper, init_val))[2]
    lower, upper = int(lower), int(upper)
    if upper <= lower:
        return init_val
    index = np.arange(lower, upper, dtype=np.int64)
    carry, _ = scan(lambda val, i: (body_fun(i, val), None), init_val, index, _what="fori_loop")
    return carry


# ----------------------------------------------------------------------------------------------
# while_loop


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """`while cond_fun(val): val = body_fun(val)` (JAX's `lax.while_loop`).

    Differentiable in reverse mode (JAX's is not): the derivative counts the trips at run time
    and runs the reverse loop that many times (O(trips^2) body evaluations: see
    docs/limitations.md)."""
    builder = ir.active_builder()
    if builder is None:
        val = init_val
        while bool(cond_fun(val)):
            val = body_fun(val)
        return val
    leaves, tree = flatten(init_val)
    with ir.source_location(user_source()):
        init_vars = [to_var(leaf, builder) for leaf in leaves]
    avals = _avals_of(init_vars)
    pred = _Traced(cond_fun, avals, flatten((init_val,))[1])
    (p,) = pred.graph.outputs if len(pred.graph.outputs) == 1 else (None,)
    if p is None or p.shape != ():
        raise TypeError(
            f"while_loop: cond_fun must return one scalar (a bool), got "
            f"{[v.type for v in pred.graph.outputs]}{_at()}"
        )
    step = _Traced(body_fun, avals, flatten((init_val,))[1])
    _check_carry("while_loop", tree, init_vars, step.out_tree, list(step.graph.outputs))
    with ir.source_location(user_source()):
        cc, bc = pred.capture_vars(builder), step.capture_vars(builder)
        packed = ir.current_builder().add(
            loops.while_p,
            tuple(cc + bc + init_vars),
            dict(cond=pred.graph, body=step.graph, n_cond_consts=len(cc), n_body_consts=len(bc)),
            ir.current_source(),
        )
        results = packing.unpack(packed, _avals_of(init_vars))
    return unflatten(tree, _wrap(results, builder))


# ----------------------------------------------------------------------------------------------
# cond


def cond(pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any) -> Any:
    """`true_fun(*operands)` if `pred` else `false_fun(*operands)` (JAX's `lax.cond`).

    With a traced predicate both branches are traced (they must return the same structure,
    shapes and dtypes) and one runs; its derivative is the derivative of the branch taken.
    Under `vmap` with a predicate per example, both run and each example selects its own."""
    if not isinstance(pred, Tracer):
        return true_fun(*operands) if bool(np.asarray(pred)) else false_fun(*operands)
    builder = ir.active_builder()
    if np.shape(pred) != ():
        raise TypeError(
            f"cond: the predicate must be a scalar, got shape {np.shape(pred)}{_at()}; to choose "
            "elementwise, use np.where(pred, a, b)"
        )
    leaves, tree = flatten(operands)
    with ir.source_location(user_source()):
        op_vars = [to_var(leaf, builder) for leaf in leaves]
        p = lift(pred, builder)
    avals = _avals_of(op_vars)
    branches = [_Traced(fn, avals, tree) for fn in (false_fun, true_fun)]
    f, t = branches
    if f.out_tree != t.out_tree:
        raise TypeError(
            f"cond: the branches return different structures ({t.out_tree} for true_fun, "
            f"{f.out_tree} for false_fun){_at()}; return the same containers from both"
        )
    out_avals = _common_avals(t.graph.outputs, f.graph.outputs)
    n_ops = len(op_vars)
    captured = [b.capture_vars(builder) for b in branches]
    graphs = []
    for k, b in enumerate(branches):
        g = b.graph
        n_cap = len(b.captures)
        own_caps, own_ops = g.inputs[:n_cap], g.inputs[n_cap:]
        # one signature for both: operands, then the captures of each branch
        others = [Var(v.shape, v.dtype) for j, c in enumerate(captured) if j != k for v in c]
        inputs = (
            own_ops + own_caps + tuple(others) if k == 0 else own_ops + tuple(others) + own_caps
        )
        graphs.append(_coerce(Graph(inputs, g.nodes, g.outputs), out_avals))
    assert all(len(g.inputs) == n_ops + sum(map(len, captured)) for g in graphs)
    with ir.source_location(user_source()):
        results = loops.cond(p, op_vars + captured[0] + captured[1], tuple(graphs))
    return unflatten(t.out_tree, _wrap(results, builder))


def _common_avals(a: tuple[Var, ...], b: tuple[Var, ...]) -> list:
    out = []
    for j, (x, y) in enumerate(zip(a, b, strict=True)):
        if x.shape != y.shape:
            raise TypeError(
                f"cond: output {j} has shape {x.shape} from true_fun but {y.shape} from "
                f"false_fun{_at()}; both branches must return the same shapes"
            )
        out.append((x.shape, np.result_type(x.dtype, y.dtype)))
    return out


def _coerce(g: Graph, out_avals: list) -> Graph:
    """`g` with its outputs converted to the common dtypes of both branches."""
    if all(v.dtype == d for v, (_, d) in zip(g.outputs, out_avals, strict=True)):
        return g
    builder = ir.Builder()
    builder.inputs = list(g.inputs)
    builder.nodes = list(g.nodes)
    with ir.building(builder):
        outs = [P.convert(v, d) for v, (_, d) in zip(g.outputs, out_avals, strict=True)]
    return builder.graph(outs)
