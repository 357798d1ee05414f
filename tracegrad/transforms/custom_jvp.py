"""User-written forward-mode rules (JAX's custom_jvp).

    @tg.custom_jvp
    def f(x): ...

    @f.defjvp
    def f_jvp(primals, tangents):      # -> (f(*primals), tangent of the output)
        ...

Inside a trace, `f`'s own nodes compute the value, followed by a `custom_jvp` node per float
output that passes the value through and holds the traced rule. Reverse mode needs the
transpose of the rule: the rule is linear in the tangents, so the adjoint of the rule's graph
with respect to the tangents, seeded with the cotangent, is exactly the vector-Jacobian product.
Forward mode (derived from reverse mode by transposition, see forward.py) then transposes it
back: `tg.jvp` of `f` computes the user's rule.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from .. import ir
from .. import primitives as P
from ..autodiff import adjoint
from ..custom import positional
from ..errors import TracingError
from ..ir import Graph
from ..trace import Tracer, _lift, to_var, trace
from ..tracing.source import user_source
from ..tree import TreeDef, flatten, unflatten


def _custom_jvp_rule(ct, out, *inputs, rule: Graph, index: int, n_args: int):
    xs = inputs[:n_args]
    n_outs = (len(rule.outputs)) // 2
    wrt = [n_args + i for i, x in enumerate(xs) if P.is_float(x.dtype)]
    vjp = adjoint(rule, wrt, [n_outs + index], seed_ones=False)
    zeros = [P.zeros_like(x) for x in xs]  # the rule is linear in the tangents: any point will do
    outs = ir.inline(ir.current_builder(), vjp, list(xs) + zeros + [ct])
    grads = dict(zip(wrt, outs[len(rule.outputs) :], strict=True))
    return tuple(grads.get(n_args + i) for i in range(n_args)) + (None,)


# custom_jvp: passes its last input (the value) through; lowered after differentiation
custom_jvp_p = P._identity("custom_jvp", _custom_jvp_rule, None)
object.__setattr__(custom_jvp_p, "batch", P.batch_every_operand(custom_jvp_p, "rule"))


class custom_jvp:
    """Decorator: give `fun` a hand-written forward-mode rule with `defjvp(rule)`, where
    `rule(primals, tangents)` returns `(fun(*primals), tangent_out)` and is linear in the
    tangents. Reverse mode (grad, vjp, hessian...) uses the rule's transpose.
    """

    _capture_children = ("fun", "jvp")  # what the capture walk follows (see tracing/scope.py)

    def __init__(self, fun: Callable):
        if not callable(fun):
            raise TypeError(f"custom_jvp expects a function, got {type(fun).__name__}")
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.jvp: Callable | None = None
        self._in_rule = 0  # > 0 while the rule is traced: calls inside it are plain calls

    def defjvp(self, jvp: Callable) -> Callable:
        if not callable(jvp):
            raise TypeError(f"defjvp expects a function, got {type(jvp).__name__}")
        self.jvp = jvp
        return jvp

    def __call__(self, *args, **kwargs):
        builder = ir.active_builder()
        if builder is None or self._in_rule:
            return self.fun(*args, **kwargs)
        if kwargs:
            args = positional(self.fun, self.__name__, "custom_jvp", args, kwargs)
        if self.jvp is None:
            raise TypeError(
                f"custom_jvp function {self.__name__} is being traced but has no rule: define "
                f"one with @{self.__name__}.defjvp after defining it"
            )
        self._in_rule += 1
        try:
            return self._traced(builder, args)
        finally:
            self._in_rule -= 1

    def _traced(self, builder: ir.Builder, args: tuple):
        name = self.__name__
        leaves, treedef = flatten(args)
        arg_vars = [to_var(a, builder) for a in leaves]
        avals = [(v.shape, v.dtype) for v in arg_vars]
        n = len(arg_vars)
        fgraph, out_tree, captures = trace(self.fun, avals, treedef)
        outs = ir.inline(builder, fgraph, arg_vars + [_lift(t, builder) for t in captures])

        def call_rule(*flat):
            primals = unflatten(treedef, list(flat[:n]))
            tangents = unflatten(treedef, list(flat[n:]))
            return self.jvp(tuple(primals), tuple(tangents))

        flat_tree = flatten(tuple(range(2 * n)))[1]
        rule, rule_tree, rule_captures = trace(call_rule, avals + avals, flat_tree)
        if rule_captures:
            raise TracingError(
                f"{name}: the jvp rule uses traced values from outside its arguments; pass what "
                "it needs as arguments of the function"
            )
        expected = TreeDef("tuple", (out_tree, out_tree))
        if (
            rule_tree.kind not in ("tuple", "list")
            or len(rule_tree.children) != 2
            or any(c != out_tree for c in rule_tree.children)
        ):
            raise TypeError(
                f"{name}: the jvp rule must return (primal_out, tangent_out), each shaped like "
                f"the function's output {out_tree}; it returned {rule_tree} (expected {expected})"
            )
        k = len(outs)
        for j, (y, t) in enumerate(zip(rule.outputs[:k], rule.outputs[k:], strict=True)):
            if y.shape != outs[j].shape or t.shape != outs[j].shape:
                raise ValueError(
                    f"{name}: output {j} of the jvp rule has shapes {y.shape} (primal) and "
                    f"{t.shape} (tangent); the function's output has shape {outs[j].shape}"
                )
        # tangents in the dtype of their values
        rule = _with_output_dtypes(rule, [v.dtype for v in outs] * 2)
        results = []
        with ir.source_location(user_source()):
            for j, y in enumerate(outs):
                if P.is_float(y.dtype):
                    y = P.emit(custom_jvp_p, *arg_vars, y, rule=rule, index=j, n_args=n)
                results.append(Tracer(y, builder))
        return unflatten(out_tree, results)


def _with_output_dtypes(graph: Graph, dtypes) -> Graph:
    builder = ir.Builder()
    builder.inputs = list(graph.inputs)
    builder.nodes = list(graph.nodes)
    with ir.building(builder):
        outs = [
            P.convert(v, d) if v.dtype != d else v
            for v, d in zip(graph.outputs, dtypes, strict=True)
        ]
    return builder.graph(outs)
