"""The cuda backend's own tests: kernels, device arrays, buffers, launch shapes, the generated source.

The whole suite also runs on the cuda backend through the `backend` fixture; these tests cover what
only the cuda backend has. Without a GPU they run on Numba's CUDA simulator (see conftest.py), so
the shapes are small; `test_kernels_compile_for_a_real_gpu` compiles the generated kernels for a
real GPU target (PTX), which the simulator never does.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.runtime import backends
from tracegrad import codegen_cuda, passes
from tracegrad.cuda import device as cuda_device
from tracegrad.base.errors import BackendError

cuda = pytest.importorskip("numba.cuda")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def program_for(fun, *args) -> codegen_cuda.CudaProgram:
    graph = passes.optimize(tg.make_ir(fun)(*args))
    return codegen_cuda.build(graph)


def host(x) -> np.ndarray:
    return x.copy_to_host() if cuda_device.is_device_array(x) else np.asarray(x)


def close(got, want, dtype=np.float64):
    rtol = 1e-12 if np.dtype(dtype) == np.float64 else 1e-5
    np.testing.assert_allclose(host(got), want, rtol=rtol, atol=rtol)


@pytest.fixture
def transfers(monkeypatch):
    """Counts host-to-device and device-to-host copies made by the cuda backend."""
    counts = {"in": 0, "out": 0, "alloc": 0}
    to_device, to_host, empty = cuda_device.to_device, cuda_device.to_host, cuda_device.empty

    def counted(key, fun):
        def wrapper(*args, **kwargs):
            counts[key] += 1
            return fun(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(cuda_device, "to_device", counted("in", to_device))
    monkeypatch.setattr(cuda_device, "to_host", counted("out", to_host))
    monkeypatch.setattr(cuda_device, "empty", counted("alloc", empty))
    return counts


# ----------------------------------------------------------------------------------------------
# Availability and launch configuration


def test_no_gpu_raises_backend_error_naming_doctor_and_cpu(monkeypatch):
    monkeypatch.setattr(backends, "_resolved", {})
    monkeypatch.setattr(cuda_device, "simulated", lambda: False)
    monkeypatch.setattr(cuda, "is_available", lambda: False)
    with pytest.raises(BackendError) as info:
        tg.grad(lambda x: x * x, backend="cuda")
    message = str(info.value)
    assert "no CUDA GPU" in message and "tracegrad doctor" in message and "backend='cpu'" in message


def test_missing_numba_cuda_is_reported_not_raised(monkeypatch):
    def missing():
        raise ImportError("No module named 'numba_cuda'")

    monkeypatch.setattr(cuda_device, "cuda", missing)
    ok, why = cuda_device.availability()
    assert not ok and "pip install numba-cuda" in why


def test_launch_configuration_comes_from_device_properties():
    cfg = cuda_device.config_from_properties(
        sms=132,
        max_threads_per_block=1024,
        max_threads_per_sm=2048,
        warp=32,
        shared_bytes=48 * 1024,
        name="test device",
    )
    assert (cfg.threads, cfg.blocks, cfg.mm_threads, cfg.mm_blocks) == (256, 132 * 8, 16, 264)
    small = cuda_device.config_from_properties(
        sms=2,
        max_threads_per_block=512,
        max_threads_per_sm=1024,
        warp=32,
        shared_bytes=16 * 1024,
        name="small",
    )
    assert (small.threads, small.blocks) == (128, 16)
    if cuda_device.simulated():
        assert cuda_device.launch_config() == cuda_device.SIMULATOR_CONFIG


# ----------------------------------------------------------------------------------------------
# Data on the device


def test_device_arrays_in_device_arrays_out_without_host_copies(transfers, rng):
    x = rng.normal(size=(4, 6))
    f = tg.value_and_grad(
        lambda x: np.sum(np.tanh(x @ x.T) * np.sin(x).sum(axis=1)), backend="cuda"
    )
    value, grad = f(cuda.to_device(x))
    assert cuda_device.is_device_array(value) and cuda_device.is_device_array(grad)
    assert transfers["in"] == 0 and transfers["out"] == 0  # not even between kernels
    ref_value, ref_grad = tg.value_and_grad(
        lambda x: np.sum(np.tanh(x @ x.T) * np.sin(x).sum(axis=1)), backend="numpy"
    )(x)
    assert value.shape == () and grad.shape == (4, 6)
    close(value, ref_value)
    close(grad, ref_grad)


def test_numpy_inputs_are_copied_in_once_and_results_out_once(transfers, rng):
    x, y = rng.normal(size=5), rng.normal(size=(5, 3))
    f = tg.grad(lambda x, y: np.sum(np.exp(x) @ y) + np.max(y), argnums=(0, 1), backend="cuda")
    gx, gy = f(x, y)
    assert isinstance(gx, np.ndarray) and isinstance(gy, np.ndarray)
    assert transfers["in"] == 2 + len([b for b in _last_program().arguments if b.role == "const"])
    assert transfers["out"] == 2


def _last_program() -> codegen_cuda.CudaProgram:
    from tracegrad.runtime.program_store import _programs

    return next(p for p in reversed(_programs.values()) if p.backend == "cuda").run


def test_scratch_buffers_are_allocated_once_per_shape(transfers, rng):
    f = tg.grad(lambda x: np.sum(np.sin(x) @ np.cos(x).T), backend="cuda")
    x = rng.normal(size=(3, 4))
    f(x)
    first = transfers["alloc"]
    assert first > 0
    f(x + 1)
    assert transfers["alloc"] == first  # NumPy in: scratch and result buffers are reused
    n_outputs = len(_last_program().plan.outputs)
    f(cuda.to_device(x))
    assert transfers["alloc"] == first + n_outputs  # device in: only fresh results


@pytest.mark.parametrize("on_device", [False, True])
def test_a_result_is_never_overwritten_by_a_later_call(on_device, rng):
    f = tg.grad(lambda x: np.sum(x**3), backend="cuda")
    x1, x2 = rng.normal(size=7), rng.normal(size=7)
    put = cuda.to_device if on_device else (lambda a: a)
    r1 = f(put(x1))
    r2 = f(put(x2))
    close(r1, 3 * x1**2)
    close(r2, 3 * x2**2)


def test_device_results_are_recycled_only_once_nothing_refers_to_them(rng):
    f = tg.grad(lambda x: np.sum(x**2), backend="cuda")
    x = cuda.to_device(rng.normal(size=6))
    address = lambda a: cuda_device.layout(a)[2]
    r1 = f(x)
    r2 = f(x)
    assert address(r1) != address(r2)
    first = address(r1)
    del r1
    r3 = f(x)
    assert address(r3) == first  # let go of: its memory is used again
    view = r3[1:]  # a slice keeps the memory in use
    held = {"g": r2}
    del r3
    r4 = f(x)
    assert address(r4) not in (first, address(held["g"]))
    close(view, 2 * host(x)[1:])
    close(held["g"], 2 * host(x))
    close(r4, 2 * host(x))


def test_kernel_launch_configurations_are_made_once_without_occupancy_warnings(monkeypatch):
    import types
    import warnings

    class Kernel:
        targetoptions: dict = {}
        made = 0

        def py_func(self):  # pragma: no cover
            pass

        def __getitem__(self, config):
            Kernel.made += 1
            warnings.warn(
                "Grid size 1 will likely result in GPU under-utilization due to low occupancy.",
                RuntimeWarning,
                stacklevel=2,
            )
            return lambda *args: (config, args)

    class DeviceFunction:
        targetoptions = {"device": True}
        py_func = None

    module = types.ModuleType("kernels")
    module.kernel, module.helper = Kernel(), DeviceFunction()
    helper = module.helper
    monkeypatch.setattr(cuda_device, "simulated", lambda: False)
    cuda_device.prepare_kernels(module)
    assert module.helper is helper  # device functions stay what the kernels call
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert module.kernel[1, 256](3) == ((1, 256), (3,))
        assert module.kernel[1, 256](4) == ((1, 256), (4,))
    assert Kernel.made == 1


def test_results_never_alias_inputs_constants_or_each_other(rng):
    x = rng.normal(size=(3, 4))
    d = cuda.to_device(x)
    same = tg.jit(lambda x: (x, x, x.T, x[::-1, 1:]), backend="cuda")(d)
    addresses = {cuda_device.layout(a)[2] for a in same} | {cuda_device.layout(d)[2]}
    assert len(addresses) == 5
    for got, want in zip(same, (x, x, x.T, x[::-1, 1:]), strict=True):
        close(got, want)
    host_same = tg.jit(lambda x: (x, x), backend="cuda")(x)
    assert host_same[0] is not x and host_same[0] is not host_same[1]


def test_strided_device_inputs_are_read_in_place(rng):
    x = rng.normal(size=(6, 8))
    d = cuda.to_device(x)[1::2, ::3]  # a non-contiguous view
    f = lambda a: np.sum(np.sin(a) * a, axis=0)
    close(tg.jit(f, backend="cuda")(d), f(x[1::2, ::3]))
    close(
        tg.grad(lambda a: np.sum(f(a)), backend="cuda")(d),
        tg.grad(lambda a: np.sum(f(a)), backend="numpy")(x[1::2, ::3]),
    )


def test_zero_d_and_empty_values(rng):
    close(tg.grad(lambda x: x**3 - 2 * x, backend="cuda")(cuda.to_device(np.array(1.5))), 4.75)
    assert tg.jit(lambda x: np.sum(x) + x.mean(), backend="cuda")(np.zeros(0)).shape == ()
    out = tg.jit(lambda x: np.sum(x, axis=0), backend="cuda")(np.zeros((0, 3)))
    np.testing.assert_array_equal(out, np.zeros(3))
    empty = tg.jit(lambda x: np.sin(x) @ x.T, backend="cuda")(np.zeros((2, 0)))
    np.testing.assert_array_equal(empty, np.zeros((2, 2)))


# ----------------------------------------------------------------------------------------------
# Reductions


REDUCTIONS = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}


@pytest.mark.parametrize("op", sorted(REDUCTIONS))
@pytest.mark.parametrize(
    "shape, axis", [((37,), None), ((3, 37), 1), ((40, 3), 0), ((2, 3, 5), (0, 2)), ((4, 5), None)]
)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_reductions_match_numpy(op, shape, axis, dtype, rng):
    x = rng.uniform(0.5, 1.5, size=shape).astype(dtype)
    fun = REDUCTIONS[op]
    got = tg.jit(lambda x: fun(np.sin(x), axis=axis), backend="cuda")(x)
    assert got.dtype == dtype
    close(got, fun(np.sin(x), axis=axis), dtype)


def test_sums_of_long_rows_spread_each_row_over_threads_and_blocks():
    cfg = cuda_device.launch_config()
    n = cfg.threads * cfg.blocks * 4
    for shape, axis in (((2, n), 1), ((n, 2), 0), ((1, n), 1), ((n,), 0)):
        program = program_for(lambda x, axis=axis: np.sum(x, axis=axis), np.ones(shape))
        layouts = [ln.layout for _, k in program.steps for ln in k.launches if ln.layout]
        _, threads_per_row, splits = layouts[0]
        assert threads_per_row > 1, (shape, layouts)  # never one thread per long row
        if min(shape) == 1:  # one row cannot fill the device: its columns are split too ...
            assert splits > 1 and len(layouts) == 2, (shape, layouts)  # ... and combined after


def test_reductions_combine_across_blocks_and_propagate_nan(rng):
    cfg = cuda_device.launch_config()
    n = 3 * cfg.threads * cfg.blocks + 5
    x = rng.normal(size=(2, n))
    for fun in REDUCTIONS.values():
        close(
            tg.jit(lambda x, fun=fun: fun(x * 0.5, axis=1), backend="cuda")(x), fun(x * 0.5, axis=1)
        )
    x[1, n // 2] = np.nan
    got = tg.jit(lambda x: (np.max(x, axis=1), np.min(x), np.sum(x, axis=1)), backend="cuda")(x)
    assert (
        not np.isnan(got[0][0]) and np.isnan(got[0][1]) and np.isnan(got[1]) and np.isnan(got[2][1])
    )


def test_integer_reductions(rng):
    x = rng.integers(-50, 50, size=(3, 20))
    got = tg.jit(
        lambda x: (np.sum(x, axis=1), np.max(x), np.min(x, axis=0), np.sum(x > 0)), backend="cuda"
    )(x)
    want = (np.sum(x, axis=1), np.max(x), np.min(x, axis=0), np.sum(x > 0))
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


# ----------------------------------------------------------------------------------------------
# Matrix products


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [
        ((5, 7), (7, 3)),
        ((2, 3, 4), (2, 4, 5)),
        ((3, 4), (2, 4, 5)),
        ((4,), (4, 3)),
        ((3, 4), (4,)),
        ((2, 40), (40, 3)),  # few tiles, long k: k is split across blocks
        ((9, 6), (6, 10)),  # several tiles, ragged edges
    ],
)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_matmul_values_and_gradients(a_shape, b_shape, dtype, rng):
    a = rng.normal(size=a_shape).astype(dtype)
    b = rng.normal(size=b_shape).astype(dtype)
    close(tg.jit(lambda a, b: a @ b, backend="cuda")(a, b), a @ b, dtype)
    loss = lambda a, b: np.sum(np.tanh(a @ b))
    got = tg.grad(loss, argnums=(0, 1), backend="cuda")(a, b)
    want = tg.grad(loss, argnums=(0, 1), backend="numpy")(a, b)
    for g, w in zip(got, want, strict=True):
        close(g, w, dtype)


def test_split_k_matmul_is_planned_for_few_tiles():
    cfg = cuda_device.launch_config()
    k = 8 * cfg.mm_depth
    program = program_for(lambda a, b: a @ b, np.ones((2, k)), np.ones((k, 3)))
    names = [ln.kernel for _, kernels in program.steps for ln in kernels.launches]
    assert any(name.endswith("_combine") for name in names), names


def test_transposed_and_strided_matmul_operands(rng):
    a, b = rng.normal(size=(6, 4)), rng.normal(size=(5, 6))
    close(tg.jit(lambda a, b: a.T @ b.T, backend="cuda")(a, b), a.T @ b.T)
    d = cuda.to_device(rng.normal(size=(8, 10)))
    close(
        tg.jit(lambda x: x @ x.T, backend="cuda")(d[::2, 1::3]),
        host(d)[::2, 1::3] @ host(d)[::2, 1::3].T,
    )


# ----------------------------------------------------------------------------------------------
# Shape steps, host fallback


def test_unslice_with_a_step_runs_on_the_device(transfers, rng):
    x = rng.normal(size=(7, 4))
    f = tg.grad(lambda x: np.sum(np.sin(x[::2, ::-3]) ** 2), backend="cuda")
    got = f(cuda.to_device(x))
    assert transfers["in"] == 0 and transfers["out"] == 0
    close(got, tg.grad(lambda x: np.sum(np.sin(x[::2, ::-3]) ** 2), backend="numpy")(x))


def test_reshapes_of_non_contiguous_values(rng):
    x = rng.normal(size=(3, 4, 2))
    f = lambda x: np.sum(np.transpose(x, (2, 0, 1)).reshape(2, 12) @ np.ones((12, 2)))
    close(tg.jit(f, backend="cuda")(x), f(x))
    close(tg.grad(f, backend="cuda")(x), tg.grad(f, backend="numpy")(x))
    close(tg.jit(lambda x: x.T.reshape(-1), backend="cuda")(cuda.to_device(x)), x.T.reshape(-1))


def test_unsupported_steps_fall_back_to_the_host(rng):
    a, b = rng.normal(size=(3, 4)) > 0, rng.normal(size=(4, 2)) > 0
    got = tg.jit(lambda a, b: (a @ b).astype(np.float64) * 2.0, backend="cuda")(a, b)
    close(got, (a @ b) * 2.0)


# ----------------------------------------------------------------------------------------------
# The generated source


def test_kernel_modules_are_written_to_the_cache_with_a_comment_per_node(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", str(tmp_path))
    x = np.linspace(0.1, 1.0, 9).reshape(3, 3)

    def loss(w):
        h = np.tanh(x @ w)  # the user's line
        return np.mean(h**2)

    program = program_for(tg.grad(loss), x)
    files = os.listdir(tmp_path / "kernels")
    module = [f for f in files if f.endswith(".py")]
    assert module, files
    text = program.source()
    assert text in [(tmp_path / "kernels" / f).read_text(encoding="utf-8") for f in module]
    assert "@cuda.jit(cache=_CACHE)" in text and "def run(_rt" in text
    line = loss.__code__.co_firstlineno + 1
    assert "= tanh %" in text and f"test_codegen_cuda.py:{line}]" in text
    assert "# the fusion plan:" in text and "matmul" in text


def test_program_source_without_a_device_uses_a_reference_configuration(monkeypatch):
    monkeypatch.setattr(cuda_device, "availability", lambda: (False, "no GPU"))
    graph = passes.optimize(tg.make_ir(lambda x: np.sum(np.exp(x)))(np.ones(10)))
    text = codegen_cuda.program_source(graph)
    assert "reference device" in text and "math.exp" in text


# ----------------------------------------------------------------------------------------------
# The examples and the classic GPU check


def test_classic_gpu_example_gradient_is_zero_at_the_minimum():
    assert tg.grad(lambda x: (x**2 - 4) ** 2, backend="cuda")(2.0) == 0.0
    assert (
        host(tg.grad(lambda x: (x**2 - 4) ** 2, backend="cuda")(cuda.to_device(np.array(2.0))))
        == 0.0
    )


def test_mlp_example_matches_the_reference():
    from tracegrad.examples import mlp

    reference = "cpu" if backends.available_backends().get("cpu") == "" else "numpy"
    got = mlp.run(backend="cuda", size=12, steps=3, quiet=True)
    want = mlp.run(backend=reference, size=12, steps=3, quiet=True)
    np.testing.assert_allclose(got["losses"], want["losses"], rtol=1e-10)
    assert got["accuracy"] == want["accuracy"]


# ----------------------------------------------------------------------------------------------
# Compiling for a real GPU (the simulator runs kernels as Python, so it cannot catch code that
# numba.cuda would refuse): every kernel of a corpus of programs is compiled to PTX in a process
# without the simulator. Needs CUDA's NVVM and NVRTC libraries, not a GPU.


def _corpus():
    f32, f64 = np.float32, np.float64
    rng = np.random.default_rng(0)
    w1 = lambda x: np.sum(np.sin(x) * np.exp(-x * x) + np.tanh(x) * x**3)

    def mlp(W1, b1, W2, b2, X, Y):
        return np.mean((np.tanh(X @ W1 + b1) @ W2 + b2 - Y) ** 2)

    def everything(x, y):
        terms = [
            np.sin(x),
            np.cos(x),
            np.tan(x),
            np.arcsin(x / 4),
            np.arccos(x / 4),
            np.arctan(x),
            np.sinh(x),
            np.cosh(x),
            np.tanh(x),
            np.exp(x),
            np.expm1(x),
            np.log(y),
            np.log1p(y),
            np.sqrt(y),
            np.abs(x),
            np.sign(x),
            np.maximum(x, y),
            np.minimum(x, y),
            np.where(x > y, x, y),
            x**-2,
            x**7,
            y**x,
            x / y,
            -x,
            np.where((x > 0) & ~(y < 1) | (x == y), 1.0, 0.0) + (x != y),
            (x >= y) * 1.0 + (x <= y),
            x.astype(np.int32) + x.astype(np.float32),
            np.prod(x) + np.max(x, axis=0) + np.min(y),
        ]
        return sum(np.sum(t) for t in terms)

    out = []
    for dt in (f64, f32):
        x = rng.uniform(0.5, 1.0, size=(4, 3)).astype(dt)
        out.append((tg.value_and_grad(w1), (np.ones(1000, dt),)))
        out.append(
            (
                tg.value_and_grad(mlp, argnums=(0, 1, 2, 3)),
                tuple(np.ones(s, dt) for s in ((16, 32), (32,), (32, 3), (3,), (64, 16), (64, 3))),
            )
        )
        out.append((tg.grad(everything, argnums=(0, 1)), (x, x + 1)))
        out.append(
            (tg.hessian(lambda x: np.sum(x**3) + np.sum(x[:-1] * x[1:])), (np.ones(20, dt),))
        )
        out.append(
            (
                tg.jit(lambda a, b: (a @ b, np.sum(a, axis=0), a.T[::-1].reshape(-1))),
                (np.ones((2, 3, 300), dt), np.ones((2, 300, 4), dt)),
            )
        )
        out.append((tg.grad(lambda x: np.sum(np.sin(x[::2, ::-3]) ** 2)), (np.ones((7, 4), dt),)))
    out.append(
        (tg.jit(lambda x: (np.sum(x, axis=1), np.max(x), x > 3)), (np.ones((3, 5), np.int64),))
    )
    return out


def compile_corpus_for_a_gpu() -> int:
    """Compile every kernel of the corpus, and the library kernels, to PTX; returns how many."""
    from numba import types
    from numba.np.numpy_support import from_dtype

    from tracegrad.cuda import kernels as cuda_kernels
    from tracegrad.base import cache

    def array(dtype, ndim):
        return types.Array(from_dtype(np.dtype(dtype)), ndim, "A")

    count = 0
    cfg = codegen_cuda.REFERENCE_CONFIG
    for fun, args in _corpus():
        graph = passes.optimize(tg.make_ir(fun)(*args))
        program = codegen_cuda.build(graph, cfg, load=False)
        module = cache._exec_module(f"ptx{count}", program.text)
        buffers = {b.name: b for b in list(program.plan.buffers) + list(program.scratch)}
        for _, kernels in program.steps:
            for launch in kernels.launches:
                sig = tuple(
                    array(buffers[a].dtype, max(1, len(buffers[a].shape))) for a in launch.args
                )
                cuda.compile_ptx(getattr(module, launch.kernel).py_func, sig, cc=(8, 0))
                count += 1
    library = cache._exec_module("ptxlib", cuda_kernels.library_source("test"))
    for rank in range(1, cuda_kernels.MAX_RANK + 1):
        cuda.compile_ptx(
            getattr(library, f"copy{rank}").py_func,
            (array(np.float32, rank), array(np.float32, rank)),
            cc=(8, 0),
        )
    cuda.compile_ptx(library.fill1.py_func, (array(np.float64, 1), types.float64), cc=(8, 0))
    return count + cuda_kernels.MAX_RANK + 1


def test_kernels_compile_for_a_real_gpu():
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run(
        [sys.executable, __file__, "--ptx"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    if proc.returncode == 77:
        pytest.skip(f"cannot compile for a GPU here: {proc.stdout.strip()}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert int(proc.stdout.split()[-1]) > 40


if __name__ == "__main__" and sys.argv[1:] == ["--ptx"]:
    try:
        cuda.compile_ptx(lambda a: None, "void(float64[:])", cc=(8, 0))
    except Exception as exc:
        print(f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
        raise SystemExit(77) from None
    print("compiled kernels:", compile_corpus_for_a_gpu())


# ----------------------------------------------------------------------------------------------
# The GPU check script, at tiny sizes (on the simulator without a GPU)


def test_gpu_check_script_runs_in_smoke_mode(tmp_path):
    out = tmp_path / "gpu.md"
    env = dict(os.environ, GPU_CHECK_OUT=str(out))
    for name in [n for n in env if n.startswith("PYTEST_XDIST_")]:
        del env[name]  # this test's worker is not the script's pytest's
    proc = subprocess.run(
        ["bash", os.path.join(ROOT, "benchmarks", "gpu_check.sh"), "--smoke"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = out.read_text(encoding="utf-8")
    for row in (
        "copy x -> y",
        "W1 grad, f32",
        "W1 value_and_grad, f32",
        "W2 MLP grad, f32",
        "W3 hessian",
        "JAX",
        "PyTorch",
        "tests on the cuda backend: 3 passed, 0 failed",
    ):
        assert row in text, (row, text)


# ----------------------------------------------------------------------------------------------
# Fuzzing: the random IR programs of test_fuzz_backends (broadcasts, reductions over any axes,
# transposes, slices with any step, reshapes, concatenations, matmuls, 0-d and empty arrays,
# non-contiguous inputs), on the cuda backend, with host and with device inputs


def test_random_programs_agree_with_the_interpreter_on_cuda():
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    fuzz = pytest.importorskip("test_fuzz_backends")
    from tracegrad import interpreter

    examples = int(os.environ.get("TRACEGRAD_FUZZ_EXAMPLES", 40))  # more: a longer hunt

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        shape=fuzz.shape_strategy,
        code=st.integers(0, 63),
        ops=st.lists(fuzz.op_strategy, min_size=2, max_size=7),
        dtype=st.sampled_from([np.float64, np.float64, np.float32]),
        gradient=st.booleans(),
        layout=st.integers(0, 3),
        seed=st.integers(0, 1000),
        on_device=st.booleans(),
    )
    def check(shape, code, ops, dtype, gradient, layout, seed, on_device):
        graph = fuzz.build_graph(shape, code, ops, np.dtype(dtype), gradient)
        args = fuzz._inputs(graph, np.random.default_rng(seed), layout)
        want = interpreter.evaluate(graph, args)
        program = backends.get_backend("cuda").compile(passes.optimize(graph))
        if on_device:  # the same non-contiguous layouts, as views of device memory
            args = [_device_like(a) for a in args]
        for _ in range(2):  # a second call reuses the scratch buffers
            got = program(args)
            for g, w in zip(got, want, strict=True):
                fuzz._compare(host(g), w, np.dtype(dtype))

    check()


def _device_like(a: np.ndarray):
    """A device array with the values and the strides of `a` (a view into device memory)."""
    if a.flags.c_contiguous or a.ndim == 0:
        return cuda.to_device(np.ascontiguousarray(a))
    base = a.base if a.base is not None and a.base.flags.c_contiguous else None
    if base is None or a.ndim != base.ndim:
        return cuda.to_device(np.ascontiguousarray(a))
    index = tuple(
        slice(None, None, s // b) if s > 0 else slice(None, None, -(abs(s) // b))
        for s, b in zip(a.strides, base.strides, strict=True)
    )
    view = cuda.to_device(base)[index]
    assert view.shape == a.shape, (view.shape, a.shape)
    return view


@pytest.mark.skipif(
    not cuda_device.simulated(), reason="checks a workaround in Numba's CUDA simulator"
)
def test_simulated_threads_of_a_block_share_one_shared_array():
    """With the simulator's shared-array lookup under a lock (it raced, rarely: a block's
    threads could get different arrays), every thread sees every other thread's writes."""
    import types

    from numba import cuda

    module = types.ModuleType("tg_shared_check")
    exec(
        "from numba import cuda\n"
        "import numpy as np\n"
        "@cuda.jit\n"
        "def kernel(out):\n"
        "    buf = cuda.shared.array(32, np.float64)\n"
        "    t = cuda.threadIdx.x\n"
        "    buf[t] = t\n"
        "    cuda.syncthreads()\n"
        "    total = 0.0\n"
        "    for i in range(32):\n"
        "        total += buf[i]\n"
        "    out[t] = total\n",
        module.__dict__,
    )
    cuda_device.quiet_simulated_kernels(module)
    with cuda_device.simulator_threads():
        for _ in range(10):
            out = cuda.device_array(32)
            module.kernel[1, 32](out)
            np.testing.assert_array_equal(out.copy_to_host(), np.full(32, 496.0))
