"""The cpu backend's two kernel compilers give the same numbers: kernels printed as LLVM IR and
compiled through llvmlite (`TRACEGRAD_CPU_COMPILER=llvm`, the default) against the same loop IR
printed as Python and compiled by Numba (`numba`), bitwise, on every dtype.

Also: the kernels are native (not all quietly handed to Numba), a call whose arrays are not the
layout a kernel was compiled for runs its Numba version with the same numbers, what the printer
cannot write goes to Numba, the object code is cached on disk (a damaged file is compiled
again), the compile log names each kernel, and a warm first call imports no Numba.
"""

from __future__ import annotations

import logging

import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg
from tracegrad import interpreter, passes
from tracegrad.cpu import program as cpu_program
from tracegrad.cpu.llvm import engine, scalars
from tracegrad.runtime import backends

from test_fuzz_backends import _inputs, build_graph, op_strategy, shape_strategy

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

COMPILERS = ("llvm", "numba")


def _compile(graph, compiler: str, monkeypatch):
    monkeypatch.setenv("TRACEGRAD_CPU_COMPILER", compiler)
    try:
        return backends.get_backend("cpu").compile(passes.optimize(graph))
    finally:
        monkeypatch.delenv("TRACEGRAD_CPU_COMPILER")


def _native_kernels(program) -> int:
    return sum(isinstance(c.module, cpu_program.NativeModule) for c in program.calls.values())


def _same_bits(got: np.ndarray, want: np.ndarray, what: str = "") -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if got.dtype.kind in "fc":
        # NaN payloads aside (NumPy itself does not promise them), every bit agrees
        nan = np.isnan(got)
        assert np.array_equal(nan, np.isnan(want)), what
        g, w = np.where(nan, 0, got), np.where(nan, 0, want)
        assert g.tobytes() == w.tobytes(), f"{what}: {got} != {want}"
    else:
        assert got.tobytes() == want.tobytes(), f"{what}: {got} != {want}"


def _jit_both(fun, args, monkeypatch):
    """`fun`'s results through both compilers (and plain NumPy's), each program's native kernel
    count."""
    results = {}
    for compiler in COMPILERS:
        monkeypatch.setenv("TRACEGRAD_CPU_COMPILER", compiler)
        results[compiler] = tg.jit(fun, backend="cpu")(*args)
    monkeypatch.delenv("TRACEGRAD_CPU_COMPILER")
    return results


# ----------------------------------------------------------------------------------------------
# Every elementwise function, every dtype, edge values

EDGE = {
    "f": [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 1.5, -2.5, 3.0, 1e-310, -1e-300, 1e300, -7.25,
          np.inf, -np.inf, np.nan, 2.0**52 + 1, 0.1],
    "i": [0, 1, -1, 2, -2, 3, 7, -7, 100, -128, 127, 2**31 - 1, -(2**31), 2**62, -(2**63),
          2**63 - 1, 5, -5],
    "u": [0, 1, 2, 3, 7, 100, 127, 128, 255, 254, 5, 6, 9, 10, 11, 12, 13, 200],
    "b": [True, False] * 9,
}  # fmt: skip

UNARY = [
    "negative",
    "positive",
    "absolute",
    "sign",
    "square",
    "sqrt",
    "cbrt",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "sin",
    "cos",
    "tan",
    "arcsin",
    "arccos",
    "arctan",
    "sinh",
    "cosh",
    "tanh",
    "arcsinh",
    "arccosh",
    "arctanh",
    "floor",
    "ceil",
    "trunc",
    "rint",
    "isnan",
    "isinf",
    "isfinite",
    "signbit",
    "logical_not",
    "invert",
    "reciprocal",
    "deg2rad",
    "rad2deg",
    "sinc",
    "fabs",
]
BINARY = [
    "add",
    "subtract",
    "multiply",
    "divide",
    "true_divide",
    "floor_divide",
    "remainder",
    "mod",
    "fmod",
    "power",
    "maximum",
    "minimum",
    "fmax",
    "fmin",
    "arctan2",
    "hypot",
    "copysign",
    "logaddexp",
    "logaddexp2",
    "heaviside",
    "greater",
    "greater_equal",
    "less",
    "less_equal",
    "equal",
    "not_equal",
    "logical_and",
    "logical_or",
    "logical_xor",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "left_shift",
    "right_shift",
]


def _values(dtype) -> np.ndarray:
    kind = np.dtype(dtype).kind
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.array(EDGE[kind], dtype=np.float64 if kind == "f" else None).astype(dtype)


def _applicable(names, args):
    """The functions NumPy and tracegrad compute on `args` (tracegrad refuses integer ** traced
    integer, for one)."""
    ok = []
    for name in names:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                getattr(np, name)(*args)
                tg.make_ir(lambda *a, name=name: getattr(np, name)(*a))(*args)
        except TypeError:
            continue
        ok.append(name)
    return ok


DTYPES = [np.float64, np.float32, np.int64, np.int32, np.uint8, np.bool_]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_elementwise_function_is_bitwise_equal_through_both_compilers(dtype, monkeypatch):
    x = _values(dtype)
    y = np.roll(x, 5)
    if dtype in (np.int64, np.int32, np.uint8):  # powers and shifts of 0-6 (NumPy's rules)
        y = (y.astype(np.int64) % 7).astype(dtype)
    unary = _applicable(UNARY, (x,))
    binary = _applicable(BINARY, (x, y))

    def everything(a, b):
        out = [getattr(np, name)(a) for name in unary]
        out += [getattr(np, name)(a, b) for name in binary]
        out.append(np.where(a > b, a, b))
        out.append(np.clip(a, b, a))
        out.append((a * 3).astype(np.float32))
        out.append(a.astype(np.int16) if np.dtype(dtype).kind != "f" else a.astype(np.float64))
        return tuple(out)

    results = _jit_both(everything, (x, y), monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        numpy_results = everything(x, y)
    names = [*unary, *binary, "where", "clip", "astype f32", "astype"]
    for name, llvm, numba, ref in zip(
        names, results["llvm"], results["numba"], numpy_results, strict=True
    ):
        if ref.dtype != np.float16:  # (tracegrad computes NumPy's float16 results in float64)
            assert llvm.dtype == ref.dtype, name  # NumPy's promotion
        _same_bits(llvm, numba, name)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.bool_])
def test_reductions_and_python_scalars_through_both_compilers(dtype, monkeypatch):
    x = np.resize(_values(dtype), (6, 9))
    if np.dtype(dtype).kind == "f":
        x = np.where(np.isfinite(x) & (np.abs(x) < 1e10), x, 0.5).astype(dtype)

    def reduce(a):
        return (
            np.sum(a, axis=0),
            np.sum(a * 2, axis=1),
            np.max(a, axis=1),
            np.min(a, axis=0),
            np.prod(a[:3] + 1, axis=0),
            np.any(a > 1, axis=1),
            np.all(a != 0, axis=0),
            np.argmax(a, axis=1),
            np.argmin(a, axis=0),
            a + True,
            a * 2 + 1.5,
            a // 3 if np.dtype(dtype).kind != "b" else a,
            np.mean(a, axis=0),
        )

    results = _jit_both(reduce, (x,), monkeypatch)
    for k, (llvm, numba) in enumerate(zip(results["llvm"], results["numba"], strict=True)):
        _same_bits(llvm, numba, f"result {k}")


# ----------------------------------------------------------------------------------------------
# Random programs (the fuzzer's grammar), values and gradients


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(
    shape=shape_strategy,
    code=st.integers(0, 63),
    ops=st.lists(op_strategy, min_size=2, max_size=6),
    dtype=st.sampled_from([np.float64, np.float32]),
    gradient=st.booleans(),
    layout=st.integers(0, 3),
    seed=st.integers(0, 1000),
)
def test_random_programs_are_bitwise_equal_through_both_compilers(
    shape, code, ops, dtype, gradient, layout, seed
):
    graph = build_graph(shape, code, ops, np.dtype(dtype), gradient)
    args = _inputs(graph, np.random.default_rng(seed), layout)
    mp = pytest.MonkeyPatch()
    try:
        llvm = _compile(graph, "llvm", mp)
        numba = _compile(graph, "numba", mp)
    finally:
        mp.undo()
    want = interpreter.evaluate(graph, args)
    for g, n, w in zip(llvm(args), numba(args), want, strict=True):
        _same_bits(g, n)
        assert g.shape == w.shape and g.dtype == w.dtype


def test_kernels_are_native_and_numbers_match_the_interpreter(monkeypatch):
    graph = build_graph(
        (3, 4), 5, [("unary", 0, 1, 0, 0), ("binary", 0, 1, 2, 0), ("reduce", 2, 3, 0, 1)],
        np.dtype(np.float64), gradient=True,
    )  # fmt: skip
    program = _compile(graph, "llvm", monkeypatch)
    assert _native_kernels(program) == len(program.calls) > 0
    assert _native_kernels(_compile(graph, "numba", monkeypatch)) == 0
    args = _inputs(graph, np.random.default_rng(0), 0)
    for g, w in zip(program(args), interpreter.evaluate(graph, args), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-13)


# ----------------------------------------------------------------------------------------------
# Fallbacks


def _unaligned(a: np.ndarray) -> np.ndarray:
    raw = np.empty(a.nbytes + 1, dtype=np.uint8)
    out = raw[1:].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def test_an_input_of_another_layout_is_copied_for_the_native_kernel(monkeypatch, caplog):
    """A strided or unaligned argument (or hidden input) is copied C-contiguous once per call:
    the same bits, and no kernel falls back to compiling its Numba version."""

    def f(a, b):
        return np.tanh(a) * b + np.exp(-a)

    monkeypatch.setenv("TRACEGRAD_CPU_COMPILER", "llvm")
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(5, 7)), rng.normal(size=(5, 7))
    fast = tg.jit(f, backend="cpu")
    want = fast(a, b)
    a_copy = a.copy()
    caplog.set_level(logging.INFO, logger="tracegrad")
    image = np.stack([a, b, a], axis=-1)  # one channel of an image: a strided view
    for ta, tb in [
        (np.asfortranarray(a), b),
        (a, b[:, ::-1][:, ::-1]),
        (a.T.copy().T, b),
        (image[:, :, 0], image[:, :, 1]),
        (_unaligned(a), b),
    ]:
        got = fast(ta, tb)
        _same_bits(got, want)
    assert not [r for r in caplog.records if "not the layout" in r.getMessage()]
    np.testing.assert_array_equal(a, a_copy)  # the user's arrays are not written


COMPLEX_UNARY = [
    "negative",
    "positive",
    "conjugate",
    "absolute",
    "square",
    "reciprocal",
    "real",
    "imag",
]
COMPLEX_BINARY = ["add", "subtract", "multiply", "divide", "equal", "not_equal"]


def _complex_values(dtype) -> tuple[np.ndarray, np.ndarray]:
    parts = np.array(EDGE["f"])
    x = (parts + 1j * np.roll(parts, 7)).astype(dtype)
    return x, np.roll(x, 5) * (1 - 0.5j)


@pytest.mark.parametrize("dtype", [np.complex128, np.complex64], ids=lambda d: np.dtype(d).name)
def test_complex_kernels_are_native_and_bitwise_equal_through_both_compilers(dtype, monkeypatch):
    """Complex values are {re, im} pairs in the LLVM printer: arithmetic, the templates' spelled-out
    division, conjugates, moduli (hypot), comparisons, reductions and mixed dtypes give Numba's
    bits, at edge values (infinities, nans, signed zeros, overflowing products)."""
    x, y = _complex_values(dtype)
    real = np.abs(np.array(EDGE["f"])).astype(np.float32)

    def everything(a, b, r):
        out = [getattr(np, name)(a) for name in COMPLEX_UNARY]
        out += [getattr(np, name)(a, b) for name in COMPLEX_BINARY]
        out += [
            np.where(a.real > b.real, a, b),
            a * 2.5,  # a float64 operand: complex128
            a * r,  # a float32 operand
            a + 3,
            a * 1j + b,
            a.real + 1j * b.imag,
            np.sum(a * b),
            np.prod(a[:4] + 1),
            np.mean(a[:6]),
            np.vdot(a, b),
            a.astype(np.complex128) / 3.0,
            (a**3) * (b**-1),
        ]
        return tuple(out)

    graph = tg.make_ir(everything)(x, y, real)
    programs = {c: _compile(graph, c, monkeypatch) for c in COMPILERS}
    assert _native_kernels(programs["llvm"]) == len(programs["llvm"].calls) > 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        llvm, numba = (programs[c]([x, y, real]) for c in COMPILERS)
        want = everything(x, y, real)
    for k, (got, ref, expected) in enumerate(zip(llvm, numba, want, strict=True)):
        assert got.dtype == np.asarray(expected).dtype, k  # NumPy's promotion
        _same_bits(got, ref, f"result {k}")


def test_gradients_of_complex_programs_are_native_and_bitwise_equal(monkeypatch):
    rng = np.random.default_rng(3)
    z = rng.normal(size=(4, 5)) + 1j * rng.normal(size=(4, 5))
    w = rng.normal(size=(5,)) - 0.5j

    def loss(z, w):
        u = z * w + np.conj(z) / (w + 2.0)
        return np.sum(np.abs(u) ** 2) + np.sum(u.real * u.imag)

    graph = tg.make_ir(tg.grad(loss, argnums=(0, 1)))(z, w)
    programs = {c: _compile(graph, c, monkeypatch) for c in COMPILERS}
    assert _native_kernels(programs["llvm"]) == len(programs["llvm"].calls) > 0
    got, ref = (programs[c]([z, w]) for c in COMPILERS)
    for g, r in zip(got, ref, strict=True):
        _same_bits(g, r)
    for g, r in zip(got, interpreter.evaluate(graph, [z, w]), strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-12)


CMATH_NATIVE = ["exp", "log", "log10", "sqrt", "sin", "cos", "tan", "sinh", "cosh", "tanh"]
CMATH_NATIVE += ["exp2", "expm1", "log2", "log1p"]  # the templates' compositions of them


def _complex_edges() -> np.ndarray:
    parts = [0.0, -0.0, 0.5, -1.5, 3.0, 1e-310, 1e300, -1e300, 40.0, -800.0, np.inf, -np.inf]
    parts += [np.nan, 1.7e308, 2.0**-1074, 0.1]
    re, im = np.meshgrid(parts, parts)
    return _pairs(re.ravel(), im.ravel())


def _pairs(re, im) -> np.ndarray:
    out = np.empty(re.shape, np.complex128)
    out.real, out.imag = re, im  # not re + 1j * im: inf * 1j is nan + inf j
    return out


def test_complex_math_functions_are_native_and_bitwise_equal_to_numbas(monkeypatch):
    """cmath.exp, log, log10, sqrt, the trigonometric and hyperbolic functions on complex128 are
    printed as Numba compiles them (cmath_ir.py): the same bits at every pair of edge parts."""
    z = _complex_edges()

    def everything(z):
        return tuple(getattr(np, name)(z) for name in CMATH_NATIVE)

    graph = tg.make_ir(everything)(z)
    programs = {c: _compile(graph, c, monkeypatch) for c in COMPILERS}
    assert _native_kernels(programs["llvm"]) == len(programs["llvm"].calls) > 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        llvm, numba = (programs[c]([z]) for c in COMPILERS)
        finite = np.isfinite(z) & (np.abs(z) < 30)
        for name, got, ref in zip(CMATH_NATIVE, llvm, numba, strict=True):
            _same_bits(got, ref, name)
            want = getattr(np, name)(z[finite])
            np.testing.assert_allclose(got[finite], want, rtol=1e-13, atol=1e-300, err_msg=name)


def test_the_other_complex_math_functions_go_to_numba(monkeypatch):
    # the inverse functions, and complex64 (whose intermediate float64 widening Numba's typing
    # decides), are compiled by Numba: same numbers, not native
    z = np.array([1 + 2j, -0.5j, 3.0])
    for f, arg in [(np.arcsin, z), (np.arctanh, z), (np.exp, z.astype(np.complex64))]:
        graph = tg.make_ir(lambda z, f=f: f(z) * z + 1j)(arg)
        program = _compile(graph, "llvm", monkeypatch)
        assert _native_kernels(program) < len(program.calls), f
        want = f(arg) * arg + 1j
        np.testing.assert_allclose(
            program([arg])[0], want, rtol=1e-6 if arg.dtype == np.complex64 else 1e-14
        )


def test_what_the_printer_cannot_write_raises_unsupported():
    with pytest.raises(scalars.Unsupported):
        scalars.llvm_type(np.dtype(np.float16))


def test_make_kernels_shows_the_llvm_ir():
    def f(x):
        return np.sum(np.sin(x) * x)

    text = tg.make_kernels(tg.grad(f), llvm_ir=True)(np.ones(8))
    assert "define" in text and '@"tg_' in text
    assert "define" not in tg.make_kernels(tg.grad(f))(np.ones(8))


# ----------------------------------------------------------------------------------------------
# The disk cache, the compile log, a warm first call without Numba

CHILD = textwrap.dedent(
    """
    import json, sys, time
    start = time.perf_counter()
    import numpy as np
    import tracegrad as tg

    def f(x):
        return np.sum(np.tanh(x) * x ** 2 + np.exp(-x))

    g = tg.grad(f)(np.linspace(-1, 1, 50))
    print(json.dumps({"numba": "numba" in sys.modules, "sum": float(g.sum()),
                      "seconds": time.perf_counter() - start}))
    """
)


def _child(cache: str) -> tuple[dict, str]:
    env = dict(os.environ)
    env.update(
        TRACEGRAD_CACHE_DIR=cache,
        TRACEGRAD_TIERED="0",
        TRACEGRAD_LOG="compile",
        TRACEGRAD_BACKEND="cpu",
        TRACEGRAD_CPU_COMPILER="llvm",
    )
    done = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_object_code_on_disk_is_reloaded_and_a_damaged_file_compiled_again(tmp_path):
    cache = str(tmp_path / "cache")
    first, log = _child(cache)
    assert "compiled in" in log and "loaded from disk" not in log
    files = sorted((tmp_path / "cache" / "native").glob("k_*.o"))
    assert files
    second, log = _child(cache)
    assert second["sum"] == first["sum"]
    assert "loaded from disk" in log and "kernel k0" in log
    assert not second["numba"], "a warm first call of native kernels imports Numba"
    files[0].write_bytes(files[0].read_bytes()[:100])  # truncated, as by a full disk
    third, log = _child(cache)
    assert third["sum"] == first["sum"]
    assert "damaged" in log
    fourth, log = _child(cache)
    assert fourth["sum"] == first["sum"] and "damaged" not in log


def test_the_engine_refuses_nothing_it_compiled_and_keys_by_text():
    text = textwrap.dedent(
        """
        define double @tg_test_twice(double %x) {
          %y = fmul double %x, 2.0
          ret double %y
        }
        """
    )
    module = engine.compile_module(text, "tg_test_twice")
    assert engine.compile_module(text, "tg_test_twice") is module
    import ctypes

    twice = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(module.address("tg_test_twice"))
    assert twice(1.25) == 2.5
    with pytest.raises(KeyError, match="defines no function"):
        module.address("tg_test_missing")
    assert engine.module_key(text) != engine.module_key(text.replace("2.0", "3.0"))


def test_kernels_of_one_source_with_other_constants_offsets_or_shapes_are_kept_apart(tmp_path):
    # Numba's kernel takes constants, offsets and sizes as arguments; a native kernel has them
    # written in, so each must be part of its cache key (in memory and on disk)
    script = textwrap.dedent(
        """
        import json
        import numpy as np
        import tracegrad as tg

        x = np.linspace(-1.0, 1.0, 12)
        out = []
        for c in (2.0, 3.0, 0.5):
            f = tg.jit(lambda x, c=c: np.tanh(x * c) + c, backend="cpu")
            out.append(float(np.sum(np.abs(f(x) - (np.tanh(x * c) + c)))))
        for start in (1, 2, 5):
            f = tg.jit(lambda x, s=start: np.sin(x[s:]) * x[: x.size - s], backend="cpu")
            want = np.sin(x[start:]) * x[: x.size - start]
            out.append(float(np.sum(np.abs(f(x) - want))))
        for n in (5, 9):
            f = tg.jit(lambda x: np.exp(x) * 2.0, backend="cpu")
            out.append(float(np.sum(np.abs(f(x[:n]) - np.exp(x[:n]) * 2.0))))
        print(json.dumps(out))
        """
    )
    env = dict(os.environ, TRACEGRAD_CACHE_DIR=str(tmp_path), TRACEGRAD_TIERED="0")
    env["TRACEGRAD_CPU_COMPILER"] = "llvm"
    for _ in range(2):  # compiled, then loaded from disk
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        errors = json.loads(done.stdout.strip().splitlines()[-1])
        assert max(errors) < 1e-13, errors


def test_copies_of_other_dtypes_are_kept_apart(monkeypatch):
    # a kernel that only copies has one Numba source for every dtype (Numba's kernels take any
    # arrays), so the dtypes are part of a native kernel's key: float64 first, then complex128
    # (which Numba compiles) and int32 must not run the float64 copy
    monkeypatch.setenv("TRACEGRAD_CPU_COMPILER", "llvm")
    for dtype in (np.float64, np.complex128, np.int32, np.float32):
        a = (np.arange(6).reshape(2, 3) * (1 - 2j if dtype == np.complex128 else 1)).astype(dtype)
        b = (np.arange(6).reshape(3, 2) + 1).astype(dtype)
        np.testing.assert_array_equal(tg.jit(np.vdot, backend="cpu")(a, b), np.vdot(a, b))
        got = tg.jit(lambda x: x[1:, ::-1].copy(), backend="cpu")(a)
        np.testing.assert_array_equal(got, a[1:, ::-1])


def test_cache_info_and_list_count_native_kernels(tmp_path, monkeypatch):
    from tracegrad.base import cache

    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRACEGRAD_CPU_COMPILER", "llvm")
    assert cache.info().entries == 0
    scale = 1.0 + int.from_bytes(tmp_path.name.encode()[-4:], "little") / 2**40  # a new kernel
    tg.grad(lambda x: np.sum(np.sin(x) * scale), backend="cpu")(np.ones(4))
    objects = sorted((tmp_path / "cache" / "native").glob("k_*.o"))
    assert objects and cache.info().entries == len(objects)
    assert cache.info().bytes >= sum(p.stat().st_size for p in objects)
    native = [e for e in cache.entries() if "native kernel" in e.summary]
    assert sorted(e.key for e in native) == sorted(p.name[2:-2] for p in objects)
    tg.clear_cache()
    assert not list((tmp_path / "cache" / "native").glob("k_*.o"))
