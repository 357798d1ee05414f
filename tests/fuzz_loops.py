"""Random loop programs for fuzzing tracegrad's loops end to end (tests/test_fuzz_loops.py, and the
long campaign benchmarks/hunt_loops.py).

A generated program is plain Python source: `f(w, W, c0, xs)` steps a carry `c` (a vector) through
`T` iterations of a random body over the carry, the step's row of `xs`, a vector `w` and a matrix
`W`, written as one of the loop forms a user writes:

- `python`: a plain `for` loop (tracegrad rolls it into one scan);
- `two_back`: a plain `for` loop that also carries the previous carry (`c, p = body, c`);
- `fori`: `tg.fori_loop` reading `xs[t]` at the traced index;
- `scan`: `tg.scan` over the rows of `xs`, stacking a second output per step;
- `while`: `tg.while_loop` on a counter in the carry;
- `nested`: a `tg.fori_loop` whose body runs a `tg.scan`.

`tg.scan`, `tg.fori_loop` and `tg.while_loop` run as plain Python loops outside a trace, so the
same source is its own NumPy reference.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import numpy as np

FORMS = ("python", "two_back", "fori", "scan", "while", "nested")

# Elementwise templates over operand names; each keeps values bounded so that long loops stay
# finite and smooth (no kinks: finite differences of orders 1-3 stay meaningful).
UNARY = (
    "np.sin({a})",
    "np.tanh({a})",
    "np.cos({a})",
    "0.5 * {a}",
    "np.exp(-{a} * {a})",
    "np.roll({a}, 1)",
    "{a}[::-1]",
    "np.sum({a}) * 0.1 + {a}",
    "(W @ {a}) * 0.3",
    "np.concatenate([{a}[1:], {a}[:1]])",
)
BINARY = (
    "{a} * {b}",
    "{a} + {b}",
    "{a} - 0.5 * {b}",
    "np.sin({a}) * np.cos({b})",
    "{a} * np.sum({b} * {b}) * 0.1",
)


@dataclass
class LoopProgram:
    seed: int
    form: str
    n: int
    steps: int
    body: str  # an expression of c, x, w, W (and p, the previous carry, in two_back)

    def source(self) -> str:
        body, t = self.body, self.steps
        if self.form == "python":
            loop = f"for t in range({t}):\n    x = xs[t]\n    c = {body}"
        elif self.form == "two_back":
            loop = f"p = c * 0.5\nfor t in range({t}):\n    x = xs[t]\n    c, p = {body}, c"
        elif self.form == "fori":
            loop = (
                f"def step(t, c):\n    x = xs[t]\n    return {body}\n\n"
                f"c = tg.fori_loop(0, {t}, step, c)"
            )
        elif self.form == "scan":
            loop = (
                f"def step(c, x):\n    c = {body}\n    return c, np.sum(c * x)\n\n"
                f"c, ys = tg.scan(step, c, xs)\nc = c + 0.1 * np.sum(ys * K[: len(ys)])"
            )
        elif self.form == "while":
            loop = (
                f"def more(state):\n    return state[0] < {t}\n\n"
                f"def step(state):\n    t, c = state\n    x = xs[t]\n    return t + 1, {body}\n\n"
                f"_, c = tg.while_loop(more, step, (0, c))"
            )
        else:  # nested
            loop = (
                f"def inner(c, x):\n    return {body}, None\n\n"
                f"def outer(k, c):\n    c, _ = tg.scan(inner, c, xs * (1.0 + 0.1 * k))\n"
                f"    return c\n\n"
                f"c = tg.fori_loop(0, 2, outer, c)"
            )
        weights = ", ".join(f"{0.3 * (k + 1) - 0.5:.2f}" for k in range(max(self.n, self.steps)))
        return (
            "import numpy as np\nimport tracegrad as tg\n\n"
            f"K = np.array([{weights}])\n\n\n"
            "def f(w, W, c0, xs):\n"
            "    c = c0\n"
            f"{textwrap.indent(loop, '    ')}\n"
            f"    return np.sum(c * K[: {self.n}])\n"
        )

    def function(self):
        env: dict = {}
        exec(compile(self.source(), f"<loop program {self.seed}>", "exec"), env)
        return env["f"]

    def arguments(self) -> list[np.ndarray]:
        rng = np.random.default_rng(self.seed + 1)
        n, t = self.n, self.steps
        return [
            rng.uniform(-1, 1, size=n),
            rng.uniform(-1, 1, size=(n, n)),
            rng.uniform(-1, 1, size=n),
            rng.uniform(-1, 1, size=(t, n)),
        ]


def _expression(rng, names: list[str], depth: int) -> str:
    if depth == 0 or rng.random() < 0.2:
        return str(rng.choice(names))
    if rng.random() < 0.5:
        return str(rng.choice(UNARY)).format(a=f"({_expression(rng, names, depth - 1)})")
    a, b = _expression(rng, names, depth - 1), _expression(rng, names, depth - 1)
    return str(rng.choice(BINARY)).format(a=f"({a})", b=f"({b})")


def generate(seed: int, form: str | None = None) -> LoopProgram:
    rng = np.random.default_rng(seed)
    form = form or str(rng.choice(FORMS))
    names = ["c", "x", "w"] + (["p"] if form == "two_back" else [])
    body = _expression(rng, names, int(rng.integers(2, 4)))
    if "c" not in body:  # the carry always feeds the next step
        body = f"{body} + 0.5 * c"
    # a contraction keeps T steps bounded: 0.9 tanh(.) of the body
    body = f"0.9 * np.tanh({body})"
    steps = int(rng.choice([1, 2, 3, 5, 8]))
    return LoopProgram(seed, form, int(rng.choice([1, 2, 3])), steps, body)


def central_differences(fun, args: list[np.ndarray], eps: float = 1e-6) -> list[np.ndarray]:
    """The gradient of scalar fun(*args) by central differences, every argument."""
    grads = []
    for i, a in enumerate(args):
        g = np.zeros(a.shape)
        for idx in np.ndindex(a.shape):
            up = [b.copy() for b in args]
            down = [b.copy() for b in args]
            up[i][idx] += eps
            down[i][idx] -= eps
            g[idx] = (float(fun(*up)) - float(fun(*down))) / (2 * eps)
        grads.append(g)
    return grads


@dataclass
class Failure:
    seed: int
    backend: str
    check: str
    message: str

    def __str__(self) -> str:
        return f"program {self.seed} on {self.backend}, {self.check}: {self.message}"


def check(program: LoopProgram, backend: str, orders: int = 2) -> list[Failure]:
    """The program's value on `backend` against plain NumPy, its gradient (every argument)
    against central differences of the plain function, and (orders >= 2) a Hessian-vector
    product against central differences of the gradient; then (orders >= 3) a third-order
    directional derivative against central differences of the second."""
    import tracegrad as tg

    f = program.function()
    args = program.arguments()
    argnums = tuple(range(len(args)))
    failures: list[Failure] = []

    def fail(what: str, message: str) -> None:
        failures.append(Failure(program.seed, backend, what, message))

    def close(got, want, what: str, rtol: float, atol: float) -> bool:
        got, want = np.asarray(got), np.asarray(want)
        if got.shape != want.shape or not np.allclose(got, want, rtol=rtol, atol=atol):
            err = np.max(np.abs(got - want)) if got.shape == want.shape else "shapes differ"
            fail(what, f"got {got!r}, want {want!r} (max error {err})")
            return False
        return True

    try:
        value = tg.jit(f, backend=backend)(*args)
        if not close(value, f(*args), "value", 1e-12, 1e-12):
            return failures
        grads = tg.grad(f, argnums=argnums, backend=backend)(*args)
        fd = central_differences(f, args)
        for k, (g, want) in enumerate(zip(grads, fd, strict=True)):
            close(g, want, f"grad {k}", 1e-6, 1e-7)
        if orders < 2:
            return failures
        rng = np.random.default_rng(program.seed + 2)
        v = [rng.normal(size=a.shape) for a in args]

        def along(*a):
            gs = tg.grad(f, argnums=argnums, backend="numpy")(*a)
            return sum(np.sum(g * d) for g, d in zip(gs, v, strict=True))

        def along_traced(*a):
            gs = tg.grad(f, argnums=argnums)(*a)
            return sum(np.sum(g * d) for g, d in zip(gs, v, strict=True))

        hvp = tg.grad(along_traced, argnums=argnums, backend=backend)(*args)
        fd = central_differences(along, args, eps=1e-5)
        for k, (g, want) in enumerate(zip(hvp, fd, strict=True)):
            close(g, want, f"hvp {k}", 1e-5, 1e-6)
        if orders < 3:
            return failures
        u = [rng.normal(size=a.shape) for a in args]

        def second(*a):
            hs = tg.grad(along_traced, argnums=argnums, backend="numpy")(*a)
            return sum(np.sum(h * d) for h, d in zip(hs, u, strict=True))

        def second_traced(*a):
            hs = tg.grad(along_traced, argnums=argnums)(*a)
            return sum(np.sum(h * d) for h, d in zip(hs, u, strict=True))

        third = tg.grad(second_traced, argnums=argnums, backend=backend)(*args)
        fd = central_differences(second, args, eps=1e-4)
        for k, (g, want) in enumerate(zip(third, fd, strict=True)):
            close(g, want, f"order 3, {k}", 1e-4, 1e-5)
    except Exception as error:  # a refusal or a crash is a finding too
        fail("raised", f"{type(error).__name__}: {error}")
    return failures
