"""Checkpointing (rematerialisation): recompute a function's internals in the backward pass.

`tg.checkpoint(f)(*args)`, inside a traced function, emits `f`'s nodes as usual (the forward
value), then one `remat` node per float output that passes the value through and holds `f`'s
graph. The adjoint of a `remat` node does not use the forward internals: it recomputes them
from the inputs, behind a `remat_barrier` (an elementwise identity that the simplifier's
sharing of equal subexpressions cannot see through, so the recomputation is not merged back into
the forward nodes), and differentiates the recomputation. The forward internals are then dead
once the forward value exists, and the backward pass holds only what it recomputes: peak memory
goes from every intermediate of `f` to its inputs and outputs (see benchmarks/bench_checkpoint.py).

The rules emit ordinary primitives, so a checkpointed function can be differentiated again, in
forward mode (by transposition) and batched.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from .. import ir
from .. import numpy_namespace  # noqa: F401 (registers the handlers tracing dispatches to)
from .. import primitives as P
from ..autodiff import adjoint
from ..base.errors import TracingError
from ..ir import Graph, Var
from ..trace import Tracer, lift, to_var, trace
from ..tracing.source import user_source
from ..base.tree import flatten, unflatten


def _remat_rule(ct, out, *inputs, graph: Graph, index: int):
    xs = inputs[:-1]
    wrt = [i for i, x in enumerate(xs) if P.is_float(x.dtype)]
    vjp = adjoint(graph, wrt, [index], seed_ones=False)
    held = [P.emit(remat_barrier_p, x) for x in xs]
    outs = ir.inline(ir.current_builder(), vjp, held + [ct])
    grads = dict(zip(wrt, outs[len(graph.outputs) :], strict=True))
    return tuple(grads.get(i) for i in range(len(xs))) + (None,)


# remat: passes its last input (the forward value) through; lowered after differentiation
remat_p = P.identity_primitive("remat", _remat_rule, P.every_operand("graph"))

# remat_barrier: the value of its input, as a node of its own (see the module docstring)
remat_barrier_p = P.elementwise_primitive(
    "remat_barrier",
    lambda x: x,
    lambda ct, out, x: (ct,),
    "{0}",
    linear=True,
    complex_operands=True,
)


class checkpoint:
    """Decorator: recompute `fun`'s intermediate values in the backward pass instead of
    storing them (JAX's `jax.checkpoint`, PyTorch's `torch.utils.checkpoint`).

    Values and derivatives are unchanged; what changes is the memory the backward pass holds.
    Arguments at `static_argnums` are passed as they are (not traced).
    """

    _capture_children = ("fun",)  # what the capture walk follows (see tracing/scope.py)

    def __init__(self, fun: Callable, static_argnums: int | Sequence[int] = ()):
        if not callable(fun):
            raise TypeError(f"checkpoint expects a function, got {type(fun).__name__}")
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.static_argnums = (
            (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
        )

    def __call__(self, *args, **kwargs):
        builder = ir.active_builder()
        if builder is None:  # not traced: nothing to differentiate
            return self.fun(*args, **kwargs)
        static = {i: args[i] for i in self.static_argnums if i < len(args)}
        dynamic = tuple(a for i, a in enumerate(args) if i not in static)
        if kwargs:  # traced like the positional arguments: one dict after them
            dynamic += (kwargs,)

        def call(*dyn):
            keywords = dyn[-1] if kwargs else {}
            it = iter(dyn[:-1] if kwargs else dyn)
            positional = (static[i] if i in static else next(it) for i in range(len(args)))
            return self.fun(*positional, **keywords)

        leaves, treedef = flatten(dynamic)
        arg_vars = [to_var(a, builder) for a in leaves]
        fgraph, out_tree, captures = trace(call, [(v.shape, v.dtype) for v in arg_vars], treedef)
        if any(node.prim is P.tap_p for node in fgraph.nodes):
            raise TracingError(
                f"{self.__name__}: tg.tap inside tg.checkpoint is not supported (the backward "
                "pass recomputes the function, so the tap would see no cotangent); tap the "
                "checkpointed function's result instead"
            )
        if P.draws_in(fgraph.nodes):
            raise TracingError(
                f"{self.__name__}: random draws inside tg.checkpoint are not supported (the "
                "backward pass would recompute the function and draw again); draw the numbers "
                "outside the checkpointed function and pass them in"
            )
        inputs = arg_vars + [lift(t, builder) for t in captures]
        outs = ir.inline(builder, fgraph, inputs)
        # the recomputation runs no hooks a second time
        pure = Graph(
            fgraph.inputs, tuple(n for n in fgraph.nodes if not n.prim.effectful), fgraph.outputs
        )
        results: list[Var] = []
        with ir.source_location(user_source()):
            for k, out in enumerate(outs):
                if P.is_float(out.dtype):
                    out = P.emit(remat_p, *inputs, out, graph=pure, index=k)
                results.append(out)
        return unflatten(out_tree, [Tracer(v, builder) for v in results])
