"""Accumulators: a list or dict that a function's code only writes into, never reads.

The documented way to collect what a tap sees is `seen = []` with `tg.tap(v, name,
hook=lambda name, ct: seen.append(ct))`: the hook appends on every call. If the scope walk guarded such a list by its
length and items, as it guards any list the function can reach, every call would change them and
the next call would trace again. But the code never reads the list: it only takes its `append`
(to call it or to hand it to a hook), so what the list holds cannot change the trace. Such a
container is guarded by identity only (the hook closes over that very object).

"Only writes" is decided from the bytecode: every load of the name, in the function's code and
in the code nested in it (lambdas, inner functions reached through a closure cell), is followed
at once by the attribute load of a method that adds to the container. Anything else (an index, a
`len`, an iteration, passing the container itself, rebinding the name) is a read, and the
container is walked and guarded as usual.
"""

from __future__ import annotations

import dis
import functools
import types

# methods that add to a list or a dict and return nothing of what it holds (not setdefault:
# it returns the value already there)
WRITE_METHODS = frozenset({"append", "extend", "insert", "update", "__setitem__"})
_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_DEREF", "LOAD_NAME", "LOAD_CLASSDEREF"})
_ATTRS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_SKIP = frozenset({"EXTENDED_ARG", "CACHE", "NOP"})


def is_accumulator(value: object, code: types.CodeType, name: str) -> bool:
    """Whether `value`, a non-empty list or dict the code reaches by `name` (a global or a
    closure variable), is only written into by that code."""
    return type(value) in (list, dict) and bool(value) and write_only(code, name)


@functools.lru_cache(maxsize=1024)
def write_only(code: types.CodeType, name: str) -> bool:
    """Whether every use of `name` in `code` (and the code nested in it) is the load of one of
    its WRITE_METHODS; False when the code does not use the name at all."""
    uses = _uses(code, name)
    return uses is not None and uses > 0


def _uses(code: types.CodeType, name: str) -> int | None:
    """How many writes through `name` the code makes; None if it uses the name otherwise."""
    count = 0
    instructions = [i for i in dis.get_instructions(code) if i.opname not in _SKIP]
    for k, ins in enumerate(instructions):
        if ins.argval != name or not isinstance(ins.argval, str):
            continue
        if ins.opname == "LOAD_CLOSURE" or ins.opname == "MAKE_CELL":
            continue  # handing the cell to nested code: judged there
        if ins.opname not in _LOADS:
            return None  # a store, a delete, a local of that name...
        after = instructions[k + 1] if k + 1 < len(instructions) else None
        if after is None or after.opname not in _ATTRS or after.argval not in WRITE_METHODS:
            return None
        count += 1
    for const in code.co_consts:
        if isinstance(const, types.CodeType) and (
            name in const.co_freevars or name in const.co_names or name in const.co_cellvars
        ):
            nested = _uses(const, name)
            if nested is None:
                return None
            count += nested
    return count
