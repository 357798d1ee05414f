"""Persisted programs with loops and branches (runtime/program_cache.py): a program whose graph
holds loop or branch bodies (scan, fori_loop, while_loop, cond, rolled Python loops) is kept on
disk with its bodies, found before tracing by a new process, and never stale when a body's code
or a value it reads changes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tracegrad as tg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def persisted(monkeypatch, tmp_path):
    monkeypatch.setenv("TRACEGRAD_PROGRAM_CACHE", "1")
    monkeypatch.setenv("TRACEGRAD_CACHE_DIR", str(tmp_path / "cache"))
    tg.clear_programs()
    yield tmp_path / "cache" / "programs"
    tg.clear_programs()


def _entries(folder) -> list:
    return sorted(p for p in folder.iterdir() if p.suffix == ".tgp") if folder.exists() else []


def _fresh(transform, fun, *args, backend="numpy"):
    """(result, traces) of a transformed call in a new process's state (the store emptied)."""
    tg.clear_programs()
    g = transform(fun, backend=backend)
    before = g.trace_count
    out = g(*args)
    return out, g.trace_count - before


def _rolled(x):
    u = x
    for _ in range(40):  # rolled into one loop node by tracing
        u = u + 0.1 * (np.roll(u, 1) - 2 * u + np.roll(u, -1))
    return np.sum(u**2)


def _scanned(x):
    def step(c, xi):
        c = np.tanh(c * xi + 0.5)
        return c, c * c

    c, ys = tg.scan(step, x[0], x)
    return c + np.sum(ys)


def _fori(x):
    return np.sum(tg.fori_loop(0, 7, lambda i, v: np.sin(v) * 1.1 + i * 0.01, x))


def _while(x):
    def cond(s):
        return s[1] < 5

    def body(s):
        return (np.cos(s[0]) + s[0], s[1] + 1)

    v, _ = tg.while_loop(cond, body, (x, 0))
    return np.sum(v * v)


def _branch(x):
    return np.sum(tg.cond(np.sum(x) > 0, lambda v: np.exp(v), lambda v: v * v, x))


def _nested(x):
    def outer(c, xi):
        inner, _ = tg.scan(lambda d, yi: (np.sin(d * yi) + d, d), c, x)
        return inner * xi, inner

    c, ys = tg.scan(outer, x[0], x[:3])
    return c + np.sum(ys)


PROGRAMS = {
    "nested scan": _nested,
    "rolled": _rolled,
    "scan": _scanned,
    "fori_loop": _fori,
    "while_loop": _while,
    "cond": _branch,
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_a_program_with_bodies_is_loaded_instead_of_traced(persisted, name, backend):
    fun = PROGRAMS[name]
    x = np.linspace(0.1, 0.9, 6)
    first, traces = _fresh(tg.grad, fun, x, backend=backend)
    assert traces == 1 and len(_entries(persisted)) == 1
    again, traces = _fresh(tg.grad, fun, x, backend=backend)
    assert traces == 0
    np.testing.assert_array_equal(again, first)
    want, _ = _fresh(tg.grad, fun, x, backend="numpy")
    np.testing.assert_allclose(again, want, rtol=1e-12, atol=1e-14)


def test_higher_orders_of_a_loop_persist(persisted):
    x = np.linspace(0.1, 0.9, 4)
    first, traces = _fresh(tg.hessian, _scanned, x)
    assert traces == 1
    again, traces = _fresh(tg.hessian, _scanned, x)
    assert traces == 0
    np.testing.assert_array_equal(again, first)


def _make(source: str, namespace: dict):
    """A function `f` made from source, always at the same file and line: two versions differ
    only in their body."""
    exec(compile(textwrap.dedent(source), "<user code>", "exec"), namespace)
    return namespace["f"]


def test_a_changed_loop_body_is_never_stale(persisted):
    x = np.linspace(0.1, 0.9, 5)
    source = """
        def f(x):
            def step(c, xi):
                return c * xi + {k}, c
            c, _ = tg.scan(step, x[0], x)
            return c
    """
    f2 = _make(source.format(k="2.0"), {"np": np, "tg": tg})
    f3 = _make(source.format(k="3.0"), {"np": np, "tg": tg})
    got2, _ = _fresh(tg.grad, f2, x)
    got3, traces = _fresh(tg.grad, f3, x)
    assert traces == 1
    want3, _ = _fresh(tg.grad, lambda v: f3(v), x)
    np.testing.assert_allclose(got3, want3)
    assert not np.array_equal(got2, got3)


def test_a_changed_value_read_by_a_loop_body_is_never_stale(persisted):
    ns = {"np": np, "tg": tg, "RATE": 0.5}
    f = _make(
        """
        def f(x):
            return np.sum(tg.fori_loop(0, 4, lambda i, v: v * RATE + np.sin(v), x))
        """,
        ns,
    )
    x = np.linspace(0.1, 0.9, 5)
    got, _ = _fresh(tg.grad, f, x)
    ns["RATE"] = 0.25
    changed, traces = _fresh(tg.grad, f, x)
    assert traces == 1
    eps = 1e-6
    fd = np.array(
        [(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(len(x))]
    )  # plain NumPy runs fori_loop as a Python loop
    np.testing.assert_allclose(changed, fd, rtol=1e-6)
    assert not np.allclose(got, changed)


def test_a_rolled_python_loop_persists_across_processes(tmp_path):
    """The second process finds the program of a 2,000-step Python loop before tracing it."""
    code = """
        import numpy as np
        import tracegrad as tg

        def simulate(kappa, u0, steps=2000):
            u = u0
            for _ in range(steps):
                u = u + kappa * (np.roll(u, 1) - 2 * u + np.roll(u, -1))
            return np.sum(u ** 2)

        g = tg.grad(simulate, argnums=(0, 1), backend="numpy")
        dk, du = g(0.1, np.sin(np.linspace(0, np.pi, 16)))
        print(repr(float(dk)), repr(float(du.sum())), g.trace_count)
    """
    env = {**os.environ, "TRACEGRAD_PROGRAM_CACHE": "1", "TRACEGRAD_CACHE_DIR": str(tmp_path)}
    outs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        outs.append(done.stdout.split())
    assert outs[0][2] == "1" and outs[1][2] == "0"
    assert outs[0][:2] == outs[1][:2]
