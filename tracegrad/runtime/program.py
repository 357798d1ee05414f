"""Compiled programs (stage: runtime): a `CompiledCall` runs a compiled graph and turns its flat
outputs back into the user's result: fresh arrays that never alias the inputs, hooks called with
the cotangents they observe, NaNs traced to their origin when `TRACEGRAD_DEBUG_NANS` is set. Also
the cached-call fast path, and host and device arrays. The store that keeps programs between
calls, and its key, are in program_store.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import backends
from .. import ir
from ..base import config
from ..tracing.guards import BranchGuard, Captured, answer, guard_subgraph
from ..ir import Graph
from ..base.tree import TreeDef, typed_key, unflatten

log = config.log


def configure_logging() -> None:
    if config.log_topics() and not log.handlers:
        import logging

        class Prefixed(logging.Formatter):
            """'tracegrad: ' before each message (warnings carry it already, for when no handler
            is set and Python's last-resort handler prints them as they are)."""

            def format(self, record: logging.LogRecord) -> str:
                text = super().format(record)
                return text if text.startswith("tracegrad:") else f"tracegrad: {text}"

        handler = logging.StreamHandler()
        handler.setFormatter(Prefixed())
        log.addHandler(handler)
        log.setLevel(logging.INFO)


def topic_logged(topic: str) -> bool:
    return config.log_enabled(topic)


class CompiledCall:
    """One transform of one function for one argument signature, ready to call: the backend's
    compiled graph (`run`: a `codegen_cpu.CpuProgram`, a `codegen_cuda.CudaProgram`, the
    interpreter or a tiered run) and what turns its flat outputs into the user's result.
    `hooks` are (name, hook) for the last outputs of `run`: cotangents that hooks observe
    (tg.tap); `captured` what the traced function read from outside its arguments (see
    tracing/scope.py)."""

    def __init__(
        self,
        graph: Graph,
        out_tree: TreeDef,
        run: Callable[[Sequence[np.ndarray]], list[np.ndarray]],
        backend: str,
        hooks: list[tuple[str, Callable]],
        captured: Captured | None = None,
        guards: tuple[BranchGuard, ...] = (),
        reference: Graph | None = None,
    ):
        self.graph = graph
        self.out_tree = out_tree
        self.run = run
        self.backend = backend
        self.hooks = hooks
        # the answers the trace gave to Python control flow on traced values: the outputs of
        # `run` before the hooks' are their values on each call (tracing/branches.py)
        self.guards = guards
        self.outcomes = tuple(g.outcome for g in guards)
        self.reference = reference  # the guards as the trace computed them (branches.Collected)
        # set by the program store for a program with guards: the other variants of its key,
        # (answers so far, ids tried) -> a program or None
        self.sibling: Callable = lambda prefix, tried: None
        self.captured = Captured([], []) if captured is None else captured
        self.fresh = fresh_flags(self.run, len(self.graph.outputs))
        attach = getattr(self.run, "attach", None)  # a tiered run replaces itself when compiled
        if attach is not None:
            attach(self)
        consts = sum(
            n.params["value"].nbytes
            for n in self.graph.nodes
            if n.prim.name == "const" and isinstance(n.params.get("value"), np.ndarray)
        )
        self.nbytes = consts + self.captured.nbytes

    def __call__(self, arrays: list[np.ndarray], check: bool = True):
        """The result for `arrays`; `GuardFailed` when a guard of the program does not come out
        as it did when traced (unless `check` is False: the call that traced it)."""
        if self.guards and check and self.hooks:  # hooks must not see a result given up
            self._check_guards_first(arrays)
        try:
            outs = fresh_outputs(self.run(arrays), self.fresh, arrays)
        except Exception:
            if self.guards and check:  # an error of the branch not taken is not the call's
                self._check_guards_first(arrays)
            raise
        if self.guards:
            outs = self._without_guards(outs, check)
        if _debug_nans() and any(
            isinstance(o, np.ndarray) and o.dtype.kind == "f" and np.isnan(o).any() for o in outs
        ):
            self._raise_nan(arrays)
        if self.hooks:
            outs, observed = outs[: -len(self.hooks)], outs[-len(self.hooks) :]
            for (name, hook), value in zip(self.hooks, observed, strict=True):
                if hook(name, value) is not None:
                    raise TypeError(
                        f"the hook on tap {name!r} returned a value; hooks only observe "
                        "gradients. To change a gradient, use tg.custom_vjp."
                    )
        return unflatten(self.out_tree, outs)

    def _without_guards(self, outs: list, check: bool) -> list:
        end = len(outs) - len(self.hooks)
        start = end - len(self.guards)
        if check:
            self._compare(outs[start:end])
        return outs[:start] + outs[end:]

    def _compare(self, values: Sequence) -> None:
        answers = [_answer(g.kind, v) for g, v in zip(self.guards, values, strict=True)]
        for i, (outcome, got) in enumerate(zip(self.outcomes, answers, strict=True)):
            if got != outcome:
                raise GuardFailed(self, answers, i)

    def trace_agrees(self, arrays: list[np.ndarray]) -> bool:
        """Whether the trace, computing the guards as it did (its own nodes, on the NumPy
        interpreter), answers as this program was traced: a compiled guard that came out
        otherwise then differed by a rounding, and the program's result is the trace's."""
        if self.reference is None:
            return False
        from .. import interpreter

        given = dict(zip(self.graph.inputs, arrays, strict=True))  # the trace's inputs, by name
        if any(v not in given for v in self.reference.inputs):
            return False
        values = interpreter.evaluate(self.reference, [given[v] for v in self.reference.inputs])
        answers = [_answer(g.kind, v) for g, v in zip(self.guards, values, strict=True)]
        return tuple(answers) == self.outcomes

    def _check_guards_first(self, arrays: list[np.ndarray]) -> None:
        """The guards computed alone, by the NumPy interpreter, before (or instead of) the
        program: for a program with hooks, and after an error."""
        from .. import interpreter

        if "guards" not in self.graph._cache:
            end = len(self.graph.outputs) - len(self.hooks)
            outputs = self.graph.outputs[end - len(self.guards) : end]
            self.graph._cache["guards"] = guard_subgraph(
                Graph(self.graph.inputs, self.graph.nodes, outputs)
            )
        self._compare(interpreter.evaluate(self.graph._cache["guards"], arrays))

    def _raise_nan(self, arrays: list[np.ndarray]):
        raise FloatingPointError(_nan_report(self.graph, arrays))


class GuardFailed(Exception):
    """A guard of `program` did not hold: `answers` are its guards' values on this call, the
    first `index` as traced, the one at `index` not (those after it are of the branch not
    taken). Calls/transformed.py then finds or traces the program for this call's answers."""

    def __init__(self, program: CompiledCall, answers: list, index: int):
        super().__init__(program.guards[index].describe(answers[index]))
        self.program, self.answers, self.index = program, answers, index

    @property
    def prefix(self) -> tuple:
        """The answers any program for this call must have traced first."""
        return tuple(self.answers[: self.index + 1])


def _answer(kind: str, value: Any) -> bool | int | None:
    """A guard's value as the trace's answer compares with it; None for what int() refuses
    (NaN, infinity: the trace would have raised)."""
    value = value if isinstance(value, np.ndarray) else value.copy_to_host()  # a device array
    try:
        return answer(kind, value)
    except (ValueError, OverflowError):
        return None


def _debug_nans() -> bool:
    return config.debug_nans()


def _nan_report(graph: Graph, arrays: list[np.ndarray]) -> str:
    from .. import interpreter

    node = interpreter.nan_origin(graph, arrays)
    if node is None:
        return "a NaN appeared in the results (its origin could not be found in the graph)"
    where = f" at {node.source}" if node.source else ""
    return (
        f"a NaN was first produced by `{node.prim.name}`{where} from inputs without NaN "
        "(TRACEGRAD_DEBUG_NANS is set)"
    )


# ----------------------------------------------------------------------------------------------
# Host and device arrays


def is_device_array(x: Any) -> bool:
    """A GPU array (Numba device array, CuPy array, PyTorch CUDA tensor...), or a device array of
    Numba's CUDA simulator (which has no `__cuda_array_interface__`)."""
    return not isinstance(x, np.ndarray) and (
        hasattr(x, "__cuda_array_interface__") or getattr(x, "__cuda_ndarray__", False) is True
    )


def aval(x: Any) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of a host or device array."""
    if isinstance(x, np.ndarray):
        return x.shape, x.dtype
    if not hasattr(x, "__cuda_array_interface__"):  # a simulated device array
        return tuple(x.shape), np.dtype(x.dtype)
    interface = x.__cuda_array_interface__
    return tuple(interface["shape"]), np.dtype(interface["typestr"])


def fresh_flags(run: Any, n_outputs: int) -> tuple[bool, ...]:
    """Per output: does the backend allocate it afresh on every call, for this output alone?"""
    flags = getattr(run, "fresh_outputs", None)
    return tuple(flags) if flags is not None else (False,) * n_outputs


def fresh_outputs(outs: list, fresh: tuple[bool, ...], inputs: Sequence) -> list:
    """Every result is an array of its own: it shares memory with no other result, no input, no
    constant of the program and no earlier call's result. Outputs that the backend does not vouch
    for are copied (device arrays too, when one is returned twice)."""
    for i, out in enumerate(outs):
        if fresh[i]:
            continue
        if isinstance(out, np.ndarray):
            outs[i] = np.array(out)
        elif any(out is o for o in outs[:i]) or any(out is a for a in inputs):
            outs[i] = _copy_device(out)
    return outs


def _copy_device(out: Any) -> Any:
    copy = getattr(out, "copy", None)
    if copy is not None:
        return copy()
    from numba import cuda  # a Numba device array: copy on the device

    new = cuda.device_array_like(out)
    new.copy_to_device(out)
    return new


# ----------------------------------------------------------------------------------------------
# The cached-call fast path

MISS = object()
store_generation = [0]  # bumped by clear_programs: fast paths made before then are stale


def cheap_signature(args: tuple) -> tuple | None:
    """(shape, dtype) per argument when every argument is a float, a plain array, a device
    array (with its type), or a tuple, list or dict of floats and plain arrays (with its type,
    length and keys: a network's parameters), else None."""
    key = []
    for a in args:
        t = type(a)
        leaf = _cheap_leaf(a)
        if leaf is not _NOT_CHEAP:
            key.append(leaf)
        elif t is tuple or t is list:
            inner = tuple(map(_cheap_leaf, a))
            if _NOT_CHEAP in inner:
                return None
            key.append((t, inner))
        elif t is dict:
            # keys with their types, as tree definitions compare them: {1: x}, {1.0: x},
            # {True: x} and {(1, "w"): x}, {(1.0, "w"): x} are different trees
            inner = tuple((typed_key(k), _cheap_leaf(v)) for k, v in a.items())
            if any(leaf is _NOT_CHEAP for _, leaf in inner):
                return None
            key.append((t, inner))
        elif is_device_array(a):  # device arrays pass through untouched
            if getattr(a, "__cuda_ndarray__", False) is True:  # numba's: shape and dtype at hand
                key.append((t, a.shape, a.dtype))
            else:
                key.append((t, *aval(a)))
        else:
            return None
    return tuple(key)


_NOT_CHEAP = object()


def _cheap_leaf(a: Any) -> Any:
    """A float or a plain array: its part of the signature (another byte order is converted
    on the full path, so it is not cheap)."""
    t = type(a)
    if t is float:
        return t
    if t is np.ndarray and a.dtype.isnative:
        return (a.shape, a.dtype)
    return _NOT_CHEAP


def _cheap_leaves(args: tuple) -> list:
    """The leaves of arguments `cheap_signature` accepted, in the order `tree.flatten` gives
    (a dict's values in its keys' order), floats as 0-d arrays."""
    leaves: list = []
    for a in args:
        t = type(a)
        if t is tuple or t is list:
            leaves += a
        elif t is dict:
            leaves += a.values()
        else:
            leaves.append(a)
    return [np.asarray(x) if type(x) is float else x for x in leaves]


def _checked_call(current: list, fun: Any, arrays: list, static: tuple) -> Any:
    """The cached-call path of a program with hooks or guards: `current[0]` (or, when a guard
    fails, the variant for this call's answers, then tried first); MISS for the full path."""
    program = current[0]
    hidden = [] if program.captured.empty else program.captured.read(fun, static)
    if hidden is None:
        return MISS
    try:
        return program(arrays + hidden)
    except GuardFailed as failed:
        try:
            out, current[0] = run_other_variant(
                failed, arrays, lambda p: p.captured.read(fun, static)
            )
        except GuardFailed:
            return MISS  # no program has this call's answers: the full path traces one
        return out


def run_other_variant(failed: GuardFailed, arrays: list, read: Callable) -> tuple[Any, Any]:
    """After `failed`, the programs of the same key traced for this call's answers so far, in
    turn (each one that runs matches more of them): (result, the program that gave it).
    `read(program)` gives its hidden inputs (None: not current).
    Raises the last GuardFailed when no program has the call's answers."""
    tried = {id(failed.program)}
    while True:
        candidate = failed.program.sibling(failed.prefix, tried)
        if candidate is None:
            raise failed
        tried.add(id(candidate))
        hidden = read(candidate)
        if hidden is None:
            continue
        try:
            out = candidate(arrays + hidden)
        except GuardFailed as again:
            failed = again
            continue
        return out, candidate


def fast_call(program: CompiledCall, backend: str | None, generation: int) -> Callable:
    """What CompiledCall.__call__ does, checked to still be the one `_execute` would pick (same
    backend, not cleared, not inside a trace, captured values as they were); a program with
    hooks runs them on every call. `call(fun, args)` takes the transformed function, from which
    the guards read (passed in rather than kept, so that a transform and its fast paths make no
    cycle), and the static arguments the guards read from (a method's static `self`)."""
    run, tree = program.run, program.out_tree
    chosen = config.backend()
    backend_object = backends.get_backend(backend)
    current_variant = getattr(backend_object, "variant", None)
    compiled_for = None if current_variant is None else current_variant()
    single = tree.kind == "leaf"
    fresh = program.fresh
    copied = [i for i, f in enumerate(fresh) if not f]
    read = None if program.captured.empty else program.captured.read
    checked = bool(program.hooks or program.guards)
    current = [program]  # with guards: the variant the last call ran, tried first

    def call(fun: Any, args: tuple, static: tuple = ()):
        if (
            store_generation[0] != generation
            or ir.active_builder() is not None
            or (backend is None and config.backend() != chosen)
            or _debug_nans()
            or (current_variant is not None and current_variant() != compiled_for)
        ):
            return MISS
        arrays = _cheap_leaves(args)
        if checked:  # hooks (tg.tap, tg.debug_print) and guards: CompiledCall.__call__'s
            return _checked_call(current, fun, arrays, static)
        if read is not None:
            hidden = read(fun, static)
            if hidden is None:
                return MISS
            arrays += hidden
        outs = run(arrays)
        if copied:
            outs = fresh_outputs(outs, fresh, arrays)
        return outs[0] if single else unflatten(tree, outs)

    return call
