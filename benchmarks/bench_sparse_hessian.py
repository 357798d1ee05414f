"""W3 (the Hessian of sum(x**3) + sum(x[:-1] * x[1:])) by compressed seeds against the dense
path, the analytic fill and JAX's jit(hessian), interleaved in one run (medians, microseconds).

    /tmp/benchenv/bin/python benchmarks/bench_sparse_hessian.py [--rounds 30]

The dense path is the same function with its terms in the other order (another program in the
store) built with tracegrad.transforms.sparsity.ENABLED off.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from bench_cpu import interleaved, jax, w3, w3_closed_form

import tracegrad as tg
from tracegrad.transforms import sparsity


def w3_dense(x):
    return np.sum(x[:-1] * x[1:]) + np.sum(x**3)


def _w3_jax(x):
    jnp = jax.numpy
    return jnp.sum(x**3) + jnp.sum(x[:-1] * x[1:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    for n in (100, 1000):
        x = np.random.default_rng(2).standard_normal(n)
        sparse = tg.hessian(w3, backend="cpu")
        np.testing.assert_array_equal(sparse(x), w3_closed_form(x))
        sparsity.ENABLED = False
        dense = tg.hessian(w3_dense, backend="cpu")
        np.testing.assert_allclose(dense(x), w3_closed_form(x), rtol=1e-12)
        sparsity.ENABLED = True
        c = {
            "sparse (compressed seeds)": lambda f=sparse, x=x: f(x),
            "dense (one seed per row)": lambda f=dense, x=x: f(x),
            "closed form, NumPy": lambda x=x: w3_closed_form(x),
        }
        if jax is not None:
            jh = jax.jit(jax.hessian(_w3_jax))
            xj = jax.numpy.asarray(x)
            c["JAX jit"] = lambda f=jh, x=xj: f(x).block_until_ready()
        times = interleaved(c, args.rounds, inner=50 if n <= 100 else 5)
        print(f"n={n}")
        for name, t in times.items():
            print(f"  {name:28s} {t * 1e6:8.1f} us")


if __name__ == "__main__":
    main()
