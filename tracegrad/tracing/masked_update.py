"""`y[mask] op= value` with a traced boolean mask (stage: tracing).

Reading `y[mask]` on its own is refused: its shape depends on the mask's values. Read for an
in-place operator whose result is written back into the same subscript (the bytecode says so),
it is the whole of `y` instead, with the operator applied everywhere; written back, it replaces
`y` where the mask holds (np.where). NumPy's own result, without a shape that depends on values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..base.errors import TracingError
from .source import user_line


_SYMBOLS = {"__add__": "+", "__sub__": "-", "__mul__": "*", "__truediv__": "/", "__pow__": "**"}
_SYMBOLS["__floordiv__"] = "//"


class MaskedElements:
    """`y[mask]` read for `y[mask] op= value`: `values` is y with the operator applied to every
    element; only the elements where `mask` holds are written back."""

    __slots__ = ("base", "mask", "values")

    def __init__(self, base: Any, mask: Any, values: Any):
        self.base, self.mask, self.values = base, mask, values

    def _apply(self, op: str, other):
        if np.ndim(other) != 0:
            raise TracingError(
                f"y[mask] {_SYMBOLS[op]}= value with a traced mask needs one number as the value, "
                f"not an array of shape {np.shape(other)}{user_line()}\nWrite it as "
                "y = np.where(mask, y <op> values, y) with values of y's shape."
            )
        return MaskedElements(self.base, self.mask, getattr(self.values, op)(other))

    def __iadd__(self, other):
        return self._apply("__add__", other)

    def __isub__(self, other):
        return self._apply("__sub__", other)

    def __imul__(self, other):
        return self._apply("__mul__", other)

    def __itruediv__(self, other):
        return self._apply("__truediv__", other)

    def __ipow__(self, other):
        return self._apply("__pow__", other)

    def __ifloordiv__(self, other):
        return self._apply("__floordiv__", other)

    def written_into(self, y: Any, mask: Any):
        """The new value of `y` for `y[mask] = self`, as NumPy's in-place operator writes it."""
        mask = mask[0] if isinstance(mask, tuple) and len(mask) == 1 else mask
        if y is not self.base or mask is not self.mask:
            raise TracingError(f"y[mask] op= value: the subscript changed meanwhile{user_line()}")
        values = cast_in_place(self.values, y.dtype)
        where = mask.reshape(mask.shape + (1,) * (y.ndim - mask.ndim))
        return np.where(where, values, y)


def cast_in_place(result: Any, dtype: np.dtype) -> Any:
    """An in-place operator's result as the written array's dtype, cast as NumPy casts it
    ('same_kind': float into int raises)."""
    if result.dtype == dtype:
        return result
    if not np.can_cast(result.dtype, dtype, casting="same_kind"):
        raise TypeError(
            f"Cannot cast ufunc output from dtype('{result.dtype}') to dtype('{dtype}') with "
            f"casting rule 'same_kind'{user_line()}"
        )
    return result.astype(dtype)
