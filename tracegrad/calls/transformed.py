"""`Transformed`: a function under a transform, and the path of its calls to a compiled program.

Called on arrays, a `Transformed` splits its arguments into static values and traced leaves,
looks its program up in the program store (runtime/program_store.py: the key, the lookup, what
is kept), and on a miss traces, transforms and optimises (calls/derive.py, imported then), and
has the store compile and keep it; called on tracers (inside another trace), it inlines the
graph it derives.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..runtime import backends
from .. import ir
from ..base import config
from ..base.errors import TracingError
from ..runtime import program_cache, program_store, tiered
from ..base import progress
from ..runtime.program import (
    MISS,
    CompiledCall,
    GuardFailed,
    cheap_signature,
    configure_logging,
    fast_call,
    store_generation,
    aval,
    run_other_variant,
)
from ..runtime.program_store import Signature
from ..base.tree import TreeDef, flatten
from ..base.tree import is_user_node_type
from .arguments import as_array, check_argnums, int_tuple, leaf_names


def spec_of(fun: Callable) -> Any:
    """What identifies a function in the program store. A Python function is identified by its
    code, not by the function object: the values it reads from outside (closure, globals,
    defaults) are guarded or passed as hidden inputs (tracing/scope.py), so lambdas made afresh in a
    loop share one program, and the store keeps no user function (nor its closure) alive."""
    if isinstance(fun, Transformed):
        return fun.spec
    if isinstance(fun, types.FunctionType):
        return fun.__code__
    if isinstance(fun, types.MethodType):
        return ("method", spec_of(fun.__func__))
    if isinstance(fun, functools.partial):
        return ("partial", spec_of(fun.func), len(fun.args), tuple(fun.keywords))
    inner = getattr(type(fun), "_capture_children", None)
    if inner:  # tracegrad's own callables (custom_vjp): identified by what they wrap
        return (
            type(fun),
            *(spec_of(getattr(fun, a)) if callable(getattr(fun, a, None)) else None for a in inner),
        )
    module = getattr(type(fun), "__module__", "") or ""
    if module.split(".")[0] in ("numpy", "builtins", "scipy", "math"):
        return fun  # a library function: lives as long as its module
    return ("object", type(fun))  # a callable object: its attributes are guarded


def name_of(fun: Callable) -> str:
    if isinstance(fun, Transformed):
        return f"{fun.kind}({name_of(fun.fun)})"
    return getattr(fun, "__qualname__", getattr(fun, "__name__", repr(fun)))


class Transformed:
    """A function under a transform. Call it like the original function."""

    _capture_children = ("fun",)  # what the capture walk follows (see tracing/scope.py)
    # Set on the variants made for methods (`_method`): `self` is argument 0 and argnums count
    # after it (self_shift = 1); a `self` that is not a pytree is static, keyed by identity.
    self_shift = 0
    _static_self = False

    def __init__(
        self,
        fun: Callable,
        kind: str,
        argnums: int | tuple[int, ...] = 0,
        has_aux: bool = False,
        static_argnums: int | Sequence[int] = (),
        backend: str | None = None,
        taps: bool = False,
        holomorphic: bool = False,
    ):
        if not callable(fun):
            raise TypeError(f"{kind} expects a function, got {type(fun).__name__}")
        check_argnums(argnums, kind)
        if isinstance(argnums, (int, np.integer)):
            argnums = int(argnums)  # a NumPy integer is an int: one gradient, not a tuple of one
        else:
            argnums = tuple(int(a) for a in argnums)
        self.fun, self.kind, self.argnums, self.has_aux = fun, kind, argnums, has_aux
        if taps and kind not in ("grad", "value_and_grad"):
            raise ValueError("taps=True is for grad and value_and_grad")
        self.taps = bool(taps)
        if holomorphic and kind not in ("grad", "value_and_grad", "jacobian", "jacfwd"):
            raise ValueError("holomorphic=True is for grad, value_and_grad, jacobian and jacfwd")
        # a complex function's complex derivative (docs/complex.md), not a real loss's gradient
        self.holomorphic = bool(holomorphic)
        self.static_argnums = int_tuple(static_argnums, "static_argnums")
        if any(i < 0 for i in self.static_argnums):
            raise ValueError(
                f"static_argnums must be non-negative (they count the positional arguments from "
                f"0), got {static_argnums!r}"
            )
        if len(set(self.static_argnums)) != len(self.static_argnums):
            raise ValueError(f"static_argnums names an argument twice: {static_argnums!r}")
        self.backend = backend
        if backend is not None:
            backends.get_backend(backend)  # fail early on a bad name
        # False: Python control flow on traced values is refused, not guarded (tracing/branches.py)
        self.guards = True
        functools.update_wrapper(self, fun, updated=())
        configure_logging()
        self._fast_calls: dict[tuple, Callable] = {}  # cheap signature -> cached call

    @property
    def spec(self) -> tuple:
        spec = (
            self.kind,
            spec_of(self.fun),
            self.argnums,
            self.has_aux,
            self.static_argnums,
            self.taps,
        )
        if self.holomorphic:
            spec = (*spec, "holomorphic")
        return spec if self.guards else (*spec, "no guards")

    @property
    def name(self) -> str:
        """The transform and the function, as messages name them: `grad(loss)`."""
        return name_of(self)

    @property
    def trace_count(self) -> int:
        """How many times this transform of this function (of its code: lambdas made afresh
        from one line count together) has been traced to a new program for its backend."""
        return program_store.trace_count(self.spec, backends.get_backend(self.backend).name)

    def __repr__(self) -> str:
        return f"<tracegrad {name_of(self)}>"

    def __get__(self, obj, objtype=None):  # decorating methods
        if obj is None:
            return self
        return _Bound(self._method(is_user_node_type(type(obj))), obj)

    def _method(self, pytree_self: bool) -> Transformed:
        """This transform for a method called through an instance, `obj.method(*args)`: `self`
        comes first and argnums/static_argnums count the arguments after it (`@tg.grad` on
        `def loss(self, w)` differentiates `w`). A `self` that is a pytree (a registered class,
        a namedtuple, a dataclass) is traced and not differentiated; any other `self` is a static
        argument keyed by identity, whose attributes are read at call time (tracing/scope.py). Made
        once per transform and kind of `self`; a transform of a transform shifts all the way in."""
        methods = self.__dict__.setdefault("_methods", {})
        variant = methods.get(pytree_self)
        if variant is None:
            import copy  # here: only methods need it, and it is one import less at start-up

            variant = copy.copy(self)
            variant._bind_self(pytree_self)
            variant._fast_calls, variant._methods = {}, {}
            methods[pytree_self] = variant
        return variant

    def _bind_self(self, pytree_self: bool) -> None:
        """On a fresh copy (`_method`): shift the per-argument options past `self`. A transform
        with options of its own per positional argument (vmap's in_axes) extends this."""
        if isinstance(self.argnums, int):
            self.argnums += 1
        else:
            self.argnums = tuple(a + 1 for a in self.argnums)
        shifted = tuple(s + 1 for s in self.static_argnums)
        self.static_argnums = shifted if pytree_self else (0, *shifted)
        self.self_shift, self._static_self = 1, not pytree_self
        if isinstance(self.fun, Transformed):
            self.fun = self.fun._method(pytree_self)

    # ---- calling
    def __call__(self, *args, **kwargs):
        if not kwargs:
            fast = self._fast_calls.get(cheap_signature(args))
            if fast is not None:
                out = fast(self, args)
                if out is not MISS:
                    return out
        self._check_call(args)
        if ir.active_builder() is not None:
            from . import derive  # tracing is loaded: inline the graph into the trace

            return derive.inline(self, args, kwargs)
        return self._execute(args, kwargs)

    def _check_call(self, args: tuple) -> None:
        shift = self.self_shift  # messages count the arguments as the caller wrote them
        where = " after self" if shift else ""
        for i in self.static_argnums:
            if i >= len(args):
                raise ValueError(
                    f"static_argnums {i - shift} is out of range: {name_of(self)} was called "
                    f"with {len(args) - shift} positional argument(s){where}"
                )
        if self.kind == "jit":
            return
        for i in int_tuple(self.argnums, "argnums"):
            if i >= len(args):
                raise ValueError(
                    f"argnums {i - shift} is out of range: {name_of(self)} was called with "
                    f"{len(args) - shift} positional argument(s){where}; argnums counts from 0 "
                    "(keyword arguments are never differentiated)"
                )
            if i in self.static_argnums:
                raise ValueError(f"argument {i - shift} cannot be both differentiated and static")

    def split_arguments(self, args: tuple, kwargs: dict | None = None):
        """(static values, positions of the traced arguments, their leaves, their tree). Keyword
        arguments are traced too: one dict (sorted by name) after the positional arguments."""
        static = tuple(args[i] for i in self.static_argnums)
        shift = self.self_shift  # messages count a method's arguments after self
        for i, s in zip(self.static_argnums, static, strict=True):
            if i == 0 and self._static_self:
                continue  # keyed by identity (static_key)
            try:
                hash(s)
            except TypeError:
                raise TypeError(
                    f"static argument {i - shift} of {name_of(self)} must be hashable, got "
                    f"{type(s).__name__}; pass arrays as ordinary (traced) arguments"
                ) from None
        dynamic = tuple(a for i, a in enumerate(args) if i not in self.static_argnums)
        positions = [i for i in range(len(args)) if i not in self.static_argnums]
        for i, a in zip(positions, dynamic, strict=True):
            if a is None:
                raise TypeError(
                    f"argument {i - shift} of {name_of(self)} is None; tracegrad traces arrays "
                    f"and numbers. Mark it static with static_argnums=({i - shift},) or leave it "
                    "out."
                )
        if kwargs:
            dynamic += (dict(sorted(kwargs.items())),)
        leaves, treedef = flatten(dynamic)
        return static, positions, leaves, treedef

    def _execute(self, args: tuple, kwargs: dict | None = None):
        static, positions, leaves, treedef = self.split_arguments(args, kwargs)
        arrays = self._arrays(leaves, treedef, positions)
        backend = backends.get_backend(self.backend)
        avals = [aval(a) for a in arrays]
        if backend.name != "cuda" and any(not isinstance(a, np.ndarray) for a in arrays):
            raise TypeError(
                f"{name_of(self)} got a GPU (device) array but runs on the {backend.name!r} "
                "backend; pass backend='cuda', or copy the array to the host first"
            )
        sig, key = program_store.program_key(
            self.spec, backend, treedef, avals, static, self._static_self
        )
        program, hidden = program_store.find(self, static, key)
        if hidden is None:
            program, hidden = self._persisted(static, key, backend, program)
        if hidden is None:
            names = leaf_names(treedef, positions, self.self_shift)
            why = None if program is None else program.captured.why(self, static)
            self._note_retrace(sig, names, why)
            return self._trace_and_run(
                static, key, backend, arrays, treedef, positions, args, kwargs
            )
        try:
            out = program(arrays + hidden)
        except GuardFailed as failed:
            return self._other_branch(
                failed, hidden, static, key, backend, arrays, treedef, positions, args, kwargs
            )
        if not kwargs:
            self._remember_fast_call(args, program)
        return out

    def _persisted(self, static: tuple, key: tuple, backend, found: CompiledCall | None):
        """(program, hidden inputs) from a program an earlier process persisted under `key`
        (program_cache.py), compiled and kept in the store; else (`found`, None)."""
        stored = program_cache.load(self, static, key)
        if stored is None:
            return found, None
        graph, out_tree, captured = stored
        run = tiered.compile(backend, graph, name_of(self))
        program = CompiledCall(graph, out_tree, run, backend.name, [], captured)
        program_store.keep(key, program, traced=False)
        return program, captured.read(self, static)

    def _trace_and_run(self, static, key, backend, arrays, treedef, positions, args, kwargs):
        from . import derive  # tracing, autodiff and the passes: loaded on the first miss

        with progress.compiling(name_of(self), backend.name):
            program, hidden = derive.trace_program(
                self, static, key, backend, name_of(self), arrays, treedef, positions
            )
            if not kwargs:
                self._remember_fast_call(args, program)
            # the first call compiles the kernels; its guards are the trace's own answers
            return program(arrays + hidden, check=False)

    def _other_branch(
        self, failed, hidden, static, key, backend, arrays, treedef, positions, args, kwargs
    ):
        """A call whose answers to the function's Python branches differ from the program's
        (`failed`, run with `hidden`): the variant traced for its answers, else the program's
        own result where its trace answers as it did (a compiled predicate rounded otherwise),
        else a new trace (tracing/branches.py)."""
        first = failed.program
        try:
            out, program = run_other_variant(
                failed, arrays, lambda p: p.captured.read(self, static)
            )
        except GuardFailed as last:
            failed = last
        else:
            program_store.prefer(key, program)
            if not kwargs:
                self._remember_fast_call(args, program)
            return out
        if first.trace_agrees(arrays + hidden):
            return first(arrays + hidden, check=False)
        guard = failed.program.guards[failed.index]
        count = program_store.variants(key)
        if count >= config.max_variants():
            raise TracingError(
                f"{name_of(self)} has been traced for {count} outcomes of Python control flow on "
                f"traced values (TRACEGRAD_MAX_VARIANTS={config.max_variants()}), and the one at "
                f"{guard.describe(failed.answers[failed.index])} keeps changing. Write that "
                "branch with np.where(condition, a, b) or tg.cond(pred, true_fun, false_fun, "
                "*operands), and a loop that runs until a traced condition fails with "
                "tg.while_loop(cond_fun, body_fun, init) (or tg.scan / tg.fori_loop), so that one "
                "program covers every outcome; or raise TRACEGRAD_MAX_VARIANTS."
            )
        program_store.note_branch(
            name_of(self), guard.describe(failed.answers[failed.index]), count + 1
        )
        return self._trace_and_run(static, key, backend, arrays, treedef, positions, args, kwargs)

    def _remember_fast_call(self, args: tuple, program: CompiledCall) -> None:
        """A path for the next calls with the same cheap signature (positional floats and
        arrays): no flattening, no signature, no program lookup. A method with a static `self`
        and no other static argument gets one per instance (keyed by identity, as its program:
        the guards read `self` again on every call)."""
        if self._static_self and self.static_argnums == (0,):
            cheap = cheap_signature(args[1:])
            cheap = None if cheap is None else (id(args[0]), cheap)
        elif self.static_argnums:
            return
        else:
            cheap = cheap_signature(args)
        if cheap is None:
            return
        if len(self._fast_calls) >= 64:
            self._fast_calls.clear()
        self._fast_calls[cheap] = fast_call(program, self.backend, store_generation[0])

    def _note_retrace(self, sig: Signature, names: list[str], why: str | None) -> None:
        program_store.note_retrace(self.spec, name_of(self), sig, names, why)

    def _arrays(self, leaves: list, treedef: TreeDef, positions: list[int]) -> list[np.ndarray]:
        """The call's leaves as arrays; names for the error message only when one is bad."""
        arrays = []
        for leaf in leaves:
            if type(leaf) is np.ndarray and leaf.dtype.kind in "fiub" and leaf.dtype.isnative:
                arrays.append(leaf)
            elif type(leaf) is float:
                arrays.append(np.asarray(leaf))
            else:
                name = leaf_names(treedef, positions, self.self_shift)[len(arrays)]
                arrays.append(as_array(leaf, name, name_of(self)))
        return arrays

    # ---- deriving the graph (calls/derive.py, loaded on the first miss)
    def build(self, avals, treedef: TreeDef, static: tuple, positions: list[int], scope=None):
        """Trace and transform: (graph with flat outputs, their tree, captured tracers). With a
        `scope` (top-level calls), arrays read from outside the arguments become hidden inputs,
        after the arguments' leaves. Composite transforms (api_transforms.py) derive their own."""
        from . import derive

        return derive.derive_graph(self, avals, treedef, static, positions, scope)


class _Bound:
    """A transform reached through an instance (`obj.loss`): calls `method(obj, *args)`, with
    the cached-call path of a static `self` (see Transformed._remember_fast_call)."""

    __slots__ = ("method", "obj")
    _capture_children = ("method", "obj")  # what the capture walk follows (see tracing/scope.py)

    def __init__(self, method: Transformed, obj: Any):
        self.method, self.obj = method, obj

    def __call__(self, *args, **kwargs):
        method, obj = self.method, self.obj
        if not kwargs and method._static_self:
            fast = method._fast_calls.get((id(obj), cheap_signature(args)))
            if fast is not None:
                out = fast(method, args, (obj,))
                if out is not MISS:
                    return out
        return method(obj, *args, **kwargs)

    @property
    def trace_count(self) -> int:
        return self.method.trace_count

    def __repr__(self) -> str:
        return f"<tracegrad {name_of(self.method)} bound to {type(self.obj).__name__}>"
