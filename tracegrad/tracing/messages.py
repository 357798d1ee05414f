"""What tracing says when the user's code asks a traced value for something a trace cannot give.

- `Unknowable`, a base of `Tracer`: `bool()`, `float()`, `.item()`, `np.asarray(...)` of a traced
  value, whose value is not known while tracing, raise a `TracingError` naming the user's line
  and what to write instead (`np.where`, `tg.cond`, `tg.while_loop`, static arguments);
- NumPy functions with no traced version (`unsupported`), and `math` functions called on a
  traced value, say what to use instead.
"""

from __future__ import annotations

import ast
import linecache
import math
import sys

import numpy as np

from ..base.errors import TracingError
from .dispatch import FUNCTIONS, HOOKS, UFUNCS
from .source import (
    line_calls,
    line_has,
    line_list_argument,
    subscripted_value,
    user_frame,
    user_line,
    writes_into_subscript,
)

# What to use instead of NumPy functions that have no traced version, by meaning. Names not listed
# get a plain "not supported yet": NumPy dispatches only real NumPy functions here, so the name is
# never a typo, and a spelling guess would only mislead.
_INSTEAD = {
    "matrix_transpose": "np.swapaxes(x, -1, -2) or x.mT",
    "permute_dims": "np.transpose",
    "concat": "np.concatenate",
    # as many indices as nonzero elements: a shape that depends on the values
    "nonzero": "np.where(condition, a, b) (the full shape; np.sum(np.where(c, x, 0)) to reduce)",
    "argwhere": "np.where(condition, a, b) (the full shape; np.sum(np.where(c, x, 0)) to reduce)",
    "flatnonzero": "np.where(condition, a, b) (the full shape; np.sum(np.where(c, x, 0)) to reduce)",
}


# The distributions of tracegrad.scipy.stats (tests/test_scipy_stats.py checks the list).
TRACED_STATS = (
    "bernoulli",
    "beta",
    "cauchy",
    "chi2",
    "dirichlet",
    "expon",
    "gamma",
    "laplace",
    "logistic",
    "multivariate_normal",
    "norm",
    "poisson",
    "t",
)


def scipy_stats_hint() -> str | None:
    """When scipy.stats is converting a traced value (its functions call np.asarray on their
    arguments), what to use instead: tracegrad.scipy.stats' version; None when the conversion
    does not come from scipy.stats."""
    frame, inside, distribution, method = sys._getframe(1), False, None, None
    while frame is not None:
        if frame.f_globals.get("__name__", "").startswith("scipy.stats"):
            inside = True
            name = getattr(frame.f_locals.get("self"), "name", None)
            if isinstance(name, str):  # a distribution's method: the outermost is the user's call
                distribution, method = name, frame.f_code.co_name
        elif inside:
            break
        frame = frame.f_back
    if not inside:
        return None
    called = f"scipy.stats.{distribution}.{method}" if distribution else "scipy.stats"
    advice = f"{called} converts its arguments with np.asarray, so it cannot run on traced values. "
    if distribution in TRACED_STATS:
        return advice + (
            f"Use tracegrad.scipy.stats.{distribution}.{method} instead (import "
            "tracegrad.scipy.stats as tstats), which is written in traced NumPy calls."
        )
    return advice + (
        "tracegrad.scipy.stats has traced versions of " + ", ".join(TRACED_STATS) + "; write "
        "other densities with np.* calls and tracegrad.scipy.special."
    )


def unsupported(name: str):
    instead = _INSTEAD.get(name.removeprefix("np."))
    hint = f"Use {instead} instead. " if instead else ""
    raise TracingError(
        f"{name} is not supported on traced values yet{user_line()}\n{hint}"
        "The supported functions are listed in docs/api.md."
    )


# Python's math functions and their NumPy twins (traced); math's own work on Python numbers only.
_MATH_TWINS = {
    "acos": "arccos",
    "acosh": "arccosh",
    "asin": "arcsin",
    "asinh": "arcsinh",
    "atan": "arctan",
    "atan2": "arctan2",
    "atanh": "arctanh",
    "pow": "power",
    "fsum": "sum",
}


def math_call_error() -> None:
    """If the user's line is calling a `math` function on this traced value, say which np.*
    function to use instead (math.exp(x) asks the tracer for a float: it cannot be a number)."""
    frame = user_frame()
    if frame is None:
        return
    name = _called_math_function(frame)
    if name is None:
        return
    twin = _MATH_TWINS.get(name, name)
    supported = twin in FUNCTIONS or twin in UFUNCS
    if supported:
        advice = f"use its NumPy twin np.{twin}, which works on traced values"
    elif hasattr(np, twin):
        advice = f"its NumPy twin np.{twin} is not supported on traced values yet"
    else:
        advice = "NumPy has no twin of it that tracegrad supports"
    raise TracingError(
        f"math.{name} works on Python numbers only and cannot take a traced value: {advice}."
        f"{user_line()}"
    )


def _called_math_function(frame) -> str | None:
    """The name of the `math` function called by the frame's current instruction: the call's
    source span (Python >= 3.11 records it per instruction) names the callee, looked up in the
    frame's namespaces without running anything. None when it is not a `math` function."""
    try:
        line, end_line, col, end_col = list(frame.f_code.co_positions())[frame.f_lasti // 2]
        lines = [linecache.getline(frame.f_code.co_filename, n) for n in range(line, end_line + 1)]
        lines[-1] = lines[-1][:end_col]
        lines[0] = lines[0][col:]
        call = ast.parse("".join(lines).strip(), mode="eval").body
    except (AttributeError, IndexError, TypeError, ValueError, SyntaxError):
        return None
    if not isinstance(call, ast.Call):
        return None
    names, callee = [], call.func
    while isinstance(callee, ast.Attribute):
        names.insert(0, callee.attr)
        callee = callee.value
    if not isinstance(callee, ast.Name):
        return None
    namespaces = (frame.f_locals, frame.f_globals, frame.f_builtins)
    obj = next((ns[callee.id] for ns in namespaces if callee.id in ns), None)
    for name in names:
        obj = getattr(obj, name, None)
    name = getattr(obj, "__name__", None)
    return name if isinstance(name, str) and getattr(math, name, None) is obj else None


def function_name(func) -> str:
    module = getattr(func, "__module__", "numpy") or "numpy"
    name = func.__name__
    for sub in ("linalg", "fft"):  # numpy.linalg.solve -> linalg.solve
        if module.startswith(f"numpy.{sub}"):
            return f"{sub}.{name}"
    return name


def _write_into_numpy_array_error():
    raise TracingError(
        "tracegrad cannot write a traced value into this NumPy array: it is a plain NumPy "
        "array, made outside the traced function (a global, a closure variable, an argument's "
        "attribute) or computed by NumPy from such arrays only (y = X * 1.0 with X a global), "
        f"so it cannot hold one.{user_line()}\nMake the array inside the function from a "
        "traced constructor: y = np.zeros(n) (or np.ones, np.empty, np.full, np.copy(a), "
        "np.zeros_like(a)), and then y[...] = ... works as in NumPy."
    )


class Unknowable:
    """A base of `Tracer`: what a traced value cannot be asked, its value unknown while tracing."""

    __slots__ = ()

    def _concrete(self, what: str):
        if writes_into_subscript():
            _write_into_numpy_array_error()
        reason = getattr(getattr(self, "builder", None), "no_branching", None)
        if reason is not None:
            raise TracingError(
                f"tracegrad cannot {what} a traced value {reason}{user_line()}\nChoose "
                "elementwise with np.where(condition, a, b), or run one of two functions with "
                "tg.cond(pred, true_fun, false_fun, *operands)."
            )
        raise TracingError(
            f"tracegrad cannot {what} a traced value: its value is not known while tracing."
            f"{user_line()}\nInstead of Python control flow on traced values use "
            "np.where(condition, a, b) to choose elementwise, tg.cond(pred, true_fun, false_fun, "
            "*operands) to run one of two functions, or tg.while_loop(cond_fun, body_fun, init) "
            "for a loop that runs until a traced condition fails; or pass the value as a static "
            "argument (static_argnums)."
        )

    def __bool__(self):
        self._concrete("branch on (bool() of)")

    def __float__(self):
        math_call_error()
        self._concrete("convert to float")

    def __int__(self):
        math_call_error()
        self._concrete("convert to int")

    def __index__(self):
        math_call_error()
        self._concrete("use as an index")

    def __complex__(self):
        self._concrete("convert to complex")

    def __round__(self, ndigits=None):
        raise TracingError(
            f"round() of a traced value would be a Python number, unknown while tracing"
            f"{user_line()}\nUse np.round(x) (or np.round(x, decimals)), which is traced."
        )

    def __format__(self, spec):
        if not spec:
            return repr(self)
        raise TracingError(
            f"a traced value cannot be formatted with {spec!r}: its value is not known while "
            f"tracing{user_line()}\nPrint it with tg.debug_print('x = {{}}', x), which prints "
            "the value each time the compiled function runs."
        )

    def item(self, *args):
        self._concrete("read a Python number from (.item())")

    def tolist(self):
        self._concrete("convert to a list (.tolist())")

    def __array__(self, *args, **kwargs):
        if writes_into_subscript():  # `y[1:3] = v`: NumPy converts v to write it into y
            _write_into_numpy_array_error()
        indexed = subscripted_value()  # `X[i]`: NumPy converts the traced index i itself
        if isinstance(indexed, np.ndarray):  # traces again with X taking traced indices, if it can
            HOOKS["indexed_plain_array"](indexed)
        advice = (
            "Call np.* functions on it directly (they are traced), and convert results outside "
            "the decorated function."
        )
        if (stats := scipy_stats_hint()) is not None:
            advice = stats
        elif line_calls(("array", "asarray", "asanyarray", "full", "zeros", "ones", "empty")):
            advice += (
                " NumPy's array constructors do not pass traced values to tracegrad: build the "
                "array with np.stack([a, b, ...]) (or np.full_like(x, a, shape=...) for a fill)."
            )
        elif (listed := line_list_argument()) is not None:
            # ufuncs and the functions NumPy writes in C convert a list themselves (constructors.py)
            advice = (
                f"{listed} does not pass the traced values in a list (or tuple) to tracegrad: "
                f"NumPy converts the list itself. Build the array first: {listed}(np.stack([a, "
                "b, ...])) (np.array([a, b, ...]) works too). The traced NumPy functions written "
                "in Python (np.sum, np.mean, np.max, np.linalg.norm, ...) take such a list as it "
                "is; ufuncs (np.exp, ...) and np.dot, np.inner, np.vdot, np.where take it only "
                "beside a traced argument."
            )
            name = listed.split(".", 1)[1] if listed.startswith(("np.", "numpy.")) else None
            if name is not None and name not in FUNCTIONS and name not in UFUNCS:
                advice += f" ({listed} itself is not supported on traced values yet.)"
        elif isinstance(indexed, np.ndarray):
            advice = HOOKS["indexed_plain_array_advice"](indexed).lstrip()
        elif line_has(ast.Subscript):
            advice += (
                " A NumPy array cannot be indexed by a traced value (NumPy does not pass the "
                "indices to tracegrad, not even through np.take): make the array a traced value "
                "first, for example by passing it as an argument of the transformed function."
            )
        raise TracingError(
            "tracegrad cannot convert a traced value to a NumPy array while tracing."
            f"{user_line()}\n{advice}"
        )
