"""Which attributes of a user's object a trace may read.

The scope walker (tracing/scope.py) guards what a traced function reaches through its globals
and closures. For a user's object it follows the names the code uses, and more where Python
reads attributes the code does not name: special methods run implicitly (`__getattr__`,
`__getitem__`, operators) and lookups by computed names (`getattr(cfg, key)`).
"""

from __future__ import annotations

import types
from typing import Any

from .reads import is_library_module

# Special methods that a trace reading an object never runs: making, copying, showing it, and
# the class's own hooks. Any other that a user's class defines (__getattr__, __getitem__, __len__,
# __mul__...) may run implicitly while tracing, so its code is walked like a function's.
NOT_RUN_BY_READS = frozenset(
    {
        "__call__",  # walked by _attributes itself, as it always was
        "__init__",
        "__new__",
        "__del__",
        "__post_init__",
        "__repr__",
        "__str__",
        "__format__",
        "__dir__",
        "__sizeof__",
        "__init_subclass__",
        "__set_name__",
        "__class_getitem__",
        "__subclasshook__",
        "__reduce__",
        "__reduce_ex__",
        "__getnewargs__",
        "__getnewargs_ex__",
        "__getstate__",
        "__setstate__",
        "__copy__",
        "__deepcopy__",
    }
)

DYNAMIC_LOOKUP = frozenset({"__getattr__", "__getattribute__", "__getitem__"})

# names in code that reads attributes by names computed at run time
DYNAMIC_NAMES = frozenset({"getattr", "vars", "__dict__", "attrgetter"})


def own_names(instance: dict, cls: type | None) -> set[str]:
    """The names of an object's attributes: its instance's, and (with `cls`) those of the
    user's classes along its MRO."""
    names = {k for k in instance if type(k) is str}
    for c in cls.__mro__ if cls is not None else ():
        if not is_library_module(getattr(c, "__module__", None)):
            names.update(k for k in vars(c) if type(k) is str)
    return names


def implicit_methods(cls: type) -> dict[str, types.FunctionType]:
    """The special methods of a user's class (the first definition of each along its MRO) that
    may run implicitly while tracing."""
    found: dict[str, Any] = {}
    for c in cls.__mro__:
        library = is_library_module(getattr(c, "__module__", None))
        for name, member in vars(c).items():
            if name.startswith("__") and name.endswith("__") and name not in found:
                found[name] = None if library else member  # a library's own: not walked
    return {
        name: member
        for name, member in sorted(found.items())
        if isinstance(member, types.FunctionType) and name not in NOT_RUN_BY_READS
    }


def attribute(value: Any, name: str) -> Any:
    """getattr(value, name, None), also for objects whose __getattr__ raises something other
    than AttributeError (a dict with attribute access raises KeyError)."""
    try:
        return getattr(value, name, None)
    except Exception:
        return None


def namespace_object(value: Any) -> bool:
    """Whether a library value is a standard-library attribute holder, walked like a user
    object: NumPy's, Numba's and tracegrad's own objects are not."""
    module = getattr(type(value), "__module__", None) or ""
    return module.split(".")[0] in NAMESPACE_MODULES and type(attribute(value, "__dict__")) is dict


NAMESPACE_MODULES = frozenset({"argparse", "types"})
