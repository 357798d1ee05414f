"""Buffer donation: a fused loop writes its result over an operand that is dead (tracegrad.cpu.donation).

Every donated plan is checked against the rules that make the write safe, and every program is
checked against the NumPy interpreter: a donation that broke one of them would show as a wrong
number, the defect the rules exist to exclude."""

import threading

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import codegen_cpu, fusion, passes
from tracegrad.cpu import donation
from tracegrad.fusion import EvalStep, FusedLoop, Load


def cpu_plan(fun, *args):
    graph = passes.optimize(tg.make_ir(fun, optimize=False)(*args))
    return codegen_cpu.build(graph, load=False).plan


def donated_loops(plan):
    """(step position, loop, buffer) for each loop that stores into a buffer it loads."""
    found = []
    for j, step in enumerate(plan.steps):
        if isinstance(step, FusedLoop):
            loaded = {id(op.buffer) for op in step.ops if isinstance(op, Load)}
            found += [(j, step, s.buffer) for s in step.stores if id(s.buffer) in loaded]
    return found


def check_rules(plan):
    """The rules of tracegrad.cpu.donation, checked on a donated plan."""
    inputs = {id(b) for b in plan.inputs}
    outputs = {id(b) for b in plan.outputs}
    for j, loop, buf in donated_loops(plan):
        own = fusion.identity_index(len(loop.shape))
        assert not loop.scans
        assert buf.role == "temp" and id(buf) not in inputs and id(buf) not in outputs
        assert all(op.index == own for op in loop.ops if isinstance(op, Load) and op.buffer is buf)
        assert all(s.index == own for s in loop.stores if s.buffer is buf)
        assert sum(s.buffer is buf for s in loop.stores) == 1
        made = [s for s in plan.steps[:j] if buf in s.writes]
        assert made, "a donated buffer is written before the loop that reuses it"
        assert not isinstance(made[0], EvalStep)  # a new array every call: not kept scratch


def updates(x, v):
    y = np.exp(x)
    y[[1, 3, 5]] = v
    z = np.sin(y) * 2
    z[[0, 2]] += v[:2]
    return np.sum(z * y)


def shifted(x, v):
    y = np.zeros_like(x)
    y[[0, 2, 4]] = v  # a scatter: the program's own fresh array
    return np.sum(np.roll(y, 1) * y + y)


def read_again(x, v):
    y = x * 1.0
    y[[0, 2, 4]] = v
    a = np.exp(y)  # reads y where it is written: may take y's buffer, unless y is read later
    return np.sum(a * a) + np.sum(y[::2] ** 3)


PROGRAMS = [updates, shifted, read_again]


@pytest.mark.parametrize("fun", PROGRAMS, ids=lambda f: f.__name__)
def test_donated_plans_keep_the_rules_and_the_numbers(fun):
    x, v = np.linspace(0.1, 1.0, 12), np.array([0.5, -0.25, 2.0])
    x0, v0 = x.copy(), v.copy()
    vg = tg.value_and_grad(fun, argnums=(0, 1))
    check_rules(cpu_plan(vg, x, v))
    value, grads = tg.value_and_grad(fun, argnums=(0, 1), backend="cpu")(x, v)
    want_value, want_grads = tg.value_and_grad(fun, argnums=(0, 1), backend="numpy")(x, v)
    np.testing.assert_allclose(value, want_value, rtol=1e-13)
    for got, want in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(x, x0)  # the user's arrays are never written
    np.testing.assert_array_equal(v, v0)


def test_an_update_writes_over_the_scatter_it_reads():
    x, v = np.linspace(0.1, 1.0, 12), np.array([0.5, -0.25, 2.0])
    plan = cpu_plan(tg.value_and_grad(updates, argnums=(0, 1)), x, v)
    undonated = fusion.plan(plan.graph, codegen_cpu.supports, computed_identity=True)
    assert donated_loops(plan)
    assert len(plan.buffers) < len(undonated.buffers)
    # the donated plan computes what the plan without donation computes
    for got, want in zip(
        fusion.evaluate(plan, [x, v]), fusion.evaluate(undonated, [x, v]), strict=True
    ):
        np.testing.assert_array_equal(got, want)


def test_a_shifted_read_keeps_its_own_buffer():
    x, v = np.linspace(0.1, 1.0, 12), np.array([0.5, -0.25, 2.0])
    plan = cpu_plan(tg.jit(shifted), x, v)
    # the one loop reads the scatter's result at i and at i - 1 (np.roll): never written over
    (loop,) = plan.loops
    assert not donated_loops(plan)
    assert {op.index for op in loop.ops if isinstance(op, Load) and op.buffer.role == "temp"} != {
        fusion.identity_index(1)
    }


def _toy_plan(later_reader: bool, shifted_load: bool = False, evaluated: bool = False):
    """k0: D = exp(x) (or eval D = gather(...)); k1: O = D + 1 (+ a later loop k2 reading D)."""
    from tracegrad import ir
    from tracegrad import primitives as P

    builder = ir.Builder()
    with ir.building(builder):
        x = builder.new_input((4,), np.dtype(np.float64))
        d = P.gather(x, P.const(np.array([3, 2, 1, 0])), 0)
        e = P.unary(P.exp_p, x)
    graph = builder.graph([d, e])
    gather_node, exp_node = graph.nodes[-2], graph.nodes[-1]
    f64 = np.dtype(np.float64)
    a = fusion.Buffer("a0", (4,), f64, "input", input_index=0)
    k = fusion.Buffer("k0", (4,), np.dtype(np.int64), "const", value=np.array([3, 2, 1, 0]))
    dbuf = fusion.Buffer("t1", (4,), f64, "temp")
    obuf = fusion.Buffer("t2", (4,), f64, "temp")
    rbuf = fusion.Buffer("r3", (4,), f64, "output")
    own = fusion.identity_index(1)
    read_d = fusion.Index("i0", 1, 1) if shifted_load else own[0]
    if evaluated:
        first = EvalStep(dbuf, gather_node, [a, k])
    else:
        ops = [Load("v0", a, own, 0), fusion.Compute("v1", exp_node, ("v0",), 1)]
        first = FusedLoop("k0", (4,), ops, [fusion.Store("v1", dbuf, own)], [])
    steps = [
        first,
        FusedLoop(
            "k1", (4,), [Load("v0", dbuf, (read_d,), 0)], [fusion.Store("v0", obuf, own)], []
        ),
    ]
    last_ops = [Load("v1", obuf, own, 0)] + ([Load("v0", dbuf, own, 0)] if later_reader else [])
    steps.append(FusedLoop("k2", (4,), last_ops, [fusion.Store("v1", rbuf, own)], []))
    return fusion.Plan(graph, [a, k, dbuf, obuf, rbuf], [a], [rbuf], steps)


def test_donation_on_a_hand_made_plan():
    plan = _toy_plan(later_reader=False)
    donated = donation.donate(plan)
    assert donated.steps[1].stores[0].buffer is plan.buffers[2]  # O written over D
    assert len(donated.buffers) == len(plan.buffers) - 1
    assert donated.steps[2].ops[0].buffer is plan.buffers[2]  # the reader follows the rename
    # D read again by a later step, read at another index than the one written, or a new array
    # every call (an evaluation's result): kept apart
    for kept in (
        _toy_plan(later_reader=True),
        _toy_plan(later_reader=False, shifted_load=True),
        _toy_plan(later_reader=False, evaluated=True),
    ):
        assert donation.donate(kept).steps[1].stores[0].buffer.name == "t2"


@pytest.mark.parametrize("fun", PROGRAMS, ids=lambda f: f.__name__)
def test_a_donated_plan_computes_what_the_plan_without_donation_computes(fun):
    # fusion.evaluate writes each store into the array already held under its buffer: a value
    # written over a buffer that a later step still reads shows here as a wrong number
    x, v = np.linspace(0.1, 1.0, 12), np.array([0.5, -0.25, 2.0])
    for transformed in (tg.jit(fun), tg.value_and_grad(fun, argnums=(0, 1))):
        plan = cpu_plan(transformed, x, v)
        undonated = fusion.plan(plan.graph, codegen_cpu.supports, computed_identity=True)
        for got, want in zip(
            fusion.evaluate(plan, [x, v]), fusion.evaluate(undonated, [x, v]), strict=True
        ):
            np.testing.assert_array_equal(got, want)


def test_a_large_donated_update_runs_in_parallel_chunks_and_from_threads():
    rng = np.random.default_rng(0)
    n = 300_000
    x = rng.normal(size=n)
    idx = rng.choice(n, 1_000, replace=False)

    def big(x):
        y = np.exp(x * 0.1)
        y[idx] = 0.0
        y = np.sin(y) + y
        return np.sum(y * y)

    plan = cpu_plan(tg.grad(big), x)
    check_rules(plan)
    want = tg.grad(big, backend="numpy")(x)
    fun = tg.grad(big, backend="cpu")
    results = [None] * 4

    def work(k):
        results[k] = fun(x)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got in results:
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
