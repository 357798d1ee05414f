"""`check_grads` on tracegrad: the checks autograd's makes, in tracegrad's complex convention.

For a function f at x, with random directions x_v (like x) and y_v (like f(x)), complex where the
space is complex:
- reverse mode: Re(sum(x_v * vjp(y_v))) against Re(sum(y_v * jvp_numeric(x_v))), where
  jvp_numeric is the central difference (f(x + eps/2 x_v) - f(x - eps/2 x_v)) / eps: the VJP is
  the transpose of the JVP under the bilinear pairing <a, b> = Re(sum(a * b)) (no conjugate);
- forward mode: tracegrad's JVP against jvp_numeric, through a random inner product;
- the value: tracegrad's f(x) against f(x) run directly;
- order k > 1: the same checks of x, v -> vjp(v) and x, v -> jvp(v), to order k - 1.
"""

from __future__ import annotations

import itertools
import numbers

import numpy as np
import tracegrad as tg

from .core import dtype_of
from .core import make_jvp as _make_jvp
from .core import make_vjp as _make_vjp
from .wrap_util import get_name, unary_to_nary

TOL = 1e-6
RTOL = 1e-6
EPS = 1e-6


def scalar_close(a, b) -> bool:
    return abs(a - b) < TOL or abs(a - b) / abs(a + b) < RTOL


def _is_complex(leaf) -> bool:
    return np.issubdtype(dtype_of(leaf), np.complexfloating)


def randn_like(value):
    """A random value of the space of `value`: same containers, shapes and real/complex kind."""

    def one(leaf):
        shape = np.shape(leaf)
        r = np.asarray(np.random.randn(*shape))
        if _is_complex(leaf):
            r = r + 1j * np.random.randn(*shape)
        if isinstance(leaf, numbers.Number) and not isinstance(leaf, np.generic):
            return complex(r) if _is_complex(leaf) else float(r)
        return r.astype(np.result_type(dtype_of(leaf), np.float64), copy=False)

    return tg.tree_map(one, value)


def _combine(a, b, alpha, beta):
    return tg.tree_map(lambda p, q: alpha * p + beta * q, a, b)


def inner(a, b) -> float:
    """The bilinear real pairing Re(sum(a * b)) over every leaf."""
    a_leaves, a_tree = tg.tree_flatten(a)
    b_leaves, b_tree = tg.tree_flatten(b)
    if a_tree != b_tree:
        raise AssertionError(f"Structure mismatch:\nx: {a_tree}\ny: {b_tree}")
    return float(
        sum(
            np.real(np.sum(np.asarray(p) * np.asarray(q)))
            for p, q in zip(a_leaves, b_leaves, strict=True)
        )
    )


def _space(value):
    leaves, tree = tg.tree_flatten(value)
    return tree, [(np.shape(a), _is_complex(a)) for a in leaves]


def same_space(a, b, what: str) -> None:
    sa, sb = _space(a), _space(b)
    assert sa == sb, f"{what}: space mismatch (structure, shapes, complex):\nx: {sa}\ny: {sb}"


def make_numerical_jvp(f, x):
    def jvp(v):
        plus = f(_combine(x, v, 1.0, EPS / 2))
        minus = f(_combine(x, v, 1.0, -EPS / 2))
        return _combine(plus, minus, 1.0 / EPS, -1.0 / EPS)

    return jvp


def check_value(f, x, y):
    """tracegrad's value of f(x) (from its vjp or jvp) against f(x) run as plain NumPy (at the
    first order; at higher orders f is itself a tracegrad derivative), through a random inner
    product: a wrong value with a consistent derivative would pass the derivative checks."""
    direct = f(x)
    same_space(y, direct, f"value of {get_name(f)}")
    v = randn_like(direct)
    a, b = inner(y, v), inner(direct, v)
    assert scalar_close(a, b), (
        f"Value check of {get_name(f)} failed with arg {x}:\nanalytic: {a}\nnumeric:  {b}"
    )


def check_vjp(f, x):
    vjp, y = _make_vjp(f, x)
    check_value(f, x, y)
    jvp = make_numerical_jvp(f, x)
    x_v, y_v = randn_like(x), randn_like(y)
    vjp_y = vjp(y_v)
    same_space(vjp_y, x, f"VJP of {get_name(f)}")
    vjv_exact = inner(x_v, vjp_y)
    vjv_numeric = inner(y_v, jvp(x_v))
    assert scalar_close(vjv_numeric, vjv_exact), (
        f"Derivative (VJP) check of {get_name(f)} failed with arg {x}:\n"
        f"analytic: {vjv_exact}\nnumeric:  {vjv_numeric}"
    )


def check_jvp(f, x):
    jvp = _make_jvp(f, x)
    x_v = randn_like(x)
    value, exact = jvp(x_v)
    check_value(f, x, value)
    numeric = make_numerical_jvp(f, x)(x_v)
    same_space(exact, numeric, f"JVP of {get_name(f)}")
    v = randn_like(exact)
    a, b = inner(exact, v), inner(numeric, v)
    assert scalar_close(a, b), (
        f"Derivative (JVP) check of {get_name(f)} failed with arg {x}:\n"
        f"analytic: {a}\nnumeric:  {b}"
    )


def check_equivalent(x, y):
    same_space(x, y, "check_equivalent")
    v = randn_like(x)
    assert scalar_close(inner(x, v), inner(y, v)), f"Value mismatch:\nx: {x}\ny: {y}"


@unary_to_nary
def check_grads(f, x, modes=None, order=2):
    modes = ["fwd", "rev"] if modes is None else modes
    if not all(m in ("fwd", "rev") for m in modes):
        raise ValueError(f"modes must be 'fwd' and/or 'rev', got {modes!r}")
    name = get_name(f)
    if "fwd" in modes:
        check_jvp(f, x)
        if order > 1:

            def jvp_f(x, v):
                return _make_jvp(f, x)(v)[1]

            jvp_f.__name__ = f"jvp_{name}"
            check_grads(jvp_f, (0, 1), modes, order=order - 1)(x, randn_like(x))
    if "rev" in modes:
        check_vjp(f, x)
        if order > 1:

            def vjp_f(x, v):
                return _make_vjp(f, x)[0](v)

            vjp_f.__name__ = f"vjp_{name}"
            check_grads(vjp_f, (0, 1), modes, order=order - 1)(x, randn_like(f(x)))


def combo_check(fun, *args, **kwargs):
    """check_grads over every combination of the given argument and keyword values."""

    def run(*arg_lists, **kwarg_lists):
        keys = list(kwarg_lists)
        for chosen in itertools.product(*arg_lists):
            for values in itertools.product(*(kwarg_lists[k] for k in keys)):
                check_grads(fun, *args, **kwargs)(*chosen, **dict(zip(keys, values, strict=True)))

    return run
