"""User-defined derivative rules (PyTorch's autograd.Function, JAX's custom_vjp).

    @tg.custom_vjp
    def f(x): ...
    f.defvjp(fwd, bwd)   # fwd(*args) -> (y, residuals); bwd(residuals, ct) -> one cotangent per arg

`fwd` and `bwd` are traced like any user code. In the graph, the forward computation is ordinary
nodes followed by a `custom_grad` node that passes `y` through and holds the traced `bwd` graph;
its adjoint rule inlines that graph, so a custom rule can be differentiated again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from . import ir
from . import primitives as P
from .errors import TracingError
from .trace import Tracer, inline_graph, to_var, trace, user_source
from .tree import flatten, unflatten


class custom_vjp:
    """Decorator: give `fun` a hand-written reverse-mode rule with `defvjp(fwd, bwd)`."""

    _capture_children = ("fun", "fwd", "bwd")  # what the capture walk follows (see capture.py)

    def __init__(self, fun: Callable):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.fwd: Callable | None = None
        self.bwd: Callable | None = None
        self._in_rule = 0  # > 0 while fwd or bwd is traced: calls inside them are plain calls

    def defvjp(self, fwd: Callable, bwd: Callable) -> custom_vjp:
        self.fwd, self.bwd = fwd, bwd
        return self

    def __call__(self, *args):
        builder = ir.active_builder()
        if builder is None or self._in_rule:  # not traced, or called by its own rule: the function
            return self.fun(*args)
        if self.fwd is None or self.bwd is None:
            raise TypeError(
                f"custom_vjp function {self.__name__} is being differentiated but has no rule: "
                "call f.defvjp(fwd, bwd) after defining it"
            )
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
        if out_tree.kind not in ("tuple", "list") or len(out_tree.children) != 2:
            raise TypeError(f"{name}: fwd must return a pair (output, residuals), got {out_tree}")
        y_tree, res_tree = out_tree.children
        if y_tree.kind != "leaf":
            raise TypeError(f"{name}: the output of a custom_vjp function must be one array, got {y_tree}")
        outs = inline_graph(fgraph, leaves, captures)
        y, residuals = outs[0], outs[1:]
        res_vars = [t.ir_var for t in residuals]

        # Backward: trace bwd(residuals, ct) once; its graph is what the adjoint inlines.
        res_avals = [(v.shape, v.dtype) for v in res_vars]
        bwd_avals = res_avals + [(y.ir_var.shape, y.ir_var.dtype)]
        bgraph, ct_tree, bcaptures = trace(
            lambda *flat: self.bwd(unflatten(res_tree, list(flat[:-1])), flat[-1]),
            bwd_avals,
            flatten(tuple(range(len(bwd_avals))))[1],
        )
        if bcaptures:
            raise TracingError(
                f"{name}: bwd uses traced values from outside its arguments; pass what it needs "
                "through the residuals returned by fwd"
            )
        bgraph = self._check_cotangents(bgraph, ct_tree, treedef, arg_vars)
        with ir.source_location(user_source()):
            out = P.emit(P.custom_grad_p, *arg_vars, *res_vars, y.ir_var, bwd=bgraph, n_args=len(arg_vars))
        return Tracer(out, builder)

    def _check_cotangents(self, bgraph: ir.Graph, ct_tree, args_tree, arg_vars) -> ir.Graph:
        """bwd returns one cotangent per positional argument (None for none): check and fill."""
        name = self.__name__
        n_args = len(args_tree.children)
        if ct_tree.kind not in ("tuple", "list") or len(ct_tree.children) != n_args:
            raise TypeError(
                f"{name}: bwd must return a tuple with one cotangent per argument ({n_args}), "
                f"got {ct_tree}"
            )
        builder = ir.Builder()
        builder.inputs = list(bgraph.inputs)
        builder.nodes = list(bgraph.nodes)
        outs = iter(bgraph.outputs)
        cts = []
        with ir.building(builder):
            for arg_tree, ct_child in zip(args_tree.children, ct_tree.children):
                n = arg_tree.num_leaves
                if ct_child.kind == "none":
                    cts += [None] * n
                elif ct_child.num_leaves != n:
                    raise TypeError(f"{name}: a cotangent's structure {ct_child} does not match its argument {arg_tree}")
                else:
                    cts += [next(outs) for _ in range(n)]
            result = []
            for ct, v in zip(cts, arg_vars):
                if ct is None:
                    result.append(P.zeros_like(v))
                    continue
                if ct.shape != v.shape:
                    raise ValueError(
                        f"{name}: bwd returned a cotangent of shape {ct.shape} for an argument of "
                        f"shape {v.shape}; they must match"
                    )
                result.append(P.convert(ct, v.dtype) if P.is_float(v.dtype) else P.zeros_like(v))
        return ir.Graph(bgraph.inputs, tuple(builder.nodes), tuple(result))

