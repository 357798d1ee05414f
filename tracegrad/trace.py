"""Tracing: tracers stand in for arrays, and NumPy dispatches to them.

A `Tracer` wraps one IR value of the graph being built. It implements `__array_ufunc__`,
`__array_function__` and the Python operators, so the user's plain `np.sin(x)` records a node: the
handler is looked up by name in the dispatch registry (tracing/dispatch.py), which the handler
modules (tracegrad/numpy_namespace/, which import this module) fill; from the handler side this
module imports the registry only.
Each node remembers the user's source line. Shapes are concrete: Python control flow on shapes and
ordinary values just runs; `bool()` of a traced value raises a `TracingError`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import ir
from . import primitives as P
from .tracing import branches
from .tracing.dispatch import FUNCTIONS, HOOKS, UFUNCS
from .tracing.reads import refuse_array_subclass
from .tracing.messages import Unknowable, function_name, unsupported
from .tracing.ndarray import NdarrayInterface
from .tracing.scope import Scope
from .tracing.masked_update import MaskedElements, cast_in_place
from .tracing.source import reads_for_an_augmented_subscript, user_line, user_source
from .base.errors import TracingError, at
from .ir import Builder, Graph, Var
from .base.tree import TreeDef, flatten, unflatten


class Tracer(NdarrayInterface, branches.Answers, Unknowable):
    """A traced array: shape and dtype are known, the values are not.

    Writes (`y[0] = a`, `y[1:] += b`, `x *= 2`) are functional: the tracer then stands for a new
    value, and every name bound to it sees the write, as with a NumPy array. A tracer made by
    indexing or reshaping another is a *view* of it, as in NumPy: it sees later writes to the
    array it views (its value is derived again from the array's new value), and a write into a
    view made by basic indexing writes into that array.
    """

    __slots__ = ("_c_order", "_pending", "_var", "_view", "builder")
    __array_priority__ = 1000
    __hash__ = None  # like NumPy arrays: == builds a value, so tracers are not hashable

    def __init__(self, var: Var, builder: Builder, view: _View | None = None):
        self._var, self.builder, self._view = var, builder, view
        self._c_order = False  # NumPy's array for it is C-contiguous for sure (x.copy())
        # writes through static basic indices not yet in the graph: [(index, value, source)],
        # emitted together when the value is next read (the hook set_regions, in
        # numpy_namespace/scatters.py)
        self._pending: list | None = None

    @property
    def ir_var(self) -> Var:
        if self._pending:
            self._flush_writes()
        view = self._view
        if view is not None:
            current = view.base.ir_var
            if current is not view.seen:  # the viewed array was written: derive the view again
                with ir.building(self.builder), ir.source_location(user_source()):
                    self._var = view.derive(lift(view.base, self.builder))
                view.seen = current
        return self._var

    # ---- writes
    def _check_writable(self, what: str) -> None:
        builder = ir.active_builder()
        if builder is None:
            raise TracingError(
                "a traced value was written after its function returned (it escaped through a "
                "global or a closure). Return it from the traced function instead."
            )
        if builder is not self.builder:
            raise TracingError(
                f"{what}: the array belongs to an enclosing traced function; a transformed "
                f"function cannot write into it{user_line()}\nWrite into a copy (y = y.copy()) "
                "or return the new value."
            )

    def _write(self, new: Var, what: str) -> None:
        """This tracer now holds `new` (through to the array it views, if it is a view)."""
        self._check_writable(what)
        view = self._view
        if view is not None:
            if view.index is not None:
                view.base._assign(view.index, new)
            else:  # a reshaped, transposed, flipped or split view: through its positions
                with ir.building(self.builder), ir.source_location(user_source()):
                    written = _write_back(lift(view.base, self.builder), view, new, what)
                view.base._write(written, what)
            view.seen = view.base.ir_var
        self._var = new

    def _assign(self, index, value) -> None:
        source = user_source()
        with ir.source_location(source):
            value = operand(value, self.builder) if isinstance(value, Tracer) else value
            if self._view is None and HOOKS["is_basic_index"](index):  # kept, emitted with others
                self._check_writable("x[...] = value")
                HOOKS["basic_index"](self._var, index)  # an index out of range fails on its line
                if self._pending is None:
                    self._pending = []
                self._pending.append((index, value, source))
                return
            new = HOOKS["setitem"](self.ir_var, index, value)
        self._write(new, "x[...] = value")

    def _flush_writes(self) -> None:
        writes, self._pending = self._pending, None
        with ir.building(self.builder), ir.source_location(writes[0][2]):
            self._var = HOOKS["set_regions"](self._var, [(i, v) for i, v, _ in writes])

    def __setitem__(self, index, value):
        index = branches.answer_slices(index)
        self._check_writable("x[...] = value")
        if isinstance(value, MaskedElements):  # y[mask] op= v, with a traced mask
            self._write(lift(value.written_into(self, index), self.builder), "y[mask] op= v")
            return
        self._assign(_arg(index, self.builder), value)

    def _inplace(self, op: str, other):
        self._check_writable(f"x {op[2:-2]}= value")
        result = getattr(Tracer, op)(self, other)
        if result is NotImplemented:
            return NotImplemented
        if result.shape != self.shape:
            raise ValueError(
                f"non-broadcastable output operand with shape {self.shape} doesn't match the "
                f"broadcast shape {result.shape}{user_line()}"
            )
        result = cast_in_place(result, self.dtype)
        self._write(lift(result, self.builder), f"x {op[2:-2]}= value")
        return self

    def __iadd__(self, o):
        return self._inplace("__add__", o)

    def __isub__(self, o):
        return self._inplace("__sub__", o)

    def __imul__(self, o):
        return self._inplace("__mul__", o)

    def __itruediv__(self, o):
        return self._inplace("__truediv__", o)

    def __ipow__(self, o):
        return self._inplace("__pow__", o)

    def __imatmul__(self, o):
        return self._inplace("__matmul__", o)

    def __iand__(self, o):
        return self._inplace("__and__", o)

    def __ior__(self, o):
        return self._inplace("__or__", o)

    def __ixor__(self, o):
        return self._inplace("__xor__", o)

    def _as_view(
        self, base: Tracer, derive: Callable[[Var], Var], index=None, positions=None
    ) -> Tracer:
        if base.builder is self.builder:
            self._view = _View(base, derive, base.ir_var, index, positions)
        return self

    # writes never change the shape or dtype: read them without emitting pending writes
    shape = property(lambda self: self._var.shape)
    dtype = property(lambda self: self._var.dtype)
    ndim = property(lambda self: self._var.ndim)
    size = property(lambda self: self._var.size)

    def __repr__(self) -> str:
        return f"Tracer<{self.ir_var.type}>"

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d traced value")
        return self.shape[0]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        for i in range(len(self)):
            yield self[i]

    # ---- NumPy dispatch
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = getattr(ufunc, "__name__", str(ufunc))
        if method == "at" and name == "add" and isinstance(inputs[0], Tracer):
            target = inputs[0]  # np.add.at(a, indices, b): a scatter-add into a, in place
            target._check_writable("np.add.at")
            rest = [_arg(v, target.builder) for v in inputs[1:]]
            with ir.source_location(user_source()):
                new = HOOKS["add_at"](target.ir_var, *rest)
            target._write(new, "np.add.at")
            return None
        if method != "__call__":
            raise TracingError(
                f"np.{name}.{method} is not supported on traced values{user_line()}\n"
                f"Use the equivalent function (e.g. np.sum for np.add.reduce)."
            )
        for key in ("out", "where"):
            if key in kwargs:
                raise TracingError(
                    f"np.{name}(..., {key}=...) is not supported on traced values{user_line()}"
                )
        dtype = kwargs.pop("dtype", None)
        if kwargs:
            raise TracingError(f"np.{name}: unsupported arguments {sorted(kwargs)}{user_line()}")
        handler = UFUNCS.get(name)
        if handler is None:
            unsupported(f"np.{name}")
        result = traced_call(handler, *inputs)
        return result.astype(dtype) if dtype is not None else result

    def __array_function__(self, func, types, args, kwargs):
        name = function_name(func)
        if name in _WRITES_INTO:  # np.put_along_axis(a, ...): a is written, in place
            return _write_into(name, args, kwargs)
        handler = FUNCTIONS.get(name)
        if handler is None:
            unsupported(f"np.{name}")
        result = traced_call(handler, *args, **kwargs)
        if (name in _VIEWS or name in _VIEW_LISTS) and args and isinstance(args[0], Tracer):
            rest = args[1:]
            if not any(isinstance(a, Tracer) for a in (*rest, *kwargs.values())):
                # where a write lands: the view of the base's element numbers (NumPy's own).
                # A reshape of a view may be a copy in NumPy (its strides may not allow a
                # view): writes into it are refused, not guessed.
                moves = name not in _NOT_MOVES and (name not in _MAY_COPY or _contiguous(args[0]))
                if isinstance(result, Tracer):
                    positions = (lambda a: func(a, *rest, **kwargs)) if moves else None
                    result._as_view(args[0], lambda v: handler(v, *rest, **kwargs), None, positions)
                elif isinstance(result, list):  # np.split: each part a view
                    for k, part in enumerate(result):
                        positions = lambda a, k=k: func(a, *rest, **kwargs)[k]
                        part._as_view(
                            args[0], lambda v, k=k: handler(v, *rest, **kwargs)[k], None, positions
                        )
        return result

    def __getitem__(self, index):
        index = branches.answer_slices(index)  # x[:n] with a traced n, where a trace answers
        mask = index[0] if isinstance(index, tuple) and len(index) == 1 else index
        if (
            isinstance(mask, Tracer)
            and mask.dtype == np.bool_
            and mask.shape == self.shape[: mask.ndim]
            and reads_for_an_augmented_subscript()
        ):
            return MaskedElements(self, mask, self)
        getitem = HOOKS["getitem"]
        result = traced_call(getitem, self, index)
        if not HOOKS["is_basic_index"](index):  # advanced indexing makes a copy, as in NumPy
            return result
        # the index as a tuple: `x[None]`'s index None must not read as "no index"
        index = index if isinstance(index, tuple) else (index,)
        return result._as_view(self, lambda v: getitem(v, index), index)

    # ---- methods
    T = property(
        lambda self: traced_call(P.transpose, self)._as_view(self, P.transpose, None, np.transpose)
    )
    mT = property(
        lambda self: traced_call(P.swap_last, self)._as_view(
            self, P.swap_last, None, lambda a: np.swapaxes(a, -1, -2)
        )
    )

    def __pos__(self):
        return Tracer(self.ir_var, self.builder)  # +x is a new array

    def copy(self, order="C"):
        copied = Tracer(self.ir_var, self.builder)
        copied._c_order = order == "C"  # a reshape of it is a view in NumPy
        return copied

    def astype(self, dtype, copy=True):
        if not copy and np.dtype(dtype) == self.dtype:
            return self  # NumPy returns the array itself
        return traced_call(lambda x: P.convert(x, dtype), self)

    def _apply(self, fn: Callable, *args, **kwargs):
        """`fn` on traced arguments (NdarrayInterface's operators and methods call it)."""
        return traced_call(fn, *args, **kwargs)


# NumPy functions that write into their first argument; the hook of the same name gives the value
# it then holds
_WRITES_INTO = frozenset({"put_along_axis"})


def _write_into(name: str, args, kwargs):
    target, *rest = args
    if not isinstance(target, Tracer):
        raise TracingError(
            f"np.{name} cannot write traced values into a NumPy array made outside the traced "
            f"function{user_line()}\nMake the array inside the function: y = np.zeros(n) (or "
            f"np.copy(a), np.zeros_like(a)) and then np.{name}(y, ...) works as in NumPy."
        )
    target._check_writable(f"np.{name}")
    rest = [_arg(v, target.builder) for v in rest]
    kwargs = {k: _arg(v, target.builder) for k, v in kwargs.items()}
    with ir.source_location(user_source()):
        new = HOOKS[name](target.ir_var, *rest, **kwargs)
    target._write(new, f"np.{name}")
    return None


class _View:
    """What a view tracer views: the base tracer, how to derive the view from the base's value,
    the base value it was derived from, and (for basic indexing) the index to write through."""

    __slots__ = ("base", "derive", "index", "positions", "seen")

    def __init__(
        self, base: Tracer, derive: Callable[[Var], Var], seen: Var, index=None, positions=None
    ):
        self.base, self.derive, self.seen, self.index = base, derive, seen, index
        # NumPy's view function on plain arrays (None: the view is not of the base's elements,
        # np.real of a complex array): on the base's element numbers, it says which element
        # of the base each element of the view is, so a write into the view lands there
        self.positions = positions


# NumPy functions whose result is a view of their first argument (np.asarray: the array itself)
_VIEWS = frozenset(
    ("reshape", "ravel", "transpose", "squeeze", "expand_dims", "swapaxes", "moveaxis", "asarray")
    + ("atleast_1d", "atleast_2d", "atleast_3d", "broadcast_to", "diagonal", "real", "imag")
    + ("flip", "flipud", "fliplr", "rot90")
)
# ... and those whose parts, in a list, are
_VIEW_LISTS = frozenset({"split", "array_split", "hsplit", "vsplit", "dsplit"})
# views a write cannot go through: not of the base's elements themselves (np.real of a complex
# array), or read-only in NumPy (broadcast_to, diagonal)
_NOT_MOVES = frozenset({"real", "imag", "broadcast_to", "diagonal"})
# views NumPy makes only where the strides allow, else copies (a reshape of a transposed array,
# of an argument passed as A.T, of an elementwise result of one, which keeps its layout)
_MAY_COPY = frozenset({"reshape", "ravel"})


def _contiguous(t: Tracer) -> bool:
    """Whether NumPy's array for `t` is surely contiguous, so that a reshape of it is a view: a
    copy (`x.copy()`, C order), or a vector computed inside the function (NumPy allocates it
    afresh); not an argument or a value read from outside (any strides), nor a view."""
    if t._view is not None:
        return False
    if t._c_order:
        return True
    if t.ndim > 1:
        return False
    var = t.ir_var
    return var not in t.builder.inputs and all(var is not v for _, v in t.builder.captures)


def _write_back(base: Var, view: _View, new: Var, what: str) -> Var:
    """`base` after `new` was written into `view` of it (a reshape, transpose, flip, split...):
    each element of `new` lands on the base element the view shows there (NumPy's view of the
    base's element numbers says which); the elements the view does not show keep their values."""
    size = int(np.prod(base.shape, dtype=np.int64))
    positions = None
    if view.positions is not None:
        numbers = np.arange(size, dtype=np.int64).reshape(base.shape)
        positions = np.asarray(view.positions(numbers)).reshape(-1)
    if positions is None or len(np.unique(positions)) != positions.size:
        raise TracingError(
            f"{what}: writing into this view of a traced array is not supported{user_line()} "
            "(a broadcast or a diagonal, read-only in NumPy; a real or imaginary part; or a "
            "reshape of a view, which NumPy copies where the strides do not allow a view)\n"
            "Write into the array itself, or into a copy (z = view.copy())."
        )
    flat = P.reshape(new, (positions.size,))
    if positions.size == size and np.array_equal(positions, np.arange(size)):
        return P.reshape(flat, base.shape)  # a reshape: the same order
    if positions.size == size:  # a permutation of every element
        return P.reshape(P.gather(flat, P.const(np.argsort(positions)), 0), base.shape)
    source = np.zeros(size, np.int64)
    source[positions] = np.arange(positions.size)
    shown = np.zeros(size, bool)
    shown[positions] = True
    written = P.gather(flat, P.const(source), 0)
    return P.reshape(P.where(P.const(shown), written, P.reshape(base, (size,))), base.shape)


# ----------------------------------------------------------------------------------------------
# Turning arguments into IR operands and results back into tracers


def lift(t: Tracer, builder: Builder) -> Var:
    """The value of tracer `t` as seen from `builder` (capturing it from an enclosing builder)."""
    if t.builder is builder:
        return t.ir_var
    chain = builder.parent
    while chain is not None and chain is not t.builder:
        chain = chain.parent
    if chain is None:
        raise TracingError(
            "a traced value was used outside the function that traced it (it escaped, for "
            "example through a global or a closure kept across calls). Pass it as an argument."
        )
    return builder.capture(id(t.ir_var), t, t.ir_var.shape, t.ir_var.dtype)


def operand(x: Any, builder: Builder):
    """An op operand: a Var, or a Python scalar (kept weak for NumPy's promotion rules)."""
    if isinstance(x, np.ndarray) and hasattr(x, "_tracegrad_current"):
        x = x._tracegrad_current()  # a fillable.Fillable: its traced value, or its contents
    if isinstance(x, Tracer):
        return lift(x, builder)
    if isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic):
        return x
    if isinstance(x, np.ndarray):
        refuse_array_subclass(x, f"an array used in the traced function{at(user_source())}")
        hidden = _hidden_input(x, builder)
        if hidden is not None:
            return hidden
    if isinstance(x, (np.ndarray, np.generic, list, tuple)):
        arr = np.asarray(x)
        if arr.dtype == object or not (
            np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_
        ):
            raise TypeError(f"cannot use a value of dtype {arr.dtype} in a traced computation")
        return P.const(arr)
    if isinstance(x, Var):
        return x
    raise TypeError(
        f"cannot use a {type(x).__name__} in a traced computation{at(user_source())}; "
        "only arrays, numbers and traced values"
    )


def _hidden_input(x: np.ndarray, builder: Builder) -> Var | None:
    """An array the function read from outside its arguments (a global, a closure variable...):
    an input of the top-level graph, read afresh on every call (see tracing/scope.py), or None when
    `x` is not such an array (it is then a constant)."""
    root = builder.root
    scope = root.scope
    if scope is None or x.dtype.kind not in "biuf":  # others fail as constants, with a message
        return None
    found = scope.hidden_view(x)
    if found is not None:  # a view of a reachable array: computed from the array's input
        index, array, (window, squeezed, perm) = found
        var = _hidden_var(root, builder, index, array)
        with ir.building(builder):
            view = P.transpose(P.reshape(P.slice_(var, window), squeezed), perm)
            return P.reshape(view, x.shape)
    index = scope.hidden_input(x)
    return None if index is None else _hidden_var(root, builder, index, x)


def _hidden_var(root: Builder, builder: Builder, index: int, x: np.ndarray) -> Var:
    """The hidden input `index` (standing for `x`) as a value of `builder`."""
    if index == len(root.hidden_vars):  # first use: indices are handed out in order
        root.hidden_vars.append(root.new_input(x.shape, x.dtype))
        branches.note_input(root, root.hidden_vars[-1], x)
    var = root.hidden_vars[index]
    return var if root is builder else lift(Tracer(var, root), builder)


def to_var(x: Any, builder: Builder) -> Var:
    v = operand(x, builder)
    if isinstance(v, Var):
        return v
    dtype = np.float64 if isinstance(v, float) else np.asarray(v).dtype
    return P.const(v, (), dtype)


def _wrap(result: Any, builder: Builder) -> Any:
    if isinstance(result, Var):
        return Tracer(result, builder)
    if isinstance(result, (tuple, list)):
        items = [_wrap(r, builder) for r in result]
        if hasattr(result, "_fields"):  # a named tuple: np.linalg.slogdet's SlogdetResult...
            return type(result)(*items)
        return type(result)(items)
    return result


def traced_call(fn: Callable, *args, **kwargs):
    """Run an op constructor on tracer arguments, recording the user's source line."""
    builder = ir.active_builder()
    if builder is None:
        raise TracingError(
            "a traced value was used after its function returned (it escaped through a global "
            "or a closure). Return it from the traced function instead."
        )
    with ir.source_location(user_source()):
        # traced values passed by keyword (np.clip(x, a_max=h)) are operands too
        kwargs = {k: operand(v, builder) if isinstance(v, Tracer) else v for k, v in kwargs.items()}
        return _wrap(fn(*[_arg(a, builder) for a in args], **kwargs), builder)


def _arg(a: Any, builder: Builder):
    """Tracers, also inside lists and tuples (np.stack([x, y])), become IR values; everything
    else passes as it is. NumPy arrays and scalars reach the handlers as they are: an operand
    becomes a constant there (`as_var`, `as_operand`), and a static parameter (an axis, a shape,
    an order, an index: np.sum(x, np.int64(0))) is read as the number it is."""
    if isinstance(a, np.ndarray) and hasattr(a, "_tracegrad_current"):
        a = a._tracegrad_current()  # a fillable.Fillable: its traced value, or its contents
    if isinstance(a, Tracer):
        return operand(a, builder)
    if isinstance(a, (list, tuple)):
        return type(a)(_arg(x, builder) for x in a)
    return a


# ----------------------------------------------------------------------------------------------
# Tracing a function


class CallArgs:
    """Positional and keyword arguments, when `trace`'s `wrap_args` has keywords to pass."""

    __slots__ = ("args", "kwargs")

    def __init__(self, args: tuple, kwargs: dict):
        self.args, self.kwargs = args, kwargs


def trace(
    fun: Callable,
    avals: list[tuple[tuple[int, ...], np.dtype]],
    treedef: TreeDef,
    wrap_args: Callable[[Any], tuple | CallArgs] | None = None,
    scope: Scope | None = None,
    branching: bool = False,
    no_branching: str | None = None,
):
    """Trace `fun` on fresh inputs of the given shapes and dtypes.

    Returns the graph (inputs: the leaves, then the hidden inputs that `scope` found, then values
    captured from enclosing traces), the output tree, and the enclosing tracers that were
    captured (in graph-input order). A `branching` trace answers Python control flow on traced
    values (tracing/branches.py); its guards are the graph's last outputs, after `out_tree`'s,
    which the caller's transform returns last. `no_branching`: why a trace cannot answer."""
    traced_constructors = HOOKS.get("traced_constructors")
    if traced_constructors is None:  # nothing registered: no handler to dispatch to
        raise RuntimeError(
            "tracegrad internal error: trace() was called before the NumPy handlers were "
            "registered; the module that calls it must import tracegrad.numpy_namespace"
        )
    builder = Builder(ir.active_builder())
    builder.scope, builder.no_branching = scope, no_branching
    with ir.building(builder):
        tracers = [Tracer(builder.new_input(shape, dtype), builder) for shape, dtype in avals]
        given = branches.begin(builder, branching)
        args = unflatten(treedef, tracers)
        call = args if wrap_args is None else wrap_args(args)
        try:
            with traced_constructors(), HOOKS["random_draws"](scope, fun, call) as call:
                result = fun(*call.args, **call.kwargs) if type(call) is CallArgs else fun(*call)
        except (ValueError, TypeError) as exc:
            # NumPy turns our error into its own when a tracer is written into an array
            # ("setting an array element with a sequence"): show ours, which says what to do
            if isinstance(exc.__cause__, TracingError):
                raise exc.__cause__.with_traceback(exc.__traceback__) from None
            raise
        name = getattr(fun, "__qualname__", None) or "the traced function"
        out_leaves, out_tree = flatten(result)
        out_vars = []
        for leaf in out_leaves:
            with ir.source_location(user_source()):
                out_vars.append(to_var(_result_leaf(leaf), builder))
        guards = branches.finish(builder, given)
        if guards and P.draws_in(builder.nodes):
            raise TracingError(
                f"{name} draws random numbers and has Python control flow on traced values: a "
                "call that takes another branch would run the program again and draw twice. "
                "Use np.where(...) or tg.cond/tg.while_loop instead of if/while on traced values."
            )
        out_vars += guards
    graph = builder.graph(out_vars)
    return graph, out_tree, [t for t, _ in builder.captures]


def _result_leaf(leaf: Any):
    if isinstance(leaf, (Tracer, np.ndarray, np.generic, bool, int, float, complex)):
        return leaf
    raise TypeError(
        f"a traced function returned a {type(leaf).__name__}; return arrays, numbers, or tuples, "
        "lists, dicts, namedtuples, dataclasses and registered pytree classes of them"
    )


def inline_graph(graph: Graph, args: list[Any], captures: list[Tracer]) -> list[Tracer]:
    """Emit `graph` into the active trace with `args` (+ `captures`) as its inputs."""
    builder = ir.current_builder()
    with ir.source_location(user_source()):
        vars_ = [to_var(a, builder) for a in args] + [lift(t, builder) for t in captures]
    outs = ir.inline(builder, graph, vars_)
    return [Tracer(v, builder) for v in outs]
