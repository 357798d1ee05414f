"""The dispatch registry (stage: tracing): the one set of tables a traced NumPy call is looked up
in.

- `UFUNCS`: NumPy's ufuncs by name (`Tracer.__array_ufunc__`; scipy.special's ufuncs too, which
  NumPy dispatches the same way: digamma's ufunc is named psi);
- `FUNCTIONS`: NumPy's functions by name, np.linalg's as "linalg.solve"
  (`Tracer.__array_function__`);
- `HOOKS`: the few operations trace.py's `Tracer` needs from the handler side, by name
  (`HOOK_NAMES` says what each one is).

Each handler registers itself where it is defined (tracegrad/numpy_namespace/, linalg/,
tracing/constructors.py), with the decorator `implements("concatenate")` (as NumPy's NEP 18
guide and jax/_src/numpy do), or with `register(name, handler)` for a handler made by a factory or
a lambda. This module imports none of them: the tables are complete once tracegrad.numpy_namespace
is imported, which every module that calls `trace.trace` does (trace.py itself imports only this
module from the handler side, so the handlers may import trace.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

Handler = TypeVar("Handler", bound=Callable)

UFUNCS: dict[str, Callable] = {}
FUNCTIONS: dict[str, Callable] = {}
HOOKS: dict[str, Callable] = {}

# What trace.py asks the handler side for, and what each hook does.
HOOK_NAMES = {
    "is_basic_index": "whether an index is NumPy's basic indexing (the result is a view)",
    "basic_index": "a static basic index checked against a value (IndexError on its line)",
    "getitem": "x[index] of a value: basic, integer-array or static boolean indexing",
    "setitem": "the value of x after x[index] = value",
    "set_regions": "the value of x after x[index] = value for several basic indices, in order",
    "add_at": "the value of a after np.add.at(a, indices, b)",
    "put_along_axis": "the value of arr after np.put_along_axis(arr, indices, values, axis)",
    "traced_constructors": "a context in which NumPy's constructors accept traced values",
    "random_draws": "a context in which the generators a function reaches record their draws",
    "indexed_plain_array": "NumPy converts a traced index of this plain array: trace again with "
    "the array stood in for where it lives (raises), or return when it cannot be",
    "indexed_plain_array_advice": "what to write instead when no stand-in takes that array",
}

# scipy.special's names among the tables: its ufuncs, and the Python functions logsumexp, softmax
# and log_softmax, which are redirected while tracing (tracing/constructors.py)
SCIPY_SPECIAL = (
    "beta",
    "betainc",
    "betaln",
    "digamma",
    "erf",
    "erfc",
    "erfcinv",
    "erfinv",
    "expit",
    "gamma",
    "gammainc",
    "gammaincc",
    "gammaln",
    "gammasgn",
    "i0",
    "i1",
    "iv",
    "ive",
    "j0",
    "j1",
    "jv",
    "kv",
    "log_ndtr",
    "log_softmax",
    "logit",
    "logsumexp",
    "ndtr",
    "psi",
    "rgamma",
    "softmax",
    "xlog1py",
    "xlogy",
    "y0",
    "y1",
    "yn",
    "yv",
)


def _add(table: dict[str, Callable], name: str, handler: Callable) -> None:
    if name in table:
        raise ValueError(f"tracegrad: {name!r} has a traced handler already ({table[name]!r})")
    table[name] = handler


def register(name: str, handler: Callable) -> None:
    """`handler` is the traced version of NumPy's function `name` ("linalg.solve" for
    np.linalg.solve)."""
    _add(FUNCTIONS, name, handler)


def register_ufunc(name: str, handler: Callable) -> None:
    """`handler` is the traced version of the ufunc named `name` (its `__name__`)."""
    _add(UFUNCS, name, handler)


def implements(*names: str) -> Callable[[Handler], Handler]:
    """Decorator: the decorated function is the traced version of NumPy's functions `names`."""

    def decorate(handler: Handler) -> Handler:
        for name in names:
            register(name, handler)
        return handler

    return decorate


def implements_ufunc(*names: str) -> Callable[[Handler], Handler]:
    """Decorator: the decorated function is the traced version of the ufuncs `names`."""

    def decorate(handler: Handler) -> Handler:
        for name in names:
            register_ufunc(name, handler)
        return handler

    return decorate


def provides(hook: str) -> Callable[[Handler], Handler]:
    """Decorator: the decorated function is the hook `hook` (one of `HOOK_NAMES`)."""
    if hook not in HOOK_NAMES:
        raise ValueError(f"tracegrad: no hook named {hook!r}")

    def decorate(handler: Handler) -> Handler:
        _add(HOOKS, hook, handler)
        return handler

    return decorate


def supported() -> list[str]:
    """The NumPy names users may look up (docs/api.md lists them): every ufunc and function in the
    tables, less scipy.special's."""
    return sorted((set(UFUNCS) | set(FUNCTIONS)) - set(SCIPY_SPECIAL))
