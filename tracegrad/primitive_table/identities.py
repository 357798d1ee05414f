"""The identity entries of the table (stage: primitives): primitives that pass a value through and
that only autodiff treats specially (stop_gradient, custom_grad, tap, hook).
"""

from __future__ import annotations

from .. import ir
from .batching import every_operand
from .facets import Kind, Primitive, register
from .ops import emit


def _custom_grad_rule(ct, out, *inputs, bwd: ir.Graph, n_args: int):
    """Cotangents of the primal arguments come from the user's traced `bwd(residuals, ct)`."""
    residuals = inputs[n_args:-1]
    cts = ir.inline(ir.current_builder(), bwd, [*residuals, ct])
    # the residuals and the forward value get no cotangent through this node
    return tuple(cts) + (None,) * (len(inputs) - n_args)


def identity_primitive(name, adjoint, batch, differentiable=True, effectful=False):
    return register(
        Primitive(
            name,
            Kind.IDENTITY,
            impl=lambda *xs, **params: xs[-1],
            infer=lambda shapes, dtypes, p: (shapes[-1], dtypes[-1]),
            adjoint=adjoint,
            batch=batch,
            differentiable=differentiable,
            effectful=effectful,
        )
    )


stop_gradient_p = identity_primitive(
    "stop_gradient",
    lambda ct, out, x: (None,),
    lambda size, inputs, batched: emit(stop_gradient_p, inputs[0]),
)
# every operand batched, and the user's rule batched with them
custom_grad_p = identity_primitive("custom_grad", _custom_grad_rule, every_operand("bwd"))
# tap: a named intermediate value (tg.tap). The differentiation that owns it reports the cotangent
# flowing into it, then lowers it; the cotangent passes through unchanged.
tap_p = identity_primitive(
    "tap",
    lambda ct, out, x, name, hook: (ct,),
    lambda size, inputs, batched, name, hook: emit(tap_p, inputs[0], name=name, hook=hook),
)
# hook: after the program runs, `hook(name, *values)` is called on the host with its inputs' values
# (one for a tg.tap hook; any number for tg.debug_print).
hook_p = identity_primitive(
    "hook",
    None,
    lambda size, inputs, batched, name, hook: emit(hook_p, *inputs, name=name, hook=hook),
    differentiable=False,
    effectful=True,
)
