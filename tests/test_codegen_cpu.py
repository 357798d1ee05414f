"""The cpu backend's code generator: the source it writes, how kernels are shared across shapes,
buffers across calls, math functions, float32, parallel loops, and the fast cached call."""

from __future__ import annotations

import collections

import threading

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.runtime import backends
from tracegrad import codegen_cpu, interpreter, ir, passes
from tracegrad.fusion import render
from tracegrad.cpu import kernels as cpu_kernels
from tracegrad.cpu.llvm import kernels as llvm_kernels
from tracegrad.cpu import program as cpu_program
from tracegrad import primitives as P


def w1(x):
    return np.sum(np.sin(x) * np.exp(-x * x) + np.tanh(x) * x**3)


def compile_cpu(fun, *args):
    graph = passes.optimize(tg.make_ir(fun, optimize=False)(*args))
    return graph, backends.get_backend("cpu").compile(graph)


def modules_of(program) -> list:
    return [call.module for call in program.calls.values()]


def test_source_names_ir_values_and_user_lines():
    text = tg.make_kernels(tg.value_and_grad(w1))(np.ones(5))
    assert "def kernel(b0, b1, b2, I, p0, first, last, finish):" in text
    assert "# %2 = neg %0" in text and "test_codegen_cpu.py:" in text  # node, values, user line
    assert "= _vm.sincos_f64(v0)" in text  # sin and cos of one value in one call
    assert "grad test_codegen_cpu.py:" in text  # adjoint nodes say where they come from
    assert (
        "for c in range(first, last):" in text and "if finish:" in text and "# ---- driver" in text
    )
    assert "iteration space [5] (sizes are arguments)" in text
    compile(text.split("# ---- driver")[0], "<kernels>", "exec")  # valid Python


def test_a_kernel_without_partial_results_computes_its_chunks_as_one_range():
    # lower_cpu.ONE_RANGE: no loop over the chunks, whatever range of them a call asks for
    x = np.linspace(-2.0, 2.0, 11)
    text = tg.make_kernels(tg.grad(w1))(x)
    assert "for c in range(" not in text and "lo = first * n0 // nch" in text
    graph, program = compile_cpu(tg.grad(w1), x)
    (call,) = program.calls.values()
    want = interpreter.evaluate(graph, [x])[0]
    ints = call.ints.copy()
    nch = ints[call.source.int_slots["nch"]] = 4
    for first, last in [(0, 4), (1, 3), (2, 3), (3, 4), (2, 2)]:
        out = np.full_like(x, np.nan)
        with llvm_kernels.numba_fallback():  # another chunk count: a native kernel refuses it
            call.module.kernel(x, out, ints, first, last, 1)
        rows = slice(first * x.size // nch, last * x.size // nch)
        np.testing.assert_allclose(out[rows], want[rows], rtol=1e-13)
        assert np.isnan(np.delete(out, np.arange(x.size)[rows])).all()  # no other row written


def test_a_chunk_loop_calls_its_rows_loop_as_a_function_of_its_own(monkeypatch, numba_compiler):
    # a one-axis kernel with partial results: the loop over a chunk's rows is outlined
    x = np.linspace(-2.0, 2.0, 9)
    text = tg.make_kernels(tg.value_and_grad(w1))(x)
    assert "def _row0(lo, hi, " in text and "    for i0 in range(lo, hi):" in text
    assert "        s0, = _row0(lo, hi, " in text and "        p0[c] = s0" in text
    monkeypatch.setattr(cpu_program, "PARALLEL_WORK", 0)
    monkeypatch.setattr(cpu_program, "_threads", lambda: 3)  # chunks and partial results
    graph, program = compile_cpu(tg.value_and_grad(w1), x)
    assert any(call.parallel for call in program.calls.values())
    for got, want in zip(program([x]), interpreter.evaluate(graph, [x]), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-13)


def test_math_calls_go_through_one_renderer(monkeypatch):
    assert codegen_cpu.render_math("sin", np.float64, "vector") == "_vm.sin_f64"
    assert codegen_cpu.render_math("asin", np.float32, "vector") == "_vm.arcsin_f32"
    assert codegen_cpu.render_math("sin", np.float64, "libm") == "math.sin"
    assert codegen_cpu.render_math("sqrt", np.float64, "vector") == "math.sqrt"  # not in vmath
    monkeypatch.setattr(render, "vmath_module", lambda: None)  # vmath missing or broken
    assert codegen_cpu.render_math("sin", np.float64, "vector") == "math.sin"


def test_libm_mode_is_part_of_the_kernel_and_agrees(monkeypatch):
    x = np.linspace(-2, 2, 11)
    vector = tg.make_kernels(tg.grad(w1))(x)
    monkeypatch.setenv("TRACEGRAD_MATH", "libm")
    libm = tg.make_kernels(tg.grad(w1))(x)
    assert "_vm.sincos_f64" in vector and "math.sin(" not in vector
    assert "math.sin(" in libm and "_vm." not in libm and "math mode libm" in libm
    graph, program = compile_cpu(tg.grad(w1), x)
    np.testing.assert_allclose(program([x])[0], interpreter.evaluate(graph, [x])[0], rtol=1e-13)


def test_a_new_shape_reuses_the_compiled_kernels(numba_compiler):
    # (Numba's kernels take their sizes as arguments; native kernels have them written in and
    # compile again for a new shape, in milliseconds: tests/test_llvm_kernels.py)
    f = tg.value_and_grad(w1, backend="cpu")
    _, small = compile_cpu(f, np.ones(7))
    _, large = compile_cpu(f, np.ones(1000))
    assert modules_of(small) == modules_of(large)
    g = tg.grad(lambda x, y: np.sum(x[1:, :] * y[None, :] ** 2 / x.shape[0]), backend="cpu")
    a = compile_cpu(g, np.ones((4, 3)), np.ones(3))[1]
    b = compile_cpu(g, np.ones((9, 2)), np.ones(2))[1]
    assert modules_of(a) == modules_of(b)  # offsets and 1/n are run-time arguments


def test_float32_stays_float32():
    x = np.linspace(-1, 1, 9, dtype=np.float32)
    text = tg.make_kernels(tg.grad(lambda x: np.sum(np.tanh(x) * 3.0 + x / 7.0)))(x)
    assert "_vm.tanh_f32" in text and "np.float32(3.0)" in text and "np.float32(F[0])" in text
    g = tg.grad(lambda x: np.sum(np.tanh(x) * 3.0 + x**-2), backend="cpu")(x)
    assert g.dtype == np.float32
    expected = tg.grad(lambda x: np.sum(np.tanh(x) * 3.0 + x**-2), backend="numpy")(x)
    np.testing.assert_allclose(g, expected, rtol=1e-5)


def test_results_are_fresh_and_scratch_is_reused():
    f = tg.jit(lambda x, w: (np.tanh(x @ w) @ w.T).sum(axis=1), backend="cpu")
    x, w = np.ones((3, 4)), np.full((4, 4), 0.1)
    first = f(x, w)
    kept = first.copy()
    second = f(2 * x, w)
    np.testing.assert_array_equal(first, kept)  # the second call did not write into the first
    assert first is not second and not np.shares_memory(first, second)
    np.testing.assert_allclose(second, tg.jit(f.fun, backend="numpy")(2 * x, w), rtol=1e-12)


def test_results_of_a_gather_are_handed_over_without_a_copy_and_stay_fresh():
    """A gather's result is a new array on every call (its `fresh_result` facet, as a
    scatter-add's): returned (through a reshape) without a copy, and still never shared with
    another call's result, an input or another output (two outputs of one gather are copied)."""
    idx = np.array([0, 2, 2, 3, 1, 3])

    def one(x):
        return x[idx].reshape(2, 3)  # a gather: a new array of its own (np.take)

    def two(x):
        y = x[idx]
        return y, y.reshape(2, 3)

    x = np.arange(1.0, 5.0)
    assert cpu_program.build(tg.make_ir(tg.jit(one))(x)).fresh_outputs == (True,)
    assert cpu_program.build(tg.make_ir(tg.jit(two))(x)).fresh_outputs == (False, False)
    for fun in (one, two):
        f = tg.jit(fun, backend="cpu")
        first = f(x)
        firsts = first if isinstance(first, tuple) else (first,)
        kept = [a.copy() for a in firsts]
        second = f(2 * x)
        seconds = second if isinstance(second, tuple) else (second,)
        want = tg.jit(fun, backend="numpy")(2 * x)
        wants = want if isinstance(want, tuple) else (want,)
        for a, k, b, w in zip(firsts, kept, seconds, wants, strict=True):
            np.testing.assert_array_equal(a, k)  # the second call wrote nowhere into the first
            np.testing.assert_array_equal(b, w)
            assert not np.shares_memory(a, x) and not any(np.shares_memory(a, c) for c in seconds)
        if fun is two:
            assert not np.shares_memory(first[0], first[1])


def test_concurrent_calls_get_their_own_scratch():
    f = tg.jit(lambda x, w: np.tanh(x @ w) @ w, backend="cpu")
    w = np.full((8, 8), 0.05)
    xs = [np.full((16, 8), float(k)) for k in range(8)]
    expected = [tg.jit(f.fun, backend="numpy")(x, w) for x in xs]
    f(xs[0], w)
    results: dict[int, np.ndarray] = {}

    def work(k):
        for _ in range(30):
            results[k] = f(xs[k], w)
            np.testing.assert_allclose(results[k], expected[k], rtol=1e-12)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(8):
        np.testing.assert_allclose(results[k], expected[k], rtol=1e-12)


def test_parallel_loops_agree_with_serial_ones(monkeypatch):
    monkeypatch.setattr(cpu_program, "PARALLEL_WORK", 0)
    monkeypatch.setattr(cpu_program, "_threads", lambda: 3)  # several chunks even on one core

    def f(x):  # every reduction placement: all axes, a suffix, axis 0, a middle axis
        e = np.exp(np.sin(x))
        return (
            e.sum(),
            e.sum(axis=(1, 2)),
            e.max(axis=0),
            e.min(axis=1),
            np.prod(e, axis=(0, 2)),
            e * 2,
        )

    x = np.random.default_rng(0).uniform(-1, 1, size=(7, 3, 5))
    graph, program = compile_cpu(tg.jit(f), x)
    assert all(call.parallel for call in program.calls.values())
    for got, want in zip(program([x]), interpreter.evaluate(graph, [x]), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_non_contiguous_zero_d_and_empty_inputs():
    backend = "cpu"
    f = tg.jit(lambda x, s: (np.sin(x) * s + x.T.sum(axis=0), np.max(x, axis=1)), backend=backend)
    base = np.random.default_rng(1).standard_normal((6, 8))
    for x in (base[::2, 1::3], np.asfortranarray(base[:3, :3]), base[:0, :3][:, ::-1]):
        if x.shape[1] == 0 or x.shape[0] != x.shape[1]:
            x = x[:, : x.shape[0]] if x.shape[1] >= x.shape[0] else x
        if x.shape[0] != x.shape[1] or x.shape[1] == 0:
            continue
        got = f(x, np.float64(0.5))
        want = tg.jit(f.fun, backend="numpy")(x, np.float64(0.5))
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-12)
    empty = tg.jit(lambda x: (x.sum(axis=0), x * 2, np.sum(x)), backend=backend)(np.ones((0, 3)))
    np.testing.assert_array_equal(empty[0], np.zeros(3))
    assert empty[1].shape == (0, 3) and float(empty[2]) == 0.0


def test_nan_and_integer_semantics_match_numpy():
    backend = "cpu"
    x = np.array([1.0, np.nan, -2.0, 3.0])
    f = tg.jit(
        lambda x: (np.maximum(x, 0.0), np.minimum(0.0, x), np.max(x), np.min(x[::2])),
        backend=backend,
    )
    for got, want in zip(f(x), f.fun(x), strict=True):
        np.testing.assert_array_equal(got, want)
    i = np.array([2**31 - 1, 5, -7], dtype=np.int32)
    g = tg.jit(
        lambda i: (i + i, i * 3, i > 0, (i > 0).astype(np.float32), np.sum(i)), backend=backend
    )
    for got, want in zip(g(i), g.fun(i), strict=True):
        np.testing.assert_array_equal(got, want)  # (the IR keeps a sum of int32 in int32)


def test_unsupported_dtypes_fall_back_to_numpy():
    x = np.linspace(0, 1, 4, dtype=np.float16)
    got = tg.jit(lambda x: np.sin(x) * 2, backend="cpu")(x)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, np.sin(x) * 2, rtol=1e-3)


def test_dump_kernels(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEGRAD_DUMP_KERNELS", str(tmp_path))
    tg.grad(lambda x: np.sum(np.cos(x) ** 2), backend="cpu")(np.ones(4))
    (path,) = tmp_path.glob("program_*.py")
    assert "cos" in path.read_text() and "def kernel(" in path.read_text()


def test_the_cached_call_is_cheap_and_checked():
    g = tg.grad(lambda w, x, b: (w * x + b - 5.0) ** 2)
    assert float(g(2.0, 3.0, 1.0)) == 12.0
    assert g._fast_calls  # the next call takes the fast path
    assert float(g(1.0, 3.0, 1.0)) == -6.0
    assert float(g(np.float64(1.0), 3.0, 1.0)) == -6.0  # another signature: the full path
    tg.clear_programs()
    assert float(g(2.0, 3.0, 1.0)) == 12.0 and g.trace_count >= 2


def test_the_cached_call_takes_containers_of_arrays():
    """A network's parameters in a tuple, list or dict take the fast path too, keyed by the
    container's type, length, keys (in order) and each leaf's shape and dtype."""

    def loss(params, x):
        w, b = (params["w"], params["b"]) if isinstance(params, dict) else params
        return np.sum(np.tanh(x * w + b) ** 2)

    g = tg.value_and_grad(loss, backend="numpy")
    x = np.linspace(-1.0, 1.0, 5)
    for make in (tuple, list):
        params = make([np.array(0.5), np.array(0.25)])
        first = g(params, x)
        assert len(g._fast_calls) >= 1
        second = g(make([np.array(-0.5), 0.75]), x)  # a float leaf: another signature
        want = tg.value_and_grad(loss, backend="numpy").fun(make([-0.5, 0.75]), x)
        np.testing.assert_allclose(second[0], want, rtol=1e-12)
        assert type(first[1]) is make and type(second[1]) is make
    d = {"w": np.array(2.0), "b": np.array(-1.0)}
    value, grads = g(d, x)
    value2, grads2 = g({"b": np.array(-1.0), "w": np.array(2.0)}, x)  # keys in another order
    assert value == value2 and list(grads) == ["w", "b"] and list(grads2) == ["b", "w"]
    for k in d:
        assert grads[k] == grads2[k]
    calls = g.trace_count
    g(d, x)
    assert g.trace_count == calls  # the fast path: no new trace
    Pair = collections.namedtuple("Pair", "w b")
    value3, grads3 = g(Pair(np.array(2.0), np.array(-1.0)), x)  # not a plain tuple
    assert type(grads3) is Pair and value3 == value
    mixed = (np.array(2.0), np.array([-1.0, -1.0, -1.0, -1.0, -1.0]))  # another leaf shape
    np.testing.assert_allclose(g(mixed, x)[0], value, rtol=1e-12)


def test_compile_time_kernels_per_graph_are_few():
    _, program = compile_cpu(tg.value_and_grad(w1), np.ones(50))
    assert len(program.calls) == 1  # value and gradient: one kernel


def test_node_with_every_template_compiles():
    """Each elementwise primitive's template renders to code Numba accepts (float64 and float32)."""
    for dtype in (np.float64, np.float32):
        builder = ir.Builder()
        with ir.building(builder):
            x = builder.new_input((3,), dtype)
            y = builder.new_input((3,), dtype)
            outs = []
            for prim in P.PRIMITIVES.values():
                if prim.kind is not P.Kind.ELEMENTWISE or prim is P.convert_p:
                    continue
                if prim.operands == "bool":
                    args = [P.compare(P.gt_p, x, 0.0), P.compare(P.gt_p, y, 0.0)][
                        : 1 if prim.name == "not" else 2
                    ]
                elif prim.operands == "integer":
                    arity = max(int(c) for c in "012" if f"{{{c}}}" in prim.scalar) + 1
                    ints = [P.convert(P.mul(v, 100.0), np.int16) for v in (x, y)]
                    args = ints[:arity]
                elif prim is P.where_p:
                    args = [P.compare(P.gt_p, x, y), x, y]
                elif prim is P.integer_pow_p:
                    outs += [P.integer_pow(x, n) for n in (0, 2, 5, -1, -3)]
                    continue
                elif prim is P.named_p:
                    outs.append(P.emit(prim, x, name="x"))
                    continue
                else:
                    arity = (
                        max(int(c) for c in "012" if f"{{{c}}}" in prim.scalar) + 1
                        if isinstance(prim.scalar, str)
                        else 1
                    )
                    args = [x, y][:arity]
                outs.append(P.emit(prim, *args))
            outs.append(P.convert(x, np.int32))
            outs.append(P.convert(x, np.bool_))
        graph = builder.graph(outs)
        a = np.array([0.3, -0.7, 0.9], dtype)
        b = np.array([0.5, 0.2, -0.1], dtype)
        with np.errstate(all="ignore"):
            want = interpreter.evaluate(graph, [a, b])
        got = backends.get_backend("cpu").compile(passes.optimize(graph))([a, b])
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype
            np.testing.assert_allclose(
                g, w, rtol=1e-5 if dtype == np.float32 else 1e-13, equal_nan=True
            )


@pytest.mark.parametrize("n", [1, 2, 3])
def test_unslice_and_concatenate_at_the_edges(n):
    def f(x):
        y = np.concatenate([x[::-1], x[1:], np.sin(x[:1])])
        return np.sum(y * np.arange(y.size)) + np.sum(x[::2] ** 2)

    x = np.linspace(0.1, 0.9, n)
    got = tg.value_and_grad(f, backend="cpu")(x)
    want = tg.value_and_grad(f, backend="numpy")(x)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


def test_parallel_loops_work_in_a_forked_child(monkeypatch):
    import multiprocessing

    monkeypatch.setattr(cpu_program, "PARALLEL_WORK", 0)
    f = tg.jit(lambda x: np.sum(np.sin(x)), backend="cpu")
    x = np.linspace(0, 1, 1000)
    expected = float(np.sum(np.sin(x)))
    assert float(f(x)) == pytest.approx(expected)  # the parent's pool exists now
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        assert pool.apply(_sum_sin_in_child, (x,)) == pytest.approx(expected)


def _sum_sin_in_child(x):
    return float(tg.jit(lambda x: np.sum(np.sin(x)), backend="cpu")(x))


def test_baking_sizes_in_is_an_opt_in_specialisation():
    graph = passes.optimize(tg.make_ir(tg.grad(w1), optimize=False)(np.ones(6)))
    default = codegen_cpu.build(graph, load=False).source()
    baked = codegen_cpu.build(graph, load=False, bake_sizes=True)
    assert "n0 = I[0]" in default and "n0 = 6" in baked.source()
    baked = codegen_cpu.build(graph, bake_sizes=True)
    x = np.linspace(-1, 1, 6)
    np.testing.assert_allclose(baked([x])[0], interpreter.evaluate(graph, [x])[0], rtol=1e-13)


def test_changing_the_math_mode_recompiles_the_program(monkeypatch):
    f = tg.grad(lambda x: np.sum(np.sin(x)), backend="cpu")
    x = np.linspace(-1.0, 1.0, 5)
    np.testing.assert_allclose(f(x), np.cos(x), rtol=1e-14)
    before = f.trace_count
    monkeypatch.setenv("TRACEGRAD_MATH", "libm")
    np.testing.assert_allclose(f(x), np.cos(x), rtol=1e-14)
    assert f.trace_count == before + 1  # a new program, compiled for libm
    monkeypatch.delenv("TRACEGRAD_MATH")
    f(x)
    assert f.trace_count == before + 1  # the vector-mode program is still cached


# ---- the innermost loop of a loop nest as a function of its own (cpu/kernels.py, OUTLINE_MIN_ROW)
# (in the kernels Numba compiles: LLVM's own loop passes get native kernels' rows right)

ROW = cpu_kernels.OUTLINE_MIN_ROW + 2


def rows_of_math(x, b, y):
    return (
        np.tanh(x + b),  # elementwise, a broadcast operand
        np.sum(np.exp(-x * x), axis=1),  # a running sum along the row: returned by the function
        np.max(np.sin(x), axis=1),  # a running maximum
        np.sum(np.log1p(x * x), axis=0),  # a sum over axis 0: partial results per chunk
        np.sum(np.tanh(x) * b),  # a sum of everything: one scalar per chunk
        np.cumsum(np.exp(x * 0.1), axis=1),  # a running scan along the row
        np.sin(x[:, 1:]) * x[:, :-1],  # slices: offsets that the kernel reads from I
        np.tanh(y),  # three axes, float32: the loop over the last one
        np.sin(x[:, :20]),  # rows of 20: written inline
        x * 2.0 + b,  # no math call: written inline
    )


def _rows_args():
    rng = np.random.default_rng(5)
    x = rng.uniform(-2, 2, size=(5, ROW))
    return x, rng.uniform(-1, 1, size=ROW), rng.uniform(-3, 3, size=(2, 3, ROW)).astype(np.float32)


def test_wide_rows_of_math_are_outlined_and_narrow_or_plain_ones_are_not(numba_compiler):
    x, b, y = _rows_args()
    text = tg.make_kernels(rows_of_math, backend="cpu")(x, b, y)
    kernels = text.split("# ---- kernel ")[1:]
    outlined = [k for k in kernels if "def _row0(" in k]
    assert len(outlined) >= 4 and len(outlined) == len(kernels) - 1  # all but the rows of 20
    assert "# the loop over axis 2 as a function of its own (OUTLINE_MIN_ROW)" in text  # three axes
    assert "s0, s1, s3, = _row0(" in text  # running sums and a maximum come back
    assert "acc0, = _row0(" in text and "    return acc0," in text  # and a running scan
    narrow = tg.make_kernels(lambda x: np.sin(x[:, :20]), backend="cpu")(x)
    plain = tg.make_kernels(lambda x, b: x * 2.0 + b, backend="cpu")(x, b)
    assert "_row" not in narrow and "_row" not in plain


def test_rows_that_only_store_are_outlined_from_a_shorter_length(numba_compiler):
    rows = cpu_kernels.OUTLINE_MIN_STORING_ROW
    assert rows < cpu_kernels.OUTLINE_MIN_ROW
    x = np.random.default_rng(7).uniform(-2, 2, size=(3, rows))
    storing = tg.make_kernels(lambda x: np.tanh(x + 1.0), backend="cpu")(x)
    summing = tg.make_kernels(lambda x: np.sum(np.tanh(x), axis=1), backend="cpu")(x)
    shorter = tg.make_kernels(lambda x: np.tanh(x + 1.0), backend="cpu")(x[:, : rows - 1])
    assert "def _row0(" in storing and "    _row0(" in storing  # called for its stores alone
    assert "_row" not in summing and "_row" not in shorter


def test_outlined_rows_compute_what_the_inline_loops_compute(monkeypatch, numba_compiler):
    args = _rows_args()
    monkeypatch.setattr(cpu_program, "PARALLEL_WORK", 0)
    monkeypatch.setattr(cpu_program, "_threads", lambda: 3)  # chunks and partial results
    graph, outlined = compile_cpu(tg.jit(rows_of_math), *args)
    assert any("_row0" in src for src in (m.source.module for m in outlined.calls.values()))
    monkeypatch.setattr(cpu_kernels, "OUTLINE_MIN_ROW", 10**9)
    monkeypatch.setattr(cpu_kernels, "OUTLINE_MIN_STORING_ROW", 10**9)
    _, inline = compile_cpu(tg.jit(rows_of_math), *args)
    assert not any("_row0" in m.source.module for m in inline.calls.values())
    want = interpreter.evaluate(graph, list(args))
    for got, same, ref in zip(outlined(list(args)), inline(list(args)), want, strict=True):
        np.testing.assert_array_equal(got, same)  # the same arithmetic, bit for bit
        np.testing.assert_allclose(got, ref, rtol=2e-6 if got.dtype == np.float32 else 1e-13)


def test_gradients_through_outlined_rows_match_the_interpreter(numba_compiler):
    def loss(w, x):
        h = np.tanh(x @ w)  # rows of ROW
        return np.sum(np.log1p(h * h) * np.sin(x[:, :1] + h))

    rng = np.random.default_rng(6)
    w, x = rng.normal(size=(3, ROW)) / 2, rng.normal(size=(4, 3))
    text = tg.make_kernels(tg.value_and_grad(loss), backend="cpu")(w, x)
    assert "def _row0(" in text
    got = tg.value_and_grad(loss, backend="cpu")(w, x)
    want = tg.value_and_grad(loss, backend="numpy")(w, x)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-15)
