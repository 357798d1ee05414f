"""Scatters in place (tracegrad.cpu.scatters): a sparse scatter-add writes into zeros the program
keeps, and the elementwise loops that read it skip the zeros and fix up the written positions.

Every program is checked against the NumPy interpreter and against the same cpu program built
without the pass (which must give the same gradients, bit for bit), and a plan against
fusion.evaluate of the plan without the pass."""

import threading

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import codegen_cpu, fusion, passes
from tracegrad.cpu import scatters
from tracegrad.fusion import EvalStep, FusedLoop, Load

N = 2_000  # elements of the updated arrays
M = 24  # written positions: N >= scatters.MIN_SPARSITY * M, so the pass applies


def cpu_plan(fun, *args):
    graph = passes.optimize(tg.make_ir(fun, optimize=False)(*args))
    return codegen_cpu.build(graph, load=False).plan


def without_pass(monkeypatch, transform, fun, *args):
    """`transform(fun, backend="cpu")` compiled with the pass switched off."""
    with monkeypatch.context() as m:
        m.setattr(scatters, "scatter_in_place", lambda plan: plan)
        compiled = transform(lambda *a: fun(*a), backend="cpu")
        out = compiled(*args)
    return out


def data(shape=(N,), seed=0, duplicates=False, negative=False):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape)
    size = shape[0]
    if duplicates:
        idx = rng.integers(0, size, M)
        idx[M // 2 :] = idx[: M - M // 2]  # every position written twice, in another order
        idx[M // 2 :] = idx[M // 2 :][::-1]
    else:
        idx = rng.choice(size, M, replace=False)
    if negative:
        idx = idx - size * (rng.random(M) < 0.5)  # about half of them counted from the end
    idx2 = rng.choice(size, M, replace=False)
    v = rng.normal(size=M)
    return x, v, idx.astype(np.int64), idx2.astype(np.int64)


def updates(x, v, idx, idx2):
    y = np.exp(x * 0.5)
    y[idx] = v
    z = np.sin(y) * 2.0
    z[idx2] += v
    return np.sum(z * y)


def rows(x, v, idx, idx2):
    y = np.tanh(x) * 1.5  # (N // 8, 8): y[idx] = v writes whole rows
    y[idx] = v[:, None]
    y[idx2, 3] += v
    return np.sum(np.cos(y) * x)


def masked(x, v, idx, idx2):
    y = np.exp(x * 0.25)
    y[idx] = v
    y[x > 0.5] += 1.0  # a traced mask: a select, around the scatter's result
    z = np.where(y > 1.0, y * y, -y)
    z[idx2] = z[idx2] * 3.0
    return np.sum(z)


def live(x, v, idx, idx2):
    y0 = np.exp(x)
    y = y0 * 1.0
    y[idx] = v
    return np.sum(np.sin(y) * y0) + np.sum(y0 * y0)  # y0 is still read after the write


def check(monkeypatch, fun, args, argnums=(0, 1)):
    saved = [np.array(a, copy=True) for a in args]
    transform = lambda f, backend: tg.value_and_grad(f, argnums=argnums, backend=backend)
    value, grads = transform(fun, "cpu")(*args)
    want_value, want_grads = transform(fun, "numpy")(*args)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    for got, want in zip(grads, want_grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-13)
    # the same program without the pass: the same arrays, bit for bit (the sum's last bits
    # depend on where its operands lie in memory: a vectorised sum peels to an aligned start)
    plain_value, plain_grads = without_pass(monkeypatch, transform, fun, *args)
    np.testing.assert_allclose(value, plain_value, rtol=1e-14)
    for got, plain in zip(grads, plain_grads, strict=True):
        np.testing.assert_array_equal(got, plain)
    for a, b in zip(args, saved, strict=True):  # the user's arrays are never written
        np.testing.assert_array_equal(a, b)
    return value, grads


def scatter_steps(plan):
    return [s for s in plan.steps if isinstance(s, scatters.ScatterStep)]


@pytest.mark.parametrize(
    "duplicates, negative", [(False, False), (True, False), (False, True), (True, True)]
)
def test_updates_give_the_interpreter_numbers(monkeypatch, duplicates, negative):
    args = data(duplicates=duplicates, negative=negative)
    check(monkeypatch, updates, args)


def test_the_in_place_path_is_taken(monkeypatch):
    args = data()
    plan = cpu_plan(tg.value_and_grad(updates, argnums=(0, 1)), *args)
    scattered = {id(s.out) for s in scatter_steps(plan)}
    assert len(scattered) == 5  # two writes of y[idx] = v, two of z[idx2] += v, one cotangent
    big = [s for s in plan.loops if s.shape == (N,)]
    fixes = [s for s in plan.loops if s.name.endswith("f")]
    assert fixes and all(s.shape[0] < N // scatters.MIN_SPARSITY for s in fixes)
    # the split loops read no scattered buffer: their loads were zeros
    split = [s for s in big if any(f.name == s.name + "f" for f in fixes)]
    assert split  # exp and sin: split; the cotangent loop reads too many arrays to gather
    for loop in split:
        assert not any(isinstance(op, Load) and id(op.buffer) in scattered for op in loop.ops)
    whole = [s for s in big if s not in split and not s.reductions]
    assert any(isinstance(op, Load) and id(op.buffer) in scattered for s in whole for op in s.ops)
    # every scattered buffer is reset after the last step that reads it
    for j, step in enumerate(plan.steps):
        if isinstance(step, scatters.ResetStep):
            later = plan.steps[j + 1 :]
            assert not any(step.out in s.reads for s in later)
            assert any(step.out in s.reads for s in plan.steps[:j])
    text = tg.make_kernels(tg.value_and_grad(updates, argnums=(0, 1)), backend="cpu")(*args)
    assert "in place" in text and "_scatter_into(" in text


def test_the_split_plan_computes_what_the_plan_without_the_pass_computes(monkeypatch):
    args = data(duplicates=True, negative=True)
    plan = cpu_plan(tg.value_and_grad(updates, argnums=(0, 1)), *args)
    with monkeypatch.context() as m:
        m.setattr(scatters, "scatter_in_place", lambda p: p)
        plain = cpu_plan(tg.value_and_grad(updates, argnums=(0, 1)), *args)
    assert scatter_steps(plan) and not scatter_steps(plain)
    got, want = fusion.evaluate(plan, list(args)), fusion.evaluate(plain, list(args))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


def test_two_dimensional_rows_and_elements(monkeypatch):
    x, v, idx, idx2 = data(shape=(N // 8, 8), seed=1)
    idx, idx2 = idx[:M] % (N // 8), idx2[:M] % (N // 8)
    idx2[: M // 2] = np.random.default_rng(2).choice(N // 8, M // 2, replace=False)
    check(monkeypatch, rows, (x, v, idx, idx2))


def test_masks_around_scatters(monkeypatch):
    check(monkeypatch, masked, data(seed=3, duplicates=True))


def test_a_live_operand_is_not_written_over(monkeypatch):
    args = data(seed=4)
    check(monkeypatch, live, args)
    plan = cpu_plan(tg.value_and_grad(live, argnums=(0, 1)), *args)
    assert scatter_steps(plan)
    # the loop that makes exp(x) stores it where later steps read it; no later loop stores into
    # that buffer before its last read
    for j, step in enumerate(plan.steps):
        if not isinstance(step, FusedLoop):
            continue
        for st in step.stores:
            later_reads = [k for k, s in enumerate(plan.steps) if k > j and st.buffer in s.reads]
            if not later_reads:
                continue
            between = plan.steps[j + 1 : max(later_reads)]
            writers = [s for s in between if st.buffer in s.writes]
            # only a fix-up's put writes into a stored buffer, at the positions it fixes
            assert all(isinstance(s, scatters.PutStep) for s in writers)


def test_repeated_concurrent_and_failed_calls_start_from_zeros(monkeypatch):
    args = data(seed=5, duplicates=True)
    want = tg.value_and_grad(updates, argnums=(0, 1), backend="numpy")(*args)
    calls = {"n": 0}
    real = scatters.put_at

    def fails_once(*a):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("stopped after the scatters wrote")
        return real(*a)

    monkeypatch.setattr(scatters, "put_at", fails_once)
    fun = tg.value_and_grad(lambda *a: updates(*a), argnums=(0, 1), backend="cpu")
    with pytest.raises(RuntimeError, match="stopped"):
        fun(*args)
    results = [None] * 4

    def work(k):
        results[k] = fun(*args)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for value, grads in results + [fun(*args), fun(*args)]:
        np.testing.assert_allclose(value, want[0], rtol=1e-12)
        for got, w in zip(grads, want[1], strict=True):
            np.testing.assert_allclose(got, w, rtol=1e-11, atol=1e-13)


def test_an_index_out_of_range_raises_and_leaves_zeros(monkeypatch):
    x, _, idx, _ = data(seed=6)

    def grad_of_gather(x, idx):
        return np.sum(np.sin(x) * 2.0) + np.sum(np.exp(x)[idx] ** 2)  # its cotangent: a scatter

    fun = tg.value_and_grad(grad_of_gather, backend="cpu")
    plan = cpu_plan(tg.value_and_grad(grad_of_gather), x, idx)
    assert scatter_steps(plan)
    bad = idx.copy()
    bad[3] = N + 5
    with pytest.raises(IndexError):
        fun(x, bad)
    want = tg.value_and_grad(grad_of_gather, backend="numpy")(x, idx)
    got = fun(x, idx)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-11, atol=1e-13)


def test_dense_or_other_dtype_scatters_keep_the_plain_step(monkeypatch):
    x, v, idx, idx2 = data(seed=7)

    def dense(x, v, idx):  # as many writes as elements / 4: not sparse enough
        y = np.exp(x)
        y[np.arange(0, N, 4)] = 0.5
        return np.sum(np.sin(y))

    plan = cpu_plan(tg.value_and_grad(dense), x, v, idx)
    assert not scatter_steps(plan)
    check(monkeypatch, dense, (x, v, idx), argnums=(0,))
    x32, v32 = x.astype(np.float32), v.astype(np.float32)
    plan = cpu_plan(tg.value_and_grad(updates, argnums=(0, 1)), x32, v32, idx, idx2)
    # float32 values sum in float64 and round once: their scatters keep the plain step; the
    # written-position flags are float64 and go in place
    assert all(np.dtype(s.v.dtype) == np.float64 for s in scatter_steps(plan))
    plain = [s for s in plan.steps if isinstance(s, EvalStep) and s.node.prim.name == "scatter_add"]
    assert any(np.dtype(s.out.dtype) == np.float32 and s.out.shape == (N,) for s in plain)
    got = tg.value_and_grad(updates, argnums=(0, 1), backend="cpu")(x32, v32, idx, idx2)
    want = tg.value_and_grad(updates, argnums=(0, 1), backend="numpy")(x32, v32, idx, idx2)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for g, w in zip(got[1], want[1], strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_a_loops_own_index_is_unsigned_and_shifted_ones_keep_their_sign():
    # kernels index with the loop's own variable as np.uint64 (no wrap-around select, so the
    # loop vectorises); an index with an offset or a stride keeps its sign
    def shifted(x):
        return np.sum(np.sin(x[1:]) * x[:-1]) + np.sum(np.cos(x[::-1]) * x)

    x = np.linspace(-2.0, 3.0, 301)
    text = tg.make_kernels(tg.grad(shifted), backend="cpu")(x)
    lines = text.splitlines()
    assert any("[np.uint64(i0)] = " in line for line in lines)  # the gradient's store
    assert any("[-i0 + o" in line for line in lines)  # the reversed read: signed, as before
    assert not any("np.uint64(-" in line or "np.uint64(i0 " in line for line in lines)
    got = tg.grad(shifted, backend="cpu")(x)
    want = tg.grad(shifted, backend="numpy")(x)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    h = 1e-6
    e = np.zeros_like(x)
    e[7] = h
    fd = (shifted(x + e) - shifted(x - e)) / (2 * h)  # central difference, float64
    np.testing.assert_allclose(got[7], fd, rtol=1e-6)
