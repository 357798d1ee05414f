"""The arguments of a call of a transform: their checks, their names in messages, as arrays."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..tracing.reads import refuse_array_subclass
from ..runtime.program import aval, is_device_array
from ..base.tree import TreeDef, leaf_paths


def leaf_names(treedef: TreeDef, positions: list[int], shift: int = 0) -> list[str]:
    """Names of the argument leaves for messages: "argument 1['w']", "keyword argument p.b"; a
    method's arguments (shift 1) are counted after `self`, as its argnums are."""
    names = []
    for pos, child in zip(positions, treedef.children, strict=False):  # + the kwargs dict
        arg = "self" if pos < shift else f"argument {pos - shift}"
        names += [f"{arg}{path}" for path in leaf_paths(child)]
    if len(treedef.children) > len(positions):  # the keyword arguments' dict (Transformed._split)
        kwargs = treedef.children[-1]
        for key, child in zip(kwargs.keys, kwargs.children, strict=True):
            names += [f"keyword argument {key}{path}" for path in leaf_paths(child)]
    return names


def as_array(leaf: Any, name: str, fname: str) -> np.ndarray:
    """A call's argument leaf as an array (Python numbers become float64 0-d)."""
    if isinstance(leaf, np.ndarray):
        refuse_array_subclass(leaf, f"{fname}: {name}")
        arr = np.asarray(leaf)
    elif isinstance(leaf, bool):
        arr = np.asarray(leaf)
    elif isinstance(leaf, (int, float)) and not isinstance(leaf, np.generic):
        arr = np.asarray(float(leaf))
    elif isinstance(leaf, complex) and not isinstance(leaf, np.generic):
        arr = np.asarray(complex(leaf))
    elif isinstance(leaf, np.generic):
        arr = np.asarray(leaf)
    elif is_device_array(leaf):
        _, dtype = aval(leaf)
        if not (np.issubdtype(dtype, np.number) or dtype == np.bool_):
            raise TypeError(
                f"{fname}: {name} has dtype {dtype}; tracegrad supports numbers and bools"
            )
        return leaf  # stays on the device: the cuda backend takes it without a copy
    elif hasattr(leaf, "__array_interface__") or hasattr(leaf, "__array__"):
        arr = np.asarray(leaf)
    elif name.startswith("keyword"):
        raise TypeError(
            f"{fname}: {name} is a {type(leaf).__name__}; keyword arguments are traced like "
            "positional ones (arrays and numbers, in containers). Bind other values with "
            "functools.partial, or pass them positionally and mark them static_argnums."
        )
    else:
        raise TypeError(
            f"{fname}: {name} is a {type(leaf).__name__}; tracegrad traces arrays and numbers "
            "(and tuples, lists, dicts, namedtuples, dataclasses and registered pytree classes "
            "of them). Mark other arguments static with static_argnums, register a class with "
            "tg.register_pytree_node, or close over the value."
        )
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise TypeError(
            f"{fname}: {name} has dtype {arr.dtype}; tracegrad supports numbers (real and "
            "complex) and bools"
        )
    if arr.dtype.kind == "c" and arr.dtype.itemsize > 16:
        raise TypeError(
            f"{fname}: {name} has dtype {arr.dtype}; tracegrad's complex dtypes are complex64 "
            "and complex128: convert with .astype(np.complex128)"
        )
    if not arr.dtype.isnative:  # '>f8' on a little-endian machine: NumPy computes in native order
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr


def int_tuple(value, name: str) -> tuple[int, ...]:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value),)
    if isinstance(value, (tuple, list)) and all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value
    ):
        return tuple(int(v) for v in value)
    raise TypeError(f"{name} must be an int or a tuple of ints, got {value!r}")


def check_argnums(argnums, kind: str) -> None:
    nums = int_tuple(argnums, "argnums")
    if kind in ("grad", "value_and_grad", "jacobian", "jacfwd") and not nums:
        raise ValueError("argnums must name at least one argument")
    if any(n < 0 for n in nums):
        raise ValueError(f"argnums must be non-negative, got {argnums!r}")
    if len(set(nums)) != len(nums):
        raise ValueError(f"argnums repeats an argument: {argnums!r}")
