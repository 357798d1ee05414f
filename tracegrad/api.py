"""The public transforms: grad, value_and_grad, jacobian, hessian, jit, make_ir, stop_gradient.

Every transform is a `Transformed` callable. Called on arrays, it traces the function once per
argument signature (shapes, dtypes, static arguments, tree structure), derives the graph it needs,
optimises it, compiles it for a backend and caches the program. Called inside another trace (on
tracers), it derives the same graph and inlines it into the enclosing trace: that is how
transforms compose (grad of grad, jit of grad, hessian = jacobian of grad).
"""

from __future__ import annotations

import copy
import functools
import types
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import autodiff, backends, ir, passes
from .runtime import program_cache, progress, tiered
from . import primitives as P
from .capture import Scope, refuse_array_subclass
from .ir import Graph
from .runtime.program import (
    CompiledCall,
    _BoundedDict,
    Signature,
    _cheap_signature,
    _configure_logging,
    _fast_call,
    _generation,
    _MISS,
    _last_signature,
    _log_enabled,
    _programs,
    _trace_counts,
    aval,
    clear_programs,
    is_device_array,
    log,
    variant,
)
from .trace import CallArgs, Tracer, inline_graph, trace
from .transforms import forward, rolling
from .tree import (
    LEAF,
    TreeDef,
    flatten,
    is_user_node_type,
    leaf_paths,
    replace_leaves,
    tuple_of,
    unflatten,
)

GUARD_RETRACE_WARNING = 8  # traces caused by changed captured values before a warning
_guard_retraces: _BoundedDict = _BoundedDict()


def _spec_of(fun: Callable) -> Any:
    """What identifies a function in the program store. A Python function is identified by its
    code, not by the function object: the values it reads from outside (closure, globals,
    defaults) are guarded or passed as hidden inputs (capture.py), so lambdas made afresh in a
    loop share one program, and the store keeps no user function (nor its closure) alive."""
    if isinstance(fun, Transformed):
        return fun.spec
    if isinstance(fun, types.FunctionType):
        return fun.__code__
    if isinstance(fun, types.MethodType):
        return ("method", _spec_of(fun.__func__))
    if isinstance(fun, functools.partial):
        return ("partial", _spec_of(fun.func), len(fun.args), tuple(fun.keywords))
    inner = getattr(type(fun), "_capture_children", None)
    if inner:  # tracegrad's own callables (custom_vjp): identified by what they wrap
        return (type(fun), *(_spec_of(getattr(fun, a)) if callable(getattr(fun, a, None)) else None for a in inner))
    module = getattr(type(fun), "__module__", "") or ""
    if module.split(".")[0] in ("numpy", "builtins", "scipy", "math"):
        return fun  # a library function: lives as long as its module
    return ("object", type(fun))  # a callable object: its attributes are guarded


def _name_of(fun: Callable) -> str:
    if isinstance(fun, Transformed):
        return f"{fun.kind}({_name_of(fun.fun)})"
    return getattr(fun, "__qualname__", getattr(fun, "__name__", repr(fun)))


class Transformed:
    """A function under a transform. Call it like the original function."""

    _capture_children = ("fun",)  # what the capture walk follows (see capture.py)
    # Set on the variants made for methods (`_method`): `self` is argument 0 and argnums count
    # after it (_self_shift = 1); a `self` that is not a pytree is static, keyed by identity.
    _self_shift = 0
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
    ):
        if not callable(fun):
            raise TypeError(f"{kind} expects a function, got {type(fun).__name__}")
        _check_argnums(argnums, kind)
        if isinstance(argnums, (int, np.integer)):
            argnums = int(argnums)  # a NumPy integer is an int: one gradient, not a tuple of one
        else:
            argnums = tuple(int(a) for a in argnums)
        self.fun, self.kind, self.argnums, self.has_aux = fun, kind, argnums, has_aux
        if taps and kind not in ("grad", "value_and_grad"):
            raise ValueError("taps=True is for grad and value_and_grad")
        self.taps = bool(taps)
        self.static_argnums = _int_tuple(static_argnums, "static_argnums")
        self.backend = backend
        if backend is not None:
            backends.get_backend(backend)  # fail early on a bad name
        functools.update_wrapper(self, fun, updated=())
        _configure_logging()
        self._fast_calls: dict[tuple, Callable] = {}  # cheap signature -> cached call

    @property
    def spec(self) -> tuple:
        return (
            self.kind, _spec_of(self.fun), self.argnums, self.has_aux, self.static_argnums, self.taps
        )

    @property
    def trace_count(self) -> int:
        """How many times this transform of this function (of its code: lambdas made afresh
        from one line count together) has been traced to a new program for its backend."""
        return _trace_counts.get((self.spec, backends.get_backend(self.backend).name), 0)

    def __repr__(self) -> str:
        return f"<tracegrad {_name_of(self)}>"

    def __get__(self, obj, objtype=None):  # decorating methods
        if obj is None:
            return self
        return _Bound(self._method(is_user_node_type(type(obj))), obj)

    def _method(self, pytree_self: bool) -> Transformed:
        """This transform for a method called through an instance, `obj.method(*args)`: `self`
        comes first and argnums/static_argnums count the arguments after it (`@tg.grad` on
        `def loss(self, w)` differentiates `w`). A `self` that is a pytree (a registered class,
        a namedtuple, a dataclass) is traced and not differentiated; any other `self` is a static
        argument keyed by identity, whose attributes are read at call time (capture.py). Made
        once per transform and kind of `self`; a transform of a transform shifts all the way in."""
        methods = self.__dict__.setdefault("_methods", {})
        variant = methods.get(pytree_self)
        if variant is None:
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
        self._self_shift, self._static_self = 1, not pytree_self
        if isinstance(self.fun, Transformed):
            self.fun = self.fun._method(pytree_self)

    # ---- calling
    def __call__(self, *args, **kwargs):
        if not kwargs:
            fast = self._fast_calls.get(_cheap_signature(args))
            if fast is not None:
                out = fast(self, args)
                if out is not _MISS:
                    return out
        self._check_call(args)
        if ir.active_builder() is not None:
            return self._inline(args, kwargs)
        return self._execute(args, kwargs)

    def _check_call(self, args: tuple) -> None:
        shift = self._self_shift  # messages count the arguments as the caller wrote them
        where = " after self" if shift else ""
        for i in self.static_argnums:
            if i >= len(args):
                raise ValueError(
                    f"static_argnums {i - shift} is out of range: {_name_of(self)} was called "
                    f"with {len(args) - shift} positional argument(s){where}"
                )
        if self.kind == "jit":
            return
        for i in _int_tuple(self.argnums, "argnums"):
            if i >= len(args):
                raise ValueError(
                    f"argnums {i - shift} is out of range: {_name_of(self)} was called with "
                    f"{len(args) - shift} positional argument(s){where}; argnums counts from 0 "
                    "(keyword arguments are never differentiated)"
                )
            if i in self.static_argnums:
                raise ValueError(f"argument {i - shift} cannot be both differentiated and static")

    def _split(self, args: tuple, kwargs: dict | None = None):
        """(static values, positions of the traced arguments, their leaves, their tree). Keyword
        arguments are traced too: one dict (sorted by name) after the positional arguments."""
        static = tuple(args[i] for i in self.static_argnums)
        shift = self._self_shift  # messages count a method's arguments after self
        for i, s in zip(self.static_argnums, static, strict=True):
            if i == 0 and self._static_self:
                continue  # keyed by identity (_static_key)
            try:
                hash(s)
            except TypeError:
                raise TypeError(
                    f"static argument {i - shift} of {_name_of(self)} must be hashable, got "
                    f"{type(s).__name__}; pass arrays as ordinary (traced) arguments"
                ) from None
        dynamic = tuple(a for i, a in enumerate(args) if i not in self.static_argnums)
        positions = [i for i in range(len(args)) if i not in self.static_argnums]
        for i, a in zip(positions, dynamic, strict=True):
            if a is None:
                raise TypeError(
                    f"argument {i - shift} of {_name_of(self)} is None; tracegrad traces arrays "
                    f"and numbers. Mark it static with static_argnums=({i - shift},) or leave it "
                    "out."
                )
        if kwargs:
            dynamic += (dict(sorted(kwargs.items())),)
        leaves, treedef = flatten(dynamic)
        return static, positions, leaves, treedef

    def _wrap_args(self, static: tuple, positions: list[int]):
        """The traced arguments (a tuple, the keyword arguments' dict last if any) -> the call."""

        def wrap(dynamic: tuple) -> tuple | CallArgs:
            full: list[Any] = [None] * (len(static) + len(positions))
            for i, s in zip(self.static_argnums, static, strict=True):
                full[i] = s
            for i, d in zip(positions, dynamic, strict=False):  # + the kwargs dict
                full[i] = d
            if len(dynamic) > len(positions):
                return CallArgs(tuple(full), dynamic[-1])
            return tuple(full)

        return wrap

    def _execute(self, args: tuple, kwargs: dict | None = None):
        static, positions, leaves, treedef = self._split(args, kwargs)
        arrays = self._arrays(leaves, treedef, positions)
        backend = backends.get_backend(self.backend)
        avals = [aval(a) for a in arrays]
        if backend.name != "cuda" and any(not isinstance(a, np.ndarray) for a in arrays):
            raise TypeError(
                f"{_name_of(self)} got a GPU (device) array but runs on the {backend.name!r} "
                "backend; pass backend='cuda', or copy the array to the host first"
            )
        static_key = _static_key(static, self._static_self)
        sig = Signature(treedef, tuple((s, d.str) for s, d in avals), static_key)
        key = (self.spec, backend.name, variant(backend), sig)
        program = _programs.get(key)
        hidden = None if program is None else program.captured.read(self, static)
        if hidden is None:  # persisted by an earlier process (program_cache.py)?
            stored = program_cache.load(self, static, key)
            if stored is not None:
                graph, out_tree, captured = stored
                run = tiered.compile(backend, graph, _name_of(self))
                program = CompiledCall(graph, out_tree, run, backend.name, [], captured)
                _programs.put(key, program)
                hidden = captured.read(self, static)
        if hidden is None:
            names = _leaf_names(treedef, positions, self._self_shift)
            why = None if program is None else program.captured.why(self, static)
            self._note_retrace(sig, names, why)
            with progress.compiling(_name_of(self)):
                scope = Scope.of(self, static)
                graph, out_tree, captures = self.build(avals, treedef, static, positions, scope)
                assert not captures, "a top-level trace cannot capture values"
                graph, hooks = passes.extract_hooks(passes.optimize(graph))
                captured = scope.finish(self, static)
                run = tiered.compile(backend, graph, _name_of(self))
                program = CompiledCall(graph, out_tree, run, backend.name, hooks, captured)
                _programs.put(key, program)
                program_cache.save(self, static, key, graph, out_tree, hooks, captured)
                counted = (self.spec, backend.name)
                _trace_counts[counted] = _trace_counts.get(counted, 0) + 1
                hidden = captured.read(self, static)
                if hidden is None:  # cannot happen unless a guard is flaky: use what was traced
                    hidden = [v for _, v in scope.hidden]
                if not kwargs:
                    self._remember_fast_call(args, program)
                return program(arrays + hidden)  # the first call compiles the kernels
        if not kwargs:
            self._remember_fast_call(args, program)
        return program(arrays + hidden)

    def _remember_fast_call(self, args: tuple, program: CompiledCall) -> None:
        """A path for the next calls with the same cheap signature (positional floats and
        arrays): no flattening, no signature, no program lookup. A method with a static `self`
        and no other static argument gets one per instance (keyed by identity, as its program:
        the guards read `self` again on every call)."""
        if self._static_self and self.static_argnums == (0,):
            cheap = _cheap_signature(args[1:])
            cheap = None if cheap is None else (id(args[0]), cheap)
        elif self.static_argnums:
            return
        else:
            cheap = _cheap_signature(args)
        if cheap is None:
            return
        if len(self._fast_calls) >= 64:
            self._fast_calls.clear()
        self._fast_calls[cheap] = _fast_call(program, self.backend, _generation[0])

    def _note_retrace(self, sig: Signature, names: list[str], why: str | None) -> None:
        old = _last_signature.get(self.spec)
        _last_signature[self.spec] = sig
        if why is not None:
            _guard_retraces[self.spec] = count = _guard_retraces.get(self.spec, 0) + 1
            if count == GUARD_RETRACE_WARNING:
                log.warning(
                    "tracegrad: %s was traced %d times because a value it reads from outside "
                    "its arguments keeps changing (last: %s). Pass that value as an argument.",
                    _name_of(self), count, why,
                )
        if _log_enabled("retrace") and (old is not None or why is not None):
            reason = why if why is not None else sig.describe_change(old, names)
            log.info("re-tracing %s because %s", _name_of(self), reason)

    def _arrays(self, leaves: list, treedef: TreeDef, positions: list[int]) -> list[np.ndarray]:
        """The call's leaves as arrays; names for the error message only when one is bad."""
        arrays = []
        for leaf in leaves:
            if type(leaf) is np.ndarray and leaf.dtype.kind in "fiub":  # the common case, fast
                arrays.append(leaf)
            elif type(leaf) is float:
                arrays.append(np.asarray(leaf))
            else:
                name = _leaf_names(treedef, positions, self._self_shift)[len(arrays)]
                arrays.append(_as_array(leaf, name, _name_of(self)))
        return arrays

    def _inline(self, args: tuple, kwargs: dict | None = None):
        static, positions, leaves, treedef = self._split(args, kwargs)
        names = _leaf_names(treedef, positions, self._self_shift)
        avals = []
        for leaf, name in zip(leaves, names, strict=True):
            if isinstance(leaf, Tracer):
                avals.append((leaf.shape, leaf.dtype))
            else:
                avals.append(aval(_as_array(leaf, name, _name_of(self))))
        graph, out_tree, captures = self.build(avals, treedef, static, positions)
        outs = inline_graph(graph, leaves, captures)
        return unflatten(out_tree, outs)

    # ---- deriving the graph
    def build(self, avals, treedef: TreeDef, static: tuple, positions: list[int], scope=None):
        """Trace and transform: (graph with flat outputs, their tree, captured tracers). With a
        `scope` (top-level calls), arrays read from outside the arguments become hidden inputs,
        after the arguments' leaves."""
        wrap = self._wrap_args(static, positions)
        fgraph, out_tree, captures = trace(self.fun, avals, treedef, wrap, scope)
        fgraph = passes.smooth_idioms(fgraph)  # before autodiff: stable softplus idioms
        fgraph = rolling.roll_loops(fgraph)  # repeated iterations of Python loops: one scan
        if self.kind == "jit":
            return fgraph, out_tree, captures
        wrt, wrt_tree = self._wrt(treedef, positions, fgraph)
        value_tree, aux_tree, n_value = self._split_output(out_tree, fgraph)
        if self.kind in ("grad", "value_and_grad"):
            # this differentiation owns the function's taps: their hooks fire with its cotangents
            graph = autodiff.adjoint(fgraph, wrt, [0], seed_ones=True, taps=True)
            n_out, n_wrt = len(fgraph.outputs), len(wrt)
            value, aux = graph.outputs[:1], graph.outputs[1:n_out]
            grads = graph.outputs[n_out : n_out + n_wrt]
            if self.kind == "grad":
                outputs = list(grads) + list(aux)
                tree = tuple_of(wrt_tree, aux_tree) if self.has_aux else wrt_tree
            else:
                outputs = list(value) + list(aux) + list(grads)
                head = tuple_of(value_tree, aux_tree) if self.has_aux else value_tree
                tree = tuple_of(head, wrt_tree)
            if self.taps:
                names = [node.params["name"] for node in autodiff.tap_nodes(fgraph)]
                outputs += list(graph.outputs[n_out + n_wrt :])
                tree = tuple_of(tree, TreeDef("dict", tuple(LEAF for _ in names), tuple(names)))
            return Graph(graph.inputs, graph.nodes, tuple(outputs)), tree, captures
        # jacobian: one jacobian per (value leaf, wrt leaf); aux outputs are not differentiated
        # (jacfwd: by forward mode, one batched tangent per input element)
        derive = forward.jacfwd if self.kind == "jacfwd" else autodiff.jacobian
        graph = derive(fgraph, wrt, n_value)
        n_out = len(fgraph.outputs)
        jacs = list(graph.outputs[n_out:])
        outputs = jacs + list(graph.outputs[n_value:n_out])
        tree = replace_leaves(value_tree, lambda: wrt_tree)
        if self.has_aux:
            tree = tuple_of(tree, aux_tree)
        return Graph(graph.inputs, graph.nodes, tuple(outputs)), tree, captures

    def _wrt(self, treedef: TreeDef, positions: list[int], fgraph: Graph):
        """Flat input positions to differentiate, and the tree the gradients come back in."""
        arg_trees = treedef.children
        offsets = np.cumsum([0] + [t.num_leaves for t in arg_trees])
        argnums = _int_tuple(self.argnums, "argnums")
        wrt, trees = [], []
        names = _leaf_names(treedef, positions, self._self_shift)
        for i in argnums:
            k = positions.index(i)
            trees.append(arg_trees[k])
            for j in range(offsets[k], offsets[k + 1]):
                var = fgraph.inputs[j]
                if not P.is_float(var.dtype):
                    raise TypeError(
                        f"{_name_of(self)}: cannot differentiate with respect to {names[j]}, "
                        f"which has dtype {var.dtype}; only float arrays have derivatives. "
                        "Convert it with .astype(np.float64), or leave it out of argnums."
                    )
                wrt.append(j)
        tree = trees[0] if isinstance(self.argnums, int) else tuple_of(*trees)
        return wrt, tree

    def _split_output(self, out_tree: TreeDef, fgraph: Graph):
        """(value tree, aux tree, number of value leaves), checking what the transform needs."""
        name = _name_of(self)
        if self.has_aux:
            if out_tree.kind not in ("tuple", "list") or len(out_tree.children) != 2:
                raise TypeError(
                    f"{name} has has_aux=True, so the function must return a pair "
                    f"(output, aux); it returned {out_tree}"
                )
            value_tree, aux_tree = out_tree.children
        else:
            value_tree, aux_tree = out_tree, TreeDef("tuple")
        n_value = value_tree.num_leaves
        if self.kind in ("grad", "value_and_grad"):
            out = fgraph.outputs[0] if n_value else None
            if value_tree.kind != "leaf" or out is None or out.shape != ():
                shape = out.shape if value_tree.kind == "leaf" and out is not None else str(value_tree)
                raise TypeError(
                    f"{name} needs a function that returns a scalar (0-d) value, but it returned "
                    f"{shape}. Reduce it (e.g. .sum() or np.mean), or use tg.jacobian."
                )
            if not P.is_float(out.dtype):
                raise TypeError(f"{name}: the output has dtype {out.dtype}; only float outputs have derivatives")
        return value_tree, aux_tree, n_value


class _Bound:
    """A transform reached through an instance (`obj.loss`): calls `method(obj, *args)`, with
    the cached-call path of a static `self` (see Transformed._remember_fast_call)."""

    __slots__ = ("method", "obj")
    _capture_children = ("method", "obj")  # what the capture walk follows (see capture.py)

    def __init__(self, method: Transformed, obj: Any):
        self.method, self.obj = method, obj

    def __call__(self, *args, **kwargs):
        method, obj = self.method, self.obj
        if not kwargs and method._static_self:
            fast = method._fast_calls.get((id(obj), _cheap_signature(args)))
            if fast is not None:
                out = fast(method, args, (obj,))
                if out is not _MISS:
                    return out
        return method(obj, *args, **kwargs)

    @property
    def trace_count(self) -> int:
        return self.method.trace_count

    def __repr__(self) -> str:
        return f"<tracegrad {_name_of(self.method)} bound to {type(self.obj).__name__}>"


def _leaf_names(treedef: TreeDef, positions: list[int], shift: int = 0) -> list[str]:
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


class _Instance:
    """A static `self` in a cache key: by identity, without keeping the object alive (its
    attributes are guarded, so an object that reuses the id finds a program that is current)."""

    __slots__ = ("id",)

    def __init__(self, obj: Any):
        self.id = id(obj)

    def __eq__(self, other: object) -> bool:
        return type(other) is _Instance and other.id == self.id

    def __hash__(self) -> int:
        return hash(("instance", self.id))

    def __repr__(self) -> str:
        return f"<object at {self.id:#x}>"


def _static_key(static: tuple, static_self: bool = False) -> tuple:
    """Static arguments with their types: `2` and `2.0` are equal and hash alike, but a program
    traced with one computes in another dtype than with the other. A method's static `self`
    (static_self) is keyed by its type and identity."""
    if static_self:
        return ((type(static[0]), _Instance(static[0])), *(_typed(s) for s in static[1:]))
    return tuple(_typed(s) for s in static)


def _typed(value: Any) -> Any:
    if type(value) in (tuple, list):
        return (type(value), tuple(_typed(v) for v in value))
    return (type(value), value)


def _as_array(leaf: Any, name: str, fname: str) -> np.ndarray:
    """A call's argument leaf as an array (Python numbers become float64 0-d)."""
    if isinstance(leaf, np.ndarray):
        refuse_array_subclass(leaf, f"{fname}: {name}")
        arr = np.asarray(leaf)
    elif isinstance(leaf, bool):
        arr = np.asarray(leaf)
    elif isinstance(leaf, (int, float)) and not isinstance(leaf, np.generic):
        arr = np.asarray(float(leaf))
    elif isinstance(leaf, np.generic):
        arr = np.asarray(leaf)
    elif is_device_array(leaf):
        _, dtype = aval(leaf)
        if not (np.issubdtype(dtype, np.number) or dtype == np.bool_):
            raise TypeError(f"{fname}: {name} has dtype {dtype}; tracegrad supports real numbers and bools")
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
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_) or np.iscomplexobj(arr):
        raise TypeError(f"{fname}: {name} has dtype {arr.dtype}; tracegrad supports real numbers and bools")
    return arr


def _int_tuple(value, name: str) -> tuple[int, ...]:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value),)
    if isinstance(value, (tuple, list)) and all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value
    ):
        return tuple(int(v) for v in value)
    raise TypeError(f"{name} must be an int or a tuple of ints, got {value!r}")


def _check_argnums(argnums, kind: str) -> None:
    nums = _int_tuple(argnums, "argnums")
    if kind in ("grad", "value_and_grad", "jacobian", "jacfwd") and not nums:
        raise ValueError("argnums must name at least one argument")
    if any(n < 0 for n in nums):
        raise ValueError(f"argnums must be non-negative, got {argnums!r}")
    if len(set(nums)) != len(nums):
        raise ValueError(f"argnums repeats an argument: {argnums!r}")


def _transform(kind: str):
    def make(fun=None, argnums=0, has_aux=False, static_argnums=(), backend=None, taps=False):
        if fun is None:  # used as @tg.grad(argnums=1)
            return lambda f: Transformed(f, kind, argnums, has_aux, static_argnums, backend, taps)
        return Transformed(fun, kind, argnums, has_aux, static_argnums, backend, taps)

    return make


def grad(fun=None, argnums=0, has_aux=False, static_argnums=(), backend=None, taps=False):
    """The gradient of a scalar function with respect to argument(s) `argnums`.

    With `taps=True` it returns `(gradients, {name: cotangent})` for the values marked with
    `tg.tap` inside the function.

    >>> import tracegrad as tg
    >>> float(tg.grad(lambda w, x: (w * x - 5.0) ** 2)(2.0, 3.0))
    6.0
    """
    return _transform("grad")(fun, argnums, has_aux, static_argnums, backend, taps)


def value_and_grad(fun=None, argnums=0, has_aux=False, static_argnums=(), backend=None, taps=False):
    """`(f(*args), grad(f)(*args))`, computed together in one program (`taps` as for grad).

    >>> import tracegrad as tg
    >>> value, g = tg.value_and_grad(lambda x: x ** 2 + 1.0)(3.0)
    >>> float(value), float(g)
    (10.0, 6.0)
    """
    return _transform("value_and_grad")(fun, argnums, has_aux, static_argnums, backend, taps)


def jacobian(fun=None, argnums=0, has_aux=False, static_argnums=(), backend=None):
    """d f / d x with shape `f(x).shape + x.shape`, all rows at once (one batched adjoint).

    >>> import numpy as np, tracegrad as tg
    >>> tg.jacobian(lambda x: x ** 2)(np.array([1.0, 2.0]))
    array([[2., 0.],
           [0., 4.]])
    """
    return _transform("jacobian")(fun, argnums, has_aux, static_argnums, backend)


def hessian(fun=None, argnums=0, static_argnums=(), backend=None):
    """Second derivatives: `jacobian(grad(f))`, shape `x.shape + x.shape`.

    >>> import numpy as np, tracegrad as tg
    >>> tg.hessian(lambda x: x[0] ** 2 * x[1])(np.array([1.0, 2.0]))
    array([[4., 2.],
           [2., 0.]])
    """
    if fun is None:
        return lambda f: hessian(f, argnums, static_argnums, backend)
    inner = Transformed(fun, "grad", argnums, False, static_argnums, backend)
    return Transformed(inner, "jacobian", argnums, False, static_argnums, backend)


def jit(fun=None, static_argnums=(), backend=None):
    """Compile `fun` (forward only) and cache the program per argument signature.

    >>> import numpy as np, tracegrad as tg
    >>> tg.jit(lambda x: 2.0 * x + 1.0)(np.arange(3.0))
    array([1., 3., 5.])
    """
    if fun is None:
        return lambda f: jit(f, static_argnums, backend)
    return Transformed(fun, "jit", (), False, static_argnums, backend)


def stop_gradient(x):
    """The value of `x`, with zero derivative (PyTorch's `.detach()`).

    >>> import tracegrad as tg
    >>> float(tg.grad(lambda x: x * tg.stop_gradient(x))(3.0))  # d/dx (x * c) = c
    3.0
    """

    def stop(leaf):
        if isinstance(leaf, Tracer):
            from .trace import _call

            return _call(lambda v: P.emit(P.stop_gradient_p, v), leaf)
        return leaf

    leaves, treedef = flatten(x)
    return unflatten(treedef, [stop(leaf) for leaf in leaves])


def tap(value, name: str, hook: Callable | None = None):
    """Mark an intermediate value inside a traced function; returns it unchanged.

    `tg.grad(f, taps=True)` then also returns d output / d value under `name`; `hook(name,
    cotangent)` is called after each gradient computation (hooks observe, they never change a
    gradient). The differentiation that owns a tap is the innermost one around the function that
    contains it; names must be unique within one traced function (in a loop, use f"h{i}").

    >>> import numpy as np, tracegrad as tg
    >>> def loss(w, x, b):
    ...     y = tg.tap(w * x + b, "y")
    ...     return (y - 5.0) ** 2
    >>> grads, taps = tg.grad(loss, taps=True)(2.0, 3.0, 1.0)
    >>> float(taps["y"])
    4.0
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"tap names must be non-empty strings, got {name!r}")
    if hook is not None and not callable(hook):
        raise TypeError(f"the hook of tap {name!r} must be callable, got {type(hook).__name__}")
    if not isinstance(value, Tracer):
        return value  # not traced: nothing to differentiate, nothing to observe
    if not P.is_float(value.dtype):
        raise TypeError(f"tap {name!r}: only float values have gradients, got dtype {value.dtype}")
    if any(n.prim is P.tap_p and n.params["name"] == name for n in value.builder.nodes):
        raise ValueError(
            f"tap name {name!r} is used twice in one traced function; names must be unique "
            "(a tap inside a loop needs a name per iteration, e.g. f'h{i}')"
        )
    from .trace import _call

    return _call(lambda v: P.emit(P.tap_p, v, name=name, hook=hook), value)


def make_ir(fun: Callable, static_argnums=(), optimize: bool = True):
    """A function returning the IR graph `fun` traces to (after any transforms), printable.

    >>> import numpy as np, tracegrad as tg
    >>> print(tg.make_ir(lambda x: np.sin(x) * 2.0)(np.ones(3)))  # doctest: +ELLIPSIS
    graph(%0:f64[3]) {
      %1:f64[3] = sin %0 ...
      %2:f64[3] = const[shape=(3,), value=2.] ...
      %3:f64[3] = mul %1 %2 ...
      return %3
    }
    """
    transformed = fun if isinstance(fun, Transformed) else Transformed(fun, "jit", (), False, static_argnums)

    def make(*args, **kwargs) -> Graph:
        transformed._check_call(args)
        static, positions, leaves, treedef = transformed._split(args, kwargs)
        names = _leaf_names(treedef, positions, transformed._self_shift)
        arrays = [_as_array(leaf, n, _name_of(transformed)) for leaf, n in zip(leaves, names, strict=True)]
        graph, _, _ = transformed.build([aval(a) for a in arrays], treedef, static, positions)
        return passes.optimize(graph, lower=False) if optimize else graph

    return make


def make_kernels(fun: Callable, static_argnums=(), backend: str | None = None):
    """A function returning the source of the fused kernels `fun` compiles to, readable.

    Works for any transform, like `make_ir`: `tg.make_kernels(tg.grad(f))(x)`. The text shows
    the fusion plan, each kernel with a comment per IR node (its values and the user's line),
    and the driver that runs them. `backend` is "cpu" or "cuda" (default: the default backend,
    or "cpu" when that is the interpreter).
    """
    import importlib

    make_graph = make_ir(fun, static_argnums, optimize=False)
    name = backend or backends.default_backend_name()
    module = importlib.import_module(
        "tracegrad.codegen_cuda" if name == "cuda" else "tracegrad.codegen_cpu"
    )

    def make(*args, **kwargs) -> str:
        graph, _ = passes.extract_hooks(passes.optimize(make_graph(*args, **kwargs)))
        return module.program_source(graph)

    return make


def cache_info():
    """What the compiled-kernel disk cache holds: its directory, entries and bytes on disk, the
    kernels loaded in this process and the programs held in memory."""
    from .runtime import cache

    return cache.info(programs=len(_programs))


def clear_cache() -> None:
    """Empty the compiled-kernel cache, on disk and in memory (programs are compiled again)."""
    from .runtime import cache

    clear_programs()
    cache.clear()
    program_cache.clear()
