"""Random programs with Python branches on traced values (tracing/branches.py), by hypothesis.

A program is a plain NumPy function of a vector x: a few statements that update an intermediate
`h`, of which one to three are data-dependent Python control flow (if/else, if/elif/else, an if
without else, and/or chains, a break out of a short for loop, an int() of a traced value used as
a list index) whose predicates compare reductions or elements of `h` (and of x) with random
thresholds, choosing between random elementwise expressions. One `tg.jit` and one
`tg.value_and_grad` are called on a sequence of random inputs (forth, then back), so that the
guards flip between calls, and compared with the plain function (values, tight tolerance) and
with central differences of it (gradients, loose tolerance; skipped where a difference step
takes another branch). Each object traces at most once per distinct outcome of the program's
branches, and not at all on the way back.

The outcomes and the predicate margins come from a second rendering of the same program in which
each predicate is recorded as it is evaluated (plain NumPy, no tracegrad).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracegrad as tg

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

N = 3  # the length of x

# Elementwise expressions of h (and x); c is a random coefficient.
EXPRESSIONS = [
    "np.sin(h) * {c}",
    "np.cos(h) + {c} * x",
    "np.tanh(h + {c})",
    "h * np.tanh(h) * {c}",
    "h * x + {c}",
    "np.exp({c} * np.tanh(h))",
    "h + {c} * x",
    "np.sqrt(h * h + 1.0) * {c}",
    "np.log1p(h * h) - {c} * h",
    "h * {c}",
]

# Scalars of h (and x) that predicates compare with thresholds.
PREDICATES = [
    "np.sum(h)",
    "h[{k}]",
    "np.max(h)",
    "np.mean(h * h)",
    "np.sum(h * x)",
    "h[{k}] - h[{j}]",
    "np.min(h + x)",
]

coefficients = st.sampled_from([-1.5, -1.0, -0.7, -0.3, 0.3, 0.5, 0.8, 1.2, 2.0])
thresholds = st.sampled_from([-0.8, -0.4, -0.1, 0.0, 0.1, 0.25, 0.5, 0.9])
operators = st.sampled_from([">", "<", ">=", "<="])


@st.composite
def expression(draw) -> str:
    return draw(st.sampled_from(EXPRESSIONS)).format(c=draw(coefficients))


@st.composite
def comparison(draw) -> tuple[str, str, float]:
    predicate = draw(st.sampled_from(PREDICATES))
    k, j = draw(st.integers(0, N - 1)), draw(st.integers(0, N - 1))
    return predicate.format(k=k, j=j), draw(operators), draw(thresholds)


@st.composite
def condition(draw) -> list:
    """A list [comparison, 'and'/'or', comparison, ...] of one to two comparisons."""
    parts = [draw(comparison())]
    if draw(st.booleans()) and draw(st.booleans()):
        parts += [draw(st.sampled_from(["and", "or"])), draw(comparison())]
    return parts


@st.composite
def branch(draw) -> tuple:
    kind = draw(st.sampled_from(["if-else", "if", "if-elif-else", "break", "index"]))
    if kind == "if-else":
        return kind, draw(condition()), draw(expression()), draw(expression())
    if kind == "if":
        return kind, draw(condition()), draw(expression())
    if kind == "if-elif-else":
        return (
            kind,
            draw(condition()),
            draw(expression()),
            draw(condition()),
            draw(expression()),
            draw(expression()),
        )
    if kind == "break":
        return kind, draw(condition()), draw(expression()), draw(st.integers(2, 4))
    predicate, _, _ = draw(comparison())
    return kind, predicate, draw(st.sampled_from([1.0, 1.5, 2.5]))


@st.composite
def program(draw) -> list:
    """Statements: one to three branches, with plain assignments between them."""
    statements = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            statements.append(("assign", draw(expression())))
        statements.append(draw(branch()))
    if draw(st.booleans()):
        statements.append(("assign", draw(expression())))
    return statements


# ---------------------------------------------------------------------------------------------
# Rendering: the plain function, and the same with every predicate recorded


def _test(parts: list, recorded: bool) -> str:
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        elif recorded:
            predicate, op, t = part
            out.append(f"_r({predicate}, {op!r}, {t!r})")
        else:
            predicate, op, t = part
            out.append(f"({predicate}) {op} {t!r}")
    return " ".join(out)


def source(statements: list, recorded: bool) -> str:
    name = "recorded" if recorded else "f"
    lines = [f"def {name}(x):", "    h = x * 1.0"]
    for st_ in statements:
        kind = st_[0]
        if kind == "assign":
            lines.append(f"    h = {st_[1]}")
        elif kind == "if-else":
            _, cond, a, b = st_
            lines += [f"    if {_test(cond, recorded)}:", f"        h = {a}", "    else:"]
            lines.append(f"        h = {b}")
        elif kind == "if":
            _, cond, a = st_
            lines += [f"    if {_test(cond, recorded)}:", f"        h = {a}"]
        elif kind == "if-elif-else":
            _, c1, a, c2, b, c = st_
            lines += [f"    if {_test(c1, recorded)}:", f"        h = {a}"]
            lines += [f"    elif {_test(c2, recorded)}:", f"        h = {b}"]
            lines += ["    else:", f"        h = {c}"]
        elif kind == "break":
            _, cond, a, trips = st_
            lines += [f"    for _ in range({trips}):", f"        if {_test(cond, recorded)}:"]
            lines += ["            break", f"        h = {a}"]
        else:  # "index": int() of a traced value picks an element of x
            _, predicate, scale = st_
            value = f"np.abs(np.tanh({predicate})) * {scale!r}"
            index = f"_ri({value})" if recorded else f"int({value})"
            lines.append(f"    h = h + x[{index}] * h")
    lines.append("    return np.sum(h * np.array([1.0, -0.5, 0.75])) + 0.1 * np.sum(h * h)")
    return "\n".join(lines) + "\n"


class Recorder:
    """Runs the recorded rendering: the outcomes of a call's branches, and the distance of each
    predicate from its boundary."""

    def __init__(self, statements: list):
        self.events: list[tuple] = []
        namespace = {"np": np, "_r": self._compare, "_ri": self._int}
        exec(compile(source(statements, True), "<recorded program>", "exec"), namespace)
        self.fun = namespace["recorded"]

    def _compare(self, value, op, t):
        value = np.float64(value)
        outcome = {">": value > t, "<": value < t, ">=": value >= t, "<=": value <= t}[op]
        self.events.append((bool(outcome), abs(float(value) - t)))
        return outcome

    def _int(self, value):
        value = float(value)
        fraction = value - np.floor(value)
        self.events.append((int(value), min(fraction, 1.0 - fraction)))
        return int(value)

    def __call__(self, x) -> tuple[tuple, float]:
        """(outcomes, smallest margin) of the plain program on x."""
        self.events = []
        self.fun(x)
        outcomes = tuple(o for o, _ in self.events)
        return outcomes, min((m for _, m in self.events), default=np.inf)


def instantiate(statements: list):
    namespace = {"np": np}
    exec(compile(source(statements, False), "<fuzz branch program>", "exec"), namespace)
    return namespace["f"]


# ---------------------------------------------------------------------------------------------
# The check


def central_differences(f, recorder, x, eps=1e-6):
    """The gradient of f by central differences, or None when a step takes another branch."""
    outcomes, _ = recorder(x)
    g = np.zeros_like(x)
    for i in range(x.size):
        h = eps * max(1.0, abs(x[i]))
        up, down = x.copy(), x.copy()
        up[i] += h
        down[i] -= h
        if recorder(up)[0] != outcomes or recorder(down)[0] != outcomes:
            return None
        g[i] = (f(up) - f(down)) / (2 * h)
    return g


def _atol(fd: np.ndarray) -> float:
    return 1e-6 * max(1.0, float(np.max(np.abs(fd))))


def check(statements: list, seed: int, backend: str, n_inputs: int) -> dict:
    f = instantiate(statements)
    recorder = Recorder(statements)
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(N) * rng.choice([0.5, 1.0, 2.0]) for _ in range(n_inputs)]
    jitted = tg.jit(f, backend=backend)
    value_and_grad = tg.value_and_grad(f, backend=backend)
    outcomes = set()
    counted = {"values": 0, "gradients": 0}
    program_text = source(statements, False)
    for i, x in enumerate(inputs + inputs[::-1]):
        expected = f(x)
        path, margin = recorder(x)
        outcomes.add(path)
        context = f"\n{program_text}\nx = {x.tolist()!r}, outcomes {path}"
        if margin > 1e-9:  # the trace answers as plain NumPy does, bar a rounding
            scale = max(1.0, abs(expected))
            np.testing.assert_allclose(
                jitted(x), expected, rtol=1e-12, atol=1e-12 * scale, err_msg=context
            )
            value, g = value_and_grad(x)
            np.testing.assert_allclose(
                value, expected, rtol=1e-12, atol=1e-12 * scale, err_msg=context
            )
            counted["values"] += 1
            if margin > 1e-6:
                # two steps: the larger one's truncation error is the smaller one's rounding
                fds = [central_differences(f, recorder, x, eps) for eps in (1e-6, 1e-7)]
                fds = [fd for fd in fds if fd is not None]
                if fds:
                    errors = [
                        np.max(np.abs(g - fd) / (1e-5 * np.abs(fd) + _atol(fd))) for fd in fds
                    ]
                    assert min(errors) <= 1.0, f"gradient {g} vs differences {fds}{context}"
                    counted["gradients"] += 1
        if i == n_inputs - 1:
            assert jitted.trace_count <= len(outcomes), context
            assert value_and_grad.trace_count <= len(outcomes), context
            traced = (jitted.trace_count, value_and_grad.trace_count)
    if n_inputs:
        assert (jitted.trace_count, value_and_grad.trace_count) == traced, program_text
    counted["outcomes"] = len(outcomes)
    return counted


FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@FUZZ
@given(statements=program(), seed=st.integers(0, 2**16))
def test_random_branching_programs_numpy(statements, seed):
    check(statements, seed, "numpy", n_inputs=6)


@settings(FUZZ, max_examples=3)
@given(statements=program(), seed=st.integers(0, 2**16))
def test_random_branching_programs_cpu(statements, seed):
    check(statements, seed, "cpu", n_inputs=4)


def test_the_generator_makes_guards_flip():
    """Across a fixed set of programs, most take more than one outcome on their inputs (else
    the fuzz test above would check little)."""
    flipped = []

    @settings(FUZZ, max_examples=30)
    @given(statements=program(), seed=st.integers(0, 2**16))
    def run(statements, seed):
        flipped.append(check(statements, seed, "numpy", n_inputs=6)["outcomes"] > 1)

    run()
    assert sum(flipped) >= len(flipped) // 2, flipped


def test_a_rendered_program_reads_as_written():
    statements = [
        ("assign", "h * 0.5"),
        ("if-else", [("np.sum(h)", ">", 0.1)], "np.sin(h) * 2.0", "h * h * 0.3"),
        ("index", "h[0]", 2.5),
    ]
    text = source(statements, False)
    assert "if (np.sum(h)) > 0.1:" in text and "x[int(np.abs(np.tanh(h[0])) * 2.5)]" in text
    f, recorder = instantiate(statements), Recorder(statements)
    x = np.array([1.0, 0.2, -0.3])
    outcomes, margin = recorder(x)
    assert outcomes[0] is True and margin > 0
    np.testing.assert_allclose(tg.jit(f, backend="numpy")(x), f(x), rtol=1e-13)
