"""The cuda backend on a GPU: W1, W2, W3 against the copy-bandwidth floor, JAX and PyTorch.

    python3 benchmarks/bench_gpu.py                 # on a machine with an NVIDIA GPU
    python3 benchmarks/bench_gpu.py --smoke         # tiny sizes; runs anywhere (on Numba's CUDA
                                                    # simulator without a GPU): checks the script
    python3 benchmarks/bench_gpu.py --out FILE.md   # where the table goes
                                                    # (default benchmarks/gpu_results.md)

Workloads (all data on the device before timing; results stay there):
- W1: grad and value_and_grad of sum(sin(x)*exp(-x*x) + tanh(x)*x**3), 10^8 float32 values.
  Its floor: the bytes it must move (read x, write the gradient) at the device-to-device copy
  bandwidth measured in the same run. Target: within 1.3x of the floor, no slower than JAX.
- W2: grad of the MLP loss mean((tanh(X@W1 + b1)@W2 + b2 - Y)**2), X 4096x256, W1 256x512,
  W2 512x10, float32, with respect to W1, b1, W2, b2.
- W3: hessian of sum(x**3) + sum(x[:-1]*x[1:]), n = 1000, float64.

Times are medians of repeated calls, each followed by a device synchronisation, so they include
what a user pays per call in Python (launches, allocation of results). The first call (tracing
and compiling) is timed separately. JAX (jit) and PyTorch (eager autograd) run the same
functions on the same GPU when they are installed and see a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

SIZES = {
    # mlp: (rows of X, inputs, hidden units, outputs)
    "full": {"w1": 10**8, "mlp": (4096, 256, 512, 10), "w3": 1000, "reps": 20, "budget": 4.0},
    "smoke": {"w1": 1000, "mlp": (16, 8, 12, 3), "w3": 12, "reps": 2, "budget": 0.5},
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check the script runs")
    parser.add_argument("--out", default=None, help="markdown file for the table")
    parser.add_argument("--note", default="", help="a line to add under the table")
    return parser.parse_args(argv)


def ensure_device(smoke: bool) -> str:
    """Numba's CUDA target, on the GPU or (smoke runs without one) on the simulator."""
    if smoke and "NUMBA_ENABLE_CUDASIM" not in os.environ:
        import ctypes.util

        if not os.path.exists("/proc/driver/nvidia") and ctypes.util.find_library("cuda") is None:
            os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    from tracegrad.cuda import device as cuda_device

    ok, why = cuda_device.availability()
    if not ok:
        raise SystemExit(f"bench_gpu: the cuda backend cannot run here: {why}")
    return cuda_device.launch_config().describe()


# ----------------------------------------------------------------------------------------------
# Timing


def median_time(call, sync, reps: int, budget: float) -> float:
    """Median seconds of `call()` + `sync()` over `reps` calls (fewer if over `budget` s)."""
    times = []
    start = time.perf_counter()
    for _ in range(reps):
        t = time.perf_counter()
        call()
        sync()
        times.append(time.perf_counter() - t)
        if time.perf_counter() - start > budget and len(times) >= 3:
            break
    return statistics.median(times)


def first_call(call, sync) -> float:
    t = time.perf_counter()
    call()
    sync()
    return time.perf_counter() - t


# ----------------------------------------------------------------------------------------------
# The workloads, written once in plain NumPy (and once more for JAX / PyTorch)


def w1(x, np):
    return np.sum(np.sin(x) * np.exp(-x * x) + np.tanh(x) * x**3)


def mlp_loss(W1, b1, W2, b2, X, Y, np):
    return np.mean((np.tanh(X @ W1 + b1) @ W2 + b2 - Y) ** 2)


def w3(x, np):
    return np.sum(x**3) + np.sum(x[:-1] * x[1:])


def make_data(size: dict):
    import numpy as np

    rng = np.random.default_rng(0)
    n, d, h, c = size["mlp"]
    return {
        "x1": rng.uniform(-2, 2, size["w1"]).astype(np.float32),
        "mlp": [
            (rng.normal(size=(d, h)) / np.sqrt(d)).astype(np.float32),  # W1
            np.zeros(h, np.float32),  # b1
            (rng.normal(size=(h, c)) / np.sqrt(h)).astype(np.float32),  # W2
            np.zeros(c, np.float32),  # b2
            rng.normal(size=(n, d)).astype(np.float32),  # X
            rng.normal(size=(n, c)).astype(np.float32),
        ],  # Y
        "x3": rng.normal(size=size["w3"]),
    }


# ----------------------------------------------------------------------------------------------
# tracegrad


def bench_tracegrad(data, size, rows: list) -> dict:
    import numpy as np
    from numba import cuda

    import tracegrad as tg

    reps, budget = size["reps"], size["budget"]
    sync = cuda.synchronize
    results = {}

    # the floor: device-to-device copy bandwidth (bytes read + written per second)
    src = cuda.to_device(data["x1"])
    dst = cuda.device_array_like(src)
    t_copy = median_time(lambda: dst.copy_to_device(src), sync, reps, budget)
    bandwidth = 2 * src.nbytes / t_copy
    floor = 2 * src.nbytes / bandwidth  # W1 reads x and writes its gradient
    rows.append(
        (
            "copy x -> y (device to device)",
            "floor",
            t_copy,
            f"{bandwidth / 1e9:.3g} GB/s (read + written)",
        )
    )
    results["floor"] = floor

    x = cuda.to_device(data["x1"])
    g = tg.grad(lambda x: w1(x, np), backend="cuda")
    vg = tg.value_and_grad(lambda x: w1(x, np), backend="cuda")
    compile_g = first_call(lambda: g(x), sync)
    t_g = median_time(lambda: g(x), sync, reps, budget)
    compile_vg = first_call(lambda: vg(x), sync)
    t_vg = median_time(lambda: vg(x), sync, reps, budget)
    sample = slice(0, 1000)
    got = g(x).copy_to_host()[sample]
    ref = tg.grad(lambda x: w1(x, np), backend="numpy")(data["x1"][sample].astype(np.float64))
    err = float(np.max(np.abs(got - ref) / np.maximum(1.0, np.abs(ref))))
    rows.append(
        (
            "W1 grad, f32",
            "tracegrad cuda",
            t_g,
            f"{t_g / floor:.2f}x floor; first call {compile_g:.2f} s; max rel err {err:.1e}",
        )
    )
    rows.append(
        (
            "W1 value_and_grad, f32",
            "tracegrad cuda",
            t_vg,
            f"{t_vg / floor:.2f}x floor; first call {compile_vg:.2f} s",
        )
    )
    results["w1"] = (t_g, t_vg)

    params = [cuda.to_device(a) for a in data["mlp"]]
    mg = tg.grad(
        lambda W1, b1, W2, b2, X, Y: mlp_loss(W1, b1, W2, b2, X, Y, np),
        argnums=(0, 1, 2, 3),
        backend="cuda",
    )
    compile_m = first_call(lambda: mg(*params), sync)
    t_m = median_time(lambda: mg(*params), sync, reps, budget)
    got = mg(*params)[0].copy_to_host()
    ref = tg.grad(
        lambda W1, b1, W2, b2, X, Y: mlp_loss(W1, b1, W2, b2, X, Y, np),
        argnums=(0, 1, 2, 3),
        backend="numpy",
    )(*[a.astype(np.float64) for a in data["mlp"]])[0]
    err = float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30))
    rows.append(
        (
            "W2 MLP grad, f32",
            "tracegrad cuda",
            t_m,
            f"first call {compile_m:.2f} s; max err {err:.1e} (of max |grad|)",
        )
    )
    results["w2"] = t_m

    x3 = cuda.to_device(data["x3"])
    h = tg.hessian(lambda x: w3(x, np), backend="cuda")
    compile_h = first_call(lambda: h(x3), sync)
    t_h = median_time(lambda: h(x3), sync, reps, budget)
    H = h(x3).copy_to_host()
    n = data["x3"].size
    expected = np.diag(6 * data["x3"]) + np.diag(np.ones(n - 1), 1) + np.diag(np.ones(n - 1), -1)
    err = float(np.max(np.abs(H - expected)))
    rows.append(
        (
            f"W3 hessian n={n}, f64",
            "tracegrad cuda",
            t_h,
            f"first call {compile_h:.2f} s; max abs err {err:.1e}",
        )
    )
    results["w3"] = t_h
    return results


# ----------------------------------------------------------------------------------------------
# Other libraries on the same GPU


def bench_jax(data, size, rows: list, floor: float) -> None:
    try:
        import jax
        import jax.numpy as jnp

        gpus = [d for d in jax.devices() if d.platform == "gpu"]
    except Exception as exc:
        rows.append(("JAX", "not run", None, f"{type(exc).__name__}: {str(exc)[:80]}"))
        return
    if not gpus:
        rows.append(("JAX", "not run", None, "JAX sees no GPU"))
        return
    reps, budget = size["reps"], size["budget"]
    x = jax.device_put(data["x1"], gpus[0])
    g = jax.jit(jax.grad(lambda x: w1(x, jnp)))
    vg = jax.jit(jax.value_and_grad(lambda x: w1(x, jnp)))
    for name, fn in (("W1 grad, f32", g), ("W1 value_and_grad, f32", vg)):
        compile_t = first_call(lambda fn=fn: jax.block_until_ready(fn(x)), lambda: None)
        t = median_time(lambda fn=fn: jax.block_until_ready(fn(x)), lambda: None, reps, budget)
        rows.append((name, "JAX jit", t, f"{t / floor:.2f}x floor; first call {compile_t:.2f} s"))
    params = [jax.device_put(a, gpus[0]) for a in data["mlp"]]
    mg = jax.jit(
        jax.grad(
            lambda W1, b1, W2, b2, X, Y: mlp_loss(W1, b1, W2, b2, X, Y, jnp), argnums=(0, 1, 2, 3)
        )
    )
    first_call(lambda: jax.block_until_ready(mg(*params)), lambda: None)
    t = median_time(lambda: jax.block_until_ready(mg(*params)), lambda: None, reps, budget)
    rows.append(("W2 MLP grad, f32", "JAX jit", t, ""))
    jax.config.update("jax_enable_x64", True)
    x3 = jax.device_put(data["x3"], gpus[0])
    h = jax.jit(jax.hessian(lambda x: w3(x, jnp)))
    first_call(lambda: jax.block_until_ready(h(x3)), lambda: None)
    t = median_time(lambda: jax.block_until_ready(h(x3)), lambda: None, reps, budget)
    rows.append((f"W3 hessian n={data['x3'].size}, f64", "JAX jit", t, ""))


def bench_torch(data, size, rows: list, floor: float) -> None:
    try:
        import torch
    except Exception as exc:
        rows.append(("PyTorch", "not run", None, f"{type(exc).__name__}: {str(exc)[:80]}"))
        return
    if not torch.cuda.is_available():
        rows.append(("PyTorch", "not run", None, "PyTorch sees no GPU"))
        return
    reps, budget = size["reps"], size["budget"]
    sync = torch.cuda.synchronize
    x = torch.tensor(data["x1"], device="cuda")

    def w1_grad():
        xx = x.detach().requires_grad_(True)
        (gx,) = torch.autograd.grad(w1(xx, torch), xx)
        return gx

    first_call(w1_grad, sync)
    t = median_time(w1_grad, sync, reps, budget)
    rows.append(("W1 grad, f32", "PyTorch eager", t, f"{t / floor:.2f}x floor"))
    params = [torch.tensor(a, device="cuda") for a in data["mlp"]]

    def mlp_grad():
        leaves = [p.detach().requires_grad_(True) for p in params[:4]]
        return torch.autograd.grad(mlp_loss(*leaves, *params[4:], torch), leaves)

    first_call(mlp_grad, sync)
    t = median_time(mlp_grad, sync, reps, budget)
    rows.append(("W2 MLP grad, f32", "PyTorch eager", t, ""))
    x3 = torch.tensor(data["x3"], device="cuda")
    hess = lambda: torch.autograd.functional.hessian(lambda v: w3(v, torch), x3, vectorize=True)
    first_call(hess, sync)
    t = median_time(hess, sync, reps, budget)
    rows.append((f"W3 hessian n={data['x3'].size}, f64", "PyTorch eager", t, ""))


# ----------------------------------------------------------------------------------------------
# The table


def fmt_time(t: float | None) -> str:
    if t is None:
        return "-"
    if t >= 1:
        return f"{t:.2f} s"
    if t >= 1e-3:
        return f"{t * 1e3:.2f} ms"
    return f"{t * 1e6:.1f} us"


def table(rows: list, header: str) -> str:
    lines = [header, "", "| workload | implementation | median | notes |", "|---|---|---:|---|"]
    for workload, impl, t, notes in rows:
        lines.append(f"| {workload} | {impl} | {fmt_time(t)} | {notes} |")
    return "\n".join(lines) + "\n"


def verdict(results: dict, rows: list) -> list[str]:
    """The targets: W1 within 1.3x of the copy floor, and no slower than JAX."""
    out = []
    t_g, t_vg = results["w1"]
    for name, t in (("grad", t_g), ("value_and_grad", t_vg)):
        ratio = t / results["floor"]
        out.append(
            f"W1 {name}: {ratio:.2f}x the copy floor (target 1.3x): "
            + ("met" if ratio <= 1.3 else "NOT met")
        )
    jax_t = next((t for w, impl, t, _ in rows if w == "W1 grad, f32" and impl == "JAX jit"), None)
    if jax_t is not None:
        out.append(
            f"W1 grad vs JAX: {t_g / jax_t:.2f}x JAX's time (target <= 1): "
            + ("met" if t_g <= jax_t else "NOT met")
        )
    else:
        out.append("W1 grad vs JAX: JAX did not run")
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    mode = "smoke" if args.smoke else "full"
    size = SIZES[mode]
    device = ensure_device(args.smoke)
    data = make_data(size)
    rows: list = []
    results = bench_tracegrad(data, size, rows)
    bench_jax(data, size, rows, results["floor"])
    bench_torch(data, size, rows, results["floor"])
    import numba

    header = (
        f"### {'Smoke run (tiny sizes: not a measurement)' if args.smoke else 'GPU run'}: "
        f"{datetime.date.today()}, {device}; {platform.machine()}, numba {numba.__version__}, "
        f"python {platform.python_version()}"
    )
    notes = verdict(results, rows) + ([args.note] if args.note else [])
    text = table(rows, header) + "\n" + "\n".join(f"- {line}" for line in notes) + "\n"
    out = args.out
    if out is None:
        out = (
            os.path.join(tempfile.gettempdir(), "tracegrad_gpu_smoke.md")
            if args.smoke
            else os.path.join(HERE, "gpu_results.md")
        )
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
    print(text)
    print(f"(written to {out})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
