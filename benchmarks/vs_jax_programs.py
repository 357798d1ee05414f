"""The programs that cold_compile.py and loops_vs_jax.py run, each written for tracegrad and for
JAX, and the child process that runs one of them.

Only the standard library is imported at the top, so that this file runs under tracegrad's
interpreter and under JAX's (another virtual environment) alike, and so that a child's own
clock starts before `import numpy`:

    python3 benchmarks/vs_jax_programs.py tracegrad W1 first
    /tmp/benchenv/bin/python benchmarks/vs_jax_programs.py jax leapfrog steady:50
    python3 benchmarks/vs_jax_programs.py tracegrad heat steady:5 --small --save heat.npz

A child prints one JSON line: `import` (NumPy and the library, seconds), `build` (making the
program's arguments), `first` (the first call: trace, differentiate, compile or load, run),
`epoch_result` (the wall clock at the first result, for the parent's process-start-to-result
time), `values` (the result's numbers, for comparing the two libraries: every number with
`steady:CALLS`, else each array's sum, sum of magnitudes and size), `versions` and, with
`steady:CALLS`, `calls` (each of CALLS timed calls after warm-up). `--save FILE.npz` also writes
every array of the result; `--small` shrinks each program (fewer steps, rows, points) for tests.
tracegrad runs on the backend and compiler its environment selects (the parents set the cpu
backend and TRACEGRAD_CPU_COMPILER; `compiler` reports it). JAX runs `jax.jit` of the same
function, float64. The parents' shared helpers (running a child, medians, ratios, the values'
difference, formatting) are at the end of this file.

The workloads are the existing benchmarks' where they exist: W1, W2 and W3 of bench_cpu.py
(bench_cpu's small sizes), the leapfrog chain of bench_loops.py, the Gaussian-process negative
log marginal likelihood of bench_examples.py, the thin MLP of bench_first_call.py and the heat
equation of bench_warm_start.py.
"""

from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_JAX = "/tmp/benchenv/bin/python"


class Lib:
    """The transforms of one library under common names. `loops` is "python" for tracegrad
    (loops are plain Python loops, rolled by tracing) and "lax" for JAX (lax.fori_loop)."""

    def __init__(self, name: str):
        self.name = name
        if name == "tracegrad":
            import numpy
            import tracegrad as tg

            self.np, self.onp, self.tg = numpy, numpy, tg
            self.grad, self.hessian, self.vmap = tg.grad, tg.hessian, tg.vmap
            self.value_and_grad, self.scan = tg.value_and_grad, tg.scan
            self.jit = lambda f: f  # tracegrad's transforms compile on their own
            self.block = lambda r: r
            self.loops = "python"
        elif name == "jax":
            import jax

            jax.config.update("jax_enable_x64", True)
            import jax.numpy as jnp
            import numpy

            self.np, self.onp, self.jax, self.lax = jnp, numpy, jax, jax.lax
            self.grad, self.hessian, self.vmap = jax.grad, jax.hessian, jax.vmap
            self.value_and_grad, self.scan = jax.value_and_grad, jax.lax.scan
            self.jit, self.block = jax.jit, jax.block_until_ready
            self.loops = "lax"
        else:
            raise ValueError(f"unknown library {name!r}")


# ----------------------------------------------------------------------------------------------
# cold_compile.py's programs. Each takes (lib, rng) and returns (function, args); args are NumPy
# arrays (JAX converts them in its first call, as a user's NumPy data would be).


def w1(lib, rng, small=False):
    np = lib.np

    def f(x):
        return np.sum(np.sin(x) * np.exp(-x * x) + np.tanh(x) * x**3)

    return lib.jit(lib.grad(f)), (rng.standard_normal(1000 if small else 10**5),)


def w2(lib, rng, small=False):
    np = lib.np

    def f(params, X, Y):
        W1, b1, W2, b2 = params
        return np.mean((np.tanh(X @ W1 + b1) @ W2 + b2 - Y) ** 2)

    params = (
        rng.standard_normal((256, 512)) * 0.05,
        rng.standard_normal(512),
        rng.standard_normal((512, 10)) * 0.05,
        rng.standard_normal(10),
    )
    batch = 8 if small else 256
    X, Y = rng.standard_normal((batch, 256)), rng.standard_normal((batch, 10))
    return lib.jit(lib.grad(f)), (params, X, Y)


def w3(lib, rng, small=False):
    np = lib.np

    def f(x):
        return np.sum(x**3) + np.sum(x[:-1] * x[1:])

    return lib.jit(lib.hessian(f)), (rng.standard_normal(10 if small else 100),)


CHAIN, DT = 100, 0.01  # bench_loops.py's chain of masses and time step


def _force(np, q, k):
    dq = q[1:] - q[:-1]
    return np.concatenate([k * dq, np.zeros(1)]) - np.concatenate([np.zeros(1), k * dq])


def _energy(np, q, p, k):
    dq = q[1:] - q[:-1]
    return 0.5 * (p**2).sum() + 0.5 * (k * dq**2).sum() + q[-1]


def leapfrog(lib, rng, small=False):
    """Velocity Verlet on a chain of 100 masses, 1,000 steps (small: 10); the gradient of the
    final energy with respect to the initial positions and the stiffness."""
    np = lib.np
    steps = 10 if small else 1000
    if lib.loops == "python":

        def run(q, p, k):
            for _ in range(steps):
                p = p + 0.5 * DT * _force(np, q, k)
                q = q + DT * p
                p = p + 0.5 * DT * _force(np, q, k)
            return _energy(np, q, p, k)

    else:

        def run(q, p, k):
            def step(i, s):
                q, p = s
                p = p + 0.5 * DT * _force(np, q, k)
                q = q + DT * p
                p = p + 0.5 * DT * _force(np, q, k)
                return q, p

            q, p = lib.lax.fori_loop(0, steps, step, (q, p))
            return _energy(np, q, p, k)

    onp = lib.onp
    args = (onp.linspace(0, 1, CHAIN), onp.sin(onp.arange(CHAIN) * 1.0), 1.3)
    return lib.jit(lib.grad(run, argnums=(0, 2))), args


def gp_hessian(lib, rng, small=False):
    """The Hessian of bench_examples.py's Gaussian-process negative log marginal likelihood
    (cholesky, two solves, slogdet) in its three log hyperparameters, 40 points."""
    np = lib.np

    def nll(theta, x, y):
        scale, signal, noise = np.exp(theta[0]), np.exp(theta[1]), np.exp(theta[2])
        d2 = (x[:, None] - x[None, :]) ** 2
        k = signal * np.exp(-0.5 * d2 / scale**2) + noise * np.eye(len(x))
        lower = np.linalg.cholesky(k)
        alpha = np.linalg.solve(lower.T, np.linalg.solve(lower, y))
        _, logdet = np.linalg.slogdet(k)
        return 0.5 * y @ alpha + 0.5 * logdet + 0.5 * len(x) * np.log(2 * np.pi)

    x = lib.onp.sort(rng.uniform(0.0, 5.0, 40))
    y = lib.onp.sin(x) + 0.1 * rng.standard_normal(40)
    theta = lib.onp.log(lib.onp.array([1.0, 1.0, 0.1]))
    return lib.jit(lib.hessian(nll)), (theta, x, y)


def _thin_params(rng):
    shapes = [(10, 64), (64,), (64, 64), (64,), (64, 1), (1,)]
    return tuple(rng.standard_normal(s) / 8 for s in shapes)


def thin_mlp(lib, rng, small=False):
    """bench_first_call.py's thin MLP 10-64-64-1, value_and_grad of the mean squared error,
    N = 2,048 float64."""
    np = lib.np

    def thin(params, X, y):
        W1, b1, W2, b2, W3, b3 = params
        h = np.tanh(X @ W1 + b1)
        h = np.tanh(h @ W2 + b2)
        return np.mean(((h @ W3 + b3)[:, 0] - y) ** 2)

    params, rows = _thin_params(rng), 64 if small else 2048
    X, y = rng.standard_normal((rows, 10)), rng.standard_normal(rows)
    return lib.jit(lib.value_and_grad(thin)), (params, X, y)


def vmap_grad(lib, rng, small=False):
    """Per-example gradients of the thin MLP's squared error, vmap(grad), 256 examples
    (small: 8)."""
    np = lib.np

    def loss(params, x, y):
        W1, b1, W2, b2, W3, b3 = params
        h = np.tanh(x @ W1 + b1)
        h = np.tanh(h @ W2 + b2)
        return ((h @ W3 + b3)[0] - y) ** 2

    per_example = lib.vmap(lib.grad(loss), in_axes=(None, 0, 0))
    params, rows = _thin_params(rng), 8 if small else 256
    X, y = rng.standard_normal((rows, 10)), rng.standard_normal(rows)
    return lib.jit(per_example), (params, X, y)


def scan_rnn(lib, rng, small=False):
    """A tanh RNN (8 inputs, 32 hidden units, 100 steps, small: 5) written with scan; the
    gradient of the squared outputs and final state with respect to its four weights."""
    np = lib.np

    def loss(params, xs, h0):
        Wh, Wx, b, w_out = params

        def step(h, x):
            h = np.tanh(h @ Wh + x @ Wx + b)
            return h, h @ w_out

        h, ys = lib.scan(step, h0, xs)
        return np.sum(ys**2) + np.sum(h**2)

    params = (
        rng.standard_normal((32, 32)) / 6,
        rng.standard_normal((8, 32)) / 3,
        rng.standard_normal(32) / 10,
        rng.standard_normal(32) / 6,
    )
    xs = rng.standard_normal((5 if small else 100, 8))
    return lib.jit(lib.grad(loss)), (params, xs, lib.onp.zeros(32))


# ----------------------------------------------------------------------------------------------
# loops_vs_jax.py's programs (and leapfrog above)


def heat(lib, rng, small=False):
    """bench_warm_start.py's 1-D heat equation, 128 points, 2,000 explicit steps (small: 20);
    the gradient of sum(u**2) with respect to the diffusion coefficient and the initial state."""
    np = lib.np
    steps = 20 if small else 2000

    def update(kappa, u):
        return u + kappa * (np.roll(u, 1) - 2 * u + np.roll(u, -1))

    if lib.loops == "python":

        def simulate(kappa, u0):
            u = u0
            for _ in range(steps):
                u = update(kappa, u)
            return np.sum(u**2)

    else:

        def simulate(kappa, u0):
            u = lib.lax.fori_loop(0, steps, lambda i, u: update(kappa, u), u0)
            return np.sum(u**2)

    u0 = lib.onp.sin(lib.onp.linspace(0, lib.onp.pi, 128))
    return lib.jit(lib.grad(simulate, argnums=(0, 1))), (0.1, u0)


def _kalman_data(onp, rng, steps: int):
    """A constant-velocity model in the plane: 4 states (position, velocity), 2 observed."""
    dt = 0.1
    A = onp.eye(4)
    A[0, 2] = A[1, 3] = dt
    H = onp.zeros((2, 4))
    H[0, 0] = H[1, 1] = 1.0
    x, ys = onp.array([0.0, 0.0, 1.0, 0.5]), []
    for _ in range(steps):
        x = A @ x + 0.05 * rng.standard_normal(4)
        ys.append(H @ x + 0.2 * rng.standard_normal(2))
    return A, H, onp.array(ys)


def _kalman_step(np, A, H, Q, R, m, P, ll, y):
    """One predict-and-update step; adds the observation's log likelihood to `ll`."""
    m = A @ m
    P = A @ P @ A.T + Q
    S = H @ P @ H.T + R
    L = np.linalg.cholesky(S)
    v = y - H @ m
    z = np.linalg.solve(L, v)
    ll = ll - 0.5 * (z @ z) - np.sum(np.log(np.diag(L))) - np.log(2 * np.pi)
    K = np.linalg.solve(S, H @ P).T
    return m + K @ v, P - K @ S @ K.T, ll


def kalman(lib, rng, small=False, style: str = "fori"):
    """The log likelihood of a 4-state Kalman filter over 100 observations (small: 5; a cholesky
    and two solves per step); its gradient with respect to the transition matrix and the log
    noise scales. JAX's loop is lax.fori_loop (`style` "fori") or lax.scan over the
    observations."""
    np = lib.np
    steps = 5 if small else 100
    A, H, ys = _kalman_data(lib.onp, rng, steps)

    def parts(log_q, log_r):
        return np.exp(log_q) * np.eye(4), np.exp(log_r) * np.eye(2)

    if lib.loops == "python":

        def loglik(A, log_q, log_r, ys):
            Q, R = parts(log_q, log_r)
            m, P, ll = np.zeros(4), np.eye(4), 0.0
            for t in range(steps):
                m, P, ll = _kalman_step(np, A, H, Q, R, m, P, ll, ys[t])
            return ll

    elif style == "scan":

        def loglik(A, log_q, log_r, ys):
            Q, R = parts(log_q, log_r)

            def step(carry, y):
                return _kalman_step(np, A, H, Q, R, *carry, y), None

            (_, _, ll), _ = lib.lax.scan(step, (np.zeros(4), np.eye(4), np.zeros(())), ys)
            return ll

    else:

        def loglik(A, log_q, log_r, ys):
            Q, R = parts(log_q, log_r)

            def step(t, carry):
                return _kalman_step(np, A, H, Q, R, *carry, ys[t])

            init = (np.zeros(4), np.eye(4), np.zeros(()))
            _, _, ll = lib.lax.fori_loop(0, steps, step, init)
            return ll

    A0 = A + 0.01 * rng.standard_normal((4, 4))
    return lib.jit(lib.grad(loglik, argnums=(0, 1, 2))), (A0, -3.0, -2.0, ys)


def prime(lib, rng, small=False):
    """A tiny gradient, run untimed first so that later children find Python's bytecode of the
    library and its compiler written."""
    np = lib.np
    return lib.jit(lib.grad(lambda x: np.sum(np.sin(x) * x))), (rng.standard_normal(8),)


PROGRAMS = {
    "W1": w1,
    "W2": w2,
    "W3": w3,
    "leapfrog": leapfrog,
    "gp_hessian": gp_hessian,
    "thin_mlp": thin_mlp,
    "vmap_grad": vmap_grad,
    "scan_rnn": scan_rnn,
    "heat": heat,
    "kalman": kalman,
    "kalman_scan": lambda lib, rng, small=False: kalman(lib, rng, small, style="scan"),
    "prime": prime,
}


# ----------------------------------------------------------------------------------------------
# the child


def leaves(onp, value) -> list:
    """The result's arrays (nested tuples, lists and dicts of arrays and scalars), in order, each
    as a float64 NumPy array."""
    if isinstance(value, dict):
        return [v for key in sorted(value) for v in leaves(onp, value[key])]
    if isinstance(value, (tuple, list)):
        return [v for item in value for v in leaves(onp, item)]
    return [onp.asarray(value, dtype=float)]


def versions(lib) -> dict:
    """The versions of what a child ran: the library and the compiler under it."""
    import importlib.metadata

    names = (
        ["numpy", "numba", "llvmlite"] if lib.name == "tracegrad" else ["numpy", "jax", "jaxlib"]
    )
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    if lib.name == "tracegrad":
        out["tracegrad"] = lib.tg.__version__
    return out


def child(
    library: str, program: str, mode: str, small: bool = False, save: str | None = None
) -> dict:
    t0 = time.perf_counter()
    lib = Lib(library)
    t1 = time.perf_counter()
    rng = lib.onp.random.default_rng(0)
    fn, args = PROGRAMS[program](lib, rng, small)
    t2 = time.perf_counter()
    result = lib.block(fn(*args))
    t3 = time.perf_counter()
    epoch_result = time.time()
    out = {
        "library": library,
        "program": program,
        "small": small,
        "import": t1 - t0,
        "build": t2 - t1,
        "first": t3 - t2,
        "epoch_result": epoch_result,
    }
    arrays = leaves(lib.onp, result)
    if mode.startswith("steady:"):
        out["values"] = [a.ravel().tolist() for a in arrays]
    else:  # a fingerprint of each array: its sum, the sum of its magnitudes, its size
        out["values"] = [[float(a.sum()), float(abs(a).sum()), int(a.size)] for a in arrays]
    if save:  # every number, for the parent's comparison of the two libraries
        lib.onp.savez(save, *arrays)
    if library == "tracegrad":
        from tracegrad.base import config

        try:
            out["compiler"] = config.cpu_compiler()
        except ValueError as exc:
            out["compiler"] = f"refused ({exc})"
        lib.tg.wait_compiled()  # a cold process leaves a complete cache for the next one
    out["versions"] = versions(lib)
    if mode.startswith("steady:"):
        calls = int(mode.split(":", 1)[1])
        for _ in range(max(5, calls // 10)):
            lib.block(fn(*args))
        times = []
        for _ in range(calls):
            t = time.perf_counter()
            lib.block(fn(*args))
            times.append(time.perf_counter() - t)
        out["calls"] = times
    return out


# ----------------------------------------------------------------------------------------------
# what the parents (cold_compile.py, loops_vs_jax.py) share


def median(values):
    """The median of the numbers given, None for none (a configuration that never ran)."""
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else 0.5 * (values[mid - 1] + values[mid])


def ratio(a, b):
    """a / b, None when either is missing."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def max_relative_difference(ours, theirs) -> float:
    """The largest difference between two results, each element's difference relative to the
    largest magnitude in its array (an element near zero does not make it blow up). Both are
    lists of arrays (or of lists of numbers) of the same shapes; a mismatch in their number or
    sizes is an error."""
    worst = 0.0
    if len(ours) != len(theirs):
        raise ValueError(f"{len(ours)} arrays against {len(theirs)}")
    for a, b in zip(ours, theirs, strict=True):
        a, b = [float(v) for v in _ravel(a)], [float(v) for v in _ravel(b)]
        if len(a) != len(b):
            raise ValueError(f"an array of {len(a)} numbers against one of {len(b)}")
        scale = max([abs(v) for v in b], default=0.0)
        diff = max([abs(x - y) for x, y in zip(a, b, strict=True)], default=0.0)
        if diff:
            worst = max(worst, diff / scale if scale else float("inf"))
    return worst


def _ravel(array):
    return array.ravel().tolist() if hasattr(array, "ravel") else list(array)


def load_values(path: str) -> list:
    """The arrays a child saved with --save, in order."""
    import numpy

    with numpy.load(path) as data:
        return [data[f"arr_{i}"] for i in range(len(data.files))]


def last_line(text: str) -> str:
    """The last non-empty line of a child's error output (what a table shows for a failure)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no output"


def run_child(
    python: str,
    library: str,
    program: str,
    mode: str,
    env: dict,
    *,
    small=False,
    save=None,
    timeout=900,
) -> dict:
    """Runs one child in a new process; returns its JSON with `total` (the parent's clock from
    just before the process starts to the child's first result) added, or {"error": ...}."""
    import subprocess

    cmd = [python, os.path.abspath(__file__), library, program, mode]
    if small:
        cmd.append("--small")
    if save:
        cmd += ["--save", save]
    start = time.time()
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    if done.returncode != 0:
        return {"error": last_line(done.stderr or done.stdout)}
    try:
        out = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": "no JSON line: " + last_line(done.stdout + done.stderr)}
    out["total"] = out["epoch_result"] - start
    return out


def tracegrad_env(compiler: str, cache_dir: str) -> dict:
    """The environment of a tracegrad child: this process's, with the cpu backend, the given
    compiler and kernel cache folder, tiering off (the first call compiles before it returns)
    and programs persisted as by default."""
    env = {k: v for k, v in os.environ.items() if k != "TRACEGRAD_PROGRAM_CACHE"}
    env.update(
        TRACEGRAD_BACKEND="cpu",
        TRACEGRAD_CPU_COMPILER=compiler,
        TRACEGRAD_CACHE_DIR=cache_dir,
        TRACEGRAD_TIERED="0",
    )
    return env


def jax_env() -> dict:
    """The environment of a JAX child: the CPU, no compilation cache on disk (JAX's default)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env["JAX_PLATFORMS"] = "cpu"
    return env


def machine() -> dict:
    """What the numbers were measured on: the CPU, its cores, the load before the run."""
    import platform

    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "load": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
    }


def fmt_seconds(value) -> str:
    """A duration for a table: ms below a second, s above; '-' when missing."""
    if value is None:
        return "-"
    if value < 1.0:
        return f"{value * 1e3:.3g} ms" if value >= 1e-3 else f"{value * 1e6:.3g} µs"
    return f"{value:.3g} s"


def fmt_ratio(value) -> str:
    return "-" if value is None else f"{value:.2g}x" if value < 10 else f"{value:.0f}x"


def fmt_diff(value) -> str:
    return "-" if value is None else f"{value:.1e}"


def main(argv: list[str]) -> dict:
    args = [a for a in argv if a not in ("--small",)]
    save = None
    if "--save" in args:
        k = args.index("--save")
        save = args[k + 1]
        del args[k : k + 2]
    if len(args) != 3 or args[0] not in ("tracegrad", "jax") or args[1] not in PROGRAMS:
        sys.exit(
            "usage: vs_jax_programs.py tracegrad|jax PROGRAM first|steady:CALLS [--small]"
            f" [--save FILE.npz]\nprograms: {', '.join(PROGRAMS)}"
        )
    return child(*args, small="--small" in argv, save=save)


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
