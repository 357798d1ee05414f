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

import numpy as np
from collections.abc import Callable

from .. import ir
from .. import numpy_namespace  # noqa: F401 (registers the handlers tracing dispatches to)
from .. import primitives as P
from ..autodiff import adjoint
from .custom import positional
from ..base.errors import TracingError
from ..ir import Graph
from ..trace import Tracer, lift, to_var, trace
from ..tracing.source import user_source
from ..base.tree import TreeDef, flatten, unflatten


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
custom_jvp_p = P.identity_primitive("custom_jvp", _custom_jvp_rule, P.every_operand("rule"))


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
        outs = ir.inline(builder, fgraph, arg_vars + [lift(t, builder) for t in captures])

        def call_rule(*flat):
            primals = unflatten(treedef, list(flat[:n]))
            tangents = unflatten(treedef, list(flat[n:]))
            return self.jvp(tuple(primals), tuple(tangents))

        flat_tree = flatten(tuple(range(2 * n)))[1]
        rule, rule_tree, rule_captures = trace(call_rule, avals + avals, flat_tree)
        if rule_captures:
            raise TracingError(
                f"{name}: the jvp rule uses values from outside its arguments (traced values, "
                "or arrays the function reads from a global or a closure, which are inputs of "
                "the program); pass what it needs as arguments of the function"
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
        for j, how in enumerate(_tangent_forms(rule, n)[k:]):
            if P.is_float(outs[j].dtype) and how in ("const", "nonlinear"):
                what = (
                    "does not depend on the tangents (a constant)"
                    if how == "const"
                    else "is not linear in the tangents"
                )
                raise TracingError(
                    f"{name}: the tangent output {j} of the jvp rule {what}; a jvp rule must be "
                    "linear in the tangents (tangent_out = J @ tangents: multiply them by values "
                    "of the primals, add, reshape...), and return zeros for a zero derivative. "
                    "Reverse mode transposes the rule, so anything else would give wrong "
                    "gradients."
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


# How ops other than the table's linear ones (`Primitive.linear`) carry the tangents: products
# are linear in one operand when the others are constants; these are not looked inside.
_PRODUCTS = frozenset({"mul", "matmul", "ct_mul"})
_OPAQUE = frozenset({"custom_grad", "custom_jvp", "loop", "scan", "while", "cond", "hook", "tap"})


def _tangent_forms(rule: Graph, n: int) -> list[str]:
    """For each output of a jvp rule traced with n primals then n tangents as inputs: "zero",
    "const" (no tangent in it), "linear", "nonlinear", or "unknown" (an op this check does not
    look inside). Structural: x * t is linear, t * t and sin(t) are not, t + 1 is not."""
    form: dict[int, str] = {}
    for i, v in enumerate(rule.inputs):
        form[id(v)] = "linear" if i >= n else "const"
    for node in rule.nodes:
        ins = [form.get(id(v), "const") for v in node.inputs]
        name = node.prim.name
        if name == "const":
            value = np.asarray(node.params["value"])
            out = "zero" if not np.any(value) else "const"
        elif "unknown" in ins or name in _OPAQUE:
            out = "unknown" if any(f != "const" for f in ins) or name in _OPAQUE else "const"
        elif "nonlinear" in ins:
            out = "nonlinear"
        elif all(f in ("const", "zero") for f in ins):
            linear_zero = ins and all(f == "zero" for f in ins) and node.prim.linear
            out = "zero" if linear_zero else "const"
        elif node.prim.linear:
            # integer operands (indices) carry no tangent; a constant term next to a tangent
            # makes the op affine, not linear
            floats = [f for v, f in zip(node.inputs, ins, strict=True) if P.is_float(v.dtype)]
            out = (
                "const"
                if "linear" not in floats
                else "nonlinear"
                if "const" in floats
                else "linear"
            )
        elif name in _PRODUCTS:
            tangent = [f for f in ins if f == "linear"]
            out = "zero" if "zero" in ins else "nonlinear" if len(tangent) > 1 else "linear"
        elif name == "div":
            out = "linear" if ins[0] == "linear" and ins[1] == "const" else "nonlinear"
        elif name == "where":
            cond, a, b = ins
            out = "nonlinear" if cond == "linear" or "const" in (a, b) else "linear"
        elif name == "stop_gradient":
            out = ins[0]
        else:
            out = "nonlinear"  # an elementwise function of a tangent: sin(t), t ** 2, |t|...
        form[id(node.out)] = out
    return [form.get(id(v), "const") for v in rule.outputs]
