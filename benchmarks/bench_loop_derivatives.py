"""IR size of the k-th derivative of a 5-step loop, k = 1..5 (`scan`, `while_loop`, `fori_loop`).

    python3 benchmarks/bench_loop_derivatives.py [--orders 5] [--jax]

The function: a carry of 3 elements, `c -> sin(c) * w` five times, summed, as a scalar function of
the initial value's scale `x` (so `grad` applies k times). The size is the number of lines of
`str(tg.make_ir(grad^k(f))(x))`, the loops' bodies included. A second body reads `x` inside the
loop (`c -> sin(c) * x`: its cotangent accumulates in a carry). With `--jax`, the lines of
`jax.make_jaxpr` of the same functions (with `jax_enable_x64`) are printed beside. The sizes
should grow by about the same factor per order as JAX's (a forward and a reverse loop per loop).
"""

import argparse

import numpy as np

import tracegrad as tg

W = np.array([0.9, 1.1, 0.7])
STEPS = 5


def scan_w(x):
    c, _ = tg.scan(lambda c, _: (np.sin(c) * W, None), x * np.ones(3), None, length=STEPS)
    return np.sum(c)


def while_w(x):
    def step(state):
        i, c = state
        return i + 1, np.sin(c) * W

    _, c = tg.while_loop(lambda state: state[0] < STEPS, step, (0, x * np.ones(3)))
    return np.sum(c)


def fori_w(x):
    return np.sum(tg.fori_loop(0, STEPS, lambda i, c: np.sin(c) * W, x * np.ones(3)))


def scan_x(x):
    c, _ = tg.scan(lambda c, _: (np.sin(c) * x, None), np.full(3, 0.5), None, length=STEPS)
    return np.sum(c)


PROGRAMS = {
    "scan, sin(c) * w": scan_w,
    "while_loop, sin(c) * w": while_w,
    "fori_loop, sin(c) * w": fori_w,
    "scan, sin(c) * x": scan_x,
}


def ir_lines(f, order: int, x: float = 0.3) -> list[int]:
    sizes = []
    for _ in range(order):
        f = tg.grad(f)
        sizes.append(len(str(tg.make_ir(f)(x)).splitlines()))
    return sizes


def jax_lines(name: str, order: int, x: float = 0.3) -> list[int] | None:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    w = jnp.array(W)
    lax = jax.lax
    body = {
        "sin(c) * w": (lambda x: lambda c: jnp.sin(c) * w, lambda x: x * jnp.ones(3)),
        "sin(c) * x": (lambda x: lambda c: jnp.sin(c) * x, lambda x: jnp.full(3, 0.5)),
    }[name.split(", ")[1]]
    kind = name.split(",")[0]
    if kind == "while_loop":
        return None  # JAX's while_loop has no reverse mode

    def f(x):
        step, init = body[0](x), body[1](x)
        if kind == "scan":
            return jnp.sum(lax.scan(lambda c, _: (step(c), None), init, None, length=STEPS)[0])
        return jnp.sum(lax.fori_loop(0, STEPS, lambda i, c: step(c), init))

    sizes = []
    for _ in range(order):
        f = jax.grad(f)
        sizes.append(len(str(jax.make_jaxpr(f)(x)).splitlines()))
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--orders", type=int, default=5)
    parser.add_argument("--jax", action="store_true", help="measure JAX's jaxprs beside")
    args = parser.parse_args()
    k = args.orders
    print("| program | " + " | ".join(f"grad^{i}" for i in range(1, k + 1)) + " | last ratio |")
    print("|---|" + "---|" * (k + 1))
    for name, f in PROGRAMS.items():
        rows = [("tracegrad " + name, ir_lines(f, k))]
        if args.jax and (sizes := jax_lines(name, k)) is not None:
            rows.append(("JAX " + name, sizes))
        for label, sizes in rows:
            ratio = sizes[-1] / sizes[-2] if len(sizes) > 1 else float("nan")
            print(f"| {label} | " + " | ".join(map(str, sizes)) + f" | x{ratio:.2f} |")


if __name__ == "__main__":
    main()
