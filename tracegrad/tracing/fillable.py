"""Arrays that NumPy's constructors make inside a traced function, and that a traced value may be
written into: `y = np.zeros(n); y[0] = a; y[1:] = b * 2`.

`np.zeros(n)` takes no array argument, so NumPy never dispatches it to a tracer, and a plain
ndarray cannot hold a traced value. While a function is traced (and only in the thread that
traces it), `np.zeros`, `np.ones`, `np.empty`, `np.full`, their `*_like` forms, `np.eye`,
`np.identity`, `np.arange`, `np.linspace` and `np.copy` return a `Fillable`: an ndarray subclass
that is an ordinary array, with ordinary results, until a traced value is written into it.

The first such write (`y[i] = traced`, `y += traced`, `np.add.at(y, i, traced)`,
`np.put_along_axis(y, ...)`) *promotes* it: from then on the array stands for a traced value (a
constant holding its contents so far, with the write applied), and every use of it (operators,
NumPy functions, indexing, methods, returning it) goes to that traced value. Its own buffer is
never read again, so it cannot give a stale number: a view taken of it before the promotion
(`row = y[0]` and then `y[0] = traced`) refuses to be used, with a message, rather than show the
old contents.

The rule for tracegrad's own code is one function, `current`: trace.operand asks it for the value
an array stands for.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from .. import ir
from ..base.errors import TracingError
from ..trace import Tracer, traced_call
from . import branches
from .masked_update import MaskedElements
from .source import augments_a_subscript, reads_for_an_augmented_subscript, user_line

_INTERNAL = (
    os.path.dirname(os.path.abspath(__file__)),
    os.path.dirname(os.path.abspath(np.__file__)),
)

# in-place ufuncs (y += v is np.add(y, v, out=(y,))) and the Tracer method that does them
_IN_PLACE = {
    "add": "__iadd__",
    "subtract": "__isub__",
    "multiply": "__imul__",
    "divide": "__itruediv__",
    "true_divide": "__itruediv__",
    "power": "__ipow__",
    "matmul": "__imatmul__",
    "floor_divide": "__ifloordiv__",
    "remainder": "__imod__",
    "bitwise_and": "__iand__",
    "bitwise_or": "__ior__",
    "bitwise_xor": "__ixor__",
}
# NumPy functions that write into their first argument
_WRITING_FUNCTIONS = frozenset({"put_along_axis"})
# attributes a promoted array still answers itself (everything else goes to its traced value)
_OWN = frozenset(
    {
        "__class__",
        "__dict__",
        "__array_finalize__",
        "__array_ufunc__",
        "__array_function__",
        "_tracegrad_current",
        "__reduce__",
        "__reduce_ex__",
    }
)


class Fillable(np.ndarray):
    """An ndarray made inside a traced function, which a traced value may be written into."""

    _tg_tracer: Tracer | None = None  # the traced value it stands for, once promoted
    _tg_root: Fillable | None = None  # for a view: the array it views (None: it owns its data)

    def __array_finalize__(self, obj) -> None:
        # a view of a Fillable remembers the array it views; a copy is a Fillable of its own
        if isinstance(obj, Fillable) and self.base is not None:
            self._tg_root = obj._tg_root if obj._tg_root is not None else obj

    # ---- what the array stands for
    def _tracegrad_current(self) -> Tracer | np.ndarray:
        """The traced value (once promoted), else the contents as a plain ndarray view."""
        tracer = np.ndarray.__getattribute__(self, "_tg_tracer")
        if tracer is not None:
            return tracer
        root = np.ndarray.__getattribute__(self, "_tg_root")
        if root is not None and np.ndarray.__getattribute__(root, "_tg_tracer") is not None:
            raise TracingError(
                "this array is a view (a slice, a reshape, a transpose) of an array that a traced "
                f"value was written into after the view was taken{user_line()}\nThe view would "
                "show the old contents. Take the view after the write (or index the array itself)."
            )
        return self.view(np.ndarray)

    def _tg_promote(self) -> Tracer:
        """Stand for a traced value from now on: a constant holding the current contents."""
        tracer = np.ndarray.__getattribute__(self, "_tg_tracer")
        if tracer is not None:
            return tracer
        if np.ndarray.__getattribute__(self, "_tg_root") is not None:
            raise TracingError(
                "a traced value cannot be written into a view (a slice, a reshape, a transpose) "
                f"of an array made with np.zeros, np.ones, ...{user_line()}\nWrite into the "
                "array itself: y[i, 1:] = v rather than row = y[i]; row[1:] = v."
            )
        if ir.active_builder() is None:
            raise TracingError(
                "a traced value was written into an array after its traced function returned "
                "(it escaped through a global or a closure). Return it from the function instead."
            )
        if self.dtype.kind not in "biufc":
            raise TypeError(
                f"cannot write a traced value into an array of dtype {self.dtype}{user_line()}"
            )
        data = self.view(np.ndarray).copy()
        tracer = traced_call(lambda: _const(data))
        self._tg_tracer = tracer
        return tracer

    # ---- writes
    def __setitem__(self, index, value) -> None:
        if isinstance(value, MaskedElements):  # y[mask] op= v, with a traced mask
            self._tg_promote()[traced_form(index)] = value
            return
        if np.ndarray.__getattribute__(self, "_tg_tracer") is None and not holds_traced(value):
            self._tracegrad_current()  # a view of a promoted array refuses
            np.ndarray.__setitem__(self, traced_form(index), value)
            return
        self._tg_promote()[traced_form(index)] = traced_form(value)

    # ---- NumPy dispatch: plain arrays until promoted, the traced value after
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = kwargs.get("out")
        writes_self = out is not None and any(o is self for o in out)
        if writes_self and (
            np.ndarray.__getattribute__(self, "_tg_tracer") is not None
            or holds_traced(inputs)
            or holds_traced(kwargs.get("where"))
        ):
            return self._tg_write_in_place(ufunc, method, inputs, kwargs)
        if method == "at" and inputs and inputs[0] is self and holds_traced(inputs[1:]):
            np.add.at(self._tg_promote(), *traced_form(inputs[1:]))
            return None
        sources = _fillables((inputs, out))
        result = getattr(ufunc, method)(
            *traced_form(inputs), **{k: traced_form(v) for k, v in kwargs.items()}
        )
        if out is not None:  # written in place: NumPy returns the out arrays themselves
            return out[0] if len(out) == 1 else tuple(out)
        return _wrap_result(result, sources)

    def _tg_write_in_place(self, ufunc, method, inputs, kwargs):
        name = ufunc.__name__
        if (
            method != "__call__"
            or name not in _IN_PLACE
            or len(kwargs["out"]) != 1
            or set(kwargs) - {"out"}
            or len(inputs) != 2
            or inputs[0] is not self
        ):
            raise TracingError(
                f"np.{name}.{method} with out= is not supported on arrays that hold traced "
                f"values{user_line()}\nWrite the result as y = np.{name}(...) instead."
            )
        if (
            np.ndarray.__getattribute__(self, "_tg_root") is not None
            and np.ndarray.__getattribute__(self, "_tg_tracer") is None
            and augments_a_subscript()
        ):
            # y[1:3] += v: Python writes the result back with y[1:3] = result, next
            return getattr(self._tg_promote_copy(), _IN_PLACE[name])(traced_form(inputs[1]))
        tracer = self._tg_promote()
        updated = getattr(tracer, _IN_PLACE[name])(traced_form(inputs[1]))
        if updated is NotImplemented:
            raise TracingError(f"np.{name} cannot update this array in place{user_line()}")
        return self

    def __array_function__(self, func, types, args, kwargs):
        if (
            func.__name__ in _WRITING_FUNCTIONS
            and args
            and args[0] is self
            and holds_traced((args[1:], kwargs))
        ):
            self._tg_promote()
        sources = _fillables((args, tuple(kwargs.values())))
        result = func(*traced_form(args), **{k: traced_form(v) for k, v in kwargs.items()})
        return _wrap_result(result, sources)

    # ---- everything else a promoted array is asked goes to its traced value
    def __getattribute__(self, name: str):
        if name not in _OWN and not name.startswith("_tg_"):
            tracer = np.ndarray.__getattribute__(self, "_tg_tracer")
            if tracer is not None:
                return getattr(tracer, name)
            root = np.ndarray.__getattribute__(self, "_tg_root")
            if root is not None and np.ndarray.__getattribute__(root, "_tg_tracer") is not None:
                np.ndarray.__getattribute__(self, "_tracegrad_current")()  # refuses
        return np.ndarray.__getattribute__(self, name)

    def __getitem__(self, index):
        current = self._tracegrad_current()
        if isinstance(current, Tracer):
            return current[traced_form(index)]
        if holds_traced(index):  # a traced index into a plain array: the array becomes a constant
            if reads_for_an_augmented_subscript():  # y[mask] op= v: y is written next
                return self._tg_promote()[traced_form(index)]
            return self._tg_promote_copy()[traced_form(index)]
        return np.ndarray.__getitem__(self, traced_form(index))

    def _tg_promote_copy(self) -> Tracer:
        return traced_call(lambda: _const(self.view(np.ndarray).copy()))

    def __iter__(self):
        return iter(self._tracegrad_current())

    def __len__(self) -> int:
        return len(self._tracegrad_current())

    def __bool__(self) -> bool:
        return bool(self._tracegrad_current())

    def __float__(self) -> float:
        return float(self._tracegrad_current())

    def __int__(self) -> int:
        return int(self._tracegrad_current())

    def __index__(self) -> int:
        return self._tracegrad_current().__index__()

    def __complex__(self) -> complex:
        return complex(self._tracegrad_current())

    def __array__(self, *args, **kwargs):
        current = self._tracegrad_current()
        return current.__array__(*args, **kwargs)

    def __repr__(self) -> str:
        return repr(self._tracegrad_current())

    def __str__(self) -> str:
        return str(self._tracegrad_current())

    def __format__(self, spec: str) -> str:
        return format(self._tracegrad_current(), spec)

    def __contains__(self, value) -> bool:
        return value in self._tracegrad_current()

    def __copy__(self):
        current = self._tracegrad_current()
        return current.copy() if isinstance(current, Tracer) else _fill(current.copy())

    def __deepcopy__(self, memo):
        return self.__copy__()


def _const(data: np.ndarray):
    from .. import primitives as P

    return P.const(data)


def current(x: Any) -> Any:
    """What `x` stands for: a Fillable's traced value or plain contents; anything else as it is."""
    if isinstance(x, Fillable):
        return x._tracegrad_current()
    return x


def holds_traced(obj: Any) -> bool:
    """Whether `obj` is, or holds (in lists, tuples, slices), a traced value or a promoted array."""
    if isinstance(obj, Tracer):
        return True
    if isinstance(obj, Fillable):
        return isinstance(obj._tracegrad_current(), Tracer)
    if isinstance(obj, (list, tuple)):
        return any(holds_traced(x) for x in obj)
    if isinstance(obj, slice):
        return holds_traced((obj.start, obj.stop, obj.step))
    return False


def traced_form(obj: Any) -> Any:
    """`obj` with every Fillable replaced by what it stands for (in lists and tuples too)."""
    if isinstance(obj, Fillable):
        return obj._tracegrad_current()
    if type(obj) in (list, tuple):
        return type(obj)(traced_form(x) for x in obj)
    return obj


def _fillables(obj: Any) -> list[Fillable]:
    """The Fillables in `obj` (in lists and tuples too)."""
    if isinstance(obj, Fillable):
        return [obj]
    if type(obj) in (list, tuple):
        return [f for x in obj for f in _fillables(x)]
    return []


def _wrap_result(result: Any, sources: list[Fillable]) -> Any:
    """A NumPy result computed from Fillables' contents, as a Fillable (in a thread that traces):
    a view of one of them (np.reshape(y, ...), np.transpose(y)) remembers the array it views, so
    that it refuses to show stale contents once a traced value is written into that array."""
    if type(result) in (list, tuple):
        return type(result)(_wrap_result(r, sources) for r in result)
    wrapped = _fill(result)
    if wrapped is result or not sources:
        return wrapped
    for source in sources:
        if np.may_share_memory(result, source):
            root = np.ndarray.__getattribute__(source, "_tg_root")
            wrapped._tg_root = source if root is None else root
            break
    return wrapped


def _fill(array: np.ndarray) -> np.ndarray:
    """`array` as a Fillable when the calling thread is tracing, else as it is."""
    if ir.active_builder() is None or not isinstance(array, np.ndarray):
        return array
    if isinstance(array, Fillable):
        return array
    if type(array) is not np.ndarray or array.dtype.kind not in "biufc":
        return array
    return array.view(Fillable)


# NumPy's constructors that make a new array from no array argument (or a plain one)
CONSTRUCTORS = (
    "zeros",
    "ones",
    "empty",
    "full",
    "zeros_like",
    "ones_like",
    "empty_like",
    "full_like",
    "eye",
    "identity",
    "arange",
    "linspace",
    "copy",
)


def fillable_constructor(original):
    """`original` (np.zeros...), returning a Fillable when called from the user's code in a
    thread that is tracing (tracegrad's and NumPy's own calls get plain arrays)."""

    name = getattr(original, "__name__", "")

    def constructor(*args, **kwargs):
        if name in _SHAPED_BY_ARGUMENTS and holds_traced((args, tuple(kwargs.values()))):
            answered = None if name == "arange" else branches.answer_sizes(args, kwargs)
            if answered is None:
                _refuse_traced_shape(name)
            args, kwargs = answered  # np.zeros(n) with n answered as an int, and guarded
        result = original(*args, **kwargs)
        if sys._getframe(1).f_code.co_filename.startswith(_INTERNAL):
            return result
        return _fill(result)

    constructor.__name__ = getattr(original, "__name__", "constructor")
    constructor.__doc__ = getattr(original, "__doc__", None)
    constructor.__wrapped__ = original
    return constructor


# constructors whose arguments give the result's shape: a traced one would make it data-dependent
_SHAPED_BY_ARGUMENTS = frozenset({"zeros", "ones", "empty", "eye", "identity", "arange"})


def _refuse_traced_shape(name: str):
    if name == "arange":
        hint = (
            "np.arange's length depends on its bounds. For traced bounds with a length n known "
            "while tracing, write start + step * np.arange(n) (or np.linspace(start, stop, n), "
            "which takes traced start and stop)."
        )
    else:
        hint = (
            f"The shape np.{name} makes must be known while tracing: take it from an array's "
            ".shape, or pass the size as a static argument (static_argnums)."
        )
    raise TracingError(
        f"np.{name} cannot take a traced value: the result's shape would depend on it"
        f"{user_line()}\n{hint}"
    )
