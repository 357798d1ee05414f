"""Scalars of a plan (tracegrad/cpu/scalars.py): an unrolled element-by-element loop compiles as
kernels with a handful of array arguments, and computes what the interpreter computes."""

import re

import numpy as np

import tracegrad as tg
from tracegrad import codegen_cpu, passes
from tracegrad import primitives as P
from tracegrad.fusion import EvalStep, FusedLoop

N = 20  # more pieces than a loop assembles in place (primitives.MAX_INLINE_PIECES)


def scattered(x):
    """An unrolled loop (its windows do not move by a fixed step, so it does not roll)."""
    y = np.zeros(N)
    for i in range(N):
        y[i] = np.sin(x[(i * i) % N]) * x[(3 * i + 1) % N]
    return np.sum(y**2)


def reused(x):
    """The same, where each written value is also used on its own."""
    y = np.zeros(N)
    total = 0.0
    for i in range(N):
        v = np.cos(x[(i * i) % N]) * x[(5 * i + 2) % N]
        y[i] = v
        total = total + v * i
    return np.sum(np.exp(y)) + total


def plan_of(fun, x):
    graph = passes.optimize(tg.make_ir(tg.value_and_grad(fun), optimize=False)(x))
    return codegen_cpu.build(graph, load=False)


def test_scalars_are_stored_where_they_are_assembled_and_pooled():
    x = np.linspace(0.1, 1.0, N)
    assert P.MAX_INLINE_PIECES < N
    program = plan_of(scattered, x)
    steps = program.plan.steps
    assert not [s for s in steps if isinstance(s, EvalStep) and s.node.prim is P.concatenate_p]
    scalars = [b for b in program.plan.buffers if b.shape == () and b.role == "temp"]
    assert len(scalars) < 8
    source = "".join(call.source.module for call in program.calls.values())
    widest = max(len(args.split(",")) for args in re.findall(r"def kernel\(([^)]*)\)", source))
    assert widest <= 12, widest  # was over a hundred array arguments


def test_an_unrolled_loop_gives_the_interpreters_numbers():
    x = np.linspace(0.1, 1.0, N)
    for fun in (scattered, reused):
        value, grad = tg.value_and_grad(fun, backend="cpu")(x)
        want_value, want_grad = tg.value_and_grad(fun, backend="numpy")(x)
        np.testing.assert_allclose(value, want_value, rtol=1e-13)
        np.testing.assert_allclose(grad, want_grad, rtol=1e-12, atol=1e-15)
        eps = 1e-6
        fd = [(fun(x + eps * e) - fun(x - eps * e)) / (2 * eps) for e in np.eye(N)]
        np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)


def test_a_scalar_read_elsewhere_keeps_its_buffer():
    x = np.linspace(0.1, 1.0, N)
    program = plan_of(reused, x)
    # every 0-d buffer still stored by a scalar loop is read by some later step or pooled
    for step in program.plan.steps:
        if isinstance(step, FusedLoop) and not step.shape:
            for store in step.stores:
                assert (
                    store.buffer.shape != ()
                    or any(store.buffer in later.reads for later in program.plan.steps)
                    or store.buffer in program.plan.outputs
                )
