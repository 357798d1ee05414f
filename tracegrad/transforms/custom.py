"""User-defined derivative rules (PyTorch's autograd.Function, JAX's custom_vjp).

    @tg.custom_vjp
    def f(x): ...
    f.defvjp(fwd, bwd)   # fwd(*args) -> (y, residuals); bwd(residuals, ct) -> one cotangent per arg

Arguments, the output `y`, the residuals and the cotangents are pytrees (tree.py). `fwd` and `bwd`
are traced like any user code. In the graph, the forward computation is ordinary nodes followed by
a `custom_grad` node that passes `y` through and holds the traced `bwd` graph; its adjoint rule
inlines that graph, so a custom rule can be differentiated again. A node has one output: when `y`
has several float leaves, the node passes them through packed into one vector (in their common
float dtype) and the leaves are sliced back out; `bwd` sees the cotangents unpacked, in `y`'s tree.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable

import numpy as np

from .. import ir
from .. import numpy_namespace  # noqa: F401 (registers the handlers tracing dispatches to)
from .. import primitives as P
from ..base.errors import ShapeError, TracingError
from ..trace import Tracer, inline_graph, to_var, trace
from ..tracing.source import user_line, user_source
from ..base.tree import TreeDef, flatten, path_step, unflatten


class custom_vjp:
    """Decorator: give `fun` a hand-written reverse-mode rule with `defvjp(fwd, bwd)`."""

    _capture_children = (
        "fun",
        "fwd",
        "bwd",
    )  # what the capture walk follows (see tracing/scope.py)

    def __init__(self, fun: Callable):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.fwd: Callable | None = None
        self.bwd: Callable | None = None
        self._in_rule = 0  # > 0 while fwd or bwd is traced: calls inside them are plain calls

    def defvjp(self, fwd: Callable, bwd: Callable) -> custom_vjp:
        self.fwd, self.bwd = fwd, bwd
        return self

    def __call__(self, *args, **kwargs):
        builder = ir.active_builder()
        if builder is None or self._in_rule:  # not traced, or called by its own rule: the function
            return self.fun(*args, **kwargs)
        if self.fwd is None or self.bwd is None:
            raise TypeError(
                f"custom_vjp function {self.__name__} is being differentiated but has no rule: "
                "call f.defvjp(fwd, bwd) after defining it"
            )
        if kwargs:
            args = positional(self.fun, self.__name__, "custom_vjp", args, kwargs)
        return self._traced(builder, args)

    def _traced(self, builder: ir.Builder, args: tuple):
        self._in_rule += 1
        try:
            return self._trace_rule(builder, args)
        finally:
            self._in_rule -= 1

    def _trace_rule(self, builder: ir.Builder, args: tuple):
        leaves, treedef = flatten(args)
        arg_vars = [to_var(a, builder) for a in leaves]
        avals = [(v.shape, v.dtype) for v in arg_vars]
        name = self.__name__

        # Forward: trace fwd, inline it; it must return (y, residuals).
        fgraph, out_tree, captures = trace(self.fwd, avals, treedef)
        _refuse_traced_captures(name, captures, builder)
        if out_tree.kind not in ("tuple", "list") or len(out_tree.children) != 2:
            raise TypeError(f"{name}: fwd must return a pair (output, residuals), got {out_tree}")
        y_tree, res_tree = out_tree.children
        outs = inline_graph(fgraph, leaves, captures)
        ys, residuals = outs[: y_tree.num_leaves], outs[y_tree.num_leaves :]
        y_vars = [t.ir_var for t in ys]
        diff = [i for i, v in enumerate(y_vars) if P.is_float(v.dtype)]
        if not diff:  # no float output: nothing has a derivative
            return unflatten(y_tree, ys)
        res_vars = [t.ir_var for t in residuals]

        # Backward: trace bwd(residuals, ct) once, with one input per float leaf of y (the
        # others get zero cotangents); its graph is what the adjoint inlines.
        n_res = len(res_vars)

        def backward(*flat):
            cts = iter(flat[n_res:])
            ct_leaves = [
                next(cts) if i in diff else np.zeros(v.shape, v.dtype) for i, v in enumerate(y_vars)
            ]
            return self.bwd(unflatten(res_tree, list(flat[:n_res])), unflatten(y_tree, ct_leaves))

        bwd_avals = [(v.shape, v.dtype) for v in res_vars] + [
            (y_vars[i].shape, y_vars[i].dtype) for i in diff
        ]
        try:
            bgraph, ct_tree, bcaptures = trace(
                backward, bwd_avals, flatten(tuple(range(len(bwd_avals))))[1]
            )
        except ShapeError as exc:
            shapes = ", ".join(str(y_vars[i].shape) for i in diff)
            raise ShapeError(
                f"{exc}\n(in the bwd rule of {name}: its cotangents have the shapes of the "
                f"outputs fwd returns, {shapes}; check that fwd returns {name}'s own output "
                "first, then the residuals)"
            ) from exc
        if bcaptures:
            raise TracingError(
                f"{name}: bwd uses values from outside its arguments (traced values, or arrays "
                "the function reads from a global or a closure, which are inputs of the "
                "program); pass what it needs through the residuals fwd returns: "
                "fwd(x) -> (y, (x, C)), then bwd((x, C), ct)"
            )
        bgraph = self._check_cotangents(bgraph, ct_tree, treedef, arg_vars)
        with ir.source_location(user_source()):
            if len(diff) == 1:
                carried = y_vars[diff[0]]
            else:
                carried, bgraph = _pack([y_vars[i] for i in diff], bgraph, n_res)
            out = P.emit(
                P.custom_grad_p, *arg_vars, *res_vars, carried, bwd=bgraph, n_args=len(arg_vars)
            )
            results = list(ys)
            if len(diff) == 1:
                results[diff[0]] = Tracer(out, builder)
            else:
                for i, v in zip(diff, _unpack(out, [y_vars[i] for i in diff]), strict=True):
                    results[i] = Tracer(v, builder)
        return unflatten(y_tree, results)

    def _check_cotangents(
        self, bgraph: ir.Graph, ct_tree: TreeDef, args_tree: TreeDef, arg_vars
    ) -> ir.Graph:
        """bwd returns one cotangent per positional argument, each a tree of its argument's
        structure (None for zeros, for a whole argument or any part of one): check and fill."""
        name = self.__name__
        n_args = len(args_tree.children)
        if ct_tree.kind not in ("tuple", "list") or len(ct_tree.children) != n_args:
            raise TypeError(
                f"{name}: bwd must return a tuple with one cotangent per argument ({n_args}), "
                f"got {ct_tree}"
            )
        slots: list[int | None] = []  # per argument leaf: which output of bwd is its cotangent
        outputs = iter(range(len(bgraph.outputs)))
        for i, (arg_tree, ct_child) in enumerate(
            zip(args_tree.children, ct_tree.children, strict=True)
        ):
            _match_cotangent(arg_tree, ct_child, outputs, slots, f"argument {i}", name)
        builder = ir.Builder()
        builder.inputs = list(bgraph.inputs)
        builder.nodes = list(bgraph.nodes)
        result = []
        with ir.building(builder):
            for slot, v in zip(slots, arg_vars, strict=True):
                if slot is None:
                    result.append(P.zeros_like(v))
                    continue
                ct = bgraph.outputs[slot]
                if ct.shape != v.shape:
                    raise ValueError(
                        f"{name}: bwd returned a cotangent of shape {ct.shape} for an argument of "
                        f"shape {v.shape}; they must match"
                    )
                result.append(P.convert(ct, v.dtype) if P.is_float(v.dtype) else P.zeros_like(v))
        return ir.Graph(bgraph.inputs, tuple(builder.nodes), tuple(result))


def positional(fun: Callable, name: str, kind: str, args: tuple, kwargs: dict) -> tuple:
    """Keyword arguments bound to their positions, for rules that see positional arguments
    only (JAX resolves them the same way); a default skipped on the way is filled in, trailing
    defaults are left out."""
    try:
        signature = inspect.signature(fun)
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{name}: {exc}") from None
    given = set(bound.arguments)
    bound.apply_defaults()
    if bound.kwargs:
        raise TypeError(
            f"{name}: keyword-only arguments ({', '.join(bound.kwargs)}) cannot be passed to a "
            f"{kind} function; make them positional"
        )
    params = list(signature.parameters.values())
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return bound.args
    last = max(i for i, p in enumerate(params[: len(bound.args)]) if p.name in given)
    return bound.args[: last + 1]


def _match_cotangent(
    arg_tree: TreeDef, ct_tree: TreeDef, outputs, slots: list, path: str, name: str
) -> None:
    """Walk an argument's tree and its cotangent's together; None in the cotangent stands for
    zeros of the whole subtree."""
    if ct_tree.kind == "none" and arg_tree.kind != "none":
        slots += [None] * arg_tree.num_leaves
        return
    if arg_tree.kind == "leaf":
        if ct_tree.kind != "leaf":
            raise TypeError(
                f"{name}: bwd returned {ct_tree} as the cotangent of {path}, which is one array"
            )
        slots.append(next(outputs))
        return
    same = (
        ct_tree.kind == arg_tree.kind
        and ct_tree.node_type is arg_tree.node_type
        and ct_tree.keys == arg_tree.keys
        and len(ct_tree.children) == len(arg_tree.children)
    )
    if not same:
        raise TypeError(
            f"{name}: the cotangent that bwd returned for {path} has the structure {ct_tree}, "
            f"but the argument is {arg_tree}; return the same containers (None for zeros)"
        )
    for k, (a, c) in enumerate(zip(arg_tree.children, ct_tree.children, strict=True)):
        _match_cotangent(a, c, outputs, slots, path + path_step(arg_tree, k), name)


def _pack(ys: list[ir.Var], bgraph: ir.Graph, n_res: int) -> tuple[ir.Var, ir.Graph]:
    """Several float outputs as one vector (their common dtype), and the backward graph that
    takes that vector's cotangent instead of one cotangent per output."""
    dtype = np.result_type(*(v.dtype for v in ys))
    packed = P.concatenate([P.reshape(P.convert(v, dtype), (v.size,)) for v in ys], axis=0)
    builder = ir.Builder()
    residuals = [builder.new_input(v.shape, v.dtype) for v in bgraph.inputs[:n_res]]
    ct = builder.new_input(packed.shape, packed.dtype)
    with ir.building(builder):
        cts = _unpack(ct, ys)
        outs = ir.inline(builder, bgraph, [*residuals, *cts])
    return packed, builder.graph(outs)


def _unpack(packed: ir.Var, like: list[ir.Var]) -> list[ir.Var]:
    pieces, start = [], 0
    for v in like:
        n = math.prod(v.shape)
        piece = P.slice_(packed, ((start, start + n, 1),))
        pieces.append(P.convert(P.reshape(piece, v.shape), v.dtype))
        start += n
    return pieces


def _refuse_traced_captures(name: str, captures: list, builder: ir.Builder) -> None:
    """fwd may read constants from outside (arrays from globals are hidden inputs of the program),
    but not a traced float value of the enclosing function: bwd gives cotangents for the
    arguments only, so that value's derivative would be silently zero (JAX refuses it too)."""
    hidden = {id(v) for v in builder.root.hidden_vars}
    for t in captures:
        var = getattr(t, "ir_var", None)
        if var is not None and P.is_float(var.dtype) and id(var) not in hidden:
            raise TracingError(
                f"{name}: fwd uses a traced value of shape {var.shape} from outside its "
                "arguments, whose derivative would be lost (bwd returns cotangents for the "
                f"arguments only){user_line()}\nPass it as an argument of the function and "
                "return its cotangent from bwd."
            )
