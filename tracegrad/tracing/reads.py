"""Values a traced function may reach that tracing must treat with care.

Library modules (whose values do not change under a running program and are not walked), the
random-number generators whose unrecorded draws a trace refuses, and ndarray subclasses whose semantics a
plain trace would drop.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

import numpy as np

_LIBRARIES = ("numpy", "tracegrad", "numba", "scipy", "llvmlite", "math", "builtins")


def is_library_module(name: str | None) -> bool:
    """Modules whose functions and values do not change under a running program: NumPy,
    tracegrad, the standard library. Everything else (the user's `__main__`, notebooks, their
    own packages) is walked."""
    if not name:
        return False
    top = name.split(".")[0]
    if top in _LIBRARIES:
        return True
    file = getattr(sys.modules.get(top), "__file__", None)
    if top not in sys.stdlib_module_names:
        # an installed third-party package (matplotlib, PIL): walking it would guard its
        # internals, which change on their own. A user's package installed in editable mode,
        # or on sys.path from its folder, lives elsewhere and is walked.
        return file is not None and any(folder in file for folder in _INSTALLED)
    # a user's own module can share a standard name (a package called `test`): check the file
    return file is None or os.path.abspath(file).startswith(_stdlib())


# an installed package's files lie in a folder of this name (dist-packages: Debian's Python);
# read from the path alone, since sysconfig's folders cost a millisecond to ask for on a warm start
_INSTALLED = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")


@functools.cache
def _stdlib() -> str:
    import sysconfig  # looked up on first use: `import tracegrad` does not need it

    return os.path.abspath(sysconfig.get_paths()["stdlib"])


_random_types: tuple[type, ...] = ()


def generator_types() -> tuple[type, ...]:
    """NumPy's generator classes, or () while numpy.random is not imported: no generator can
    exist before, and `import tracegrad` does not import it (it costs 5-10 ms)."""
    global _random_types
    if not _random_types:
        # all three, or none yet: another thread may be running numpy.random's module body
        random = sys.modules.get("numpy.random")
        found = tuple(
            getattr(random, n, None) for n in ("Generator", "RandomState", "BitGenerator")
        )
        if None not in found:
            _random_types = found
    return _random_types


def global_random(imported: bool = False) -> Any:
    """NumPy's global generator (np.random.normal...): None while numpy.random is not imported,
    unless `imported` asks for it anyway."""
    if not imported and "numpy.random" not in sys.modules:
        return None
    return np.random.mtrand._rand


def _generator_state(generator: Any) -> bytes:
    """A comparable snapshot of a generator's state (it changes with every number drawn)."""
    bits = generator if isinstance(generator, np.random.BitGenerator) else None
    if bits is None:
        bits = getattr(generator, "bit_generator", None) or generator._bit_generator
    return _state_bytes(bits.state)


def _state_bytes(state: Any) -> bytes:
    if isinstance(state, dict):
        return (
            b"{"
            + b",".join(repr(k).encode() + b":" + _state_bytes(v) for k, v in state.items())
            + b"}"
        )
    if isinstance(state, np.ndarray):
        return state.tobytes()
    return repr(state).encode()


def snapshot_random_sources(scope: Any) -> list[tuple[str, Any, bytes]]:
    if scope is None:
        return []
    return [(what, g, _generator_state(g)) for what, g in scope.random_sources()]


def check_random_sources(
    snapshot: list[tuple[str, Any, bytes]], function: str, fix_line: str
) -> None:
    """Refuse a trace that drew random numbers from a generator that outlives the call in a way
    tracing did not record (random_draws.py records the draw methods of a generator reached by
    name): the compiled program would return those same numbers on every call."""
    from ..base.errors import TracingError

    for what, generator, before in snapshot:
        if _generator_state(generator) != before:
            raise TracingError(
                f"{function} drew random numbers from {what} while it was traced{fix_line}, in a "
                "way tracegrad does not record (through its bit generator, or reached through "
                "a tuple, a property or another place that cannot hold a stand-in); the compiled "
                "program would return the same numbers on every call. Call the generator's draw "
                "methods (rng.normal(...), rng.integers(...)) on a generator the function reaches "
                "by name (a global, a closure variable, an attribute, a static argument), or draw "
                "the numbers outside the function and pass them in as an argument."
            )


def refuse_array_subclass(value: Any, what: str) -> None:
    """Masked arrays and other ndarray subclasses that change NumPy's semantics are refused:
    reading them as plain arrays would silently drop what makes them different."""
    t = type(value)
    if t is np.ndarray or not isinstance(value, np.ndarray) or hasattr(t, "_tracegrad_current"):
        return  # plain, not an array, or a fillable.Fillable (plain NumPy semantics)
    if isinstance(value, np.ma.MaskedArray):
        raise TypeError(
            f"{what} is a masked array (numpy.ma); tracegrad would ignore its mask. Pass "
            "m.filled(value) for a plain array, or the data and the mask as two arrays and "
            "use np.where(mask, ..., ...) in the function."
        )
    changes = (
        t.__array_ufunc__ is not np.ndarray.__array_ufunc__
        or t.__array_function__ is not np.ndarray.__array_function__
        or isinstance(value, np.matrix)
    )
    if changes:
        raise TypeError(
            f"{what} is a {t.__module__}.{t.__name__}, an ndarray subclass with its own "
            "arithmetic; tracegrad computes with plain NumPy semantics. Convert it with "
            "np.asarray(...) first if plain array semantics are what you mean."
        )
