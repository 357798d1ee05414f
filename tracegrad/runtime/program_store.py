"""The program store and its key (stage: runtime): the compiled programs held in memory, one per
(transform of a function, backend, backend variant, argument signature): `find` and `keep` (the
store compiles nothing: the call's path does, calls/), how many times each function was traced,
and why again.
The store is global, so a transform written inline in a loop (`tg.hessian(f)(x)`) finds the
program of the previous iteration.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from ..base import config
from ..base.tree import TreeDef
from .program import CompiledCall, store_generation, topic_logged, log

MAX_PROGRAMS = 512
# The programs held in memory also keep their constants and the snapshots their guards compare
# with: past this many bytes, the least recently used programs are dropped.
MAX_PROGRAM_BYTES = config.program_memory_bytes()


class Signature:
    """What a compiled program is specialised on: the arguments' `treedef`, their (shape, dtype)
    `avals`, and the `static` arguments. Immutable; equal when all three are."""

    __slots__ = ("avals", "static", "treedef")

    def __init__(
        self, treedef: TreeDef, avals: tuple[tuple[tuple[int, ...], str], ...], static: tuple
    ):
        self.treedef = treedef
        self.avals = avals
        self.static = static

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Signature)
            and self.treedef == other.treedef
            and self.avals == other.avals
            and self.static == other.static
        )

    def __hash__(self) -> int:
        return hash((self.treedef, self.avals, self.static))

    def describe_change(self, old: Signature, names: list[str]) -> str:
        if old.static != self.static:
            before, after = (tuple(_plain(t) for t in sig.static) for sig in (old, self))
            return f"a static argument changed: {before} -> {after}"
        if old.treedef != self.treedef:
            return f"the argument structure changed: {old.treedef} -> {self.treedef}"
        changes = []
        for name, (s0, d0), (s1, d1) in zip(names, old.avals, self.avals, strict=True):
            if s0 != s1:
                changes.append(f"{name} changed shape {s0} -> {s1}")
            if d0 != d1:
                changes.append(f"{name} changed dtype {np.dtype(d0)} -> {np.dtype(d1)}")
        return "; ".join(changes) or "the backend changed"


def _plain(typed: tuple) -> Any:
    """One entry of a static key (_typed below: a (type, value) pair, nested for tuples and lists)
    as the value the user passed."""
    kind, value = typed
    return tuple(_plain(v) for v in value) if kind in (tuple, list) else value


class ProgramStore:
    """The compiled programs held in memory, least recently used first, bounded in count and in
    the bytes of the constants they hold."""

    def __init__(self, max_count: int = MAX_PROGRAMS, max_bytes: int = MAX_PROGRAM_BYTES):
        self.max_count, self.max_bytes = max_count, max_bytes
        self._programs: OrderedDict[tuple, CompiledCall] = OrderedDict()
        self.nbytes = 0
        # threads calling transformed functions share the store: a get between another thread's
        # pop and re-insert of the same key once raised KeyError in move_to_end
        self._lock = threading.Lock()

    def get(self, key: tuple) -> CompiledCall | None:
        with self._lock:
            program = self._programs.get(key)
            if program is not None:
                self._programs.move_to_end(key)
            return program

    def put(self, key: tuple, program: CompiledCall) -> None:
        with self._lock:
            self._put(key, program)

    def _put(self, key: tuple, program: CompiledCall) -> None:
        old = self._programs.pop(key, None)
        if old is not None:
            self.nbytes -= old.nbytes
        self._programs[key] = program
        self.nbytes += program.nbytes
        while len(self._programs) > 1 and (
            len(self._programs) > self.max_count or self.nbytes > self.max_bytes
        ):
            _, dropped = self._programs.popitem(last=False)
            self.nbytes -= dropped.nbytes

    def values(self):
        return list(self._programs.values())

    def __len__(self) -> int:
        return len(self._programs)

    def clear(self) -> None:
        with self._lock:
            self._programs.clear()
            self.nbytes = 0


class _BoundedDict(OrderedDict):
    """Per-function bookkeeping (trace counts, last signatures): keyed by the function's code,
    never by the function object (which would keep its closure alive), and bounded."""

    def __init__(self, limit: int = 4096):
        super().__init__()
        self.limit = limit

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        if len(self) > self.limit:
            self.popitem(last=False)


_programs = ProgramStore()
_trace_counts: _BoundedDict = _BoundedDict()
_last_signature: _BoundedDict = _BoundedDict()
# key -> its programs with guards, one per outcome (the store holds the one tried first)
_variants: _BoundedDict = _BoundedDict()


def variant(backend: Any) -> Any:
    """What else a backend's compiled code depends on (the cpu backend: its math mode)."""
    of = getattr(backend, "variant", None)
    return None if of is None else of()


def clear_programs() -> None:
    """Forget every compiled program held in memory (the next calls trace again)."""
    store_generation[0] += 1
    _programs.clear()
    _last_signature.clear()
    _variants.clear()


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


def static_key(static: tuple, static_self: bool = False) -> tuple:
    """Static arguments with their types: `2` and `2.0` are equal and hash alike, but a program
    traced with one computes in another dtype than with the other. A method's static `self`
    (static_self) is keyed by its type and identity."""
    if static_self:
        return ((type(static[0]), _Instance(static[0])), *(_typed(s) for s in static[1:]))
    return tuple(_typed(s) for s in static)


class _Float:
    """A static float in a key by its exact value: -0.0 is not 0.0 (a program traced with one
    returns the other's signs of zero), and nan matches nan."""

    __slots__ = ("float_value",)

    def __init__(self, value: Any):
        self.float_value = value

    def __eq__(self, other: object) -> bool:
        return type(other) is _Float and repr(other.float_value) == repr(self.float_value)

    def __hash__(self) -> int:
        return hash(repr(self.float_value))

    def __repr__(self) -> str:
        return repr(self.float_value)


def _typed(value: Any) -> Any:
    if type(value) in (tuple, list):
        return (type(value), tuple(_typed(v) for v in value))
    if isinstance(value, (float, np.floating)):
        return (type(value), _Float(value))
    return (type(value), value)


# ----------------------------------------------------------------------------------------------
# A call's program: its key, found or kept


def program_key(
    spec: tuple,
    backend: Any,
    treedef: TreeDef,
    avals: list,
    static: tuple,
    static_self: bool = False,
) -> tuple[Signature, tuple]:
    """The signature of a call (its argument structure, shapes and dtypes, static arguments) and
    the key of its program in the store."""
    sig = Signature(treedef, tuple((s, d.str) for s, d in avals), static_key(static, static_self))
    return sig, (spec, backend.name, variant(backend), sig)


def find(fun: Any, static: tuple, key: tuple):
    """(program, hidden inputs) for a call of `fun`: the program stored under `key` in memory, with
    the values its guards read for this call; hidden is None when there is none or a guard
    fails."""
    program = _programs.get(key)
    hidden = None if program is None else program.captured.read(fun, static)
    return program, hidden


def keep(key: tuple, program: CompiledCall, traced: bool = True) -> None:
    """Keep a compiled program under `key` in memory. A newly `traced` one is counted for its
    function (`trace_count`); one with guards is one variant of the key's (`variants`)."""
    _programs.put(key, program)
    if program.guards:
        known = _variants.get(key)
        if known is None:
            known = _variants[key] = []
        known[:] = [p for p in known if p.outcomes != program.outcomes] + [program]
        program.sibling = lambda prefix, tried: _variant_in(known, prefix, tried)
    if traced:
        counted = (key[0], key[1])
        _trace_counts[counted] = _trace_counts.get(counted, 0) + 1


def held() -> int:
    """How many compiled programs the store holds in memory."""
    return len(_programs)


def variants(key: tuple) -> int:
    """How many programs with guards the key has had traced (one per outcome of its branches)."""
    return len(_variants.get(key, ()))


def _variant_in(known: list, prefix: tuple, tried: set) -> CompiledCall | None:
    """The program among `known` (a key's variants, latest last) whose guards were traced with
    the answers `prefix` first (a call's answers so far: program.GuardFailed), not `tried`."""
    n = len(prefix)
    for program in reversed(known):
        if program.outcomes[:n] == prefix and id(program) not in tried:
            return program
    return None


def prefer(key: tuple, program: CompiledCall) -> None:
    """The variant the key's next call tries first."""
    _programs.put(key, program)


def trace_count(spec: tuple, backend_name: str) -> int:
    """How many times the function of `spec` was traced to a new program for this backend."""
    return _trace_counts.get((spec, backend_name), 0)


GUARD_RETRACE_WARNING = 8  # traces caused by changed captured values before a warning

_guard_retraces: _BoundedDict = _BoundedDict()


VARIANT_WARNING = 8  # programs of one signature, one per outcome of its branches: a warning


def note_branch(name: str, where: str, count: int) -> None:
    """Say (when the `retrace` topic is logged) that a guard sent a call to a new trace, the
    `count`th program of its signature; warn when that count reaches VARIANT_WARNING."""
    if topic_logged("retrace"):
        log.info("re-tracing %s because the Python branch at %s", name, where)
    if count == VARIANT_WARNING:
        log.warning(
            "tracegrad: %s now has %d programs for one argument signature, one per outcome of "
            "its Python control flow on traced values; the branch at %s keeps changing. "
            "np.where, tg.cond or tg.while_loop would make one program for every outcome.",
            name,
            count,
            where,
        )


def note_retrace(spec: tuple, name: str, sig: Signature, names: list[str], why: str | None) -> None:
    """Remember the signature of a new trace; say why it was traced again (when the `retrace`
    topic is logged), and warn when changed captured values keep causing traces."""
    old = _last_signature.get(spec)
    _last_signature[spec] = sig
    if why is not None:
        _guard_retraces[spec] = count = _guard_retraces.get(spec, 0) + 1
        if count == GUARD_RETRACE_WARNING:
            log.warning(
                "tracegrad: %s was traced %d times because a value it reads from outside "
                "its arguments keeps changing (last: %s). Pass that value as an argument.",
                name,
                count,
                why,
            )
    if topic_logged("retrace") and (old is not None or why is not None):
        reason = why if why is not None else sig.describe_change(old, names)
        log.info("re-tracing %s because %s", name, reason)
