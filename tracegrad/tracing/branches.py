"""Python control flow on traced values: evaluated on the call being traced, kept as a guard.

A trace of a top-level call runs on that call's arrays, so when the user's code asks a traced
value for a Python answer (`if x > 0:`, `while r > tol:`, `range(n)`, `int(k)`, a list index),
the answer is known: the graph built so far is evaluated on those arrays (node by node, each once,
by the primitives' NumPy implementations) and the answer is returned to the code, which goes on
down the branch taken. The predicate is kept as a **guard**: a value of the graph, returned by
the compiled program next to its results, and compared on every later call with the answer the
trace got. A call whose guards come out otherwise gets no result from that program: the program
for its answers is found among the function's variants, or traced anew (calls/transformed.py).
The derivative is that of the branch taken, as a tape (autograd, PyTorch) gives it.

A trace is *branching* (can answer) when the caller gives it the values of its inputs: the
top-level trace of a call, and a transform traced inside such a trace on its values (a `grad`
inside a `jit`, the inner `grad` of a Hessian). Traces of a function for one example of a batch
(`vmap`), of a loop body or branch (`tg.scan`, `tg.while_loop`, `tg.cond`) or of a custom
derivative are not: there the value is not one number, and bool() is refused as it always was.
"""

from __future__ import annotations

import contextvars
import operator
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..base import config
from ..ir import Builder, Graph, Var
from .guards import BranchGuard, answer, guard_subgraph
from .messages import math_call_error, writes_into_subscript


class Collected(list):
    """The guards a trace's transform returns last (BranchGuards, in order), and for a top-level
    trace its `reference`: the graph that computes them exactly as the trace did (its own nodes,
    before any rewriting), which decides when a compiled program's guard disagrees with its trace
    by a rounding (runtime/program.py)."""

    reference: Graph | None = None


class Branching:
    """A branching trace's state: the values of the graph's variables computed so far (inputs
    given by the caller, hidden inputs as the scope reads them, captured outer values through
    their own trace), how far through the builder's nodes they are computed, and the guards."""

    def __init__(self, builder: Builder, inputs: list[Any]):
        self.builder = builder
        self.values: dict[Var, np.ndarray] = {}
        # the leaves given for the inputs made so far (jvp traces the primals only: the first)
        self.sources = dict(zip(builder.inputs, inputs, strict=False))
        self.done = 0  # builder.nodes[:done] are in `values`
        self.guards: list[tuple[Var, BranchGuard]] = []
        self.open = True

    def value(self, var: Var) -> np.ndarray:
        """The value of `var` on the call being traced."""
        found = self.values.get(var)
        if found is not None:
            return found
        if var in self.sources or any(var is v for _, v in self.builder.captures):
            return self._input(var)
        nodes = self.builder.nodes
        with np.errstate(all="ignore"):
            while self.done < len(nodes):
                node = nodes[self.done]
                args = [self._get(v) for v in node.inputs]
                out = node.prim.impl(*args, **node.params)
                self.values[node.out] = np.asarray(out, dtype=node.out.dtype)
                self.done += 1
                if node.out is var:
                    return self.values[var]
        return self._input(var)  # an input made after the last node (a late hidden input)

    def _get(self, var: Var) -> np.ndarray:
        found = self.values.get(var)
        return found if found is not None else self._input(var)

    def _input(self, var: Var) -> np.ndarray:
        if var in self.sources:
            value = self.sources[var]
        else:
            for outer, inner in self.builder.captures:
                if inner is var:
                    value = concrete(outer)
                    break
            else:
                raise KeyError(var)  # cannot happen: every variable is an input or a node's
        value = np.asarray(value, dtype=var.dtype)
        self.values[var] = value
        return value


def concrete(x: Any) -> np.ndarray:
    """The value of a tracer (of a branching trace) or array on the call being traced."""
    builder = getattr(x, "builder", None)
    if builder is None:
        return np.asarray(x)
    state = getattr(builder, "branching", None)
    if state is None:
        raise NotBranching
    return state.value(x.ir_var)


class NotBranching(Exception):
    """A value of a trace that cannot answer (see the module docstring)."""


# ---- the values a trace is given by its caller
_given: contextvars.ContextVar[list | None] = contextvars.ContextVar("branching", default=None)


@contextmanager
def given_inputs(values: list[Any] | None) -> Iterator[list[BranchGuard]]:
    """The next branching trace (`trace(..., branching=True)`) runs on `values` (its leaves, in
    order: arrays, numbers, or tracers of a branching trace); yields the list its guards are
    added to, as the last outputs of the graph the transform returns. With `values` None (or
    guards switched off) the trace cannot answer."""
    guards = Collected()
    token = _given.set(None if values is None or not enabled() else (values, guards))
    try:
        yield guards
    finally:
        _given.reset(token)


def enabled() -> bool:
    return config.guards()


def can_answer() -> bool:
    """Whether a transform traced here may answer: at the top level, or inside a trace that
    answers (its guards are then this trace's)."""
    from .. import ir

    builder = ir.active_builder()
    if builder is None:
        return True
    state = builder.branching
    return state is not None and state.open


def begin(builder: Builder, branching: bool) -> tuple[list, list[BranchGuard]] | None:
    """A trace's start, once its inputs are made: the values its caller gave (`given_inputs`)
    if it is `branching`, taken either way so that a trace inside it does not see them."""
    given = _given.get()
    _given.set(None)
    if not branching or given is None:
        return None
    values, _ = given
    if not any(_is_unknowable(v) for v in values):
        builder.branching = Branching(builder, values)
    return given


def note_input(builder: Builder, var: Var, value: Any) -> None:
    """A hidden input (an array read from outside the arguments) and its value on this call."""
    if builder.branching is not None:
        builder.branching.sources[var] = value


def _is_unknowable(value: Any) -> bool:
    builder = getattr(value, "builder", None)
    return builder is not None and getattr(builder, "branching", None) is None


def finish(builder: Builder, given: tuple[list, list[BranchGuard]] | None) -> list[Var]:
    """The guard variables of a finished trace (its last outputs), their records in the given
    list, and the trace closed: a value of it asked later cannot become a guard."""
    state = getattr(builder, "branching", None)
    if state is None:
        return []
    state.open = False
    builder.branching = None  # no cycle keeps the values it read (a closure's arrays) alive
    assert given is not None
    collected = given[1]
    collected.extend(g for _, g in state.guards)
    outputs = [v for v, _ in state.guards]
    if outputs and builder.parent is None:
        collected.reference = guard_subgraph(builder.graph(outputs))
    return outputs


def keep_inner_guards(tracers: list, guards: list[BranchGuard]) -> None:
    """The guards of a transform traced inside this trace (`tracers`, its last outputs inlined
    here) become this trace's guards."""
    from .. import ir

    builder = ir.current_builder()
    state = builder.branching
    assert state is not None
    for tracer, guard in zip(tracers, guards, strict=True):
        state.guards.append((tracer.ir_var, guard))


class Answers:
    """A base of `Tracer`, before `Unknowable`: the questions a branching trace answers."""

    __slots__ = ()

    def __bool__(self):
        answered = decide(self, "bool", "branch on")
        return super().__bool__() if answered is None else bool(answered)

    def __int__(self):
        math_call_error()
        answered = decide(self, "int", "convert to int")
        return super().__int__() if answered is None else answered

    def __index__(self):
        math_call_error()
        answered = decide(self, "int", "use as an index")
        return super().__index__() if answered is None else answered

    def __float__(self):
        math_call_error()
        refuse_a_number(self, "float()")
        return super().__float__()

    def item(self, *args):
        refuse_a_number(self, ".item()")
        return super().item(*args)


def answer_slices(index: Any) -> Any:
    """`index` with the traced bounds of its slices (x[:n], x[i:i + 3]) answered as integers
    and guarded, where their traces can answer; as it is otherwise (the indexing code then
    refuses them)."""
    items = index if isinstance(index, tuple) else (index,)
    if not any(type(item) is slice and _answerable(item) for item in items):
        return index
    answered = tuple(
        slice(*(_bound(p) for p in (i.start, i.stop, i.step))) if type(i) is slice else i
        for i in items
    )
    return answered if isinstance(index, tuple) else answered[0]


def answer_sizes(args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """A constructor's arguments (np.zeros(n), np.ones((n, 3))) with their traced integers
    answered and guarded, or None when one cannot be (its trace does not answer, or it is not
    an integer of one element)."""

    def size(p: Any) -> Any:
        if isinstance(p, (tuple, list)):
            return type(p)(size(q) for q in p)
        if not hasattr(p, "builder"):
            return p
        state = getattr(p.builder, "branching", None)
        if state is None or not state.open or p.dtype.kind not in "iu" or p.size != 1:
            raise NotBranching
        return operator.index(p)

    try:
        return tuple(size(a) for a in args), {k: size(v) for k, v in kwargs.items()}
    except NotBranching:
        return None


def _answerable(item: slice) -> bool:
    for p in (item.start, item.stop, item.step):
        state = getattr(getattr(p, "builder", None), "branching", None)
        if state is not None and state.open:
            return True
    return False


def _bound(p: Any) -> Any:
    return operator.index(p) if hasattr(p, "builder") else p


def refuse_a_number(tracer: Any, what: str) -> None:
    """float() and .item() are not answered where branches are: the Python float would carry no
    derivative, and every later use of it would be a constant of the program."""
    state = getattr(tracer.builder, "branching", None)
    if state is None or not state.open or writes_into_subscript():
        return  # the caller raises its usual error (writing into an array made outside...)
    from ..base.errors import TracingError
    from .source import user_line

    raise TracingError(
        f"{what} of a traced value would be a Python number: it would carry no derivative, and "
        f"the program would keep it as a constant{user_line()}\nKeep it an array (use the value "
        "itself, or x.reshape(()) for a 0-d array); tg.stop_gradient(x) is the value without its "
        "derivative. A Python branch on it (if x > 0:) works as it is."
    )


def decide(tracer: Any, kind: str, what: str) -> bool | int | None:
    """bool() / int() / operator.index() of a traced value: the answer on the call being traced,
    kept as a guard; None where the trace cannot answer (the caller raises its usual error)."""
    from .. import ir
    from .source import user_source

    builder = tracer.builder
    state = getattr(builder, "branching", None)
    if state is None or not state.open:
        return None
    if kind == "bool" and tracer.size != 1:
        raise ValueError(
            f"the truth value of a traced array with {tracer.size} elements is ambiguous (as for "
            "a NumPy array): use (x > 0).any() or (x > 0).all(), or np.where to choose "
            "elementwise"
        )
    if kind == "int" and tracer.size != 1:
        raise TypeError(
            f"only a traced value of one element can {what}, not of shape {tracer.shape}"
        )
    try:
        value = state.value(tracer.ir_var)
    except NotBranching:  # it reads a value of an enclosing trace that cannot answer
        return None
    if what == "use as an index" and tracer.dtype.kind not in "iu":
        # A Python int argument is traced as float64: range(n) and lst[n] of such a number
        # take it while it is whole, guarded as that exact number (a later 2.5 fails, and
        # then raises here as Python would).
        if tracer.dtype.kind != "f" or not float(value) == int(np.trunc(value)):
            raise TypeError(
                "only integer traced values can be used as an index (as in NumPy), or floats "
                f"that hold a whole number (Python ints are traced as float64); this one is "
                f"{float(value)!r}, of dtype {tracer.dtype}"
            )
        kind = "whole"
    outcome = int(value) if kind == "whole" else answer(kind, value)  # 2.0 == 2: it holds
    with ir.building(builder):
        scalar = tracer.reshape(())
        if kind == "bool":
            guard_var = scalar if tracer.dtype == np.bool_ else scalar != 0
        elif kind == "int":  # the integer as it is (any width), a float truncated as int() does
            guard_var = scalar if tracer.dtype.kind in "iub" else np.trunc(scalar)
        else:  # "whole": the float itself, equal to the integer only while it is that number
            guard_var = scalar
        state.guards.append((guard_var.ir_var, BranchGuard(kind, outcome, user_source())))
    return outcome
