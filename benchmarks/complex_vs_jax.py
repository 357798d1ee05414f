"""tracegrad's complex derivatives against JAX's, function by function (docs/complex.md says the
convention is JAX's: this is the check). Run in an environment that has JAX:

    python3 benchmarks/complex_vs_jax.py

For each function: the gradient of a real loss of complex arguments (orders 1 and 2: the
gradient of a real function of the gradient), and for holomorphic ones f', f'' and f''' with
holomorphic=True, each compared with JAX's on the same inputs (float64). Prints the largest
relative difference per function and exits 1 if any exceeds 1e-10.
"""

from __future__ import annotations

import sys

import numpy as np

import tracegrad as tg

try:
    import jax
    import jax.numpy as jnp
except ImportError:
    sys.exit("complex_vs_jax.py needs JAX (pip install jax): it compares against it")

jax.config.update("jax_enable_x64", True)

# (name, function of a NumPy-like module): each is called with numpy for tracegrad, jax.numpy
# for JAX, so both differentiate the same code
REAL_LOSSES = [
    ("abs squared", lambda m, z: m.sum(m.abs(z) ** 2)),
    ("real exp", lambda m, z: m.sum(m.real(m.exp(1j * z) * z))),
    ("imag log", lambda m, z: m.sum(m.imag(m.log(z)))),
    ("abs sin", lambda m, z: m.sum(m.abs(m.sin(z)))),
    ("angle", lambda m, z: m.sum(m.angle(z))),
    ("conj product", lambda m, z: m.real(m.sum(z * m.conj(z) * 1j * z))),
    ("sqrt tanh", lambda m, z: m.sum(m.abs(m.sqrt(z) * m.tanh(z) / (1 + z**2)))),
    ("outer matmul", lambda m, z: m.real(m.sum(m.outer(z, z) @ z))),
    ("arcsinh arctanh", lambda m, z: m.sum(m.abs(m.arcsinh(z) + m.arctanh(z / 3)))),
    ("power", lambda m, z: m.sum(m.abs((z + 2) ** (0.5 + 1j)) + m.real(z**-3))),
    ("parts", lambda m, z: m.sum(m.real(z) ** 2 * m.imag(z) + m.cos(m.imag(z)))),
    ("expm1 log1p", lambda m, z: m.sum(m.abs(m.expm1(z) * m.log1p(z)))),
]
HOLOMORPHIC = [
    ("polynomial", lambda m, z: z**3 - 2j * z + 1),
    ("exp sin", lambda m, z: m.exp(z) * m.sin(z)),
    ("log sqrt", lambda m, z: m.log(z) * m.sqrt(z)),
    ("tanh ratio", lambda m, z: m.tanh(z) / (1 + z * z)),
]


def relative(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def main() -> int:
    rng = np.random.default_rng(0)
    z = rng.uniform(-1, 1, 6) + 1j * rng.uniform(0.2, 1, 6)
    worst = 0.0
    print(f"{'function':<18} {'order 1':>10} {'order 2':>10}   (max relative difference)")
    for name, f in REAL_LOSSES:
        ours1 = tg.grad(lambda z, f=f: f(np, z))(z)
        theirs1 = jax.grad(lambda z, f=f: f(jnp, z))(jnp.asarray(z))
        ours2 = tg.grad(lambda z, f=f: np.sum(np.abs(tg.grad(lambda w: f(np, w))(z)) ** 2))(z)
        theirs2 = jax.grad(lambda z, f=f: jnp.sum(jnp.abs(jax.grad(lambda w: f(jnp, w))(z)) ** 2))(
            jnp.asarray(z)
        )
        r1, r2 = relative(ours1, theirs1), relative(ours2, theirs2)
        worst = max(worst, r1, r2)
        print(f"{name:<18} {r1:10.1e} {r2:10.1e}")
    print(f"\n{'holomorphic':<18} {'d1':>10} {'d2':>10} {'d3':>10}")
    z0 = 0.7 + 0.4j
    for name, f in HOLOMORPHIC:
        ours, theirs = (lambda z, f=f: f(np, z)), (lambda z, f=f: f(jnp, z))
        row = []
        for _ in range(3):
            ours = tg.grad(ours, holomorphic=True)
            theirs = jax.grad(theirs, holomorphic=True)
            row.append(relative(ours(z0), theirs(jnp.asarray(z0))))
        worst = max(worst, *row)
        print(f"{name:<18} " + " ".join(f"{r:10.1e}" for r in row))
    print(f"\nworst relative difference {worst:.1e} (jax {jax.__version__})")
    return 0 if worst <= 1e-10 else 1


if __name__ == "__main__":
    sys.exit(main())
